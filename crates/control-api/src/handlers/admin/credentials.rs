//! Credentials of service accounts: list, issue, rotate (with a grace
//! period for the old secret) and revoke. A secret appears only in the
//! response that issues it.

use super::service_accounts::load;
use crate::error::ApiError;
use crate::handlers::Ctx;
use crate::input::Input;
use crate::reply::Reply;
use crate::wire::check_text;
use crate::wire::{opt_ts, ts};
use domain::etag::etag;
use domain::principal::{
    CredentialStatus, ServiceAccountStatus, DEFAULT_ROTATION_GRACE_SECONDS,
    MAX_ROTATION_GRACE_SECONDS,
};
use domain::secret::CredentialSecret;
use domain::{Prefix, Timestamp};
use serde::{Deserialize, Serialize};
use store::admin::credentials;
use store::{CredentialRecord, NewCredential, StoreError};
use utoipa::ToSchema;

#[derive(Debug, Serialize, ToSchema)]
pub struct CredentialDto {
    pub credential_ref: String,
    pub principal_ref: String,
    pub name: Option<String>,
    /// `active`, `revoked` or `expired`.
    pub status: String,
    /// Last four characters of the current secret.
    pub secret_hint: String,
    pub created_at: String,
    pub expires_at: Option<String>,
    pub last_used_at: Option<String>,
    pub revoked_at: Option<String>,
    pub previous_secret_expires_at: Option<String>,
    pub etag: String,
    /// Only in the response of issue and rotate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

fn dto(r: &CredentialRecord, secret: Option<&CredentialSecret>, now: Timestamp) -> CredentialDto {
    CredentialDto {
        credential_ref: r.credential_ref.to_string(),
        principal_ref: r.principal_ref.to_string(),
        name: r.name.clone(),
        status: r.status_at(now).as_str().to_owned(),
        secret_hint: r.secret_hint.clone(),
        created_at: ts(r.created_at),
        expires_at: opt_ts(r.expires_at),
        last_used_at: opt_ts(r.last_used_at),
        revoked_at: opt_ts(r.revoked_at),
        previous_secret_expires_at: opt_ts(r.previous_secret_expires_at),
        etag: credential_etag(r),
        secret: secret.map(|s| s.reveal().to_owned()),
    }
}

fn credential_etag(r: &CredentialRecord) -> String {
    etag(r.credential_ref.as_str(), r.version)
}

fn reply(ctx: &Ctx, r: &CredentialRecord, secret: Option<&CredentialSecret>) -> Reply {
    let now = ctx.now();
    match secret {
        Some(_) => Reply::revealing(
            dto(r, secret, now),
            dto(r, None, now),
            Some(credential_etag(r)),
        ),
        None => Reply::one(dto(r, None, now), Some(credential_etag(r))),
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct IssueCredential {
    pub name: Option<String>,
    /// RFC 3339; must be in the future.
    pub expires_at: Option<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RotateCredential {
    /// 0 to 604800, default 86400.
    pub grace_period_seconds: Option<i64>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RevokeCredential {
    pub reason: String,
}

pub async fn list(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    input.query_params(&[])?;
    let account = load(ctx, &input).await?;
    let rows = ctx
        .store()
        .admin()
        .list_credentials(ctx.env(), &account.principal_ref)
        .await?;
    let now = ctx.now();
    Ok(Reply::all(rows.iter().map(|r| dto(r, None, now)).collect()))
}

pub async fn issue(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let body: IssueCredential = input.body()?;
    if let Some(n) = &body.name {
        check_text("name", n, 1, 100)?;
    }
    let expires_at = match &body.expires_at {
        None => None,
        Some(s) => {
            let t = Timestamp::parse(s).ok_or_else(|| {
                ApiError::validation("expires_at", "must be an RFC 3339 timestamp")
            })?;
            if t <= ctx.now() {
                return Err(ApiError::validation("expires_at", "must be in the future"));
            }
            Some(t)
        }
    };
    let account = load(ctx, &input).await?;
    if account.status == ServiceAccountStatus::Retired {
        return Err(ApiError::semantic(
            "a retired service account cannot get credentials",
        ));
    }
    let secret = CredentialSecret::generate(ctx.caller.mode);
    let new = NewCredential {
        name: body.name.as_deref(),
        expires_at,
    };
    let env = ctx.env().clone();
    let row =
        credentials::issue(ctx.tx().await?, &env, &account.principal_ref, new, &secret).await?;
    Ok(reply(ctx, &row, Some(&secret)))
}

async fn load_credential(ctx: &Ctx, input: &Input) -> Result<CredentialRecord, ApiError> {
    let credential_ref = input.path_ref("credential_ref", Prefix::Credential)?;
    match ctx
        .store()
        .admin()
        .credential(ctx.env(), &credential_ref)
        .await
    {
        Err(StoreError::NotFound) => Err(ApiError::not_found("credential")),
        other => Ok(other?),
    }
}

pub async fn rotate(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let body: RotateCredential = input.body()?;
    let grace = body
        .grace_period_seconds
        .unwrap_or(DEFAULT_ROTATION_GRACE_SECONDS);
    if !(0..=MAX_ROTATION_GRACE_SECONDS).contains(&grace) {
        return Err(ApiError::validation(
            "grace_period_seconds",
            "must be from 0 to 604800",
        ));
    }
    let current = load_credential(ctx, &input).await?;
    input.check_etag(&credential_etag(&current))?;
    let status = current.status_at(ctx.now());
    if status != CredentialStatus::Active {
        return Err(ApiError::semantic(format!(
            "a {} credential cannot be rotated",
            status.as_str()
        )));
    }
    let secret = CredentialSecret::generate(ctx.caller.mode);
    let row = credentials::rotate(ctx.tx().await?, &current, &secret, grace).await?;
    Ok(reply(ctx, &row, Some(&secret)))
}

pub async fn revoke(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let body: RevokeCredential = input.body()?;
    check_text("reason", &body.reason, 1, 500)?;
    let current = load_credential(ctx, &input).await?;
    input.check_etag(&credential_etag(&current))?;
    if current.status == CredentialStatus::Revoked {
        return Err(ApiError::semantic("the credential is already revoked"));
    }
    if current.credential_ref == ctx.caller.credential_ref {
        return Err(ApiError::semantic(
            "a principal may not revoke the credential it is using",
        ));
    }
    let row = credentials::revoke(ctx.tx().await?, &current).await?;
    Ok(reply(ctx, &row, None))
}
