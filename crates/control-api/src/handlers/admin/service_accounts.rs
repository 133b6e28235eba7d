//! Service accounts: create, list, retrieve, suspend, resume, retire.
//! A principal may never suspend or retire itself (no self-lockout).

use crate::error::ApiError;
use crate::handlers::Ctx;
use crate::input::Input;
use crate::reply::Reply;
use crate::wire::{check_text, opt_ts, ts};
use domain::etag::etag;
use domain::principal::ServiceAccountStatus;
use domain::{Prefix, Ref};
use serde::{Deserialize, Serialize};
use store::admin::service_accounts;
use store::{ServiceAccountRecord, StoreError};
use utoipa::ToSchema;

#[derive(Debug, Serialize, ToSchema)]
pub struct ServiceAccountDto {
    pub principal_ref: String,
    pub environment_ref: String,
    pub name: String,
    pub description: Option<String>,
    /// `active`, `suspended` or `retired`.
    pub status: String,
    pub created_at: String,
    pub updated_at: String,
    pub suspended_at: Option<String>,
    pub retired_at: Option<String>,
    /// Equal to the `ETag` header of this account.
    pub etag: String,
}

impl From<&ServiceAccountRecord> for ServiceAccountDto {
    fn from(r: &ServiceAccountRecord) -> Self {
        ServiceAccountDto {
            principal_ref: r.principal_ref.to_string(),
            environment_ref: r.environment_ref.to_string(),
            name: r.name.clone(),
            description: r.description.clone(),
            status: r.status.as_str().to_owned(),
            created_at: ts(r.created_at),
            updated_at: ts(r.updated_at),
            suspended_at: opt_ts(r.suspended_at),
            retired_at: opt_ts(r.retired_at),
            etag: account_etag(r),
        }
    }
}

pub fn account_etag(r: &ServiceAccountRecord) -> String {
    etag(r.principal_ref.as_str(), r.version)
}

pub(crate) fn reply(r: &ServiceAccountRecord) -> Reply {
    Reply::one(ServiceAccountDto::from(r), Some(account_etag(r)))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateServiceAccount {
    /// 1 to 100 characters.
    pub name: String,
    /// At most 500 characters.
    pub description: Option<String>,
}

/// Body of suspend, resume, retire and grant revoke.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReasonBody {
    /// At most 500 characters; recorded nowhere but the request log's operation.
    pub reason: Option<String>,
}

fn check_reason(body: &ReasonBody) -> Result<(), ApiError> {
    match &body.reason {
        Some(r) => check_text("reason", r, 0, 500),
        None => Ok(()),
    }
}

/// The account named by the `principal_ref` path parameter, in the caller's
/// environment.
pub(crate) async fn load(ctx: &Ctx, input: &Input) -> Result<ServiceAccountRecord, ApiError> {
    let principal_ref = input.path_ref("principal_ref", Prefix::ServiceAccount)?;
    match ctx
        .store()
        .admin()
        .service_account(ctx.env(), &principal_ref)
        .await
    {
        Err(StoreError::NotFound) => Err(ApiError::not_found("service account")),
        other => Ok(other?),
    }
}

pub async fn list(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    input.query_params(&[])?;
    let rows = ctx.store().admin().list_service_accounts(ctx.env()).await?;
    Ok(Reply::all(
        rows.iter().map(ServiceAccountDto::from).collect(),
    ))
}

pub async fn create(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let body: CreateServiceAccount = input.body()?;
    check_text("name", &body.name, 1, 100)?;
    if let Some(d) = &body.description {
        check_text("description", d, 0, 500)?;
    }
    let env = ctx.env().clone();
    let row = service_accounts::create(
        ctx.tx().await?,
        &env,
        &body.name,
        body.description.as_deref(),
    )
    .await
    .map_err(|e| match e {
        StoreError::Duplicate => {
            ApiError::semantic("the name `admin` is reserved for the bootstrap account")
        }
        e => e.into(),
    })?;
    Ok(reply(&row))
}

pub async fn retrieve(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    Ok(reply(&load(ctx, &input).await?))
}

pub async fn suspend(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    transition(ctx, input, ServiceAccountStatus::suspend).await
}

pub async fn resume(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    transition(ctx, input, ServiceAccountStatus::resume).await
}

pub async fn retire(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    transition(ctx, input, ServiceAccountStatus::retire).await
}

type Transition =
    fn(ServiceAccountStatus) -> Result<ServiceAccountStatus, domain::principal::TransitionError>;

async fn transition(ctx: &mut Ctx, input: Input, step: Transition) -> Result<Reply, ApiError> {
    let body: ReasonBody = input.body()?;
    check_reason(&body)?;
    let current = load(ctx, &input).await?;
    input.check_etag(&account_etag(&current))?;
    let next = step(current.status).map_err(|e| ApiError::semantic(e.to_string()))?;
    let self_lockout = next != ServiceAccountStatus::Active && is_self(ctx, &current.principal_ref);
    if self_lockout {
        return Err(ApiError::semantic(
            "a principal may not suspend or retire itself",
        ));
    }
    let row = service_accounts::set_status(ctx.tx().await?, &current, next).await?;
    Ok(reply(&row))
}

pub(crate) fn is_self(ctx: &Ctx, principal_ref: &Ref) -> bool {
    &ctx.caller.principal_ref == principal_ref
}
