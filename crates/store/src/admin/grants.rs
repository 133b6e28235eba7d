//! Permission grants of service accounts. At most one active grant per
//! (principal, permission); the history of revoked grants is kept.
//!
//! A grant change is a change of its account: every write bumps the
//! account's version in the same transaction.

use super::Admin;
use crate::admin::service_accounts;
use crate::db::codec::{opt_ts, state};
use crate::db::tx::{int, text, Columns, WriteTx};
use crate::resource::{Resource, Scope};
use crate::StoreError;
use domain::principal::GrantStatus;
use domain::{Ref, Timestamp};

#[derive(Debug, Clone)]
pub struct GrantRecord {
    pub principal_ref: Ref,
    pub permission_action: String,
    pub status: GrantStatus,
    pub granted_at: Timestamp,
    pub revoked_at: Option<Timestamp>,
}

impl Resource for GrantRecord {
    const TABLE: &'static str = "grants";
    const REF_COLUMN: &'static str = "grant_id";
    const CREATED_COLUMN: &'static str = "granted_at";
    const PARENT_COLUMN: Option<&'static str> = Some("principal_ref");

    fn decode(row: &dyn Columns) -> Result<Self, StoreError> {
        from_row(row)
    }
}

fn from_row(row: &dyn Columns) -> Result<GrantRecord, StoreError> {
    Ok(GrantRecord {
        principal_ref: Ref::from_trusted(text(row, "principal_ref")?),
        permission_action: text(row, "permission_action")?,
        status: state(row, "status", GrantStatus::parse)?,
        granted_at: Timestamp::from_millis(int(row, "granted_at")?),
        revoked_at: opt_ts(row, "revoked_at")?,
    })
}

/// Grants `permissions` that are not already held; returns how many were
/// new. Used by bootstrap.
pub async fn ensure(
    tx: &mut WriteTx,
    environment_ref: &Ref,
    principal_ref: &Ref,
    permissions: &[&str],
) -> Result<usize, StoreError> {
    let now = Timestamp::now().millis();
    let active = GrantStatus::Active.as_str();
    let mut added = 0;
    for p in permissions {
        let id = grant_id();
        added += tx
            .execute(
                "INSERT INTO grants (grant_id, environment_ref, principal_ref, permission_action, \
                 status, granted_at) SELECT $1, $2, $3, $4, $5, $6 WHERE NOT EXISTS \
                 (SELECT 1 FROM grants WHERE principal_ref = $3 AND permission_action = $4 \
                 AND status = $5)",
                &[
                    id.as_str().into(),
                    environment_ref.as_str().into(),
                    principal_ref.as_str().into(),
                    (*p).into(),
                    active.into(),
                    now.into(),
                ],
            )
            .await? as usize;
    }
    if added > 0 {
        service_accounts::bump(tx, principal_ref, None, now).await?;
    }
    Ok(added)
}

/// Grants one permission. `Duplicate` if it is already held.
pub async fn grant(
    tx: &mut WriteTx,
    environment_ref: &Ref,
    principal_ref: &Ref,
    permission: &str,
) -> Result<GrantRecord, StoreError> {
    let now = Timestamp::now().millis();
    let id = grant_id();
    let rows = tx
        .fetch(
            "INSERT INTO grants (grant_id, environment_ref, principal_ref, permission_action, \
             status, granted_at) VALUES ($1, $2, $3, $4, $5, $6) RETURNING *",
            &[
                id.as_str().into(),
                environment_ref.as_str().into(),
                principal_ref.as_str().into(),
                permission.into(),
                GrantStatus::Active.as_str().into(),
                now.into(),
            ],
        )
        .await?;
    let granted = rows
        .first()
        .ok_or_else(|| StoreError::Corrupt("granting returned no row".into()))
        .and_then(|row| from_row(row))?;
    service_accounts::bump(tx, principal_ref, None, now).await?;
    Ok(granted)
}

/// Revokes the active grant of `permission`, if the account is still at
/// `account_version` (`Conflict` otherwise). `NotFound` when no such grant
/// is active.
pub async fn revoke(
    tx: &mut WriteTx,
    principal_ref: &Ref,
    permission: &str,
    account_version: i64,
) -> Result<GrantRecord, StoreError> {
    let now = Timestamp::now().millis();
    service_accounts::bump(tx, principal_ref, Some(account_version), now).await?;
    let rows = tx
        .fetch(
            "UPDATE grants SET status = $1, revoked_at = $2 \
             WHERE principal_ref = $3 AND permission_action = $4 AND status = $5 RETURNING *",
            &[
                GrantStatus::Revoked.as_str().into(),
                now.into(),
                principal_ref.as_str().into(),
                permission.into(),
                GrantStatus::Active.as_str().into(),
            ],
        )
        .await?;
    rows.first()
        .ok_or(StoreError::NotFound)
        .and_then(|row| from_row(row))
}

impl Admin<'_> {
    /// Every grant of an account, newest first, revoked ones included.
    pub async fn list_grants(
        &self,
        environment_ref: &Ref,
        principal_ref: &Ref,
    ) -> Result<Vec<GrantRecord>, StoreError> {
        self.0
            .list_all(Scope::under(environment_ref, principal_ref), &[])
            .await
    }
}

fn grant_id() -> String {
    // Grants are addressed by (principal, permission); this id only keys rows.
    Ref::generate(domain::Prefix::ServiceAccount)
        .as_str()
        .replacen("sa_", "grt_", 1)
}
