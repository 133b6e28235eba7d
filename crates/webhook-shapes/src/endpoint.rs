//! An endpoint as `retrieveWebhookEndpoint` shows it, with its secret
//! versions (a secret only in the response that created it).

use crate::{opt_ts, ts};
use domain::etag::etag;
use domain::webhook::signing::SigningSecret;
use domain::Timestamp;
use serde::Serialize;
use store::{EndpointRecord, StoredSecretVersion};
use utoipa::ToSchema;

#[derive(Debug, Serialize, ToSchema)]
pub struct SecretVersionDto {
    pub version: u32,
    /// `active`, `pending`, `retiring`, `revoked` or `expired`.
    pub status: String,
    pub created_at: String,
    pub expires_at: Option<String>,
    pub secret_hint: String,
    /// Only in the response that created this version.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct EndpointDto {
    pub endpoint_ref: String,
    pub environment_ref: String,
    pub url: String,
    pub description: Option<String>,
    pub url_immutable: bool,
    /// `none` or `per_key` (contract 13.1).
    pub ordering: String,
    /// Attempts a second the endpoint accepts (1 to 10,000), or null for
    /// no limit (contract 13.2).
    #[schema(minimum = 1, maximum = 10000)]
    pub rate_limit: Option<u32>,
    /// Attempts open to the endpoint at once (1 to 1,000): its own, or the
    /// deployment's default (`delivery.endpoint_max_in_flight`) when it set
    /// none.
    #[schema(minimum = 1, maximum = 1000)]
    pub max_in_flight: u32,
    /// `active`, `paused` or `disabled`.
    pub status: String,
    pub secret_versions: Vec<SecretVersionDto>,
    pub created_at: String,
    pub updated_at: String,
    pub etag: String,
}

pub fn endpoint_etag(e: &EndpointRecord) -> String {
    etag(e.endpoint_ref.as_str(), e.version)
}

fn version_dto(
    v: &StoredSecretVersion,
    now: Timestamp,
    revealed: Option<(u32, &SigningSecret)>,
) -> SecretVersionDto {
    SecretVersionDto {
        version: v.meta.version,
        status: v.meta.effective_status(now).as_str().to_owned(),
        created_at: ts(v.meta.created_at),
        expires_at: opt_ts(v.meta.expires_at),
        secret_hint: v.hint.clone(),
        secret: revealed
            .filter(|(n, _)| *n == v.meta.version)
            .map(|(_, s)| s.to_wire()),
    }
}

/// The `max_in_flight` of an endpoint that sets none, unless the
/// deployment says otherwise (`delivery.endpoint_max_in_flight`).
pub const DEFAULT_MAX_IN_FLIGHT: u32 = 100;

/// The endpoint's wire form at `now`; `revealed` shows one version's
/// secret; `default_max_in_flight` is the deployment's
/// `delivery.endpoint_max_in_flight`, shown when the endpoint set none.
pub fn dto(
    e: &EndpointRecord,
    revealed: Option<(u32, &SigningSecret)>,
    now: Timestamp,
    default_max_in_flight: u32,
) -> EndpointDto {
    let limits = &e.protection.limits;
    EndpointDto {
        endpoint_ref: e.endpoint_ref.to_string(),
        environment_ref: e.environment_ref.to_string(),
        url: e.url.clone(),
        description: e.description.clone(),
        url_immutable: e.url_immutable,
        ordering: e.ordering.as_str().to_owned(),
        rate_limit: limits.rate_limit.map(|r| r.per_second()),
        max_in_flight: limits
            .max_in_flight
            .map_or(default_max_in_flight, |m| m.get()),
        status: e.status.as_str().to_owned(),
        secret_versions: e
            .secret_versions
            .iter()
            .map(|v| version_dto(v, now, revealed))
            .collect(),
        created_at: ts(e.created_at),
        updated_at: ts(e.updated_at),
        etag: endpoint_etag(e),
    }
}
