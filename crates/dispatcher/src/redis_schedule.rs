//! The fleet schedule in Redis: which deliveries are due, which are leased
//! to a worker, and how many attempts each had.
//!
//! Keys, under a configurable prefix `P`:
//!
//! - `P:due`, a sorted set: member = delivery reference, score = when it
//!   is due (Unix milliseconds).
//! - `P:leased`, a sorted set: member = delivery reference, score = when
//!   its lease ends. `take_due` moves members here atomically (Lua), so two
//!   workers never take the same member; a member whose lease ended (its
//!   worker died) goes back to `P:due` with `reclaim_expired`.
//! - `P:attempts:<delivery_ref>`, a counter of finished attempts while the
//!   delivery has retries to come: deleted with its last attempt (the
//!   store's `attempt_count` is the record), and expiring
//!   [`ATTEMPTS_TTL_SECS`] after the last one in any case, so Redis holds
//!   counters only for deliveries still in their retry schedule.
//! - `P:fed`, a marker the feed's full pass sets: when it is missing, Redis
//!   lost its data.
//!
//! The store stays the source of truth. Redis is only a fast index of it,
//! kept by the writers themselves: the intake puts the deliveries it left
//! due (`index_left_due`), the recorder the retries it recorded (`finish`),
//! a worker what it gives back (`give_back`). `feed` only repairs: a full
//! pass over the store's due deliveries (an idempotent `ZADD`) when a write
//! elsewhere signals deliveries made due (`store::signals`), when the
//! marker shows Redis lost its data (FLUSHALL, a restart without
//! persistence), and every [`FULL_PASS_EVERY`]; it never polls the store
//! in between. `claim` leases in the store what it took from Redis, with
//! the SQL lease as the fence: a row another worker holds, or that
//! finished or moved later meanwhile, is skipped and dropped from Redis. A
//! stale or duplicate member is therefore harmless; it costs one skipped
//! row.

use crate::DispatchError;
use domain::Timestamp;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use store::{DeliveryRecord, Store};
use tokio_util::sync::CancellationToken;

/// The Redis client crate, for callers (tests) that need a raw connection.
pub use redis;

/// How long an attempt counter lives after its last attempt: longer than
/// any retry schedule the service accepts.
pub const ATTEMPTS_TTL_SECS: i64 = 7 * 24 * 3600;
/// How far ahead `feed` looks at least: deliveries due within it are put
/// into the due set before they fall due.
pub const FEED_HORIZON: Duration = Duration::from_secs(5);
/// Most deliveries `feed` reads from the store per pass (the earliest due).
pub const FEED_BATCH: u32 = 10_000;
/// How long a (re)connection to Redis may take.
const REDIS_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a command may wait for Redis's answer: far more than the
/// largest (a script over [`CHUNK`] members) takes.
const REDIS_RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);
/// Further attempts `RedisSchedule::connect` makes, half a second apart.
const STARTUP_RETRIES: u32 = 6;
/// Members per command when writing or moving many.
const CHUNK: usize = 1_000;
/// Expired leases moved back per script call.
const RECLAIM_BATCH: usize = 1_000;

/// Moves up to ARGV[3] members of KEYS[1] (due) with score <= ARGV[1] (now)
/// to KEYS[2] (leased) with score ARGV[2] (lease end); returns them.
const TAKE_DUE: &str = r"
local refs = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
for _, r in ipairs(refs) do
  redis.call('ZREM', KEYS[1], r)
  redis.call('ZADD', KEYS[2], ARGV[2], r)
end
return refs
";

/// Moves up to ARGV[2] members of KEYS[2] (leased) with score < ARGV[1]
/// (now) back to KEYS[1] (due), due now unless already scheduled there;
/// returns how many moved.
const RECLAIM: &str = r"
local refs = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
for _, r in ipairs(refs) do
  redis.call('ZREM', KEYS[2], r)
  redis.call('ZADD', KEYS[1], 'NX', ARGV[1], r)
end
return #refs
";

/// For each (ARGV[i] score, ARGV[i+1] member) pair: adds the member to
/// KEYS[1] (due) unless it is in KEYS[2] (leased), where a worker has taken
/// it and is leasing or attempting it; returns how many were added.
const SCHEDULE_UNLEASED: &str = r"
local n = 0
for i = 1, #ARGV, 2 do
  if not redis.call('ZSCORE', KEYS[2], ARGV[i + 1]) then
    redis.call('ZADD', KEYS[1], ARGV[i], ARGV[i + 1])
    n = n + 1
  end
end
return n
";

/// The due set, lease set and attempt counters of one deployment (its key
/// prefix) in Redis. Cheap to clone; clones share one connection, which
/// reconnects by itself after a Redis restart.
#[derive(Clone)]
pub struct RedisSchedule {
    /// Shared with `redis_buckets`, which keeps the API's rate limit here.
    pub(crate) conn: ConnectionManager,
    prefix: String,
    due_key: String,
    leased_key: String,
    fed_key: String,
    take_due: Arc<redis::Script>,
    reclaim: Arc<redis::Script>,
    schedule_unleased: Arc<redis::Script>,
}

impl std::fmt::Debug for RedisSchedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSchedule")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl RedisSchedule {
    /// Connects to `url` (`redis://…`), keeping every key under
    /// `key_prefix`. Fails when Redis cannot be reached within a few
    /// seconds.
    pub async fn connect(url: &str, key_prefix: &str) -> Result<RedisSchedule, DispatchError> {
        let client = redis::Client::open(url)?;
        // While Redis is down, every command waits for the manager's
        // reconnection: one attempt, failing at once when the server
        // refuses and within `REDIS_CONNECT_TIMEOUT` when it does not
        // answer. The callers retry on their own (the loops at their next
        // round, the API's rate limit falls back to the process's buckets),
        // so a request never waits seconds for a Redis that is gone.
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(REDIS_CONNECT_TIMEOUT)
            .set_response_timeout(REDIS_RESPONSE_TIMEOUT)
            .set_number_of_retries(0);
        // A Redis still starting gets a few seconds, as before.
        let mut tries = 0;
        let conn = loop {
            match ConnectionManager::new_with_config(client.clone(), config.clone()).await {
                Ok(conn) => break conn,
                Err(_) if tries < STARTUP_RETRIES => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(e) => return Err(e.into()),
            }
        };
        Ok(RedisSchedule {
            conn,
            prefix: key_prefix.to_owned(),
            due_key: format!("{key_prefix}:due"),
            leased_key: format!("{key_prefix}:leased"),
            fed_key: format!("{key_prefix}:fed"),
            take_due: Arc::new(redis::Script::new(TAKE_DUE)),
            reclaim: Arc::new(redis::Script::new(RECLAIM)),
            schedule_unleased: Arc::new(redis::Script::new(SCHEDULE_UNLEASED)),
        })
    }

    pub fn key_prefix(&self) -> &str {
        &self.prefix
    }

    fn attempts_key(&self, delivery_ref: &str) -> String {
        format!("{}:attempts:{delivery_ref}", self.prefix)
    }

    /// Adds (or moves) due times: `ZADD P:due due_ms delivery_ref`.
    pub async fn schedule(&self, items: &[(String, i64)]) -> Result<(), DispatchError> {
        if items.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        self.add_due(&mut pipe, items);
        pipe.query_async::<()>(&mut self.conn.clone()).await?;
        Ok(())
    }

    /// Adds to `pipe` the `ZADD`s that schedule `items` (reference, due
    /// time), a command per [`CHUNK`].
    fn add_due(&self, pipe: &mut redis::Pipeline, items: &[(String, i64)]) {
        for chunk in items.chunks(CHUNK) {
            let add = pipe.cmd("ZADD").arg(&self.due_key);
            for (delivery_ref, due_ms) in chunk {
                add.arg(*due_ms).arg(delivery_ref);
            }
            add.ignore();
        }
    }

    /// `schedule` for what a read of the store found due: a member a
    /// worker has taken meanwhile (in the lease set) is left alone, so a
    /// pass racing a claim does not put the claimed delivery back.
    pub async fn schedule_unleased(&self, items: &[(String, i64)]) -> Result<(), DispatchError> {
        for chunk in items.chunks(CHUNK) {
            let mut call = self.schedule_unleased.key(&self.due_key);
            call.key(&self.leased_key);
            for (delivery_ref, due_ms) in chunk {
                call.arg(*due_ms).arg(delivery_ref);
            }
            call.invoke_async::<i64>(&mut self.conn.clone()).await?;
        }
        Ok(())
    }

    /// Atomically moves up to `limit` members due at `now_ms` (score <=
    /// now) from the due set to the lease set, with score `lease_until_ms`,
    /// earliest first, and returns them. No two callers get the same member.
    pub async fn take_due(
        &self,
        now_ms: i64,
        lease_until_ms: i64,
        limit: usize,
    ) -> Result<Vec<String>, DispatchError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        Ok(self
            .take_due
            .key(&self.due_key)
            .key(&self.leased_key)
            .arg(now_ms)
            .arg(lease_until_ms)
            .arg(limit)
            .invoke_async(&mut self.conn.clone())
            .await?)
    }

    /// Removes finished leases (after the attempt is recorded), counts one
    /// attempt for each in `P:attempts:<delivery_ref>`, and schedules the
    /// retries among them (`due`: reference and due time) in the same
    /// transaction, so a retry is in the due set the moment its lease
    /// leaves, whatever the feed does. A delivery without a retry among
    /// `due` has ended: its counter is deleted.
    pub async fn finish(
        &self,
        refs: &[String],
        due: &[(String, i64)],
    ) -> Result<(), DispatchError> {
        if refs.is_empty() && due.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        pipe.atomic();
        for chunk in refs.chunks(CHUNK) {
            pipe.cmd("ZREM").arg(&self.leased_key).arg(chunk).ignore();
        }
        self.add_due(&mut pipe, due);
        let retried: std::collections::HashSet<&str> =
            due.iter().map(|(r, _)| r.as_str()).collect();
        for r in refs {
            let key = self.attempts_key(r);
            if retried.contains(r.as_str()) {
                pipe.cmd("INCR").arg(&key).ignore();
                pipe.cmd("EXPIRE").arg(&key).arg(ATTEMPTS_TTL_SECS).ignore();
            } else {
                pipe.cmd("DEL").arg(&key).ignore();
            }
        }
        pipe.query_async::<()>(&mut self.conn.clone()).await?;
        Ok(())
    }

    /// Drops leases without counting an attempt (the store refused the
    /// lease, or the worker gave the delivery back to the store).
    pub async fn release(&self, refs: &[String]) -> Result<(), DispatchError> {
        if refs.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        for chunk in refs.chunks(CHUNK) {
            pipe.cmd("ZREM").arg(&self.leased_key).arg(chunk).ignore();
        }
        pipe.query_async::<()>(&mut self.conn.clone()).await?;
        Ok(())
    }

    /// Drops leases and schedules the deliveries again at the given due
    /// times, atomically: for a worker that gives a delivery back (busy
    /// endpoint, open circuit) and wants it retried sooner than the next
    /// feed pass.
    pub async fn give_back(&self, items: &[(String, i64)]) -> Result<(), DispatchError> {
        if items.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        pipe.atomic();
        for chunk in items.chunks(CHUNK) {
            let rem = pipe.cmd("ZREM").arg(&self.leased_key);
            for (delivery_ref, _) in chunk {
                rem.arg(delivery_ref);
            }
            rem.ignore();
        }
        self.add_due(&mut pipe, items);
        pipe.query_async::<()>(&mut self.conn.clone()).await?;
        Ok(())
    }

    /// Moves leases that ended before `now_ms` back to the due set (due
    /// now, unless the member is already scheduled there): the attempts of
    /// a worker that died return to the pool. Returns how many moved.
    pub async fn reclaim_expired(&self, now_ms: i64) -> Result<usize, DispatchError> {
        let mut total = 0;
        loop {
            let moved: usize = self
                .reclaim
                .key(&self.due_key)
                .key(&self.leased_key)
                .arg(now_ms)
                .arg(RECLAIM_BATCH)
                .invoke_async(&mut self.conn.clone())
                .await?;
            total += moved;
            if moved < RECLAIM_BATCH {
                return Ok(total);
            }
        }
    }

    /// Members of the due set, due now or within the feed's horizon (the
    /// backlog gauge).
    pub async fn due_len(&self) -> Result<u64, DispatchError> {
        Ok(redis::cmd("ZCARD")
            .arg(&self.due_key)
            .query_async(&mut self.conn.clone())
            .await?)
    }

    /// Members of the lease set (attempts taken and not finished).
    pub async fn leased_len(&self) -> Result<u64, DispatchError> {
        Ok(redis::cmd("ZCARD")
            .arg(&self.leased_key)
            .query_async(&mut self.conn.clone())
            .await?)
    }

    /// Attempts finished for `delivery_ref` while it has retries to come
    /// (0 once it has ended, or when unknown, e.g. after Redis lost its
    /// data: the store's `attempt_count` is the authority).
    pub async fn attempts(&self, delivery_ref: &str) -> Result<u64, DispatchError> {
        let n: Option<u64> = redis::cmd("GET")
            .arg(self.attempts_key(delivery_ref))
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(n.unwrap_or(0))
    }

    pub async fn ping(&self) -> Result<(), DispatchError> {
        redis::cmd("PING")
            .query_async::<String>(&mut self.conn.clone())
            .await?;
        Ok(())
    }

    /// Whether Redis still holds what the last full feed pass wrote: the
    /// marker `P:fed` that pass set is gone when Redis lost its data
    /// (FLUSHALL, a restart without persistence).
    pub async fn is_fed(&self) -> Result<bool, DispatchError> {
        Ok(redis::cmd("EXISTS")
            .arg(&self.fed_key)
            .query_async::<u32>(&mut self.conn.clone())
            .await?
            == 1)
    }

    async fn mark_fed(&self) -> Result<(), DispatchError> {
        redis::cmd("SET")
            .arg(&self.fed_key)
            .arg(Timestamp::now().millis())
            .query_async::<()>(&mut self.conn.clone())
            .await?;
        Ok(())
    }
}

/// What one feed pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FeedPass {
    /// Deliveries written into the due set (most were there already).
    pub scheduled: usize,
    /// Expired leases moved back to the due set.
    pub reclaimed: usize,
}

/// One full pass of `feed`: schedules the store's unleased pending
/// deliveries due within `horizon` (at most [`FEED_BATCH`], earliest
/// first), reclaims expired leases, and marks the schedule fed.
pub async fn feed_once(
    store: &Store,
    schedule: &RedisSchedule,
    horizon: Duration,
) -> Result<FeedPass, DispatchError> {
    let now = Timestamp::now();
    let until = now.plus_millis(horizon.as_millis() as i64);
    let items = store.pending_due_refs(until, FEED_BATCH).await?;
    schedule.schedule_unleased(&items).await?;
    let reclaimed = schedule.reclaim_expired(now.millis()).await?;
    schedule.mark_fed().await?;
    Ok(FeedPass {
        scheduled: items.len(),
        reclaimed,
    })
}

/// How often the feed reclaims expired leases and checks that Redis still
/// holds the schedule (two Redis commands, no query of the store).
pub const FEED_TICK: Duration = Duration::from_secs(1);
/// Longest time between two full passes over the store. Writers put what
/// they make due into Redis themselves (the intake, the recorder's
/// retries, give-backs) or signal it (`Store::due_signals`), so a full
/// pass only repairs what a crash between a commit and its Redis write
/// left behind.
pub const FULL_PASS_EVERY: Duration = Duration::from_secs(30);

/// After Redis lost its data, how long every tick makes a full pass: longer
/// than any lease, so the deliveries leased when Redis forgot them are
/// scheduled again once their store leases end.
const AFTER_LOSS: Duration = Duration::from_secs(60);

/// How long the feed gathers signals before the pass they ask for.
const SIGNAL_GATHER: Duration = Duration::from_millis(20);

/// Keeps Redis an index of the store's due deliveries, driven by events
/// rather than polling: a full pass (`feed_once`, looking
/// [`FULL_PASS_EVERY`] plus [`FEED_HORIZON`] ahead) runs at start, when a
/// write of the store signals deliveries made due (this process's, or
/// another's through PostgreSQL `NOTIFY`), when Redis lost its data (the
/// `P:fed` marker is gone, and every tick for [`AFTER_LOSS`] after that),
/// after a pass that filled a whole batch, and every [`FULL_PASS_EVERY`];
/// every [`FEED_TICK`] expired leases are reclaimed. Errors are logged and
/// the next tick tries again. Runs until `shutdown`.
pub async fn feed(store: Store, schedule: Arc<RedisSchedule>, shutdown: CancellationToken) {
    let horizon = FULL_PASS_EVERY + FEED_HORIZON;
    let mut signals = store.due_signals().await;
    let mut last_full: Option<tokio::time::Instant> = None;
    let mut lost_at: Option<tokio::time::Instant> = None;
    let mut wanted = true;
    loop {
        if shutdown.is_cancelled() {
            return;
        }
        let stale = last_full.is_none_or(|t| t.elapsed() >= FULL_PASS_EVERY);
        match schedule.is_fed().await {
            Ok(false) => lost_at = Some(tokio::time::Instant::now()),
            Ok(true) => {}
            Err(e) => {
                tracing::warn!(error = %e, "reading the Redis schedule's marker failed; retrying");
            }
        }
        // Leases Redis forgot come back to the store's pool only as they
        // expire: keep passing every tick until the longest has.
        let recovering = lost_at.is_some_and(|t| t.elapsed() < AFTER_LOSS);
        let outcome = if wanted || stale || recovering {
            feed_once(&store, &schedule, horizon).await.map(|pass| {
                last_full = Some(tokio::time::Instant::now());
                // A full batch may have left more behind it.
                wanted = pass.scheduled >= FEED_BATCH as usize;
            })
        } else {
            schedule
                .reclaim_expired(Timestamp::now().millis())
                .await
                .map(|_| ())
        };
        if let Err(e) = outcome {
            tracing::warn!(error = %e, "feeding the Redis schedule failed; retrying");
            wanted = true;
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = signals.next() => {
                wanted = true;
                // Writes that make deliveries due come in bursts (a batch
                // redrive): one pass for the burst, not one per write.
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(SIGNAL_GATHER) => {}
                }
            }
            _ = tokio::time::sleep(FEED_TICK) => {}
        }
    }
}

/// Puts the deliveries the intake left due (`handoff::Intake::left_due`)
/// into the due set, a batch per round trip, and wakes the claim loop
/// (`wake`). If Redis cannot take them, the next feed pass over the store
/// is asked for instead. Runs until the intake's sender is dropped.
pub async fn index_left_due(
    store: Store,
    schedule: Arc<RedisSchedule>,
    mut left: tokio::sync::mpsc::UnboundedReceiver<Vec<(domain::Ref, Timestamp)>>,
    wake: Arc<tokio::sync::Notify>,
) {
    while let Some(mut batch) = left.recv().await {
        while let Ok(more) = left.try_recv() {
            batch.extend(more);
        }
        let items: Vec<(String, i64)> = batch
            .into_iter()
            .map(|(r, due)| (r.into_string(), due.millis()))
            .collect();
        match schedule.schedule(&items).await {
            Ok(()) => wake.notify_one(),
            Err(e) => {
                tracing::warn!(error = %e, "indexing new deliveries in Redis failed; the feed will");
                store.due_signalled();
            }
        }
    }
}

/// The worker's claim path: takes up to `limit` due members from Redis,
/// then leases those rows in the store (the SQL lease is the fence: a row
/// another worker holds, or that is no longer pending and due, is skipped).
/// Returns the leased records, earliest due first; the members the store
/// did not lease are dropped from the lease set (the feed schedules them
/// again if they are still pending). When the store fails, the taken
/// members go back to the due set and the error is returned.
pub async fn claim(
    store: &Store,
    schedule: &RedisSchedule,
    owner: &str,
    now: Timestamp,
    lease_until: Timestamp,
    limit: u32,
) -> Result<Vec<DeliveryRecord>, DispatchError> {
    let refs = schedule
        .take_due(now.millis(), lease_until.millis(), limit as usize)
        .await?;
    if refs.is_empty() {
        return Ok(Vec::new());
    }
    let mut claimed = match store
        .claim_deliveries_by_ref(owner, &refs, now, lease_until)
        .await
    {
        Ok(c) => c,
        Err(e) => {
            let back: Vec<(String, i64)> = refs.iter().map(|r| (r.clone(), now.millis())).collect();
            if let Err(e) = schedule.give_back(&back).await {
                // Their Redis leases expire and `reclaim_expired` returns them.
                tracing::warn!(error = %e, "returning taken deliveries to Redis failed");
            }
            return Err(e.into());
        }
    };
    let order: HashMap<&str, usize> = refs
        .iter()
        .enumerate()
        .map(|(i, r)| (r.as_str(), i))
        .collect();
    claimed.sort_by_key(|d| order.get(d.delivery_ref.as_str()).copied());
    if claimed.len() < refs.len() {
        let leased: std::collections::HashSet<&str> =
            claimed.iter().map(|d| d.delivery_ref.as_str()).collect();
        let refused: Vec<String> = refs
            .iter()
            .filter(|r| !leased.contains(r.as_str()))
            .cloned()
            .collect();
        // The claim stands even if this fails: those leases expire in
        // Redis, come back, and are refused again.
        if let Err(e) = schedule.release(&refused).await {
            tracing::warn!(error = %e, "dropping refused Redis leases failed");
        }
    }
    Ok(claimed)
}
