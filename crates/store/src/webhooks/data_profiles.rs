//! Data profile grants: which data classes and custom fields an endpoint may
//! receive. At most one is active per endpoint; the history is kept.
//! Revoking (or superseding) a grant redacts the endpoint's stored bodies
//! that hold data the endpoint is no longer covered for, in the same
//! transaction.

use super::endpoints::EndpointRecord;
use super::{json_col, to_json};
use crate::admin::service_accounts::opt_ts;
use crate::{Store, StoreError};
use domain::webhook::{BodyStatus, DataClass, DataProfileGrantStatus, Purpose};
use domain::{Ref, Timestamp};
use sqlx::Row;

#[derive(Debug, Clone)]
pub struct DataProfileGrantRecord {
    pub endpoint_ref: Ref,
    pub purpose: Purpose,
    pub reason: String,
    pub data_classes: Vec<DataClass>,
    pub custom_field_refs: Vec<String>,
    pub status: DataProfileGrantStatus,
    pub created_at: Timestamp,
    pub revoked_at: Option<Timestamp>,
}

#[derive(Debug, Clone)]
pub struct NewDataProfileGrant {
    pub purpose: Purpose,
    pub reason: String,
    pub data_classes: Vec<DataClass>,
    pub custom_field_refs: Vec<String>,
}

/// A stored body, shown to the caller's redaction rule.
pub struct StoredBody<'a> {
    pub public_event_type: &'a str,
    pub dto_version: u32,
    pub payload: &'a str,
}

fn from_row(row: &sqlx::any::AnyRow) -> Result<DataProfileGrantRecord, StoreError> {
    let purpose: String = row.try_get("purpose")?;
    let status: String = row.try_get("status")?;
    let classes: Vec<String> = json_col(row, "data_classes")?;
    Ok(DataProfileGrantRecord {
        endpoint_ref: Ref::from_trusted(row.try_get("endpoint_ref")?),
        purpose: Purpose::parse(&purpose).ok_or_else(|| StoreError::Corrupt(purpose))?,
        reason: row.try_get("reason")?,
        data_classes: classes.iter().filter_map(|c| DataClass::parse(c)).collect(),
        custom_field_refs: json_col(row, "custom_field_refs")?,
        status: DataProfileGrantStatus::parse(&status)
            .ok_or_else(|| StoreError::Corrupt(status))?,
        created_at: Timestamp::from_millis(row.try_get("created_at")?),
        revoked_at: opt_ts(row, "revoked_at")?,
    })
}

type Tx = sqlx::Transaction<'static, sqlx::Any>;

impl Store {
    /// Creates the endpoint's active grant, revoking the previous one.
    /// `redact` says which stored bodies the new grant no longer covers.
    pub async fn create_data_profile_grant(
        &self,
        endpoint: &EndpointRecord,
        new: NewDataProfileGrant,
        redact: impl Fn(&StoredBody<'_>) -> bool,
    ) -> Result<DataProfileGrantRecord, StoreError> {
        let now = Timestamp::now().millis();
        let mut tx = self.write_tx().await?;
        // The grant changes what the endpoint receives: its version moves,
        // so cached views of it (the dispatcher's) are refreshed.
        sqlx::query("UPDATE webhook_endpoints SET updated_at = $1, version = version + 1 WHERE endpoint_ref = $2")
            .bind(now)
            .bind(endpoint.endpoint_ref.as_str())
            .execute(&mut *tx)
            .await?;
        let superseded = revoke_active(
            &mut tx,
            &endpoint.endpoint_ref,
            now,
            "superseded by a new grant",
        )
        .await?;
        let classes: Vec<&str> = new.data_classes.iter().map(|c| c.as_str()).collect();
        let row = sqlx::query(
            "INSERT INTO webhook_data_profile_grants (grant_id, endpoint_ref, environment_ref, purpose, \
             reason, data_classes, custom_field_refs, status, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, 'active', $8) RETURNING *",
        )
        .bind(Ref::generate(domain::Prefix::WebhookEndpoint).as_str().replacen("whep_", "dpg_", 1))
        .bind(endpoint.endpoint_ref.as_str())
        .bind(endpoint.environment_ref.as_str())
        .bind(new.purpose.as_str())
        .bind(&new.reason)
        .bind(to_json(&classes))
        .bind(to_json(&new.custom_field_refs))
        .bind(now)
        .fetch_one(&mut *tx)
        .await?;
        if superseded.is_some() {
            redact_bodies(&mut tx, &endpoint.endpoint_ref, &redact).await?;
        }
        tx.commit().await?;
        from_row(&row)
    }

    /// Revokes the endpoint's active grant if the endpoint is still at its
    /// read version; `NotFound` when none is active.
    pub async fn revoke_data_profile_grant(
        &self,
        endpoint: &EndpointRecord,
        reason: &str,
        redact: impl Fn(&StoredBody<'_>) -> bool,
    ) -> Result<DataProfileGrantRecord, StoreError> {
        let now = Timestamp::now().millis();
        let mut tx = self.write_tx().await?;
        let bumped = sqlx::query(
            "UPDATE webhook_endpoints SET updated_at = $1, version = version + 1 \
             WHERE endpoint_ref = $2 AND version = $3",
        )
        .bind(now)
        .bind(endpoint.endpoint_ref.as_str())
        .bind(endpoint.version)
        .execute(&mut *tx)
        .await?;
        if bumped.rows_affected() != 1 {
            return Err(StoreError::Conflict);
        }
        let revoked = revoke_active(&mut tx, &endpoint.endpoint_ref, now, reason)
            .await?
            .ok_or(StoreError::NotFound)?;
        redact_bodies(&mut tx, &endpoint.endpoint_ref, &redact).await?;
        tx.commit().await?;
        Ok(revoked)
    }

    pub async fn list_data_profile_grants(
        &self,
        environment_ref: &Ref,
        endpoint_ref: &Ref,
    ) -> Result<Vec<DataProfileGrantRecord>, StoreError> {
        let rows = sqlx::query(
            "SELECT * FROM webhook_data_profile_grants WHERE environment_ref = $1 AND endpoint_ref = $2 \
             ORDER BY created_at DESC, grant_id DESC",
        )
        .bind(environment_ref.as_str())
        .bind(endpoint_ref.as_str())
        .fetch_all(self.pool())
        .await?;
        rows.iter().map(from_row).collect()
    }

    pub async fn active_data_profile_grant(
        &self,
        endpoint_ref: &Ref,
    ) -> Result<Option<DataProfileGrantRecord>, StoreError> {
        let row = sqlx::query(
            "SELECT * FROM webhook_data_profile_grants WHERE endpoint_ref = $1 AND status = 'active'",
        )
        .bind(endpoint_ref.as_str())
        .fetch_optional(self.pool())
        .await?;
        row.as_ref().map(from_row).transpose()
    }
}

async fn revoke_active(
    tx: &mut Tx,
    endpoint_ref: &Ref,
    now: i64,
    reason: &str,
) -> Result<Option<DataProfileGrantRecord>, StoreError> {
    let row = sqlx::query(
        "UPDATE webhook_data_profile_grants SET status = 'revoked', revoked_at = $1, revoke_reason = $2 \
         WHERE endpoint_ref = $3 AND status = 'active' RETURNING *",
    )
    .bind(now)
    .bind(reason)
    .bind(endpoint_ref.as_str())
    .fetch_optional(&mut **tx)
    .await?;
    row.as_ref().map(from_row).transpose()
}

async fn redact_bodies(
    tx: &mut Tx,
    endpoint_ref: &Ref,
    redact: &impl Fn(&StoredBody<'_>) -> bool,
) -> Result<u64, StoreError> {
    let rows = sqlx::query(
        "SELECT delivery_ref, public_event_type, dto_version, payload FROM webhook_deliveries \
         WHERE endpoint_ref = $1 AND body_status = $2 AND payload IS NOT NULL",
    )
    .bind(endpoint_ref.as_str())
    .bind(BodyStatus::Available.as_str())
    .fetch_all(&mut **tx)
    .await?;
    let mut redacted = 0;
    for row in rows {
        let payload: String = row.try_get("payload")?;
        let event_type: String = row.try_get("public_event_type")?;
        let body = StoredBody {
            public_event_type: &event_type,
            dto_version: row.try_get::<i64, _>("dto_version")? as u32,
            payload: &payload,
        };
        if redact(&body) {
            sqlx::query("UPDATE webhook_deliveries SET body_status = $1, payload = NULL WHERE delivery_ref = $2")
                .bind(BodyStatus::Redacted.as_str())
                .bind(row.try_get::<String, _>("delivery_ref")?)
                .execute(&mut **tx)
                .await?;
            redacted += 1;
        }
    }
    Ok(redacted)
}
