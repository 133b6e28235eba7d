//! Leases: claiming due deliveries (in the store, or by reference for a
//! schedule kept outside it), giving them back, and the schedule reads;
//! `statements` holds the one definition of a claimable delivery. The
//! lease itself (its columns, `free`, take and release) is the store's one
//! primitive, `crate::lease`, shared with timed and redrive jobs.

use super::*;
use crate::db::marks::Marks;
use crate::db::read;
use crate::db::tx::{int, text, Arg, Columns, WriteTx};
use crate::dispatch::deliveries::SHARED_EVENT_DATA;
use crate::lease;
use crate::packed;
use crate::webhooks::deliveries::{delivery_from_row, DeliveryRecord};
use crate::{Backend, StoreError};
use domain::webhook::DeliveryStatus;
use domain::{Ref, Timestamp};

impl Dispatch<'_> {
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
        // An idle dispatcher polls often: finding nothing must not take the
        // writer (SQLite has one) from the writes that are waiting for it.
        let due = read::optional(
            self.pool(),
            &format!(
                "SELECT 1 FROM webhook_deliveries WHERE {} LIMIT 1",
                statements::claimable("$1", "$1")
            ),
            &[now.millis().into()],
            |_| Ok(()),
        )
        .await?;
        if due.is_none() {
            return Ok(Vec::new());
        }
        let sql = statements::claim_due(self.backend(), limit);
        let (store, owner) = (self.0.clone(), owner.to_owned());
        let claimed = self
            .on_lane(async move {
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
            .map(|row| delivery_from_row(row))
            .collect::<Result<Vec<_>, _>>()?;
        self.fill_event_data(claimed).await
    }

    /// `records` with the event data of those that share their event's copy
    /// (`SHARED_EVENT_DATA`) read from the event's row or from
    /// `webhook_event_data` (migration 0037) and unpacked (`packed`),
    /// once per event: an attempt sends it. A copy that is missing leaves
    /// the data empty, which the attempt reports as unreadable.
    async fn fill_event_data(
        &self,
        mut records: Vec<DeliveryRecord>,
    ) -> Result<Vec<DeliveryRecord>, StoreError> {
        const CHUNK: usize = 500;
        let mut events: Vec<&str> = records
            .iter()
            .filter(|d| d.event_data == SHARED_EVENT_DATA)
            .map(|d| d.event_ref.as_str())
            .collect();
        events.sort_unstable();
        events.dedup();
        let mut copies = std::collections::HashMap::new();
        for chunk in events.chunks(CHUNK) {
            let mut marks = Marks::new(self.backend());
            let (on_event, apart) = (marks.list(chunk.len()), marks.list(chunk.len()));
            let sql = format!(
                "SELECT event_ref, copy_dto_version AS dto_version, copy_data AS data FROM events \
                 WHERE event_ref IN ({on_event}) AND copy_data IS NOT NULL UNION ALL \
                 SELECT event_ref, dto_version, data FROM webhook_event_data \
                 WHERE event_ref IN ({apart})"
            );
            let args: Vec<Arg> = (chunk.iter().chain(chunk)).map(|e| Arg::from(*e)).collect();
            let rows = read::all(self.pool(), &sql, &args, |row| {
                let key = (text(row, "event_ref")?, int(row, "dto_version")? as u32);
                Ok((key, packed::unpack_owned(text(row, "data")?)))
            })
            .await?;
            copies.extend(rows);
        }
        for d in &mut records {
            if d.event_data == SHARED_EVENT_DATA {
                let key = (d.event_ref.to_string(), d.dto_version);
                if let Some(data) = copies.get(&key) {
                    d.event_data.clone_from(data);
                }
            }
        }
        Ok(records)
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
        let (store, owner, releases) = (self.0.clone(), owner.to_owned(), releases.to_vec());
        self.on_lane(async move { store.dispatch().release_on_lane(&owner, &releases).await })
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
                 UPDATE webhook_deliveries SET status = CASE WHEN r.status = 'held' AND EXISTS \
                 (SELECT 1 FROM webhook_endpoints e WHERE e.endpoint_ref = webhook_deliveries.endpoint_ref \
                 AND e.status = 'active') THEN 'pending' ELSE r.status END, \
                 next_attempt_at = CASE WHEN r.status = 'held' AND EXISTS \
                 (SELECT 1 FROM webhook_endpoints e WHERE e.endpoint_ref = webhook_deliveries.endpoint_ref \
                 AND e.status = 'active') THEN {} ELSE r.next_attempt_at END, \
                 {}, \
                 version = webhook_deliveries.version + \
                 CASE WHEN webhook_deliveries.status = r.status THEN 0 ELSE 1 END \
                 FROM r WHERE webhook_deliveries.delivery_ref = r.delivery_ref \
                 AND {}",
                rows.join(", "),
                marks.next(),
                lease::RELEASE,
                lease::held_by_in("webhook_deliveries", &marks.next())
            );
            let mut args: Vec<Arg> = Vec::with_capacity(chunk.len() * 3 + 2);
            for (delivery_ref, due) in chunk {
                let status = match due {
                    Some(_) => DeliveryStatus::Pending,
                    None => DeliveryStatus::Held,
                };
                args.push(delivery_ref.as_str().into());
                args.push(status.as_str().into());
                args.push(due.map(Timestamp::millis).into());
            }
            // A hold decided before the endpoint was resumed would outlive
            // the resume's release: held only while the endpoint is not active.
            args.push(Timestamp::now().millis().into());
            args.push(owner.into());
            tx.execute(&sql, &args).await?;
        }
        tx.commit().await
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
pub(crate) async fn by_primary_key(tx: &mut WriteTx, backend: Backend) -> Result<(), StoreError> {
    if backend == Backend::Postgres {
        tx.execute(statements::BY_PRIMARY_KEY, &[]).await?;
    }
    Ok(())
}

/// Leases and schedule reads for a dispatcher whose schedule lives outside
/// the store (Redis in a fleet). The store stays the source of truth: these
/// leases are the same `lease_owner`/`lease_until` columns, so they fence
/// workers exactly as `claim_due_deliveries` does.
impl Dispatch<'_> {
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
            let sql = statements::lease_by_ref(self.backend(), claimable.len());
            let mut args: Vec<Arg> = vec![owner.into(), lease_until.millis().into()];
            args.extend(claimable.iter().map(Arg::from));
            for row in tx.fetch(&sql, &args).await? {
                claimed.push(delivery_from_row(&row)?);
            }
        }
        tx.commit().await?;
        self.fill_event_data(claimed).await
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
        self.pending_due_refs_from(until, None, limit).await
    }

    /// `pending_due_refs` from the due time `from` on (inclusive), so that
    /// a reader of a backlog larger than `limit` can go on where its last
    /// batch ended instead of reading the earliest again.
    pub async fn pending_due_refs_from(
        &self,
        until: Timestamp,
        from: Option<Timestamp>,
        limit: u32,
    ) -> Result<Vec<(String, i64)>, StoreError> {
        read::all(
            self.pool(),
            &statements::pending_due(limit),
            &[
                until.millis().into(),
                Timestamp::now().millis().into(),
                from.map_or(i64::MIN, Timestamp::millis).into(),
            ],
            |row| Ok((text(row, "delivery_ref")?, int(row, "next_attempt_at")?)),
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
        let found = self.endpoints_of_deliveries(refs).await?;
        Ok(found.into_keys().collect())
    }

    /// The endpoint of each of `refs` that names a delivery of this store
    /// (in any state), by delivery reference: a read, so that the claim
    /// path can leave the deliveries of endpoints it has no room for
    /// unleased instead of leasing them and writing them back.
    pub async fn endpoints_of_deliveries(
        &self,
        refs: &[String],
    ) -> Result<std::collections::HashMap<String, String>, StoreError> {
        const CHUNK: usize = 500;
        let mut found = std::collections::HashMap::with_capacity(refs.len());
        for chunk in refs.chunks(CHUNK) {
            let sql = format!(
                "SELECT delivery_ref, endpoint_ref FROM webhook_deliveries \
                 WHERE delivery_ref IN ({})",
                Marks::new(self.backend()).list(chunk.len())
            );
            let args: Vec<Arg> = chunk.iter().map(Arg::from).collect();
            let rows: Vec<(String, String)> = read::all(self.pool(), &sql, &args, |row| {
                Ok((text(row, "delivery_ref")?, text(row, "endpoint_ref")?))
            })
            .await?;
            found.extend(rows);
        }
        Ok(found)
    }
}

/// The statements of the fleet's claim path, public so that a test can
/// check their plans on PostgreSQL (`EXPLAIN`) with the very text that
/// runs: each must cost the same per delivery whatever the backlog. Also
/// the one definition of a claimable delivery (`claimable`,
/// `is_claimable`), which every statement that looks for due work uses.
pub mod statements {
    use crate::db::marks::Marks;
    use crate::lease;
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

    /// Bound values per result of `record_states`: the delivery's
    /// reference, generation, next status, attempt count, next attempt
    /// time and last attempt time (the attempt's start), the body sent,
    /// the response class, and a success's response status, duration and
    /// body excerpt, which the row keeps (`webhooks::attempts`; null for
    /// an attempt that is a row). `record_small` binds the attempt's reference,
    /// environment, endpoint, response status, error, body excerpt,
    /// duration and status after them (`RECORD_COLUMNS` in all). After
    /// every result's values: the body status, the time of the write and
    /// the lease's owner.
    pub const STATE_COLUMNS: usize = 11;
    pub const RECORD_COLUMNS: usize = 19;
    const RECORD_NAMES: &str = "delivery_ref, generation, status, attempt_count, \
         next_attempt_at, last_attempt_at, payload, last_response_class, success_status, \
         success_duration_ms, success_excerpt, attempt_ref, environment_ref, endpoint_ref, \
         response_status, error, response_body_excerpt, duration_ms, attempt_status";
    const RECORD_TYPES: [&str; RECORD_COLUMNS] = [
        "TEXT", "BIGINT", "TEXT", "BIGINT", "BIGINT", "BIGINT", "TEXT", "TEXT", "BIGINT", "BIGINT",
        "TEXT", "TEXT", "TEXT", "TEXT", "BIGINT", "TEXT", "TEXT", "BIGINT", "TEXT",
    ];

    /// `WITH r (…) AS (VALUES …)` of `n` rows of the first `columns` of
    /// `RECORD_NAMES`, cast to their types (PostgreSQL types a `VALUES`
    /// column by its casts), then the `UPDATE` of the deliveries' next
    /// states from `r` where the owner still holds the lease of that
    /// generation, returning the references written; and the mark of the
    /// write's time.
    fn next_states(marks: &mut Marks, n: usize, columns: usize) -> (String, String, String) {
        let rows: Vec<String> = (0..n)
            .map(|_| {
                let casts: Vec<String> = RECORD_TYPES[..columns]
                    .iter()
                    .map(|t| format!("CAST({} AS {t})", marks.next()))
                    .collect();
                format!("({})", casts.join(", "))
            })
            .collect();
        let names: Vec<&str> = RECORD_NAMES.split(", ").take(columns).collect();
        let (body_status, at, owner) = (marks.next(), marks.next(), marks.next());
        let values = format!(
            "WITH r ({}) AS (VALUES {})",
            names.join(", "),
            rows.join(", ")
        );
        let update = format!(
            "UPDATE webhook_deliveries SET status = r.status, \
             attempt_count = r.attempt_count, next_attempt_at = r.next_attempt_at, \
             last_attempt_at = r.last_attempt_at, payload = r.payload, \
             last_response_class = r.last_response_class, success_status = r.success_status, \
             success_duration_ms = r.success_duration_ms, success_excerpt = r.success_excerpt, \
             body_status = {body_status}, \
             {release}, updated_at = {at}, \
             version = webhook_deliveries.version + 1 \
             FROM r WHERE webhook_deliveries.delivery_ref = r.delivery_ref \
             AND {held} \
             AND webhook_deliveries.generation = r.generation \
             RETURNING webhook_deliveries.delivery_ref",
            release = lease::RELEASE,
            held = lease::held_by_in("webhook_deliveries", &owner)
        );
        (values, update, at)
    }

    /// Writes the next states of `n` deliveries (`STATE_COLUMNS` values
    /// each) where the owner still holds the lease of that generation;
    /// returns the references written. The recording transaction's
    /// statement, on either engine.
    pub fn record_states(backend: Backend, n: usize) -> String {
        let (values, update, _) = next_states(&mut Marks::new(backend), n, STATE_COLUMNS);
        format!("{values} {update}")
    }

    /// PostgreSQL: records `n` attempt results with one statement
    /// (`RECORD_COLUMNS` values each): `record_states`, and an attempt row
    /// for each so written that its delivery's row does not keep (every
    /// one but a success without an error); returns the references written. Meant
    /// for a few results, which the planner looks up by primary key
    /// unprompted (`tests/tests/claim_plans.rs`).
    pub fn record_small(n: usize) -> String {
        let (values, update, at) =
            next_states(&mut Marks::new(Backend::Postgres), n, RECORD_COLUMNS);
        format!(
            "{values}, u AS ({update}), \
             a AS (INSERT INTO webhook_attempts (attempt_ref, delivery_ref, environment_ref, \
             endpoint_ref, generation, attempt_number, status, response_status, error, \
             response_body_excerpt, duration_ms, started_at, next_attempt_at, created_at) \
             SELECT r.attempt_ref, r.delivery_ref, r.environment_ref, r.endpoint_ref, \
             r.generation, r.attempt_count, r.attempt_status, r.response_status, r.error, \
             r.response_body_excerpt, r.duration_ms, r.last_attempt_at, r.next_attempt_at, {at} \
             FROM r JOIN u ON u.delivery_ref = r.delivery_ref \
             WHERE r.success_duration_ms IS NULL) \
             SELECT delivery_ref FROM u"
        )
    }

    /// The condition that makes a delivery claimable: pending, due by
    /// `due_by`, and not held by a live lease (`lease::free`: none, or one
    /// that ended before `lease_ended_before`); both are bind marks, the
    /// same one or two. `is_claimable` is the same rule over a row already
    /// read.
    pub fn claimable(due_by: &str, lease_ended_before: &str) -> String {
        format!(
            "{} AND next_attempt_at <= {due_by} AND {}",
            pending(),
            lease::free(lease_ended_before)
        )
    }

    /// `claim_due_deliveries`' statement: leases (`lease::take`) to `$1`
    /// until `$2` up to `limit` deliveries claimable at `$3`, earliest
    /// due first. The subquery alone applies the claimable condition and
    /// locks its rows (`lease::skip_locked`).
    pub fn claim_due(backend: Backend, limit: u32) -> String {
        let picked = format!(
            "delivery_ref IN (SELECT delivery_ref FROM webhook_deliveries WHERE {} \
             ORDER BY next_attempt_at LIMIT {limit}{})",
            claimable("$3", "$3"),
            lease::skip_locked(backend)
        );
        format!(
            "{} RETURNING *",
            lease::take("webhook_deliveries", "$1", "$2", &picked)
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
            && lease::is_free(lease_until, now)
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
        format!(
            "SELECT delivery_ref, status, next_attempt_at, lease_until FROM webhook_deliveries \
             WHERE delivery_ref IN ({}){}",
            Marks::new(backend).list(n),
            lease::skip_locked(backend)
        )
    }

    /// Leases `n` locked, claimable rows (bound third on) to the first
    /// bound value until the second.
    pub fn lease_by_ref(backend: Backend, n: usize) -> String {
        let mut marks = Marks::new(backend);
        let (owner, until) = (marks.next(), marks.next());
        let picked = format!("delivery_ref IN ({})", marks.list(n));
        format!(
            "{} RETURNING *",
            lease::take("webhook_deliveries", &owner, &until, &picked)
        )
    }

    /// Up to `limit` unleased pending deliveries due by `$1` (lease ended
    /// before `$2`) and not before `$3`, earliest first. Ordered by the
    /// due-time index alone, and starting in it at `$3`, so the scan stops
    /// at `limit` however large the backlog.
    pub fn pending_due(limit: u32) -> String {
        format!(
            "SELECT delivery_ref, next_attempt_at FROM webhook_deliveries \
             WHERE {} AND next_attempt_at >= $3 ORDER BY next_attempt_at LIMIT {limit}",
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

        /// The hot claim's statement, on the lease primitive, reads as it
        /// was written by hand before: the same text, the same plan.
        #[test]
        fn the_claim_keeps_its_text() {
            assert_eq!(
                claim_due(Backend::Postgres, 50),
                format!(
                    "UPDATE webhook_deliveries SET lease_owner = $1, lease_until = $2 \
                     WHERE delivery_ref IN (SELECT delivery_ref FROM webhook_deliveries \
                     WHERE {} ORDER BY next_attempt_at LIMIT 50 FOR UPDATE SKIP LOCKED) \
                     RETURNING *",
                    claimable("$3", "$3")
                )
            );
            assert_eq!(
                claimable("$1", "$2"),
                "status = 'pending' AND next_attempt_at <= $1 \
                 AND (lease_until IS NULL OR lease_until < $2)"
            );
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
