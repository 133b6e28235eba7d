//! Retention's statements (contract 12.1): each `Retention::sweep` call
//! deletes (or, for bodies, empties) at most one batch of one kind, in a
//! transaction of its own, so that no sweep holds locks long enough to
//! delay a live write. The rules of what goes when are the domain's
//! (`domain::retention`); the caller passes the cut-off.
//!
//! Each row is swept once whatever the number of processes: PostgreSQL
//! candidates are locked `FOR UPDATE SKIP LOCKED`, so two sweepers take
//! disjoint batches; SQLite has one writer (the lane).
//!
//! Every scan is an index range from the oldest row of its kind (migration
//! 0017). The two scans that pass rows they keep (bodies already emptied,
//! events whose deliveries remain) start at their mark in
//! `retention_marks` rather than re-read those rows each time. The
//! deliveries' batches of one pass each start where the last one ended
//! (`Swept::reached`): on PostgreSQL the entries of deleted rows stay in
//! the index until a vacuum, and a batch that started at the oldest would
//! walk every one its pass deleted before. An event
//! passed over because deliveries of it remain goes with its last
//! delivery instead (`sweep_deliveries`).
//!
//! A batch never makes live writes queue behind the sweep: on SQLite,
//! whose one writer a batch holds, batches are small (`batch`) and each
//! waits for a quiet write lane (`Store::on_lane_when_quiet`), so a live
//! write waits for one short batch at most.
//!
//! A batch's commit does not wait for the disk (`Store::begin_unsynced`):
//! a batch that a power cut loses leaves its rows due, and the next pass
//! takes them. On SQLite the sync it skips would hold the one writer; on
//! PostgreSQL it would wait for the WAL's flush beside the live writes.
//!
//! Idempotency records past `idempotency.retention` are one more kind:
//! a record so old is never replayed (`Store::claim_idempotency_key`
//! reads it as absent), so deleting it changes no answer.
//!
//! Finished redrive jobs are another, by `finished_at` (migration 0027's
//! partial index): only a final job (`succeeded`, `canceled`) has one, and
//! no runner or cancel writes a final job again, so one goes with what is
//! left of its items and nothing is waiting on it.
//!
//! This module never deletes a live delivery (`pending`, `held`), an open
//! redrive job nor a billing record: its statements name none of them.

use crate::db::marks::Marks;
use crate::db::read;
use crate::db::tx::{int, text, Arg, WriteTx};
use crate::webhooks::deliveries::SETTLED;
use crate::webhooks::keys::not_a_blocked_head;
use crate::{Backend, Store, StoreError};
use domain::retention::RetentionKind;
use domain::Timestamp;

/// Rows per batch on SQLite: the batch holds the database's one writer,
/// so a live write that arrives meanwhile waits for all of it.
const SQLITE_BATCH: u32 = 100;

/// Rows per batch on PostgreSQL: the batch locks its own rows only.
const POSTGRES_BATCH: u32 = 500;

/// How long a SQLite batch waits for a quiet write lane before it goes
/// anyway: a lane busy for longer than this still gets swept.
const PATIENCE: std::time::Duration = std::time::Duration::from_millis(100);

/// What one sweep call did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Swept {
    /// Rows deleted (or bodies emptied), per kind: a batch of deliveries
    /// also deletes the events they were the last of.
    pub deleted: Vec<(RetentionKind, u64)>,
    /// The batch was full: more rows may be due.
    pub full: bool,
    /// Deliveries: the settle time of the batch's last candidate, where
    /// the pass's next batch starts (`sweep`'s `from`).
    pub reached: Option<i64>,
}

/// The retention repository of a store (`Store::retention`).
pub struct Retention<'s>(&'s Store);

impl Store {
    pub fn retention(&self) -> Retention<'_> {
        Retention(self)
    }
}

impl Retention<'_> {
    /// The rows a batch should take on this store's engine.
    pub fn batch(&self) -> u32 {
        match self.0.backend() {
            Backend::Sqlite => SQLITE_BATCH,
            Backend::Postgres => POSTGRES_BATCH,
        }
    }

    /// Sweeps at most `limit` rows of `kind` older than `cutoff`. For
    /// deliveries, only those that settled at `from` or later: a pass
    /// starts at 0 and gives each batch the `reached` of the one before,
    /// so that no batch walks again the index entries its pass deleted
    /// (which stay until a vacuum removes them). A row a batch skipped (a
    /// concurrent writer held it) is taken by the next pass, which starts
    /// at 0 again.
    pub async fn sweep(
        &self,
        kind: RetentionKind,
        from: i64,
        cutoff: Timestamp,
        limit: u32,
    ) -> Result<Swept, StoreError> {
        let store = self.0.clone();
        self.0
            .on_lane_when_quiet(PATIENCE, async move {
                let mut tx = store.begin_unsynced().await?;
                let swept = match kind {
                    RetentionKind::Bodies => sweep_bodies(&mut tx, cutoff, limit).await?,
                    RetentionKind::Deliveries => {
                        sweep_deliveries(&mut tx, from, cutoff, limit).await?
                    }
                    RetentionKind::Events => sweep_events(&mut tx, cutoff, limit).await?,
                    RetentionKind::DeadLetters | RetentionKind::RequestLogs => {
                        sweep_log(&mut tx, kind, cutoff, limit).await?
                    }
                    RetentionKind::IdempotencyKeys => {
                        sweep_idempotency_keys(&mut tx, cutoff, limit).await?
                    }
                    RetentionKind::RedriveJobs => {
                        sweep_redrive_jobs(&mut tx, cutoff, limit).await?
                    }
                };
                tx.commit().await?;
                Ok(swept)
            })
            .await
    }

    /// The time of the oldest row of `kind` still kept (settled, received,
    /// logged, finished), if there is one: an index's first entry.
    pub async fn oldest(&self, kind: RetentionKind) -> Result<Option<Timestamp>, StoreError> {
        let sql = match kind {
            RetentionKind::Deliveries => {
                format!(
                    "SELECT MIN(updated_at) FROM webhook_deliveries WHERE {SETTLED} AND {}",
                    not_a_blocked_head()
                )
            }
            RetentionKind::Bodies => format!(
                "SELECT MIN(updated_at) FROM webhook_deliveries WHERE {SETTLED} \
                 AND payload IS NOT NULL AND updated_at >= COALESCE((SELECT swept_until \
                 FROM retention_marks WHERE kind = 'bodies'), 0)"
            ),
            RetentionKind::Events => "SELECT MIN(received_at) FROM events".to_owned(),
            RetentionKind::DeadLetters => "SELECT MIN(received_at) FROM dead_events".to_owned(),
            RetentionKind::RequestLogs => "SELECT MIN(created_at) FROM request_logs".to_owned(),
            RetentionKind::IdempotencyKeys => {
                "SELECT MIN(created_at) FROM idempotency_keys".to_owned()
            }
            RetentionKind::RedriveJobs => "SELECT MIN(finished_at) FROM webhook_redrive_jobs \
                 WHERE finished_at IS NOT NULL"
                .to_owned(),
        };
        let at = read::scalar_int(self.0.pool(), &sql, &[]).await?;
        Ok(at.map(Timestamp::from_millis))
    }
}

/// The statement that picks a batch of `kind`'s candidates, oldest first:
/// bound with the cut-off, after the kind's mark for `Bodies` and
/// `Events` and after the pass's `from` for `Deliveries`. Public so that a
/// test can ask the planner how it runs.
pub fn candidates(kind: RetentionKind, backend: Backend, limit: u32) -> String {
    let mut marks = Marks::new(backend);
    match kind {
        RetentionKind::Bodies => format!(
            "SELECT delivery_ref, updated_at FROM webhook_deliveries WHERE {SETTLED} \
             AND updated_at >= {} AND updated_at < {} AND payload IS NOT NULL \
             ORDER BY updated_at LIMIT {limit}{}",
            marks.next(),
            marks.next(),
            skip_locked(backend, "webhook_deliveries")
        ),
        // A failed head that blocks its key (ordered, not skipped) is
        // still work for an operator: deleting it would release its key
        // without anyone deciding so.
        RetentionKind::Deliveries => format!(
            "SELECT delivery_ref, event_ref, updated_at FROM webhook_deliveries WHERE {SETTLED} \
             AND updated_at >= {} AND updated_at < {} AND {} \
             ORDER BY updated_at LIMIT {limit}{}",
            marks.next(),
            marks.next(),
            not_a_blocked_head(),
            skip_locked(backend, "webhook_deliveries")
        ),
        // Whether deliveries of them remain is asked of the batch
        // (`with_deliveries`): a join here lets the planner read every
        // delivery to answer it.
        RetentionKind::Events => format!(
            "SELECT event_ref, received_at FROM events WHERE received_at >= {} \
             AND received_at < {} AND status = 'processed' \
             ORDER BY received_at LIMIT {limit}{}",
            marks.next(),
            marks.next(),
            skip_locked(backend, "events")
        ),
        RetentionKind::DeadLetters | RetentionKind::RequestLogs => {
            let (table, key, at) = log_table(kind);
            format!(
                "SELECT {key} AS k FROM {table} WHERE {at} < {} ORDER BY {at} LIMIT {limit}{}",
                marks.next(),
                skip_locked(backend, table)
            )
        }
        RetentionKind::IdempotencyKeys => format!(
            "SELECT {IDEMPOTENCY_KEY} FROM idempotency_keys WHERE created_at < {} \
             ORDER BY created_at LIMIT {limit}{}",
            marks.next(),
            skip_locked(backend, "idempotency_keys")
        ),
        // Open jobs have no `finished_at`, and are not in the index.
        RetentionKind::RedriveJobs => format!(
            "SELECT redrive_job_ref AS k FROM webhook_redrive_jobs WHERE finished_at IS NOT NULL \
             AND finished_at < {} ORDER BY finished_at LIMIT {limit}{}",
            marks.next(),
            skip_locked(backend, "webhook_redrive_jobs")
        ),
    }
}

/// Deletes up to `limit` redrive jobs that finished before `cutoff`, with
/// what is left of their items (a canceled job's are gone already; a
/// succeeded one took them all).
async fn sweep_redrive_jobs(
    tx: &mut WriteTx,
    cutoff: Timestamp,
    limit: u32,
) -> Result<Swept, StoreError> {
    let kind = RetentionKind::RedriveJobs;
    let sql = candidates(kind, tx.backend(), limit);
    let keys = tx.fetch_texts(&sql, &[cutoff.millis().into()], "k").await?;
    delete_keys(tx, "webhook_redrive_job_items", "redrive_job_ref", &keys).await?;
    let n = delete_keys(tx, "webhook_redrive_jobs", "redrive_job_ref", &keys).await?;
    Ok(Swept {
        deleted: vec![(kind, n)],
        full: keys.len() >= limit as usize,
        reached: None,
    })
}

/// The primary key of `idempotency_keys`, which has no one-column key.
const IDEMPOTENCY_KEY: &str = "environment_ref, principal_ref, operation_id, idem_key";

/// Deletes up to `limit` idempotency records created before `cutoff`:
/// the batch's candidates, by their whole primary key.
async fn sweep_idempotency_keys(
    tx: &mut WriteTx,
    cutoff: Timestamp,
    limit: u32,
) -> Result<Swept, StoreError> {
    let kind = RetentionKind::IdempotencyKeys;
    let sql = candidates(kind, tx.backend(), limit);
    let rows = tx.fetch(&sql, &[cutoff.millis().into()]).await?;
    let columns: Vec<&str> = IDEMPOTENCY_KEY.split(", ").collect();
    let mut keys: Vec<String> = Vec::with_capacity(rows.len() * columns.len());
    for row in &rows {
        for column in &columns {
            keys.push(text(row, column)?);
        }
    }
    let deleted = if rows.is_empty() {
        0
    } else {
        let mut marks = Marks::new(tx.backend());
        let values: Vec<String> = (0..rows.len())
            .map(|_| {
                let casts: Vec<String> = columns
                    .iter()
                    .map(|_| format!("CAST({} AS TEXT)", marks.next()))
                    .collect();
                format!("({})", casts.join(", "))
            })
            .collect();
        let sql = format!(
            "DELETE FROM idempotency_keys WHERE ({IDEMPOTENCY_KEY}) IN (VALUES {})",
            values.join(", ")
        );
        let args: Vec<Arg> = keys.iter().map(|k| Arg::from(k.as_str())).collect();
        tx.execute(&sql, &args).await?
    };
    Ok(Swept {
        deleted: vec![(kind, deleted)],
        full: rows.len() >= limit as usize,
        reached: None,
    })
}

/// The row lock a sweep's candidates take: PostgreSQL skips rows another
/// sweeper (or a live write) holds; SQLite's single writer needs none.
fn skip_locked(backend: Backend, of: &str) -> String {
    match backend {
        Backend::Postgres => format!(" FOR UPDATE OF {of} SKIP LOCKED"),
        Backend::Sqlite => String::new(),
    }
}

/// A kind swept by its own time alone: (table, key, time column).
fn log_table(kind: RetentionKind) -> (&'static str, &'static str, &'static str) {
    match kind {
        RetentionKind::DeadLetters => ("dead_events", "dead_event_id", "received_at"),
        _ => ("request_logs", "request_log_ref", "created_at"),
    }
}

/// Deletes up to `limit` rows of a kind swept by its own time alone
/// (`log_table`) whose time is before `cutoff`.
async fn sweep_log(
    tx: &mut WriteTx,
    kind: RetentionKind,
    cutoff: Timestamp,
    limit: u32,
) -> Result<Swept, StoreError> {
    let sql = candidates(kind, tx.backend(), limit);
    let keys = tx.fetch_texts(&sql, &[cutoff.millis().into()], "k").await?;
    let (table, key, _) = log_table(kind);
    let n = delete_keys(tx, table, key, &keys).await?;
    Ok(Swept {
        deleted: vec![(kind, n)],
        full: keys.len() >= limit as usize,
        reached: None,
    })
}

/// Deletes the rows of `table` whose `key` is among `keys`.
async fn delete_keys(
    tx: &mut WriteTx,
    table: &str,
    key: &str,
    keys: &[String],
) -> Result<u64, StoreError> {
    if keys.is_empty() {
        return Ok(0);
    }
    let sql = format!(
        "DELETE FROM {table} WHERE {key} IN ({})",
        Marks::new(tx.backend()).list(keys.len())
    );
    let args: Vec<Arg> = keys.iter().map(|k| Arg::from(k.as_str())).collect();
    tx.execute(&sql, &args).await
}

/// Deletes settled deliveries (with their attempts) that settled before
/// `cutoff`, then their events of which no delivery remains, with the
/// events' projection markers.
async fn sweep_deliveries(
    tx: &mut WriteTx,
    from: i64,
    cutoff: Timestamp,
    limit: u32,
) -> Result<Swept, StoreError> {
    let sql = candidates(RetentionKind::Deliveries, tx.backend(), limit);
    let rows = tx
        .fetch(&sql, &[from.into(), cutoff.millis().into()])
        .await?;
    let mut deliveries = Vec::with_capacity(rows.len());
    let mut events = Vec::with_capacity(rows.len());
    let mut reached = None;
    for row in &rows {
        reached = Some(int(row, "updated_at")?);
        deliveries.push(text(row, "delivery_ref")?);
        let event_ref = text(row, "event_ref")?;
        if !events.contains(&event_ref) {
            events.push(event_ref);
        }
    }
    delete_keys(tx, "webhook_attempts", "delivery_ref", &deliveries).await?;
    let deleted = delete_keys(tx, "webhook_deliveries", "delivery_ref", &deliveries).await?;
    let orphans = delete_orphan_events(tx, &events).await?;
    Ok(Swept {
        deleted: vec![
            (RetentionKind::Deliveries, deleted),
            (RetentionKind::Events, orphans),
        ],
        full: rows.len() >= limit as usize,
        reached,
    })
}

/// Those of `events` some delivery of which remains: one index probe each.
pub fn with_deliveries(backend: Backend, events: usize) -> String {
    format!(
        "SELECT DISTINCT event_ref FROM webhook_deliveries WHERE event_ref IN ({})",
        Marks::new(backend).list(events)
    )
}

/// Deletes those of `events` of which no delivery remains, and their
/// projection markers; returns how many events went.
async fn delete_orphan_events(tx: &mut WriteTx, events: &[String]) -> Result<u64, StoreError> {
    if events.is_empty() {
        return Ok(0);
    }
    let args: Vec<Arg> = events.iter().map(|e| Arg::from(e.as_str())).collect();
    let kept: std::collections::HashSet<String> = tx
        .fetch_texts(
            &with_deliveries(tx.backend(), events.len()),
            &args,
            "event_ref",
        )
        .await?
        .into_iter()
        .collect();
    let orphans: Vec<String> = events
        .iter()
        .filter(|e| !kept.contains(*e))
        .cloned()
        .collect();
    delete_keys(tx, "projected_events", "event_ref", &orphans).await?;
    // An event's copies of its data (`webhook_event_data`) go with it: no
    // delivery of it is left to read them.
    delete_keys(tx, "webhook_event_data", "event_ref", &orphans).await?;
    delete_keys(tx, "events", "event_ref", &orphans).await
}

/// Deletes events received before `cutoff` of which no delivery remains
/// (most never had one: nobody subscribed), from the events mark on. The
/// mark passes the others too: each goes with its last delivery.
async fn sweep_events(
    tx: &mut WriteTx,
    cutoff: Timestamp,
    limit: u32,
) -> Result<Swept, StoreError> {
    let kind = RetentionKind::Events;
    let (refs, reached, full) = scan_from_mark(tx, kind, cutoff, limit).await?;
    let deleted = delete_orphan_events(tx, &refs).await?;
    advance(tx, kind, reached).await?;
    Ok(Swept {
        deleted: vec![(RetentionKind::Events, deleted)],
        full,
        reached: None,
    })
}

/// Empties the bodies of deliveries settled before `cutoff`, from the
/// bodies mark on: the payload's bytes go, and the body view reads
/// `expired` (a `redacted` one stays `redacted`).
async fn sweep_bodies(
    tx: &mut WriteTx,
    cutoff: Timestamp,
    limit: u32,
) -> Result<Swept, StoreError> {
    let kind = RetentionKind::Bodies;
    let (refs, reached, full) = scan_from_mark(tx, kind, cutoff, limit).await?;
    let emptied = if refs.is_empty() {
        0
    } else {
        let sql = format!(
            "UPDATE webhook_deliveries SET payload = NULL, body_status = CASE \
             WHEN body_status = 'available' THEN 'expired' ELSE body_status END \
             WHERE delivery_ref IN ({})",
            Marks::new(tx.backend()).list(refs.len())
        );
        let args: Vec<Arg> = refs.iter().map(|r| Arg::from(r.as_str())).collect();
        tx.execute(&sql, &args).await?
    };
    advance(tx, kind, reached).await?;
    Ok(Swept {
        deleted: vec![(RetentionKind::Bodies, emptied)],
        full,
        reached: None,
    })
}

/// One batch of `kind`'s candidates from its mark (`Bodies` or `Events`):
/// their references, how far the scan reached (the last candidate's time
/// when the batch is full; the cut-off itself when it is short, having
/// scanned all up to it), and whether it was full.
async fn scan_from_mark(
    tx: &mut WriteTx,
    kind: RetentionKind,
    cutoff: Timestamp,
    limit: u32,
) -> Result<(Vec<String>, i64, bool), StoreError> {
    let (key, at) = match kind {
        RetentionKind::Events => ("event_ref", "received_at"),
        _ => ("delivery_ref", "updated_at"),
    };
    let from = mark(tx, kind).await?;
    let sql = candidates(kind, tx.backend(), limit);
    let rows = tx
        .fetch(&sql, &[from.into(), cutoff.millis().into()])
        .await?;
    let full = rows.len() >= limit as usize;
    let mut refs = Vec::with_capacity(rows.len());
    let mut last = from;
    for row in &rows {
        refs.push(text(row, key)?);
        last = last.max(int(row, at)?);
    }
    Ok((refs, if full { last } else { cutoff.millis() }, full))
}

/// Where the scan of `kind` starts.
async fn mark(tx: &mut WriteTx, kind: RetentionKind) -> Result<i64, StoreError> {
    let sql = format!(
        "SELECT swept_until FROM retention_marks WHERE kind = {}",
        Marks::new(tx.backend()).next()
    );
    let rows = tx.fetch(&sql, &[kind.as_str().into()]).await?;
    match rows.first() {
        Some(row) => int(row, "swept_until"),
        None => Ok(0),
    }
}

/// Moves the mark of `kind` forward to `to` (never back: another sweeper
/// may have gone further).
async fn advance(tx: &mut WriteTx, kind: RetentionKind, to: i64) -> Result<(), StoreError> {
    let mut marks = Marks::new(tx.backend());
    let sql = format!(
        "INSERT INTO retention_marks (kind, swept_until) VALUES ({}, {}) ON CONFLICT (kind) \
         DO UPDATE SET swept_until = CASE WHEN retention_marks.swept_until < excluded.swept_until \
         THEN excluded.swept_until ELSE retention_marks.swept_until END",
        marks.next(),
        marks.next()
    );
    tx.execute(&sql, &[kind.as_str().into(), to.into()]).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Idempotency records go by their whole key: a batch deletes those
    /// created before the cut-off, oldest first, and never a newer record
    /// that shares all but one of an older one's key columns.
    #[tokio::test]
    async fn idempotency_records_go_by_their_whole_key() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::connect(&format!("sqlite://{}/r.db", dir.path().display()))
            .await
            .unwrap();
        store.migrate().await.unwrap();
        let rows = [
            ("env_a", "key_1", 100),
            ("env_a", "key_2", 200),
            ("env_b", "key_1", 300),
            // The same key as the first but another environment: kept.
            ("env_c", "key_1", 5_000),
        ];
        for (env, key, at) in rows {
            sqlx::query(
                "INSERT INTO idempotency_keys (environment_ref, principal_ref, operation_id, \
                 idem_key, fingerprint, state, created_at, locked_at) \
                 VALUES ($1, 'sa_x', 'createProduct', $2, 'f', 'done', $3, $3)",
            )
            .bind(env)
            .bind(key)
            .bind(at as i64)
            .execute(store.pool())
            .await
            .unwrap();
        }
        let kind = RetentionKind::IdempotencyKeys;
        let cutoff = Timestamp::from_millis(1_000);
        let first = store.retention().sweep(kind, 0, cutoff, 2).await.unwrap();
        assert_eq!((first.deleted.clone(), first.full), (vec![(kind, 2)], true));
        assert_eq!(
            store.retention().oldest(kind).await.unwrap(),
            Some(Timestamp::from_millis(300))
        );
        let rest = store.retention().sweep(kind, 0, cutoff, 2).await.unwrap();
        assert_eq!((rest.deleted, rest.full), (vec![(kind, 1)], false));
        let left: Vec<String> = sqlx::query_scalar("SELECT environment_ref FROM idempotency_keys")
            .fetch_all(store.pool())
            .await
            .unwrap();
        assert_eq!(left, ["env_c"]);
    }

    /// Finished redrive jobs go by when they finished, oldest first, with
    /// any items left; an open job stays however old it is.
    #[tokio::test]
    async fn finished_redrive_jobs_go_by_when_they_finished() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::connect(&format!("sqlite://{}/r.db", dir.path().display()))
            .await
            .unwrap();
        store.migrate().await.unwrap();
        let jobs: [(&str, &str, Option<i64>); 4] = [
            ("rdj_succeeded", "succeeded", Some(200)),
            ("rdj_canceled", "canceled", Some(100)),
            // Finished after the cut-off: kept.
            ("rdj_recent", "succeeded", Some(5_000)),
            // Open, and older than every other: kept.
            ("rdj_running", "running", None),
        ];
        for (job, status, finished_at) in jobs {
            sqlx::query(
                "INSERT INTO webhook_redrive_jobs (redrive_job_ref, environment_ref, status, \
                 filter, reason, dry_run, created_at, updated_at, finished_at) \
                 VALUES ($1, 'env_a', $2, '{}', 'r', 0, 1, 1, $3)",
            )
            .bind(job)
            .bind(status)
            .bind(finished_at)
            .execute(store.pool())
            .await
            .unwrap();
        }
        for job in ["rdj_canceled", "rdj_running"] {
            sqlx::query(
                "INSERT INTO webhook_redrive_job_items (redrive_job_ref, delivery_ref) \
                 VALUES ($1, 'whd_x')",
            )
            .bind(job)
            .execute(store.pool())
            .await
            .unwrap();
        }
        let kind = RetentionKind::RedriveJobs;
        assert_eq!(
            store.retention().oldest(kind).await.unwrap(),
            Some(Timestamp::from_millis(100))
        );
        let cutoff = Timestamp::from_millis(1_000);
        let first = store.retention().sweep(kind, 0, cutoff, 1).await.unwrap();
        assert_eq!((first.deleted.clone(), first.full), (vec![(kind, 1)], true));
        let rest = store.retention().sweep(kind, 0, cutoff, 5).await.unwrap();
        assert_eq!((rest.deleted, rest.full), (vec![(kind, 1)], false));
        let left: Vec<String> = sqlx::query_scalar(
            "SELECT redrive_job_ref FROM webhook_redrive_jobs ORDER BY redrive_job_ref",
        )
        .fetch_all(store.pool())
        .await
        .unwrap();
        assert_eq!(left, ["rdj_recent", "rdj_running"]);
        let items: Vec<String> =
            sqlx::query_scalar("SELECT redrive_job_ref FROM webhook_redrive_job_items")
                .fetch_all(store.pool())
                .await
                .unwrap();
        assert_eq!(items, ["rdj_running"]);
        assert_eq!(
            store.retention().oldest(kind).await.unwrap(),
            Some(Timestamp::from_millis(5_000))
        );
    }
}
