//! Subscriptions: bind an endpoint to an event type within a scope and a
//! payload version, validated against the event catalogue.

use super::load_endpoint;
use crate::error::{ApiError, Detail};
use crate::handlers::{distinct_refs, Ctx};
use crate::input::Input;
use crate::reply::Reply;
use crate::wire::ts;
use domain::webhook::filter::Filter;
use domain::webhook::shaping::{scope_holds, GrantView};
use domain::webhook::{catalogue, ScopeType};
use domain::Ref;
use serde::{Deserialize, Serialize};
use store::fanout::filter_body;
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
    /// The filter as given, or null.
    #[schema(value_type = Option<Object>)]
    pub filter: Option<serde_json::Value>,
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
            filter: r
                .filter
                .as_deref()
                .and_then(|f| serde_json::from_str(f).ok()),
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
    /// Optional (contract 13.3): a JSON object of at most 4 KiB over the
    /// delivered body; the subscription matches only events it holds for.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub filter: Option<serde_json::Value>,
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

/// A create body checked against the catalogue, the caller's environment
/// and the endpoint (also what a preview takes).
struct Checked {
    event: &'static catalogue::EventType,
    scope_type: ScopeType,
    scope_ref: Ref,
    dto_version: u32,
    cf_refs: Vec<String>,
    endpoint: store::EndpointRecord,
    /// The filter as given (JSON), parsed.
    filter: Option<(serde_json::Value, Filter)>,
}

async fn checked(
    ctx: &mut Ctx,
    input: &Input,
    body: CreateSubscription,
) -> Result<Checked, ApiError> {
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
    let filter = match body.filter {
        None | Some(serde_json::Value::Null) => None,
        Some(value) => {
            let parsed = Filter::parse(&value).map_err(|errors| {
                ApiError::Validation(
                    errors
                        .into_iter()
                        .map(|e| Detail::new(e.field, e.issue))
                        .collect(),
                )
            })?;
            Some((value, parsed))
        }
    };
    let endpoint = load_endpoint(ctx, input).await?;
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
    Ok(Checked {
        event,
        scope_type,
        scope_ref,
        dto_version: body.dto_version,
        cf_refs,
        endpoint,
        filter,
    })
}

pub async fn create(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let body: CreateSubscription = input.body()?;
    let Checked {
        event,
        scope_type,
        scope_ref,
        dto_version,
        cf_refs,
        endpoint,
        filter,
    } = checked(ctx, &input, body).await?;
    let filter_text = filter.as_ref().map(|(v, _)| v.to_string());
    let new = NewSubscription {
        public_event_type: event.name,
        scope_type,
        scope_ref: scope_ref.as_str(),
        dto_version,
        custom_field_refs: &cf_refs,
        filter: filter_text.as_deref(),
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

/// The most kept events a preview examines.
const PREVIEW_EVENTS: u32 = 1_000;
/// The most matched events a preview shows.
const PREVIEW_SAMPLES: usize = 10;

#[derive(Debug, Serialize, ToSchema)]
pub struct PreviewSample {
    pub event_ref: String,
    pub occurred_at: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SubscriptionPreviewDto {
    /// Kept events of the type examined (at most 1,000, newest first).
    pub examined: usize,
    /// Of those, the ones the subscription would match.
    pub matched: usize,
    /// Up to 10 matched events, newest first.
    pub samples: Vec<PreviewSample>,
}

/// `previewWebhookSubscription` (contract 13.3): what a subscription with
/// this body would match among the environment's newest kept events of
/// its type, judged as the fan-out judges it (scope, then the filter on
/// the body the endpoint would receive). Creates nothing.
pub async fn preview(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let body: CreateSubscription = input.body()?;
    let c = checked(ctx, &input, body).await?;
    let grant = ctx
        .store()
        .webhooks()
        .active_data_profile_grant(&c.endpoint.endpoint_ref)
        .await?
        .map(|g| GrantView {
            data_classes: g.data_classes,
            custom_field_refs: Vec::new(),
            custom_fields: Vec::new(),
        });
    let kept = ctx
        .store()
        .webhooks()
        .kept_events(ctx.env(), c.event.name, PREVIEW_EVENTS)
        .await?;
    let mut matched = Vec::new();
    for (event, version) in &kept {
        let in_scope = scope_holds(
            &event.scope,
            event.environment_ref.as_str(),
            c.scope_type,
            c.scope_ref.as_str(),
        );
        let holds = match &c.filter {
            None => true,
            Some((_, f)) => f.holds(&filter_body(event, *version, c.dto_version, grant.as_ref())),
        };
        if in_scope && holds {
            matched.push(event);
        }
    }
    Ok(Reply::one(
        SubscriptionPreviewDto {
            examined: kept.len(),
            matched: matched.len(),
            samples: matched
                .iter()
                .take(PREVIEW_SAMPLES)
                .map(|e| PreviewSample {
                    event_ref: e.event_ref.to_string(),
                    occurred_at: ts(e.occurred_at),
                })
                .collect(),
        },
        None,
    ))
}
