//! Subscriptions: bind an endpoint to an event type within a scope and a
//! payload version, validated against the event catalogue.

use super::load_endpoint;
use crate::error::ApiError;
use crate::handlers::{distinct_refs, Ctx};
use crate::input::Input;
use crate::reply::Reply;
use crate::wire::ts;
use domain::webhook::{catalogue, ScopeType};
use domain::Ref;
use serde::{Deserialize, Serialize};
use store::webhooks::subscriptions;
use store::{NewSubscription, StoreError, SubscriptionRecord};
use utoipa::ToSchema;

#[derive(Debug, Serialize, ToSchema)]
#[schema(as = WebhookSubscriptionDto)]
pub struct SubscriptionDto {
    pub endpoint_ref: String,
    pub public_event_type: String,
    /// `environment`, `product`, `buyer` or `beneficiary_business`.
    pub scope_type: String,
    pub scope_ref: String,
    pub dto_version: u32,
    pub custom_field_refs: Vec<String>,
    pub created_at: String,
}

impl From<&SubscriptionRecord> for SubscriptionDto {
    fn from(r: &SubscriptionRecord) -> Self {
        SubscriptionDto {
            endpoint_ref: r.endpoint_ref.to_string(),
            public_event_type: r.public_event_type.clone(),
            scope_type: r.scope_type.as_str().to_owned(),
            scope_ref: r.scope_ref.clone(),
            dto_version: r.dto_version,
            custom_field_refs: r.custom_field_refs.clone(),
            created_at: ts(r.created_at),
        }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSubscription {
    pub public_event_type: String,
    pub scope_type: String,
    pub scope_ref: String,
    pub dto_version: u32,
    #[serde(default)]
    pub custom_field_refs: Vec<String>,
}

pub async fn list(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    input.query_params(&[])?;
    let endpoint = load_endpoint(ctx, &input).await?;
    let rows = ctx
        .store()
        .webhooks()
        .list_subscriptions(ctx.env(), &endpoint.endpoint_ref)
        .await?;
    Ok(Reply::all(rows.iter().map(SubscriptionDto::from).collect()))
}

pub async fn create(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let body: CreateSubscription = input.body()?;
    let event = catalogue::find(&body.public_event_type)
        .filter(|e| !e.diagnostic)
        .ok_or_else(|| {
            ApiError::validation("public_event_type", "not an event type of the catalogue")
        })?;
    if !event.dto_versions.contains(&body.dto_version) {
        return Err(ApiError::validation(
            "dto_version",
            format!("{} has dto versions {:?}", event.name, event.dto_versions),
        ));
    }
    let scope_type = ScopeType::parse(&body.scope_type).ok_or_else(|| {
        ApiError::validation(
            "scope_type",
            "must be environment, product, buyer or beneficiary_business",
        )
    })?;
    if !event.scope_types.contains(&scope_type) {
        return Err(ApiError::validation(
            "scope_type",
            format!("{} cannot be scoped by {}", event.name, scope_type.as_str()),
        ));
    }
    let scope_ref = Ref::parse(scope_type.ref_prefix(), &body.scope_ref)
        .map_err(|e| ApiError::validation("scope_ref", e.to_string()))?;
    if scope_type == ScopeType::Environment && &scope_ref != ctx.env() {
        return Err(ApiError::validation(
            "scope_ref",
            "must be the reference of the caller's environment",
        ));
    }
    let cf_refs = distinct_refs(
        "custom_field_refs",
        domain::Prefix::CustomField,
        &body.custom_field_refs,
    )?;
    let endpoint = load_endpoint(ctx, &input).await?;
    // A product or buyer scope names one of the environment (contract 10.1).
    match scope_type {
        ScopeType::Product => {
            crate::handlers::catalogue::product_by_ref(ctx, &scope_ref).await?;
        }
        ScopeType::Buyer => {
            crate::handlers::reads::load_by_ref::<store::billing::checkout::buyers::BuyerRecord>(
                ctx, &scope_ref,
            )
            .await?;
        }
        _ => {}
    }
    let new = NewSubscription {
        public_event_type: event.name,
        scope_type,
        scope_ref: scope_ref.as_str(),
        dto_version: body.dto_version,
        custom_field_refs: &cf_refs,
    };
    let env = ctx.env().clone();
    let row = subscriptions::create(ctx.tx().await?, &env, &endpoint.endpoint_ref, new)
        .await
        .map_err(|e| match e {
            StoreError::Duplicate => ApiError::semantic(
                "the endpoint already subscribes to this event type in this scope",
            ),
            e => e.into(),
        })?;
    // A subscription never changes: its tag digests its identity.
    let identity = format!(
        "{}/{}/{}/{}",
        row.endpoint_ref,
        row.public_event_type,
        row.scope_type.as_str(),
        row.scope_ref
    );
    Ok(Reply::one(
        SubscriptionDto::from(&row),
        Some(domain::etag::etag(&identity, 1)),
    ))
}
