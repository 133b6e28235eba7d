//! Data profile grants: which data classes and custom fields an endpoint
//! may receive, and for what purpose. A new grant supersedes the active one;
//! revoking redacts stored bodies holding data no longer covered.

use super::endpoints::endpoint_etag;
use super::{check_reason, load_endpoint};
use crate::error::ApiError;
use crate::handlers::{distinct_refs, Ctx};
use crate::input::Input;
use crate::reply::Reply;
use crate::wire::{opt_ts, ts};
use domain::webhook::shaping::{holds_uncovered, GrantView, GrantedField};
use domain::webhook::{DataClass, Purpose};
use serde::{Deserialize, Serialize};
use store::webhooks::data_profiles;
use store::{DataProfileGrantRecord, NewDataProfileGrant, StoreError, StoredBody};
use utoipa::ToSchema;

#[derive(Debug, Serialize, ToSchema)]
pub struct DataProfileGrantDto {
    pub endpoint_ref: String,
    /// `fulfillment`, `accounting`, `support`, `analytics` or `fraud_prevention`.
    pub purpose: String,
    pub reason: String,
    /// Subset of `contact`, `billing_address`, `payment_instrument`, `tax_id`.
    pub data_classes: Vec<String>,
    pub custom_field_refs: Vec<String>,
    /// `active` or `revoked`.
    pub status: String,
    pub created_at: String,
    pub revoked_at: Option<String>,
}

impl From<&DataProfileGrantRecord> for DataProfileGrantDto {
    fn from(r: &DataProfileGrantRecord) -> Self {
        DataProfileGrantDto {
            endpoint_ref: r.endpoint_ref.to_string(),
            purpose: r.purpose.as_str().to_owned(),
            reason: r.reason.clone(),
            data_classes: r
                .data_classes
                .iter()
                .map(|c| c.as_str().to_owned())
                .collect(),
            custom_field_refs: r.custom_field_refs.clone(),
            status: r.status.as_str().to_owned(),
            created_at: ts(r.created_at),
            revoked_at: opt_ts(r.revoked_at),
        }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateDataProfileGrant {
    pub purpose: String,
    /// 1 to 500 characters.
    pub reason: String,
    /// May be empty; required so that a grant always says what it covers.
    pub data_classes: Vec<String>,
    pub custom_field_refs: Vec<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RevokeDataProfileGrant {
    pub reason: String,
}

/// A grant changes once (when revoked); its tag digests its identity and
/// status. Revoking checks the endpoint's tag, not this one.
fn grant_etag(r: &DataProfileGrantRecord) -> String {
    let identity = format!(
        "{}/{}/{}",
        r.endpoint_ref,
        r.purpose.as_str(),
        r.created_at.millis()
    );
    let version = if r.status == domain::webhook::DataProfileGrantStatus::Active {
        1
    } else {
        2
    };
    domain::etag::etag(&identity, version)
}

fn reply(r: &DataProfileGrantRecord) -> Reply {
    Reply::one(DataProfileGrantDto::from(r), Some(grant_etag(r)))
}

/// What a grant (or its absence) lets through.
pub(crate) async fn view(
    ctx: &Ctx,
    grant: Option<&DataProfileGrantRecord>,
) -> Result<Option<GrantView>, ApiError> {
    match grant {
        Some(g) => Ok(Some(
            coverage(ctx, g.data_classes.clone(), g.custom_field_refs.clone()).await?,
        )),
        None => Ok(None),
    }
}

/// A grant of `data_classes` and `custom_field_refs`, its references
/// resolved to the config and key of the fields they name (one read;
/// shaping compares a session's `custom_fields` keys with those).
async fn coverage(
    ctx: &Ctx,
    data_classes: Vec<DataClass>,
    custom_field_refs: Vec<String>,
) -> Result<GrantView, ApiError> {
    let fields = ctx
        .store()
        .billing()
        .custom_fields(ctx.env(), &custom_field_refs)
        .await?;
    Ok(GrantView {
        data_classes,
        custom_field_refs,
        custom_fields: fields.into_iter().map(GrantedField::from).collect(),
    })
}

/// Whether a stored body holds data that `grant` does not cover.
fn uncovered(grant: Option<&GrantView>) -> impl Fn(&StoredBody<'_>) -> bool + '_ {
    move |body| match serde_json::from_str::<serde_json::Value>(body.payload) {
        Ok(payload) => holds_uncovered(
            body.public_event_type,
            body.dto_version,
            &payload["data"],
            grant,
        ),
        // A body we cannot read back cannot be shown to be covered.
        Err(_) => true,
    }
}

pub async fn list(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    input.query_params(&[])?;
    let endpoint = load_endpoint(ctx, &input).await?;
    let rows = ctx
        .store()
        .webhooks()
        .list_data_profile_grants(ctx.env(), &endpoint.endpoint_ref)
        .await?;
    Ok(Reply::all(
        rows.iter().map(DataProfileGrantDto::from).collect(),
    ))
}

pub async fn create(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let body: CreateDataProfileGrant = input.body()?;
    let purpose = Purpose::parse(&body.purpose).ok_or_else(|| {
        ApiError::validation(
            "purpose",
            "must be fulfillment, accounting, support, analytics or fraud_prevention",
        )
    })?;
    check_reason(&body.reason)?;
    let mut data_classes = Vec::new();
    for (i, c) in body.data_classes.iter().enumerate() {
        let class = DataClass::parse(c).ok_or_else(|| {
            ApiError::validation(
                format!("data_classes.{i}"),
                "must be contact, billing_address, payment_instrument or tax_id",
            )
        })?;
        if data_classes.contains(&class) {
            return Err(ApiError::validation(
                format!("data_classes.{i}"),
                "listed twice",
            ));
        }
        data_classes.push(class);
    }
    let cf_refs = distinct_refs(
        "custom_field_refs",
        domain::Prefix::CustomField,
        &body.custom_field_refs,
    )?;
    let endpoint = load_endpoint(ctx, &input).await?;
    let new = NewDataProfileGrant {
        purpose,
        reason: body.reason,
        data_classes,
        custom_field_refs: cf_refs,
    };
    let covered = coverage(ctx, new.data_classes.clone(), new.custom_field_refs.clone()).await?;
    let row = data_profiles::create(ctx.tx().await?, &endpoint, new, uncovered(Some(&covered)))
        .await
        .map_err(|e| match e {
            StoreError::Duplicate => {
                ApiError::VersionConflict("another grant was created concurrently; retry")
            }
            e => e.into(),
        })?;
    Ok(reply(&row))
}

pub async fn revoke(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let body: RevokeDataProfileGrant = input.body()?;
    check_reason(&body.reason)?;
    let endpoint = load_endpoint(ctx, &input).await?;
    input.check_etag(&endpoint_etag(&endpoint))?;
    let row = data_profiles::revoke(ctx.tx().await?, &endpoint, &body.reason, uncovered(None))
        .await
        .map_err(|e| match e {
            StoreError::NotFound => {
                ApiError::semantic("the endpoint has no active data profile grant")
            }
            e => e.into(),
        })?;
    Ok(reply(&row))
}
