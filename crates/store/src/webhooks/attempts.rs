//! Attempts of deliveries: the rows of `webhook_attempts`, and the
//! success each delivery keeps on its own row (migration 0036). A success
//! ends its generation, and nearly every delivery ends in one at its first
//! try, so the settle that records it writes it into the delivery's row
//! (`dispatch::attempts`) instead of a row of its own with three index
//! entries. Every failure is a row, and so is a success whose delivery was
//! redriven after it (`write_out_kept`, run by `start_generation`) or that
//! was recorded before migration 0036.
//!
//! This module owns how both are read as one: a delivery's list of
//! attempts (its kept success first: it is the newest), an endpoint's
//! newest outcomes (its health) and when its run of failures began. It
//! never decides an attempt's outcome, and it never writes a success as a
//! row except when a redrive must keep it.

use super::deliveries::DeliveryRecord;
use super::Webhooks;
use crate::db::codec::to_json;
use crate::db::codec::{opt_ts, state};
use crate::db::page::{Page, PageRequest};
use crate::db::read;
use crate::db::tx::{int, text, Arg, Columns, WriteTx};
use crate::resource::{Resource, Scope};
use crate::StoreError;
use domain::webhook::AttemptStatus;
use domain::{Prefix, Ref, Timestamp};
use std::collections::HashMap;

/// The predicate of `webhook_deliveries_successes_by_endpoint` (migration
/// 0036), word for word: the delivery keeps its current generation's
/// success on its row.
pub const KEPT: &str = "success_duration_ms IS NOT NULL";

/// `Dispatch::endpoint_failing_since`'s statement: the endpoint (`$1`)'s
/// oldest failed (`$2`) attempt after its newest success, a succeeded
/// (`$3`) row or a kept success.
pub const FAILING_SINCE: &str = "SELECT MIN(started_at) FROM webhook_attempts \
     WHERE endpoint_ref = $1 AND status = $2 AND started_at > COALESCE((SELECT MAX(at) FROM \
     (SELECT MAX(started_at) AS at FROM webhook_attempts WHERE endpoint_ref = $1 AND status = $3 \
     UNION ALL SELECT MAX(last_attempt_at) AS at FROM webhook_deliveries \
     WHERE endpoint_ref = $1 AND success_duration_ms IS NOT NULL) AS s), -1)";

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

impl Resource for AttemptRecord {
    const TABLE: &'static str = "webhook_attempts";
    const REF_COLUMN: &'static str = "attempt_ref";
    const PARENT_COLUMN: Option<&'static str> = Some("delivery_ref");

    fn decode(row: &dyn Columns) -> Result<Self, StoreError> {
        attempt_from_row(row)
    }
}

fn attempt_from_row(row: &dyn Columns) -> Result<AttemptRecord, StoreError> {
    Ok(AttemptRecord {
        attempt_ref: Ref::from_trusted(text(row, "attempt_ref")?),
        delivery_ref: Ref::from_trusted(text(row, "delivery_ref")?),
        generation: int(row, "generation")? as u32,
        attempt_number: int(row, "attempt_number")? as u32,
        status: state(row, "status", AttemptStatus::parse)?,
        response_status: row.int("response_status")?.map(|s| s as u16),
        error: row.text("error")?,
        response_body_excerpt: row.text("response_body_excerpt")?,
        duration_ms: int(row, "duration_ms")?,
        started_at: Timestamp::from_millis(int(row, "started_at")?),
        next_attempt_at: opt_ts(row, "next_attempt_at")?,
        created_at: Timestamp::from_millis(int(row, "created_at")?),
    })
}

/// A delivery's success kept on its row: what its attempt had of its own.
/// The rest is the delivery's: its reference, generation, attempt count
/// (the attempt's number) and last attempt time (the attempt's start).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptSuccess {
    pub response_status: Option<u16>,
    pub duration_ms: i64,
    pub response_body_excerpt: Option<String>,
}

/// The kept success of a delivery row read whole, if it keeps one.
pub(crate) fn kept_from_row(row: &dyn Columns) -> Result<Option<KeptSuccess>, StoreError> {
    let Some(duration_ms) = row.int("success_duration_ms")? else {
        return Ok(None);
    };
    Ok(Some(KeptSuccess {
        response_status: row.int("success_status")?.map(|s| s as u16),
        duration_ms,
        response_body_excerpt: row.text("success_excerpt")?,
    }))
}

impl DeliveryRecord {
    /// The success the delivery keeps on its row, as the attempt it was.
    /// Its reference is derived from the delivery's and its generation, so
    /// every read shows the same one, and so does the row a redrive writes
    /// it out as.
    pub fn kept_attempt(&self) -> Option<AttemptRecord> {
        let kept = self.kept_success.as_ref()?;
        let started_at = self.last_attempt_at?;
        let seed = format!("{}/{}", self.delivery_ref, self.generation);
        Some(AttemptRecord {
            attempt_ref: Ref::derived(Prefix::DeliveryAttempt, started_at.millis(), &seed),
            delivery_ref: self.delivery_ref.clone(),
            generation: self.generation,
            attempt_number: self.attempt_count,
            status: AttemptStatus::Succeeded,
            response_status: kept.response_status,
            error: None,
            response_body_excerpt: kept.response_body_excerpt.clone(),
            duration_ms: kept.duration_ms,
            started_at,
            next_attempt_at: None,
            created_at: Timestamp::from_millis(started_at.millis() + kept.duration_ms),
        })
    }
}

/// Writes the success `delivery` keeps (as read) out as a row of
/// `webhook_attempts`, for a redrive that is about to start its next
/// generation and clear it (`deliveries::start_generation`, in the same
/// unit of work). Nothing when it keeps none.
pub(crate) async fn write_out_kept(
    tx: &mut WriteTx,
    delivery: &DeliveryRecord,
) -> Result<(), StoreError> {
    let Some(a) = delivery.kept_attempt() else {
        return Ok(());
    };
    tx.execute(
        "INSERT INTO webhook_attempts (attempt_ref, delivery_ref, environment_ref, endpoint_ref, \
         generation, attempt_number, status, response_status, error, response_body_excerpt, \
         duration_ms, started_at, next_attempt_at, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, NULL, $9, $10, $11, NULL, $12)",
        &[
            a.attempt_ref.as_str().into(),
            a.delivery_ref.as_str().into(),
            delivery.environment_ref.as_str().into(),
            delivery.endpoint_ref.as_str().into(),
            i64::from(a.generation).into(),
            i64::from(a.attempt_number).into(),
            a.status.as_str().into(),
            a.response_status.map(i64::from).into(),
            a.response_body_excerpt.as_deref().into(),
            a.duration_ms.into(),
            a.started_at.millis().into(),
            a.created_at.millis().into(),
        ],
    )
    .await?;
    Ok(())
}

impl Webhooks<'_> {
    /// A page of the delivery's attempts, newest first: its kept success,
    /// if any, then its rows. The kept success is the newest attempt, so it
    /// heads the first page, and a cursor that ends on it goes on with the
    /// newest row.
    pub async fn list_attempts(
        &self,
        environment_ref: &Ref,
        delivery: &DeliveryRecord,
        page: &PageRequest,
    ) -> Result<Page<AttemptRecord>, StoreError> {
        let scope = Scope::under(environment_ref, &delivery.delivery_ref);
        let Some(kept) = delivery.kept_attempt() else {
            return self.0.list(scope, &[], page).await;
        };
        match &page.after {
            None => {
                let rest = PageRequest {
                    limit: page.limit.saturating_sub(1),
                    after: None,
                };
                let rows: Page<AttemptRecord> = self.0.list(scope, &[], &rest).await?;
                let mut items = Vec::with_capacity(rows.items.len() + 1);
                items.push(kept);
                items.extend(rows.items);
                Ok(Page {
                    items,
                    has_more: rows.has_more,
                })
            }
            Some((_, key)) if key == kept.attempt_ref.as_str() => {
                let from_top = PageRequest {
                    limit: page.limit,
                    after: None,
                };
                self.0.list(scope, &[], &from_top).await
            }
            Some(_) => self.0.list(scope, &[], page).await,
        }
    }

    /// Outcomes of the endpoint's newest attempts, newest first.
    pub async fn recent_attempt_outcomes(
        &self,
        endpoint_ref: &Ref,
        limit: u32,
    ) -> Result<Vec<AttemptStatus>, StoreError> {
        let mut of = self
            .recent_attempt_outcomes_of(&[endpoint_ref], limit)
            .await?;
        Ok(of.remove(endpoint_ref.as_str()).unwrap_or_default())
    }

    /// `recent_attempt_outcomes` of each of `endpoints` (those without an
    /// attempt are left out), in one statement per chunk of endpoints
    /// rather than one each: per endpoint, the newest failed rows, the
    /// newest succeeded rows and the newest kept successes are merged, each
    /// an index seek (`webhook_attempts_by_endpoint_status`,
    /// `webhook_deliveries_successes_by_endpoint`), so the cost follows the
    /// endpoints read, never the tables' sizes. On PostgreSQL the statement's text is the same for
    /// every chunk (`recent_outcomes_lateral`), so it is planned once per
    /// connection, not once per call.
    pub async fn recent_attempt_outcomes_of(
        &self,
        endpoints: &[&Ref],
        limit: u32,
    ) -> Result<HashMap<String, Vec<AttemptStatus>>, StoreError> {
        let mut outcomes: HashMap<String, Vec<(i64, String, AttemptStatus)>> = HashMap::new();
        let postgres = self.0.backend() == crate::Backend::Postgres;
        let chunk_len = if postgres {
            OUTCOME_ENDPOINTS_LATERAL
        } else {
            OUTCOME_ENDPOINTS
        };
        for chunk in endpoints.chunks(chunk_len) {
            let refs_json =
                postgres.then(|| to_json(&chunk.iter().map(|e| e.as_str()).collect::<Vec<_>>()));
            let mut args: Vec<Arg> = vec![
                AttemptStatus::Succeeded.as_str().into(),
                AttemptStatus::Failed.as_str().into(),
            ];
            let sql = if let Some(refs) = &refs_json {
                args.push(refs.as_str().into());
                recent_outcomes_lateral(limit)
            } else {
                args.extend(chunk.iter().map(|e| Arg::from(e.as_str())));
                recent_outcomes_sql(chunk.len(), limit)
            };
            let rows = read::all(self.pool(), &sql, &args, |r| {
                let status = state(r, "status", AttemptStatus::parse)?;
                Ok((
                    text(r, "endpoint_ref")?,
                    int(r, "started_at")?,
                    text(r, "attempt_ref")?,
                    status,
                ))
            })
            .await?;
            for (endpoint, started_at, attempt_ref, status) in rows {
                outcomes
                    .entry(endpoint)
                    .or_default()
                    .push((started_at, attempt_ref, status));
            }
        }
        Ok(outcomes
            .into_iter()
            .map(|(endpoint, mut attempts)| {
                // Newest first; the merge's own order is not kept by the
                // union around it.
                attempts.sort_unstable_by(|a, b| (b.0, &b.1).cmp(&(a.0, &a.1)));
                attempts.truncate(limit as usize);
                (endpoint, attempts.into_iter().map(|(_, _, s)| s).collect())
            })
            .collect())
    }
}

/// Endpoints per statement of `recent_attempt_outcomes_of` on SQLite: three
/// compound terms each inside, one outside, far below SQLite's limit of
/// 500 terms per compound statement.
const OUTCOME_ENDPOINTS: usize = 100;

/// Endpoints per statement of `recent_attempt_outcomes_of` on PostgreSQL:
/// bounds the rows one statement returns (`limit` per endpoint at most).
const OUTCOME_ENDPOINTS_LATERAL: usize = 1_000;

/// `recent_outcomes_sql` for PostgreSQL, whatever the number of endpoints:
/// they come as one JSON array of references (`$3`), each joined
/// laterally to the merge of its newest succeeded (`$1`) and failed (`$2`)
/// attempts, rows and kept successes. The text never changes, whatever
/// the endpoints: one whose text grew with them, two subqueries each, cost
/// the planner more than the reads it planned, at every chunk of every
/// gauge refresh (`tests/benches/sql/health_gauge.sh` times both).
pub fn recent_outcomes_lateral(limit: u32) -> String {
    let newest = |status: &str| {
        format!(
            "(SELECT status, started_at, attempt_ref FROM webhook_attempts \
             WHERE endpoint_ref = e.endpoint_ref AND status = {status} \
             ORDER BY started_at DESC, attempt_ref DESC LIMIT {limit})"
        )
    };
    format!(
        "SELECT e.endpoint_ref, a.status, a.started_at, a.attempt_ref \
         FROM json_array_elements_text($3::json) AS e (endpoint_ref) \
         CROSS JOIN LATERAL ({} UNION ALL {} UNION ALL ({}) \
         ORDER BY started_at DESC, attempt_ref DESC LIMIT {limit}) AS a",
        newest("$1"),
        newest("$2"),
        newest_kept("", "CAST($1 AS TEXT)", "e.endpoint_ref", limit),
    )
}

/// The newest `limit` attempts of each of `n` endpoints (`$3`…), each the
/// merge of its newest succeeded (`$1`) and failed (`$2`) rows and its
/// newest kept successes: SQLite's statement, which has no lateral join.
pub fn recent_outcomes_sql(n: usize, limit: u32) -> String {
    let newest = |endpoint: usize, status: &str, alias: &str| {
        format!(
            "SELECT * FROM (SELECT endpoint_ref, status, started_at, attempt_ref \
             FROM webhook_attempts WHERE endpoint_ref = ${endpoint} AND status = {status} \
             ORDER BY started_at DESC, attempt_ref DESC LIMIT {limit}) AS {alias}"
        )
    };
    (0..n)
        .map(|i| {
            let p = i + 3;
            format!(
                "SELECT * FROM ({} UNION ALL {} UNION ALL SELECT * FROM ({}) AS k{i} \
                 ORDER BY started_at DESC, attempt_ref DESC LIMIT {limit}) AS e{i}",
                newest(p, "$1", &format!("s{i}")),
                newest(p, "$2", &format!("f{i}")),
                newest_kept("endpoint_ref, ", "$1", &format!("${p}"), limit),
            )
        })
        .collect::<Vec<_>>()
        .join(" UNION ALL ")
}

/// The statement of an endpoint's (`endpoint`) newest `limit` kept
/// successes as outcomes: `columns` first, then `status`, `started_at`,
/// and the delivery's reference as `attempt_ref` (it only breaks ties):
/// `webhook_deliveries_successes_by_endpoint`, whose predicate is in the
/// text word for word.
fn newest_kept(columns: &str, status: &str, endpoint: &str, limit: u32) -> String {
    format!(
        "SELECT {columns}{status} AS status, last_attempt_at AS started_at, delivery_ref AS attempt_ref \
         FROM webhook_deliveries WHERE endpoint_ref = {endpoint} AND {KEPT} \
         ORDER BY last_attempt_at DESC LIMIT {limit}"
    )
}
