//! Benchmark of receiver protection (contract 13.2) in fleet mode: whether
//! an endpoint's `rate_limit` holds across a fleet of dispatchers while
//! they still deliver at that rate, whether waiting for room is kept out of
//! the attempts, and what a backlog held back by a limit costs the
//! dispatcher in memory. Measured end to end from outside, as `ordering.rs`
//! measures: events go in through RabbitMQ, deliveries come out as HTTP
//! requests to a local receiver.
//!
//! The release binary is built first (`cargo build --release -p billing`;
//! `BENCH_BILLING_BIN` names another binary instead). Every run starts from
//! nothing, on resources of its own (`support/fleet_run.rs`): a PostgreSQL
//! database and a RabbitMQ virtual host named `billing_limits_<pid>_<hex>`
//! (guest given every permission on it), an empty Redis logical database
//! among 1..15 with the same name as key prefix
//! (`BILLING_SCHEDULER__KEY_PREFIX`), all released at the end, passed or
//! failed; leftovers of runs whose process is gone are removed at start.
//! Its stack is real processes of the binary: one `billing api` (started
//! first: it migrates, and `GET /readyz` is awaited) and N `billing
//! dispatcher`s (awaited until each consumes the queue, as `rabbitmqctl
//! list_queues` shows), with private destinations allowed,
//! `BILLING_LOG__LEVEL=warn`, a fresh secret key, a metrics port each and
//! the queue's fixed name (`BILLING_QUEUE__NAME`); the retry schedule is
//! the service's default (the receiver never refuses). `billing admin
//! bootstrap --json` gives the sandbox credential; endpoints are created
//! through the API (`POST /api/v1/webhook_endpoints` with `rate_limit`,
//! checked in the answer) and subscribed to `order.created` in the
//! environment. The database is `ANALYZE`d, and again every 2 s while the
//! run lasts (this machine's PostgreSQL runs without autovacuum). One
//! warm-up event (not measured) opens the service's connections.
//!
//! Events are published with lapin on the run's virtual host to
//! `billing.events` (routing key `order.created`, persistent, mandatory,
//! publisher confirms, `LIMITS_CONFIRM_WINDOW` outstanding, default 1,000)
//! from one channel, as fast as the confirms allow. The receiver (axum on
//! 127.0.0.1, in this process) answers every request 204 and records its
//! arrival time (an `Instant`, taken first thing) and the body's
//! `event_ref`; `/hook/limited` is the limited endpoint's URL,
//! `/hook/paused` the paused one's (it should never be called).
//!
//! Cases (`LIMITS_CASES`, comma-separated, default both):
//!
//! - `rate`: **the limit, fleet wide.** `LIMITS_DISPATCHERS` dispatchers
//!   (default 3), one endpoint with `rate_limit` = `LIMITS_RATE` (default
//!   200), `LIMITS_EVENTS` events (default 2,000). Figures: elapsed from the
//!   first publish to the last event's first arrival, deliveries/s, the
//!   arrivals of each second since the first arrival (calendar seconds:
//!   floor((t - first) / 1 s)) and their most, the most arrivals in any
//!   sliding 1-s window, requests against distinct events (duplicates), the
//!   endpoint's health (`effective_rate`, `throttled_until`) sampled every
//!   second, and the attempts in the store (the rows of `webhook_attempts`
//!   with the successes kept on the rows of `webhook_deliveries`, and
//!   `sum(attempt_count)` of `webhook_deliveries`, read once no delivery
//!   is pending). Goals (the issue's): no second above `rate × 1.1` (220
//!   by default), neither a calendar second nor a sliding window; all
//!   events delivered within `events / rate × 1.25` (12.5 s by default:
//!   not far below the limit). A contract check too: waiting is not an
//!   attempt, so both attempt counts equal the requests the receiver got
//!   (the warm-up's included).
//! - `memory`: **the cost of a backlog.** The same layout with one
//!   dispatcher; one endpoint with `rate_limit` 1 (so almost nothing is
//!   delivered) and a second one without a limit, paused
//!   (`POST …/pause` with its ETag in `If-Match`); both subscribed. The
//!   dispatcher's RSS (`VmRSS` of `/proc/<pid>/status`) is sampled every
//!   second from the warm-up on; `LIMITS_SETTLE` seconds after the
//!   warm-up (default 5) its RSS is taken ("after the warm-up"). Then a
//!   burst: `LIMITS_BURST` events (default 100,000, as many as the
//!   backlog; 0 for none) of `invoice.paid`, which neither endpoint takes,
//!   to two unlimited endpoints of their own, all delivered, and
//!   `LIMITS_SETTLE` seconds more: its RSS then is the baseline, a
//!   dispatcher that has already taken that many events (its buffers,
//!   pools and allocator at their working size), so that the increase
//!   measures the backlog and not the first intake of a fresh process.
//!   Then `LIMITS_BACKLOG` events (default 100,000) are published; the run
//!   waits until the store holds every delivery (`count(*)` of
//!   `webhook_deliveries` = 2 × the events, the warm-up's included, plus
//!   the burst's), then `LIMITS_HOLD` seconds more (default 30) with the
//!   limited endpoint's backlog due. Figures: the publish time, the time
//!   until the store held every delivery, RSS after the warm-up and before
//!   the backlog, the most sampled from the first publish on (and the
//!   kernel's `VmHWM`), at the end, the increase (most - before; also over
//!   the warm-up's RSS, the burst's cost included), the requests each
//!   endpoint got (and the limited one's pace once the store held
//!   everything: requests a second, gaps between them), the limited
//!   endpoint's pending deliveries at the end (due now, due later, leased)
//!   and the attempts in the store. Goal: an increase under 20 MB.
//!
//! A verdict that fails (FAIL) makes the binary fail, as does something
//! gone wrong (`bench_summary`): a setup step, an unconfirmed publish, a
//! run that did not complete, a process that exited, a cleanup. Each
//! process's standard error's last lines are printed at the end of a run.
//! Other settings: `LIMITS_LIMIT` (longest wait, in seconds, for the
//! deliveries (`rate`) or the store's intake (`memory`) after the last
//! publish, default 600); `BILLING_TEST_PG_URL` (the PostgreSQL server's
//! admin URL, default `postgres://postgres@127.0.0.1:5432/postgres`);
//! RabbitMQ (guest/guest) and Redis are expected on 127.0.0.1:5672 and
//! :6379, with `rabbitmqctl` on the `PATH`.
//!
//! Run with `cargo bench -p billing-tests --bench limits`; a quick run:
//! `LIMITS_EVENTS=600 LIMITS_BACKLOG=10000 LIMITS_HOLD=10 cargo bench -p
//! billing-tests --bench limits`.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "support/fleet_run.rs"]
mod fleet_run;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::serve::ListenerExt;
use base64::Engine as _;
use billing_tests::{bench_summary, env_num};
use fleet_run::{
    analyzer, bootstrap_sandbox, build_billing, confirmed, consumers, envelope, free_port,
    pg_admin, pg_url_for, remove_leftovers, spawn_billing, url_encode, Dispatchers, Fleet,
    Publisher, AMQP_BASE, CLEANUP_FAILED, QUEUE, READY_LIMIT, REDIS_BASE,
};
use futures::stream::FuturesUnordered;
use futures::StreamExt;
use serde_json::{json, Value};
use sqlx::{Connection, Executor, PgConnection};
use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitCode};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Prefix of each run's database, virtual host and Redis key prefix.
const NAME_PREFIX: &str = "billing_limits_";
const EVENT_TYPE: &str = "order.created";
/// The event type of the `memory` case's burst, which neither the limited
/// nor the paused endpoint takes.
const BURST_TYPE: &str = "invoice.paid";
/// How often the benchmark runs `ANALYZE` during a run (as `fleet.rs`).
const ANALYZE_EVERY: Duration = Duration::from_secs(2);
/// Longest wait for the warm-up event.
const WARM_UP_LIMIT: Duration = Duration::from_secs(30);
/// Longest wait, once every event arrived, for the store to hold no
/// pending delivery (the attempts' results recorded).
const SETTLE_LIMIT: Duration = Duration::from_secs(60);
/// Goal of `rate`: no second above the limit times this.
const GOAL_SECOND_FACTOR: f64 = 1.1;
/// Goal of `rate`: every event delivered within `events / rate` times this.
const GOAL_ELAPSED_FACTOR: f64 = 1.25;
/// The `memory` case's limited endpoint's `rate_limit`.
const MEMORY_RATE: u32 = 1;
/// Goal of `memory`: the dispatcher's RSS grows less than this, in bytes.
const GOAL_RSS_INCREASE: u64 = 20 * 1024 * 1024;
/// How often the `memory` case prints its progress.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

// ------------------------------------------------------------------ config

struct Config {
    cases: Vec<String>,
    dispatchers: usize,
    rate: u32,
    events: usize,
    backlog: usize,
    burst: usize,
    settle: Duration,
    hold: Duration,
    window: usize,
    limit: Duration,
}

const ALL_CASES: [&str; 2] = ["rate", "memory"];

fn config() -> Result<Config, String> {
    let cases: Vec<String> = std::env::var("LIMITS_CASES")
        .unwrap_or_else(|_| ALL_CASES.join(","))
        .split(',')
        .map(|c| c.trim().to_owned())
        .filter(|c| !c.is_empty())
        .collect();
    if let Some(bad) = cases.iter().find(|c| !ALL_CASES.contains(&c.as_str())) {
        return Err(format!(
            "LIMITS_CASES: unknown case {bad:?} (known: {})",
            ALL_CASES.join(", ")
        ));
    }
    let rate: u32 = env_num("LIMITS_RATE", 200)?;
    if rate > 10_000 {
        return Err(format!("LIMITS_RATE must be 1 to 10,000, got {rate}"));
    }
    Ok(Config {
        cases,
        dispatchers: env_num("LIMITS_DISPATCHERS", 3)?,
        rate,
        events: env_num("LIMITS_EVENTS", 2_000)?,
        backlog: env_num("LIMITS_BACKLOG", 100_000)?,
        burst: env_num("LIMITS_BURST", 100_000)?,
        settle: Duration::from_secs(env_num("LIMITS_SETTLE", 5)?),
        hold: Duration::from_secs(env_num("LIMITS_HOLD", 30)?),
        window: env_num("LIMITS_CONFIRM_WINDOW", 1_000)?,
        limit: Duration::from_secs(env_num("LIMITS_LIMIT", 600)?),
    })
}

/// The command line of this run: the settings given, then cargo's.
fn command_line() -> String {
    let mut set: Vec<String> = std::env::vars()
        .filter(|(k, _)| {
            k.starts_with("LIMITS_") || k == "BENCH_BILLING_BIN" || k == "BILLING_TEST_PG_URL"
        })
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    set.sort();
    set.push("cargo bench -p billing-tests --bench limits".to_owned());
    set.join(" ")
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
    format!("   {what:<38} {value}")
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / (1024.0 * 1024.0))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

// ---------------------------------------------------------------- receiver

/// What the receiver saw of one endpoint: every request's arrival time and
/// event, in arrival order.
#[derive(Default)]
struct Book {
    arrivals: Vec<(Instant, String)>,
    /// Distinct events requested.
    seen: HashSet<String>,
}

/// The receiver of a run's endpoints: `/hook/limited`, `/hook/paused` and
/// `/hook/burst`.
#[derive(Default)]
struct Receiver {
    limited: Mutex<Book>,
    /// Requests to the limited endpoint, read without the lock.
    limited_requests: AtomicU64,
    /// Requests to the paused endpoint (never expected).
    paused_requests: AtomicU64,
    /// Requests to the `memory` case's burst endpoints.
    burst_requests: AtomicU64,
    /// Bodies that are not JSON or have no `event_ref`.
    unreadable: AtomicU64,
}

#[derive(serde::Deserialize)]
struct Delivered {
    event_ref: String,
}

async fn limited_hook(State(r): State<Arc<Receiver>>, body: Bytes) -> StatusCode {
    let at = Instant::now();
    r.limited_requests.fetch_add(1, Ordering::Relaxed);
    match serde_json::from_slice::<Delivered>(&body) {
        Ok(d) => {
            let mut book = lock(&r.limited);
            book.seen.insert(d.event_ref.clone());
            book.arrivals.push((at, d.event_ref));
        }
        Err(_) => {
            r.unreadable.fetch_add(1, Ordering::Relaxed);
        }
    }
    StatusCode::NO_CONTENT
}

async fn paused_hook(State(r): State<Arc<Receiver>>) -> StatusCode {
    r.paused_requests.fetch_add(1, Ordering::Relaxed);
    StatusCode::NO_CONTENT
}

async fn burst_hook(State(r): State<Arc<Receiver>>) -> StatusCode {
    r.burst_requests.fetch_add(1, Ordering::Relaxed);
    StatusCode::NO_CONTENT
}

impl Receiver {
    /// Starts the receiver; its base URL (`http://127.0.0.1:<port>/hook`).
    async fn start() -> Result<(Arc<Receiver>, String), String> {
        let r = Arc::new(Receiver::default());
        let app = axum::Router::new()
            .route("/hook/limited", axum::routing::post(limited_hook))
            .route("/hook/paused", axum::routing::post(paused_hook))
            .route("/hook/burst", axum::routing::post(burst_hook))
            .with_state(r.clone());
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
        Ok((r, format!("http://{addr}/hook")))
    }

    /// Whether the limited endpoint got a request for `event_ref`.
    fn has(&self, event_ref: &str) -> bool {
        lock(&self.limited).seen.contains(event_ref)
    }
}

// --------------------------------------------------------------- processes

/// A process's resident set (`VmRSS`) or its peak (`VmHWM`), in bytes.
fn proc_status_kb(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|rest| rest.trim_start_matches(':').split_whitespace().next())
        .and_then(|kb| kb.parse::<u64>().ok())
        .map(|kb| kb * 1024)
}

fn rss(pid: u32) -> Option<u64> {
    proc_status_kb(pid, "VmRSS")
}

/// Prints the last lines a process wrote to standard error, or that it
/// wrote none.
fn print_tail(path: &Path, what: &str) {
    if std::fs::metadata(path).map_or(true, |m| m.len() == 0) {
        println!("   {what} wrote nothing to stderr");
        return;
    }
    fleet_run::print_tail(path, what, 8);
}

// --------------------------------------------------------------------- API

struct Api {
    base: String,
    secret: String,
    client: reqwest::Client,
}

impl Api {
    /// A POST with a fresh `Idempotency-Key` (and `If-Match: if_match`
    /// when given): the answer's `data`.
    async fn post_if(
        &self,
        path: &str,
        if_match: Option<&str>,
        body: Value,
    ) -> Result<Value, String> {
        let mut request = self
            .client
            .post(format!("{}{path}", self.base))
            .bearer_auth(&self.secret)
            .header(
                "Idempotency-Key",
                format!("bench-{:016x}", rand::random::<u64>()),
            );
        if let Some(tag) = if_match {
            request = request.header("If-Match", tag);
        }
        let r = request
            .json(&body)
            .send()
            .await
            .map_err(|e| format!("POST {path}: {e}"))?;
        let status = r.status().as_u16();
        let v: Value = r.json().await.unwrap_or_default();
        if !(200..300).contains(&status) {
            return Err(format!("POST {path}: {status} {v}"));
        }
        Ok(v["data"].clone())
    }

    async fn post(&self, path: &str, body: Value) -> Result<Value, String> {
        self.post_if(path, None, body).await
    }

    /// A GET: the answer's `data` and its `ETag`.
    async fn get(&self, path: &str) -> Result<(Value, Option<String>), String> {
        let r = self
            .client
            .get(format!("{}{path}", self.base))
            .bearer_auth(&self.secret)
            .send()
            .await
            .map_err(|e| format!("GET {path}: {e}"))?;
        let status = r.status().as_u16();
        let etag = r
            .headers()
            .get("etag")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let v: Value = r.json().await.unwrap_or_default();
        if !(200..300).contains(&status) {
            return Err(format!("GET {path}: {status} {v}"));
        }
        Ok((v["data"].clone(), etag))
    }

    /// Creates an endpoint at `url` (with `rate_limit` when given, checked
    /// in the answer) subscribed to `event_type` in `env_ref`; its
    /// reference.
    async fn endpoint(
        &self,
        url: &str,
        rate_limit: Option<u32>,
        env_ref: &str,
        event_type: &str,
    ) -> Result<String, String> {
        let mut body = json!({"url": url});
        if let Some(r) = rate_limit {
            body["rate_limit"] = json!(r);
        }
        let endpoint = self.post("/api/v1/webhook_endpoints", body).await?;
        if endpoint["rate_limit"] != json!(rate_limit) {
            return Err(format!(
                "the endpoint was created with rate_limit {}, not {rate_limit:?}: {endpoint}",
                endpoint["rate_limit"]
            ));
        }
        let endpoint_ref = endpoint["endpoint_ref"]
            .as_str()
            .ok_or_else(|| format!("no endpoint reference in {endpoint}"))?
            .to_owned();
        self.post(
            &format!("/api/v1/webhook_endpoints/{endpoint_ref}/subscriptions"),
            json!({"public_event_type": event_type, "scope_type": "environment",
                "scope_ref": env_ref, "dto_version": 1}),
        )
        .await?;
        Ok(endpoint_ref)
    }

    /// The endpoint's health: (`health`, `effective_rate`,
    /// `throttled_until`), the last two as JSON (null or a value).
    async fn health(&self, endpoint_ref: &str) -> Result<(String, Value, Value), String> {
        let (h, _) = self
            .get(&format!("/api/v1/webhook_endpoints/{endpoint_ref}/health"))
            .await?;
        Ok((
            h["health"].as_str().unwrap_or("?").to_owned(),
            h.get("effective_rate").cloned().unwrap_or(json!("absent")),
            h.get("throttled_until").cloned().unwrap_or(json!("absent")),
        ))
    }
}

// --------------------------------------------------------------------- run

/// A stack that is ready: the API answers, every dispatcher consumes.
struct Stack {
    name: String,
    redis_db: u8,
    api: Api,
    env_ref: String,
    amqp_url: String,
    api_pid: u32,
    pids: Vec<u32>,
    db: PgConnection,
}

/// What a case found: its rows of the final table, verdicts and errors.
#[derive(Default)]
struct Summary {
    table: Vec<(String, String)>,
    verdicts: Vec<String>,
    errors: Vec<String>,
}

impl Summary {
    fn verdict(&mut self, pass: bool, text: String) {
        let line = format!("{:<4} {text}", if pass { "PASS" } else { "FAIL" });
        println!("   -> {line}");
        if !pass {
            self.errors.push(format!("verdict failed: {text}"));
        }
        self.verdicts.push(line);
    }

    fn error(&mut self, label: &str, e: String) {
        println!("   !! {e}");
        self.errors.push(format!("{label}: {e}"));
    }

    /// Prints a figure and keeps it for the final table.
    fn figure(&mut self, label: &str, what: &str, value: String) {
        println!("{}", row(what, value.clone()));
        self.table.push((format!("{label}: {what}"), value));
    }
}

#[derive(Clone, Copy)]
enum Case {
    Rate,
    Memory,
}

impl Case {
    fn label(self) -> &'static str {
        match self {
            Case::Rate => "rate",
            Case::Memory => "memory",
        }
    }
}

/// Runs `case` on a stack of its own, printing as it goes; the stack is
/// released before it returns, whatever happened.
async fn run_case(bin: &Path, cfg: &Config, case: Case, summary: &mut Summary) {
    let label = case.label();
    let n = match case {
        Case::Rate => cfg.dispatchers,
        Case::Memory => 1,
    };
    let mut fleet = match Fleet::new(NAME_PREFIX) {
        Ok(f) => f,
        Err(e) => return summary.error(label, e),
    };
    let mut dispatchers = Dispatchers::default();
    let result = async {
        let (receiver, hook) = Receiver::start().await?;
        let mut stack = start_stack(bin, n, &mut fleet, &mut dispatchers).await?;
        // Statistics for the planner, now and every 2 s.
        stack
            .db
            .execute("ANALYZE")
            .await
            .map_err(|e| format!("ANALYZE: {e}"))?;
        let stop_analyzer = CancellationToken::new();
        let analyzer_task = tokio::spawn(analyzer(
            stack.name.clone(),
            ANALYZE_EVERY,
            stop_analyzer.clone(),
        ));
        let outcome = match case {
            Case::Rate => {
                rate_run(cfg, &mut stack, &receiver, &hook, &mut dispatchers, summary).await
            }
            Case::Memory => {
                memory_run(cfg, &mut stack, &receiver, &hook, &mut dispatchers, summary).await
            }
        };
        stop_analyzer.cancel();
        let analyzes = analyzer_task.await.unwrap_or(0);
        println!(
            "   stack: billing api pid {}, dispatchers {:?}; database, vhost and Redis prefix \
             {} (Redis db {}); {analyzes} periodic ANALYZE",
            stack.api_pid, stack.pids, stack.name, stack.redis_db
        );
        let _ = stack.db.close().await;
        outcome
    }
    .await;
    if let Err(e) = result {
        summary.error(label, e);
    }
    let dir = fleet.dir.path().to_path_buf();
    tokio::task::block_in_place(|| drop(dispatchers));
    let pid = fleet.child_pid();
    if let (Some(pid), Some(status)) = (pid, tokio::task::block_in_place(|| fleet.stop_child())) {
        if !status.success() {
            println!("   !! billing api (pid {pid}) exited with {status} after SIGTERM");
        }
    }
    print_tail(&fleet.stderr_path, "billing api");
    for i in 0..n {
        print_tail(
            &dir.join(format!("dispatcher{i}.stderr")),
            &format!("billing dispatcher {i}"),
        );
    }
    tokio::task::block_in_place(|| drop(fleet));
    let _ = std::io::stdout().flush();
}

/// Makes the run's resources and starts `billing api`, then `n`
/// dispatchers; returns once each consumes the queue, with the sandbox's
/// credential.
async fn start_stack(
    bin: &Path,
    n: usize,
    fleet: &mut Fleet,
    dispatchers: &mut Dispatchers,
) -> Result<Stack, String> {
    let name = fleet.name.clone();
    let dir = fleet.dir.path().to_path_buf();
    let mut admin = pg_admin().await?;
    let redis_db = fleet.provision(&mut admin).await?;
    let _ = admin.close().await;

    let amqp_url = format!("{AMQP_BASE}/{}", url_encode(&name));
    let api_port = free_port()?;
    let mut key = [0u8; 32];
    rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut key);
    let envs: Vec<(String, String)> = [
        ("BILLING_STORE__URL", pg_url_for(&name)),
        ("BILLING_QUEUE__URL", amqp_url.clone()),
        // The run's vhost is its own: the queue keeps the fixed name the
        // publisher waits for.
        ("BILLING_QUEUE__NAME", QUEUE.to_owned()),
        ("BILLING_SCHEDULER__URL", format!("{REDIS_BASE}/{redis_db}")),
        ("BILLING_SCHEDULER__KEY_PREFIX", name.clone()),
        ("BILLING_API__LISTEN", format!("127.0.0.1:{api_port}")),
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
    let started = Instant::now();
    fleet.child = Some(spawn_billing(bin, &dir, &envs, "api", &fleet.stderr_path)?);
    let api_pid = fleet.child_pid().unwrap_or(0);
    let base = format!("http://127.0.0.1:{api_port}");
    let client = reqwest::Client::new();
    fleet.await_ready(&client, &base, "api").await?;
    for i in 0..n {
        dispatchers.children.push(spawn_billing(
            bin,
            &dir,
            &envs,
            "dispatcher",
            &dir.join(format!("dispatcher{i}.stderr")),
        )?);
    }
    // Every dispatcher consuming, so that each takes its share from the start.
    loop {
        let consuming = consumers(&name).await;
        if consuming >= n {
            break;
        }
        if let Some((i, status)) = dispatchers.exited() {
            return Err(format!(
                "billing dispatcher {i} exited during start-up: {status}"
            ));
        }
        if started.elapsed() > READY_LIMIT {
            return Err(format!(
                "{consuming} of {n} dispatchers consume {QUEUE} after {} s",
                READY_LIMIT.as_secs()
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let pids: Vec<u32> = dispatchers.children.iter().map(Child::id).collect();
    let (secret, env_ref) = bootstrap_sandbox(bin, &dir, &envs).await?;
    let db = PgConnection::connect(&pg_url_for(&name))
        .await
        .map_err(|e| format!("PostgreSQL {name}: {e}"))?;
    Ok(Stack {
        name,
        redis_db,
        api: Api {
            base,
            secret,
            client,
        },
        env_ref,
        amqp_url,
        api_pid,
        pids,
        db,
    })
}

/// What the publisher did.
struct Published {
    first: Instant,
    /// When the last confirm came.
    done: Instant,
}

/// Publishes `bodies` (events of `event_type`) in order on one
/// confirm-mode channel, `window` confirms outstanding.
async fn publish_all(
    publisher: Publisher,
    event_type: &'static str,
    bodies: Vec<Vec<u8>>,
    window: usize,
) -> Result<(Publisher, Published), String> {
    let mut inflight = FuturesUnordered::new();
    let first = Instant::now();
    for body in bodies {
        while inflight.len() >= window {
            if let Some(c) = inflight.next().await {
                confirmed(c)?;
            }
        }
        inflight.push(publisher.publish(event_type, &body).await?);
    }
    while let Some(c) = inflight.next().await {
        confirmed(c)?;
    }
    Ok((
        publisher,
        Published {
            first,
            done: Instant::now(),
        },
    ))
}

async fn count(conn: &mut PgConnection, sql: &str) -> Result<i64, String> {
    sqlx::query_scalar::<_, i64>(sql)
        .fetch_one(conn)
        .await
        .map_err(|e| format!("{sql}: {e}"))
}

/// The store's deliveries by status, as `status n, …`.
async fn statuses(db: &mut PgConnection) -> Result<String, String> {
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "SELECT status, count(*) FROM webhook_deliveries GROUP BY status ORDER BY status",
    )
    .fetch_all(&mut *db)
    .await
    .map_err(|e| e.to_string())?;
    Ok(rows
        .iter()
        .map(|(s, n)| format!("{s} {}", thousands(*n as u64)))
        .collect::<Vec<_>>()
        .join(", "))
}

/// The `memory` case's burst, so that the backlog is measured on a
/// dispatcher that has already taken as many events as it is about to hold
/// (its buffers, pools and allocator at their working size): `cfg.burst`
/// events of `BURST_TYPE`, to two unlimited endpoints, all delivered, then
/// `cfg.settle` more. How long they took from the first publish (`None`
/// when `LIMITS_BURST` is 0).
async fn burst(
    cfg: &Config,
    stack: &Stack,
    receiver: &Receiver,
    hook: &str,
    publisher: Publisher,
) -> Result<(Publisher, Option<Duration>), String> {
    if cfg.burst == 0 {
        return Ok((publisher, None));
    }
    let url = format!("{hook}/burst");
    for _ in 0..2 {
        stack
            .api
            .endpoint(&url, None, &stack.env_ref, BURST_TYPE)
            .await?;
    }
    let data = domain::webhook::catalogue::example(BURST_TYPE, 1).unwrap_or_default();
    let (bodies, _) = bodies(cfg.burst, &stack.env_ref, BURST_TYPE, &data);
    let expected = 2 * cfg.burst as u64;
    println!(
        "   a burst of {} events of {BURST_TYPE} to two unlimited endpoints ...",
        thousands(cfg.burst as u64)
    );
    let (publisher, published) = publish_all(publisher, BURST_TYPE, bodies, cfg.window).await?;
    while receiver.burst_requests.load(Ordering::Relaxed) < expected {
        if published.done.elapsed() > cfg.limit {
            return Err(format!(
                "the burst's {expected} deliveries did not arrive within {} s of the last \
                 publish ({} did)",
                cfg.limit.as_secs(),
                receiver.burst_requests.load(Ordering::Relaxed)
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let took = published.first.elapsed();
    println!(
        "   burst delivered in {:.1} s; settling {} s",
        took.as_secs_f64(),
        cfg.settle.as_secs()
    );
    tokio::time::sleep(cfg.settle).await;
    Ok((publisher, Some(took)))
}

/// Publishes one event and waits until the limited endpoint received it:
/// how long that took, and the event's reference.
async fn warm_up(
    publisher: &Publisher,
    receiver: &Receiver,
    env_ref: &str,
    data: &Value,
) -> Result<(Duration, String), String> {
    let (event_ref, warm) = envelope(env_ref, EVENT_TYPE, data);
    confirmed(publisher.publish(EVENT_TYPE, &warm).await?.await)?;
    let started = Instant::now();
    while !receiver.has(&event_ref) {
        if started.elapsed() > WARM_UP_LIMIT {
            return Err(format!(
                "the warm-up event was not delivered within {} s",
                WARM_UP_LIMIT.as_secs()
            ));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok((started.elapsed(), event_ref))
}

/// `n` envelopes of `event_type` and their events' references.
fn bodies(n: usize, env_ref: &str, event_type: &str, data: &Value) -> (Vec<Vec<u8>>, Vec<String>) {
    let mut refs = Vec::with_capacity(n);
    let bodies = (0..n)
        .map(|_| {
            let (event_ref, body) = envelope(env_ref, event_type, data);
            refs.push(event_ref);
            body
        })
        .collect();
    (bodies, refs)
}

/// The most of `sorted` (times) in any window `[t, t + 1 s)`.
fn sliding_max(sorted: &[Instant]) -> usize {
    let mut best = 0;
    let mut from = 0;
    for (i, t) in sorted.iter().enumerate() {
        while t.saturating_duration_since(sorted[from]) >= Duration::from_secs(1) {
            from += 1;
        }
        best = best.max(i + 1 - from);
    }
    best
}

// ------------------------------------------------------------------- rate

/// `rate`: one limited endpoint, a fleet, events as fast as they go.
async fn rate_run(
    cfg: &Config,
    stack: &mut Stack,
    receiver: &Arc<Receiver>,
    hook: &str,
    dispatchers: &mut Dispatchers,
    summary: &mut Summary,
) -> Result<(), String> {
    let label = "rate";
    let rate = cfg.rate;
    let endpoint = stack
        .api
        .endpoint(
            &format!("{hook}/limited"),
            Some(rate),
            &stack.env_ref,
            EVENT_TYPE,
        )
        .await?;
    let publisher = Publisher::connect(&stack.amqp_url, "billing-limits-bench").await?;
    let data = domain::webhook::catalogue::example(EVENT_TYPE, 1).unwrap_or_default();
    let (warm, warm_ref) = warm_up(&publisher, receiver, &stack.env_ref, &data).await?;
    // The warm-up's start leaves the limit's window.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (bodies, refs) = bodies(cfg.events, &stack.env_ref, EVENT_TYPE, &data);
    let refs: HashSet<String> = refs.into_iter().collect();
    println!(
        "   ready; warm-up delivered in {:.0} ms; endpoint {endpoint} rate_limit {rate}; \
         publishing {} events ...",
        warm.as_secs_f64() * 1000.0,
        thousands(cfg.events as u64)
    );

    // The endpoint's health every second while the run lasts.
    let stop_health = CancellationToken::new();
    let health_task = {
        let api = Api {
            base: stack.api.base.clone(),
            secret: stack.api.secret.clone(),
            client: stack.api.client.clone(),
        };
        let endpoint = endpoint.clone();
        let stop = stop_health.clone();
        tokio::spawn(async move {
            let mut seen: Vec<(String, Value, Value)> = Vec::new();
            let mut samples = 0;
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tick.tick() => {
                        if let Ok(h) = api.health(&endpoint).await {
                            samples += 1;
                            if !seen.contains(&h) {
                                seen.push(h);
                            }
                        }
                    }
                }
            }
            (samples, seen)
        })
    };

    let publishing = tokio::spawn(publish_all(publisher, EVENT_TYPE, bodies, cfg.window));
    let mut publishing = Some(publishing);
    let mut published: Option<Published> = None;
    let mut publisher: Option<Publisher> = None;
    let delivered_all = |r: &Receiver| {
        let book = lock(&r.limited);
        refs.iter().all(|e| book.seen.contains(e))
    };
    let complete = loop {
        if publishing.as_ref().is_some_and(|p| p.is_finished()) {
            let (p, done) = publishing
                .take()
                .expect("checked")
                .await
                .map_err(|e| format!("publisher: {e}"))??;
            println!(
                "   published (confirmed) in {:.2} s",
                (done.done - done.first).as_secs_f64()
            );
            publisher = Some(p);
            published = Some(done);
        }
        if published.is_some()
            && receiver.limited_requests.load(Ordering::Relaxed) > cfg.events as u64
            && delivered_all(receiver)
        {
            break true;
        }
        if published
            .as_ref()
            .is_some_and(|p| p.done.elapsed() > cfg.limit)
        {
            break false;
        }
        if let Some((i, status)) = dispatchers.exited() {
            return Err(format!("billing dispatcher {i} exited: {status}"));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let published = published.expect("the loop ends after the publish");
    if let Some(p) = publisher {
        p.close().await;
    }

    // Until the store holds no pending delivery: every attempt recorded.
    let settle_from = Instant::now();
    let pending_sql = "SELECT count(*) FROM webhook_deliveries WHERE status IN ('pending', 'held')";
    let mut pending = count(&mut stack.db, pending_sql).await?;
    while complete && pending > 0 && settle_from.elapsed() < SETTLE_LIMIT {
        tokio::time::sleep(Duration::from_millis(250)).await;
        pending = count(&mut stack.db, pending_sql).await?;
    }
    // Results are recorded in batches: a moment more for the last one.
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop_health.cancel();
    let (health_samples, health_seen) = health_task.await.unwrap_or_default();
    let last_health = stack.api.health(&endpoint).await;

    // Figures.
    let all_requests = receiver.limited_requests.load(Ordering::Relaxed);
    let book = std::mem::take(&mut *lock(&receiver.limited));
    let measured: Vec<(Instant, &String)> = book
        .arrivals
        .iter()
        .filter(|(_, e)| refs.contains(e))
        .map(|(t, e)| (*t, e))
        .collect();
    let mut times: Vec<Instant> = measured.iter().map(|(t, _)| *t).collect();
    times.sort_unstable();
    let mut firsts: std::collections::HashMap<&String, Instant> = Default::default();
    for (t, e) in &measured {
        firsts.entry(e).or_insert(*t);
    }
    let delivered = firsts.len();
    let last_first = firsts.values().max().copied().unwrap_or(published.first);
    let elapsed = last_first.saturating_duration_since(published.first);
    let per_s = delivered as f64 / elapsed.as_secs_f64().max(1e-9);
    let first_arrival = times.first().copied();
    let mut seconds: Vec<usize> = Vec::new();
    if let Some(first) = first_arrival {
        for t in &times {
            let s = t.saturating_duration_since(first).as_secs() as usize;
            if seconds.len() <= s {
                seconds.resize(s + 1, 0);
            }
            seconds[s] += 1;
        }
    }
    let max_second = seconds.iter().copied().max().unwrap_or(0);
    let sliding = sliding_max(&times);
    let requests = measured.len();
    let duplicates = requests.saturating_sub(delivered);
    let strays = book
        .arrivals
        .iter()
        .filter(|(_, e)| !refs.contains(e) && *e != warm_ref)
        .count();
    let attempts = count(&mut stack.db, billing_tests::ATTEMPTS_RECORDED_SQL).await?;
    let attempt_counts = count(
        &mut stack.db,
        "SELECT COALESCE(sum(attempt_count), 0)::BIGINT FROM webhook_deliveries",
    )
    .await?;
    let statuses = statuses(&mut stack.db).await?;
    let goal_second = (f64::from(rate) * GOAL_SECOND_FACTOR).floor() as usize;
    let goal_elapsed = cfg.events as f64 / f64::from(rate) * GOAL_ELAPSED_FACTOR;

    summary.figure(
        label,
        "layout",
        format!(
            "{} dispatchers, rate_limit {rate}, {} events",
            cfg.dispatchers,
            thousands(cfg.events as u64)
        ),
    );
    summary.figure(
        label,
        "publish (confirmed)",
        format!("{:.2} s", (published.done - published.first).as_secs_f64()),
    );
    summary.figure(
        label,
        "delivered (distinct events)",
        format!(
            "{} of {}",
            thousands(delivered as u64),
            thousands(cfg.events as u64)
        ),
    );
    summary.figure(
        label,
        "elapsed (first publish to last)",
        format!(
            "{:.2} s (ideal {:.1} s at the limit)",
            elapsed.as_secs_f64(),
            cfg.events as f64 / f64::from(rate)
        ),
    );
    summary.figure(label, "deliveries/s", format!("{per_s:.1}"));
    if let Some(first) = first_arrival {
        summary.figure(
            label,
            "first arrival after first publish",
            format!(
                "{:.0} ms",
                first
                    .saturating_duration_since(published.first)
                    .as_secs_f64()
                    * 1000.0
            ),
        );
    }
    summary.figure(
        label,
        "arrivals per calendar second",
        seconds
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(" "),
    );
    summary.figure(label, "most in a calendar second", max_second.to_string());
    summary.figure(label, "most in a sliding 1-s window", sliding.to_string());
    summary.figure(
        label,
        "requests / distinct events",
        format!(
            "{} / {} ({} duplicates)",
            thousands(requests as u64),
            thousands(delivered as u64),
            duplicates
        ),
    );
    summary.figure(
        label,
        "attempts in the store",
        format!(
            "{} attempts (rows of webhook_attempts and kept successes), \
             sum(attempt_count) {}; {} requests received (warm-up included)",
            thousands(attempts as u64),
            thousands(attempt_counts as u64),
            thousands(all_requests)
        ),
    );
    summary.figure(label, "deliveries in the store", statuses);
    summary.figure(
        label,
        "health during the run",
        format!(
            "{health_samples} samples; distinct (health, effective_rate, throttled_until): {}",
            health_seen
                .iter()
                .map(|(h, r, t)| format!("({h}, {r}, {t})"))
                .collect::<Vec<_>>()
                .join(" ")
        ),
    );
    match last_health {
        Ok((h, r, t)) => summary.figure(
            label,
            "health at the end",
            format!("{h}, effective_rate {r}, throttled_until {t}"),
        ),
        Err(e) => summary.error(label, format!("health: {e}")),
    }

    let unreadable = receiver.unreadable.load(Ordering::Relaxed);
    if unreadable > 0 {
        summary.error(label, format!("{unreadable} delivered bodies unreadable"));
    }
    if strays > 0 {
        summary.error(
            label,
            format!("{strays} requests for events never published"),
        );
    }
    if !complete {
        summary.error(
            label,
            format!(
                "incomplete {} s after the last publish: {delivered} of {} delivered; store: {}",
                cfg.limit.as_secs(),
                cfg.events,
                statuses_or(&mut stack.db).await
            ),
        );
    } else if pending > 0 {
        summary.error(
            label,
            format!(
                "{pending} deliveries still pending in the store {} s after the last arrival",
                SETTLE_LIMIT.as_secs()
            ),
        );
    }
    summary.verdict(
        max_second <= goal_second && sliding <= goal_second,
        format!(
            "rate: no second above {goal_second} (rate_limit {rate} x {GOAL_SECOND_FACTOR}): most \
             {max_second} in a calendar second, {sliding} in a sliding 1-s window"
        ),
    );
    summary.verdict(
        complete && elapsed.as_secs_f64() <= goal_elapsed,
        format!(
            "rate: all {} delivered within {goal_elapsed:.1} s: {} in {:.2} s = {per_s:.1}/s",
            thousands(cfg.events as u64),
            thousands(delivered as u64),
            elapsed.as_secs_f64()
        ),
    );
    summary.verdict(
        complete && attempts as u64 == all_requests && attempt_counts as u64 == all_requests,
        format!(
            "rate: waiting is not an attempt: {attempts} attempts recorded, sum(attempt_count) \
             {attempt_counts}, {all_requests} requests received"
        ),
    );
    Ok(())
}

/// The store's deliveries by status, or why they could not be read.
async fn statuses_or(db: &mut PgConnection) -> String {
    statuses(db).await.unwrap_or_else(|e| e)
}

// ----------------------------------------------------------------- memory

/// `memory`: a backlog behind a limited endpoint and a paused one, one
/// dispatcher, its RSS sampled every second.
async fn memory_run(
    cfg: &Config,
    stack: &mut Stack,
    receiver: &Arc<Receiver>,
    hook: &str,
    dispatchers: &mut Dispatchers,
    summary: &mut Summary,
) -> Result<(), String> {
    let label = "memory";
    let pid = stack.pids[0];
    let limited = stack
        .api
        .endpoint(
            &format!("{hook}/limited"),
            Some(MEMORY_RATE),
            &stack.env_ref,
            EVENT_TYPE,
        )
        .await?;
    let paused = stack
        .api
        .endpoint(&format!("{hook}/paused"), None, &stack.env_ref, EVENT_TYPE)
        .await?;
    let path = format!("/api/v1/webhook_endpoints/{paused}");
    let (_, etag) = stack.api.get(&path).await?;
    let etag = etag.ok_or_else(|| format!("GET {path}: no ETag"))?;
    let answer = stack
        .api
        .post_if(&format!("{path}/pause"), Some(&etag), json!({}))
        .await?;
    if answer["status"] != "paused" {
        return Err(format!("the paused endpoint is {}", answer["status"]));
    }

    // RSS every second from now on.
    let samples: Arc<Mutex<Vec<(Instant, u64)>>> = Arc::default();
    let stop_sampler = CancellationToken::new();
    let sampler = {
        let samples = samples.clone();
        let stop = stop_sampler.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tick.tick() => {
                        if let Some(b) = rss(pid) {
                            lock(&samples).push((Instant::now(), b));
                        }
                    }
                }
            }
        })
    };
    let publisher = Publisher::connect(&stack.amqp_url, "billing-limits-bench").await?;
    let data = domain::webhook::catalogue::example(EVENT_TYPE, 1).unwrap_or_default();
    let (warm, _) = warm_up(&publisher, receiver, &stack.env_ref, &data).await?;
    tokio::time::sleep(cfg.settle).await;
    let cold = rss(pid).ok_or_else(|| format!("no VmRSS of dispatcher pid {pid}"))?;
    let (publisher, burst) = burst(cfg, stack, receiver, hook, publisher).await?;
    let before = rss(pid).ok_or_else(|| format!("no VmRSS of dispatcher pid {pid}"))?;
    let (bodies, order) = bodies(cfg.backlog, &stack.env_ref, EVENT_TYPE, &data);
    let expected = 2 * (cfg.backlog as i64 + 1) + 2 * cfg.burst as i64;
    println!(
        "   ready; warm-up delivered in {:.0} ms; limited endpoint {limited} rate_limit \
         {MEMORY_RATE}, endpoint {paused} paused; dispatcher (pid {pid}) RSS {} after {} s; \
         publishing {} events ...",
        warm.as_secs_f64() * 1000.0,
        mib(before),
        cfg.settle.as_secs(),
        thousands(cfg.backlog as u64)
    );
    let requests_before = receiver.limited_requests.load(Ordering::Relaxed);

    let publishing = tokio::spawn(publish_all(publisher, EVENT_TYPE, bodies, cfg.window));
    let mut publishing = Some(publishing);
    let mut published: Option<Published> = None;
    let mut publisher: Option<Publisher> = None;
    let started = Instant::now();
    let mut next_progress = started + PROGRESS_EVERY;
    let mut in_store = 0;
    let mut stored_at: Option<Instant> = None;
    let mut hold_until: Option<Instant> = None;
    loop {
        if publishing.as_ref().is_some_and(|p| p.is_finished()) {
            let (p, done) = publishing
                .take()
                .expect("checked")
                .await
                .map_err(|e| format!("publisher: {e}"))??;
            println!(
                "   published (confirmed) {} events in {:.2} s",
                thousands(cfg.backlog as u64),
                (done.done - done.first).as_secs_f64()
            );
            publisher = Some(p);
            published = Some(done);
        }
        if stored_at.is_none() {
            in_store = count(&mut stack.db, "SELECT count(*) FROM webhook_deliveries").await?;
            if in_store >= expected {
                let now = Instant::now();
                println!(
                    "   the store holds all {} deliveries {:.1} s after the first publish; \
                     holding {} s more",
                    thousands(in_store as u64),
                    (now - started).as_secs_f64(),
                    cfg.hold.as_secs()
                );
                stored_at = Some(now);
                hold_until = Some(now + cfg.hold);
            }
        }
        if hold_until.is_some_and(|h| Instant::now() >= h) {
            break;
        }
        if stored_at.is_none()
            && published
                .as_ref()
                .is_some_and(|p| p.done.elapsed() > cfg.limit)
        {
            break;
        }
        if let Some((i, status)) = dispatchers.exited() {
            stop_sampler.cancel();
            return Err(format!("billing dispatcher {i} exited: {status}"));
        }
        if Instant::now() >= next_progress {
            next_progress += PROGRESS_EVERY;
            let due_now: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM webhook_deliveries WHERE endpoint_ref = $1 \
                 AND status = 'pending' AND next_attempt_at <= $2",
            )
            .bind(&limited)
            .bind(domain::Timestamp::now().millis())
            .fetch_one(&mut stack.db)
            .await
            .map_err(|e| e.to_string())?;
            println!(
                "     t={:>4.0} s: {} deliveries in the store, {} of the limited endpoint's due \
                 now, dispatcher RSS {}, {} requests to the limited endpoint",
                started.elapsed().as_secs_f64(),
                thousands(in_store as u64),
                thousands(due_now as u64),
                rss(pid).map_or("?".to_owned(), mib),
                receiver.limited_requests.load(Ordering::Relaxed) - requests_before
            );
        }
        tokio::time::sleep(Duration::from_millis(1000)).await;
    }
    let end = Instant::now();
    stop_sampler.cancel();
    let _ = sampler.await;
    if let Some(p) = publisher {
        p.close().await;
    }
    let hwm = proc_status_kb(pid, "VmHWM");
    let after = rss(pid);

    // Figures.
    let samples = std::mem::take(&mut *lock(&samples));
    let during: Vec<u64> = samples
        .iter()
        .filter(|(t, _)| *t >= started)
        .map(|(_, b)| *b)
        .collect();
    let max_during = during.iter().copied().max().unwrap_or(before);
    let increase = max_during.saturating_sub(before);
    let requests = receiver.limited_requests.load(Ordering::Relaxed) - requests_before;
    let paused_requests = receiver.paused_requests.load(Ordering::Relaxed);
    let now = domain::Timestamp::now().millis();
    // The limited endpoint's pending deliveries: due now, due later (and
    // how far ahead the latest is), without a due time, leased now.
    let (pending, due, later, latest, undated, leased): (i64, i64, i64, Option<i64>, i64, i64) =
        sqlx::query_as(
            "SELECT count(*), \
             count(*) FILTER (WHERE next_attempt_at <= $2), \
             count(*) FILTER (WHERE next_attempt_at > $2), \
             max(next_attempt_at), \
             count(*) FILTER (WHERE next_attempt_at IS NULL), \
             count(*) FILTER (WHERE lease_until > $2) \
         FROM webhook_deliveries WHERE endpoint_ref = $1 AND status = 'pending'",
        )
        .bind(&limited)
        .bind(now)
        .fetch_one(&mut stack.db)
        .await
        .map_err(|e| e.to_string())?;
    let attempts = count(&mut stack.db, billing_tests::ATTEMPTS_RECORDED_SQL).await?;
    let attempt_counts = count(
        &mut stack.db,
        "SELECT COALESCE(sum(attempt_count), 0)::BIGINT FROM webhook_deliveries",
    )
    .await?;
    let statuses = statuses(&mut stack.db).await?;
    let all_requests = receiver.limited_requests.load(Ordering::Relaxed);
    let measured_for = (end - started).as_secs_f64();

    summary.figure(
        label,
        "layout",
        format!(
            "1 dispatcher; endpoint rate_limit {MEMORY_RATE} + a paused one; {} events",
            thousands(cfg.backlog as u64)
        ),
    );
    summary.figure(
        label,
        "publish (confirmed)",
        published.as_ref().map_or("did not finish".to_owned(), |p| {
            format!(
                "{:.2} s ({:.0} events/s)",
                (p.done - p.first).as_secs_f64(),
                cfg.backlog as f64 / (p.done - p.first).as_secs_f64().max(1e-9)
            )
        }),
    );
    summary.figure(
        label,
        "all deliveries in the store after",
        stored_at.map_or_else(
            || {
                format!(
                    "never ({} of {} after {measured_for:.0} s)",
                    thousands(in_store as u64),
                    thousands(expected as u64)
                )
            },
            |s| {
                format!(
                    "{:.1} s ({} deliveries; {:.0} events/s into the store)",
                    (s - started).as_secs_f64(),
                    thousands(expected as u64),
                    (cfg.backlog + 1) as f64 / (s - started).as_secs_f64().max(1e-9)
                )
            },
        ),
    );
    summary.figure(label, "dispatcher RSS after the warm-up event", mib(cold));
    summary.figure(
        label,
        "burst before the backlog",
        burst.map_or("none (LIMITS_BURST=0)".to_owned(), |b| {
            format!(
                "{} events of {BURST_TYPE} to two unlimited endpoints, delivered {:.1} s after \
                 the first publish",
                thousands(cfg.burst as u64),
                b.as_secs_f64()
            )
        }),
    );
    summary.figure(label, "dispatcher RSS before the backlog", mib(before));
    summary.figure(
        label,
        "dispatcher RSS, most sampled during",
        format!(
            "{} ({} samples over {measured_for:.0} s)",
            mib(max_during),
            during.len()
        ),
    );
    summary.figure(
        label,
        "dispatcher RSS at the end / VmHWM",
        format!(
            "{} / {}",
            after.map_or("?".to_owned(), mib),
            hwm.map_or("?".to_owned(), mib)
        ),
    );
    summary.figure(label, "dispatcher RSS increase", mib(increase));
    summary.figure(
        label,
        "dispatcher RSS increase over the warm-up's",
        mib(max_during.saturating_sub(cold)),
    );
    summary.figure(
        label,
        "requests during (limited / paused)",
        format!(
            "{requests} in {measured_for:.0} s / {paused_requests} (rate_limit {MEMORY_RATE}/s)"
        ),
    );
    // The limited endpoint's pace once the store held everything: how
    // near its rate_limit, and the gaps between its requests.
    if let Some(from) = stored_at {
        let mut at: Vec<Instant> = lock(&receiver.limited)
            .arrivals
            .iter()
            .map(|(t, _)| *t)
            .filter(|t| *t >= from)
            .collect();
        at.sort_unstable();
        let mut gaps: Vec<f64> = at.windows(2).map(|w| (w[1] - w[0]).as_secs_f64()).collect();
        gaps.sort_by(f64::total_cmp);
        let held = (end - from).as_secs_f64();
        summary.figure(
            label,
            "limited endpoint's pace while held",
            format!(
                "{} requests in {held:.0} s = {:.2}/s (rate_limit {MEMORY_RATE}/s); gaps min {} \
                 median {} max {}",
                at.len(),
                at.len() as f64 / held.max(1e-9),
                gaps.first().map_or("-".to_owned(), |g| format!("{g:.2} s")),
                gaps.get(gaps.len() / 2)
                    .map_or("-".to_owned(), |g| format!("{g:.2} s")),
                gaps.last().map_or("-".to_owned(), |g| format!("{g:.2} s"))
            ),
        );
    }
    // Which events the limited endpoint got while held, by their place in
    // the publish order: those skipped inside that range, and when the
    // store has them due.
    if let Some(from) = stored_at {
        let position: std::collections::HashMap<&str, usize> = order
            .iter()
            .enumerate()
            .map(|(i, e)| (e.as_str(), i))
            .collect();
        let (got, held) = {
            let book = lock(&receiver.limited);
            let got: HashSet<usize> = book
                .arrivals
                .iter()
                .filter_map(|(_, e)| position.get(e.as_str()).copied())
                .collect();
            let held: Vec<usize> = book
                .arrivals
                .iter()
                .filter(|(t, _)| *t >= from)
                .filter_map(|(_, e)| position.get(e.as_str()).copied())
                .collect();
            (got, held)
        };
        if let (Some(lo), Some(hi)) = (held.iter().min(), held.iter().max()) {
            let skipped: Vec<usize> = (*lo..=*hi).filter(|i| !got.contains(i)).collect();
            let mut dues = Vec::new();
            for i in skipped.iter().take(5) {
                let due: Option<Option<i64>> = sqlx::query_scalar(
                    "SELECT next_attempt_at FROM webhook_deliveries \
                     WHERE endpoint_ref = $1 AND event_ref = $2",
                )
                .bind(&limited)
                .bind(&order[*i])
                .fetch_optional(&mut stack.db)
                .await
                .map_err(|e| e.to_string())?;
                dues.push(format!(
                    "#{i} due {}",
                    due.flatten().map_or("-".to_owned(), |d| format!(
                        "in {:.0} s",
                        (d - now) as f64 / 1000.0
                    ))
                ));
            }
            summary.figure(
                label,
                "publish positions got while held",
                format!(
                    "#{lo} to #{hi} in the order {:?}; {} skipped in that range{}",
                    held.iter().take(40).collect::<Vec<_>>(),
                    skipped.len(),
                    if dues.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", dues.join(", "))
                    }
                ),
            );
        }
    }
    summary.figure(
        label,
        "limited endpoint's pending at the end",
        format!(
            "{}: {} due now, {} due later (the latest in {}), {} without a due time, {} \
             leased",
            thousands(pending as u64),
            thousands(due as u64),
            thousands(later as u64),
            latest.map_or("-".to_owned(), |l| format!(
                "{:.1} s",
                (l - now) as f64 / 1000.0
            )),
            thousands(undated as u64),
            thousands(leased as u64)
        ),
    );
    summary.figure(label, "deliveries in the store", statuses);
    summary.figure(
        label,
        "attempts in the store",
        format!(
            "{} attempts (rows of webhook_attempts and kept successes), \
             sum(attempt_count) {}; {} requests received (warm-up included)",
            thousands(attempts as u64),
            thousands(attempt_counts as u64),
            thousands(all_requests)
        ),
    );
    match stack.api.health(&limited).await {
        Ok((h, r, t)) => summary.figure(
            label,
            "limited endpoint's health at the end",
            format!("{h}, effective_rate {r}, throttled_until {t}"),
        ),
        Err(e) => summary.error(label, format!("health: {e}")),
    }
    // RSS every 5 s, for the shape of the curve.
    let shape: Vec<String> = samples
        .iter()
        .filter(|(t, _)| *t >= started)
        .step_by(5)
        .map(|(t, b)| {
            format!(
                "{:.0}s:{:.1}",
                (*t - started).as_secs_f64(),
                *b as f64 / (1024.0 * 1024.0)
            )
        })
        .collect();
    println!("{}", row("RSS every 5 s (MB)", shape.join(" ")));

    if stored_at.is_none() {
        summary.error(
            label,
            format!(
                "the store held {in_store} of {expected} deliveries {} s after the last publish",
                cfg.limit.as_secs()
            ),
        );
    }
    if paused_requests > 0 {
        summary.error(
            label,
            format!("the paused endpoint got {paused_requests} requests"),
        );
    }
    // At the limit: at most one start a second, plus one for the edges.
    let allowed = (measured_for * f64::from(MEMORY_RATE)).ceil() as u64 + 1;
    if requests > allowed {
        summary.error(
            label,
            format!(
                "the limited endpoint got {requests} requests in {measured_for:.0} s, above its \
                 rate_limit of {MEMORY_RATE}/s"
            ),
        );
    }
    summary.verdict(
        stored_at.is_some() && increase < GOAL_RSS_INCREASE,
        format!(
            "memory: the dispatcher's RSS grows under {} with {} events backlogged: {} -> {} \
             (+{})",
            mib(GOAL_RSS_INCREASE),
            thousands(cfg.backlog as u64),
            mib(before),
            mib(max_during),
            mib(increase)
        ),
    );
    Ok(())
}

// ------------------------------------------------------------------- main

async fn bench(cfg: Config, bin: PathBuf) -> ExitCode {
    println!(
        "limits benchmark: {} (billing api + billing dispatchers over PostgreSQL, RabbitMQ, \
         Redis on 127.0.0.1); {} cores",
        bin.display(),
        std::thread::available_parallelism().map_or(0, |p| p.get())
    );
    remove_leftovers(NAME_PREFIX).await;
    let mut summary = Summary::default();
    for case in &cfg.cases {
        let case = match case.as_str() {
            "rate" => Case::Rate,
            _ => Case::Memory,
        };
        println!();
        match case {
            Case::Rate => println!(
                "== rate: one endpoint with rate_limit {}, {} events, {} dispatchers, receiver \
                 always 204",
                cfg.rate,
                thousands(cfg.events as u64),
                cfg.dispatchers
            ),
            Case::Memory => println!(
                "== memory: one dispatcher, an endpoint with rate_limit {MEMORY_RATE} and a \
                 paused one, {} events backlogged, {} s held",
                thousands(cfg.backlog as u64),
                cfg.hold.as_secs()
            ),
        }
        run_case(&bin, &cfg, case, &mut summary).await;
    }
    if CLEANUP_FAILED.load(Ordering::SeqCst) {
        summary.errors.push("cleanup failed (see above)".to_owned());
    }
    println!();
    println!("results of: {}", command_line());
    let width = summary
        .table
        .iter()
        .map(|(k, _)| k.chars().count())
        .max()
        .unwrap_or(0);
    for (k, v) in &summary.table {
        println!("  {k:<width$}  {v}");
    }
    bench_summary(&summary.verdicts, &summary.errors)
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
