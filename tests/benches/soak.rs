//! Soak benchmark of `billing serve` in fleet mode (issue 19): a long run of
//! mixed load (API writes and reads, checkout pays, events through RabbitMQ,
//! a few endpoints that always fail), watched from outside for growth, then
//! audited for lost, doubled and concurrent deliveries.
//!
//! The service runs as `fleet.rs` runs it, from outside, as its own process:
//! the release binary is built first (`cargo build --release -p billing`;
//! `BENCH_BILLING_BIN` names another binary instead), then `billing serve`
//! starts over a PostgreSQL database, a RabbitMQ virtual host and a Redis
//! logical database of its own (named `billing_soak_<pid>_<hex>`; the Redis
//! database is an empty one of 1..15, flushed before and after), with
//! private destinations allowed, the queue and Redis keys named as before
//! stores had identities (`BILLING_QUEUE__NAME=billing.events.dispatcher`,
//! `BILLING_SCHEDULER__KEY_PREFIX=billing`: the run's virtual host and
//! Redis database are its own), `BILLING_LOG__LEVEL=warn` and
//! `BILLING_DELIVERY__RETRY_SCHEDULE=0s,1s,2s,5s` (`BENCH_SOAK_RETRY_SCHEDULE`)
//! so that deliveries to a failing endpoint end `failed` within seconds.
//! `billing admin bootstrap --json` gives the sandbox credential; the setup
//! then makes, through the HTTP API: `BENCH_SOAK_ENDPOINTS` endpoints
//! (default 20), each subscribed to `order.created` (dto 1) and
//! `payment.succeeded` (dto 2), the last `BENCH_SOAK_FAILING_ENDPOINTS` of
//! them (default 5 % of them, at least 1) answering 500 to everything; and a
//! published product, price and checkout config of one one-time item. The
//! database is `ANALYZE`d then, and during the run by autovacuum's rounds
//! (below), or every `BENCH_SOAK_ANALYZE_SECONDS` (default 30) when they
//! are off: this machine's PostgreSQL runs with autovacuum off. Everything is
//! released at the end, passed or failed (a drop guard); leftovers of runs
//! whose process is gone are removed at start.
//!
//! Retention (contract 12.1): `BENCH_SOAK_RETENTION` (a duration such as
//! `5m`; unset or empty: the service's default of 30 days, and no
//! retention check) is passed as `BILLING_RETENTION__DELIVERIES`, with
//! `BILLING_RETENTION__SWEEP_EVERY` = `BENCH_SOAK_SWEEP_EVERY` (default
//! `30s`): settled deliveries with their attempts, then their events, are
//! deleted that long after they settled. `BENCH_SOAK_REQUEST_LOG_RETENTION`
//! (unset or empty: the service's default of 30 days) is passed as
//! `BILLING_RETENTION__REQUEST_LOGS`: the request logs the load's API calls
//! leave are then deleted as well. Idempotency records (at least an hour)
//! and billing records (never) are kept past any run.
//!
//! Autovacuum is off on this machine and on in production, where it
//! reclaims the dead versions that every delivery's updates leave and the
//! swept rows' space. So that a run with retention and one without compare
//! as production would, the benchmark itself does autovacuum's work in
//! both (`vacuumer`; `BENCH_SOAK_AUTOVACUUM=off` leaves it out), a round
//! every `BENCH_SOAK_VACUUM_SECONDS` (default 60, as `autovacuum_naptime`;
//! at once after a longer one), which takes the tables one after another
//! as an autovacuum worker does: a plain `VACUUM` (not `FULL`, no parallel
//! workers) of each table autovacuum would find due, and an `ANALYZE` of
//! each it would find due for one, by PostgreSQL 15's rules with the
//! server's settings and the table's own storage parameters
//! (`DUE_FOR_AUTOVACUUM`), paced as autovacuum paces it (the table's
//! `autovacuum_vacuum_cost_limit` and `_cost_delay`, else the server's: 200
//! every 2 ms), from a connection of its own; the reports and the summary
//! say how many rounds ran, how many tables they vacuumed and analyzed,
//! and how long they took. `BENCH_SOAK_VACUUM_VERBOSE` (set to anything)
//! makes each `VERBOSE`, its report in the server's log: per index of a
//! table, the pages a round deleted and those it left reusable.
//!
//! Load, for `BENCH_SOAK_SECONDS` (default 1,800), each stream paced by a
//! tokio interval, each request its own task, at most
//! `BENCH_SOAK_MAX_IN_FLIGHT` (default 64) in flight per stream (a tick that
//! finds them all busy is counted as skipped, not queued):
//!
//! - events: `BENCH_SOAK_EVENT_RATE` per second (default 50) published with
//!   lapin to `billing.events` (routing key = type, persistent, mandatory,
//!   publisher confirms), alternately `order.created` and
//!   `payment.succeeded` with the catalogue's example data and a fresh
//!   `evt_` reference; only confirmed events are expected;
//! - writes: `BENCH_SOAK_WRITE_RATE` per second (default 20), in turn
//!   `createServiceAccount`, `createProduct`, `createWebhookEndpoint` (an
//!   endpoint without subscriptions), each with a fresh `Idempotency-Key`;
//! - reads: `BENCH_SOAK_READ_RATE` per second (default 50), in turn
//!   `listProducts`, `retrieveProduct`, `retrieveServiceAccount`,
//!   `retrieveWebhookEndpoint`, `listWebhookDeliveries` (of a subscribed
//!   endpoint), `listPayments`, `retrievePayment`, `retrieveCheckoutSession`
//!   (references taken from what the load created);
//! - pays: `BENCH_SOAK_PAY_RATE` per second (default 5): `createCheckoutSession`
//!   then `payCheckoutSession` with `pm_card_visa`. Each successful pay
//!   emits, among others, `payment.succeeded` and `order.created`, which
//!   every endpoint receives too.
//!
//! One axum receiver on 127.0.0.1 serves the endpoints (`/hook/{i}`): it
//! counts, per event (`event_ref` of the delivered body) and endpoint, the
//! requests it got, holds each request `BENCH_SOAK_RECEIVER_DELAY_MS`
//! (default 5) before answering (204, or 500 for a failing endpoint), and
//! tracks the requests in flight per `webhook-id` header (the delivery's
//! reference): the most ever in flight at once for one delivery is the
//! "attempts at once" figure.
//!
//! Every `BENCH_SOAK_REPORT_SECONDS` (default 60) a report: the elapsed
//! time; resident memory (`VmRSS`) and open file descriptors (entries of
//! `/proc/<pid>/fd`) of the `billing` process and its CPU (cores, over the
//! window); the run database's commits and updated rows per second
//! (`pg_stat_database`); the due backlog: the service's gauge
//! `billing_webhook_due_backlog` (its metrics endpoint; the service updates
//! it at most every 15 s), the Redis due set `billing:due` (members due now,
//! and all of them), and in the store the pending deliveries (due now, of
//! the healthy and of the failing endpoints), the outbox, the keys in the
//! run's Redis database and the Redis server's `used_memory`; events
//! published and deliveries received in the window; API calls of each kind
//! in the window with their p99. Samples for the checks are taken every
//! `min(5, BENCH_SOAK_REPORT_SECONDS)` seconds.
//!
//! Each report also gives the store: the database's size
//! (`pg_database_size(current_database())`) and its change in the window,
//! the rows of `webhook_deliveries`, `webhook_attempts` and `events`
//! (PostgreSQL's running count, `n_live_tup`, at report time; `count(*)`
//! before and after the load), the rows of those tables written and
//! deleted per second (`n_tup_ins`, `n_tup_del` of `pg_stat_user_tables`),
//! the retention sweep's deletions per second of each kind (deltas of the
//! counter `billing_retention_deleted_total{kind}`: deliveries, events,
//! bodies (emptied), dead letters, request logs) next to the deliveries the
//! receiver got per second, the sweep's gauge
//! `billing_retention_oldest_age_seconds{kind}` (age of the oldest row kept),
//! the rounds of `VACUUM` so far (unless `BENCH_SOAK_AUTOVACUUM=off`), and the service's histogram
//! `billing_webhook_event_to_first_attempt_seconds` over the window (a
//! delivery's creation to its first attempt: count, mean, and the bucket
//! bounds of p50 and p99).
//!
//! After the load stops, the benchmark waits (at most
//! `BENCH_SOAK_DRAIN_SECONDS`, default 120) until every expected delivery
//! reached every healthy endpoint and no delivery is pending, then checks,
//! each PASS or FAIL:
//!
//! - lost: every confirmed event, and the `payment.succeeded` and
//!   `order.created` of every successful pay, reached every healthy endpoint
//!   at least once (duplicates are counted and shown, not failed);
//! - failing endpoints: each of their deliveries is `failed` in the store
//!   after every attempt of the schedule, there is one per expected event,
//!   and no retry came earlier than its delay allows (delay − 20 % jitter);
//! - latency: the whole run's p99, publish to first receipt at a healthy
//!   endpoint, is under 1 s above the receiver's delay (`P99_LIMIT`);
//! - attempts at once: no delivery was ever received twice at the same time;
//! - RSS flat: the mean of the last third of the load's samples is less than
//!   10 % above the mean of the second third;
//! - fds flat: those means differ by less than 20;
//! - due backlog not growing (the gauge; the members of Redis's due set due now if the gauge never
//!   appeared), pending deliveries due now in the store not growing, and
//!   the healthy endpoints' pending deliveries not growing: last-third mean
//!   ≤ second-third mean × 1.1 + 50 (the failing endpoints' deliveries
//!   parked behind their open circuit are pending, not due, and grow with
//!   the outage);
//! - the API: every call answered as expected (no error status, no
//!   transport error);
//! - with retention on only, store size levels off: the database's growth
//!   (`pg_database_size`, between the samples at the thirds' boundaries)
//!   over the last third of the load is less than 5 % of its growth over
//!   the first third; the check says when the references' time part
//!   wrapped during the load (once in about 51 runs of 30 minutes), after
//!   which the indexes keyed by references grow by a step.
//!
//! Retention deletes deliveries the checks read: the receiver's counts
//! stay the judge of lost and doubled deliveries (a delivery deleted by
//! retention is not lost), and with retention on the failing-endpoints
//! check counts only the deliveries still in the store (every one of them
//! `failed` after the whole schedule, no retry early), not one per expected
//! event. Before the checks, the end of the run prints the database's size
//! and growth by thirds (and, apart, that of the tables the deliveries'
//! retention sweeps, `SWEPT_TABLES`, of the request logs, of the
//! idempotency records, and of the rest; and that of `webhook_deliveries`'
//! heap and each of its indexes, `DELIVERY_RELATIONS`), the rows left, and
//! rows written against rows deleted per second per table (and the sweep's
//! counters) over the last third of the load and the whole load.
//!
//! Each report, and the end of the run for the whole of it, also gives the
//! delivery latency the receiver saw: publish (the event handed to the
//! broker) to the first receipt of the event at each healthy endpoint,
//! p50 and p99; run once with retention and once without to see what the
//! sweep costs live traffic.
//!
//! The summary then gives each kind of API call's count, errors, p50, p99
//! and max over the whole run. The exit status is non-zero on any FAIL or
//! error.
//!
//! Run with `cargo bench -p billing-tests --bench soak` (30 minutes), or
//! e.g. `BENCH_SOAK_SECONDS=300 BENCH_SOAK_REPORT_SECONDS=30 cargo bench -p
//! billing-tests --bench soak`; retention e.g. with `BENCH_SOAK_SECONDS=600
//! BENCH_SOAK_RETENTION=2m BENCH_SOAK_SWEEP_EVERY=20s cargo bench -p
//! billing-tests --bench soak`. Needs PostgreSQL (`BILLING_TEST_PG_URL`,
//! default `postgres://postgres@127.0.0.1:5432/postgres`), Redis on
//! 127.0.0.1:6379, RabbitMQ on 127.0.0.1:5672 (guest/guest) and
//! `rabbitmqctl` on the `PATH`.

#[path = "support/fleet_run.rs"]
mod fleet_run;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::serve::ListenerExt;
use base64::Engine as _;
use billing_tests::{env_num, ms, percentile_ms};
use fleet_run::{
    analyzer, billing_command, bootstrap_sandbox, build_billing, confirmed, envelope, free_port,
    pg_admin, pg_url_for, redis_conn, remove_leftovers, url_encode, Fleet, Publisher, AMQP_BASE,
    CLEANUP_FAILED, QUEUE, REDIS_BASE,
};
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use lapin::publisher_confirm::Confirmation;
use serde_json::{json, Value};
use sqlx::{Connection, Executor, PgConnection};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::io::Write;
use std::path::PathBuf;
use std::process::{ExitCode, Stdio};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// The service's Redis key prefix, named (`scheduler.key_prefix`) instead
/// of the store's own (`billing:<store identity>`): the run has a Redis
/// database of its own.
const REDIS_PREFIX: &str = "billing";
/// The due set under `REDIS_PREFIX` (`crates/dispatcher/src/redis_schedule.rs`).
const REDIS_DUE: &str = "billing:due";
/// Prefix of the database's and the virtual host's name.
const NAME_PREFIX: &str = "billing_soak_";
/// The service's due backlog gauge (`crates/dispatcher/src/metrics.rs`).
const DUE_GAUGE: &str = "billing_webhook_due_backlog";
/// Event types published and subscribed to, with the subscription's dto
/// version; a successful pay emits both.
const TYPES: [(&str, u32); 2] = [("order.created", 1), ("payment.succeeded", 2)];
const CARD: &str = "pm_card_visa";
/// Longest wait for outstanding publisher confirms after the load.
const CONFIRM_LIMIT: Duration = Duration::from_secs(30);
/// References kept per kind for the reads.
const KEEP_REFS: usize = 256;
/// Distinct buyer e-mails the pays use.
const BUYERS: u32 = 500;
/// Growth limits of the checks.
const RSS_GROWTH: f64 = 0.10;
const FD_DIFFERENCE: f64 = 20.0;
const BACKLOG_GROWTH: f64 = 0.10;
const BACKLOG_SLACK: f64 = 50.0;
/// With retention on: the database's growth over the last third of the
/// load, as a share of its growth over the first third.
const STORE_GROWTH: f64 = 0.05;
/// Issue 48: the whole run's p99, publish to first receipt, stays under a
/// second (above the receiver's own delay).
const P99_LIMIT: Duration = Duration::from_secs(1);
/// The retention sweep's counter and gauge, by `kind`
/// (`crates/dispatcher/src/metrics.rs`).
const RETENTION_DELETED: &str = "billing_retention_deleted_total";
const RETENTION_OLDEST: &str = "billing_retention_oldest_age_seconds";
/// The kinds of those metrics, in the order the reports print them.
const RETENTION_KINDS: [&str; 5] = [
    "deliveries",
    "events",
    "bodies",
    "dead_letters",
    "request_logs",
];
/// The service's histogram of a delivery's creation to its first attempt.
const FIRST_ATTEMPT_LAG: &str = "billing_webhook_event_to_first_attempt_seconds";
/// Tables whose rows the reports count, with their short names.
const ROW_TABLES: [(&str, &str); 3] = [
    ("webhook_deliveries", "deliveries"),
    ("webhook_attempts", "attempts"),
    ("events", "events"),
];

/// The tables the deliveries' retention sweeps (`BILLING_RETENTION__DELIVERIES`):
/// the rest of the store keeps what the load writes past the run (request
/// logs and idempotency records under their own, longer retention; billing
/// records for good), so the database's growth is told apart from theirs.
const SWEPT_TABLES: [&str; 4] = [
    "webhook_deliveries",
    "webhook_attempts",
    "webhook_event_data",
    "events",
];

/// Parts of the store whose growth the end of the run gives apart, with
/// their tables (`SWEPT_TABLES` one by one, then the others); the rest of
/// the store is billing records, endpoints, catalogues and statistics.
const STORE_PARTS: [(&str, &[&str]); 6] = [
    ("deliveries", &["webhook_deliveries"]),
    ("attempts", &["webhook_attempts"]),
    ("events' copies off their row", &["webhook_event_data"]),
    ("events", &["events"]),
    ("request logs", &["request_logs"]),
    ("idempotency records", &["idempotency_keys"]),
];

/// `webhook_deliveries`' own relations, whose growth the end of the run
/// gives apart (`pg_relation_size`: the heap's main fork, each index); any
/// other index of the table, and its TOAST, count as the last part. A
/// B-tree's size after the table has levelled tells whether its pages are
/// reused (a step that stays is pages split and left part empty).
const DELIVERY_RELATIONS: [&str; 7] = [
    "webhook_deliveries",
    "webhook_deliveries_pkey",
    "webhook_deliveries_event_ref_endpoint_ref_dto_version_key",
    "webhook_deliveries_by_endpoint",
    "webhook_deliveries_by_env",
    "webhook_deliveries_successes_by_endpoint",
    "other indexes and TOAST",
];

// ------------------------------------------------------------------ config

struct Config {
    seconds: u64,
    report: u64,
    sample: u64,
    event_rate: u64,
    write_rate: u64,
    read_rate: u64,
    pay_rate: u64,
    endpoints: usize,
    failing: usize,
    retry_schedule: String,
    /// Delays of `retry_schedule`, in milliseconds.
    delays_ms: Vec<u64>,
    drain: Duration,
    receiver_delay: Duration,
    max_in_flight: usize,
    analyze_every: Duration,
    /// `BENCH_SOAK_RETENTION`: the service's `retention.deliveries`, or
    /// `None` for its default (retention then measured, not checked).
    retention: Option<String>,
    /// `BENCH_SOAK_SWEEP_EVERY`: `retention.sweep_every` when `retention`
    /// is set.
    sweep_every: String,
    /// `BENCH_SOAK_REQUEST_LOG_RETENTION`: the service's
    /// `retention.request_logs`, or `None` for its default.
    request_log_retention: Option<String>,
    /// `BENCH_SOAK_VACUUM_SECONDS`: the period of the rounds of
    /// autovacuum's work (`vacuumer`), or `None` when
    /// `BENCH_SOAK_AUTOVACUUM=off`.
    vacuum_every: Option<Duration>,
    /// `BENCH_SOAK_VACUUM_VERBOSE` (set to anything): each round's
    /// `VACUUM` and `ANALYZE` are `VERBOSE`, their reports in the server's
    /// log.
    vacuum_verbose: bool,
}

/// A count that may be zero: the variable `name`, or `default`.
fn env_count(name: &str, default: usize) -> Result<usize, String> {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .map_err(|_| format!("{name} must be a whole number, got {v:?}")),
        Err(_) => Ok(default),
    }
}

/// `"0s,1s,500ms,2m"` as milliseconds.
fn parse_schedule(s: &str) -> Result<Vec<u64>, String> {
    s.split(',')
        .map(|d| {
            let d = d.trim();
            let (num, unit) = d.split_at(d.find(|c: char| !c.is_ascii_digit()).unwrap_or(d.len()));
            let n: u64 = num
                .parse()
                .map_err(|_| format!("BENCH_SOAK_RETRY_SCHEDULE: bad delay {d:?}"))?;
            let factor = match unit {
                "ms" => 1,
                "s" => 1_000,
                "m" => 60_000,
                "h" => 3_600_000,
                _ => return Err(format!("BENCH_SOAK_RETRY_SCHEDULE: bad delay {d:?}")),
            };
            Ok(n * factor)
        })
        .collect()
}

fn config() -> Result<Config, String> {
    let report: u64 = env_num("BENCH_SOAK_REPORT_SECONDS", 60)?;
    let endpoints: usize = env_num("BENCH_SOAK_ENDPOINTS", 20)?;
    let failing = env_count(
        "BENCH_SOAK_FAILING_ENDPOINTS",
        endpoints.div_ceil(20).max(1),
    )?;
    if failing >= endpoints {
        return Err(format!(
            "BENCH_SOAK_FAILING_ENDPOINTS ({failing}) must be below BENCH_SOAK_ENDPOINTS \
             ({endpoints})"
        ));
    }
    let retry_schedule =
        std::env::var("BENCH_SOAK_RETRY_SCHEDULE").unwrap_or_else(|_| "0s,1s,2s,5s".to_owned());
    let delays_ms = parse_schedule(&retry_schedule)?;
    let duration = |name: &str, default: &str| -> Result<Option<String>, String> {
        let v = std::env::var(name).unwrap_or_else(|_| default.to_owned());
        let v = v.trim();
        if v.is_empty() {
            return Ok(None);
        }
        match domain::duration::parse(v) {
            Some(d) if !d.is_zero() => Ok(Some(v.to_owned())),
            _ => Err(format!(
                "{name} must be a duration such as 90s, 5m or 2h, got {v:?}"
            )),
        }
    };
    let retention = duration("BENCH_SOAK_RETENTION", "")?;
    let request_log_retention = duration("BENCH_SOAK_REQUEST_LOG_RETENTION", "")?;
    let sweep_every =
        duration("BENCH_SOAK_SWEEP_EVERY", "30s")?.unwrap_or_else(|| "30s".to_owned());
    let vacuum_every = match std::env::var("BENCH_SOAK_AUTOVACUUM").as_deref() {
        Err(_) | Ok("on") => Some(Duration::from_secs(env_num(
            "BENCH_SOAK_VACUUM_SECONDS",
            60,
        )?)),
        Ok("off") => None,
        Ok(v) => {
            return Err(format!(
                "BENCH_SOAK_AUTOVACUUM must be on or off, got {v:?}"
            ))
        }
    };
    Ok(Config {
        seconds: env_num("BENCH_SOAK_SECONDS", 1_800)?,
        report,
        sample: report.min(5),
        event_rate: env_num("BENCH_SOAK_EVENT_RATE", 50)?,
        write_rate: env_num("BENCH_SOAK_WRITE_RATE", 20)?,
        read_rate: env_num("BENCH_SOAK_READ_RATE", 50)?,
        pay_rate: env_num("BENCH_SOAK_PAY_RATE", 5)?,
        endpoints,
        failing,
        retry_schedule,
        delays_ms,
        drain: Duration::from_secs(env_num("BENCH_SOAK_DRAIN_SECONDS", 120)?),
        receiver_delay: Duration::from_millis(env_count("BENCH_SOAK_RECEIVER_DELAY_MS", 5)? as u64),
        max_in_flight: env_num("BENCH_SOAK_MAX_IN_FLIGHT", 64)?,
        analyze_every: Duration::from_secs(env_num("BENCH_SOAK_ANALYZE_SECONDS", 30)?),
        retention,
        request_log_retention,
        sweep_every,
        vacuum_every,
        vacuum_verbose: std::env::var_os("BENCH_SOAK_VACUUM_VERBOSE").is_some(),
    })
}

/// A lock, whether or not another holder panicked.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

// ------------------------------------------------------------------ sink

/// What the receiver knows of one event.
struct Received {
    event_type: String,
    /// `data.checkout_session_ref`, which ties a pay's events to its session.
    session: Option<String>,
    /// Requests per endpoint (by index).
    counts: Vec<u16>,
}

/// The receiver of every endpoint (`/hook/{i}`).
struct Sink {
    /// Whether endpoint `i` answers 500 to everything.
    failing: Vec<bool>,
    delay: Duration,
    events: Mutex<HashMap<String, Received>>,
    /// Requests being answered, per `webhook-id`.
    in_flight: Mutex<HashMap<String, u32>>,
    /// The most requests of one `webhook-id` ever in flight at once.
    max_at_once: AtomicU32,
    /// Requests that arrived while another of the same `webhook-id` was in
    /// flight.
    overlapping: AtomicU64,
    requests: AtomicU64,
    answered_ok: AtomicU64,
    answered_500: AtomicU64,
    /// Requests to a healthy endpoint for an event it already had.
    repeats: AtomicU64,
    unreadable: AtomicU64,
    without_id: AtomicU64,
    /// When each event was handed to the broker (`publish_events`).
    sent: Mutex<HashMap<String, Instant>>,
    /// Publish → first receipt at a healthy endpoint, µs: this report
    /// window's, and the whole run's.
    window_latencies: Mutex<Vec<u32>>,
    latencies: Mutex<Vec<u32>>,
}

#[derive(serde::Deserialize)]
struct Delivered {
    event_ref: String,
    public_event_type: String,
    #[serde(default)]
    data: DeliveredData,
}

#[derive(serde::Deserialize, Default)]
struct DeliveredData {
    #[serde(default)]
    checkout_session_ref: Option<String>,
}

/// One request of a `webhook-id` in flight, until dropped (also when the
/// sender hangs up and the handler is cancelled).
struct InFlight {
    sink: Arc<Sink>,
    id: String,
}

impl InFlight {
    fn enter(sink: &Arc<Sink>, id: String) -> InFlight {
        let now = {
            let mut m = lock(&sink.in_flight);
            let n = m.entry(id.clone()).or_insert(0);
            *n += 1;
            *n
        };
        if now > 1 {
            sink.overlapping.fetch_add(1, Ordering::Relaxed);
        }
        sink.max_at_once.fetch_max(now, Ordering::Relaxed);
        InFlight {
            sink: sink.clone(),
            id,
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut m = lock(&self.sink.in_flight);
        if let Some(n) = m.get_mut(&self.id) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.id);
            }
        }
    }
}

async fn hook(
    State(sink): State<Arc<Sink>>,
    Path(i): Path<usize>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    sink.requests.fetch_add(1, Ordering::Relaxed);
    let Some(&failing) = sink.failing.get(i) else {
        return StatusCode::NOT_FOUND;
    };
    let id = headers
        .get("webhook-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let _in_flight = match id {
        Some(id) => Some(InFlight::enter(&sink, id)),
        None => {
            sink.without_id.fetch_add(1, Ordering::Relaxed);
            None
        }
    };
    match serde_json::from_slice::<Delivered>(&body) {
        Ok(d) => {
            let n = sink.failing.len();
            let count = {
                let mut events = lock(&sink.events);
                let rec = events
                    .entry(d.event_ref.clone())
                    .or_insert_with(|| Received {
                        event_type: d.public_event_type,
                        session: d.data.checkout_session_ref,
                        counts: vec![0; n],
                    });
                rec.counts[i] = rec.counts[i].saturating_add(1);
                rec.counts[i]
            };
            if !failing && count > 1 {
                sink.repeats.fetch_add(1, Ordering::Relaxed);
            }
            if !failing && count == 1 {
                sink.record_latency(&d.event_ref);
            }
        }
        Err(_) => {
            sink.unreadable.fetch_add(1, Ordering::Relaxed);
        }
    }
    if !sink.delay.is_zero() {
        tokio::time::sleep(sink.delay).await;
    }
    if failing {
        sink.answered_500.fetch_add(1, Ordering::Relaxed);
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        sink.answered_ok.fetch_add(1, Ordering::Relaxed);
        StatusCode::NO_CONTENT
    }
}

impl Sink {
    /// Counts the latency of an event's first receipt at a healthy
    /// endpoint, from its publish.
    fn record_latency(&self, event_ref: &str) {
        let Some(sent) = lock(&self.sent).get(event_ref).copied() else {
            return;
        };
        let us = sent.elapsed().as_micros().min(u128::from(u32::MAX)) as u32;
        lock(&self.window_latencies).push(us);
    }

    /// The window's latencies, sorted, moved into the whole run's.
    fn take_window(&self) -> Vec<Duration> {
        let window = std::mem::take(&mut *lock(&self.window_latencies));
        lock(&self.latencies).extend_from_slice(&window);
        sorted_durations(&window)
    }

    /// The whole run's latencies, sorted (the current window included).
    fn all_latencies(&self) -> Vec<Duration> {
        let _ = self.take_window();
        sorted_durations(&lock(&self.latencies))
    }

    /// Starts the receiver; returns it and its base URL (`…/hook`).
    async fn start(failing: Vec<bool>, delay: Duration) -> Result<(Arc<Sink>, String), String> {
        let sink = Arc::new(Sink {
            failing,
            delay,
            events: Mutex::default(),
            in_flight: Mutex::default(),
            max_at_once: AtomicU32::new(0),
            overlapping: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            answered_ok: AtomicU64::new(0),
            answered_500: AtomicU64::new(0),
            repeats: AtomicU64::new(0),
            unreadable: AtomicU64::new(0),
            without_id: AtomicU64::new(0),
            sent: Mutex::default(),
            window_latencies: Mutex::default(),
            latencies: Mutex::default(),
        });
        let app = axum::Router::new()
            .route("/hook/{i}", axum::routing::post(hook))
            .with_state(sink.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| format!("receiver: {e}"))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok((sink, format!("http://{addr}/hook")))
    }
}

/// How many deliveries, and their p50 and p99 (`sorted`).
fn latency_text(sorted: &[Duration]) -> String {
    format!(
        "{}, p50 {}, p99 {}",
        thousands(sorted.len() as u64),
        ms(percentile_ms(sorted, 50.0)),
        ms(percentile_ms(sorted, 99.0))
    )
}

fn sorted_durations(us: &[u32]) -> Vec<Duration> {
    let mut d: Vec<Duration> = us
        .iter()
        .map(|v| Duration::from_micros(u64::from(*v)))
        .collect();
    d.sort_unstable();
    d
}

// ------------------------------------------------------------- publishing

/// What the publisher did.
#[derive(Default)]
struct PublishOutcome {
    /// Confirmed events: these must arrive.
    confirmed: Vec<String>,
    errors: Vec<String>,
}

/// Publishes `rate` events per second until `stop`, then waits for the
/// outstanding confirms.
async fn publish_events(
    publisher: Publisher,
    rate: u64,
    env_ref: String,
    stop: CancellationToken,
    load: Arc<Load>,
    sink: Arc<Sink>,
) -> PublishOutcome {
    let examples: Vec<(&str, Value)> = TYPES
        .iter()
        .map(|(t, v)| {
            (
                *t,
                domain::webhook::catalogue::example(t, *v).unwrap_or_default(),
            )
        })
        .collect();
    let mut out = PublishOutcome::default();
    let mut inflight = FuturesUnordered::new();
    let mut tick = tokio::time::interval(Duration::from_nanos(1_000_000_000 / rate));
    let handle = |(event_ref, c): (String, Result<Confirmation, lapin::Error>),
                  out: &mut PublishOutcome| {
        match confirmed(c) {
            Ok(()) => {
                load.confirmed.fetch_add(1, Ordering::Relaxed);
                out.confirmed.push(event_ref);
            }
            Err(e) => {
                if out.errors.len() < 20 {
                    out.errors.push(format!("event {event_ref}: {e}"));
                }
                load.publish_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    };
    let mut i = 0usize;
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tick.tick() => {}
        }
        let (event_type, data) = &examples[i % examples.len()];
        i += 1;
        let (event_ref, body) = envelope(&env_ref, event_type, data);
        lock(&sink.sent).insert(event_ref.clone(), Instant::now());
        match publisher.publish(event_type, &body).await {
            Ok(confirm) => {
                load.published.fetch_add(1, Ordering::Relaxed);
                inflight.push(async move { (event_ref, confirm.await) });
            }
            Err(e) => {
                load.publish_errors.fetch_add(1, Ordering::Relaxed);
                if out.errors.len() < 20 {
                    out.errors.push(e);
                }
            }
        }
        while let Some(Some(done)) = inflight.next().now_or_never() {
            handle(done, &mut out);
        }
    }
    let deadline = tokio::time::Instant::now() + CONFIRM_LIMIT;
    loop {
        match tokio::time::timeout_at(deadline, inflight.next()).await {
            Ok(Some(done)) => handle(done, &mut out),
            Ok(None) => break,
            Err(_) => {
                out.errors.push(format!(
                    "{} confirms still outstanding {} s after the load",
                    inflight.len(),
                    CONFIRM_LIMIT.as_secs()
                ));
                break;
            }
        }
    }
    publisher.close().await;
    out
}

// --------------------------------------------------------------------- API

/// Calls of one kind.
#[derive(Default)]
struct KindStats {
    /// Since the last report.
    window: Vec<Duration>,
    window_errors: u64,
    all: Vec<Duration>,
    errors: u64,
    /// Unexpected outcomes (`status 409`, `transport`) and their counts.
    outcomes: BTreeMap<String, u64>,
    last_error: Option<String>,
}

/// References made by the load, newest last, for the reads.
#[derive(Default)]
struct Refs {
    service_accounts: VecDeque<String>,
    products: VecDeque<String>,
    endpoints: VecDeque<String>,
    payments: VecDeque<String>,
    sessions: VecDeque<String>,
}

fn keep(list: &mut VecDeque<String>, r: String) {
    if list.len() >= KEEP_REFS {
        list.pop_front();
    }
    list.push_back(r);
}

fn pick(list: &VecDeque<String>) -> Option<String> {
    use rand::Rng;
    (!list.is_empty()).then(|| list[rand::thread_rng().gen_range(0..list.len())].clone())
}

/// Counters of the load.
#[derive(Default)]
struct Load {
    published: AtomicU64,
    confirmed: AtomicU64,
    publish_errors: AtomicU64,
    /// Ticks that found their stream's in-flight limit reached.
    skipped: AtomicU64,
    pays_succeeded: AtomicU64,
    /// Pays answered otherwise (a declined payment, an error): their
    /// events are not expected, and those that arrive are not lost ones.
    pays_other: AtomicU64,
}

struct Api {
    client: reqwest::Client,
    base: String,
    secret: String,
    stats: Mutex<BTreeMap<&'static str, KindStats>>,
    refs: Mutex<Refs>,
    /// Sessions whose pay succeeded.
    paid: Mutex<Vec<String>>,
    load: Arc<Load>,
    /// The subscribed endpoints, for `listWebhookDeliveries`.
    endpoints: Vec<String>,
    spare_url: String,
    config_ref: String,
}

fn idempotency_key() -> String {
    format!("soak-{:016x}", rand::random::<u64>())
}

impl Api {
    /// One request: `(status, body, duration)`; POSTs carry a fresh
    /// `Idempotency-Key`.
    async fn request(
        &self,
        post: Option<&Value>,
        path: &str,
    ) -> Result<(u16, String, Duration), String> {
        let url = format!("{}{path}", self.base);
        let req = match post {
            Some(body) => self
                .client
                .post(url)
                .header("Idempotency-Key", idempotency_key())
                .json(body),
            None => self.client.get(url),
        }
        .bearer_auth(&self.secret);
        let started = Instant::now();
        let r = req.send().await.map_err(|e| e.to_string())?;
        let status = r.status().as_u16();
        let text = r.text().await.map_err(|e| e.to_string())?;
        Ok((status, text, started.elapsed()))
    }

    /// A setup request: its `data`, or an error when the status is not
    /// `expect`.
    async fn setup(&self, post: Option<Value>, path: &str, expect: u16) -> Result<Value, String> {
        let (status, text, _) = self
            .request(post.as_ref(), path)
            .await
            .map_err(|e| format!("{path}: {e}"))?;
        if status != expect {
            return Err(format!("{path}: {status} {text}"));
        }
        let v: Value = serde_json::from_str(&text).map_err(|e| format!("{path}: {e}"))?;
        Ok(v["data"].clone())
    }

    /// A measured request of `kind`: its `data` when answered `expect`.
    async fn timed(
        &self,
        kind: &'static str,
        post: Option<Value>,
        path: &str,
        expect: u16,
    ) -> Option<Value> {
        let outcome = self.request(post.as_ref(), path).await;
        let mut stats = lock(&self.stats);
        let s = stats.entry(kind).or_default();
        let (failure, data) = match outcome {
            Ok((status, text, took)) => {
                s.window.push(took);
                s.all.push(took);
                if status == expect {
                    let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                    (None, Some(v["data"].clone()))
                } else {
                    let excerpt: String = text.chars().take(200).collect();
                    (
                        Some((format!("status {status}"), format!("{status} {excerpt}"))),
                        None,
                    )
                }
            }
            Err(e) => (Some(("transport".to_owned(), e)), None),
        };
        if let Some((outcome, detail)) = failure {
            s.errors += 1;
            s.window_errors += 1;
            *s.outcomes.entry(outcome).or_default() += 1;
            s.last_error = Some(detail);
        }
        data
    }

    fn refs(&self) -> MutexGuard<'_, Refs> {
        lock(&self.refs)
    }

    async fn write(self: Arc<Self>, n: u64) {
        match n % 3 {
            0 => {
                let body = json!({"name": format!("soak account {n}")});
                if let Some(d) = self
                    .timed(
                        "createServiceAccount",
                        Some(body),
                        "/api/v1/service_accounts",
                        201,
                    )
                    .await
                {
                    if let Some(r) = d["principal_ref"].as_str() {
                        keep(&mut self.refs().service_accounts, r.to_owned());
                    }
                }
            }
            1 => {
                let body = json!({"name": format!("soak product {n}")});
                if let Some(d) = self
                    .timed("createProduct", Some(body), "/api/v1/products", 201)
                    .await
                {
                    if let Some(r) = d["product_ref"].as_str() {
                        keep(&mut self.refs().products, r.to_owned());
                    }
                }
            }
            _ => {
                let body = json!({"url": format!("{}/{n}", self.spare_url)});
                if let Some(d) = self
                    .timed(
                        "createWebhookEndpoint",
                        Some(body),
                        "/api/v1/webhook_endpoints",
                        201,
                    )
                    .await
                {
                    if let Some(r) = d["endpoint_ref"].as_str() {
                        keep(&mut self.refs().endpoints, r.to_owned());
                    }
                }
            }
        }
    }

    async fn read(self: Arc<Self>, n: u64) {
        use rand::Rng;
        let (kind, path): (&'static str, String) = {
            let refs = self.refs();
            let one = |kind: &'static str, list: &VecDeque<String>, base: &str| {
                pick(list).map(|r| (kind, format!("{base}/{r}")))
            };
            let choice = match n % 8 {
                1 => one("retrieveProduct", &refs.products, "/api/v1/products"),
                2 => one(
                    "retrieveServiceAccount",
                    &refs.service_accounts,
                    "/api/v1/service_accounts",
                ),
                3 => one(
                    "retrieveWebhookEndpoint",
                    &refs.endpoints,
                    "/api/v1/webhook_endpoints",
                ),
                4 => {
                    let i = rand::thread_rng().gen_range(0..self.endpoints.len());
                    Some((
                        "listWebhookDeliveries",
                        format!(
                            "/api/v1/webhook_endpoints/{}/deliveries?limit=10",
                            self.endpoints[i]
                        ),
                    ))
                }
                5 => Some(("listPayments", "/api/v1/payments?limit=10".to_owned())),
                6 => one("retrievePayment", &refs.payments, "/api/v1/payments"),
                7 => one(
                    "retrieveCheckoutSession",
                    &refs.sessions,
                    "/api/v1/checkout-sessions",
                ),
                _ => None,
            };
            // Nothing to retrieve yet: list instead.
            choice.unwrap_or(("listProducts", "/api/v1/products?limit=10".to_owned()))
        };
        let _ = self.timed(kind, None, &path, 200).await;
    }

    async fn pay(self: Arc<Self>, n: u64) {
        let email = format!("buyer{}@example.com", n % u64::from(BUYERS));
        let body =
            json!({"config_ref": self.config_ref, "buyer": {"email": email, "name": "Soak Buyer"}});
        let Some(session) = self
            .timed(
                "createCheckoutSession",
                Some(body),
                "/api/v1/checkout-sessions",
                201,
            )
            .await
        else {
            return;
        };
        let Some(session_ref) = session["checkout_session_ref"].as_str().map(str::to_owned) else {
            return;
        };
        keep(&mut self.refs().sessions, session_ref.clone());
        let path = format!("/api/v1/checkout-sessions/{session_ref}/pay");
        let paid = self
            .timed(
                "payCheckoutSession",
                Some(json!({"payment_method": CARD})),
                &path,
                200,
            )
            .await;
        let payment = paid.as_ref().map(|d| &d["payment"]);
        match payment {
            Some(p) if p["status"] == "succeeded" => {
                if let Some(r) = p["payment_ref"].as_str() {
                    keep(&mut self.refs().payments, r.to_owned());
                }
                lock(&self.paid).push(session_ref);
                self.load.pays_succeeded.fetch_add(1, Ordering::Relaxed);
            }
            _ => {
                self.load.pays_other.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Runs `op(n)` `rate` times per second until `stop`, each in a task of
/// its own, at most `limit` at once; a tick finding the limit reached is
/// counted in `load.skipped`. Returns once the last task ended.
async fn paced<F, Fut>(rate: u64, limit: usize, stop: CancellationToken, load: Arc<Load>, mut op: F)
where
    F: FnMut(u64) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let permits = Arc::new(Semaphore::new(limit));
    let mut tasks = JoinSet::new();
    let mut tick = tokio::time::interval(Duration::from_nanos(1_000_000_000 / rate));
    let mut n = 0u64;
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tick.tick() => {}
        }
        while tasks.try_join_next().is_some() {}
        match permits.clone().try_acquire_owned() {
            Ok(permit) => {
                let fut = op(n);
                tasks.spawn(async move {
                    fut.await;
                    drop(permit);
                });
            }
            Err(_) => {
                load.skipped.fetch_add(1, Ordering::Relaxed);
            }
        }
        n += 1;
    }
    while tasks.join_next().await.is_some() {}
}

// --------------------------------------------------------------- sampling

/// `getconf CLK_TCK`, the unit of `/proc/<pid>/stat` times (100 if unknown).
fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .trim()
                .parse::<f64>()
                .ok()
        })
        .filter(|t| *t > 0.0)
        .unwrap_or(100.0)
}

/// `utime + stime` of a process, in ticks.
fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let f = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Some(f(11) + f(12))
}

/// `VmRSS` of a process, in KiB.
fn rss_kib(pid: u32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

fn open_fds(pid: u32) -> Option<usize> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()
        .map(|d| d.count())
}

/// What the store holds that is waiting.
#[derive(Clone, Copy)]
struct StoreCounts {
    pending: i64,
    pending_due: i64,
    pending_failing: i64,
    outbox: i64,
    /// Cumulative `pg_stat_database` counters of the run's database.
    commits: i64,
    updated: i64,
    /// `pg_database_size(current_database())`, in bytes.
    db_bytes: i64,
    /// `pg_total_relation_size` (heap, indexes, TOAST) of each of
    /// `STORE_PARTS`, in bytes.
    part_bytes: [i64; STORE_PARTS.len()],
    /// `pg_relation_size` of each of `DELIVERY_RELATIONS`, in bytes.
    delivery_bytes: [i64; DELIVERY_RELATIONS.len()],
    /// Cumulative `n_tup_ins` and `n_tup_del` (`pg_stat_user_tables`) of
    /// `ROW_TABLES`, in that order.
    inserted: [i64; 3],
    deleted: [i64; 3],
}

/// A cumulative Prometheus histogram: `(le, cumulative count)` by
/// ascending `le`, its sum and count.
#[derive(Clone, Default)]
struct Hist {
    buckets: Vec<(f64, f64)>,
    sum: f64,
    count: f64,
}

impl Hist {
    /// What was recorded between `before` and `self`.
    fn since(&self, before: &Hist) -> Hist {
        Hist {
            buckets: self
                .buckets
                .iter()
                .map(|(le, n)| {
                    let b = before
                        .buckets
                        .iter()
                        .find(|(l, _)| l == le)
                        .map_or(0.0, |b| b.1);
                    (*le, n - b)
                })
                .collect(),
            sum: self.sum - before.sum,
            count: self.count - before.count,
        }
    }

    /// The upper bound of the bucket holding quantile `q` (0–1).
    fn bound(&self, q: f64) -> Option<f64> {
        (self.count > 0.0).then(|| {
            self.buckets
                .iter()
                .find(|(_, n)| *n >= q * self.count)
                .map_or(f64::INFINITY, |b| b.0)
        })
    }

    /// `n, mean x ms, p50 ≤ y ms, p99 ≤ z ms`.
    fn text(&self) -> String {
        if self.count <= 0.0 {
            return "none".to_owned();
        }
        let bound = |q: f64| match self.bound(q) {
            Some(b) if b.is_finite() => format!("≤ {:.0} ms", b * 1000.0),
            Some(_) => {
                let top = self.buckets.iter().rev().find(|b| b.0.is_finite());
                format!("> {:.0} ms", top.map_or(0.0, |b| b.0) * 1000.0)
            }
            None => "-".to_owned(),
        };
        format!(
            "{}, mean {:.1} ms, p50 {}, p99 {}",
            thousands(self.count as u64),
            self.sum / self.count * 1000.0,
            bound(0.50),
            bound(0.99)
        )
    }
}

/// What the service's metrics endpoint said.
#[derive(Clone, Default)]
struct Metrics {
    due: Option<f64>,
    /// `billing_retention_deleted_total` by kind (absent until counted).
    deleted: BTreeMap<String, f64>,
    /// `billing_retention_oldest_age_seconds` by kind.
    oldest: BTreeMap<String, f64>,
    lag: Hist,
}

/// One sample line of Prometheus text: `(name, labels, value)`.
fn prom_line(l: &str) -> Option<(&str, &str, f64)> {
    if l.starts_with('#') {
        return None;
    }
    let (head, value) = l.trim().rsplit_once(' ')?;
    let value: f64 = value.parse().ok()?;
    Some(match head.split_once('{') {
        Some((name, labels)) => (name, labels.trim_end_matches('}'), value),
        None => (head, "", value),
    })
}

/// The value of label `key` in `a="x",b="y"`.
fn label<'a>(labels: &'a str, key: &str) -> Option<&'a str> {
    labels.split(',').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k.trim() == key).then(|| v.trim().trim_matches('"'))
    })
}

fn parse_metrics(text: &str) -> Metrics {
    let mut m = Metrics::default();
    let bucket = format!("{FIRST_ATTEMPT_LAG}_bucket");
    let sum = format!("{FIRST_ATTEMPT_LAG}_sum");
    let count = format!("{FIRST_ATTEMPT_LAG}_count");
    for (name, labels, value) in text.lines().filter_map(prom_line) {
        if name == DUE_GAUGE {
            m.due.get_or_insert(value);
        } else if name == RETENTION_DELETED || name == RETENTION_OLDEST {
            if let Some(kind) = label(labels, "kind") {
                let map = if name == RETENTION_DELETED {
                    &mut m.deleted
                } else {
                    &mut m.oldest
                };
                *map.entry(kind.to_owned()).or_default() += value;
            }
        } else if name == bucket {
            let le = match label(labels, "le") {
                Some("+Inf") => f64::INFINITY,
                Some(v) => match v.parse() {
                    Ok(v) => v,
                    Err(_) => continue,
                },
                None => continue,
            };
            match m.lag.buckets.iter_mut().find(|b| b.0 == le) {
                Some(b) => b.1 += value,
                None => m.lag.buckets.push((le, value)),
            }
        } else if name == sum {
            m.lag.sum += value;
        } else if name == count {
            m.lag.count += value;
        }
    }
    m.lag.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    m
}

/// What the rounds of autovacuum's work (`vacuumer`) did so far.
#[derive(Clone, Copy, Default)]
struct VacuumStats {
    /// Rounds (`vacuum_round`).
    runs: u64,
    /// Tables vacuumed over all rounds.
    tables: u64,
    /// Tables analyzed over all rounds.
    analyzed: u64,
    errors: u64,
    total: Duration,
    last: Option<Duration>,
    longest: Duration,
}

#[derive(Clone)]
struct Sample {
    /// Seconds since the load started.
    at: f64,
    loaded: bool,
    rss_kib: Option<u64>,
    fds: Option<usize>,
    cpu: Option<u64>,
    gauge: Option<f64>,
    /// The whole scrape (`None` when it failed).
    metrics: Option<Metrics>,
    /// Rows of `ROW_TABLES` (`Monitor::rows`), taken for reports only.
    rows: Option<[i64; 3]>,
    /// The rounds of `VACUUM` so far, when the run makes them.
    vacuum: Option<VacuumStats>,
    redis_due_now: Option<u64>,
    redis_due_all: Option<u64>,
    redis_keys: Option<u64>,
    redis_memory: Option<u64>,
    store: Option<StoreCounts>,
}

struct Monitor {
    pid: u32,
    metrics_url: String,
    client: reqwest::Client,
    redis: redis::aio::MultiplexedConnection,
    db: PgConnection,
    failing_refs: Vec<String>,
    start: Instant,
    /// `start` as Unix milliseconds.
    start_millis: i64,
    vacuum: Option<Arc<Mutex<VacuumStats>>>,
}

impl Monitor {
    async fn metrics(&self) -> Option<Metrics> {
        let text = self
            .client
            .get(&self.metrics_url)
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        Some(parse_metrics(&text))
    }

    /// Rows of `ROW_TABLES`: counted when `exact`, else PostgreSQL's
    /// running count of live rows (`n_live_tup`). Reports during the load
    /// take the running count: a `count(*)` of the deliveries holds a
    /// snapshot for as long as it reads them, and the index pages that a
    /// vacuum frees meanwhile wait a round to be reused (`vacuumer`).
    async fn rows(&mut self, exact: bool) -> Option<[i64; 3]> {
        let sql = if exact {
            "SELECT (SELECT count(*) FROM webhook_deliveries), \
                    (SELECT count(*) FROM webhook_attempts), \
                    (SELECT count(*) FROM events)"
        } else {
            "SELECT (SELECT n_live_tup FROM pg_stat_user_tables WHERE relname = 'webhook_deliveries'), \
                    (SELECT n_live_tup FROM pg_stat_user_tables WHERE relname = 'webhook_attempts'), \
                    (SELECT n_live_tup FROM pg_stat_user_tables WHERE relname = 'events')"
        };
        let row: (i64, i64, i64) = sqlx::query_as(sql).fetch_one(&mut self.db).await.ok()?;
        Some([row.0, row.1, row.2])
    }

    async fn redis_counts(&mut self) -> (Option<u64>, Option<u64>, Option<u64>) {
        let now = domain::Timestamp::now().millis();
        let due_now: Option<u64> = redis::cmd("ZCOUNT")
            .arg(REDIS_DUE)
            .arg("-inf")
            .arg(now)
            .query_async(&mut self.redis)
            .await
            .ok();
        let all: Option<u64> = redis::cmd("ZCARD")
            .arg(REDIS_DUE)
            .query_async(&mut self.redis)
            .await
            .ok();
        let keys: Option<u64> = redis::cmd("DBSIZE").query_async(&mut self.redis).await.ok();
        (due_now, all, keys)
    }

    /// `used_memory` of the Redis server (all databases: others' too).
    async fn redis_memory(&mut self) -> Option<u64> {
        let info: String = redis::cmd("INFO")
            .arg("memory")
            .query_async(&mut self.redis)
            .await
            .ok()?;
        info.lines()
            .find_map(|l| l.strip_prefix("used_memory:"))
            .and_then(|v| v.trim().parse().ok())
    }

    async fn store_counts(&mut self) -> Option<StoreCounts> {
        let now = domain::Timestamp::now().millis();
        let row: (i64, i64, i64, i64, i64, i64, i64) = sqlx::query_as(
            "SELECT \
               (SELECT count(*) FROM webhook_deliveries WHERE status = 'pending'), \
               (SELECT count(*) FROM webhook_deliveries WHERE status = 'pending' \
                  AND next_attempt_at <= $1), \
               (SELECT count(*) FROM webhook_deliveries WHERE status = 'pending' \
                  AND endpoint_ref = ANY($2)), \
               (SELECT count(*) FROM outbox), \
               (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()), \
               (SELECT tup_updated FROM pg_stat_database WHERE datname = current_database()), \
               pg_database_size(current_database())",
        )
        .bind(now)
        .bind(&self.failing_refs)
        .fetch_one(&mut self.db)
        .await
        .ok()?;
        let part_tables: Vec<&str> = STORE_PARTS
            .iter()
            .flat_map(|p| p.1.iter().copied())
            .collect();
        let sizes: Vec<(String, i64)> = sqlx::query_as(
            "SELECT c.relname::text, pg_total_relation_size(c.oid)::bigint FROM pg_class c \
             WHERE c.relname = ANY($1) AND c.relkind = 'r' \
               AND c.relnamespace = 'public'::regnamespace",
        )
        .bind(&part_tables)
        .fetch_all(&mut self.db)
        .await
        .ok()?;
        let mut part_bytes = [0i64; STORE_PARTS.len()];
        for (name, size) in sizes {
            if let Some(i) = STORE_PARTS
                .iter()
                .position(|p| p.1.contains(&name.as_str()))
            {
                part_bytes[i] += size;
            }
        }
        let relations: Vec<(String, i64)> = sqlx::query_as(
            "SELECT c.relname::text, pg_relation_size(c.oid)::bigint FROM pg_class c \
             WHERE c.oid = 'webhook_deliveries'::regclass \
                OR c.oid = (SELECT reltoastrelid FROM pg_class \
                            WHERE oid = 'webhook_deliveries'::regclass) \
                OR c.oid IN (SELECT indexrelid FROM pg_index \
                             WHERE indrelid = 'webhook_deliveries'::regclass)",
        )
        .fetch_all(&mut self.db)
        .await
        .ok()?;
        let mut delivery_bytes = [0i64; DELIVERY_RELATIONS.len()];
        for (name, size) in relations {
            let i = DELIVERY_RELATIONS
                .iter()
                .position(|r| *r == name)
                .unwrap_or(DELIVERY_RELATIONS.len() - 1);
            delivery_bytes[i] += size;
        }
        let names: Vec<&str> = ROW_TABLES.iter().map(|t| t.0).collect();
        let tables: Vec<(String, i64, i64)> = sqlx::query_as(
            "SELECT relname::text, n_tup_ins, n_tup_del FROM pg_stat_user_tables \
             WHERE relname = ANY($1)",
        )
        .bind(&names)
        .fetch_all(&mut self.db)
        .await
        .unwrap_or_default();
        let (mut inserted, mut deleted) = ([0i64; 3], [0i64; 3]);
        for (name, ins, del) in tables {
            if let Some(i) = names.iter().position(|n| *n == name) {
                inserted[i] = ins;
                deleted[i] = del;
            }
        }
        Some(StoreCounts {
            pending: row.0,
            pending_due: row.1,
            pending_failing: row.2,
            outbox: row.3,
            commits: row.4,
            updated: row.5,
            db_bytes: row.6,
            part_bytes,
            delivery_bytes,
            inserted,
            deleted,
        })
    }

    async fn sample(&mut self, loaded: bool) -> Sample {
        let metrics = self.metrics().await;
        let (redis_due_now, redis_due_all, redis_keys) = self.redis_counts().await;
        let redis_memory = self.redis_memory().await;
        let store = self.store_counts().await;
        Sample {
            at: self.start.elapsed().as_secs_f64(),
            loaded,
            rss_kib: rss_kib(self.pid),
            fds: open_fds(self.pid),
            cpu: cpu_ticks(self.pid),
            gauge: metrics.as_ref().and_then(|m| m.due),
            metrics,
            rows: None,
            vacuum: self.vacuum.as_ref().map(|v| *lock(v)),
            redis_due_now,
            redis_due_all,
            redis_keys,
            redis_memory,
            store,
        }
    }
}

/// The tables autovacuum would vacuum or analyze now, whether it would
/// vacuum each and whether analyze it, with the pacing it would give it:
/// PostgreSQL 15's rules, from the server's settings and each table's
/// storage parameters (which override them). Vacuum: dead rows above
/// `autovacuum_vacuum_threshold + autovacuum_vacuum_scale_factor × rows`,
/// or rows inserted since its last vacuum above the insert threshold and
/// scale factor. Analyze: rows changed since its last analyze above
/// `autovacuum_analyze_threshold + autovacuum_analyze_scale_factor × rows`.
/// Paced by `autovacuum_vacuum_cost_limit` (`-1`: the server's
/// `vacuum_cost_limit`) every `autovacuum_vacuum_cost_delay` ms.
const DUE_FOR_AUTOVACUUM: &str = "\
    WITH s AS ( \
        SELECT max(setting::float8) FILTER (WHERE name = 'autovacuum_vacuum_threshold') AS threshold, \
            max(setting::float8) FILTER (WHERE name = 'autovacuum_analyze_threshold') AS analyze_threshold, \
            max(setting::float8) FILTER (WHERE name = 'autovacuum_analyze_scale_factor') AS analyze_scale, \
            max(setting::float8) FILTER (WHERE name = 'autovacuum_vacuum_scale_factor') AS scale, \
            max(setting::float8) FILTER (WHERE name = 'autovacuum_vacuum_insert_threshold') AS insert_threshold, \
            max(setting::float8) FILTER (WHERE name = 'autovacuum_vacuum_insert_scale_factor') AS insert_scale, \
            coalesce(nullif(max(setting::int) FILTER (WHERE name = 'autovacuum_vacuum_cost_limit'), -1), \
                max(setting::int) FILTER (WHERE name = 'vacuum_cost_limit')) AS cost_limit, \
            max(setting::float8) FILTER (WHERE name = 'autovacuum_vacuum_cost_delay') AS cost_delay \
        FROM pg_settings WHERE name IN ('autovacuum_vacuum_threshold', 'autovacuum_vacuum_scale_factor', \
            'autovacuum_analyze_threshold', 'autovacuum_analyze_scale_factor', \
            'autovacuum_vacuum_insert_threshold', 'autovacuum_vacuum_insert_scale_factor', \
            'autovacuum_vacuum_cost_limit', 'vacuum_cost_limit', 'autovacuum_vacuum_cost_delay')) \
    SELECT relname, vacuum_due, analyze_due, cost_limit, cost_delay_ms FROM ( \
    SELECT c.relname::text AS relname, \
        (t.n_dead_tup > s.threshold + coalesce(o.scale, s.scale) * greatest(c.reltuples, 0) \
            OR t.n_ins_since_vacuum > s.insert_threshold \
                + coalesce(o.insert_scale, s.insert_scale) * greatest(c.reltuples, 0)) AS vacuum_due, \
        t.n_mod_since_analyze > coalesce(o.analyze_threshold, s.analyze_threshold) \
            + coalesce(o.analyze_scale, s.analyze_scale) * greatest(c.reltuples, 0) AS analyze_due, \
        coalesce(o.cost_limit, s.cost_limit) AS cost_limit, \
        coalesce(o.cost_delay, s.cost_delay) AS cost_delay_ms \
    FROM pg_class c JOIN pg_stat_user_tables t ON t.relid = c.oid CROSS JOIN s \
    CROSS JOIN LATERAL ( \
        SELECT max(option_value::float8) FILTER (WHERE option_name = 'autovacuum_vacuum_scale_factor') AS scale, \
            max(option_value::float8) FILTER (WHERE option_name = 'autovacuum_analyze_threshold') AS analyze_threshold, \
            max(option_value::float8) FILTER (WHERE option_name = 'autovacuum_analyze_scale_factor') AS analyze_scale, \
            max(option_value::float8) FILTER (WHERE option_name = 'autovacuum_vacuum_insert_scale_factor') AS insert_scale, \
            max(option_value::int) FILTER (WHERE option_name = 'autovacuum_vacuum_cost_limit') AS cost_limit, \
            max(option_value::float8) FILTER (WHERE option_name = 'autovacuum_vacuum_cost_delay') AS cost_delay \
        FROM pg_options_to_table(c.reloptions)) AS o \
    WHERE c.relkind = 'r' AND c.relnamespace = 'public'::regnamespace) AS due \
    WHERE vacuum_due OR analyze_due \
    ORDER BY relname";

/// Autovacuum's work, done by the benchmark because autovacuum is off on
/// this machine: a round every `every` (as autovacuum's launcher visits a
/// database every `autovacuum_naptime`, 60 s), or as soon as the last one
/// ended if it took longer, in which one process takes the tables that
/// `DUE_FOR_AUTOVACUUM` names one after another, as an autovacuum worker
/// does: a plain `VACUUM` of each due for one, then an `ANALYZE` of each
/// due for one, paced as it says (a manual `VACUUM` is not paced at all,
/// and would take the disk from the live traffic as production's vacuum
/// never does), without parallel workers (`PARALLEL 0`: autovacuum never
/// vacuums indexes in parallel), from a connection of its own (simple
/// statements: `VACUUM` cannot run in a transaction), until `stop`;
/// counts and times the rounds in `stats`.
///
/// The analyzes are part of the round, not a loop beside it, because that
/// is where autovacuum makes them: an `ANALYZE` holds a snapshot while it
/// reads a table, and a B-tree page that a `VACUUM` deletes meanwhile
/// cannot be reused until the next round (PostgreSQL recycles a deleted
/// index page only once no snapshot older than its deletion remains). An
/// `ANALYZE` beside each round would delay that round's freed index pages
/// by a round, as production's autovacuum does not.
async fn vacuumer(
    db: String,
    every: Duration,
    verbose: bool,
    stop: CancellationToken,
    stats: Arc<Mutex<VacuumStats>>,
) -> Option<String> {
    let mut conn = match PgConnection::connect(&pg_url_for(&db)).await {
        Ok(c) => c,
        Err(e) => return Some(format!("VACUUM connection: {e}")),
    };
    if verbose {
        if let Err(e) = conn.execute("SET log_min_messages = info").await {
            return Some(format!("VACUUM connection: {e}"));
        }
    }
    let mut last_error = None;
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tick.tick() => {}
        }
        let started = Instant::now();
        // Not cancelled by `stop`: a round under way finishes.
        let outcome = vacuum_round(&mut conn, verbose).await;
        let took = started.elapsed();
        let mut s = lock(&stats);
        match outcome {
            Ok((vacuumed, analyzed)) => {
                s.runs += 1;
                s.tables += vacuumed;
                s.analyzed += analyzed;
                s.total += took;
                s.last = Some(took);
                s.longest = s.longest.max(took);
            }
            Err(e) => {
                s.errors += 1;
                last_error = Some(format!("VACUUM: {e}"));
            }
        }
    }
    let _ = conn.close().await;
    last_error
}

/// One round of `vacuumer`: the tables vacuumed, and those analyzed.
/// When `verbose`, each `VACUUM` and `ANALYZE` is `VERBOSE` (per index:
/// pages newly deleted, and those reusable), for the server's log.
async fn vacuum_round(conn: &mut PgConnection, verbose: bool) -> Result<(u64, u64), sqlx::Error> {
    let due: Vec<(String, bool, bool, i32, f64)> = sqlx::query_as(DUE_FOR_AUTOVACUUM)
        .fetch_all(&mut *conn)
        .await?;
    let verbose = if verbose { ", VERBOSE" } else { "" };
    let (mut vacuumed, mut analyzed) = (0, 0);
    for (table, vacuum, analyze, cost_limit, cost_delay_ms) in &due {
        conn.execute(format!("SET vacuum_cost_limit = {cost_limit}").as_str())
            .await?;
        conn.execute(format!("SET vacuum_cost_delay = '{cost_delay_ms}ms'").as_str())
            .await?;
        if *vacuum {
            conn.execute(format!("VACUUM (PARALLEL 0{verbose}) \"{table}\"").as_str())
                .await?;
            vacuumed += 1;
        }
        if *analyze {
            conn.execute(format!("ANALYZE (SKIP_LOCKED{verbose}) \"{table}\"").as_str())
                .await?;
            analyzed += 1;
        }
    }
    Ok((vacuumed, analyzed))
}

// --------------------------------------------------------------- printing

/// `1234567` as `1,234,567`.
fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The wall clock (UTC, `HH:MM:SS`), to match the service's log lines.
fn clock() -> String {
    let t = domain::Timestamp::now().to_rfc3339();
    t.get(11..19).unwrap_or(&t).to_owned()
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

fn mib(kib: Option<u64>) -> String {
    kib.map_or_else(
        || "-".to_owned(),
        |k| format!("{:.1} MiB", k as f64 / 1024.0),
    )
}

/// Snapshot of the cumulative counters, to print a window's deltas.
#[derive(Clone, Copy, Default)]
struct Totals {
    published: u64,
    requests: u64,
    ok: u64,
    refused: u64,
    repeats: u64,
    skipped: u64,
    pays: u64,
}

fn totals(load: &Load, sink: &Sink) -> Totals {
    Totals {
        published: load.published.load(Ordering::Relaxed),
        requests: sink.requests.load(Ordering::Relaxed),
        ok: sink.answered_ok.load(Ordering::Relaxed),
        refused: sink.answered_500.load(Ordering::Relaxed),
        repeats: sink.repeats.load(Ordering::Relaxed),
        skipped: load.skipped.load(Ordering::Relaxed),
        pays: load.pays_succeeded.load(Ordering::Relaxed),
    }
}

/// The backlog part of a report line.
fn backlog_text(s: &Sample) -> String {
    let store = s.store.map_or_else(
        || "store -".to_owned(),
        |c| {
            format!(
                "store pending {} (due {}; healthy endpoints {}, failing endpoints {}), outbox {}",
                thousands(c.pending as u64),
                thousands(c.pending_due as u64),
                thousands((c.pending - c.pending_failing) as u64),
                thousands(c.pending_failing as u64),
                c.outbox
            )
        },
    );
    format!(
        "due backlog: gauge {}, redis due {} (set {}); {store}; redis keys {}, memory {}",
        s.gauge
            .map_or_else(|| "-".to_owned(), |g| format!("{g:.0}")),
        opt(s.redis_due_now),
        opt(s.redis_due_all),
        opt(s.redis_keys),
        mib(s.redis_memory.map(|b| b / 1024))
    )
}

fn bytes_mib(b: i64) -> String {
    format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0))
}

/// `deliveries 1, attempts 2, events 3` of per-table values.
fn per_table(v: [String; 3]) -> String {
    ROW_TABLES
        .iter()
        .zip(v)
        .map(|((_, short), v)| format!("{short} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Per second of each retention kind's counter between two scrapes.
fn deleted_rates(a: &Metrics, b: &Metrics, secs: f64) -> Vec<(&'static str, f64)> {
    RETENTION_KINDS
        .iter()
        .map(|k| {
            let d = b.deleted.get(*k).copied().unwrap_or(0.0)
                - a.deleted.get(*k).copied().unwrap_or(0.0);
            (*k, d / secs)
        })
        .collect()
}

/// The store and retention lines of a report, over the window `prev..s`.
fn store_lines(s: &Sample, prev: &Sample, received: u64, ok: u64) -> Vec<String> {
    let secs = (s.at - prev.at).max(1e-9);
    let mut lines = Vec::new();
    let mut store = String::from("store:");
    match (prev.store, s.store) {
        (Some(a), Some(b)) => {
            store.push_str(&format!(
                " database {} ({:+.1} MiB in the window)",
                bytes_mib(b.db_bytes),
                (b.db_bytes - a.db_bytes) as f64 / (1024.0 * 1024.0)
            ));
            if let Some(rows) = s.rows {
                store.push_str(&format!(
                    "; rows {}",
                    per_table(rows.map(|n| thousands(n.max(0) as u64)))
                ));
            }
            lines.push(store);
            lines.push(format!(
                "  rows written/s (n_tup_ins) {}; deleted/s (n_tup_del) {}",
                per_table(std::array::from_fn(|i| format!(
                    "{:.0}",
                    (b.inserted[i] - a.inserted[i]) as f64 / secs
                ))),
                per_table(std::array::from_fn(|i| format!(
                    "{:.0}",
                    (b.deleted[i] - a.deleted[i]) as f64 / secs
                )))
            ));
        }
        _ => lines.push("store: -".to_owned()),
    }
    let mut retention = String::from("retention deleted/s:");
    match (&prev.metrics, &s.metrics) {
        (Some(a), Some(b)) => {
            retention.push(' ');
            retention.push_str(
                &deleted_rates(a, b, secs)
                    .iter()
                    .map(|(k, r)| format!("{k} {r:.0}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            );
        }
        _ => retention.push_str(" -"),
    }
    retention.push_str(&format!(
        " | received/s {:.0} ({:.0} answered 2xx)",
        received as f64 / secs,
        ok as f64 / secs
    ));
    lines.push(retention);
    let mut oldest = String::from("  oldest kept:");
    match &s.metrics {
        Some(m) if !m.oldest.is_empty() => {
            oldest.push(' ');
            oldest.push_str(
                &RETENTION_KINDS
                    .iter()
                    .filter_map(|k| m.oldest.get(*k).map(|v| format!("{k} {v:.0} s")))
                    .collect::<Vec<_>>()
                    .join(", "),
            );
        }
        _ => oldest.push_str(" -"),
    }
    if let Some(v) = s.vacuum {
        oldest.push_str(&format!(
            " | autovacuum's rounds (ours; it is off): {} so far, {} tables vacuumed, {} analyzed{}{}",
            v.runs,
            v.tables,
            v.analyzed,
            v.last.map_or_else(String::new, |l| format!(
                ", last round {:.1} s, longest {:.1} s",
                l.as_secs_f64(),
                v.longest.as_secs_f64()
            )),
            if v.errors > 0 {
                format!(", {} failed", v.errors)
            } else {
                String::new()
            }
        ));
    }
    lines.push(oldest);
    if let (Some(a), Some(b)) = (&prev.metrics, &s.metrics) {
        lines.push(format!(
            "delivery created → first attempt (service histogram, window): {}",
            b.lag.since(&a.lag).text()
        ));
    }
    lines
}

/// Prints one report: the latest sample, the window's counters and calls.
fn report(
    s: &Sample,
    prev: &Sample,
    ticks: f64,
    now: Totals,
    before: Totals,
    api: &Api,
    sink: &Sink,
) {
    let secs = (s.at - prev.at).max(1e-9);
    let cores = match (prev.cpu, s.cpu) {
        (Some(c0), Some(c1)) => format!("{:.2}", c1.saturating_sub(c0) as f64 / ticks / secs),
        _ => "-".to_owned(),
    };
    let pg = match (prev.store, s.store) {
        (Some(a), Some(b)) => format!(
            "{:.0} commits/s, {:.0} rows updated/s",
            (b.commits - a.commits) as f64 / secs,
            (b.updated - a.updated) as f64 / secs
        ),
        _ => "-".to_owned(),
    };
    println!(
        "[{:>5.0} s] {} billing rss {}, fds {}, cpu {cores} cores | PostgreSQL (this database) {pg}",
        s.at,
        clock(),
        mib(s.rss_kib),
        opt(s.fds),
    );
    println!("          {}", backlog_text(s));
    println!(
        "          events published {} (total {}), pays ok {} | receiver {} requests: {} ok, {} \
         500, {} repeats; max at once per webhook-id {} | load ticks skipped {}",
        thousands(now.published - before.published),
        thousands(now.published),
        now.pays - before.pays,
        thousands(now.requests - before.requests),
        thousands(now.ok - before.ok),
        thousands(now.refused - before.refused),
        now.repeats - before.repeats,
        sink.max_at_once.load(Ordering::Relaxed),
        now.skipped - before.skipped
    );
    for l in store_lines(s, prev, now.requests - before.requests, now.ok - before.ok) {
        println!("          {l}");
    }
    println!(
        "          delivery, publish -> first receipt at a healthy endpoint: {} in the window",
        latency_text(&sink.take_window())
    );
    let mut parts = Vec::new();
    {
        let mut stats = lock(&api.stats);
        for (kind, k) in stats.iter_mut() {
            let mut w = std::mem::take(&mut k.window);
            if w.is_empty() {
                continue;
            }
            w.sort_unstable();
            let errors = std::mem::take(&mut k.window_errors);
            parts.push(format!(
                "{kind} {} p99 {}{}",
                w.len(),
                ms(percentile_ms(&w, 99.0)),
                if errors > 0 {
                    format!(" ({errors} errors)")
                } else {
                    String::new()
                }
            ));
        }
    }
    let mut line = String::from("          calls:");
    for p in parts {
        if line.len() + p.len() > 118 {
            println!("{line}");
            line = String::from("                ");
        }
        line.push(' ');
        line.push_str(&p);
        line.push(';');
    }
    println!("{line}");
    let _ = std::io::stdout().flush();
}

// ------------------------------------------------------------------ audit

/// Deliveries the receiver got, against what was expected.
#[derive(Default)]
struct Audit {
    /// (event, healthy endpoint) pairs expected.
    expected: u64,
    /// Of those, never received.
    lost: u64,
    /// Requests beyond the first for an expected pair.
    duplicates: u64,
    /// Events received that were neither published nor of a successful pay.
    unexpected: u64,
    /// Events expected (published + 2 per successful pay).
    events: u64,
    /// Requests per (event, failing endpoint): how many got that count.
    failing_attempts: BTreeMap<u16, u64>,
    /// A few examples of what was lost.
    examples: Vec<String>,
}

fn audit(sink: &Sink, published: &[String], paid: &[String]) -> Audit {
    let events = lock(&sink.events);
    let healthy: Vec<usize> = (0..sink.failing.len())
        .filter(|i| !sink.failing[*i])
        .collect();
    let failing: Vec<usize> = (0..sink.failing.len())
        .filter(|i| sink.failing[*i])
        .collect();
    let mut a = Audit::default();
    let published_set: HashSet<&str> = published.iter().map(String::as_str).collect();
    // The events of pays, by (type, session).
    let mut of_pays: HashMap<(&str, &str), Vec<&Received>> = HashMap::new();
    let mut outside = 0u64;
    for (event_ref, rec) in events.iter() {
        if published_set.contains(event_ref.as_str()) {
            continue;
        }
        match rec.session.as_deref() {
            Some(s) => of_pays
                .entry((rec.event_type.as_str(), s))
                .or_default()
                .push(rec),
            None => outside += 1,
        }
    }
    let tally = |what: String, recs: &[&Received], a: &mut Audit| {
        a.events += 1;
        for &i in &healthy {
            a.expected += 1;
            let n: u64 = recs.iter().map(|r| u64::from(r.counts[i])).sum();
            if n == 0 {
                a.lost += 1;
                if a.examples.len() < 5 {
                    a.examples.push(format!("{what} at endpoint {i}"));
                }
            } else {
                a.duplicates += n - 1;
            }
        }
        for &i in &failing {
            let n: u64 = recs.iter().map(|r| u64::from(r.counts[i])).sum();
            *a.failing_attempts
                .entry(u16::try_from(n).unwrap_or(u16::MAX))
                .or_default() += 1;
        }
    };
    for event_ref in published {
        let recs: Vec<&Received> = events.get(event_ref).into_iter().collect();
        tally(format!("published {event_ref}"), &recs, &mut a);
    }
    let paid_set: HashSet<&str> = paid.iter().map(String::as_str).collect();
    for session in paid {
        for (t, _) in TYPES {
            let recs = of_pays.remove(&(t, session.as_str())).unwrap_or_default();
            tally(format!("{t} of {session}"), &recs, &mut a);
        }
    }
    a.unexpected = outside
        + of_pays
            .iter()
            .filter(|((_, s), _)| !paid_set.contains(s))
            .map(|(_, v)| v.len() as u64)
            .sum::<u64>();
    a
}

/// The failing endpoints' deliveries in the store:
/// `(status, attempt_count, count)`.
async fn failing_deliveries(
    db: &mut PgConnection,
    refs: &[String],
) -> Result<Vec<(String, i64, i64)>, String> {
    sqlx::query_as(
        "SELECT status, attempt_count, count(*) FROM webhook_deliveries \
         WHERE endpoint_ref = ANY($1) GROUP BY status, attempt_count ORDER BY status, attempt_count",
    )
    .bind(refs)
    .fetch_all(db)
    .await
    .map_err(|e| format!("failing deliveries: {e}"))
}

/// Per attempt number (2..), the shortest and median gap from the previous
/// attempt's start, in ms, over the failing endpoints' deliveries: their
/// rows of `webhook_attempts` and the successes kept on the deliveries'
/// own rows (the attempt's number is the delivery's `attempt_count`, its
/// start its `last_attempt_at`).
async fn retry_gaps(
    db: &mut PgConnection,
    refs: &[String],
) -> Result<Vec<(i64, i64, i64, f64)>, String> {
    sqlx::query_as(
        "SELECT attempt_number, count(*), min(gap), \
                percentile_cont(0.5) WITHIN GROUP (ORDER BY gap) \
         FROM (SELECT attempt_number, started_at - lag(started_at) OVER \
                 (PARTITION BY delivery_ref, generation ORDER BY attempt_number) AS gap \
               FROM (SELECT delivery_ref, generation, attempt_number, started_at \
                     FROM webhook_attempts WHERE endpoint_ref = ANY($1) \
                     UNION ALL SELECT delivery_ref, generation, attempt_count, last_attempt_at \
                     FROM webhook_deliveries \
                     WHERE endpoint_ref = ANY($1) AND success_duration_ms IS NOT NULL) a) g \
         WHERE gap IS NOT NULL GROUP BY attempt_number ORDER BY attempt_number",
    )
    .bind(refs)
    .fetch_all(db)
    .await
    .map_err(|e| format!("retry gaps: {e}"))
}

/// Deliveries by endpoint class and status: `(failing, status, count)`.
async fn delivery_statuses(
    db: &mut PgConnection,
    failing: &[String],
) -> Result<Vec<(bool, String, i64)>, String> {
    sqlx::query_as(
        "SELECT endpoint_ref = ANY($1), status, count(*) FROM webhook_deliveries \
         GROUP BY 1, 2 ORDER BY 1, 2",
    )
    .bind(failing)
    .fetch_all(db)
    .await
    .map_err(|e| format!("delivery statuses: {e}"))
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// Means of the second and the last third of `values`.
fn thirds(values: &[f64]) -> Option<(f64, f64)> {
    let n = values.len();
    if n < 3 {
        return None;
    }
    Some((
        mean(&values[n / 3..2 * n / 3])?,
        mean(&values[2 * n / 3..])?,
    ))
}

/// What the levelling check adds when the references' time part wrapped
/// during the load (`domain::reference::time_part_wraps`): from then on
/// new keys land left of the kept ones, and the indexes keyed by
/// references split pages in half until retention has removed the keys
/// older than the wrap, a step the load itself does not make.
fn wraps_met(start_millis: i64, load_secs: f64) -> String {
    let end = start_millis + (load_secs * 1_000.0) as i64;
    domain::reference::time_part_wraps(start_millis, end)
        .iter()
        .map(|at| {
            format!(
                "; the references' time part wrapped {:.0} s into the load \
                 (every 25.4 h): the keys made after it sort before those kept",
                (at - start_millis) as f64 / 1_000.0
            )
        })
        .collect()
}

/// The growth over the first, second and last third of `sized` (samples
/// with store counts, in order) of what `bytes` reads from each, in bytes,
/// with the seconds each third spans.
struct Growth {
    first: f64,
    second: f64,
    last: f64,
    spans: [(f64, f64); 3],
}

fn store_growth(sized: &[&Sample], bytes: impl Fn(&StoreCounts) -> i64) -> Option<Growth> {
    let n = sized.len();
    if n < 4 {
        return None;
    }
    let (i1, i2) = (n / 3, 2 * n / 3);
    let b = |i: usize| sized[i].store.as_ref().map_or(0.0, |c| bytes(c) as f64);
    let at = |i: usize| sized[i].at;
    Some(Growth {
        first: b(i1) - b(0),
        second: b(i2) - b(i1),
        last: b(n - 1) - b(i2),
        spans: [(at(0), at(i1)), (at(i1), at(i2)), (at(i2), at(n - 1))],
    })
}

/// Rows written and deleted per second between two samples: per table
/// from `pg_stat_user_tables`, and the sweep's counters.
fn written_deleted(a: &Sample, b: &Sample) -> String {
    let secs = (b.at - a.at).max(1e-9);
    let (Some(x), Some(y)) = (a.store, b.store) else {
        return "-".to_owned();
    };
    let sweep = match (&a.metrics, &b.metrics) {
        (Some(ma), Some(mb)) => deleted_rates(ma, mb, secs),
        _ => Vec::new(),
    };
    let swept = |kind: &str| {
        sweep
            .iter()
            .find(|(k, _)| *k == kind)
            .map_or_else(|| "-".to_owned(), |(_, r)| format!("{r:.0}"))
    };
    let mut parts: Vec<String> = ROW_TABLES
        .iter()
        .enumerate()
        .map(|(i, (_, short))| {
            let w = (y.inserted[i] - x.inserted[i]) as f64 / secs;
            let d = (y.deleted[i] - x.deleted[i]) as f64 / secs;
            let counter = match *short {
                "deliveries" | "events" => format!(" (sweep counter {}/s)", swept(short)),
                _ => String::new(),
            };
            format!(
                "{short} {w:.0}/s written, {d:.0}/s deleted{counter} = {:.0} %",
                if w > 0.0 { d / w * 100.0 } else { 0.0 }
            )
        })
        .collect();
    parts.push(format!(
        "bodies emptied {}/s, dead letters {}/s, request logs {}/s",
        swept("bodies"),
        swept("dead_letters"),
        swept("request_logs")
    ));
    parts.join("; ")
}

// -------------------------------------------------------------- the run

struct Check {
    name: &'static str,
    pass: bool,
    detail: String,
}

async fn soak(
    bin: &std::path::Path,
    cfg: &Config,
    fleet: &mut Fleet,
    interrupted: CancellationToken,
) -> Result<Vec<Check>, String> {
    let name = fleet.name.clone();
    let ticks = clock_ticks();
    let mut admin = pg_admin().await?;

    // Isolation: database, virtual host, Redis database.
    let redis_db = fleet.provision(&mut admin).await?;
    let _ = admin.close().await;

    let failing_flags: Vec<bool> = (0..cfg.endpoints)
        .map(|i| i >= cfg.endpoints - cfg.failing)
        .collect();
    let (sink, hook_base) = Sink::start(failing_flags.clone(), cfg.receiver_delay).await?;

    // The service.
    let amqp_url = format!("{AMQP_BASE}/{}", url_encode(&name));
    let (api_port, metrics_port) = (free_port()?, free_port()?);
    let mut key = [0u8; 32];
    rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut key);
    let mut envs: Vec<(String, String)> = [
        ("BILLING_STORE__URL", pg_url_for(&name)),
        ("BILLING_QUEUE__URL", amqp_url.clone()),
        ("BILLING_SCHEDULER__URL", format!("{REDIS_BASE}/{redis_db}")),
        ("BILLING_API__LISTEN", format!("127.0.0.1:{api_port}")),
        (
            "BILLING_METRICS__LISTEN",
            format!("127.0.0.1:{metrics_port}"),
        ),
        (
            "BILLING_DELIVERY__ALLOW_PRIVATE_NETWORKS",
            "true".to_owned(),
        ),
        (
            "BILLING_DELIVERY__RETRY_SCHEDULE",
            cfg.retry_schedule.clone(),
        ),
        (
            "BILLING_SECRETS__KEY",
            base64::engine::general_purpose::STANDARD.encode(key),
        ),
        ("BILLING_LOG__LEVEL", "warn".to_owned()),
        // The queue and keys named, not the store's own: the run has a
        // virtual host and a Redis database of its own, and the publisher
        // waits for this queue.
        ("BILLING_QUEUE__NAME", QUEUE.to_owned()),
        ("BILLING_SCHEDULER__KEY_PREFIX", REDIS_PREFIX.to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    if let Some(retention) = &cfg.retention {
        envs.push((
            "BILLING_RETENTION__DELIVERIES".to_owned(),
            retention.clone(),
        ));
        envs.push((
            "BILLING_RETENTION__SWEEP_EVERY".to_owned(),
            cfg.sweep_every.clone(),
        ));
    }
    if let Some(retention) = &cfg.request_log_retention {
        envs.push((
            "BILLING_RETENTION__REQUEST_LOGS".to_owned(),
            retention.clone(),
        ));
    }
    let stderr = std::fs::File::create(&fleet.stderr_path).map_err(|e| e.to_string())?;
    let child = billing_command(bin, fleet.dir.path(), &envs)
        .arg("serve")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
    let pid = child.id();
    fleet.child = Some(child);

    let base = format!("http://127.0.0.1:{api_port}");
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(256)
        .build()
        .map_err(|e| e.to_string())?;
    let ready_after = fleet.await_ready(&client, &base, "serve").await?;

    let (secret, env_ref) = bootstrap_sandbox(bin, fleet.dir.path(), &envs).await?;

    let load = Arc::new(Load::default());
    let mut api = Api {
        client: client.clone(),
        base: base.clone(),
        secret: secret.clone(),
        stats: Mutex::default(),
        refs: Mutex::default(),
        paid: Mutex::default(),
        load: load.clone(),
        endpoints: Vec::new(),
        spare_url: hook_base.replace("/hook", "/spare"),
        config_ref: String::new(),
    };

    // Endpoints and their subscriptions.
    for i in 0..cfg.endpoints {
        let ep = api
            .setup(
                Some(json!({"url": format!("{hook_base}/{i}")})),
                "/api/v1/webhook_endpoints",
                201,
            )
            .await?;
        let ep = ep["endpoint_ref"]
            .as_str()
            .ok_or_else(|| format!("create endpoint: {ep}"))?
            .to_owned();
        for (t, v) in TYPES {
            api.setup(
                Some(json!({"public_event_type": t, "scope_type": "environment",
                    "scope_ref": env_ref, "dto_version": v})),
                &format!("/api/v1/webhook_endpoints/{ep}/subscriptions"),
                201,
            )
            .await?;
        }
        api.endpoints.push(ep);
    }
    let failing_refs: Vec<String> = api
        .endpoints
        .iter()
        .zip(&failing_flags)
        .filter(|(_, f)| **f)
        .map(|(e, _)| e.clone())
        .collect();

    // Something to sell: a product, its price and offer, a config.
    let product = api
        .setup(
            Some(json!({"name": "Soak product"})),
            "/api/v1/products",
            201,
        )
        .await?;
    let product = product["product_ref"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    api.setup(
        Some(json!({})),
        &format!("/api/v1/products/{product}/publish"),
        200,
    )
    .await?;
    let price = api
        .setup(
            Some(json!({"product_ref": product, "type": "one_time",
                "amount": {"currency": "EUR", "unit": "minor", "value": "1999"}})),
            "/api/v1/prices",
            201,
        )
        .await?;
    let price = price["price_ref"].as_str().unwrap_or_default().to_owned();
    api.setup(
        Some(json!({})),
        &format!("/api/v1/prices/{price}/publish"),
        200,
    )
    .await?;
    let offers = api
        .setup(None, &format!("/api/v1/offers?product_ref={product}"), 200)
        .await?;
    let offer = offers["items"][0]["offer_ref"]
        .as_str()
        .ok_or_else(|| format!("no offer for {product}: {offers}"))?
        .to_owned();
    let config = api
        .setup(
            Some(json!({"name": "Soak checkout",
                "line_items": [{"offer_ref": offer, "quantity": 1}],
                "success_url": "https://example.com/ok"})),
            "/api/v1/checkout-configs",
            201,
        )
        .await?;
    let config_ref = config["config_ref"].as_str().unwrap_or_default().to_owned();
    api.setup(
        Some(json!({})),
        &format!("/api/v1/checkout-configs/{config_ref}/publish"),
        200,
    )
    .await?;
    api.config_ref = config_ref;
    let api = Arc::new(api);

    let publisher = Publisher::connect(&amqp_url, "billing-soak-bench").await?;

    // Statistics for the planner, now and periodically.
    let mut db = PgConnection::connect(&pg_url_for(&name))
        .await
        .map_err(|e| format!("PostgreSQL {name}: {e}"))?;
    db.execute("ANALYZE")
        .await
        .map_err(|e| format!("ANALYZE: {e}"))?;
    // With autovacuum's work made by the benchmark, its rounds analyze
    // as well (`vacuumer`); without, a periodic `ANALYZE` keeps the
    // planner's statistics.
    let stop_analyzer = CancellationToken::new();
    let analyzer_task = cfg.vacuum_every.is_none().then(|| {
        tokio::spawn(analyzer(
            name.clone(),
            cfg.analyze_every,
            stop_analyzer.clone(),
        ))
    });
    // What production's autovacuum would do: dead row versions, the
    // updates' and the sweep's, are reusable space only once vacuumed.
    let vacuum_stats = cfg
        .vacuum_every
        .map(|_| Arc::new(Mutex::new(VacuumStats::default())));
    let vacuum_task = cfg
        .vacuum_every
        .zip(vacuum_stats.as_ref())
        .map(|(every, stats)| {
            tokio::spawn(vacuumer(
                name.clone(),
                every,
                cfg.vacuum_verbose,
                stop_analyzer.clone(),
                stats.clone(),
            ))
        });

    let monitor_db = PgConnection::connect(&pg_url_for(&name))
        .await
        .map_err(|e| format!("PostgreSQL {name}: {e}"))?;
    let mut monitor = Monitor {
        pid,
        metrics_url: format!("http://127.0.0.1:{metrics_port}/metrics"),
        client: client.clone(),
        redis: redis_conn(redis_db).await?,
        db: monitor_db,
        failing_refs: failing_refs.clone(),
        start: Instant::now(),
        start_millis: domain::Timestamp::now().millis(),
        vacuum: vacuum_stats.clone(),
    };

    println!(
        "billing pid {pid} ready after {:.1} s; database and vhost {name}; Redis db {redis_db}",
        ready_after.as_secs_f64()
    );
    println!(
        "load for {} s: {} events/s ({}), {} writes/s, {} reads/s, {} pays/s; {} endpoints \
         ({} answering 500 always); retry schedule {}; receiver delay {} ms; report every {} s, \
         sample every {} s",
        cfg.seconds,
        cfg.event_rate,
        TYPES.map(|t| t.0).join(" + "),
        cfg.write_rate,
        cfg.read_rate,
        cfg.pay_rate,
        cfg.endpoints,
        cfg.failing,
        cfg.retry_schedule,
        cfg.receiver_delay.as_millis(),
        cfg.report,
        cfg.sample
    );
    match &cfg.retention {
        Some(r) => println!(
            "retention: BILLING_RETENTION__DELIVERIES={r}, BILLING_RETENTION__SWEEP_EVERY={}",
            cfg.sweep_every
        ),
        None => println!("retention: the service's default (BENCH_SOAK_RETENTION unset)"),
    }
    match &cfg.request_log_retention {
        Some(r) => println!("request logs: BILLING_RETENTION__REQUEST_LOGS={r}"),
        None => println!(
            "request logs: the service's retention (BENCH_SOAK_REQUEST_LOG_RETENTION unset)"
        ),
    }
    match cfg.vacuum_every {
        Some(every) => println!(
            "autovacuum's rounds made by the benchmark every {} s, each VACUUM and ANALYZE of a \
             table due paced as autovacuum paces it, one after another (autovacuum is off on this \
             machine)",
            every.as_secs()
        ),
        None => println!("no VACUUM (BENCH_SOAK_AUTOVACUUM=off)"),
    }
    let _ = std::io::stdout().flush();

    // The load.
    let stop = CancellationToken::new();
    let publisher_task = tokio::spawn(publish_events(
        publisher,
        cfg.event_rate,
        env_ref.clone(),
        stop.clone(),
        load.clone(),
        sink.clone(),
    ));
    let mut streams = JoinSet::new();
    {
        let a = api.clone();
        streams.spawn(paced(
            cfg.write_rate,
            cfg.max_in_flight,
            stop.clone(),
            load.clone(),
            move |n| a.clone().write(n),
        ));
        let a = api.clone();
        streams.spawn(paced(
            cfg.read_rate,
            cfg.max_in_flight,
            stop.clone(),
            load.clone(),
            move |n| a.clone().read(n),
        ));
        let a = api.clone();
        streams.spawn(paced(
            cfg.pay_rate,
            cfg.max_in_flight,
            stop.clone(),
            load.clone(),
            move |n| a.clone().pay(n),
        ));
    }

    let mut samples: Vec<Sample> = Vec::new();
    let mut errors: Vec<String> = Vec::new();
    let end = monitor.start + Duration::from_secs(cfg.seconds);
    let mut tick = tokio::time::interval(Duration::from_secs(cfg.sample));
    let mut next_report = cfg.report as f64;
    let mut last_totals = Totals::default();
    let mut first = monitor.sample(true).await;
    first.rows = monitor.rows(true).await;
    let mut last_reported = first.clone();
    samples.push(first);
    loop {
        tokio::select! {
            _ = interrupted.cancelled() => {
                errors.push(format!(
                    "interrupted after {:.0} s of load", monitor.start.elapsed().as_secs_f64()
                ));
                break;
            }
            _ = tick.tick() => {}
        }
        if let Some(status) = fleet.child_exited() {
            errors.push(format!(
                "billing exited during the load after {:.0} s: {status}",
                monitor.start.elapsed().as_secs_f64()
            ));
            break;
        }
        let mut s = monitor.sample(true).await;
        if s.at + 0.5 >= next_report {
            s.rows = monitor.rows(false).await;
            let now = totals(&load, &sink);
            report(&s, &last_reported, ticks, now, last_totals, &api, &sink);
            last_totals = now;
            last_reported = s.clone();
            next_report += cfg.report as f64;
        }
        samples.push(s);
        if Instant::now() >= end {
            break;
        }
    }

    // Stop the load; wait for the requests and confirms in flight.
    let load_secs = monitor.start.elapsed().as_secs_f64();
    stop.cancel();
    while streams.join_next().await.is_some() {}
    let published = publisher_task
        .await
        .map_err(|e| format!("the publisher task failed: {e}"))?;
    let paid: Vec<String> = lock(&api.paid).clone();
    let now = totals(&load, &sink);
    println!(
        "load stopped after {load_secs:.0} s: {} events confirmed of {} published, {} pays \
         succeeded ({} otherwise); draining (at most {} s) ...",
        thousands(published.confirmed.len() as u64),
        thousands(now.published),
        thousands(paid.len() as u64),
        load.pays_other.load(Ordering::Relaxed),
        cfg.drain.as_secs()
    );
    errors.extend(published.errors.iter().cloned());

    // Drain: until every expected delivery arrived and nothing is pending.
    let drain_start = Instant::now();
    let mut last_print = Instant::now();
    let drained = loop {
        if fleet.child_exited().is_some() {
            break false;
        }
        let a = audit(&sink, &published.confirmed, &paid);
        let s = monitor.sample(false).await;
        let idle = s
            .store
            .is_some_and(|c| c.pending == 0 && c.outbox == 0 && a.lost == 0);
        if idle {
            println!(
                "drained in {:.1} s: nothing pending, every expected delivery received",
                drain_start.elapsed().as_secs_f64()
            );
            samples.push(s);
            break true;
        }
        if last_print.elapsed() >= Duration::from_secs(10) {
            last_print = Instant::now();
            println!(
                "  draining {:>5.1} s {}: {} (event, healthy endpoint) pairs missing | {}",
                drain_start.elapsed().as_secs_f64(),
                clock(),
                thousands(a.lost),
                backlog_text(&s)
            );
            let _ = std::io::stdout().flush();
        }
        samples.push(s);
        if drain_start.elapsed() >= cfg.drain {
            break false;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    let drain_secs = drain_start.elapsed().as_secs_f64();
    stop_analyzer.cancel();
    let analyzes = match analyzer_task {
        Some(task) => task.await.unwrap_or(0),
        None => 0,
    };
    if let Some(task) = vacuum_task {
        if let Some(e) = task.await.ok().flatten() {
            errors.push(e);
        }
    }
    let vacuums = vacuum_stats.as_ref().map(|v| *lock(v));

    // ------------------------------------------------------------ checks
    let final_sample = samples.last().cloned();
    let a = audit(&sink, &published.confirmed, &paid);
    let statuses = delivery_statuses(&mut monitor.db, &failing_refs).await?;
    let failing_rows = failing_deliveries(&mut monitor.db, &failing_refs).await?;
    let gaps = retry_gaps(&mut monitor.db, &failing_refs).await?;
    let final_rows = monitor.rows(true).await;
    let _ = monitor.db.close().await;
    let _ = db.close().await;

    println!();
    println!(
        "after the run ({} periodic ANALYZE{}; drain {})",
        analyzes,
        vacuums.map_or_else(String::new, |v| format!(
            ", {} rounds of autovacuum's work by the benchmark (it is off; {} tables \
             vacuumed, {} analyzed, {:.1} s in all, longest round {:.1} s{})",
            v.runs,
            v.tables,
            v.analyzed,
            v.total.as_secs_f64(),
            v.longest.as_secs_f64(),
            if v.errors > 0 {
                format!(", {} failed", v.errors)
            } else {
                String::new()
            }
        )),
        if drained {
            format!("complete in {drain_secs:.1} s")
        } else {
            format!("incomplete after {drain_secs:.1} s")
        }
    );
    if let Some(s) = &final_sample {
        println!(
            "  billing rss {}, fds {} | {}",
            mib(s.rss_kib),
            opt(s.fds),
            backlog_text(s)
        );
    }
    println!(
        "  in the store: {}",
        statuses
            .iter()
            .map(|(f, s, n)| format!(
                "{} {s} {}",
                if *f { "failing" } else { "healthy" },
                thousands(*n as u64)
            ))
            .collect::<Vec<_>>()
            .join(", ")
    );
    // The store over the load: its size by thirds, rows written against
    // rows deleted.
    let sized: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.loaded && s.store.is_some())
        .collect();
    let growth = store_growth(&sized, |c| c.db_bytes);
    let parts: Vec<Option<Growth>> = (0..STORE_PARTS.len())
        .map(|i| store_growth(&sized, |c| c.part_bytes[i]))
        .collect();
    let mib_of = |b: f64| b / (1024.0 * 1024.0);
    if let (Some(g), Some(first), Some(last)) = (&growth, sized.first(), sized.last()) {
        println!(
            "  database size: {} at the start of the load, {} at its end, {} now; growth over \
             the first third ({:.0}–{:.0} s) {:+.1} MiB, the second ({:.0}–{:.0} s) {:+.1} MiB, \
             the last ({:.0}–{:.0} s) {:+.1} MiB",
            bytes_mib(first.store.map_or(0, |c| c.db_bytes)),
            bytes_mib(last.store.map_or(0, |c| c.db_bytes)),
            final_sample
                .as_ref()
                .and_then(|s| s.store)
                .map_or_else(|| "-".to_owned(), |c| bytes_mib(c.db_bytes)),
            g.spans[0].0,
            g.spans[0].1,
            mib_of(g.first),
            g.spans[1].0,
            g.spans[1].1,
            mib_of(g.second),
            g.spans[2].0,
            g.spans[2].1,
            mib_of(g.last),
        );
        let share = |last: f64, first: f64| {
            if first > 0.0 {
                format!("{:.1} %", last / first * 100.0)
            } else {
                "-".to_owned()
            }
        };
        let mut rest = [g.first, g.second, g.last];
        let mut swept = [0.0; 3];
        for ((_, tables), part) in STORE_PARTS.iter().zip(&parts) {
            let Some(p) = part else { continue };
            for (i, grew) in [p.first, p.second, p.last].into_iter().enumerate() {
                rest[i] -= grew;
                if tables.iter().all(|t| SWEPT_TABLES.contains(t)) {
                    swept[i] += grew;
                }
            }
        }
        println!(
            "  of which the tables the deliveries' retention sweeps ({}): first third {:+.1} \
             MiB, second {:+.1} MiB, last {:+.1} MiB ({} of the first)",
            SWEPT_TABLES.join(", "),
            mib_of(swept[0]),
            mib_of(swept[1]),
            mib_of(swept[2]),
            share(swept[2], swept[0]),
        );
        for ((name, tables), part) in STORE_PARTS.iter().zip(&parts) {
            let Some(p) = part else { continue };
            println!(
                "    {name} ({}): {:+.1}, {:+.1}, {:+.1} MiB",
                tables.join(", "),
                mib_of(p.first),
                mib_of(p.second),
                mib_of(p.last),
            );
        }
        let last_bytes = last
            .store
            .map_or([0; DELIVERY_RELATIONS.len()], |c| c.delivery_bytes);
        for (i, relation) in DELIVERY_RELATIONS.iter().enumerate() {
            let Some(p) = store_growth(&sized, |c| c.delivery_bytes[i]) else {
                continue;
            };
            println!(
                "      {relation}: {:+.1}, {:+.1}, {:+.1} MiB ({} at the end of the load)",
                mib_of(p.first),
                mib_of(p.second),
                mib_of(p.last),
                bytes_mib(last_bytes[i]),
            );
        }
        println!(
            "  the rest of the store (billing records, endpoints, catalogues, statistics): \
             {:+.1}, {:+.1}, {:+.1} MiB",
            mib_of(rest[0]),
            mib_of(rest[1]),
            mib_of(rest[2]),
        );
    }
    if let Some(rows) = final_rows {
        println!(
            "  rows now: {}",
            per_table(rows.map(|n| thousands(n.max(0) as u64)))
        );
    }
    if sized.len() >= 3 {
        let n = sized.len();
        println!(
            "  rows written and deleted, last third of the load ({:.0}–{:.0} s): {}",
            sized[2 * n / 3].at,
            sized[n - 1].at,
            written_deleted(sized[2 * n / 3], sized[n - 1])
        );
        println!(
            "  rows written and deleted, whole load ({:.0}–{:.0} s): {}",
            sized[0].at,
            sized[n - 1].at,
            written_deleted(sized[0], sized[n - 1])
        );
    }
    if let Some(m) = final_sample.as_ref().and_then(|s| s.metrics.as_ref()) {
        println!(
            "  delivery created → first attempt over the whole run (service histogram): {}",
            m.lag.text()
        );
    }
    let latencies = sink.all_latencies();
    println!(
        "  delivery, publish -> first receipt at a healthy endpoint: {} over the whole run",
        latency_text(&latencies)
    );
    println!(
        "  receiver: {} requests, {} answered 2xx, {} answered 500; {} repeats at healthy \
         endpoints; {} unreadable bodies; {} without webhook-id; {} arrived while the same \
         webhook-id was in flight",
        thousands(sink.requests.load(Ordering::Relaxed)),
        thousands(sink.answered_ok.load(Ordering::Relaxed)),
        thousands(sink.answered_500.load(Ordering::Relaxed)),
        sink.repeats.load(Ordering::Relaxed),
        sink.unreadable.load(Ordering::Relaxed),
        sink.without_id.load(Ordering::Relaxed),
        sink.overlapping.load(Ordering::Relaxed)
    );
    println!(
        "  requests per (event, failing endpoint): {}",
        a.failing_attempts
            .iter()
            .map(|(k, n)| format!("{k} attempts: {}", thousands(*n)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "  retry gaps at the failing endpoints (attempt: count, min, median ms): {}",
        gaps.iter()
            .map(|(n, c, min, med)| format!("#{n}: {c}, {min}, {med:.0}"))
            .collect::<Vec<_>>()
            .join("; ")
    );

    let mut checks = Vec::new();
    checks.push(Check {
        name: "no event lost",
        pass: a.lost == 0 && a.events > 0,
        detail: format!(
            "{} events ({} published + 2 × {} pays), {} (event, healthy endpoint) pairs \
             expected, {} lost, {} duplicates, {} other events received{}",
            thousands(a.events),
            thousands(published.confirmed.len() as u64),
            thousands(paid.len() as u64),
            thousands(a.expected),
            thousands(a.lost),
            thousands(a.duplicates),
            a.unexpected,
            if a.examples.is_empty() {
                String::new()
            } else {
                format!("; e.g. {}", a.examples.join(", "))
            }
        ),
    });

    // Issue 48's bound, above what the receiver itself takes to answer.
    let p99_limit = P99_LIMIT + cfg.receiver_delay;
    let p99 = percentile_ms(&latencies, 99.0);
    checks.push(Check {
        name: "whole-run p99 latency under its bound",
        pass: p99.is_some_and(|p| p < p99_limit.as_secs_f64() * 1000.0),
        detail: format!(
            "publish -> first receipt at a healthy endpoint: {}; the bound is {} ms (1 s and \
             the receiver's delay)",
            latency_text(&latencies),
            p99_limit.as_millis()
        ),
    });

    let schedule_len = cfg.delays_ms.len() as i64;
    let failing_total: i64 = failing_rows.iter().map(|r| r.2).sum();
    let ended_failed: i64 = failing_rows
        .iter()
        .filter(|(s, n, _)| s == "failed" && *n == schedule_len)
        .map(|r| r.2)
        .sum();
    let expected_failing = a.events as i64 * cfg.failing as i64;
    let early: Vec<String> = gaps
        .iter()
        .filter_map(|(n, _, min, _)| {
            let delay = *cfg.delays_ms.get(usize::try_from(*n - 1).ok()?)? as f64;
            // 20 % jitter, and a few ms of clock granularity.
            ((*min as f64) < delay * 0.8 - 5.0).then(|| format!("attempt {n} after {min} ms"))
        })
        .collect();
    // Retention deletes settled deliveries: only those still in the store
    // are counted then, and the receiver stays the judge of lost ones.
    let retention = cfg.retention.is_some();
    checks.push(Check {
        name: "failing endpoints: every delivery failed after the schedule",
        pass: ended_failed == failing_total
            && (retention || failing_total >= expected_failing)
            && early.is_empty(),
        detail: format!(
            "{} deliveries {} {} expected; {} failed after {schedule_len} attempts; by status \
             and attempts: {}{}",
            thousands(failing_total as u64),
            if retention {
                "still in the store (retention on: the ones it deleted are not counted; \
                 the count check is skipped) of"
            } else {
                "of"
            },
            thousands(expected_failing as u64),
            thousands(ended_failed as u64),
            failing_rows
                .iter()
                .map(|(s, n, c)| format!("{s}/{n}: {}", thousands(*c as u64)))
                .collect::<Vec<_>>()
                .join(", "),
            if early.is_empty() {
                "; no retry early".to_owned()
            } else {
                format!("; retries earlier than the schedule: {}", early.join(", "))
            }
        ),
    });

    let at_once = sink.max_at_once.load(Ordering::Relaxed);
    checks.push(Check {
        name: "no attempt made twice at once",
        pass: at_once <= 1 && sink.overlapping.load(Ordering::Relaxed) == 0,
        detail: format!(
            "most requests of one webhook-id in flight at once: {at_once} ({} overlapping)",
            sink.overlapping.load(Ordering::Relaxed)
        ),
    });

    let loaded: Vec<&Sample> = samples.iter().filter(|s| s.loaded).collect();
    let series = |f: &dyn Fn(&Sample) -> Option<f64>| -> Vec<f64> {
        loaded.iter().filter_map(|s| f(s)).collect()
    };
    let rss = series(&|s| s.rss_kib.map(|k| k as f64 / 1024.0));
    checks.push(match thirds(&rss) {
        Some((mid, last)) => Check {
            name: "RSS flat",
            pass: last < mid * (1.0 + RSS_GROWTH),
            detail: format!(
                "mean of the second third {mid:.1} MiB, of the last third {last:.1} MiB \
                 ({:+.1} %, limit +{:.0} %); min {:.1}, max {:.1} MiB over {} samples",
                (last / mid - 1.0) * 100.0,
                RSS_GROWTH * 100.0,
                rss.iter().copied().fold(f64::INFINITY, f64::min),
                rss.iter().copied().fold(0.0, f64::max),
                rss.len()
            ),
        },
        None => Check {
            name: "RSS flat",
            pass: false,
            detail: format!("only {} samples", rss.len()),
        },
    });
    let fds = series(&|s| s.fds.map(|f| f as f64));
    checks.push(match thirds(&fds) {
        Some((mid, last)) => Check {
            name: "file descriptors flat",
            pass: (last - mid).abs() < FD_DIFFERENCE,
            detail: format!(
                "mean of the second third {mid:.1}, of the last third {last:.1} (limit ±{:.0}); \
                 min {:.0}, max {:.0}",
                FD_DIFFERENCE,
                fds.iter().copied().fold(f64::INFINITY, f64::min),
                fds.iter().copied().fold(0.0, f64::max)
            ),
        },
        None => Check {
            name: "file descriptors flat",
            pass: false,
            detail: format!("only {} samples", fds.len()),
        },
    });
    let gauge = series(&|s| s.gauge);
    let (backlog, source) = if gauge.len() >= 3 {
        (gauge, DUE_GAUGE)
    } else {
        (
            series(&|s| s.redis_due_now.map(|v| v as f64)),
            "ZCOUNT billing:due -inf now",
        )
    };
    let growth_check = |name: &'static str, values: &[f64], source: &str| match thirds(values) {
        Some((mid, last)) => Check {
            name,
            pass: last <= mid * (1.0 + BACKLOG_GROWTH) + BACKLOG_SLACK,
            detail: format!(
                "{source}: mean of the second third {mid:.0}, of the last third {last:.0} (limit \
                 {:.0}); max {:.0}",
                mid * (1.0 + BACKLOG_GROWTH) + BACKLOG_SLACK,
                values.iter().copied().fold(0.0, f64::max)
            ),
        },
        None => Check {
            name,
            pass: false,
            detail: format!("{source}: only {} samples", values.len()),
        },
    };
    checks.push(growth_check("due backlog not growing", &backlog, source));
    // Deliveries parked behind an open circuit (`dispatcher::breaker`)
    // are pending but not due: they wait for their endpoint, and only the
    // ones due now are work the dispatcher has fallen behind on.
    let pending_due = series(&|s| s.store.map(|c| c.pending_due as f64));
    checks.push(growth_check(
        "deliveries due in the store not growing",
        &pending_due,
        "pending deliveries due now in the store",
    ));
    let healthy_pending = series(&|s| s.store.map(|c| (c.pending - c.pending_failing) as f64));
    checks.push(growth_check(
        "healthy endpoints' pending deliveries not growing",
        &healthy_pending,
        "pending deliveries of the healthy endpoints",
    ));

    let api_errors: Vec<String> = lock(&api.stats)
        .iter()
        .filter(|(_, k)| k.errors > 0)
        .map(|(kind, k)| {
            format!(
                "{kind}: {} ({}; last: {})",
                k.errors,
                k.outcomes
                    .iter()
                    .map(|(o, n)| format!("{o} × {n}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                k.last_error.as_deref().unwrap_or("-")
            )
        })
        .collect();
    checks.push(Check {
        name: "API calls answered as expected",
        pass: api_errors.is_empty(),
        detail: if api_errors.is_empty() {
            format!(
                "no error; {} load ticks skipped (stream at its in-flight limit)",
                load.skipped.load(Ordering::Relaxed)
            )
        } else {
            api_errors.join("; ")
        },
    });
    if retention {
        checks.push(match &growth {
            Some(g) => Check {
                name: "store size levels off under retention",
                pass: g.first > 0.0 && g.last < g.first * STORE_GROWTH,
                detail: format!(
                    "pg_database_size grew {:+.1} MiB over the last third of the load \
                     ({:.0}–{:.0} s), {:.1} % of the {:+.1} MiB of the first third \
                     ({:.0}–{:.0} s) (limit {:.0} %)",
                    mib_of(g.last),
                    g.spans[2].0,
                    g.spans[2].1,
                    if g.first > 0.0 {
                        g.last / g.first * 100.0
                    } else {
                        f64::NAN
                    },
                    mib_of(g.first),
                    g.spans[0].0,
                    g.spans[0].1,
                    STORE_GROWTH * 100.0
                ) + &wraps_met(monitor.start_millis, load_secs),
            },
            None => Check {
                name: "store size levels off under retention",
                pass: false,
                detail: format!("only {} samples of the database's size", sized.len()),
            },
        });
    }
    if !drained {
        errors.push(format!(
            "the drain did not complete within {} s",
            cfg.drain.as_secs()
        ));
    }
    if sink.unreadable.load(Ordering::Relaxed) > 0 {
        errors.push("delivered bodies without an event_ref".to_owned());
    }

    // API calls over the whole run.
    println!();
    println!(
        "API calls over the whole run ({load_secs:.0} s):\n  {:<26} {:>8} {:>7} {:>10} {:>10} {:>10}",
        "kind", "calls", "errors", "p50", "p99", "max"
    );
    for (kind, k) in lock(&api.stats).iter_mut() {
        k.all.sort_unstable();
        println!(
            "  {kind:<26} {:>8} {:>7} {:>10} {:>10} {:>10}",
            thousands(k.all.len() as u64),
            k.errors,
            ms(percentile_ms(&k.all, 50.0)),
            ms(percentile_ms(&k.all, 99.0)),
            ms(k.all.last().map(|d| d.as_secs_f64() * 1000.0))
        );
    }

    for e in errors {
        checks.push(Check {
            name: "run",
            pass: false,
            detail: e,
        });
    }
    Ok(checks)
}

// ------------------------------------------------------------------ main

async fn bench(cfg: Config, bin: PathBuf) -> ExitCode {
    println!(
        "soak benchmark: {} (billing serve over PostgreSQL, RabbitMQ, Redis on 127.0.0.1); {} \
         cores",
        bin.display(),
        std::thread::available_parallelism().map_or(0, |p| p.get())
    );
    remove_leftovers(NAME_PREFIX).await;
    let mut fleet = match Fleet::new(NAME_PREFIX) {
        Ok(f) => f,
        Err(e) => {
            println!("!! {e}");
            return ExitCode::FAILURE;
        }
    };
    let interrupted = CancellationToken::new();
    {
        let interrupted = interrupted.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                println!("interrupted: stopping the load, then checking and cleaning up");
                interrupted.cancel();
            }
        });
    }
    let outcome = soak(&bin, &cfg, &mut fleet, interrupted).await;
    let pid = fleet.child_pid();
    let exit = tokio::task::block_in_place(|| fleet.stop_child());
    let mut failed = false;
    if let (Some(pid), Some(status)) = (pid, exit) {
        if !status.success() {
            println!("!! billing (pid {pid}) exited with {status} after SIGTERM");
            failed = true;
        }
    }
    let (lines, tail) = fleet.stderr_tail(20);
    if lines > 0 {
        println!("billing's standard error (level warn): {lines} lines; the last ones:");
        for l in tail {
            println!("  | {l}");
        }
    } else {
        println!("billing's standard error (level warn): empty");
    }
    tokio::task::block_in_place(|| drop(fleet));
    println!();
    println!("summary:");
    match outcome {
        Ok(checks) => {
            for c in &checks {
                println!(
                    "  {} {}: {}",
                    if c.pass { "PASS" } else { "FAIL" },
                    c.name,
                    c.detail
                );
                failed |= !c.pass;
            }
        }
        Err(e) => {
            println!("  FAIL setup: {e}");
            failed = true;
        }
    }
    if CLEANUP_FAILED.load(Ordering::SeqCst) {
        println!("  FAIL cleanup (see above)");
        failed = true;
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn main() -> ExitCode {
    let cfg = match config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let bin = match build_billing() {
        Ok(b) => b,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime builds");
    runtime.block_on(bench(cfg, bin))
}
