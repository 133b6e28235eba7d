//! Permission grants of service accounts. At most one active grant per
//! (principal, permission); the history of revoked grants is kept.

use crate::admin::service_accounts::opt_ts;
use crate::{Store, StoreError};
use domain::principal::GrantStatus;
use domain::{Ref, Timestamp};
use sqlx::Row;

#[derive(Debug, Clone)]
pub struct GrantRecord {
    pub principal_ref: Ref,
    pub permission_action: String,
    pub status: GrantStatus,
    pub granted_at: Timestamp,
    pub revoked_at: Option<Timestamp>,
}

fn from_row(row: &sqlx::any::AnyRow) -> Result<GrantRecord, StoreError> {
    Ok(GrantRecord {
        principal_ref: Ref::from_trusted(row.try_get("principal_ref")?),
        permission_action: row.try_get("permission_action")?,
        status: GrantStatus::parse(&row.try_get::<String, _>("status")?)
            .unwrap_or(GrantStatus::Revoked),
        granted_at: Timestamp::from_millis(row.try_get("granted_at")?),
        revoked_at: opt_ts(row, "revoked_at")?,
    })
}

impl Store {
    /// Grants `permissions` that are not already held; returns how many were
    /// new. Used by bootstrap.
    pub async fn ensure_grants(
        &self,
        environment_ref: &Ref,
        principal_ref: &Ref,
        permissions: &[&str],
    ) -> Result<usize, StoreError> {
        let now = Timestamp::now().millis();
        let mut tx = self.write_tx().await?;
        let mut added = 0;
        for p in permissions {
            let done = sqlx::query(
                "INSERT INTO grants (grant_id, environment_ref, principal_ref, permission_action, \
                 status, granted_at) SELECT $1, $2, $3, $4, 'active', $5 WHERE NOT EXISTS \
                 (SELECT 1 FROM grants WHERE principal_ref = $3 AND permission_action = $4 \
                 AND status = 'active')",
            )
            .bind(grant_id())
            .bind(environment_ref.as_str())
            .bind(principal_ref.as_str())
            .bind(*p)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            added += done.rows_affected() as usize;
        }
        if added > 0 {
            Store::bump_service_account(&mut tx, principal_ref, None, now).await?;
        }
        tx.commit().await?;
        Ok(added)
    }

    /// Grants one permission. `Duplicate` if it is already held.
    pub async fn grant_permission(
        &self,
        environment_ref: &Ref,
        principal_ref: &Ref,
        permission: &str,
    ) -> Result<GrantRecord, StoreError> {
        let now = Timestamp::now().millis();
        let mut tx = self.write_tx().await?;
        let row = sqlx::query(
            "INSERT INTO grants (grant_id, environment_ref, principal_ref, permission_action, \
             status, granted_at) VALUES ($1, $2, $3, $4, 'active', $5) RETURNING *",
        )
        .bind(grant_id())
        .bind(environment_ref.as_str())
        .bind(principal_ref.as_str())
        .bind(permission)
        .bind(now)
        .fetch_one(&mut *tx)
        .await?;
        Store::bump_service_account(&mut tx, principal_ref, None, now).await?;
        tx.commit().await?;
        from_row(&row)
    }

    /// Every grant of an account, newest first, revoked ones included.
    pub async fn list_grants(
        &self,
        environment_ref: &Ref,
        principal_ref: &Ref,
    ) -> Result<Vec<GrantRecord>, StoreError> {
        let rows = sqlx::query(
            "SELECT * FROM grants WHERE environment_ref = $1 AND principal_ref = $2 \
             ORDER BY granted_at DESC, grant_id DESC",
        )
        .bind(environment_ref.as_str())
        .bind(principal_ref.as_str())
        .fetch_all(self.pool())
        .await?;
        rows.iter().map(from_row).collect()
    }

    /// Revokes the active grant of `permission`, if the account is still at
    /// `account_version`. `NotFound` when no such grant is active.
    pub async fn revoke_grant(
        &self,
        principal_ref: &Ref,
        permission: &str,
        account_version: i64,
    ) -> Result<GrantRecord, StoreError> {
        let now = Timestamp::now().millis();
        let mut tx = self.write_tx().await?;
        Store::bump_service_account(&mut tx, principal_ref, Some(account_version), now).await?;
        let row = sqlx::query(
            "UPDATE grants SET status = 'revoked', revoked_at = $1 \
             WHERE principal_ref = $2 AND permission_action = $3 AND status = 'active' RETURNING *",
        )
        .bind(now)
        .bind(principal_ref.as_str())
        .bind(permission)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(StoreError::NotFound)?;
        tx.commit().await?;
        from_row(&row)
    }
}

fn grant_id() -> String {
    // Grants are addressed by (principal, permission); this id only keys rows.
    Ref::generate(domain::Prefix::ServiceAccount)
        .as_str()
        .replacen("sa_", "grt_", 1)
}
