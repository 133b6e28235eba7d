//! Benchmark of the `billing` binary in fleet mode (PostgreSQL, RabbitMQ and
//! Redis), measured end to end from outside, as a separate process, as an
//! external user would see it: events go in through RabbitMQ, deliveries
//! come out as HTTP requests to local receivers.
//!
//! Before anything else the release binary is built (`cargo build --release
//! -p billing`, from the workspace root; `cargo bench` does not build other
//! packages' binaries) and the one cargo reports is used, unless
//! `BENCH_BILLING_BIN` names another binary to measure (an older build, to
//! compare before and after a change).
//!
//! Every case starts from nothing, so that no case sees another's events:
//! its own PostgreSQL database (`billing_bench_<pid>_<hex>`), its own
//! RabbitMQ virtual host of the same name (`rabbitmqctl add_vhost`, guest
//! given every permission on it), its own Redis logical database (one of
//! 1..15 picked at random among the empty ones, `FLUSHDB` before and after),
//! free ports for the API and the metrics listener. `billing serve` runs
//! over them as a child process (inherited `BILLING_*` and `RUST_LOG`
//! variables removed; `BILLING_LOG__LEVEL=warn`, private destinations
//! allowed, a fresh secret key; its standard error kept in a temporary
//! file, whose tail is printed when it is not empty). Once `GET /readyz`
//! answers 200, `billing admin bootstrap --json` gives the sandbox secret
//! and environment, and the endpoints are created and subscribed to
//! `order.created` through the HTTP API. The database is then `ANALYZE`d,
//! and again every `BENCH_ANALYZE_SECONDS` (default 2) while the case
//! runs, from a connection of its own (this machine's PostgreSQL runs with
//! autovacuum off; production's auto-analyze keeps the planner's
//! statistics fresh, at most once a minute per table with the default
//! `autovacuum_naptime`, which `BENCH_ANALYZE_SECONDS=60` stands for). One
//! warm-up event (not measured) opens the service's connections. At the
//! end of a case, whether it passed or failed, the child gets SIGTERM (by
//! its PID), the virtual host is deleted, the Redis database flushed and
//! the PostgreSQL database dropped (a drop guard). Leftovers of earlier runs whose process
//! is gone are removed at start.
//!
//! Events are published with lapin on the case's virtual host to the
//! durable topic exchange `billing.events` (routing key = the event type,
//! persistent, `mandatory`), on a channel in confirm mode: up to
//! `BENCH_CONFIRM_WINDOW` confirms outstanding (default 1,000), so
//! publishing is pipelined. The envelopes carry a fresh `evt_` reference
//! (`Ref::generate`) and the catalogue's example data of `order.created`;
//! an event's send time is taken just before its publish. One axum
//! receiver on 127.0.0.1 serves every endpoint of a case (a path each),
//! answers 204 (or 500 at random in the fault case), keeps no bodies, and
//! records the time of the first successful receipt of each (event,
//! endpoint), matched by the delivered body's `event_ref`.
//!
//! Cases (`BENCH_CASES`, comma-separated, default all of them):
//!
//! - `one`: one endpoint, `BENCH_EVENTS` events (default 10,000) published
//!   as fast as the confirms allow (saturation).
//! - `fanout`: 10 endpoints all subscribed to the type,
//!   `BENCH_FANOUT_EVENTS` events (default 2,000), 10 deliveries each.
//! - `latency`: one in flight: publish an event, wait for its confirm and
//!   its receipt, repeat; `BENCH_LATENCY_EVENTS` events (default 500).
//! - `paced`: `BENCH_PACED_RATE` events per second (default 100, a tokio
//!   interval) for `BENCH_PACED_SECONDS` (default 20).
//! - `faults`: the receiver answers 500 to 20 % of requests at random, the
//!   service runs with `BILLING_DELIVERY__RETRY_SCHEDULE=0s,1s,1s,2s`;
//!   `BENCH_FAULT_EVENTS` events (default 2,000). Deliveries whose four
//!   attempts all failed (status `failed` in the store) are counted apart
//!   and left out of the latencies.
//!
//! - `backlog`: 5 endpoints, `BENCH_BACKLOG_EVENTS` events (default
//!   4,000): the receiver holds every request until all of them are
//!   written, so what the dispatcher has no room for is left due in the
//!   schedule (Redis), as when a fleet falls behind. Then it answers, and
//!   the window, the latencies and the CPU run from that moment: the rate
//!   is that of the due path, which drains a backlog.
//!
//! Figures of each case, over the measured window (from the first publish
//! to the last successful receipt needed):
//!
//! - delivered/s: distinct successful (event, endpoint) receipts divided by
//!   the window;
//! - send-to-receipt p50, p99 and max: from an event's publish to the first
//!   successful receipt of each of its deliveries;
//! - CPU time per delivery of each process of the stack, `utime + stime`
//!   from `/proc/<pid>/stat` before and after the window, in ticks of
//!   `getconf CLK_TCK`: the `billing` child; every process named
//!   `postgres`, `beam.smp` (RabbitMQ) and `redis-server`, with their
//!   reaped children (`cutime + cstime`, so a backend that ended inside the
//!   window still counts). These are machine-wide: anything else using
//!   those servers meanwhile is counted too. Shown apart, outside the
//!   total: PostgreSQL's share that is the case's own (the backends of its
//!   database and the background processes, found in `pg_stat_activity`,
//!   with a note when other databases had clients meanwhile), and the
//!   benchmark's own process (publisher and receiver). The `idle` column
//!   is each one's CPU (in cores) over 2 quiet seconds just before the
//!   window, after the warm-up: what the stack burns doing nothing;
//! - the peak resident memory of `billing` (`VmHWM`);
//! - PostgreSQL work per delivery, approximate: deltas of `pg_stat_database`
//!   for the case's database (transactions committed, tuples inserted,
//!   updated, deleted, fetched and returned, blocks hit + read), read 2 s
//!   after setup and 1.5 s after the window (backends report their
//!   statistics at most once a second; the periodic `ANALYZE` counts in);
//! - the peak of outstanding deliveries (published × endpoints − received,
//!   as the benchmark sees them);
//! - the deliveries by status in the store at the end;
//! - bytes per delivery (issue 48), below.
//!
//! Bytes per delivery. After the warm-up and the first `ANALYZE` the
//! benchmark runs `CHECKPOINT` (so every case's WAL starts the same way: the
//! first change of each page in the window writes its full image, as after
//! any checkpoint) and creates the `pg_walinspect` extension in the case's
//! database (contrib; without it only the per-relation WAL is missing).
//! Just before the window (after the 2 s quiet moment) it reads, from a
//! connection to the case's database: `pg_current_wal_lsn()`,
//! `pg_database_size(current_database())`, `pg_relation_size` (main fork)
//! of every relation of the public schema (`pg_class.relkind` `r` and `i`;
//! each table's TOAST table with its index as `<table> (TOAST)`), and the
//! `n_tup_ins`, `n_tup_upd`, `n_tup_hot_upd`, `n_tup_del` of each table
//! (`pg_stat_user_tables`). After the last receipt it waits (polling every
//! 20 ms, at most 30 s, outside the CPU window) until the store has
//! settled every delivery (none `pending` or `held`: every attempt
//! recorded), then reads the WAL position and the sizes again. The row
//! counters are read again once they have not moved for 10.5 s (at most
//! 40 s): a server backend that went idle within a second of its last
//! report sends its counters only after PostgreSQL's idle interval (10 s
//! in PostgreSQL 15), so the 1.5 s that suffice for `pg_stat_database`
//! most of the time can miss some. Every figure is divided by the
//! deliveries settled in the window (succeeded, plus those failed for good
//! in `faults`; the warm-up is before the window):
//!
//! - WAL: `pg_wal_lsn_diff` of the two positions, and, by `pg_walinspect`
//!   (`pg_get_wal_records_info` between them), the records and the bytes
//!   of full-page images;
//! - database growth (before vacuum): the difference of
//!   `pg_database_size`;
//! - per relation: its size growth, and the WAL of the records whose first
//!   block is in it (the whole record, full-page images included, given to
//!   that relation; `(FPI)` is the images' part); records without a block
//!   (commits, …) by resource manager, records of this database's
//!   catalogues (the periodic `ANALYZE`'s statistics) and of other
//!   databases together. Sorted by growth, then WAL;
//! - rows per delivery: inserted, updated, HOT-updated (part of updated)
//!   and deleted, per table and in total.
//!
//! WAL is cluster-wide: run no other benchmark (nothing else writing to the
//! PostgreSQL server) meanwhile. A note says when client backends of other
//! databases were connected, and their WAL shows as `(other databases,
//! shared catalogues)` in the table (included in the WAL headline). The
//! periodic `ANALYZE` writes in the window too (catalogues line). The sizes
//! are of files, which PostgreSQL never shrinks without a vacuum: with
//! retention, deleted rows still count until a vacuum, except the space
//! page pruning frees and the same table reuses.
//!
//! Retention (`BENCH_RETENTION`): unset, `0` or `off` (default), the
//! service keeps deliveries its 30 days and no sweep deletes anything in a
//! case; `1` or `on` runs it with `BILLING_RETENTION__DELIVERIES=2s`
//! (another value is passed as the duration, e.g. `5s`) and
//! `BILLING_RETENTION__SWEEP_EVERY` = `BENCH_SWEEP_EVERY` (default `1s`),
//! so that the sweep deletes settled deliveries, their attempts and
//! events while the case runs. The row counters then also count what the
//! sweep deleted after the store settled, until they stop moving.
//!
//! The final table has a line per case: delivered/s, p99, whole-stack CPU
//! per delivery, WAL and database growth per delivery, rows inserted and
//! updated per delivery.
//!
//! Goals are printed beside the figures with PASS or MISS. The binary fails
//! only when something went wrong (a setup step failed, a publish was not
//! confirmed, a case did not complete within `BENCH_CASE_LIMIT` seconds
//! after its last publish, default 120, or cleanup failed), not on a missed
//! goal. A case that does not complete prints what was missing, by status
//! in the store.
//!
//! Other settings: `BILLING_TEST_PG_URL` (the PostgreSQL server's admin
//! URL, default `postgres://postgres@127.0.0.1:5432/postgres`). Redis and
//! RabbitMQ are expected on 127.0.0.1:6379 and 127.0.0.1:5672
//! (guest/guest), with `rabbitmqctl` on the `PATH`.
//!
//! Run with `cargo bench -p billing-tests --bench fleet`; the bytes of one
//! endpoint and a 10-way fan-out, with retention and without:
//! `BENCH_CASES=one,fanout cargo bench -p billing-tests --bench fleet`, then
//! the same with `BENCH_RETENTION=1`.

#[path = "support/fleet_run.rs"]
mod fleet_run;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::serve::ListenerExt;
use base64::Engine as _;
use billing_tests::{env_num, ms, percentile_ms};
use fleet_run::{
    analyzer, billing_command, bootstrap_sandbox, build_billing, confirmed, envelope, free_port,
    pg_admin, pg_url_for, remove_leftovers, url_encode, Fleet, Publisher, AMQP_BASE,
    CLEANUP_FAILED, QUEUE, REDIS_BASE,
};
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use sqlx::{Connection, Executor, PgConnection};
use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::{ExitCode, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Prefix of each case's database and virtual host name.
const NAME_PREFIX: &str = "billing_bench_";
const EVENT_TYPE: &str = "order.created";
const FAULT_RATE: f64 = 0.2;
const FAULT_SCHEDULE: &str = "0s,1s,1s,2s";
const FANOUT_ENDPOINTS: usize = 10;
/// The soak's endpoints (`soak.rs`), whose backlog `backlog` drains.
const BACKLOG_ENDPOINTS: usize = 5;
/// How often the benchmark runs `ANALYZE` during a case by default: often
/// enough that even the shortest saturated case (about 3 s) is planned with
/// statistics of its backlog, as autovacuum's analyze would plan a growing
/// table. Its own CPU is part of PostgreSQL's figures (most visible in
/// `paced`).
const ANALYZE_EVERY: u64 = 2;
/// Longest wait for the warm-up event and for one event of `latency`.
const ONE_EVENT_LIMIT: Duration = Duration::from_secs(30);
/// The quiet moment before the window, over which idle CPU is measured.
const IDLE_SAMPLE: Duration = Duration::from_secs(2);

/// Issue 48's rates: what the fleet must sustain, not only burst, once a
/// delivery costs fewer bytes (earlier issues asked 3,000 and 8,000).
const GOAL_ONE_RATE: f64 = 5_000.0;
const GOAL_ONE_CPU_US: f64 = 600.0;
const GOAL_FANOUT_RATE: f64 = 12_000.0;
const GOAL_PACED_CPU_US: f64 = 1_500.0;
const GOAL_FAULTS_P99_MS: f64 = 6_000.0;
/// Issue 48's bytes per delivery, WAL and growth before vacuum: a third of
/// the WAL measured when it was filed (6,104 and 5,388 B), and about what
/// Svix stores per message with its attempt.
const GOAL_ONE_BYTES: (f64, f64) = (2_035.0, 1_500.0);
const GOAL_FANOUT_BYTES: (f64, f64) = (1_796.0, 1_000.0);

// ------------------------------------------------------------------ config

struct Config {
    cases: Vec<String>,
    events: usize,
    fanout_events: usize,
    latency_events: usize,
    paced_rate: u64,
    paced_seconds: u64,
    fault_events: usize,
    backlog_events: usize,
    window: usize,
    limit: Duration,
    retention: Option<Retention>,
    /// `BENCH_ANALYZE_SECONDS`: the period of the `ANALYZE` during a case.
    analyze_every: Duration,
}

/// `BENCH_RETENTION`: the service runs with a short `retention.deliveries`
/// so that the sweep deletes during the case.
struct Retention {
    /// `BILLING_RETENTION__DELIVERIES`.
    deliveries: String,
    /// `BILLING_RETENTION__SWEEP_EVERY`.
    sweep_every: String,
}

/// `BENCH_RETENTION` unset, empty, `0` or `off`: no retention (the
/// service's 30 days); `1` or `on`: `retention.deliveries` = 2 s; any other
/// value is passed as the duration. `BENCH_SWEEP_EVERY` (default `1s`) is
/// `retention.sweep_every` then.
fn retention_setting() -> Option<Retention> {
    let v = std::env::var("BENCH_RETENTION").unwrap_or_default();
    let deliveries = match v.trim() {
        "" | "0" | "off" => return None,
        "1" | "on" => "2s".to_owned(),
        d => d.to_owned(),
    };
    let sweep_every = std::env::var("BENCH_SWEEP_EVERY")
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "1s".to_owned());
    Some(Retention {
        deliveries,
        sweep_every,
    })
}

const ALL_CASES: [&str; 6] = ["one", "fanout", "latency", "paced", "faults", "backlog"];

fn config() -> Result<Config, String> {
    let cases: Vec<String> = std::env::var("BENCH_CASES")
        .unwrap_or_else(|_| ALL_CASES.join(","))
        .split(',')
        .map(|c| c.trim().to_owned())
        .filter(|c| !c.is_empty())
        .collect();
    if let Some(bad) = cases.iter().find(|c| !ALL_CASES.contains(&c.as_str())) {
        return Err(format!(
            "BENCH_CASES: unknown case {bad:?} (known: {})",
            ALL_CASES.join(", ")
        ));
    }
    Ok(Config {
        cases,
        events: env_num("BENCH_EVENTS", 10_000)?,
        fanout_events: env_num("BENCH_FANOUT_EVENTS", 2_000)?,
        latency_events: env_num("BENCH_LATENCY_EVENTS", 500)?,
        paced_rate: env_num("BENCH_PACED_RATE", 100)?,
        paced_seconds: env_num("BENCH_PACED_SECONDS", 20)?,
        fault_events: env_num("BENCH_FAULT_EVENTS", 2_000)?,
        backlog_events: env_num("BENCH_BACKLOG_EVENTS", 4_000)?,
        window: env_num("BENCH_CONFIRM_WINDOW", 1_000)?,
        limit: Duration::from_secs(env_num("BENCH_CASE_LIMIT", 120)?),
        retention: retention_setting(),
        analyze_every: Duration::from_secs(env_num("BENCH_ANALYZE_SECONDS", ANALYZE_EVERY)?),
    })
}

/// How events are published.
#[derive(Clone, Copy)]
enum Pace {
    /// As fast as the confirms allow, this many outstanding.
    Window(usize),
    /// One event at a time, each waited for until received.
    OneInFlight,
    /// Events per second.
    Rate(u64),
}

struct Case {
    name: &'static str,
    endpoints: usize,
    events: usize,
    pace: Pace,
    /// Probability that the receiver answers 500.
    fail_p: f64,
    retry_schedule: Option<&'static str>,
    /// The receiver holds every request until the store has all of the
    /// case's deliveries; the window starts when it lets them go.
    held: bool,
}

fn cases(cfg: &Config) -> Vec<Case> {
    let all = [
        Case {
            name: "one",
            endpoints: 1,
            events: cfg.events,
            pace: Pace::Window(cfg.window),
            fail_p: 0.0,
            retry_schedule: None,
            held: false,
        },
        Case {
            name: "fanout",
            endpoints: FANOUT_ENDPOINTS,
            events: cfg.fanout_events,
            pace: Pace::Window(cfg.window),
            fail_p: 0.0,
            retry_schedule: None,
            held: false,
        },
        Case {
            name: "latency",
            endpoints: 1,
            events: cfg.latency_events,
            pace: Pace::OneInFlight,
            fail_p: 0.0,
            retry_schedule: None,
            held: false,
        },
        Case {
            name: "paced",
            endpoints: 1,
            events: (cfg.paced_rate * cfg.paced_seconds) as usize,
            pace: Pace::Rate(cfg.paced_rate),
            fail_p: 0.0,
            retry_schedule: None,
            held: false,
        },
        Case {
            name: "faults",
            endpoints: 1,
            events: cfg.fault_events,
            pace: Pace::Window(cfg.window),
            fail_p: FAULT_RATE,
            retry_schedule: Some(FAULT_SCHEDULE),
            held: false,
        },
        Case {
            name: "backlog",
            endpoints: BACKLOG_ENDPOINTS,
            events: cfg.backlog_events,
            pace: Pace::Window(cfg.window),
            fail_p: 0.0,
            retry_schedule: None,
            held: true,
        },
    ];
    all.into_iter()
        .filter(|c| cfg.cases.iter().any(|n| n == c.name))
        .collect()
}

// ------------------------------------------------------------------ sink

/// The receiver of every endpoint of a case (`/hook/{i}`).
struct Sink {
    fail_p: f64,
    /// Whether counted requests are answered; until then they wait.
    open: watch::Sender<bool>,
    /// First successful receipt of each (event, endpoint).
    first_ok: Mutex<HashMap<(String, u16), Instant>>,
    /// Distinct successful receipts so far.
    ok: watch::Sender<usize>,
    /// Events answered 204 without being counted (the warm-up).
    ignored: Mutex<std::collections::HashSet<String>>,
    requests: AtomicU64,
    refused: AtomicU64,
    repeats: AtomicU64,
    unreadable: AtomicU64,
}

#[derive(serde::Deserialize)]
struct DeliveredRef {
    event_ref: String,
}

async fn hook(State(sink): State<Arc<Sink>>, Path(i): Path<u16>, body: Bytes) -> StatusCode {
    let at = Instant::now();
    sink.requests.fetch_add(1, Ordering::Relaxed);
    let Ok(delivered) = serde_json::from_slice::<DeliveredRef>(&body) else {
        sink.unreadable.fetch_add(1, Ordering::Relaxed);
        return StatusCode::NO_CONTENT;
    };
    if sink
        .ignored
        .lock()
        .expect("lock")
        .contains(&delivered.event_ref)
    {
        return StatusCode::NO_CONTENT;
    }
    let _ = sink.open.subscribe().wait_for(|open| *open).await;
    if sink.fail_p > 0.0 && rand::random::<f64>() < sink.fail_p {
        sink.refused.fetch_add(1, Ordering::Relaxed);
        return StatusCode::INTERNAL_SERVER_ERROR;
    }
    let new = {
        use std::collections::hash_map::Entry;
        match sink
            .first_ok
            .lock()
            .expect("lock")
            .entry((delivered.event_ref, i))
        {
            Entry::Occupied(_) => false,
            Entry::Vacant(v) => {
                v.insert(at);
                true
            }
        }
    };
    if new {
        sink.ok.send_modify(|n| *n += 1);
    } else {
        sink.repeats.fetch_add(1, Ordering::Relaxed);
    }
    StatusCode::NO_CONTENT
}

impl Sink {
    async fn start(fail_p: f64, held: bool) -> Result<(Arc<Sink>, String), String> {
        let sink = Arc::new(Sink {
            fail_p,
            open: watch::Sender::new(!held),
            first_ok: Mutex::default(),
            ok: watch::Sender::new(0),
            ignored: Mutex::default(),
            requests: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            repeats: AtomicU64::new(0),
            unreadable: AtomicU64::new(0),
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

    fn ok(&self) -> usize {
        *self.ok.borrow()
    }

    /// Waits until `n` distinct successes were received, at most `limit`.
    async fn wait_ok(&self, n: usize, limit: Duration) -> bool {
        let mut rx = self.ok.subscribe();
        tokio::time::timeout(limit, rx.wait_for(|v| *v >= n))
            .await
            .is_ok_and(|r| r.is_ok())
    }
}

// --------------------------------------------------------------- /proc

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

/// `(utime + stime, cutime + cstime)` of a process, in ticks.
fn proc_ticks(pid: &str) -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let f = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Some((f(11) + f(12), f(13) + f(14)))
}

/// The processes measured, as printed.
const GROUPS: [&str; 4] = [
    "billing",
    "postgres (every process)",
    "rabbitmq (beam.smp)",
    "redis-server",
];

/// CPU ticks of each group of `GROUPS`, and of this process.
#[derive(Clone)]
struct CpuSample {
    groups: [u64; 4],
    bench: u64,
    /// Own ticks of the PostgreSQL processes that work for the case: the
    /// backends connected to its database and the background processes
    /// (WAL writer, checkpointer, …), by PID.
    pg_ours: HashMap<u32, u64>,
    /// Client backends of other databases (other work on the server).
    pg_others: usize,
    at: Instant,
}

impl CpuSample {
    /// Ticks of the case's PostgreSQL processes since `before` (a backend
    /// that ended in between is missing).
    fn pg_ours_since(&self, before: &CpuSample) -> u64 {
        self.pg_ours
            .iter()
            .map(|(pid, t)| t.saturating_sub(before.pg_ours.get(pid).copied().unwrap_or(0)))
            .sum()
    }
}

async fn cpu_sample(billing_pid: u32, admin: &mut PgConnection, db: &str) -> CpuSample {
    // Which PostgreSQL processes are the case's: asked first, so the
    // question's own work is not in the sample.
    let activity: Vec<(i32, Option<String>, Option<String>, bool)> = sqlx::query_as(
        "SELECT pid, datname::text, backend_type, pid = pg_backend_pid() FROM pg_stat_activity",
    )
    .fetch_all(admin)
    .await
    .unwrap_or_default();
    let mut ours = Vec::new();
    let mut pg_others = 0;
    for (pid, datname, backend_type, me) in activity {
        match datname.as_deref() {
            Some(d) if d == db => ours.push(pid as u32),
            None if backend_type.as_deref() != Some("client backend") => ours.push(pid as u32),
            Some(_) if !me && backend_type.as_deref() == Some("client backend") => pg_others += 1,
            _ => {}
        }
    }
    let pg_ours = ours
        .into_iter()
        .filter_map(|pid| proc_ticks(&pid.to_string()).map(|(own, _)| (pid, own)))
        .collect();
    let mut groups = [0u64; 4];
    groups[0] = proc_ticks(&billing_pid.to_string()).map_or(0, |(own, _)| own);
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for entry in dir.flatten() {
            let pid = entry.file_name();
            let pid = pid.to_string_lossy();
            if !pid.bytes().all(|b| b.is_ascii_digit()) {
                continue;
            }
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            let group = match comm.trim() {
                "postgres" => 1,
                "beam.smp" => 2,
                "redis-server" => 3,
                _ => continue,
            };
            if let Some((own, children)) = proc_ticks(&pid) {
                groups[group] += own + children;
            }
        }
    }
    CpuSample {
        groups,
        bench: proc_ticks("self").map_or(0, |(own, _)| own),
        pg_ours,
        pg_others,
        at: Instant::now(),
    }
}

/// `VmHWM` of a process, in MiB.
fn peak_rss_mb(pid: u32) -> Option<f64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
}

// ------------------------------------------------------------- PostgreSQL

const PG_FIELDS: [&str; 7] = [
    "transactions",
    "tup_inserted",
    "tup_updated",
    "tup_deleted",
    "tup_fetched",
    "tup_returned",
    "blocks (hit + read)",
];

async fn pg_stats(conn: &mut PgConnection, db: &str) -> Result<[i64; 7], String> {
    let row: (i64, i64, i64, i64, i64, i64, i64) = sqlx::query_as(
        "SELECT xact_commit, tup_inserted, tup_updated, tup_deleted, tup_fetched, tup_returned, \
         blks_hit + blks_read FROM pg_stat_database WHERE datname = $1",
    )
    .bind(db)
    .fetch_one(conn)
    .await
    .map_err(|e| format!("pg_stat_database: {e}"))?;
    Ok([row.0, row.1, row.2, row.3, row.4, row.5, row.6])
}

/// Deliveries by status in the case's database.
async fn delivery_statuses(db: &str) -> Result<Vec<(String, i64)>, String> {
    let mut conn = PgConnection::connect(&pg_url_for(db))
        .await
        .map_err(|e| e.to_string())?;
    let rows = sqlx::query_as(
        "SELECT status, count(*) FROM webhook_deliveries GROUP BY status ORDER BY status",
    )
    .fetch_all(&mut conn)
    .await
    .map_err(|e| e.to_string());
    let _ = conn.close().await;
    rows
}

async fn failed_deliveries(conn: &mut PgConnection) -> Result<usize, String> {
    let n: i64 =
        sqlx::query_scalar("SELECT count(*) FROM webhook_deliveries WHERE status = 'failed'")
            .fetch_one(conn)
            .await
            .map_err(|e| e.to_string())?;
    Ok(n as usize)
}

// ------------------------------------------------------------------ bytes

/// The relations of the case's database whose size is measured, each with
/// its label: every table (`relkind` `r`) and index (`i`) of the public
/// schema under its own name, and the TOAST table of each table with its
/// index as `<table> (TOAST)`. `node` is the relation's file node, by which
/// WAL records name it.
const RELATIONS: &str = "\
    SELECT c.relname::text AS label, c.oid AS rel, pg_relation_filenode(c.oid) AS node \
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
     WHERE n.nspname = 'public' AND c.relkind IN ('r', 'i') \
    UNION ALL \
    SELECT c.relname || ' (TOAST)', x.oid, pg_relation_filenode(x.oid) \
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
      JOIN pg_class x ON x.oid = c.reltoastrelid \
        OR x.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = c.reltoastrelid) \
     WHERE n.nspname = 'public' AND c.relkind = 'r'";

/// The row counters of `pg_stat_user_tables`, as printed.
const ROW_FIELDS: [&str; 4] = ["inserted", "updated", "HOT", "deleted"];

/// What the case's database holds and has written, at one moment.
struct StoreBytes {
    /// `pg_current_wal_lsn()` (cluster-wide).
    lsn: String,
    /// `pg_database_size(current_database())`.
    db_size: i64,
    /// `pg_relation_size` (main fork) of each label of `RELATIONS`.
    rels: HashMap<String, i64>,
}

async fn store_bytes(conn: &mut PgConnection) -> Result<StoreBytes, String> {
    let (lsn, db_size): (String, i64) =
        sqlx::query_as("SELECT pg_current_wal_lsn()::text, pg_database_size(current_database())")
            .fetch_one(&mut *conn)
            .await
            .map_err(|e| format!("WAL position and database size: {e}"))?;
    let rels: Vec<(String, i64)> = sqlx::query_as(&format!(
        "SELECT label, sum(pg_relation_size(rel))::bigint FROM ({RELATIONS}) r GROUP BY label"
    ))
    .fetch_all(&mut *conn)
    .await
    .map_err(|e| format!("relation sizes: {e}"))?;
    Ok(StoreBytes {
        lsn,
        db_size,
        rels: rels.into_iter().collect(),
    })
}

/// `n_tup_ins`, `n_tup_upd`, `n_tup_hot_upd`, `n_tup_del` of each table of
/// the public schema.
async fn table_rows(conn: &mut PgConnection) -> Result<HashMap<String, [i64; 4]>, String> {
    let _ = conn.execute("SELECT pg_stat_clear_snapshot()").await;
    let rows: Vec<(String, i64, i64, i64, i64)> = sqlx::query_as(
        "SELECT relname::text, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del \
           FROM pg_stat_user_tables WHERE schemaname = 'public'",
    )
    .fetch_all(conn)
    .await
    .map_err(|e| format!("pg_stat_user_tables: {e}"))?;
    Ok(rows
        .into_iter()
        .map(|(t, a, b, c, d)| (t, [a, b, c, d]))
        .collect())
}

/// A backend that went idle less than a second after it last reported its
/// statistics reports the rest only after PostgreSQL's idle interval (10 s
/// in PostgreSQL 15): the counters are read until they have not moved for
/// `ROWS_QUIET`, at most `ROWS_LIMIT`.
const ROWS_QUIET: Duration = Duration::from_millis(10_500);
const ROWS_LIMIT: Duration = Duration::from_secs(40);

/// The table counters once they stopped moving, and whether they did.
async fn settled_table_rows(
    conn: &mut PgConnection,
) -> Result<(HashMap<String, [i64; 4]>, bool), String> {
    let started = Instant::now();
    let mut last = table_rows(conn).await?;
    let mut since = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = table_rows(conn).await?;
        if now != last {
            last = now;
            since = Instant::now();
        } else if since.elapsed() >= ROWS_QUIET {
            return Ok((last, true));
        }
        if started.elapsed() >= ROWS_LIMIT {
            return Ok((last, false));
        }
    }
}

/// Deliveries not yet settled in the store (`pending` or `held`).
/// Waits until the store holds every delivery of a `held` case (and the
/// warm-up's), at most `limit`; how long that took, and how many requests
/// the receiver holds by then.
async fn hold_until_written(
    conn: &mut PgConnection,
    sink: &Sink,
    case: &Case,
    limit: Duration,
) -> Result<(Duration, u64), String> {
    let started = Instant::now();
    let all = ((case.events + 1) * case.endpoints) as i64;
    loop {
        let written: i64 = sqlx::query_scalar("SELECT count(*) FROM webhook_deliveries")
            .fetch_one(&mut *conn)
            .await
            .map_err(|e| format!("written deliveries: {e}"))?;
        if written >= all {
            break;
        }
        if started.elapsed() > limit {
            return Err(format!(
                "{written} of {all} deliveries written {} s after the last publish",
                limit.as_secs()
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // What found no room is indexed in the schedule just after its write.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let held = sink.requests.load(Ordering::Relaxed) - case.endpoints as u64;
    Ok((started.elapsed(), held))
}

async fn unsettled_deliveries(conn: &mut PgConnection) -> Result<i64, String> {
    sqlx::query_scalar(
        "SELECT count(*) FROM webhook_deliveries WHERE status NOT IN ('succeeded', 'failed')",
    )
    .fetch_one(conn)
    .await
    .map_err(|e| format!("unsettled deliveries: {e}"))
}

/// WAL between two positions by relation (`pg_walinspect`): each record
/// counted whole for the relation of its first block reference; `(label,
/// bytes, full-page-image bytes, records)`. Records without a block
/// (commits, …) by resource manager; relations of other databases (or
/// shared catalogues) together; this database's catalogues (the periodic
/// `ANALYZE`'s statistics, …) together.
async fn wal_by_relation(
    conn: &mut PgConnection,
    from: &str,
    to: &str,
) -> Result<Vec<(String, i64, i64, i64)>, String> {
    sqlx::query_as(&format!(
        "WITH recs AS ( \
           SELECT record_length, fpi_length, resource_manager, \
                  regexp_match(block_ref, 'rel \\d+/(\\d+)/(\\d+)') AS m \
             FROM pg_get_wal_records_info($1::pg_lsn, $2::pg_lsn)), \
         me AS (SELECT oid FROM pg_database WHERE datname = current_database()), \
         labels AS (SELECT label, node FROM ({RELATIONS}) r) \
         SELECT CASE WHEN m IS NULL THEN '(no block: ' || resource_manager || ')' \
                     WHEN m[1]::oid <> (SELECT oid FROM me) \
                       THEN '(other databases, shared catalogues)' \
                     ELSE coalesce(l.label, '(catalogues of this database)') END, \
                sum(record_length)::bigint, sum(fpi_length)::bigint, count(*) \
           FROM recs LEFT JOIN labels l \
             ON m IS NOT NULL AND m[1]::oid = (SELECT oid FROM me) AND l.node = m[2]::oid \
          GROUP BY 1"
    ))
    .bind(from)
    .bind(to)
    .fetch_all(conn)
    .await
    .map_err(|e| format!("pg_get_wal_records_info: {e}"))
}

/// `pg_wal_lsn_diff(to, from)`.
async fn wal_diff(conn: &mut PgConnection, from: &str, to: &str) -> Result<i64, String> {
    sqlx::query_scalar("SELECT pg_wal_lsn_diff($2::pg_lsn, $1::pg_lsn)::bigint")
        .bind(from)
        .bind(to)
        .fetch_one(conn)
        .await
        .map_err(|e| format!("pg_wal_lsn_diff: {e}"))
}

/// The bytes figures of a case, for the final table.
#[derive(Clone, Copy, Default)]
struct Headline {
    wal: f64,
    growth: f64,
    inserted: f64,
    updated: f64,
}

/// A figure per delivery, `1,234` (or `12.3` under 100).
fn per_delivery(v: f64) -> String {
    if v.abs() >= 100.0 {
        let s = thousands(v.abs().round() as u64);
        if v < 0.0 {
            format!("-{s}")
        } else {
            s
        }
    } else {
        format!("{v:.1}")
    }
}

/// The lines of the bytes figures: headline, per relation, rows per table.
#[allow(clippy::too_many_arguments)]
fn bytes_lines(
    l: &mut Vec<String>,
    settled: usize,
    before: &StoreBytes,
    after: &StoreBytes,
    wal: i64,
    wal_rels: &Result<Vec<(String, i64, i64, i64)>, String>,
    rows_before: &HashMap<String, [i64; 4]>,
    rows_after: &HashMap<String, [i64; 4]>,
    rows_quiet: bool,
) -> Headline {
    let per = settled.max(1) as f64;
    let growth = (after.db_size - before.db_size) as f64 / per;
    let (mut fpi, mut records) = (0i64, 0i64);
    if let Ok(w) = wal_rels {
        for (_, _, f, n) in w {
            fpi += f;
            records += n;
        }
    }
    l.push(format!(
        "   bytes per delivery ({} deliveries settled in the window):",
        thousands(settled as u64)
    ));
    l.push(format!(
        "     WAL {} B{}; database growth (before vacuum) {} B",
        per_delivery(wal as f64 / per),
        if wal_rels.is_ok() {
            format!(
                " ({} records, full-page images {} B)",
                per_delivery(records as f64 / per),
                per_delivery(fpi as f64 / per)
            )
        } else {
            String::new()
        },
        per_delivery(growth)
    ));
    // Per relation: size growth and WAL.
    let mut rels: HashMap<String, (i64, i64, i64)> = HashMap::new();
    for (label, size) in &after.rels {
        let was = before.rels.get(label).copied().unwrap_or(0);
        rels.entry(label.clone()).or_default().0 = size - was;
    }
    match wal_rels {
        Ok(w) => {
            for (label, bytes, f, _) in w {
                let e = rels.entry(label.clone()).or_default();
                e.1 += bytes;
                e.2 += f;
            }
        }
        Err(e) => l.push(format!("     (WAL by relation unavailable: {e})")),
    }
    let mut rels: Vec<(String, (i64, i64, i64))> = rels
        .into_iter()
        .filter(|(_, (g, w, _))| *g != 0 || *w != 0)
        .collect();
    rels.sort_by(|a, b| (b.1 .0, b.1 .1).cmp(&(a.1 .0, a.1 .1)).then(a.0.cmp(&b.0)));
    l.push(format!(
        "     {:<46} {:>9} {:>9} {:>9}",
        "relation (B per delivery)", "growth", "WAL", "(FPI)"
    ));
    for (label, (g, w, f)) in &rels {
        l.push(format!(
            "     {label:<46} {:>9} {:>9} {:>9}",
            per_delivery(*g as f64 / per),
            per_delivery(*w as f64 / per),
            per_delivery(*f as f64 / per)
        ));
    }
    let unchanged = after.rels.len()
        - rels
            .iter()
            .filter(|r| after.rels.contains_key(&r.0))
            .count();
    l.push(format!(
        "     ({unchanged} relations of the public schema neither grew nor were written)"
    ));
    // Rows per table.
    let mut tables: Vec<(String, [f64; 4])> = rows_after
        .iter()
        .map(|(t, now)| {
            let was = rows_before.get(t).copied().unwrap_or_default();
            let d: [f64; 4] = std::array::from_fn(|i| (now[i] - was[i]) as f64 / per);
            (t.clone(), d)
        })
        .filter(|(_, d)| d.iter().any(|v| *v != 0.0))
        .collect();
    tables.sort_by(|a, b| {
        (b.1[0] + b.1[1] + b.1[3])
            .total_cmp(&(a.1[0] + a.1[1] + a.1[3]))
            .then(a.0.cmp(&b.0))
    });
    let mut total = [0f64; 4];
    for (_, d) in &tables {
        for i in 0..4 {
            total[i] += d[i];
        }
    }
    l.push(format!(
        "     {:<46} {:>9} {:>9} {:>9} {:>9}{}",
        "rows per delivery (pg_stat_user_tables)",
        ROW_FIELDS[0],
        ROW_FIELDS[1],
        ROW_FIELDS[2],
        ROW_FIELDS[3],
        if rows_quiet {
            ""
        } else {
            "  (counters still moving when read)"
        }
    ));
    for (t, d) in tables
        .iter()
        .chain(std::iter::once(&("total".to_owned(), total)))
    {
        l.push(format!(
            "     {t:<46} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
            d[0], d[1], d[2], d[3]
        ));
    }
    Headline {
        wal: wal as f64 / per,
        growth,
        inserted: total[0],
        updated: total[1],
    }
}

// ------------------------------------------------------------- publishing

/// What the publisher did: each event's send time.
struct Published {
    at: HashMap<String, Instant>,
    first: Instant,
    /// When the last confirm came.
    done: Instant,
}

/// Publishes `case.events` events at the case's pace; `sent` counts them.
async fn publish_load(
    publisher: &Publisher,
    case: &Case,
    env_ref: &str,
    sink: &Sink,
    sent: &AtomicUsize,
) -> Result<Published, String> {
    let data = domain::webhook::catalogue::example(EVENT_TYPE, 1).unwrap_or_default();
    let mut at = HashMap::with_capacity(case.events);
    let mut inflight = FuturesUnordered::new();
    let mut first = None;
    match case.pace {
        Pace::Window(window) => {
            // Serialised before the clock starts: a producer's work.
            let bodies: Vec<(String, Vec<u8>)> = (0..case.events)
                .map(|_| envelope(env_ref, EVENT_TYPE, &data))
                .collect();
            for (event_ref, body) in bodies {
                while inflight.len() >= window {
                    if let Some(c) = inflight.next().await {
                        confirmed(c)?;
                    }
                }
                let t = Instant::now();
                first.get_or_insert(t);
                inflight.push(publisher.publish(EVENT_TYPE, &body).await?);
                at.insert(event_ref, t);
                sent.fetch_add(1, Ordering::Relaxed);
            }
        }
        Pace::OneInFlight => {
            for i in 0..case.events {
                let (event_ref, body) = envelope(env_ref, EVENT_TYPE, &data);
                let t = Instant::now();
                first.get_or_insert(t);
                let confirm = publisher.publish(EVENT_TYPE, &body).await?;
                at.insert(event_ref, t);
                sent.fetch_add(1, Ordering::Relaxed);
                let target = (i + 1) * case.endpoints;
                let (c, received) = tokio::join!(confirm, sink.wait_ok(target, ONE_EVENT_LIMIT));
                confirmed(c)?;
                if !received {
                    return Err(format!(
                        "event {} of {} not received within {} s",
                        i + 1,
                        case.events,
                        ONE_EVENT_LIMIT.as_secs()
                    ));
                }
            }
        }
        Pace::Rate(per_sec) => {
            let mut tick = tokio::time::interval(Duration::from_nanos(1_000_000_000 / per_sec));
            for _ in 0..case.events {
                tick.tick().await;
                let (event_ref, body) = envelope(env_ref, EVENT_TYPE, &data);
                let t = Instant::now();
                first.get_or_insert(t);
                inflight.push(publisher.publish(EVENT_TYPE, &body).await?);
                at.insert(event_ref, t);
                sent.fetch_add(1, Ordering::Relaxed);
                while let Some(Some(c)) = inflight.next().now_or_never() {
                    confirmed(c)?;
                }
            }
        }
    }
    while let Some(c) = inflight.next().await {
        confirmed(c)?;
    }
    let done = Instant::now();
    Ok(Published {
        at,
        first: first.unwrap_or(done),
        done,
    })
}

// ---------------------------------------------------------------- a case

struct Report {
    lines: Vec<String>,
    /// `(what, figure, goal, pass)`.
    goals: Vec<(String, String, String, bool)>,
    errors: Vec<String>,
    /// The case's line of the final table.
    headline: Option<Row>,
}

/// A case's line of the final table.
#[derive(Clone, Copy)]
struct Row {
    rate: f64,
    p99: Option<f64>,
    stack_us: f64,
    bytes: Headline,
}

/// Longest wait, after the last receipt, for the store to settle every
/// delivery.
const SETTLE_LIMIT: Duration = Duration::from_secs(30);

/// Client backends connected to other databases than `db` (other work on
/// the server, whose WAL would count in).
async fn other_clients(admin: &mut PgConnection, db: &str) -> usize {
    sqlx::query_scalar::<_, i64>(
        "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' \
           AND datname IS DISTINCT FROM $1 AND pid <> pg_backend_pid()",
    )
    .bind(db)
    .fetch_one(admin)
    .await
    .map_or(0, |n| n as usize)
}

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

fn row(what: &str, value: String) -> String {
    format!("   {what:<34} {value}")
}

async fn run_case(
    bin: &std::path::Path,
    cfg: &Config,
    case: &Case,
    fleet: &mut Fleet,
    ticks: f64,
) -> Result<Report, String> {
    let name = fleet.name.clone();
    let mut admin = pg_admin().await?;

    // Isolation: database, virtual host, Redis database.
    let redis_db = fleet.provision(&mut admin).await?;

    let (sink, hook_base) = Sink::start(case.fail_p, case.held).await?;

    // The service.
    let amqp_url = format!("{AMQP_BASE}/{}", url_encode(&name));
    let (api_port, metrics_port) = (free_port()?, free_port()?);
    let mut key = [0u8; 32];
    rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut key);
    let mut envs: Vec<(String, String)> = [
        ("BILLING_STORE__URL", pg_url_for(&name)),
        ("BILLING_QUEUE__URL", amqp_url.clone()),
        ("BILLING_SCHEDULER__URL", format!("{REDIS_BASE}/{redis_db}")),
        // The run's vhost and Redis database are its own: the queue the
        // publisher waits for keeps its fixed name (stores name theirs
        // after their identity otherwise).
        ("BILLING_QUEUE__NAME", QUEUE.to_owned()),
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
            "BILLING_SECRETS__KEY",
            base64::engine::general_purpose::STANDARD.encode(key),
        ),
        ("BILLING_LOG__LEVEL", "warn".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    if let Some(schedule) = case.retry_schedule {
        envs.push((
            "BILLING_DELIVERY__RETRY_SCHEDULE".to_owned(),
            schedule.to_owned(),
        ));
    }
    if let Some(r) = &cfg.retention {
        envs.push((
            "BILLING_RETENTION__DELIVERIES".to_owned(),
            r.deliveries.clone(),
        ));
        envs.push((
            "BILLING_RETENTION__SWEEP_EVERY".to_owned(),
            r.sweep_every.clone(),
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

    let api = format!("http://127.0.0.1:{api_port}");
    let client = reqwest::Client::new();
    let ready_after = fleet.await_ready(&client, &api, "serve").await?;

    let (secret, env_ref) = bootstrap_sandbox(bin, fleet.dir.path(), &envs).await?;
    let (secret, env_ref) = (secret.as_str(), env_ref.as_str());

    for i in 0..case.endpoints {
        let post = |path: String, body: serde_json::Value| {
            client
                .post(format!("{api}{path}"))
                .bearer_auth(secret)
                .header(
                    "Idempotency-Key",
                    format!("bench-{:016x}", rand::random::<u64>()),
                )
                .json(&body)
                .send()
        };
        let r = post(
            "/api/v1/webhook_endpoints".to_owned(),
            serde_json::json!({"url": format!("{hook_base}/{i}")}),
        )
        .await
        .map_err(|e| format!("create endpoint: {e}"))?;
        let status = r.status();
        let body: serde_json::Value = r.json().await.unwrap_or_default();
        let Some(endpoint) = body["data"]["endpoint_ref"]
            .as_str()
            .filter(|_| status == 201)
        else {
            return Err(format!("create endpoint: {status} {body}"));
        };
        let r = post(
            format!("/api/v1/webhook_endpoints/{endpoint}/subscriptions"),
            serde_json::json!({"public_event_type": EVENT_TYPE, "scope_type": "environment",
                "scope_ref": env_ref, "dto_version": 1}),
        )
        .await
        .map_err(|e| format!("create subscription: {e}"))?;
        if r.status() != 201 {
            let status = r.status();
            return Err(format!(
                "create subscription: {status} {}",
                r.text().await.unwrap_or_default()
            ));
        }
    }

    let publisher = Publisher::connect(&amqp_url, "billing-fleet-bench").await?;

    // Warm-up: one event, not measured, answered 204 by every endpoint.
    let data = domain::webhook::catalogue::example(EVENT_TYPE, 1).unwrap_or_default();
    let (warm_ref, warm_body) = envelope(env_ref, EVENT_TYPE, &data);
    sink.ignored.lock().expect("lock").insert(warm_ref.clone());
    confirmed(publisher.publish(EVENT_TYPE, &warm_body).await?.await)?;
    let warm_started = Instant::now();
    loop {
        let seen = sink.requests.load(Ordering::Relaxed) as usize;
        if seen >= case.endpoints {
            break;
        }
        if warm_started.elapsed() > ONE_EVENT_LIMIT {
            return Err(format!(
                "the warm-up event reached {seen} of {} endpoints within {} s",
                case.endpoints,
                ONE_EVENT_LIMIT.as_secs()
            ));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let warm_up = warm_started.elapsed();
    let warm_requests = sink.requests.load(Ordering::Relaxed);

    // Statistics for the planner, now and every `cfg.analyze_every`.
    let mut case_conn = PgConnection::connect(&pg_url_for(&name))
        .await
        .map_err(|e| format!("PostgreSQL {name}: {e}"))?;
    case_conn
        .execute("ANALYZE")
        .await
        .map_err(|e| format!("ANALYZE: {e}"))?;
    // WAL by relation, if the server has the extension (contrib).
    let walinspect = case_conn
        .execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        .await
        .map_err(|e| e.to_string());
    // Every case's WAL starts after a checkpoint: the first change of each
    // page in the window writes its full image, as after any checkpoint.
    case_conn
        .execute("CHECKPOINT")
        .await
        .map_err(|e| format!("CHECKPOINT: {e}"))?;
    let stop_analyzer = CancellationToken::new();
    let analyzer_task = tokio::spawn(analyzer(
        name.clone(),
        cfg.analyze_every,
        stop_analyzer.clone(),
    ));

    // A quiet moment: the statistics of the setup reach pg_stat_database,
    // and the stack's idle CPU is measured.
    let cpu_idle = cpu_sample(pid, &mut admin, &name).await;
    tokio::time::sleep(IDLE_SAMPLE).await;
    let pg_before = pg_stats(&mut admin, &name).await?;
    let rows_before = table_rows(&mut case_conn).await?;
    let bytes_before = store_bytes(&mut case_conn).await?;

    // The measured window.
    let expected = case.events * case.endpoints;
    let sent = Arc::new(AtomicUsize::new(0));
    let outstanding_peak = Arc::new(AtomicUsize::new(0));
    let stop_sampler = CancellationToken::new();
    let sampler = {
        let (sink, sent, peak, stop) = (
            sink.clone(),
            sent.clone(),
            outstanding_peak.clone(),
            stop_sampler.clone(),
        );
        let endpoints = case.endpoints;
        tokio::spawn(async move {
            while !stop.is_cancelled() {
                let out = (sent.load(Ordering::Relaxed) * endpoints).saturating_sub(sink.ok());
                peak.fetch_max(out, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    println!(
        "   ready after {:.1} s; warm-up delivered in {:.0} ms; publishing {} events ...",
        ready_after.as_secs_f64(),
        warm_up.as_secs_f64() * 1000.0,
        thousands(case.events as u64)
    );
    let cpu_start = cpu_sample(pid, &mut admin, &name).await;
    let published = publish_load(&publisher, case, env_ref, &sink, &sent).await;
    let published = match published {
        Ok(p) => p,
        Err(e) => {
            stop_sampler.cancel();
            stop_analyzer.cancel();
            return Err(e);
        }
    };
    let (cpu_before, released) = if case.held {
        let (written, held) = hold_until_written(&mut case_conn, &sink, case, cfg.limit).await?;
        println!(
            "   all {} deliveries written {:.2} s after the last publish; {} requests held; \
             the receiver answers now",
            thousands(expected as u64),
            written.as_secs_f64(),
            thousands(held)
        );
        let sample = cpu_sample(pid, &mut admin, &name).await;
        let released = Instant::now();
        sink.open.send_replace(true);
        (sample, Some(released))
    } else {
        (cpu_start.clone(), None)
    };
    // The window's start: the first publish, or the receiver's release.
    let start = released.unwrap_or(published.first);

    // Until every delivery succeeded or failed for good.
    let deadline = released.unwrap_or(published.done) + cfg.limit;
    let mut failed = 0usize;
    let mut last_ok = (sink.ok(), Instant::now());
    let complete = loop {
        let ok = sink.ok();
        if ok >= expected {
            break true;
        }
        if ok != last_ok.0 {
            last_ok = (ok, Instant::now());
        }
        // Deliveries that failed for good are only asked for when the
        // receipts have stalled, so as not to load the store meanwhile.
        if case.fail_p > 0.0 && last_ok.1.elapsed() > Duration::from_millis(500) {
            failed = failed_deliveries(&mut case_conn).await?;
            if ok + failed >= expected {
                break true;
            }
            last_ok.1 = Instant::now();
        }
        if Instant::now() > deadline {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    let cpu_after = cpu_sample(pid, &mut admin, &name).await;
    let hwm = peak_rss_mb(pid);
    stop_sampler.cancel();
    stop_analyzer.cancel();
    let _ = sampler.await;
    let analyzes = analyzer_task.await.unwrap_or(0);
    publisher.close().await;

    // Until the store has settled every delivery (its attempts recorded):
    // then the bytes are read.
    let settle_started = Instant::now();
    let mut unsettled = unsettled_deliveries(&mut case_conn).await?;
    while unsettled > 0 && settle_started.elapsed() < SETTLE_LIMIT {
        tokio::time::sleep(Duration::from_millis(20)).await;
        unsettled = unsettled_deliveries(&mut case_conn).await?;
    }
    let settle_wait = settle_started.elapsed();
    let bytes_after = store_bytes(&mut case_conn).await?;
    let wal = wal_diff(&mut case_conn, &bytes_before.lsn, &bytes_after.lsn).await?;
    let others_after = other_clients(&mut admin, &name).await;

    tokio::time::sleep(Duration::from_millis(1500)).await;
    let pg_after = pg_stats(&mut admin, &name).await?;
    let (rows_after, rows_quiet) = settled_table_rows(&mut case_conn).await?;
    let wal_rels = match &walinspect {
        Ok(_) => wal_by_relation(&mut case_conn, &bytes_before.lsn, &bytes_after.lsn).await,
        Err(e) => Err(format!("CREATE EXTENSION pg_walinspect: {e}")),
    };
    let statuses = delivery_statuses(&name).await.unwrap_or_default();
    let _ = case_conn.close().await;
    let _ = admin.close().await;

    // Figures.
    let first_ok = std::mem::take(&mut *sink.first_ok.lock().expect("lock"));
    let mut latencies: Vec<Duration> = Vec::with_capacity(first_ok.len());
    let mut last_receipt = start;
    for ((event_ref, _), at) in &first_ok {
        if let Some(t0) = published.at.get(event_ref) {
            latencies.push(at.saturating_duration_since((*t0).max(start)));
            last_receipt = last_receipt.max(*at);
        }
    }
    latencies.sort_unstable();
    let delivered = latencies.len();
    let window = last_receipt.saturating_duration_since(start);
    let rate = delivered as f64 / window.as_secs_f64().max(1e-9);
    let cpu_wall = cpu_after.at - cpu_before.at;
    let per = delivered.max(1) as f64;
    let us = |t: u64| t as f64 / ticks * 1e6 / per;
    let cores = |t: u64| t as f64 / ticks / cpu_wall.as_secs_f64().max(1e-9);

    let mut report = Report {
        lines: Vec::new(),
        goals: Vec::new(),
        errors: Vec::new(),
        headline: None,
    };
    let l = &mut report.lines;
    l.push(format!(
        "   billing pid {pid}; database and vhost {name}; Redis db {redis_db}; \
         {analyzes} periodic ANALYZE"
    ));
    l.push(row(
        "deliveries succeeded",
        format!(
            "{} of {}{}",
            thousands(delivered as u64),
            thousands(expected as u64),
            if case.fail_p > 0.0 {
                format!(" (+ {failed} failed for good after 4 attempts)")
            } else {
                String::new()
            }
        ),
    ));
    let publish_secs = (published.done - published.first).as_secs_f64();
    l.push(row(
        "published (confirmed)",
        format!(
            "{} events in {:.2} s = {:.0} events/s",
            thousands(published.at.len() as u64),
            publish_secs,
            published.at.len() as f64 / publish_secs.max(1e-9)
        ),
    ));
    l.push(row(
        if case.held {
            "window (release to last receipt)"
        } else {
            "window (first publish to last)"
        },
        format!("{:.2} s", window.as_secs_f64()),
    ));
    l.push(row("delivered/s", format!("{rate:.0}")));
    let p50 = percentile_ms(&latencies, 50.0);
    let p99 = percentile_ms(&latencies, 99.0);
    l.push(row(
        "send-to-receipt p50 / p99 / max",
        format!(
            "{} / {} / {}",
            ms(p50),
            ms(p99),
            ms(latencies.last().map(|d| d.as_secs_f64() * 1000.0))
        ),
    ));
    l.push(format!(
        "   {:<34} {:>10} {:>8} {:>8}",
        format!(
            "CPU per {}",
            if case.endpoints == 1 {
                "delivery (= event)"
            } else {
                "delivery"
            }
        ),
        "us",
        "cores",
        "idle"
    ));
    let idle_wall = (cpu_start.at - cpu_idle.at).as_secs_f64().max(1e-9);
    let mut cpu_row = |label: &str, t: u64, idle: u64| {
        l.push(format!(
            "     {label:<32} {:>10.1} {:>8.2} {:>8.3}",
            us(t),
            cores(t),
            idle as f64 / ticks / idle_wall
        ));
    };
    let (mut total, mut total_idle) = (0u64, 0u64);
    for (g, label) in GROUPS.iter().enumerate() {
        let t = cpu_after.groups[g].saturating_sub(cpu_before.groups[g]);
        let idle = cpu_start.groups[g].saturating_sub(cpu_idle.groups[g]);
        total += t;
        total_idle += idle;
        cpu_row(label, t, idle);
    }
    cpu_row("whole stack", total, total_idle);
    cpu_row(
        "(postgres: this database only)",
        cpu_after.pg_ours_since(&cpu_before),
        cpu_start.pg_ours_since(&cpu_idle),
    );
    cpu_row(
        "(this benchmark: publisher+sink)",
        cpu_after.bench.saturating_sub(cpu_before.bench),
        cpu_start.bench.saturating_sub(cpu_idle.bench),
    );
    let others = cpu_before.pg_others.max(cpu_after.pg_others);
    if others > 0 {
        l.push(format!(
            "     note: {others} client backends of other databases were connected: other work \
             was running, and the machine-wide figures (postgres, rabbitmq, redis) include it"
        ));
    }
    l.push(row(
        "billing peak RSS (VmHWM)",
        hwm.map_or_else(|| "-".to_owned(), |m| format!("{m:.1} MiB")),
    ));
    l.push(format!(
        "   PostgreSQL per delivery (approximate, pg_stat_database of {name}):"
    ));
    l.push(format!(
        "     {}",
        PG_FIELDS
            .iter()
            .enumerate()
            .map(|(i, f)| format!("{f} {:.1}", (pg_after[i] - pg_before[i]) as f64 / per))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    l.push(row(
        "peak outstanding (sent - received)",
        thousands(outstanding_peak.load(Ordering::Relaxed) as u64),
    ));
    let requests = sink.requests.load(Ordering::Relaxed) - warm_requests;
    l.push(row(
        "receiver requests",
        format!(
            "{} ({} answered 500 on purpose, {} repeated successes)",
            thousands(requests),
            thousands(sink.refused.load(Ordering::Relaxed)),
            sink.repeats.load(Ordering::Relaxed)
        ),
    ));
    l.push(row(
        "in the store (with the warm-up)",
        statuses
            .iter()
            .map(|(s, n)| format!("{s} {n}"))
            .collect::<Vec<_>>()
            .join(", "),
    ));

    if unsettled > 0 {
        l.push(format!(
            "   !! {unsettled} deliveries still unsettled in the store {} s after the last \
             receipt: the bytes below miss their last writes",
            SETTLE_LIMIT.as_secs()
        ));
    } else {
        l.push(row(
            "store settled after the last receipt",
            format!("{:.0} ms", settle_wait.as_secs_f64() * 1000.0),
        ));
    }
    let others = others.max(others_after);
    if others > 0 {
        l.push(format!(
            "     note: {others} client backends of other databases were connected: WAL is \
             cluster-wide, so the WAL figure includes their writes (see `other databases`)"
        ));
    }
    let headline = bytes_lines(
        l,
        delivered + failed,
        &bytes_before,
        &bytes_after,
        wal,
        &wal_rels,
        &rows_before,
        &rows_after,
        rows_quiet,
    );
    report.headline = Some(Row {
        rate,
        p99,
        stack_us: us(total),
        bytes: headline,
    });

    let unreadable = sink.unreadable.load(Ordering::Relaxed);
    if unreadable > 0 {
        report.errors.push(format!(
            "{unreadable} delivered bodies without an event_ref"
        ));
    }
    if !complete {
        report.errors.push(format!(
            "incomplete after {} s past the last publish: {} of {} deliveries succeeded, {} \
             still missing; in the store: {}",
            cfg.limit.as_secs(),
            delivered,
            expected,
            expected.saturating_sub(delivered + failed),
            statuses
                .iter()
                .map(|(s, n)| format!("{s} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }

    let stack_us = us(total);
    let bytes = report
        .headline
        .as_ref()
        .map(|r| (r.bytes.wal, r.bytes.growth));
    let g = &mut report.goals;
    let bytes_goal = match case.name {
        "one" => Some(GOAL_ONE_BYTES),
        "fanout" => Some(GOAL_FANOUT_BYTES),
        _ => None,
    };
    if let (Some((wal, growth)), Some((wal_goal, growth_goal))) = (bytes, bytes_goal) {
        g.push((
            "WAL per delivery".into(),
            format!("{} B", per_delivery(wal)),
            format!("<= {} B", per_delivery(wal_goal)),
            complete && wal <= wal_goal,
        ));
        g.push((
            "growth per delivery".into(),
            format!("{} B", per_delivery(growth)),
            format!("<= {} B", per_delivery(growth_goal)),
            complete && growth <= growth_goal,
        ));
    }
    match case.name {
        "one" => {
            g.push((
                "delivered/s".into(),
                format!("{rate:.0}"),
                format!(">= {GOAL_ONE_RATE:.0}"),
                complete && rate >= GOAL_ONE_RATE,
            ));
            g.push((
                "whole-stack CPU per delivery".into(),
                format!("{stack_us:.0} us"),
                format!("<= {GOAL_ONE_CPU_US:.0} us"),
                complete && stack_us <= GOAL_ONE_CPU_US,
            ));
        }
        "fanout" => g.push((
            "delivered/s".into(),
            format!("{rate:.0}"),
            format!(">= {GOAL_FANOUT_RATE:.0}"),
            complete && rate >= GOAL_FANOUT_RATE,
        )),
        "paced" => g.push((
            "whole-stack CPU per event".into(),
            format!("{stack_us:.0} us"),
            format!("<= {GOAL_PACED_CPU_US:.0} us"),
            complete && stack_us <= GOAL_PACED_CPU_US,
        )),
        "faults" => g.push((
            "p99 send-to-first-success".into(),
            ms(p99),
            format!("<= {GOAL_FAULTS_P99_MS:.0} ms"),
            complete && p99.is_some_and(|p| p <= GOAL_FAULTS_P99_MS),
        )),
        _ => {}
    }
    Ok(report)
}

// ------------------------------------------------------------------ main

#[derive(Default)]
struct Summary {
    verdicts: Vec<String>,
    errors: Vec<String>,
    /// Each measured case's line of the final table.
    rows: Vec<(&'static str, Row)>,
}

/// The final table: a line per case, with its bytes per delivery.
fn print_table(cfg: &Config, rows: &[(&'static str, Row)]) {
    if rows.is_empty() {
        return;
    }
    println!();
    println!(
        "per case ({}; bytes and rows per delivery, WAL since a checkpoint at the window's start):",
        match &cfg.retention {
            Some(r) => format!(
                "retention.deliveries {}, sweep every {}",
                r.deliveries, r.sweep_every
            ),
            None => "no retention".to_owned(),
        }
    );
    println!(
        "  {:<8} {:>11} {:>9} {:>12} {:>10} {:>12} {:>9} {:>9}",
        "case", "delivered/s", "p99", "CPU us/dlv", "WAL B", "growth B", "rows ins", "rows upd"
    );
    for (name, r) in rows {
        println!(
            "  {name:<8} {:>11.0} {:>9} {:>12.0} {:>10} {:>12} {:>9.2} {:>9.2}",
            r.rate,
            ms(r.p99),
            r.stack_us,
            per_delivery(r.bytes.wal),
            per_delivery(r.bytes.growth),
            r.bytes.inserted,
            r.bytes.updated
        );
    }
}

async fn case(bin: &std::path::Path, cfg: &Config, case: &Case, summary: &mut Summary, ticks: f64) {
    println!();
    let pace = match case.pace {
        Pace::Window(w) => format!("as fast as confirms allow ({w} outstanding)"),
        Pace::OneInFlight => "one in flight".to_owned(),
        Pace::Rate(r) => format!("{r} events/s"),
    };
    println!(
        "== {}: {} endpoint{}, {} events, {pace}{}{}",
        case.name,
        case.endpoints,
        if case.endpoints == 1 { "" } else { "s" },
        thousands(case.events as u64),
        if case.fail_p > 0.0 {
            format!(
                ", receiver answers 500 to {:.0} % at random",
                case.fail_p * 100.0
            )
        } else {
            String::new()
        },
        case.retry_schedule
            .map(|s| format!(", retry schedule {s}"))
            .unwrap_or_default()
            + &cfg
                .retention
                .as_ref()
                .map(|r| format!(
                    ", retention.deliveries {} (sweep every {})",
                    r.deliveries, r.sweep_every
                ))
                .unwrap_or_default()
    );
    let mut fleet = match Fleet::new(NAME_PREFIX) {
        Ok(f) => f,
        Err(e) => {
            summary.errors.push(format!("{}: {e}", case.name));
            println!("   !! {e}");
            return;
        }
    };
    let outcome = run_case(bin, cfg, case, &mut fleet, ticks).await;
    let pid = fleet.child_pid();
    let exit = tokio::task::block_in_place(|| fleet.stop_child());
    let (lines, tail) = fleet.stderr_tail(20);
    let mut failed = false;
    match outcome {
        Ok(report) => {
            if let Some(r) = report.headline {
                summary.rows.push((case.name, r));
            }
            for l in &report.lines {
                println!("{l}");
            }
            for (what, figure, goal, pass) in &report.goals {
                let line = format!(
                    "{:<4} {}: {what}: {figure} (goal {goal})",
                    if *pass { "PASS" } else { "MISS" },
                    case.name
                );
                println!("   -> {line}");
                summary.verdicts.push(line);
            }
            for e in report.errors {
                println!("   !! {e}");
                summary.errors.push(format!("{}: {e}", case.name));
                failed = true;
            }
        }
        Err(e) => {
            println!("   !! {e}");
            summary.errors.push(format!("{}: {e}", case.name));
            failed = true;
        }
    }
    if let (Some(pid), Some(status)) = (pid, exit) {
        if !status.success() {
            println!("   !! billing (pid {pid}) exited with {status} after SIGTERM");
        }
    }
    if lines > 0 {
        println!("   billing's standard error: {lines} lines; the last ones:");
        for l in tail {
            println!("     | {l}");
        }
    } else if failed {
        println!("   billing's standard error: empty");
    }
    tokio::task::block_in_place(|| drop(fleet));
    let _ = std::io::stdout().flush();
}

async fn bench(cfg: Config, bin: PathBuf) -> ExitCode {
    let ticks = clock_ticks();
    println!(
        "fleet benchmark: {} (billing serve over PostgreSQL, RabbitMQ, Redis on 127.0.0.1); \
         {} cores, CLK_TCK {ticks}",
        bin.display(),
        std::thread::available_parallelism().map_or(0, |p| p.get())
    );
    remove_leftovers(NAME_PREFIX).await;
    let mut summary = Summary::default();
    for c in cases(&cfg) {
        case(&bin, &cfg, &c, &mut summary, ticks).await;
    }
    print_table(&cfg, &summary.rows);
    if CLEANUP_FAILED.load(Ordering::SeqCst) {
        summary.errors.push("cleanup failed (see above)".to_owned());
    }
    billing_tests::bench_summary(&summary.verdicts, &summary.errors)
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
