//! Idempotency records: one row per (environment, principal, operation, key).
//!
//! A request reserves its key (`in_flight`) before it executes and completes
//! it with the response it decided; a request that must keep nothing
//! releases it. A reservation older than `stale_after` is treated as the
//! remains of a crashed process and may be taken over.

use crate::{Store, StoreError};
use domain::Timestamp;
use sqlx::Row;

#[derive(Debug, Clone)]
pub struct IdempotencyScope {
    pub environment_ref: String,
    pub principal_ref: String,
    pub operation_id: String,
    pub key: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    pub status: u16,
    pub body: String,
    pub etag: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reservation {
    /// The caller owns the key now and must complete or release it.
    Reserved,
    /// The key was used with another request.
    Mismatch,
    /// A request with this key is still executing.
    InFlight,
    /// The key already decided a response: replay it.
    Replay(StoredResponse),
}

impl Store {
    pub async fn reserve_idempotency_key(
        &self,
        scope: &IdempotencyScope,
        fingerprint: &str,
        now: Timestamp,
        retention_ms: i64,
        stale_after_ms: i64,
    ) -> Result<Reservation, StoreError> {
        // A record past its retention no longer exists for the client.
        sqlx::query(
            "DELETE FROM idempotency_keys WHERE environment_ref = $1 AND principal_ref = $2 \
             AND operation_id = $3 AND idem_key = $4 AND created_at < $5",
        )
        .bind(&scope.environment_ref)
        .bind(&scope.principal_ref)
        .bind(&scope.operation_id)
        .bind(&scope.key)
        .bind(now.millis() - retention_ms)
        .execute(self.writer())
        .await?;
        let inserted = sqlx::query(
            "INSERT INTO idempotency_keys (environment_ref, principal_ref, operation_id, idem_key, \
             fingerprint, state, created_at, locked_at) VALUES ($1, $2, $3, $4, $5, 'in_flight', $6, $6) \
             ON CONFLICT DO NOTHING",
        )
        .bind(&scope.environment_ref)
        .bind(&scope.principal_ref)
        .bind(&scope.operation_id)
        .bind(&scope.key)
        .bind(fingerprint)
        .bind(now.millis())
        .execute(self.writer())
        .await?;
        if inserted.rows_affected() == 1 {
            return Ok(Reservation::Reserved);
        }
        let row = sqlx::query(
            "SELECT fingerprint, state, status_code, response_body, response_etag, locked_at \
             FROM idempotency_keys WHERE environment_ref = $1 AND principal_ref = $2 \
             AND operation_id = $3 AND idem_key = $4",
        )
        .bind(&scope.environment_ref)
        .bind(&scope.principal_ref)
        .bind(&scope.operation_id)
        .bind(&scope.key)
        .fetch_optional(self.pool())
        .await?;
        let Some(row) = row else {
            // Released between our insert and select: the key is free again.
            return Ok(Reservation::InFlight);
        };
        if row.try_get::<String, _>("fingerprint")? != fingerprint {
            return Ok(Reservation::Mismatch);
        }
        if row.try_get::<String, _>("state")? == "done" {
            return Ok(Reservation::Replay(StoredResponse {
                status: row.try_get::<i64, _>("status_code")? as u16,
                body: row.try_get("response_body")?,
                etag: row.try_get("response_etag")?,
            }));
        }
        let locked_at: i64 = row.try_get("locked_at")?;
        if locked_at >= now.millis() - stale_after_ms {
            return Ok(Reservation::InFlight);
        }
        let taken = sqlx::query(
            "UPDATE idempotency_keys SET locked_at = $1 WHERE environment_ref = $2 \
             AND principal_ref = $3 AND operation_id = $4 AND idem_key = $5 \
             AND state = 'in_flight' AND locked_at = $6",
        )
        .bind(now.millis())
        .bind(&scope.environment_ref)
        .bind(&scope.principal_ref)
        .bind(&scope.operation_id)
        .bind(&scope.key)
        .bind(locked_at)
        .execute(self.writer())
        .await?;
        Ok(if taken.rows_affected() == 1 {
            Reservation::Reserved
        } else {
            Reservation::InFlight
        })
    }

    pub async fn complete_idempotency_key(
        &self,
        scope: &IdempotencyScope,
        response: &StoredResponse,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE idempotency_keys SET state = 'done', status_code = $1, response_body = $2, \
             response_etag = $3 WHERE environment_ref = $4 AND principal_ref = $5 \
             AND operation_id = $6 AND idem_key = $7",
        )
        .bind(response.status as i64)
        .bind(&response.body)
        .bind(response.etag.as_deref())
        .bind(&scope.environment_ref)
        .bind(&scope.principal_ref)
        .bind(&scope.operation_id)
        .bind(&scope.key)
        .execute(self.writer())
        .await?;
        Ok(())
    }

    pub async fn release_idempotency_key(
        &self,
        scope: &IdempotencyScope,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "DELETE FROM idempotency_keys WHERE environment_ref = $1 AND principal_ref = $2 \
             AND operation_id = $3 AND idem_key = $4 AND state = 'in_flight'",
        )
        .bind(&scope.environment_ref)
        .bind(&scope.principal_ref)
        .bind(&scope.operation_id)
        .bind(&scope.key)
        .execute(self.writer())
        .await?;
        Ok(())
    }

    /// Deletes records past retention; returns how many.
    pub async fn purge_idempotency_keys(&self, cutoff: Timestamp) -> Result<u64, StoreError> {
        let done = sqlx::query("DELETE FROM idempotency_keys WHERE created_at < $1")
            .bind(cutoff.millis())
            .execute(self.writer())
            .await?;
        Ok(done.rows_affected())
    }
}
