//! Endpoints: create (with destination checks), list, retrieve, pause and
//! resume. Creating an endpoint creates secret version 1, whose secret
//! appears in that response only.

use super::load_endpoint;
use crate::error::ApiError;
use crate::handlers::lists::{Filter, ListQuery};
use crate::handlers::Ctx;
use crate::input::Input;
use crate::reply::Reply;
use crate::wire::EmptyBody;
use domain::principal::Mode;
use domain::webhook::ordering::EndpointOrdering;
use domain::webhook::secret_version::SecretVersion;
use domain::webhook::signing::SigningSecret;
use domain::webhook::url::{forbidden_ip, EndpointUrl};
use domain::webhook::EndpointStatus;
use serde::Deserialize;
use std::time::Duration;
use store::webhooks::endpoints;
use store::{EndpointRecord, NewSecret};
use utoipa::ToSchema;
pub use webhook_shapes::endpoint::{dto, endpoint_etag, EndpointDto, SecretVersionDto};

pub(crate) fn reply(
    ctx: &Ctx,
    e: &EndpointRecord,
    revealed: Option<(u32, &SigningSecret)>,
) -> Reply {
    let now = ctx.now();
    match revealed {
        Some(_) => Reply::revealing(
            dto(e, revealed, now),
            dto(e, None, now),
            Some(endpoint_etag(e)),
        ),
        None => Reply::one(dto(e, None, now), Some(endpoint_etag(e))),
    }
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
    pub ordering: Option<String>,
}

pub async fn create(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let body: CreateEndpoint = input.body()?;
    if let Some(d) = &body.description {
        crate::wire::check_text("description", d, 0, 500)?;
    }
    let ordering = match body.ordering.as_deref() {
        None => EndpointOrdering::None,
        Some(o) => EndpointOrdering::parse(o)
            .ok_or_else(|| ApiError::validation("ordering", "must be none or per_key"))?,
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
        ordering,
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
    Ok(Reply::page(
        page,
        &query.scope,
        |e| (e.created_at.millis(), e.endpoint_ref.to_string()),
        |e| dto(e, None, now),
    ))
}

pub async fn retrieve(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    input.query_params(&[])?;
    Ok(reply(ctx, &load_endpoint(ctx, &input).await?, None))
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
