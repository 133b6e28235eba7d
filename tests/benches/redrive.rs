//! Benchmark of redrive jobs in fleet mode and of the console's deliveries
//! page over a million deliveries (issue 30's "Show", contract 12.2 and
//! 12.3). Two phases (`BENCH_REDRIVE_PHASES`, comma-separated, default
//! `fleet,console`).
//!
//! **`fleet`: a redrive job over an outage.** The release binary is built
//! first (`cargo build --release -p billing`; `BENCH_BILLING_BIN` names
//! another binary instead). The stack runs as `fleet.rs` runs it, from
//! outside, on resources of its own (`support/fleet_run.rs`): a PostgreSQL
//! database, a RabbitMQ virtual host and an empty Redis logical database
//! named `billing_redrive_<pid>_<hex>` (also the Redis key prefix,
//! `BILLING_SCHEDULER__KEY_PREFIX`), released at the end, passed or failed.
//! Three processes of the real binary: one `billing api` and two `billing
//! dispatcher`s (each runs deliveries and the redrive job runner), with
//! private destinations allowed, `BILLING_LOG__LEVEL=warn`,
//! `BILLING_REDRIVE__RATE` = `BENCH_REDRIVE_RATE` (default 500, the
//! service's default) and `BILLING_DELIVERY__RETRY_SCHEDULE` =
//! `BENCH_REDRIVE_RETRY_SCHEDULE` (default `0s,1s`: two attempts, so a
//! delivery to an endpoint answering 500 ends `failed` within seconds).
//! Two endpoints are made through the API: the failing one, subscribed to
//! `order.created`, and the live one, subscribed to `payment.succeeded`;
//! one local axum receiver serves both.
//!
//! 1. The outage: `BENCH_REDRIVE_DELIVERIES` (default 50,000)
//!    `order.created` events are published with lapin (publisher confirms,
//!    up to 1,000 outstanding); the failing endpoint answers 500 to every
//!    request, and the benchmark waits until that many of its deliveries
//!    are `failed` in the store (the real path: no row is planted). The
//!    database is then `ANALYZE`d, and again every 10 s (this machine's
//!    PostgreSQL runs without autovacuum).
//! 2. The receiver is fixed (204 from now on, each success counted per
//!    `webhook-id`, the delivery's reference). Live traffic starts:
//!    `BENCH_REDRIVE_LIVE_RATE` `payment.succeeded` events per second
//!    (default 50, a tokio interval) until the end; a live delivery's
//!    latency is its event's publish to its first receipt. After 5 s of
//!    warm-up, the "before" window: `BENCH_REDRIVE_WINDOW_SECONDS` (default
//!    30).
//! 3. A redrive job is created through the API (`createWebhookRedriveJob`,
//!    filter `status: failed` and the failing endpoint), and read back every
//!    250 ms (`retrieveWebhookRedriveJob`). Once it has redriven half of
//!    what it matched, the dispatcher running it is found (the process
//!    whose PostgreSQL connection runs the job's statements on
//!    `webhook_redrive_job_items`: `pg_stat_activity.client_port` matched to
//!    a socket in `/proc/<pid>/fd`), gets SIGKILL and is started again at
//!    once. The job's lease (10 s) lets the other dispatcher or the
//!    restarted one go on after it. The "during" window of the live
//!    traffic is from the job's creation to the kill; the window after the
//!    kill is shown too, without a goal (the killed process's in-flight
//!    live deliveries wait for their leases).
//! 4. The job must end `succeeded` with `matched` = `redriven` = the
//!    outage's deliveries and nothing skipped; then the benchmark waits
//!    until every failed delivery was received once (at most
//!    `BENCH_REDRIVE_LIMIT_SECONDS`, default 600, for each wait).
//!
//! Figures: the outage's time; the job's achieved rate before the kill
//! (redriven ÷ time from `running` to the kill), after it (from the last
//! read without progress after the kill to the end) and overall, against the configured
//! rate; the kill's position and the pause it caused; the live p50/p99 of
//! each window and the ratio of p99 during to p99 before. Checks: in the
//! store, every failing endpoint's delivery is in generation 2,
//! `succeeded` (a delivery redriven twice would be in generation 3); the
//! receiver saw each of them succeed once (a repeat in the same
//! generation, an attempt whose result the SIGKILL lost, is at-least-once
//! delivery and is counted apart, with the deliveries that have more than
//! one attempt of generation 2 in the store: rows of `webhook_attempts`
//! and the success kept on the delivery's row).
//!
//! Goals (the issue's): the job redrives at `redrive.rate` (here: at least
//! 90 % of it while it runs, never above it by more than 5 %), each
//! delivery once, including across the SIGKILL; live deliveries' p99 during
//! the job within 20 % of before.
//!
//! **`console`: the deliveries page at a million deliveries.** In the
//! benchmark's process, the real router (API and console) over a fresh
//! PostgreSQL database (`TestApp::spawn(Backend::Postgres)`, the harness's
//! server, `BILLING_TEST_PG_URL`). `BENCH_CONSOLE_DELIVERIES` (default
//! 1,000,000) deliveries of one endpoint are planted with the statement of
//! `retention::postgres_sweeps_scan_indexes_at_a_million_rows` (a mix of
//! statuses, types and response classes, one a millisecond back from now;
//! references in the real shape), and their events, then `ANALYZE`. The
//! benchmark signs in to the console through its form
//! (`console_kit::ConsoleVisitor`) and requests `/console/deliveries` of
//! that endpoint under each filter (none, `status` failed, `status`
//! pending, `public_event_type`, `last_response_class`, a
//! `created_after`/`created_before` window, all combined), on the first
//! page and on the 11th (its cursor found through the API), and the search
//! by `event_ref` and by `delivery_ref` (the redirect, then the delivery's
//! page): `BENCH_CONSOLE_REQUESTS` requests each (default 200, one at a
//! time, after 5 not measured). Then the same filters and pages through
//! the API (`listWebhookDeliveries`, 50 a page). p50, p99 and max of each
//! against the goal: p99 under 100 ms.
//!
//! A missed goal is reported, not a failure; the binary fails when
//! something went wrong (a setup step, an unexpected answer, a job that
//! did not finish, a delivery missing, a cleanup). `bench_summary` ends it.
//!
//! Run with `cargo bench -p billing-tests --bench redrive`; a quick run:
//! `BENCH_REDRIVE_DELIVERIES=5000 BENCH_REDRIVE_WINDOW_SECONDS=10
//! BENCH_CONSOLE_DELIVERIES=100000 BENCH_CONSOLE_REQUESTS=50 cargo bench -p
//! billing-tests --bench redrive`.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "support/fleet_run.rs"]
mod fleet_run;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use base64::Engine as _;
use billing_tests::console_kit::ConsoleVisitor;
use billing_tests::{bench_summary, env_num, ms, percentile_ms, Backend, TestApp};
use fleet_run::{
    analyzer, billing_command, bootstrap_sandbox, build_billing, confirmed, envelope, free_port,
    pg_admin, pg_url_for, remove_leftovers, url_encode, Fleet, Publisher, AMQP_BASE,
    CLEANUP_FAILED, QUEUE, REDIS_BASE,
};
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use serde_json::{json, Value};
use sqlx::{Connection, Executor, PgConnection};
use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Prefix of the run's database, virtual host and Redis key prefix.
const NAME_PREFIX: &str = "billing_redrive_";
const FAILING_TYPE: (&str, u32) = ("order.created", 1);
const LIVE_TYPE: (&str, u32) = ("payment.succeeded", 2);
/// Outstanding publisher confirms while publishing the outage.
const CONFIRM_WINDOW: usize = 1_000;
/// How often the job is read back.
const POLL: Duration = Duration::from_millis(250);
const ANALYZE_EVERY: Duration = Duration::from_secs(10);
/// Live traffic before the "before" window starts.
const WARM_UP: Duration = Duration::from_secs(5);
/// How long the benchmark looks for the process running the job.
const FIND_HOLDER: Duration = Duration::from_secs(10);
/// Goals.
const GOAL_P99_RATIO: f64 = 1.2;
const GOAL_RATE_LOW: f64 = 0.9;
const GOAL_RATE_HIGH: f64 = 1.05;
const GOAL_PAGE_P99_MS: f64 = 100.0;
/// Requests before each measured series (not measured).
const PAGE_WARM_UP: usize = 5;

struct Config {
    phases: Vec<String>,
    deliveries: usize,
    rate: u32,
    live_rate: u64,
    window: Duration,
    retry_schedule: String,
    limit: Duration,
    console_deliveries: u64,
    console_requests: usize,
}

fn config() -> Result<Config, String> {
    let phases: Vec<String> = std::env::var("BENCH_REDRIVE_PHASES")
        .unwrap_or_else(|_| "fleet,console".to_owned())
        .split(',')
        .map(|p| p.trim().to_owned())
        .filter(|p| !p.is_empty())
        .collect();
    if let Some(p) = phases
        .iter()
        .find(|p| !["fleet", "console"].contains(&p.as_str()))
    {
        return Err(format!(
            "BENCH_REDRIVE_PHASES: unknown phase {p:?} (fleet, console)"
        ));
    }
    Ok(Config {
        phases,
        deliveries: env_num("BENCH_REDRIVE_DELIVERIES", 50_000)?,
        rate: env_num("BENCH_REDRIVE_RATE", 500)?,
        live_rate: env_num("BENCH_REDRIVE_LIVE_RATE", 50)?,
        window: Duration::from_secs(env_num("BENCH_REDRIVE_WINDOW_SECONDS", 30)?),
        retry_schedule: std::env::var("BENCH_REDRIVE_RETRY_SCHEDULE")
            .unwrap_or_else(|_| "0s,1s".to_owned()),
        limit: Duration::from_secs(env_num("BENCH_REDRIVE_LIMIT_SECONDS", 600)?),
        console_deliveries: env_num("BENCH_CONSOLE_DELIVERIES", 1_000_000)?,
        console_requests: env_num("BENCH_CONSOLE_REQUESTS", 200)?,
    })
}

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

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// p50, p99 and max of `d` (sorted here), in ms.
fn quantiles(d: &mut [Duration]) -> (Option<f64>, Option<f64>, Option<f64>) {
    d.sort_unstable();
    (
        percentile_ms(d, 50.0),
        percentile_ms(d, 99.0),
        percentile_ms(d, 100.0),
    )
}

// ------------------------------------------------------------- receiver

#[derive(Default)]
struct Sink {
    /// The failing endpoint answers 204 once set.
    fixed: AtomicBool,
    refused: AtomicU64,
    /// Successes per delivery (`webhook-id`) at the failing endpoint.
    redriven: Mutex<HashMap<String, u32>>,
    /// Each live event's publish time, until its first receipt.
    live_sent: Mutex<HashMap<String, Instant>>,
    /// Each live delivery's publish time and latency.
    live: Mutex<Vec<(Instant, Duration)>>,
    live_repeats: AtomicU64,
    unreadable: AtomicU64,
}

#[derive(serde::Deserialize)]
struct DeliveredRef {
    event_ref: String,
}

async fn failing(State(sink): State<Arc<Sink>>, headers: HeaderMap) -> StatusCode {
    if !sink.fixed.load(Ordering::SeqCst) {
        sink.refused.fetch_add(1, Ordering::Relaxed);
        return StatusCode::INTERNAL_SERVER_ERROR;
    }
    let Some(id) = headers.get("webhook-id").and_then(|v| v.to_str().ok()) else {
        sink.unreadable.fetch_add(1, Ordering::Relaxed);
        return StatusCode::NO_CONTENT;
    };
    *lock(&sink.redriven).entry(id.to_owned()).or_default() += 1;
    StatusCode::NO_CONTENT
}

async fn live(State(sink): State<Arc<Sink>>, body: Bytes) -> StatusCode {
    let at = Instant::now();
    let Ok(d) = serde_json::from_slice::<DeliveredRef>(&body) else {
        sink.unreadable.fetch_add(1, Ordering::Relaxed);
        return StatusCode::NO_CONTENT;
    };
    match lock(&sink.live_sent).remove(&d.event_ref) {
        Some(sent) => lock(&sink.live).push((sent, at.saturating_duration_since(sent))),
        None => {
            sink.live_repeats.fetch_add(1, Ordering::Relaxed);
        }
    }
    StatusCode::NO_CONTENT
}

async fn start_receiver(sink: Arc<Sink>) -> Result<String, String> {
    let app = axum::Router::new()
        .route("/failing", axum::routing::post(failing))
        .route("/live", axum::routing::post(live))
        .with_state(sink);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("receiver: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(format!("http://{addr}"))
}

// ------------------------------------------------------------ processes

/// The dispatcher processes (the API's is the `Fleet`'s child); dropping
/// it stops them (SIGTERM by PID, SIGKILL after `STOP_LIMIT`).
#[derive(Default)]
struct Dispatchers {
    children: Vec<Child>,
}

impl Dispatchers {
    fn pids(&self) -> Vec<u32> {
        self.children.iter().map(Child::id).collect()
    }
}

impl Drop for Dispatchers {
    fn drop(&mut self) {
        for child in &mut self.children {
            if let Ok(Some(_)) = child.try_wait() {
                continue;
            }
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
        }
        let deadline = Instant::now() + fleet_run::STOP_LIMIT;
        for child in &mut self.children {
            loop {
                match child.try_wait() {
                    Ok(Some(_)) => break,
                    Ok(None) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(20))
                    }
                    _ => {
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                }
            }
        }
    }
}

fn spawn_billing(
    bin: &Path,
    dir: &Path,
    envs: &[(String, String)],
    role: &str,
    stderr_name: &str,
) -> Result<Child, String> {
    let stderr = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(stderr_name))
        .map_err(|e| e.to_string())?;
    billing_command(bin, dir, envs)
        .arg(role)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .map_err(|e| format!("cannot start {} {role}: {e}", bin.display()))
}

fn with_metrics(envs: &[(String, String)]) -> Result<Vec<(String, String)>, String> {
    let mut envs = envs.to_vec();
    envs.push((
        "BILLING_METRICS__LISTEN".to_owned(),
        format!("127.0.0.1:{}", free_port()?),
    ));
    Ok(envs)
}

/// The inode of the TCP socket on 127.0.0.1 whose local port is `port`
/// and whose peer is PostgreSQL's port 5432.
fn socket_inode(port: u16) -> Option<String> {
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 10 {
                continue;
            }
            let port_of = |a: &str| {
                a.rsplit(':')
                    .next()
                    .and_then(|p| u16::from_str_radix(p, 16).ok())
            };
            if port_of(f[1]) == Some(port) && port_of(f[2]) == Some(5432) {
                return Some(f[9].to_owned());
            }
        }
    }
    None
}

fn holds_socket(pid: u32, inode: &str) -> bool {
    let want = format!("socket:[{inode}]");
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|entries| {
            entries.filter_map(Result::ok).any(|e| {
                std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy() == want.as_str())
            })
        })
        .unwrap_or(false)
}

/// The process among `pids` whose database connection runs the job's
/// statements (the items table only the job's holder touches), looked for
/// until `FIND_HOLDER` passed.
async fn job_holder(admin: &mut PgConnection, db: &str, pids: &[u32]) -> Option<u32> {
    let started = Instant::now();
    while started.elapsed() < FIND_HOLDER {
        let ports: Vec<i32> = sqlx::query_scalar(
            "SELECT client_port FROM pg_stat_activity WHERE datname = $1 \
             AND query LIKE '%webhook_redrive_job_items%' AND client_port IS NOT NULL",
        )
        .bind(db)
        .fetch_all(&mut *admin)
        .await
        .unwrap_or_default();
        for port in ports {
            let Some(inode) = u16::try_from(port).ok().and_then(socket_inode) else {
                continue;
            };
            if let Some(pid) = pids.iter().find(|p| holds_socket(**p, &inode)) {
                return Some(*pid);
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    None
}

// ------------------------------------------------------------------ API

struct Api {
    base: String,
    secret: String,
    client: reqwest::Client,
}

impl Api {
    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, String> {
        let url = format!("{}{path}", self.base);
        let req = match method {
            "POST" => self
                .client
                .post(&url)
                .header(
                    "Idempotency-Key",
                    format!("bench-{:016x}", rand::random::<u64>()),
                )
                .json(&body.unwrap_or_else(|| json!({}))),
            _ => self.client.get(&url),
        };
        let r = req
            .bearer_auth(&self.secret)
            .send()
            .await
            .map_err(|e| format!("{method} {path}: {e}"))?;
        let status = r.status().as_u16();
        let v: Value = r.json().await.unwrap_or_default();
        if !(200..300).contains(&status) {
            return Err(format!("{method} {path}: {status} {v}"));
        }
        Ok(v["data"].clone())
    }
}

/// An endpoint at `url` subscribed to `event_type` (its `dto_version`)
/// in the environment `env_ref`: its reference.
async fn make_endpoint(
    api: &Api,
    url: &str,
    env_ref: &str,
    (event_type, dto): (&str, u32),
) -> Result<String, String> {
    let e = api
        .call(
            "POST",
            "/api/v1/webhook_endpoints",
            Some(json!({"url": url})),
        )
        .await?;
    let r = e["endpoint_ref"]
        .as_str()
        .ok_or_else(|| format!("no endpoint reference in {e}"))?
        .to_owned();
    api.call(
        "POST",
        &format!("/api/v1/webhook_endpoints/{r}/subscriptions"),
        Some(
            json!({"public_event_type": event_type, "scope_type": "environment",
            "scope_ref": env_ref, "dto_version": dto}),
        ),
    )
    .await?;
    Ok(r)
}

/// `pairs` as a query string.
fn query_string(pairs: &[(&str, String)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={}", url_encode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

// ---------------------------------------------------------------- fleet

/// The job as last read.
#[derive(Clone, Debug)]
struct JobState {
    at: Instant,
    status: String,
    matched: i64,
    redriven: i64,
    skipped: i64,
}

fn job_state(v: &Value) -> JobState {
    JobState {
        at: Instant::now(),
        status: v["status"].as_str().unwrap_or_default().to_owned(),
        matched: v["matched"].as_i64().unwrap_or(-1),
        redriven: v["redriven"].as_i64().unwrap_or(-1),
        skipped: v["skipped"].as_i64().unwrap_or(-1),
    }
}

/// Live deliveries published in [from, to): their latencies.
fn window(sink: &Sink, from: Instant, to: Instant) -> Vec<Duration> {
    lock(&sink.live)
        .iter()
        .filter(|(sent, _)| *sent >= from && *sent < to)
        .map(|(_, d)| *d)
        .collect()
}

async fn count(conn: &mut PgConnection, sql: &str, endpoint: &str) -> Result<i64, String> {
    sqlx::query_scalar::<_, i64>(sql)
        .bind(endpoint)
        .fetch_one(conn)
        .await
        .map_err(|e| format!("{sql}: {e}"))
}

async fn fleet_phase(
    bin: &Path,
    cfg: &Config,
    verdicts: &mut Vec<String>,
    errors: &mut Vec<String>,
) -> Result<(), String> {
    let mut fleet = Fleet::new(NAME_PREFIX)?;
    let mut dispatchers = Dispatchers::default();
    let name = fleet.name.clone();
    let mut admin = pg_admin().await?;
    let redis_db = fleet.provision(&mut admin).await?;

    let sink = Arc::new(Sink::default());
    let hooks = start_receiver(sink.clone()).await?;

    let amqp_url = format!("{AMQP_BASE}/{}", url_encode(&name));
    let api_port = free_port()?;
    let mut key = [0u8; 32];
    rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut key);
    let envs: Vec<(String, String)> = [
        ("BILLING_STORE__URL", pg_url_for(&name)),
        ("BILLING_QUEUE__URL", amqp_url.clone()),
        ("BILLING_QUEUE__NAME", QUEUE.to_owned()),
        ("BILLING_SCHEDULER__URL", format!("{REDIS_BASE}/{redis_db}")),
        ("BILLING_SCHEDULER__KEY_PREFIX", name.clone()),
        ("BILLING_API__LISTEN", format!("127.0.0.1:{api_port}")),
        (
            "BILLING_DELIVERY__ALLOW_PRIVATE_NETWORKS",
            "true".to_owned(),
        ),
        (
            "BILLING_DELIVERY__RETRY_SCHEDULE",
            cfg.retry_schedule.clone(),
        ),
        ("BILLING_REDRIVE__RATE", cfg.rate.to_string()),
        (
            "BILLING_SECRETS__KEY",
            base64::engine::general_purpose::STANDARD.encode(key),
        ),
        ("BILLING_LOG__LEVEL", "warn".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let dir = fleet.dir.path().to_path_buf();

    // The API process first (it migrates), then the dispatchers.
    let api_child = spawn_billing(bin, &dir, &with_metrics(&envs)?, "api", "api.stderr")?;
    fleet.child = Some(api_child);
    let base = format!("http://127.0.0.1:{api_port}");
    let client = reqwest::Client::new();
    fleet.await_ready(&client, &base, "api").await?;
    for i in 0..2 {
        dispatchers.children.push(spawn_billing(
            bin,
            &dir,
            &with_metrics(&envs)?,
            "dispatcher",
            &format!("dispatcher{i}.stderr"),
        )?);
    }

    let (secret, env_ref) = bootstrap_sandbox(bin, &dir, &envs).await?;
    let (secret, env_ref) = (secret.as_str(), env_ref.as_str());
    let api = Api {
        base: base.clone(),
        secret: secret.to_owned(),
        client: client.clone(),
    };
    let failing_ep =
        make_endpoint(&api, &format!("{hooks}/failing"), env_ref, FAILING_TYPE).await?;
    make_endpoint(&api, &format!("{hooks}/live"), env_ref, LIVE_TYPE).await?;
    let mut db = PgConnection::connect(&pg_url_for(&name))
        .await
        .map_err(|e| format!("PostgreSQL {name}: {e}"))?;
    db.execute("ANALYZE").await.map_err(|e| e.to_string())?;

    // 1. The outage.
    let n = cfg.deliveries;
    println!(
        "== outage: {} order.created events to an endpoint answering 500 (retry schedule {})",
        thousands(n as u64),
        cfg.retry_schedule
    );
    let publisher = Publisher::connect(&amqp_url, "billing-redrive-bench").await?;
    let data =
        domain::webhook::catalogue::example(FAILING_TYPE.0, FAILING_TYPE.1).unwrap_or_default();
    let outage_started = Instant::now();
    let mut inflight = FuturesUnordered::new();
    for _ in 0..n {
        let (_, body) = envelope(env_ref, FAILING_TYPE.0, &data);
        while inflight.len() >= CONFIRM_WINDOW {
            if let Some(c) = inflight.next().await {
                confirmed(c)?;
            }
        }
        inflight.push(publisher.publish(FAILING_TYPE.0, &body).await?);
    }
    while let Some(c) = inflight.next().await {
        confirmed(c)?;
    }
    let published_in = outage_started.elapsed();
    let stop_analyzer = CancellationToken::new();
    let analyzer_task = tokio::spawn(analyzer(name.clone(), ANALYZE_EVERY, stop_analyzer.clone()));
    let failed_sql = "SELECT COUNT(*) FROM webhook_deliveries WHERE endpoint_ref = $1 \
                      AND status = 'failed'";
    loop {
        let failed = count(&mut db, failed_sql, &failing_ep).await?;
        if failed >= n as i64 {
            break;
        }
        if outage_started.elapsed() > cfg.limit {
            return Err(format!(
                "the outage: {failed} of {n} deliveries failed within {} s",
                cfg.limit.as_secs()
            ));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let outage = outage_started.elapsed();
    println!(
        "   published in {:.1} s; all {} failed after {:.1} s ({} requests answered 500)",
        published_in.as_secs_f64(),
        thousands(n as u64),
        outage.as_secs_f64(),
        thousands(sink.refused.load(Ordering::Relaxed)),
    );
    db.execute("ANALYZE").await.map_err(|e| e.to_string())?;

    // 2. Fixed, and live traffic.
    sink.fixed.store(true, Ordering::SeqCst);
    let live_publisher = Publisher::connect(&amqp_url, "billing-redrive-bench-live").await?;
    let stop_live = CancellationToken::new();
    let live_task = {
        let (sink, stop, env_ref, rate) = (
            sink.clone(),
            stop_live.clone(),
            env_ref.to_owned(),
            cfg.live_rate,
        );
        tokio::spawn(async move {
            let data =
                domain::webhook::catalogue::example(LIVE_TYPE.0, LIVE_TYPE.1).unwrap_or_default();
            let mut tick = tokio::time::interval(Duration::from_nanos(1_000_000_000 / rate));
            let mut inflight = FuturesUnordered::new();
            let mut published = 0u64;
            while !stop.is_cancelled() {
                tick.tick().await;
                let (event_ref, body) = envelope(&env_ref, LIVE_TYPE.0, &data);
                lock(&sink.live_sent).insert(event_ref, Instant::now());
                inflight.push(live_publisher.publish(LIVE_TYPE.0, &body).await?);
                published += 1;
                while let Some(Some(c)) = inflight.next().now_or_never() {
                    confirmed(c)?;
                }
            }
            while let Some(c) = inflight.next().await {
                confirmed(c)?;
            }
            live_publisher.close().await;
            Ok::<u64, String>(published)
        })
    };
    println!(
        "== live traffic: {} payment.succeeded/s to another endpoint; {} s before the job",
        cfg.live_rate,
        cfg.window.as_secs()
    );
    tokio::time::sleep(WARM_UP).await;
    let before_from = Instant::now();
    tokio::time::sleep(cfg.window).await;

    // 3. The job.
    let job_created = Instant::now();
    let job = api
        .call(
            "POST",
            "/api/v1/webhook_redrive_jobs",
            Some(json!({"reason": "redrive benchmark: the receiver is fixed",
                "filter": {"status": "failed", "endpoint_ref": failing_ep}})),
        )
        .await?;
    let job_ref = job["redrive_job_ref"]
        .as_str()
        .ok_or_else(|| format!("no job reference in {job}"))?
        .to_owned();
    println!(
        "== redrive job {job_ref} (status failed, the failing endpoint) at redrive.rate {}/s; \
         SIGKILL of its dispatcher halfway",
        cfg.rate
    );
    let mut states: Vec<JobState> = vec![job_state(&job)];
    let mut running_at: Option<Instant> = None;
    let mut kill: Option<(Instant, JobState)> = None;
    let mut resumed_at: Option<Instant> = None;
    let mut stalled_at: Option<Instant> = None;
    let mut last_print = Instant::now();
    let final_state = loop {
        tokio::time::sleep(POLL).await;
        let s = job_state(
            &api.call(
                "GET",
                &format!("/api/v1/webhook_redrive_jobs/{job_ref}"),
                None,
            )
            .await?,
        );
        states.push(s.clone());
        if s.status == "running" && running_at.is_none() {
            running_at = Some(s.at);
        }
        if last_print.elapsed() >= Duration::from_secs(5) {
            println!(
                "   t {:>5.1} s  {:<9}  matched {:>6}  redriven {:>6}  skipped {}",
                s.at.duration_since(job_created).as_secs_f64(),
                s.status,
                s.matched,
                s.redriven,
                s.skipped
            );
            last_print = Instant::now();
        }
        if let Some((_, at_kill)) = &kill {
            // The last read before progress resumed (a conservative start).
            if resumed_at.is_none() && s.redriven > at_kill.redriven {
                resumed_at = Some(stalled_at.unwrap_or(s.at));
            } else if resumed_at.is_none() {
                stalled_at = Some(s.at);
            }
        }
        if !s.status.is_empty() && s.status != "counting" && s.status != "running" {
            break s;
        }
        if kill.is_none() && s.status == "running" && s.redriven * 2 >= s.matched {
            let pids = dispatchers.pids();
            let holder = job_holder(&mut admin, &name, &pids).await;
            let Some(pid) = holder else {
                errors.push("the dispatcher running the job was not found; no SIGKILL".into());
                kill = Some((Instant::now(), s.clone()));
                continue;
            };
            let idx = pids.iter().position(|p| *p == pid).unwrap_or(0);
            let killed_at = Instant::now();
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            let _ = dispatchers.children[idx].wait();
            let at = job_state(
                &api.call(
                    "GET",
                    &format!("/api/v1/webhook_redrive_jobs/{job_ref}"),
                    None,
                )
                .await?,
            );
            dispatchers.children[idx] = spawn_billing(
                bin,
                &dir,
                &with_metrics(&envs)?,
                "dispatcher",
                &format!("dispatcher{idx}.stderr"),
            )?;
            println!(
                "   SIGKILL to dispatcher {idx} (pid {pid}) at redriven {} of {}; restarted (pid {})",
                at.redriven,
                at.matched,
                dispatchers.children[idx].id()
            );
            kill = Some((killed_at, at));
        }
        if job_created.elapsed() > cfg.limit {
            return Err(format!(
                "the job did not finish within {} s: {s:?}",
                cfg.limit.as_secs()
            ));
        }
    };
    let done_at = final_state.at;
    println!(
        "   ended {}: matched {}, redriven {}, skipped {} after {:.1} s",
        final_state.status,
        final_state.matched,
        final_state.redriven,
        final_state.skipped,
        done_at.duration_since(job_created).as_secs_f64()
    );

    // 4. Every redriven delivery received.
    let wait_from = Instant::now();
    let received = loop {
        let got = lock(&sink.redriven).len();
        if got >= n || wait_from.elapsed() > cfg.limit {
            break got;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let all_received_at = Instant::now();
    stop_live.cancel();
    let live_published = live_task
        .await
        .map_err(|e| format!("live publisher: {e}"))??;
    let live_wait = Instant::now();
    while !lock(&sink.live_sent).is_empty() && live_wait.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let live_missing = lock(&sink.live_sent).len();
    stop_analyzer.cancel();
    let analyzes = analyzer_task.await.unwrap_or_default();

    // Figures.
    let rate = f64::from(cfg.rate);
    let (killed_at, at_kill) = match &kill {
        Some((t, s)) => (*t, s.clone()),
        None => (done_at, final_state.clone()),
    };
    let running_from = running_at.unwrap_or(job_created);
    let pre_rate = at_kill.redriven as f64
        / killed_at
            .duration_since(running_from)
            .as_secs_f64()
            .max(1e-3);
    let post_from = resumed_at.unwrap_or(killed_at);
    let post_rate = (final_state.redriven - at_kill.redriven) as f64
        / done_at.duration_since(post_from).as_secs_f64().max(1e-3);
    let overall =
        final_state.redriven as f64 / done_at.duration_since(running_from).as_secs_f64().max(1e-3);
    let pause = post_from.duration_since(killed_at);
    println!("== figures");
    println!(
        "   outage: {} failed deliveries in {:.1} s ({:.0}/s)",
        thousands(n as u64),
        outage.as_secs_f64(),
        n as f64 / outage.as_secs_f64()
    );
    println!(
        "   counting: {:.1} s (creation to running)",
        running_from.duration_since(job_created).as_secs_f64()
    );
    println!(
        "   redrive rate before the kill: {pre_rate:.0}/s ({:.0} % of {rate:.0}/s configured)   \
         goal {:.0}–{:.0} % {}",
        100.0 * pre_rate / rate,
        100.0 * GOAL_RATE_LOW,
        100.0 * GOAL_RATE_HIGH,
        if pre_rate >= rate * GOAL_RATE_LOW && pre_rate <= rate * GOAL_RATE_HIGH {
            "PASS"
        } else {
            "MISS"
        }
    );
    println!(
        "   redrive rate after the restart: {post_rate:.0}/s ({:.0} %); pause after the kill {:.1} s \
         (the job's 10 s lease); overall, running to done: {overall:.0}/s ({:.0} %)",
        100.0 * post_rate / rate,
        pause.as_secs_f64(),
        100.0 * overall / rate
    );
    let mut before = window(&sink, before_from, job_created);
    let mut during = window(&sink, job_created, killed_at);
    let mut after = window(&sink, killed_at, done_at);
    let (b50, b99, bmax) = quantiles(&mut before);
    let (d50, d99, dmax) = quantiles(&mut during);
    let (a50, a99, amax) = quantiles(&mut after);
    println!(
        "   live before the job ({} deliveries): p50 {}, p99 {}, max {}",
        before.len(),
        ms(b50),
        ms(b99),
        ms(bmax)
    );
    println!(
        "   live during the job, until the kill ({} deliveries): p50 {}, p99 {}, max {}",
        during.len(),
        ms(d50),
        ms(d99),
        ms(dmax)
    );
    println!(
        "   live from the kill to the job's end ({} deliveries, no goal): p50 {}, p99 {}, max {}",
        after.len(),
        ms(a50),
        ms(a99),
        ms(amax)
    );
    let ratio = match (b99, d99) {
        (Some(b), Some(d)) if b > 0.0 => Some(d / b),
        _ => None,
    };
    let ratio_ok = ratio.is_some_and(|r| r <= GOAL_P99_RATIO);
    println!(
        "   live p99 during / before: {}   goal ≤ {GOAL_P99_RATIO} {}",
        ratio.map_or("n/a".to_owned(), |r| format!("{r:.2}")),
        if ratio_ok { "PASS" } else { "MISS" }
    );
    println!(
        "   live: {live_published} published, {live_missing} not received, {} repeats; {analyzes} ANALYZEs",
        sink.live_repeats.load(Ordering::Relaxed)
    );

    // Checks.
    let by_state: Vec<(i64, String, i64)> = sqlx::query_as(
        "SELECT generation, status, COUNT(*) FROM webhook_deliveries WHERE endpoint_ref = $1 \
         GROUP BY generation, status ORDER BY generation, status",
    )
    .bind(&failing_ep)
    .fetch_all(&mut db)
    .await
    .map_err(|e| e.to_string())?;
    let repeated_attempts = count(
        &mut db,
        "SELECT COUNT(*) FROM (SELECT delivery_ref FROM (\
         SELECT delivery_ref FROM webhook_attempts WHERE endpoint_ref = $1 AND generation = 2 \
         UNION ALL SELECT delivery_ref FROM webhook_deliveries WHERE endpoint_ref = $1 \
         AND generation = 2 AND success_duration_ms IS NOT NULL) AS a \
         GROUP BY delivery_ref HAVING COUNT(*) > 1) AS r",
        &failing_ep,
    )
    .await?;
    let beyond = by_state
        .iter()
        .filter(|(g, _, _)| *g > 2)
        .map(|(_, _, c)| c)
        .sum::<i64>();
    let second_ok = by_state
        .iter()
        .filter(|(g, s, _)| *g == 2 && s == "succeeded")
        .map(|(_, _, c)| c)
        .sum::<i64>();
    let shown: Vec<String> = by_state
        .iter()
        .map(|(g, s, c)| format!("generation {g} {s}: {c}"))
        .collect();
    println!("   failing endpoint's deliveries: {}", shown.join(", "));
    let (once, twice_or_more) = {
        let seen = lock(&sink.redriven);
        (
            seen.values().filter(|c| **c == 1).count(),
            seen.values().filter(|c| **c > 1).count(),
        )
    };
    println!(
        "   receiver: {} deliveries redriven and received, {once} once, {twice_or_more} more than once; \
         {repeated_attempts} with more than one attempt of generation 2 in the store; \
         all received {:.1} s after the job ended",
        thousands(received as u64),
        all_received_at.duration_since(done_at).as_secs_f64()
    );

    if final_state.status != "succeeded"
        || final_state.matched != n as i64
        || final_state.redriven != n as i64
        || final_state.skipped != 0
    {
        errors.push(format!(
            "the job ended {} with matched {}, redriven {}, skipped {} (expected {n} redriven, none skipped)",
            final_state.status, final_state.matched, final_state.redriven, final_state.skipped
        ));
    }
    if received < n {
        errors.push(format!(
            "{} of {n} redriven deliveries never reached the receiver",
            n - received
        ));
    }
    if live_missing > 0 {
        errors.push(format!("{live_missing} live deliveries never arrived"));
    }
    let once_each = beyond == 0 && second_ok == n as i64;
    verdicts.push(format!(
        "redrive, {} failed deliveries: each redriven once across a SIGKILL (all in generation 2, succeeded; \
         {beyond} beyond) {}; {twice_or_more} received twice ({repeated_attempts} with two attempts of generation 2 in the store; \
         any more received twice: sends whose results the SIGKILL lost)",
        thousands(n as u64),
        if once_each { "PASS" } else { "FAIL" }
    ));
    if !once_each {
        errors.push(format!(
            "deliveries not redriven exactly once: {}",
            shown.join(", ")
        ));
    }
    verdicts.push(format!(
        "redrive rate {pre_rate:.0}/s before the kill, {post_rate:.0}/s after, {overall:.0}/s overall, \
         configured {rate:.0}/s: {}",
        if pre_rate >= rate * GOAL_RATE_LOW && pre_rate <= rate * GOAL_RATE_HIGH {
            "PASS"
        } else {
            "MISS"
        }
    ));
    verdicts.push(format!(
        "live p99 before {}, during {}, ratio {} (goal ≤ {GOAL_P99_RATIO}): {}",
        ms(b99),
        ms(d99),
        ratio.map_or("n/a".to_owned(), |r| format!("{r:.2}")),
        if ratio_ok { "PASS" } else { "MISS" }
    ));
    for (i, _) in dispatchers.children.iter().enumerate() {
        let path = dir.join(format!("dispatcher{i}.stderr"));
        print_tail(&path, &format!("dispatcher{i}"));
    }
    print_tail(&dir.join("api.stderr"), "api");
    drop(dispatchers);
    drop(fleet);
    Ok(())
}

fn print_tail(path: &Path, what: &str) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    if lines.is_empty() {
        return;
    }
    println!("   {what} wrote {} lines to stderr; the last:", lines.len());
    for l in lines.iter().skip(lines.len().saturating_sub(5)) {
        let mut l = l.to_string();
        l.truncate(300);
        println!("     {l}");
    }
}

// -------------------------------------------------------------- console

/// Prints a series' figures and keeps its p99.
fn record(label: String, d: &mut [Duration], worst: &mut Vec<(String, f64)>) {
    let (p50, p99, max) = quantiles(d);
    println!(
        "   {label}  {:>8} {:>8} {:>8}{}",
        ms(p50),
        ms(p99),
        ms(max),
        if p99.is_some_and(|p| p < GOAL_PAGE_P99_MS) {
            ""
        } else {
            "  MISS"
        }
    );
    worst.push((label, p99.unwrap_or(f64::MAX)));
}

/// One measured series: `requests` GETs of `path`, each answered `expect`.
async fn series<F, Fut>(requests: usize, expect: u16, mut get: F) -> Result<Vec<Duration>, String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = (u16, String)>,
{
    let mut out = Vec::with_capacity(requests);
    for i in 0..requests + PAGE_WARM_UP {
        let t = Instant::now();
        let (status, text) = get().await;
        let d = t.elapsed();
        if status != expect {
            let mut text = text;
            text.truncate(300);
            return Err(format!("answered {status} (expected {expect}): {text}"));
        }
        if i >= PAGE_WARM_UP {
            out.push(d);
        }
    }
    Ok(out)
}

async fn console_phase(cfg: &Config, verdicts: &mut Vec<String>) -> Result<(), String> {
    let app = TestApp::spawn(Backend::Postgres).await;
    let (endpoint, _) = app
        .subscribed_endpoint("https://example.com/hook", "payment.succeeded", 2)
        .await;
    let now = domain::Timestamp::now().millis();
    let env = app.sandbox.environment_ref.clone();
    let pool = app.raw_pool().await;
    let n = cfg.console_deliveries;
    println!(
        "== console: planting {} deliveries of one endpoint (and their events) on PostgreSQL",
        thousands(n)
    );
    let planted = Instant::now();
    for sql in [
        format!(
            "INSERT INTO webhook_deliveries (delivery_ref, environment_ref, endpoint_ref, event_ref, \
             public_event_type, dto_version, status, diagnostic, generation, attempt_count, \
             occurred_at, event_data, match_reasons, body_status, payload, created_at, updated_at, \
             last_response_class) \
             SELECT 'whd_' || lpad(i::text, 12, '0'), '{env}', '{endpoint}', 'evt_' || lpad(i::text, 12, '0'), \
             CASE WHEN i % 4 = 0 THEN 'refund.created' ELSE 'payment.succeeded' END, 2, \
             CASE WHEN i % 10 = 0 THEN 'pending' WHEN i % 3 = 0 THEN 'failed' ELSE 'succeeded' END, \
             0, 1, 1, {now} - i, '{{}}', '[]', 'available', '{{}}', {now} - i, {now} - i, \
             CASE WHEN i % 10 = 0 THEN NULL WHEN i % 3 = 0 THEN '5xx' ELSE '2xx' END \
             FROM generate_series(1, {n}) AS i"
        ),
        format!(
            "INSERT INTO events (event_ref, environment_ref, public_event_type, occurred_at, scope, \
             status, received_at, processed_at) SELECT 'evt_' || lpad(i::text, 12, '0'), '{env}', \
             'payment.succeeded', {now} - i, '{{}}', 'processed', {now} - i, {now} - i \
             FROM generate_series(1, {n}) AS i"
        ),
        "ANALYZE".to_owned(),
    ] {
        sqlx::query(&sql)
            .execute(&pool)
            .await
            .map_err(|e| format!("planting: {e}"))?;
    }
    pool.close().await;
    println!(
        "   planted and analyzed in {:.1} s",
        planted.elapsed().as_secs_f64()
    );

    let mut visitor = ConsoleVisitor::new(&app);
    let signed = visitor.sign_in(&app.sandbox.secret).await;
    if signed.status != 303 || visitor.session.is_none() {
        return Err(format!(
            "console sign-in answered {} without a session",
            signed.status
        ));
    }
    // Whole seconds, inside the planted range: the last 10 minutes but one.
    let second = |ms: i64| domain::Timestamp::from_millis(ms - ms.rem_euclid(1000)).to_rfc3339();
    let span = (n as i64).min(600_000);
    let after = second(now - span);
    let before = second(now - span / 10);
    let filters: Vec<(&str, Vec<(&str, String)>)> = vec![
        ("no filter", vec![]),
        ("status=failed", vec![("status", "failed".into())]),
        ("status=pending", vec![("status", "pending".into())]),
        (
            "public_event_type=refund.created",
            vec![("public_event_type", "refund.created".into())],
        ),
        (
            "last_response_class=5xx",
            vec![("last_response_class", "5xx".into())],
        ),
        (
            "created_after+created_before",
            vec![
                ("created_after", after.clone()),
                ("created_before", before.clone()),
            ],
        ),
        (
            "all combined",
            vec![
                ("status", "failed".into()),
                ("public_event_type", "refund.created".into()),
                ("last_response_class", "5xx".into()),
                ("created_after", after.clone()),
                ("created_before", before.clone()),
            ],
        ),
    ];
    let requests = cfg.console_requests;
    println!(
        "== console /console/deliveries and API listWebhookDeliveries: {requests} requests each, \
         one at a time; goal p99 < {GOAL_PAGE_P99_MS} ms"
    );
    println!(
        "   {:<36} {:<6} {:<8} {:>8} {:>8} {:>8}",
        "filter", "page", "via", "p50 ms", "p99 ms", "max ms"
    );
    let mut worst: Vec<(String, f64)> = Vec::new();
    let (visitor, app) = (&visitor, &app);
    for (label, params) in &filters {
        let mut query: Vec<(&str, String)> = vec![("endpoint_ref", endpoint.clone())];
        query.extend(params.iter().cloned());
        // The 11th page's cursor, through the API.
        let api_path = |extra: &[(&str, String)]| {
            let mut q: Vec<(&str, String)> = params.clone();
            q.push(("limit", "50".into()));
            q.extend(extra.iter().cloned());
            format!(
                "/api/v1/webhook_endpoints/{endpoint}/deliveries?{}",
                query_string(&q)
            )
        };
        let mut cursor: Option<String> = None;
        for _ in 0..10 {
            let extra: Vec<(&str, String)> = cursor.iter().map(|c| ("cursor", c.clone())).collect();
            let r = app.get(&api_path(&extra)).send().await;
            if r.status != 200 {
                return Err(format!("listWebhookDeliveries {label}: {}", r.text));
            }
            match r.data()["next_cursor"].as_str() {
                Some(c) => cursor = Some(c.to_owned()),
                None => break,
            }
        }
        for page in ["first", "11th"] {
            let extra: Vec<(&str, String)> = match (page, &cursor) {
                ("first", _) => vec![],
                (_, Some(c)) => vec![("cursor", c.clone())],
                (_, None) => continue,
            };
            let mut q = query.clone();
            q.extend(extra.iter().cloned());
            let path = format!("/console/deliveries?{}", query_string(&q));
            let path = path.as_str();
            let mut d = series(requests, 200, move || async move {
                let p = visitor.get(path).await;
                (p.status, p.html)
            })
            .await
            .map_err(|e| format!("console {label} {page} page: {e}"))?;
            record(
                format!("{label:<36} {page:<6} {:<8}", "console"),
                &mut d,
                &mut worst,
            );
            let path = api_path(&extra);
            let path = path.as_str();
            let mut d = series(requests, 200, move || async move {
                let r = app.get(path).send().await;
                (r.status, r.text)
            })
            .await
            .map_err(|e| format!("API {label} {page} page: {e}"))?;
            record(
                format!("{label:<36} {page:<6} {:<8}", "API"),
                &mut d,
                &mut worst,
            );
        }
    }
    // Searches: an event's deliveries, and a delivery (redirect, page).
    let middle = (n / 2).max(1);
    let event = format!("evt_{middle:012}");
    let delivery = format!("whd_{middle:012}");
    let path = format!("/console/deliveries?q={event}");
    let path = path.as_str();
    let mut d = series(requests, 200, move || async move {
        let p = visitor.get(path).await;
        (p.status, p.html)
    })
    .await
    .map_err(|e| format!("console search by event_ref: {e}"))?;
    record(
        format!("{:<36} {:<6} {:<8}", "search by event_ref", "-", "console"),
        &mut d,
        &mut worst,
    );
    let path = format!("/console/deliveries?q={delivery}");
    let path = path.as_str();
    let mut d = series(requests, 303, move || async move {
        let p = visitor.get(path).await;
        (p.status, p.html)
    })
    .await
    .map_err(|e| format!("console search by delivery_ref: {e}"))?;
    record(
        format!(
            "{:<36} {:<6} {:<8}",
            "search by delivery_ref", "-", "console"
        ),
        &mut d,
        &mut worst,
    );
    let path = format!("/console/deliveries/{delivery}");
    let path = path.as_str();
    let mut d = series(requests, 200, move || async move {
        let p = visitor.get(path).await;
        (p.status, p.html)
    })
    .await
    .map_err(|e| format!("console delivery page: {e}"))?;
    record(
        format!(
            "{:<36} {:<6} {:<8}",
            "  then the delivery's page", "-", "console"
        ),
        &mut d,
        &mut worst,
    );
    let missed: Vec<String> = worst
        .iter()
        .filter(|(_, p99)| *p99 >= GOAL_PAGE_P99_MS)
        .map(|(l, p99)| {
            format!(
                "{} ({p99:.1} ms)",
                l.split_whitespace().collect::<Vec<_>>().join(" ")
            )
        })
        .collect();
    let highest = worst.iter().map(|(_, p)| *p).fold(0.0_f64, f64::max);
    verdicts.push(format!(
        "deliveries page at {} deliveries, {} series: highest p99 {highest:.1} ms (goal < {GOAL_PAGE_P99_MS} ms): {}",
        thousands(n),
        worst.len(),
        if missed.is_empty() {
            "PASS".to_owned()
        } else {
            format!("MISS: {}", missed.join("; "))
        }
    ));
    Ok(())
}

async fn bench(cfg: Config) -> ExitCode {
    let mut verdicts = Vec::new();
    let mut errors = Vec::new();
    if cfg.phases.iter().any(|p| p == "fleet") {
        match build_billing() {
            Ok(bin) => {
                remove_leftovers(NAME_PREFIX).await;
                if let Err(e) = fleet_phase(&bin, &cfg, &mut verdicts, &mut errors).await {
                    errors.push(format!("fleet: {e}"));
                }
            }
            Err(e) => errors.push(e),
        }
    }
    if cfg.phases.iter().any(|p| p == "console") {
        if let Err(e) = console_phase(&cfg, &mut verdicts).await {
            errors.push(format!("console: {e}"));
        }
    }
    if CLEANUP_FAILED.load(Ordering::SeqCst) {
        errors.push("cleanup failed (see above)".to_owned());
    }
    bench_summary(&verdicts, &errors)
}

fn main() -> ExitCode {
    let cfg = match config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime builds");
    runtime.block_on(bench(cfg))
}
