//! Deliveries (one notification to one endpoint, in generations) and their
//! attempts.

use super::to_json;
use crate::db::tx::Arg as Value;
use crate::db::tx::{int, text, Columns, WriteTx};
use crate::db::page::{fetch_page, Arg, Page, PageRequest};
use crate::admin::service_accounts::opt_ts;
use crate::{Store, StoreError};
use domain::webhook::{AttemptStatus, BodyStatus, DeliveryStatus};
use domain::{Prefix, Ref, Timestamp};
use sqlx::Row;

#[derive(Debug, Clone)]
pub struct DeliveryRecord {
    pub delivery_ref: Ref,
    pub environment_ref: Ref,
    pub endpoint_ref: Ref,
    pub event_ref: Ref,
    pub public_event_type: String,
    pub dto_version: u32,
    pub status: DeliveryStatus,
    pub diagnostic: bool,
    pub generation: u32,
    /// Attempts made in the current generation.
    pub attempt_count: u32,
    pub next_attempt_at: Option<Timestamp>,
    pub last_attempt_at: Option<Timestamp>,
    pub occurred_at: Timestamp,
    /// The event's `data` as published, before shaping, as JSON text: only
    /// an attempt reads it, and it parses it on its own task rather than
    /// the claim loop parsing a whole batch.
    pub event_data: String,
    /// Every subscription that matched, as JSON text (an array): only the
    /// API's body view reads it, so a claim does not parse it.
    pub match_reasons: String,
    pub body_status: BodyStatus,
    /// The body as last delivered (or as it will be delivered), verbatim.
    pub payload: Option<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub version: i64,
}

#[derive(Debug, Clone)]
pub struct NewDelivery {
    pub environment_ref: Ref,
    pub endpoint_ref: Ref,
    pub event_ref: Ref,
    pub public_event_type: String,
    pub dto_version: u32,
    pub status: DeliveryStatus,
    pub diagnostic: bool,
    pub occurred_at: Timestamp,
    /// The event's data in the delivery's dto version, as JSON text.
    pub event_data: String,
    pub match_reasons: serde_json::Value,
    pub payload: String,
}

#[derive(Debug, Clone)]
pub struct AttemptRecord {
    pub attempt_ref: Ref,
    pub delivery_ref: Ref,
    pub generation: u32,
    pub attempt_number: u32,
    pub status: AttemptStatus,
    pub response_status: Option<u16>,
    pub error: Option<String>,
    pub response_body_excerpt: Option<String>,
    pub duration_ms: i64,
    pub started_at: Timestamp,
    pub next_attempt_at: Option<Timestamp>,
    pub created_at: Timestamp,
}

pub(crate) fn delivery_from_row(row: &impl Columns) -> Result<DeliveryRecord, StoreError> {
    let status = text(row, "status")?;
    let body_status = text(row, "body_status")?;
    Ok(DeliveryRecord {
        delivery_ref: Ref::from_trusted(text(row, "delivery_ref")?),
        environment_ref: Ref::from_trusted(text(row, "environment_ref")?),
        endpoint_ref: Ref::from_trusted(text(row, "endpoint_ref")?),
        event_ref: Ref::from_trusted(text(row, "event_ref")?),
        public_event_type: text(row, "public_event_type")?,
        dto_version: int(row, "dto_version")? as u32,
        status: DeliveryStatus::parse(&status).ok_or_else(|| StoreError::Corrupt(status))?,
        diagnostic: int(row, "diagnostic")? != 0,
        generation: int(row, "generation")? as u32,
        attempt_count: int(row, "attempt_count")? as u32,
        next_attempt_at: opt_ts(row, "next_attempt_at")?,
        last_attempt_at: opt_ts(row, "last_attempt_at")?,
        occurred_at: Timestamp::from_millis(int(row, "occurred_at")?),
        event_data: text(row, "event_data")?,
        match_reasons: text(row, "match_reasons")?,
        body_status: BodyStatus::parse(&body_status)
            .ok_or_else(|| StoreError::Corrupt(body_status))?,
        payload: row.text("payload")?,
        created_at: Timestamp::from_millis(int(row, "created_at")?),
        updated_at: Timestamp::from_millis(int(row, "updated_at")?),
        version: int(row, "version")?,
    })
}

fn attempt_from_row(row: &sqlx::any::AnyRow) -> Result<AttemptRecord, StoreError> {
    let status: String = row.try_get("status")?;
    Ok(AttemptRecord {
        attempt_ref: Ref::from_trusted(row.try_get("attempt_ref")?),
        delivery_ref: Ref::from_trusted(row.try_get("delivery_ref")?),
        generation: row.try_get::<i64, _>("generation")? as u32,
        attempt_number: row.try_get::<i64, _>("attempt_number")? as u32,
        status: AttemptStatus::parse(&status).ok_or_else(|| StoreError::Corrupt(status))?,
        response_status: row
            .try_get::<Option<i64>, _>("response_status")?
            .map(|s| s as u16),
        error: row.try_get("error")?,
        response_body_excerpt: row.try_get("response_body_excerpt")?,
        duration_ms: row.try_get("duration_ms")?,
        started_at: Timestamp::from_millis(row.try_get("started_at")?),
        next_attempt_at: opt_ts(row, "next_attempt_at")?,
        created_at: Timestamp::from_millis(row.try_get("created_at")?),
    })
}

impl Store {
    /// Records a new delivery (generation 1, due now unless held) and marks
    /// its endpoint's url immutable, in one transaction. `Duplicate` when
    /// the (event, endpoint, dto_version) delivery exists already.
    pub async fn create_delivery(&self, new: NewDelivery) -> Result<DeliveryRecord, StoreError> {
        let mut tx = self.write_tx().await?;
        let now = Timestamp::now().millis();
        let row = insert_delivery(&mut tx, &new, Some(&new.payload), now)
            .await?
            .ok_or(StoreError::Duplicate)?;
        let mut tx = WriteTx::new(crate::db::tx::Conn::Sqlx(tx), self.backend(), Some(self.wake()));
        mark_url_immutable(&mut tx, self.backend(), &[new.endpoint_ref.as_str()], now).await?;
        let due = new.status == DeliveryStatus::Pending;
        if due {
            tx.signal_due().await?;
        }
        tx.commit().await?;
        if due {
            self.due_signalled();
        }
        delivery_from_row(&row)
    }

    pub async fn delivery(
        &self,
        environment_ref: &Ref,
        delivery_ref: &Ref,
    ) -> Result<DeliveryRecord, StoreError> {
        let row = sqlx::query(
            "SELECT * FROM webhook_deliveries WHERE environment_ref = $1 AND delivery_ref = $2",
        )
        .bind(environment_ref.as_str())
        .bind(delivery_ref.as_str())
        .fetch_one(self.pool())
        .await?;
        delivery_from_row(&row)
    }

    pub async fn list_deliveries(
        &self,
        environment_ref: &Ref,
        endpoint_ref: &Ref,
        page: &PageRequest,
    ) -> Result<Page<DeliveryRecord>, StoreError> {
        let args = vec![
            Arg::Text(environment_ref.to_string()),
            Arg::Text(endpoint_ref.to_string()),
        ];
        let filter = "environment_ref = $1 AND endpoint_ref = $2";
        fetch_page(
            self.pool(),
            "webhook_deliveries",
            "delivery_ref",
            filter,
            args,
            page,
            delivery_from_row,
        )
        .await
    }

    pub async fn list_attempts(
        &self,
        environment_ref: &Ref,
        delivery_ref: &Ref,
        page: &PageRequest,
    ) -> Result<Page<AttemptRecord>, StoreError> {
        let args = vec![
            Arg::Text(environment_ref.to_string()),
            Arg::Text(delivery_ref.to_string()),
        ];
        let filter = "environment_ref = $1 AND delivery_ref = $2";
        fetch_page(
            self.pool(),
            "webhook_attempts",
            "attempt_ref",
            filter,
            args,
            page,
            attempt_from_row,
        )
        .await
    }

    /// Outcomes of the endpoint's newest attempts, newest first.
    pub async fn recent_attempt_outcomes(
        &self,
        endpoint_ref: &Ref,
        limit: u32,
    ) -> Result<Vec<AttemptStatus>, StoreError> {
        // The newest of each status, merged: each side is an index seek on
        // (endpoint_ref, status, started_at).
        let newest = |status: AttemptStatus| {
            format!(
                "SELECT * FROM (SELECT status, started_at, attempt_ref FROM webhook_attempts \
                 WHERE endpoint_ref = $1 AND status = '{}' \
                 ORDER BY started_at DESC, attempt_ref DESC LIMIT {limit}) AS {0}",
                status.as_str()
            )
        };
        let rows = sqlx::query(&format!(
            "{} UNION ALL {} ORDER BY started_at DESC, attempt_ref DESC LIMIT {limit}",
            newest(AttemptStatus::Succeeded),
            newest(AttemptStatus::Failed)
        ))
        .bind(endpoint_ref.as_str())
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| {
                let s: String = r.try_get("status")?;
                AttemptStatus::parse(&s).ok_or(StoreError::Corrupt(s))
            })
            .collect()
    }

    /// The status of the endpoint's newest delivery.
    pub async fn latest_delivery_status(
        &self,
        endpoint_ref: &Ref,
    ) -> Result<Option<DeliveryStatus>, StoreError> {
        let row = sqlx::query(
            "SELECT status FROM webhook_deliveries WHERE endpoint_ref = $1 \
             ORDER BY created_at DESC, delivery_ref DESC LIMIT 1",
        )
        .bind(endpoint_ref.as_str())
        .fetch_optional(self.pool())
        .await?;
        match row {
            None => Ok(None),
            Some(r) => {
                let s: String = r.try_get("status")?;
                DeliveryStatus::parse(&s)
                    .map(Some)
                    .ok_or(StoreError::Corrupt(s))
            }
        }
    }

    /// Starts the next generation of a delivery in `status` (pending or
    /// held), if the delivery is still at its read version.
    pub async fn start_generation(
        &self,
        current: &DeliveryRecord,
        status: DeliveryStatus,
    ) -> Result<DeliveryRecord, StoreError> {
        let now = Timestamp::now().millis();
        let due = (status == DeliveryStatus::Pending).then_some(now);
        let row = sqlx::query(
            "UPDATE webhook_deliveries SET generation = generation + 1, attempt_count = 0, status = $1, \
             next_attempt_at = $2, updated_at = $3, version = version + 1 \
             WHERE delivery_ref = $4 AND version = $5 RETURNING *",
        )
        .bind(status.as_str())
        .bind(due)
        .bind(now)
        .bind(current.delivery_ref.as_str())
        .bind(current.version)
        .fetch_optional(self.writer())
        .await?
        .ok_or(StoreError::Conflict)?;
        if due.is_some() {
            // The generation stands even if the signal is lost: the
            // schedule's periodic pass finds it.
            if let Err(e) = self.signal_due_now().await {
                tracing::warn!(error = %e, "signalling a redriven delivery failed");
            }
        }
        delivery_from_row(&row)
    }
}

/// Inserts a delivery unless its (event, endpoint, dto_version) exists; the
/// new row, or `None` if it existed. The caller marks the endpoint's url
/// immutable (`mark_url_immutable`) in the same transaction.
pub(crate) async fn insert_delivery(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    new: &NewDelivery,
    payload: Option<&str>,
    now: i64,
) -> Result<Option<sqlx::any::AnyRow>, StoreError> {
    let due = (new.status == DeliveryStatus::Pending).then_some(now);
    let row = sqlx::query(
        "INSERT INTO webhook_deliveries (delivery_ref, environment_ref, endpoint_ref, event_ref, \
         public_event_type, dto_version, status, diagnostic, generation, attempt_count, \
         next_attempt_at, occurred_at, event_data, match_reasons, body_status, payload, \
         created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 1, 0, $9, $10, $11, $12, \
         $13, $14, $15, $15) ON CONFLICT (event_ref, endpoint_ref, dto_version) DO NOTHING RETURNING *",
    )
    .bind(Ref::generate(Prefix::WebhookDelivery).into_string())
    .bind(new.environment_ref.as_str())
    .bind(new.endpoint_ref.as_str())
    .bind(new.event_ref.as_str())
    .bind(&new.public_event_type)
    .bind(new.dto_version as i64)
    .bind(new.status.as_str())
    .bind(new.diagnostic as i64)
    .bind(due)
    .bind(new.occurred_at.millis())
    .bind(&new.event_data)
    .bind(to_json(&new.match_reasons))
    .bind(BodyStatus::Available.as_str())
    .bind(payload)
    .bind(now)
    .fetch_optional(&mut **tx)
    .await?;
    Ok(row)
}

/// Fixes endpoints' urls once they have a delivery (`url_immutable`), in
/// one statement for all the endpoints a write touched.
pub(crate) async fn mark_url_immutable(
    tx: &mut WriteTx,
    backend: crate::Backend,
    endpoint_refs: &[&str],
    now: i64,
) -> Result<(), StoreError> {
    if endpoint_refs.is_empty() {
        return Ok(());
    }
    let mut marks = crate::db::marks::Marks::new(backend);
    let sql = format!(
        "UPDATE webhook_endpoints SET url_immutable = 1, version = version + 1, updated_at = {} \
         WHERE url_immutable = 0 AND endpoint_ref IN ({})",
        marks.next(),
        marks.list(endpoint_refs.len())
    );
    let mut args: Vec<Value> = vec![now.into()];
    args.extend(endpoint_refs.iter().map(|r| Value::from(*r)));
    tx.execute(&sql, &args).await?;
    Ok(())
}
