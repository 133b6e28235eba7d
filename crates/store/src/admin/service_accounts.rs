//! Service accounts: the principals that hold grants and credentials.

use crate::{Store, StoreError};
use domain::principal::ServiceAccountStatus;
use domain::{Prefix, Ref, Timestamp};
use sqlx::Row;

#[derive(Debug, Clone)]
pub struct ServiceAccountRecord {
    pub principal_ref: Ref,
    pub environment_ref: Ref,
    pub name: String,
    pub description: Option<String>,
    pub status: ServiceAccountStatus,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub suspended_at: Option<Timestamp>,
    pub retired_at: Option<Timestamp>,
    pub version: i64,
}

pub(crate) fn opt_ts(
    row: &impl crate::db::tx::Columns,
    col: &str,
) -> Result<Option<Timestamp>, StoreError> {
    Ok(row.int(col)?.map(Timestamp::from_millis))
}

fn from_row(row: &sqlx::any::AnyRow) -> Result<ServiceAccountRecord, StoreError> {
    Ok(ServiceAccountRecord {
        principal_ref: Ref::from_trusted(row.try_get("principal_ref")?),
        environment_ref: Ref::from_trusted(row.try_get("environment_ref")?),
        name: row.try_get("name")?,
        description: row.try_get("description")?,
        status: ServiceAccountStatus::parse(&row.try_get::<String, _>("status")?)
            .unwrap_or(ServiceAccountStatus::Retired),
        created_at: Timestamp::from_millis(row.try_get("created_at")?),
        updated_at: Timestamp::from_millis(row.try_get("updated_at")?),
        suspended_at: opt_ts(row, "suspended_at")?,
        retired_at: opt_ts(row, "retired_at")?,
        version: row.try_get("version")?,
    })
}

impl Store {
    pub async fn create_service_account(
        &self,
        environment_ref: &Ref,
        name: &str,
        description: Option<&str>,
    ) -> Result<ServiceAccountRecord, StoreError> {
        let now = Timestamp::now().millis();
        let row = sqlx::query(
            "INSERT INTO service_accounts (principal_ref, environment_ref, name, description, \
             status, created_at, updated_at) VALUES ($1, $2, $3, $4, 'active', $5, $5) RETURNING *",
        )
        .bind(Ref::generate(Prefix::ServiceAccount).into_string())
        .bind(environment_ref.as_str())
        .bind(name)
        .bind(description)
        .bind(now)
        .fetch_one(self.writer())
        .await?;
        from_row(&row)
    }

    /// The bootstrap account `admin` of an environment: the one that is not
    /// retired, resumed if suspended, created when missing (bootstrap is the
    /// way back in when every administrator is locked out).
    pub async fn ensure_admin_account(
        &self,
        environment_ref: &Ref,
    ) -> Result<ServiceAccountRecord, StoreError> {
        let existing = sqlx::query(
            "SELECT * FROM service_accounts WHERE environment_ref = $1 AND name = 'admin' \
             AND status <> 'retired'",
        )
        .bind(environment_ref.as_str())
        .fetch_optional(self.pool())
        .await?;
        match existing.as_ref().map(from_row).transpose()? {
            Some(admin) if admin.status == ServiceAccountStatus::Suspended => {
                self.set_service_account_status(&admin, ServiceAccountStatus::Active)
                    .await
            }
            Some(admin) => Ok(admin),
            None => match self
                .create_service_account(environment_ref, "admin", Some("bootstrap administrator"))
                .await
            {
                Err(StoreError::Duplicate) => {
                    Box::pin(self.ensure_admin_account(environment_ref)).await
                }
                other => other,
            },
        }
    }

    pub async fn service_account(
        &self,
        environment_ref: &Ref,
        principal_ref: &Ref,
    ) -> Result<ServiceAccountRecord, StoreError> {
        let row = sqlx::query(
            "SELECT * FROM service_accounts WHERE environment_ref = $1 AND principal_ref = $2",
        )
        .bind(environment_ref.as_str())
        .bind(principal_ref.as_str())
        .fetch_one(self.pool())
        .await?;
        from_row(&row)
    }

    pub async fn list_service_accounts(
        &self,
        environment_ref: &Ref,
    ) -> Result<Vec<ServiceAccountRecord>, StoreError> {
        let rows = sqlx::query(
            "SELECT * FROM service_accounts WHERE environment_ref = $1 \
             ORDER BY created_at DESC, principal_ref DESC",
        )
        .bind(environment_ref.as_str())
        .fetch_all(self.pool())
        .await?;
        rows.iter().map(from_row).collect()
    }

    /// Moves an account to `status` if it is still at `expected_version`.
    /// Retiring also revokes every credential and grant of the account, in
    /// the same transaction.
    pub async fn set_service_account_status(
        &self,
        current: &ServiceAccountRecord,
        status: ServiceAccountStatus,
    ) -> Result<ServiceAccountRecord, StoreError> {
        let now = Timestamp::now().millis();
        let mut tx = self.write_tx().await?;
        let (suspended_at, retired_at) = match status {
            ServiceAccountStatus::Suspended => (Some(now), current.retired_at.map(|t| t.millis())),
            ServiceAccountStatus::Active => (None, None),
            ServiceAccountStatus::Retired => (current.suspended_at.map(|t| t.millis()), Some(now)),
        };
        let row = sqlx::query(
            "UPDATE service_accounts SET status = $1, suspended_at = $2, retired_at = $3, \
             updated_at = $4, version = version + 1 \
             WHERE principal_ref = $5 AND environment_ref = $6 AND version = $7 RETURNING *",
        )
        .bind(status.as_str())
        .bind(suspended_at)
        .bind(retired_at)
        .bind(now)
        .bind(current.principal_ref.as_str())
        .bind(current.environment_ref.as_str())
        .bind(current.version)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(StoreError::Conflict)?;
        if status == ServiceAccountStatus::Retired {
            sqlx::query(
                "UPDATE credentials SET status = 'revoked', revoked_at = $1, updated_at = $1, \
                 version = version + 1 WHERE principal_ref = $2 AND status = 'active'",
            )
            .bind(now)
            .bind(current.principal_ref.as_str())
            .execute(&mut *tx)
            .await?;
            sqlx::query(
                "UPDATE grants SET status = 'revoked', revoked_at = $1 \
                 WHERE principal_ref = $2 AND status = 'active'",
            )
            .bind(now)
            .bind(current.principal_ref.as_str())
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        from_row(&row)
    }

    /// Bumps an account's version inside `tx` if it is still at
    /// `expected_version`: grant changes are changes of the account.
    pub(crate) async fn bump_service_account(
        tx: &mut sqlx::Transaction<'static, sqlx::Any>,
        principal_ref: &Ref,
        expected_version: Option<i64>,
        now: i64,
    ) -> Result<(), StoreError> {
        let done = sqlx::query(
            "UPDATE service_accounts SET version = version + 1, updated_at = $1 \
             WHERE principal_ref = $2 AND ($3 < 0 OR version = $3)",
        )
        .bind(now)
        .bind(principal_ref.as_str())
        .bind(expected_version.unwrap_or(-1))
        .execute(&mut **tx)
        .await?;
        if done.rows_affected() == 1 {
            Ok(())
        } else {
            Err(StoreError::Conflict)
        }
    }
}
