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
//! - `P:fed`, a marker the feed's full pass sets to the store's identity:
//!   when it is missing, Redis lost its data; when it names another store,
//!   another store's fleet uses these keys too. Either way the feed makes
//!   full passes until the schedule is whole again.
//!
//! Whose keys: a fleet is its store. By default `P` is
//! `billing:<store identity>` ([`Keys::own`]), so two stores on one Redis
//! database never meet. An operator may name `P` instead
//! (`scheduler.key_prefix`, [`Keys::named`]); then another store may use the
//! same keys, and the claim path never deletes a member its own store does
//! not know: it puts it back where it was and passes over it for a while
//! (`FOREIGN_SKIP`), so the store that owns it still finds it on time.
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
use domain::{StoreId, Timestamp};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
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
/// How long a claimer passes over a member its store does not know (under
/// a named prefix, another store's): long enough that the owner takes it,
/// short enough that a member left by a store that is gone for good comes
/// back to be looked at again.
pub const FOREIGN_SKIP: Duration = Duration::from_secs(60);
/// Most members a claimer passes over at once; beyond it the oldest are
/// forgotten (and looked at again).
const FOREIGN_SKIP_MAX: usize = 10_000;

/// Moves up to ARGV[3] members of KEYS[1] (due) with score <= ARGV[1] (now)
/// to KEYS[2] (leased) with score ARGV[2] (lease end), earliest first,
/// passing over the members named in ARGV[4..]; returns each taken member
/// followed by its due score.
const TAKE_DUE: &str = r"
local limit = tonumber(ARGV[3])
local skip = {}
for i = 4, #ARGV do skip[ARGV[i]] = true end
local refs = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'WITHSCORES', 'LIMIT', 0, limit + #ARGV - 3)
local out = {}
for i = 1, #refs, 2 do
  local r = refs[i]
  if #out >= 2 * limit then break end
  if not skip[r] then
    redis.call('ZREM', KEYS[1], r)
    redis.call('ZADD', KEYS[2], ARGV[2], r)
    out[#out + 1] = r
    out[#out + 1] = refs[i + 1]
  end
end
return out
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

/// Which keys a schedule uses, and for which store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    prefix: String,
    owner: StoreId,
    /// No other store uses `prefix`: a member the store does not know is
    /// its own leftover (a delivery deleted since), and is dropped.
    exclusive: bool,
}

impl Keys {
    /// The store's own keys, `billing:<store identity>`: the default.
    pub fn own(owner: StoreId) -> Keys {
        Keys::exclusive(format!("billing:{owner}"), owner)
    }

    /// Keys under `prefix` that the caller vouches no other store uses
    /// (a test's fresh prefix).
    pub fn exclusive(prefix: impl Into<String>, owner: StoreId) -> Keys {
        Keys {
            prefix: prefix.into(),
            owner,
            exclusive: true,
        }
    }

    /// Keys under a prefix an operator named (`scheduler.key_prefix`),
    /// which another store may name too.
    pub fn named(prefix: impl Into<String>, owner: StoreId) -> Keys {
        Keys {
            prefix: prefix.into(),
            owner,
            exclusive: false,
        }
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }
}

/// What the `P:fed` marker says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Marker {
    /// Set by a full pass of this store: Redis holds its schedule.
    Ours,
    /// Gone: Redis lost its data, or no pass ever ran under these keys.
    Missing,
    /// Set by another store (named): it uses these keys too.
    Foreign(String),
}

/// The due set, lease set and attempt counters of one store (its key
/// prefix) in Redis. Cheap to clone; clones share one connection, which
/// reconnects by itself after a Redis restart.
#[derive(Clone)]
pub struct RedisSchedule {
    /// Shared with `redis_buckets`, which keeps the API's rate limit here.
    pub(crate) conn: ConnectionManager,
    keys: Keys,
    due_key: String,
    leased_key: String,
    fed_key: String,
    /// Members this store does not know, passed over until the instant
    /// given (only under a named prefix).
    foreign: Arc<Mutex<HashMap<String, Instant>>>,
    take_due: Arc<redis::Script>,
    reclaim: Arc<redis::Script>,
    schedule_unleased: Arc<redis::Script>,
}

impl std::fmt::Debug for RedisSchedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSchedule")
            .field("keys", &self.keys)
            .finish_non_exhaustive()
    }
}

impl RedisSchedule {
    /// Connects to `url` (`redis://…`), keeping every key under `keys`'
    /// prefix. Fails when Redis cannot be reached within a few seconds.
    pub async fn connect(url: &str, keys: Keys) -> Result<RedisSchedule, DispatchError> {
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
        let key_prefix = keys.prefix.clone();
        Ok(RedisSchedule {
            conn,
            keys,
            due_key: format!("{key_prefix}:due"),
            leased_key: format!("{key_prefix}:leased"),
            fed_key: format!("{key_prefix}:fed"),
            foreign: Arc::default(),
            take_due: Arc::new(redis::Script::new(TAKE_DUE)),
            reclaim: Arc::new(redis::Script::new(RECLAIM)),
            schedule_unleased: Arc::new(redis::Script::new(SCHEDULE_UNLEASED)),
        })
    }

    pub fn key_prefix(&self) -> &str {
        &self.keys.prefix
    }

    /// The store whose schedule this is.
    pub fn owner(&self) -> &StoreId {
        &self.keys.owner
    }

    fn attempts_key(&self, delivery_ref: &str) -> String {
        format!("{}:attempts:{delivery_ref}", self.keys.prefix)
    }

    /// The members to pass over now, forgetting those whose time is up.
    fn passed_over(&self) -> Vec<String> {
        let mut foreign = self.foreign.lock().unwrap_or_else(|p| p.into_inner());
        if foreign.is_empty() {
            return Vec::new();
        }
        let now = Instant::now();
        foreign.retain(|_, until| *until > now);
        foreign.keys().cloned().collect()
    }

    /// Passes over `refs` for [`FOREIGN_SKIP`].
    fn pass_over(&self, refs: &[(String, i64)]) {
        let mut foreign = self.foreign.lock().unwrap_or_else(|p| p.into_inner());
        let until = Instant::now() + FOREIGN_SKIP;
        for (r, _) in refs {
            if foreign.len() >= FOREIGN_SKIP_MAX {
                let oldest = foreign
                    .iter()
                    .min_by_key(|(_, t)| **t)
                    .map(|(k, _)| k.clone());
                if let Some(oldest) = oldest {
                    foreign.remove(&oldest);
                }
            }
            foreign.insert(r.clone(), until);
        }
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
    /// earliest first, and returns them with their due times. No two
    /// callers get the same member. Members this store found to be another
    /// store's are passed over for a while.
    pub async fn take_due(
        &self,
        now_ms: i64,
        lease_until_ms: i64,
        limit: usize,
    ) -> Result<Vec<(String, i64)>, DispatchError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let flat: Vec<String> = self
            .take_due
            .key(&self.due_key)
            .key(&self.leased_key)
            .arg(now_ms)
            .arg(lease_until_ms)
            .arg(limit)
            .arg(self.passed_over())
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(flat
            .chunks_exact(2)
            .map(|pair| {
                // Scores come back as text; ours are whole milliseconds.
                let due = pair[1].parse::<f64>().map_or(now_ms, |f| f as i64);
                (pair[0].clone(), due)
            })
            .collect())
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

    /// Whether Redis still holds what this store's last full feed pass
    /// wrote: the marker `P:fed` that pass set to the store's identity is
    /// gone when Redis lost its data (FLUSHALL, a restart without
    /// persistence), and names another store when one shares the keys.
    pub async fn marker(&self) -> Result<Marker, DispatchError> {
        let value: Option<String> = redis::cmd("GET")
            .arg(&self.fed_key)
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(match value {
            None => Marker::Missing,
            Some(v) if v == self.keys.owner.as_str() => Marker::Ours,
            Some(v) => Marker::Foreign(v),
        })
    }

    async fn mark_fed(&self) -> Result<(), DispatchError> {
        redis::cmd("SET")
            .arg(&self.fed_key)
            .arg(self.keys.owner.as_str())
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
    /// The due time of the last delivery it read, if any.
    pub last_due: Option<i64>,
}

impl FeedPass {
    /// Where the next pass goes on from, if this one (which started at
    /// `from`) read a whole batch: its last due time, so that a backlog
    /// larger than a batch is read once, batch after batch, rather than
    /// its earliest batch again and again. Deliveries due at that very
    /// time are read again (harmless: a member already in the due set is
    /// written again). `None` (start again from the earliest, at the next
    /// pass that is asked for) once a batch comes back short, or when a
    /// whole batch shares one due time and the pass made no progress.
    pub fn next_from(&self, from: Option<i64>) -> Option<i64> {
        let full = self.scheduled >= FEED_BATCH as usize;
        self.last_due
            .filter(|last| full && from.is_none_or(|from| *last > from))
    }
}

/// One full pass of `feed`: schedules the store's unleased pending
/// deliveries due within `horizon` (at most [`FEED_BATCH`], earliest
/// first), reclaims expired leases, and marks the schedule fed.
pub async fn feed_once(
    store: &Store,
    schedule: &RedisSchedule,
    horizon: Duration,
) -> Result<FeedPass, DispatchError> {
    feed_from(store, schedule, horizon, None).await
}

/// `feed_once` reading the deliveries due from `from` (Unix milliseconds)
/// on: the next batch of a backlog (`FeedPass::next_from`).
pub async fn feed_from(
    store: &Store,
    schedule: &RedisSchedule,
    horizon: Duration,
    from: Option<i64>,
) -> Result<FeedPass, DispatchError> {
    let now = Timestamp::now();
    let until = now.plus_millis(horizon.as_millis() as i64);
    let items = store
        .dispatch()
        .pending_due_refs_from(until, from.map(Timestamp::from_millis), FEED_BATCH)
        .await?;
    schedule.schedule_unleased(&items).await?;
    let reclaimed = schedule.reclaim_expired(now.millis()).await?;
    schedule.mark_fed().await?;
    Ok(FeedPass {
        scheduled: items.len(),
        reclaimed,
        last_due: items.last().map(|(_, due)| *due),
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
/// `P:fed` marker is gone or names another store, and every tick for
/// [`AFTER_LOSS`] after that),
/// after a pass that filled a whole batch (the next one going on where it
/// ended, `FeedPass::next_from`), and every [`FULL_PASS_EVERY`];
/// every [`FEED_TICK`] expired leases are reclaimed. Errors are logged and
/// the next tick tries again. Runs until `shutdown`.
pub async fn feed(store: Store, schedule: Arc<RedisSchedule>, shutdown: CancellationToken) {
    let horizon = FULL_PASS_EVERY + FEED_HORIZON;
    let mut signals = store.due_signals().await;
    let mut last_full: Option<tokio::time::Instant> = None;
    let mut lost_at: Option<tokio::time::Instant> = None;
    let mut foreign_seen: Option<String> = None;
    let mut wanted = true;
    // Where the next pass goes on from while it reads a backlog larger
    // than a batch (`FeedPass::next_from`); `None`: from the earliest.
    let mut from: Option<i64> = None;
    loop {
        if shutdown.is_cancelled() {
            return;
        }
        let stale = last_full.is_none_or(|t| t.elapsed() >= FULL_PASS_EVERY);
        match schedule.marker().await {
            Ok(Marker::Ours) => {}
            Ok(Marker::Missing) => lost_at = Some(tokio::time::Instant::now()),
            Ok(Marker::Foreign(other)) => {
                // Another store wrote here since this store's last pass:
                // whatever it took under these keys, a full pass restores.
                if foreign_seen.as_deref() != Some(other.as_str()) {
                    tracing::warn!(
                        key_prefix = schedule.key_prefix(),
                        store = %schedule.owner(),
                        other_store = %other,
                        "another store uses this Redis key prefix; give each store its own scheduler.key_prefix"
                    );
                    foreign_seen = Some(other);
                }
                lost_at = Some(tokio::time::Instant::now());
            }
            Err(e) => {
                tracing::warn!(error = %e, "reading the Redis schedule's marker failed; retrying");
            }
        }
        // Leases Redis forgot come back to the store's pool only as they
        // expire: keep passing every tick until the longest has.
        let recovering = lost_at.is_some_and(|t| t.elapsed() < AFTER_LOSS);
        if stale || recovering {
            from = None;
        }
        let outcome = if wanted || stale || recovering {
            feed_from(&store, &schedule, horizon, from)
                .await
                .map(|pass| {
                    last_full = Some(tokio::time::Instant::now());
                    // A full batch may have left more behind it.
                    from = pass.next_from(from);
                    wanted = from.is_some();
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
                // What was made due is due now: earlier than a backlog's
                // later batches.
                from = None;
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
/// Returns the leased records, earliest due first. The members the store
/// did not lease are dropped from the lease set (the feed schedules them
/// again if they are still pending), except, under a named prefix, those
/// the store does not know at all: another store's, put back where they
/// were and passed over for [`FOREIGN_SKIP`]. When the store fails, the
/// taken members go back to the due set and the error is returned.
///
/// The members beyond the room the worker has for their endpoint
/// (`no_room`) are neither leased nor written: they go back to the due
/// set, due again after `no_room.retry_after`, so the members behind them
/// are taken next. Leasing them only to give them back would cost two writes of each
/// row in the store, and a saturated endpoint's backlog would be written
/// over and over. Returns the leased records and how many were passed over.
pub async fn claim(
    store: &Store,
    schedule: &RedisSchedule,
    (owner, now, lease_until): (&str, Timestamp, Timestamp),
    limit: u32,
    no_room: &NoRoom,
) -> Result<(Vec<DeliveryRecord>, usize), DispatchError> {
    let taken = schedule
        .take_due(now.millis(), lease_until.millis(), limit as usize)
        .await?;
    let (taken, passed) = no_room.split(store, taken, now).await;
    if !passed.is_empty() {
        if let Err(e) = schedule.give_back(&passed).await {
            // Their Redis leases expire and `reclaim_expired` returns them.
            tracing::warn!(error = %e, "returning passed-over deliveries to Redis failed");
        }
    }
    if taken.is_empty() {
        return Ok((Vec::new(), passed.len()));
    }
    let refs: Vec<String> = taken.iter().map(|(r, _)| r.clone()).collect();
    let mut claimed = match store
        .dispatch()
        .claim_deliveries_by_ref(owner, &refs, now, lease_until)
        .await
    {
        Ok(c) => c,
        Err(e) => {
            if let Err(e) = schedule.give_back(&taken).await {
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
        let refused: Vec<(String, i64)> = taken
            .into_iter()
            .filter(|(r, _)| !leased.contains(r.as_str()))
            .collect();
        let (foreign, ours) = split_foreign(store, schedule, refused).await;
        // The claim stands even if these fail: those leases expire in
        // Redis, come back, and are refused again.
        if !foreign.is_empty() {
            schedule.pass_over(&foreign);
            if let Err(e) = schedule.give_back(&foreign).await {
                tracing::warn!(error = %e, "putting back another store's Redis members failed");
            }
        }
        let ours: Vec<String> = ours.into_iter().map(|(r, _)| r).collect();
        if let Err(e) = schedule.release(&ours).await {
            tracing::warn!(error = %e, "dropping refused Redis leases failed");
        }
    }
    Ok((claimed, passed.len()))
}

/// The endpoints whose deliveries a worker has limited room for at a
/// claim (each is at its limit of attempts, with deliveries waiting in
/// the worker): how many more of each it can keep, and how long those it
/// cannot wait before they are taken again.
#[derive(Debug, Default)]
pub struct NoRoom {
    pub room: HashMap<String, usize>,
    pub retry_after: Duration,
}

impl NoRoom {
    /// Splits members taken from the due set, earliest due first, into
    /// those to lease and those beyond their endpoint's room, the latter
    /// with their new due time (`now` + `retry_after`). When the store
    /// cannot say whose they are, every one is leased, as without this
    /// split.
    async fn split(
        &self,
        store: &Store,
        taken: Vec<(String, i64)>,
        now: Timestamp,
    ) -> (Vec<(String, i64)>, Vec<(String, i64)>) {
        if self.room.is_empty() || taken.is_empty() {
            return (taken, Vec::new());
        }
        let refs: Vec<String> = taken.iter().map(|(r, _)| r.clone()).collect();
        let endpoints = match store.dispatch().endpoints_of_deliveries(&refs).await {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(error = %e, "reading the endpoints of taken deliveries failed");
                return (taken, Vec::new());
            }
        };
        let due = now.millis() + self.retry_after.as_millis() as i64;
        let mut room = self.room.clone();
        let (mut lease, mut passed) = (Vec::new(), Vec::new());
        for (r, score) in taken {
            match endpoints.get(&r).and_then(|e| room.get_mut(e)) {
                Some(0) => passed.push((r, due)),
                Some(left) => {
                    *left -= 1;
                    lease.push((r, score));
                }
                None => lease.push((r, score)),
            }
        }
        (lease, passed)
    }
}

/// Splits refused members into another store's (under a named prefix, the
/// references this store does not know) and this store's own. When the
/// store cannot tell, every one counts as another store's: putting a
/// member back is always safe, deleting one is not.
async fn split_foreign(
    store: &Store,
    schedule: &RedisSchedule,
    refused: Vec<(String, i64)>,
) -> (Vec<(String, i64)>, Vec<(String, i64)>) {
    if schedule.keys.exclusive || refused.is_empty() {
        return (Vec::new(), refused);
    }
    let refs: Vec<String> = refused.iter().map(|(r, _)| r.clone()).collect();
    match store.dispatch().known_delivery_refs(&refs).await {
        Ok(known) => refused
            .into_iter()
            .partition(|(r, _)| !known.contains(r.as_str())),
        Err(e) => {
            tracing::warn!(error = %e, "telling another store's Redis members from ours failed");
            (refused, Vec::new())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pass(scheduled: usize, last_due: Option<i64>) -> FeedPass {
        FeedPass {
            scheduled,
            reclaimed: 0,
            last_due,
        }
    }

    /// A backlog is read batch after batch, each from where the last
    /// ended, and from the earliest again once a batch comes back short.
    #[test]
    fn a_backlog_is_read_once_batch_after_batch() {
        let full = FEED_BATCH as usize;
        assert_eq!(pass(full, Some(100)).next_from(None), Some(100));
        assert_eq!(pass(full, Some(250)).next_from(Some(100)), Some(250));
        assert_eq!(pass(full - 1, Some(300)).next_from(Some(250)), None);
        assert_eq!(pass(0, None).next_from(Some(250)), None);
    }

    /// A whole batch due at one time makes no progress: the walk stops
    /// rather than read that batch for ever.
    #[test]
    fn a_batch_that_makes_no_progress_ends_the_walk() {
        let full = FEED_BATCH as usize;
        assert_eq!(pass(full, Some(100)).next_from(Some(100)), None);
    }
}
