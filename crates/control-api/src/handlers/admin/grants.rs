//! Permission grants: list, grant, revoke. The permissions are exactly the
//! strings of the operation table. A principal may not revoke its own
//! `grants:manage_grant` (no self-lockout).

use super::service_accounts::{account_etag, is_self, load, ReasonBody};
use crate::error::ApiError;
use crate::handlers::Ctx;
use crate::input::Input;
use crate::reply::Reply;
use crate::wire::{opt_ts, ts};
use domain::principal::{GrantStatus, ServiceAccountStatus};
use serde::{Deserialize, Serialize};
use store::admin::grants;
use store::{GrantRecord, StoreError};
use utoipa::ToSchema;

/// The permission that lets a principal grant permissions.
const MANAGE_GRANT: &str = "grants:manage_grant";

#[derive(Debug, Serialize, ToSchema)]
pub struct GrantDto {
    pub principal_ref: String,
    pub permission_action: String,
    /// `active` or `revoked`.
    pub status: String,
    pub granted_at: String,
    pub revoked_at: Option<String>,
}

impl From<&GrantRecord> for GrantDto {
    fn from(r: &GrantRecord) -> Self {
        GrantDto {
            principal_ref: r.principal_ref.to_string(),
            permission_action: r.permission_action.clone(),
            status: r.status.as_str().to_owned(),
            granted_at: ts(r.granted_at),
            revoked_at: opt_ts(r.revoked_at),
        }
    }
}

/// A grant changes once (when revoked); its tag digests its identity and
/// status. Revoking checks the service account's tag, not this one.
fn grant_etag(r: &GrantRecord) -> String {
    let identity = format!(
        "{}/{}/{}",
        r.principal_ref,
        r.permission_action,
        r.granted_at.millis()
    );
    domain::etag::etag(
        &identity,
        if r.status == GrantStatus::Active {
            1
        } else {
            2
        },
    )
}

fn reply(r: &GrantRecord) -> Reply {
    Reply::one(GrantDto::from(r), Some(grant_etag(r)))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GrantPermission {
    /// One of the permissions of the operation table.
    pub permission_action: String,
}

fn known_permission(ctx: &Ctx, field: &str, p: &str) -> Result<(), ApiError> {
    if ctx.permissions().contains(&p) {
        Ok(())
    } else {
        Err(ApiError::validation(field, "unknown permission"))
    }
}

pub async fn list(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    input.query_params(&[])?;
    let account = load(ctx, &input).await?;
    let rows = ctx
        .store()
        .admin()
        .list_grants(ctx.env(), &account.principal_ref)
        .await?;
    Ok(Reply::all(rows.iter().map(GrantDto::from).collect()))
}

pub async fn grant(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let body: GrantPermission = input.body()?;
    known_permission(ctx, "permission_action", &body.permission_action)?;
    let account = load(ctx, &input).await?;
    if account.status == ServiceAccountStatus::Retired {
        return Err(ApiError::semantic(
            "a retired service account cannot get grants",
        ));
    }
    let env = ctx.env().clone();
    let row = grants::grant(
        ctx.tx().await?,
        &env,
        &account.principal_ref,
        &body.permission_action,
    )
    .await
    .map_err(|e| match e {
        StoreError::Duplicate => ApiError::semantic("the permission is already granted"),
        e => e.into(),
    })?;
    Ok(reply(&row))
}

pub async fn revoke(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let body: ReasonBody = input.body()?;
    if let Some(r) = &body.reason {
        crate::wire::check_text("reason", r, 0, 500)?;
    }
    let permission = input.path_str("permission_action").to_owned();
    known_permission(ctx, "permission_action", &permission)?;
    let account = load(ctx, &input).await?;
    let held = ctx
        .store()
        .admin()
        .list_grants(ctx.env(), &account.principal_ref)
        .await?
        .iter()
        .any(|g| g.permission_action == permission && g.status == GrantStatus::Active);
    if !held {
        return Err(ApiError::NotFound(
            "the service account holds no active grant of this permission".into(),
        ));
    }
    input.check_etag(&account_etag(&account))?;
    if permission == MANAGE_GRANT && is_self(ctx, &account.principal_ref) {
        return Err(ApiError::semantic(
            "a principal may not revoke its own grants:manage_grant",
        ));
    }
    let row = grants::revoke(
        ctx.tx().await?,
        &account.principal_ref,
        &permission,
        account.version,
    )
    .await
    .map_err(|e| match e {
        // The grant was revoked by a concurrent request after our check.
        StoreError::NotFound => ApiError::VersionConflict("the grant changed concurrently; retry"),
        e => e.into(),
    })?;
    Ok(reply(&row))
}
