//! What the dispatcher persists: the embedded event queue (one row per
//! `event_ref`, so a duplicate is processed once), dead letters, fan-out,
//! delivery leases, and attempt results.
//!
//! The store is the source of truth for every delivery: a lease is only a
//! time-limited claim (`lease_owner`, `lease_until`) that expires by itself
//! when a worker dies, and an attempt is recorded together with the
//! delivery's next state in one transaction.

pub mod fanout;
pub mod intake;
pub mod outbox;
pub mod projection;
pub mod signals;

use crate::db::codec::{json_col, to_json};
use crate::db::marks::Marks;
use crate::db::read;
use crate::db::tx::{text, Arg, Columns, WriteTx};
use crate::dispatch::signals::signal_due;
use crate::webhooks::deliveries::{
    delivery_from_row, mark_url_immutable, DeliveryRecord, NewDelivery,
};
use crate::{Backend, Store, StoreError};
use domain::webhook::{AttemptStatus, BodyStatus, DeliveryStatus, EndpointStatus};
use domain::{Prefix, Ref, Timestamp};
use sqlx::Row;

pub use domain::webhook::event::{EventData, EventRecord};

/// The outcome of one attempt and the delivery's state after it.
#[derive(Debug, Clone)]
pub struct AttemptResult {
    pub delivery_ref: Ref,
    pub environment_ref: Ref,
    pub endpoint_ref: Ref,
    pub generation: u32,
    pub attempt_number: u32,
    pub status: AttemptStatus,
    pub response_status: Option<u16>,
    pub error: Option<String>,
    pub response_body_excerpt: Option<String>,
    pub duration_ms: i64,
    pub started_at: Timestamp,
    /// When the next attempt is due, if there is one.
    pub next_attempt_at: Option<Timestamp>,
    pub delivery_status: DeliveryStatus,
    /// The body exactly as sent.
    pub payload: String,
    /// Disable the endpoint (410 Gone, or failing for too long).
    pub disable_endpoint: bool,
}

/// An event from a row of `events` or `outbox` (the same columns).
pub(crate) fn event_from_row(row: &sqlx::any::AnyRow) -> Result<EventRecord, StoreError> {
    Ok(EventRecord {
        event_ref: Ref::from_trusted(row.try_get("event_ref")?),
        environment_ref: Ref::from_trusted(row.try_get("environment_ref")?),
        public_event_type: row.try_get("public_event_type")?,
        occurred_at: Timestamp::from_millis(row.try_get("occurred_at")?),
        scope: json_col(row, "scope")?,
        data: EventData::parse(row.try_get("data")?).map_err(StoreError::Corrupt)?,
    })
}

/// Attempt rows per INSERT statement (14 parameters each, well under
/// SQLite's and PostgreSQL's parameter limits).
const ATTEMPT_ROWS: usize = 50;
/// Delivery rows per INSERT statement (16 parameters each).
const DELIVERY_ROWS: usize = 50;
/// Deliveries per UPDATE statement when recording attempts (7 each).
const UPDATE_ROWS: usize = 50;

impl Store {
    /// Keeps a message that could not be parsed or validated, with why.
    pub async fn dead_letter(&self, body: &str, reason: &str) -> Result<(), StoreError> {
        let dead_event_id = Ref::generate(Prefix::Event)
            .as_str()
            .replacen("evt_", "dead_", 1);
        read::execute(
            self.writer(),
            "INSERT INTO dead_events (dead_event_id, body, reason, received_at) VALUES ($1, $2, $3, $4)",
            &[
                (&dead_event_id).into(),
                body.into(),
                reason.into(),
                Timestamp::now().millis().into(),
            ],
        )
        .await?;
        Ok(())
    }

    pub async fn dead_letter_count(&self) -> Result<i64, StoreError> {
        read::scalar_int(self.pool(), "SELECT COUNT(*) FROM dead_events", &[])
            .await?
            .ok_or_else(|| StoreError::Corrupt("COUNT(*) was null".into()))
    }

    /// The oldest events not fanned out yet.
    pub async fn pending_events(&self, limit: u32) -> Result<Vec<EventRecord>, StoreError> {
        read::all(
            self.pool(),
            &format!(
                "SELECT * FROM events WHERE status = 'pending' ORDER BY received_at, event_ref LIMIT {limit}"
            ),
            &[],
            event_from_row,
        )
        .await
    }

    /// Records events' deliveries and marks the events processed (which
    /// drops their data: the deliveries carry it), in one transaction. A delivery that exists already (same event, endpoint and
    /// dto version) is left as it is, so fanning out twice is harmless.
    pub async fn fan_out(&self, events: &[(Ref, Vec<NewDelivery>)]) -> Result<usize, StoreError> {
        let (store, events) = (self.clone(), events.to_vec());
        self.on_lane(async move {
            let mut tx = store.begin_write().await?;
            let created = store.fan_out_in(&mut tx, &events).await?;
            if created > 0 {
                signal_due(&mut tx).await?;
            }
            tx.commit().await?;
            Ok(created)
        })
        .await
    }

    /// `fan_out`'s writes, inside `tx`.
    pub(crate) async fn fan_out_in(
        &self,
        tx: &mut WriteTx,
        events: &[(Ref, Vec<NewDelivery>)],
    ) -> Result<usize, StoreError> {
        let now = Timestamp::now().millis();
        let rows: Vec<DeliveryRow> = events
            .iter()
            .flat_map(|(_, d)| d.iter().map(DeliveryRow::unleased))
            .collect();
        let created = insert_deliveries(tx, self.backend(), &rows, now, &Default::default())
            .await?
            .len();
        for chunk in events.chunks(DELIVERY_ROWS * 10) {
            let mut marks = Marks::new(self.backend());
            let sql = format!(
                "UPDATE events SET status = 'processed', processed_at = {}, data = NULL \
                 WHERE event_ref IN ({})",
                marks.next(),
                marks.list(chunk.len())
            );
            let mut args: Vec<Arg> = vec![now.into()];
            args.extend(chunk.iter().map(|(r, _)| Arg::from(r.as_str())));
            tx.execute(&sql, &args).await?;
        }
        Ok(created)
    }

    /// Leases up to `limit` due deliveries to `owner` until `lease_until`.
    /// A lease that expired (its worker died) is claimable again.
    ///
    /// The subquery alone applies the claimable condition
    /// (`statements::claimable`); the outer statement filters by reference
    /// only, since with the condition repeated there SQLite plans a scan of
    /// every pending row, however few are due. The subquery's rows cannot
    /// change before the update: SQLite's write transaction is exclusive,
    /// and PostgreSQL locks them (`FOR UPDATE SKIP LOCKED`, whose conditions
    /// are re-checked on the locked rows).
    pub async fn claim_due_deliveries(
        &self,
        owner: &str,
        now: Timestamp,
        lease_until: Timestamp,
        limit: u32,
    ) -> Result<Vec<DeliveryRecord>, StoreError> {
        let lock = match self.backend() {
            Backend::Postgres => " FOR UPDATE SKIP LOCKED",
            Backend::Sqlite => "",
        };
        // An idle dispatcher polls often: finding nothing must not take the
        // writer (SQLite has one) from the writes that are waiting for it.
        let due = read::optional(
            self.pool(),
            &format!(
                "SELECT 1 FROM webhook_deliveries WHERE {} LIMIT 1",
                statements::claimable("$1", "$1")
            ),
            &[now.millis().into()],
            |row| Ok(row.try_get::<i64, _>(0)?),
        )
        .await?;
        if due.is_none() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "UPDATE webhook_deliveries SET lease_owner = $1, lease_until = $2 \
             WHERE delivery_ref IN \
             (SELECT delivery_ref FROM webhook_deliveries WHERE {} \
              ORDER BY next_attempt_at LIMIT {limit}{lock}) \
             RETURNING *",
            statements::claimable("$3", "$3")
        );
        let (store, owner) = (self.clone(), owner.to_owned());
        self.on_lane(async move {
            let mut tx = store.begin_write().await?;
            let args = [
                owner.as_str().into(),
                lease_until.millis().into(),
                now.millis().into(),
            ];
            let rows = tx.fetch(&sql, &args).await?;
            tx.commit().await?;
            Ok(rows)
        })
        .await?
        // Decoded here, not on the lane, which has the next write to run.
        .iter()
        .map(delivery_from_row)
        .collect()
    }

    /// Gives a leased delivery back without an attempt: due again at `due`,
    /// or held when its endpoint is not active.
    pub async fn release_delivery(
        &self,
        owner: &str,
        delivery_ref: &Ref,
        due: Timestamp,
        hold: bool,
    ) -> Result<(), StoreError> {
        self.release_deliveries(owner, &[(delivery_ref.clone(), (!hold).then_some(due))])
            .await
    }

    /// Gives leased deliveries back without an attempt, each due again at
    /// its time or, with none, held (its endpoint is not active); one
    /// statement per 100. A delivery whose lease `owner` lost is left alone.
    pub async fn release_deliveries(
        &self,
        owner: &str,
        releases: &[(Ref, Option<Timestamp>)],
    ) -> Result<(), StoreError> {
        let (store, owner, releases) = (self.clone(), owner.to_owned(), releases.to_vec());
        self.on_lane(async move { store.release_on_lane(&owner, &releases).await })
            .await
    }

    async fn release_on_lane(
        &self,
        owner: &str,
        releases: &[(Ref, Option<Timestamp>)],
    ) -> Result<(), StoreError> {
        let mut tx = self.begin_write().await?;
        by_primary_key(&mut tx, self.backend()).await?;
        for chunk in releases.chunks(UPDATE_ROWS * 2) {
            let mut marks = Marks::new(self.backend());
            let rows: Vec<String> = (0..chunk.len())
                .map(|_| {
                    let [a, b, c] = std::array::from_fn(|_| marks.next());
                    format!("(CAST({a} AS TEXT), CAST({b} AS TEXT), CAST({c} AS BIGINT))")
                })
                .collect();
            let sql = format!(
                "WITH r (delivery_ref, status, next_attempt_at) AS (VALUES {}) \
                 UPDATE webhook_deliveries SET status = r.status, next_attempt_at = r.next_attempt_at, \
                 lease_owner = NULL, lease_until = NULL, \
                 version = webhook_deliveries.version + \
                 CASE WHEN webhook_deliveries.status = r.status THEN 0 ELSE 1 END \
                 FROM r WHERE webhook_deliveries.delivery_ref = r.delivery_ref \
                 AND webhook_deliveries.lease_owner = {}",
                rows.join(", "),
                marks.next()
            );
            let mut args: Vec<Arg> = Vec::with_capacity(chunk.len() * 3 + 1);
            for (delivery_ref, due) in chunk {
                let status = match due {
                    Some(_) => DeliveryStatus::Pending,
                    None => DeliveryStatus::Held,
                };
                args.push(delivery_ref.as_str().into());
                args.push(status.as_str().into());
                args.push(due.map(Timestamp::millis).into());
            }
            args.push(owner.into());
            tx.execute(&sql, &args).await?;
        }
        tx.commit().await
    }

    /// Records attempts and their deliveries' next states in one
    /// transaction. A result whose lease was lost (expired and taken by
    /// another worker) is dropped; returns how many were recorded.
    pub async fn record_attempts(
        &self,
        owner: &str,
        results: &[AttemptResult],
    ) -> Result<usize, StoreError> {
        let (store, owner, results) = (self.clone(), owner.to_owned(), results.to_vec());
        self.on_lane(async move { store.record_on_lane(&owner, &results).await })
            .await
    }

    async fn record_on_lane(
        &self,
        owner: &str,
        results: &[AttemptResult],
    ) -> Result<usize, StoreError> {
        let now = Timestamp::now().millis();
        // A delivery has one lease, so one result each; a repeated one
        // would have found the lease gone, and is dropped as it was then.
        let mut seen = std::collections::HashSet::new();
        let unique: Vec<&AttemptResult> = results
            .iter()
            .filter(|r| seen.insert(r.delivery_ref.as_str()))
            .collect();
        let attempt_refs: Vec<Ref> = (0..unique.len())
            .map(|_| Ref::generate(Prefix::DeliveryAttempt))
            .collect();
        let mut tx = self.begin_write().await?;
        by_primary_key(&mut tx, self.backend()).await?;
        let mut recorded: Vec<(&AttemptResult, &Ref)> = Vec::with_capacity(unique.len());
        for (chunk, refs) in unique
            .chunks(UPDATE_ROWS)
            .zip(attempt_refs.chunks(UPDATE_ROWS))
        {
            let kept = update_leased(&mut tx, self.backend(), owner, chunk, now).await?;
            recorded.extend(
                chunk
                    .iter()
                    .copied()
                    .zip(refs)
                    .filter(|(r, _)| kept.contains(r.delivery_ref.as_str())),
            );
        }
        for (r, _) in &recorded {
            if r.disable_endpoint {
                disable_endpoint(&mut tx, &r.endpoint_ref, now).await?;
            }
        }
        // One statement per chunk of attempts, never one per attempt: each
        // statement is a round trip to the database.
        for chunk in recorded.chunks(ATTEMPT_ROWS) {
            let mut marks = Marks::new(self.backend());
            let rows: Vec<String> = (0..chunk.len())
                .map(|_| format!("({})", marks.list(14)))
                .collect();
            let sql = format!(
                "INSERT INTO webhook_attempts (attempt_ref, delivery_ref, environment_ref, endpoint_ref, \
                 generation, attempt_number, status, response_status, error, response_body_excerpt, \
                 duration_ms, started_at, next_attempt_at, created_at) VALUES {}",
                rows.join(", ")
            );
            let mut args: Vec<Arg> = Vec::with_capacity(chunk.len() * 14);
            for (r, attempt_ref) in chunk {
                args.extend::<[Arg; _]>([
                    attempt_ref.as_str().into(),
                    r.delivery_ref.as_str().into(),
                    r.environment_ref.as_str().into(),
                    r.endpoint_ref.as_str().into(),
                    (r.generation as i64).into(),
                    (r.attempt_number as i64).into(),
                    r.status.as_str().into(),
                    r.response_status.map(i64::from).into(),
                    r.error.as_deref().into(),
                    r.response_body_excerpt.as_deref().into(),
                    r.duration_ms.into(),
                    r.started_at.millis().into(),
                    r.next_attempt_at.map(Timestamp::millis).into(),
                    now.into(),
                ]);
            }
            tx.execute(&sql, &args).await?;
        }
        tx.commit().await?;
        Ok(recorded.len())
    }

    /// When the endpoint's current run of failures began: its oldest
    /// failed attempt after its newest success.
    pub async fn endpoint_failing_since(
        &self,
        endpoint_ref: &Ref,
    ) -> Result<Option<Timestamp>, StoreError> {
        let since = read::scalar_int(
            self.pool(),
            "SELECT MIN(started_at) FROM webhook_attempts WHERE endpoint_ref = $1 AND status = $2 \
             AND started_at > COALESCE((SELECT MAX(started_at) FROM webhook_attempts \
             WHERE endpoint_ref = $1 AND status = $3), -1)",
            &[
                endpoint_ref.as_str().into(),
                AttemptStatus::Failed.as_str().into(),
                AttemptStatus::Succeeded.as_str().into(),
            ],
        )
        .await?;
        Ok(since.map(Timestamp::from_millis))
    }

    /// Deliveries waiting for an attempt (pending), for the backlog gauge.
    pub async fn due_backlog(&self, now: Timestamp) -> Result<i64, StoreError> {
        read::scalar_int(
            self.pool(),
            &format!(
                "SELECT COUNT(*) FROM webhook_deliveries WHERE {} AND next_attempt_at <= $1",
                statements::pending()
            ),
            &[now.millis().into()],
        )
        .await?
        .ok_or_else(|| StoreError::Corrupt("COUNT(*) was null".into()))
    }

    /// The earliest time a pending delivery falls due, if any.
    pub async fn next_due_at(&self) -> Result<Option<Timestamp>, StoreError> {
        let t = read::scalar_int(
            self.pool(),
            &format!(
                "SELECT MIN(next_attempt_at) FROM webhook_deliveries WHERE {}",
                statements::pending()
            ),
            &[],
        )
        .await?;
        Ok(t.map(Timestamp::from_millis))
    }
}

/// Makes the rest of `tx` find rows by key (`statements::BY_PRIMARY_KEY`).
async fn by_primary_key(tx: &mut WriteTx, backend: Backend) -> Result<(), StoreError> {
    if backend == Backend::Postgres {
        tx.execute(statements::BY_PRIMARY_KEY, &[]).await?;
    }
    Ok(())
}

/// A delivery to insert: its reference (chosen by the caller, which may
/// build its record) and the lease it is born with, if any (owner, until).
/// Its JSON columns are serialised when the row is built, before the
/// write transaction begins.
pub(crate) struct DeliveryRow<'a> {
    pub new: &'a NewDelivery,
    pub delivery_ref: Ref,
    pub lease: Option<(&'a str, i64)>,
    pub match_reasons: String,
}

impl<'a> DeliveryRow<'a> {
    pub(crate) fn unleased(new: &'a NewDelivery) -> DeliveryRow<'a> {
        DeliveryRow {
            new,
            delivery_ref: Ref::generate(Prefix::WebhookDelivery),
            lease: None,
            match_reasons: to_json(&new.match_reasons),
        }
    }
}

/// Inserts deliveries (one per event, endpoint and dto version: an
/// existing one is left as it is) and marks their endpoints' URLs
/// immutable, inside `tx`, unless `tx` read them fixed already
/// (`url_fixed`); returns the references of those created. Pending
/// deliveries are due at `now`.
pub(crate) async fn insert_deliveries(
    tx: &mut WriteTx,
    backend: Backend,
    rows: &[DeliveryRow<'_>],
    now: i64,
    url_fixed: &std::collections::HashSet<String>,
) -> Result<std::collections::HashSet<String>, StoreError> {
    let mut created = std::collections::HashSet::new();
    let mut endpoints = std::collections::HashSet::new();
    // One statement per chunk of deliveries, never one per delivery: each
    // statement is a round trip to the database.
    for chunk in rows.chunks(DELIVERY_ROWS) {
        let mut marks = Marks::new(backend);
        let values: Vec<String> = (0..chunk.len())
            .map(|_| {
                format!(
                    "({}, 1, 0, {}, '{}', NULL, {})",
                    marks.list(10),
                    marks.list(2),
                    BodyStatus::Available.as_str(),
                    marks.list(4)
                )
            })
            .collect();
        let sql = format!(
            "INSERT INTO webhook_deliveries (delivery_ref, environment_ref, endpoint_ref, event_ref, \
             public_event_type, dto_version, status, diagnostic, next_attempt_at, occurred_at, \
             generation, attempt_count, event_data, match_reasons, body_status, payload, \
             created_at, updated_at, lease_owner, lease_until) VALUES {} \
             ON CONFLICT (event_ref, endpoint_ref, dto_version) DO NOTHING \
             RETURNING delivery_ref, endpoint_ref",
            values.join(", ")
        );
        let mut args: Vec<Arg> = Vec::with_capacity(chunk.len() * 16);
        for row in chunk {
            let d = row.new;
            let due = (d.status == DeliveryStatus::Pending).then_some(now);
            args.extend::<[Arg; _]>([
                row.delivery_ref.as_str().into(),
                d.environment_ref.as_str().into(),
                d.endpoint_ref.as_str().into(),
                d.event_ref.as_str().into(),
                d.public_event_type.as_str().into(),
                (d.dto_version as i64).into(),
                d.status.as_str().into(),
                (d.diagnostic as i64).into(),
                due.into(),
                d.occurred_at.millis().into(),
                row.new.event_data.as_str().into(),
                row.match_reasons.as_str().into(),
                now.into(),
                now.into(),
                row.lease.map(|(owner, _)| owner).into(),
                row.lease.map(|(_, until)| until).into(),
            ]);
        }
        for r in tx.fetch(&sql, &args).await? {
            created.insert(text(&r, "delivery_ref")?);
            endpoints.insert(text(&r, "endpoint_ref")?);
        }
    }
    let endpoints: Vec<&str> = endpoints
        .iter()
        .filter(|e| !url_fixed.contains(*e))
        .map(String::as_str)
        .collect();
    mark_url_immutable(tx, backend, &endpoints, now).await?;
    Ok(created)
}

/// Writes the deliveries' next states where `owner` still holds the lease
/// of that generation, in one statement; returns the references written.
/// The explicit casts give PostgreSQL the VALUES columns' types.
async fn update_leased(
    tx: &mut WriteTx,
    backend: Backend,
    owner: &str,
    chunk: &[&AttemptResult],
    now: i64,
) -> Result<std::collections::HashSet<String>, StoreError> {
    let mut marks = Marks::new(backend);
    let rows: Vec<String> = (0..chunk.len())
        .map(|_| {
            let [a, b, c, d, e, f, g] = std::array::from_fn(|_| marks.next());
            format!(
                "(CAST({a} AS TEXT), CAST({b} AS BIGINT), CAST({c} AS TEXT), CAST({d} AS BIGINT), \
                 CAST({e} AS BIGINT), CAST({f} AS BIGINT), CAST({g} AS TEXT))"
            )
        })
        .collect();
    let sql = format!(
        "WITH r (delivery_ref, generation, status, attempt_count, next_attempt_at, last_attempt_at, payload) \
         AS (VALUES {}) \
         UPDATE webhook_deliveries SET status = r.status, attempt_count = r.attempt_count, \
         next_attempt_at = r.next_attempt_at, last_attempt_at = r.last_attempt_at, payload = r.payload, \
         body_status = {}, lease_owner = NULL, lease_until = NULL, updated_at = {}, \
         version = webhook_deliveries.version + 1 \
         FROM r WHERE webhook_deliveries.delivery_ref = r.delivery_ref \
         AND webhook_deliveries.lease_owner = {} AND webhook_deliveries.generation = r.generation \
         RETURNING webhook_deliveries.delivery_ref",
        rows.join(", "),
        marks.next(),
        marks.next(),
        marks.next()
    );
    let mut args: Vec<Arg> = Vec::with_capacity(chunk.len() * 7 + 3);
    for r in chunk {
        args.extend::<[Arg; _]>([
            r.delivery_ref.as_str().into(),
            (r.generation as i64).into(),
            r.delivery_status.as_str().into(),
            (r.attempt_number as i64).into(),
            r.next_attempt_at.map(Timestamp::millis).into(),
            r.started_at.millis().into(),
            r.payload.as_str().into(),
        ]);
    }
    args.extend::<[Arg; _]>([
        BodyStatus::Available.as_str().into(),
        now.into(),
        owner.into(),
    ]);
    Ok(tx
        .fetch_texts(&sql, &args, "delivery_ref")
        .await?
        .into_iter()
        .collect())
}

async fn disable_endpoint(
    tx: &mut WriteTx,
    endpoint_ref: &Ref,
    now: i64,
) -> Result<(), StoreError> {
    let done = tx
        .execute(
            "UPDATE webhook_endpoints SET status = $1, updated_at = $2, version = version + 1 \
             WHERE endpoint_ref = $3 AND status = $4",
            &[
                EndpointStatus::Disabled.as_str().into(),
                now.into(),
                endpoint_ref.as_str().into(),
                EndpointStatus::Active.as_str().into(),
            ],
        )
        .await?;
    if done == 1 {
        tx.execute(
            "UPDATE webhook_deliveries SET status = $1, next_attempt_at = NULL, version = version + 1 \
             WHERE endpoint_ref = $2 AND status = $3 AND lease_owner IS NULL",
            &[
                DeliveryStatus::Held.as_str().into(),
                endpoint_ref.as_str().into(),
                DeliveryStatus::Pending.as_str().into(),
            ],
        )
        .await?;
    }
    Ok(())
}

/// Leases and schedule reads for a dispatcher whose schedule lives outside
/// the store (Redis in a fleet). The store stays the source of truth: these
/// leases are the same `lease_owner`/`lease_until` columns, so they fence
/// workers exactly as `claim_due_deliveries` does.
impl Store {
    /// Leases to `owner` until `lease_until` those of `refs` that are
    /// claimable now (`statements::is_claimable`): pending, due
    /// (`next_attempt_at <= now`) and not held by a live lease. A row another worker leases, or that has finished,
    /// moved later or is held, is skipped; the leased records are returned
    /// in no particular order.
    pub async fn claim_deliveries_by_ref(
        &self,
        owner: &str,
        refs: &[String],
        now: Timestamp,
        lease_until: Timestamp,
    ) -> Result<Vec<DeliveryRecord>, StoreError> {
        /// Bind parameters per statement stay far below PostgreSQL's limit.
        const CHUNK: usize = 500;
        let mut claimed = Vec::with_capacity(refs.len());
        if refs.is_empty() {
            return Ok(claimed);
        }
        let mut refs: Vec<&str> = refs.iter().map(String::as_str).collect();
        refs.sort_unstable();
        refs.dedup();
        let mut tx = self.begin().await?;
        if self.backend() == Backend::Postgres {
            tx.execute(statements::BY_PRIMARY_KEY, &[]).await?;
        }
        for chunk in refs.chunks(CHUNK) {
            // Two statements, each selecting by primary key alone
            // (`statements::lock_by_ref`). The rows are locked (or, on
            // SQLite, the write transaction is exclusive) before they are
            // checked, so the check still holds at the update.
            let sql = statements::lock_by_ref(self.backend(), chunk.len());
            let args: Vec<Arg> = chunk.iter().map(|r| Arg::from(*r)).collect();
            let mut claimable = Vec::new();
            for row in tx.fetch(&sql, &args).await? {
                let status = text(&row, "status")?;
                let (due, lease) = (row.int("next_attempt_at")?, row.int("lease_until")?);
                if statements::is_claimable(&status, due, lease, now.millis()) {
                    claimable.push(text(&row, "delivery_ref")?);
                }
            }
            if claimable.is_empty() {
                continue;
            }
            let sql = statements::lease_by_ref(claimable.len());
            let mut args: Vec<Arg> = vec![owner.into(), lease_until.millis().into()];
            args.extend(claimable.iter().map(Arg::from));
            for row in tx.fetch(&sql, &args).await? {
                claimed.push(delivery_from_row(&row)?);
            }
        }
        tx.commit().await?;
        Ok(claimed)
    }

    /// Up to `limit` pending deliveries due at or before `until` and not
    /// held by a live lease, earliest first, with their due time (Unix
    /// milliseconds): what an external schedule must hold. Ordered by the
    /// due-time index alone, so the scan stops at `limit` however large
    /// the backlog.
    pub async fn pending_due_refs(
        &self,
        until: Timestamp,
        limit: u32,
    ) -> Result<Vec<(String, i64)>, StoreError> {
        read::all(
            self.pool(),
            &statements::pending_due(limit),
            &[until.millis().into(), Timestamp::now().millis().into()],
            |row| {
                Ok((
                    row.try_get("delivery_ref")?,
                    row.try_get("next_attempt_at")?,
                ))
            },
        )
        .await
    }

    /// Which of `refs` name a delivery of this store (in any state): the
    /// claim path tells another store's schedule members, which it must
    /// leave alone, from this store's own that are no longer claimable.
    pub async fn known_delivery_refs(
        &self,
        refs: &[String],
    ) -> Result<std::collections::HashSet<String>, StoreError> {
        const CHUNK: usize = 500;
        let mut known = std::collections::HashSet::with_capacity(refs.len());
        for chunk in refs.chunks(CHUNK) {
            let sql = format!(
                "SELECT delivery_ref FROM webhook_deliveries WHERE delivery_ref IN ({})",
                crate::db::codec::placeholders(1, chunk.len())
            );
            let args: Vec<Arg> = chunk.iter().map(Arg::from).collect();
            let found: Vec<String> = read::all(self.pool(), &sql, &args, |row| {
                Ok(row.try_get("delivery_ref")?)
            })
            .await?;
            known.extend(found);
        }
        Ok(known)
    }
}

/// The statements of the fleet's claim path, public so that a test can
/// check their plans on PostgreSQL (`EXPLAIN`) with the very text that
/// runs: each must cost the same per delivery whatever the backlog. Also
/// the one definition of a claimable delivery (`claimable`,
/// `is_claimable`), which every statement that looks for due work uses.
pub mod statements {
    use crate::Backend;
    use domain::webhook::DeliveryStatus;

    /// `status = 'pending'`, the predicate of the partial due-time index
    /// (`webhook_deliveries_due_at`, migration 0003), word for word. The
    /// state is written into the text, never bound: a planner uses a
    /// partial index only for a statement whose text implies its
    /// predicate, and a bound value does not (a generic plan on
    /// PostgreSQL). Every statement meant to walk that index says this.
    pub fn pending() -> String {
        format!("status = '{}'", DeliveryStatus::Pending.as_str())
    }

    /// The condition that makes a delivery claimable: pending, due by
    /// `due_by`, and not held by a live lease (none, or one that ended
    /// before `lease_ended_before`); both are bind marks, the same one or
    /// two. `is_claimable` is the same rule over a row already read.
    pub fn claimable(due_by: &str, lease_ended_before: &str) -> String {
        format!(
            "{} AND next_attempt_at <= {due_by} \
             AND (lease_until IS NULL OR lease_until < {lease_ended_before})",
            pending()
        )
    }

    /// `claimable` for a row read with `status`, `next_attempt_at` and
    /// `lease_until`, at `now` (Unix milliseconds).
    pub fn is_claimable(
        status: &str,
        next_attempt_at: Option<i64>,
        lease_until: Option<i64>,
        now: i64,
    ) -> bool {
        status == DeliveryStatus::Pending.as_str()
            && next_attempt_at.is_some_and(|due| due <= now)
            && lease_until.is_none_or(|until| until < now)
    }

    /// Run first in PostgreSQL transactions whose statements address a
    /// bounded set of deliveries by primary key (claims, records,
    /// releases), so that their cost follows the rows they address, never
    /// the table's size: with statistics, the planner prefers a sequential
    /// scan to a few hundred key lookups once the table is large enough,
    /// and every claim would then read the whole table.
    pub const BY_PRIMARY_KEY: &str = "SET LOCAL enable_seqscan = off";

    /// Locks the rows of `n` references (`$1`…) and reads what decides
    /// whether each is claimable (`is_claimable`). By primary key alone:
    /// with the claimable condition here, a planner with statistics
    /// prefers the partial due-time index and scans the whole due backlog
    /// for every claim. Rows locked by a concurrent claimer are skipped,
    /// not waited for (that claimer leases them), so two claimers never
    /// deadlock.
    pub fn lock_by_ref(backend: Backend, n: usize) -> String {
        let lock = match backend {
            Backend::Postgres => " FOR UPDATE SKIP LOCKED",
            Backend::Sqlite => "",
        };
        format!(
            "SELECT delivery_ref, status, next_attempt_at, lease_until FROM webhook_deliveries \
             WHERE delivery_ref IN ({}){lock}",
            crate::db::codec::placeholders(1, n)
        )
    }

    /// Leases `n` locked, claimable rows (`$3`…) to `$1` until `$2`.
    pub fn lease_by_ref(n: usize) -> String {
        format!(
            "UPDATE webhook_deliveries SET lease_owner = $1, lease_until = $2 \
             WHERE delivery_ref IN ({}) RETURNING *",
            crate::db::codec::placeholders(3, n)
        )
    }

    /// Up to `limit` unleased pending deliveries due by `$1` (lease ended
    /// before `$2`), earliest first. Ordered by the due-time index alone,
    /// so the scan stops at `limit` however large the backlog.
    pub fn pending_due(limit: u32) -> String {
        format!(
            "SELECT delivery_ref, next_attempt_at FROM webhook_deliveries \
             WHERE {} ORDER BY next_attempt_at LIMIT {limit}",
            claimable("$1", "$2")
        )
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        /// The partial index's predicate, as migration 0003 creates it.
        #[test]
        fn pending_is_the_due_time_index_predicate() {
            let migration = include_str!("../../migrations/shared/0003_dispatch.sql");
            let index = migration
                .lines()
                .find(|l| l.contains("INDEX webhook_deliveries_due_at "))
                .expect("the due-time index");
            assert!(index.ends_with(&format!("WHERE {};", pending())), "{index}");
            for sql in [claimable("$1", "$2"), pending_due(10)] {
                assert!(sql.contains(&pending()), "{sql}");
            }
        }

        /// The SQL condition and the check of a row read agree, row by row.
        #[test]
        fn claimable_in_sql_and_in_rust_agree() {
            let conn = rusqlite::Connection::open_in_memory().unwrap();
            conn.execute_batch(
                "CREATE TABLE webhook_deliveries (delivery_ref TEXT PRIMARY KEY, status TEXT, \
                 next_attempt_at BIGINT, lease_until BIGINT)",
            )
            .unwrap();
            let now = 1_000;
            let mut rows = Vec::new();
            for status in DeliveryStatus::ALL {
                for due in [None, Some(now - 1), Some(now), Some(now + 1)] {
                    for lease in [None, Some(now - 1), Some(now), Some(now + 1)] {
                        let r = format!("wdl_{}", rows.len());
                        conn.execute(
                            "INSERT INTO webhook_deliveries VALUES (?1, ?2, ?3, ?4)",
                            rusqlite::params![r, status.as_str(), due, lease],
                        )
                        .unwrap();
                        rows.push((r, is_claimable(status.as_str(), due, lease, now)));
                    }
                }
            }
            let sql = format!(
                "SELECT delivery_ref FROM webhook_deliveries WHERE {}",
                claimable("?1", "?1")
            );
            let mut stmt = conn.prepare(&sql).unwrap();
            let found: std::collections::HashSet<String> = stmt
                .query_map([now], |row| row.get(0))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            for (r, claimable) in &rows {
                assert_eq!(found.contains(r), *claimable, "{r}");
            }
            assert_eq!(
                found.len(),
                4,
                "pending, due (two times) and lease free or ended (two)"
            );
        }
    }
}
