//! Endpoints: create (with destination checks), list, retrieve, update
//! (description, ordering and limits: contract 13.2), pause and resume.
//! Creating an endpoint creates secret version 1, whose secret appears in
//! that response only.

use super::load_endpoint;
use crate::error::ApiError;
use crate::handlers::lists::{Filter, ListQuery};
use crate::handlers::Ctx;
use crate::input::Input;
use crate::reply::Reply;
use crate::wire::EmptyBody;
use domain::principal::Mode;
use domain::webhook::limits::{EndpointLimits, MaxInFlight, RateLimit};
use domain::webhook::ordering::EndpointOrdering;
use domain::webhook::secret_version::SecretVersion;
use domain::webhook::signing::SigningSecret;
use domain::webhook::url::{forbidden_ip, EndpointUrl};
use domain::webhook::EndpointStatus;
use serde::{Deserialize, Deserializer};
use std::time::Duration;
use store::webhooks::endpoints;
use store::{EndpointRecord, EndpointSettings, NewSecret};
use utoipa::ToSchema;
pub use webhook_shapes::endpoint::{dto, endpoint_etag, EndpointDto, SecretVersionDto};

pub(crate) fn reply(
    ctx: &Ctx,
    e: &EndpointRecord,
    revealed: Option<(u32, &SigningSecret)>,
) -> Reply {
    let now = ctx.now();
    let max = default_max_in_flight(ctx);
    match revealed {
        Some(_) => Reply::revealing(
            dto(e, revealed, now, max),
            dto(e, None, now, max),
            Some(endpoint_etag(e)),
        ),
        None => Reply::one(dto(e, None, now, max), Some(endpoint_etag(e))),
    }
}

/// The deployment's `max_in_flight` of endpoints that set none.
fn default_max_in_flight(ctx: &Ctx) -> u32 {
    ctx.state.settings.webhooks.endpoint_max_in_flight
}

/// Encrypts a new secret for the store.
pub(crate) fn seal(ctx: &Ctx, secret: &SigningSecret) -> NewSecret {
    NewSecret {
        ciphertext: ctx
            .state
            .settings
            .webhooks
            .cipher
            .encrypt(secret.as_bytes()),
        hint: secret.hint(),
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateEndpoint {
    /// Absolute `https` url (`http` in sandbox, or in live with `delivery.allow_http`).
    pub url: String,
    pub description: Option<String>,
    /// `none` (the default) or `per_key`: each ordering key's deliveries one
    /// after another (contract 13.1).
    #[schema(pattern = "^(none|per_key)$")]
    pub ordering: Option<String>,
    /// Attempts a second, 1 to 10,000; absent or null: no limit
    /// (contract 13.2).
    #[schema(minimum = 1, maximum = 10000)]
    pub rate_limit: Option<i64>,
    /// Attempts open at once, 1 to 1,000; absent or null: the deployment's
    /// default (`delivery.endpoint_max_in_flight`).
    #[schema(minimum = 1, maximum = 1000)]
    pub max_in_flight: Option<i64>,
}

pub async fn create(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let body: CreateEndpoint = input.body()?;
    if let Some(d) = &body.description {
        crate::wire::check_text("description", d, 0, 500)?;
    }
    let ordering = match body.ordering.as_deref() {
        None => EndpointOrdering::None,
        Some(o) => parse_ordering(o)?,
    };
    let limits = EndpointLimits {
        rate_limit: body.rate_limit.map(parse_rate_limit).transpose()?,
        max_in_flight: body.max_in_flight.map(parse_max_in_flight).transpose()?,
    };
    let settings = &ctx.state.settings.webhooks;
    let allow_http = ctx.caller.mode == Mode::Sandbox || settings.allow_http;
    let url = EndpointUrl::parse(&body.url, allow_http, settings.allow_private_networks)
        .map_err(|e| ApiError::validation("url", e.to_string()))?;
    if !settings.allow_private_networks && !url.is_ip_literal() {
        check_resolved(&url).await?;
    }
    let secret = SigningSecret::generate();
    let sealed = seal(ctx, &secret);
    let env = ctx.env().clone();
    let row = endpoints::create(
        ctx.tx().await?,
        &env,
        url.as_str(),
        body.description.as_deref(),
        (ordering, limits),
        sealed,
    )
    .await?;
    Ok(reply(ctx, &row, Some((1, &secret))))
}

/// Refuses a name that resolves to a forbidden address. A name that does
/// not resolve now is accepted: every connection re-checks the address.
async fn check_resolved(url: &EndpointUrl) -> Result<(), ApiError> {
    let lookup = tokio::net::lookup_host((url.host().to_owned(), url.port()));
    let Ok(Ok(addrs)) = tokio::time::timeout(Duration::from_secs(2), lookup).await else {
        return Ok(());
    };
    for addr in addrs {
        if forbidden_ip(addr.ip()) {
            return Err(ApiError::validation(
                "url",
                "the host resolves to a loopback, private, link-local, multicast or unspecified address",
            ));
        }
    }
    Ok(())
}

/// The filters of `listWebhookEndpoints`.
pub fn filters() -> Vec<Filter> {
    vec![Filter::one_of("status", || {
        EndpointStatus::ALL.iter().map(|s| s.as_str()).collect()
    })]
}

pub async fn list(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let query = ListQuery::parse(ctx, &input)?;
    // Checked by the query: one of the statuses.
    let status = input.query_value("status").and_then(EndpointStatus::parse);
    let page = ctx
        .store()
        .webhooks()
        .list_endpoints(ctx.env(), status, &query.page)
        .await?;
    let now = ctx.now();
    let max = default_max_in_flight(ctx);
    Ok(Reply::page(
        page,
        &query.scope,
        |e| (e.created_at.millis(), e.endpoint_ref.to_string()),
        |e| dto(e, None, now, max),
    ))
}

pub async fn retrieve(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    input.query_params(&[])?;
    Ok(reply(ctx, &load_endpoint(ctx, &input).await?, None))
}

fn parse_ordering(o: &str) -> Result<EndpointOrdering, ApiError> {
    EndpointOrdering::parse(o)
        .ok_or_else(|| ApiError::validation("ordering", "must be none or per_key"))
}

fn parse_rate_limit(n: i64) -> Result<RateLimit, ApiError> {
    RateLimit::parse(n).map_err(|e| ApiError::validation("rate_limit", e.to_string()))
}

fn parse_max_in_flight(n: i64) -> Result<MaxInFlight, ApiError> {
    MaxInFlight::parse(n).map_err(|e| ApiError::validation("max_in_flight", e.to_string()))
}

/// The body of `updateWebhookEndpoint`: each field absent leaves its
/// setting as it is; `null` clears `description` and `rate_limit`, and
/// puts `max_in_flight` back to the deployment's default.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateEndpoint {
    /// At most 500 characters; null clears it.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>, max_length = 500)]
    pub description: Option<Option<String>>,
    /// `none` or `per_key` (contract 13.1). From `per_key` to `none`, the
    /// deliveries waiting for their key go at once.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = String, pattern = "^(none|per_key)$")]
    pub ordering: Option<Option<String>>,
    /// Attempts a second, 1 to 10,000; null: no limit.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<i64>, minimum = 1, maximum = 10000)]
    pub rate_limit: Option<Option<i64>>,
    /// Attempts open at once, 1 to 1,000; null: the deployment's default.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<i64>, minimum = 1, maximum = 1000)]
    pub max_in_flight: Option<Option<i64>>,
}

/// A field that is present, `null` or not: `Some(None)` for `null`; an
/// absent field is `None` by `#[serde(default)]`.
fn present<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(d).map(Some)
}

/// A checked `UpdateEndpoint`: `None` leaves a setting as it is.
struct Change {
    description: Option<Option<String>>,
    ordering: Option<EndpointOrdering>,
    rate_limit: Option<Option<RateLimit>>,
    max_in_flight: Option<Option<MaxInFlight>>,
}

impl UpdateEndpoint {
    /// Checks every present value; a refused one is `validation_failed`
    /// naming its field.
    fn check(self) -> Result<Change, ApiError> {
        if let Some(Some(d)) = &self.description {
            crate::wire::check_text("description", d, 0, 500)?;
        }
        let ordering = match self.ordering {
            None => None,
            Some(o) => Some(parse_ordering(o.as_deref().unwrap_or_default())?),
        };
        Ok(Change {
            description: self.description,
            ordering,
            rate_limit: self
                .rate_limit
                .map(|r| r.map(parse_rate_limit).transpose())
                .transpose()?,
            max_in_flight: self
                .max_in_flight
                .map(|m| m.map(parse_max_in_flight).transpose())
                .transpose()?,
        })
    }
}

impl Change {
    /// The endpoint's settings after this change to `current`.
    fn apply(self, current: &EndpointRecord) -> EndpointSettings {
        let limits = current.protection.limits;
        EndpointSettings {
            description: self
                .description
                .unwrap_or_else(|| current.description.clone()),
            ordering: self.ordering.unwrap_or(current.ordering),
            limits: EndpointLimits {
                rate_limit: self.rate_limit.unwrap_or(limits.rate_limit),
                max_in_flight: self.max_in_flight.unwrap_or(limits.max_in_flight),
            },
        }
    }
}

/// `updateWebhookEndpoint` (contract 13.2): changes any of `description`,
/// `ordering`, `rate_limit` and `max_in_flight`, conditional on the
/// endpoint's ETag. The body is checked before the endpoint is read
/// (contract 2's order). A body that changes nothing writes nothing and
/// answers the endpoint as it is, with the same ETag.
pub async fn update(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let change = input.body::<UpdateEndpoint>()?.check()?;
    let current = load_endpoint(ctx, &input).await?;
    input.check_etag(&endpoint_etag(&current))?;
    let next = change.apply(&current);
    let unchanged = next.description == current.description
        && next.ordering == current.ordering
        && next.limits == current.protection.limits;
    if unchanged {
        return Ok(reply(ctx, &current, None));
    }
    let row = endpoints::update_settings(ctx.tx().await?, &current, &next).await?;
    Ok(reply(ctx, &row, None))
}

pub async fn pause(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    transition(ctx, input, EndpointStatus::pause).await
}

pub async fn resume(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    transition(ctx, input, EndpointStatus::resume).await
}

type Transition =
    fn(EndpointStatus) -> Result<EndpointStatus, domain::webhook::EndpointTransitionError>;

async fn transition(ctx: &mut Ctx, input: Input, step: Transition) -> Result<Reply, ApiError> {
    let _: EmptyBody = input.body()?;
    let current = load_endpoint(ctx, &input).await?;
    input.check_etag(&endpoint_etag(&current))?;
    let next = step(current.status).map_err(|e| ApiError::semantic(e.to_string()))?;
    let row = endpoints::set_status(ctx.tx().await?, &current, next).await?;
    Ok(reply(ctx, &row, None))
}

/// The secret versions' metadata, for the rotation rules.
pub(crate) fn versions(e: &EndpointRecord) -> Vec<SecretVersion> {
    e.secret_versions.iter().map(|v| v.meta.clone()).collect()
}
