//! Benchmark of order per key (contract 13.1) in fleet mode: whether a
//! `per_key` endpoint gets each key's deliveries one after another when a
//! dispatcher is killed in the middle, and what the order costs in
//! throughput against an unordered endpoint. Measured end to end from
//! outside, as `fleet.rs` measures: events go in through RabbitMQ,
//! deliveries come out as HTTP requests to a local receiver.
//!
//! The release binary is built first (`cargo build --release -p billing`;
//! `BENCH_BILLING_BIN` names another binary instead). Every run starts from
//! nothing, on resources of its own (`support/fleet_run.rs`): a PostgreSQL
//! database and a RabbitMQ virtual host named `billing_ordering_<pid>_<hex>`
//! (guest given every permission on it), an empty Redis logical database
//! among 1..15 with the same name as key prefix
//! (`BILLING_SCHEDULER__KEY_PREFIX`), all released at the end, passed or
//! failed; leftovers of runs whose process is gone are removed at start.
//! Its stack is real processes of the binary: one `billing api` (started
//! first: it migrates, and `GET /readyz` is awaited) and
//! `ORDERING_DISPATCHERS` `billing dispatcher`s (default 3; awaited until
//! each consumes the queue, as `rabbitmqctl list_queues` shows), with
//! private destinations allowed, `BILLING_LOG__LEVEL=warn`, a fresh
//! secret key, a metrics port each, the queue's fixed name
//! (`BILLING_QUEUE__NAME`) and `BILLING_DELIVERY__RETRY_SCHEDULE` =
//! `ORDERING_RETRY_SCHEDULE`, default sixteen attempts a second or less
//! apart (`DEFAULT_RETRY_SCHEDULE`): a delivery to a receiver refusing 10 %
//! at random then fails for good with odds of 1e-16, so no key is blocked
//! by a failed head (contract 13.1), which would stall the run rather than
//! measure it. `billing admin bootstrap --json` gives the sandbox
//! credential; one endpoint is created through the API with `ordering`
//! (`none` or `per_key`, checked in the answer) and subscribed to
//! `order.created` in the environment. The database is `ANALYZE`d, and
//! again every 2 s while the run lasts (this machine's PostgreSQL runs
//! without autovacuum). One warm-up event without an ordering key (not
//! measured) opens the service's connections.
//!
//! Events are published with lapin on the run's virtual host to
//! `billing.events` (routing key `order.created`, persistent, mandatory,
//! publisher confirms, `ORDERING_CONFIRM_WINDOW` outstanding, default
//! 1,000) from one channel, so the broker keeps their order: event `j`
//! carries `"ordering_key": "key-<j % keys>"`, so each key's events are
//! published in order, keys interleaved. The service numbers them when it
//! accepts them (`sequence` from 1 per key; a fleet's consumers may accept
//! a key's events in another order than published, which the contract
//! allows: the order promised is the `sequence`'s).
//!
//! The receiver (axum on 127.0.0.1, in this process) reads each delivered
//! body's `ordering_key` and `sequence`, answers 500 at random to a share
//! of requests (`fail`) and 204 to the rest, and records every request:
//! (key, sequence, answered 2xx, arrival time). A request for sequence `s`
//! of a key whose `s - 1` had not been answered 2xx before it arrived is a
//! **violation** (the 2xx is recorded before it is answered, so a service
//! that waits for it can never cause one). A 2xx request for a
//! (key, sequence) that already had one is a **duplicate**: at-least-once
//! delivery allows it after a kill (an attempt whose result died with its
//! process), so duplicates are counted, not judged. A run waits until
//! every (key, sequence) was answered 2xx once, at most `ORDERING_LIMIT`
//! seconds after its last publish (default 300), then until the store
//! holds no pending delivery (at most 60 s more: a dead process's lease,
//! `delivery.timeout` + 10 s = 25 s, must expire first), so the duplicates
//! are all in. A run that does not complete prints which keys and
//! sequences are missing, what the receiver saw of each key's first
//! missing one and its predecessor, and their rows in the store (status,
//! attempts, due time, lease) with the key's counter (`ordering_keys`).
//!
//! Cases (`ORDERING_CASES`, comma-separated, default both):
//!
//! - `kill`: **safety under a kill.** A `per_key` endpoint,
//!   `ORDERING_EVENTS` events (default 3,000) over `ORDERING_KEYS` keys
//!   (default 50), the receiver refusing `ORDERING_FAIL_PERCENT` % (default
//!   10). Once it has received `ORDERING_KILL_AFTER` keyed requests
//!   (default half the events), one dispatcher picked at random gets
//!   SIGKILL (by its PID) and is not restarted: the others take over its
//!   work when its leases expire. Verdicts: every event delivered; no
//!   violation. Figures: elapsed (first publish to the last first 2xx),
//!   deliveries/s (distinct (key, sequence) answered 2xx over it),
//!   duplicates, violations, requests refused, attempts in the store, and
//!   the longest pause without a new (key, sequence) answered 2xx (the
//!   dead process's leases expiring).
//! - `cost`: **the cost of order.** Two runs one after the other, same
//!   layout, the receiver always answering 204: an unordered endpoint, then
//!   a `per_key` one, each with `ORDERING_COST_EVENTS` events (default
//!   5,000) over `ORDERING_COST_KEYS` keys (default 100). Figures:
//!   deliveries/s of each and the ratio per_key / unordered; goal: a ratio
//!   of at least 0.5. The per_key run is judged for violations too; the
//!   unordered run's "violations" are only counted (it promises no order),
//!   to show what the order prevents.
//!
//! A missed throughput goal is reported (MISS), not a failure; the binary
//! fails (`bench_summary`) when something went wrong: a setup step, an
//! unconfirmed publish, a run that did not complete, a violation on a
//! `per_key` endpoint, a kill that did not happen, a cleanup. Other
//! settings: `BILLING_TEST_PG_URL` (the PostgreSQL server's admin URL,
//! default `postgres://postgres@127.0.0.1:5432/postgres`); RabbitMQ
//! (guest/guest) and Redis are expected on 127.0.0.1:5672 and :6379, with
//! `rabbitmqctl` on the `PATH`.
//!
//! Run with `cargo bench -p billing-tests --bench ordering`; a quick run:
//! `ORDERING_EVENTS=600 ORDERING_KEYS=20 ORDERING_COST_EVENTS=1000
//! ORDERING_COST_KEYS=20 cargo bench -p billing-tests --bench ordering`.

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
use fleet_run::print_tail;
use fleet_run::{
    analyzer, bootstrap_sandbox, build_billing, confirmed, consumers, envelope, free_port,
    pg_admin, pg_url_for, remove_leftovers, spawn_billing, url_encode, Dispatchers, Fleet,
    Publisher, AMQP_BASE, CLEANUP_FAILED, QUEUE, READY_LIMIT, REDIS_BASE,
};
use futures::stream::FuturesUnordered;
use futures::StreamExt;
use serde_json::{json, Value};
use sqlx::{Connection, Executor, PgConnection};
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitCode};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Prefix of each run's database, virtual host and Redis key prefix.
const NAME_PREFIX: &str = "billing_ordering_";
const EVENT_TYPE: &str = "order.created";
/// Sixteen attempts, the retries 250 ms to 1 s apart (±20 % jitter): with
/// 10 % refused at random, a delivery fails for good with odds of 1e-16,
/// and a refusal delays its key by about a second at most.
const DEFAULT_RETRY_SCHEDULE: &str = "0s,250ms,500ms,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s";
/// How often the benchmark runs `ANALYZE` during a run (as `fleet.rs`).
const ANALYZE_EVERY: Duration = Duration::from_secs(2);
/// Longest wait for the warm-up event.
const WARM_UP_LIMIT: Duration = Duration::from_secs(30);
/// Longest wait, once every event was received, for the store to hold no
/// pending delivery (a killed process's leases expire after 25 s).
const SETTLE_LIMIT: Duration = Duration::from_secs(60);
/// Goal of `cost`: per_key deliveries/s at least this share of unordered.
const GOAL_RATIO: f64 = 0.5;
/// Most keys, violations or rows shown in a report.
const SHOWN: usize = 20;

// ------------------------------------------------------------------ config

struct Config {
    cases: Vec<String>,
    events: usize,
    keys: usize,
    fail_percent: u32,
    kill_after: u64,
    cost_events: usize,
    cost_keys: usize,
    dispatchers: usize,
    window: usize,
    limit: Duration,
    retry_schedule: String,
}

const ALL_CASES: [&str; 2] = ["kill", "cost"];

fn config() -> Result<Config, String> {
    let cases: Vec<String> = std::env::var("ORDERING_CASES")
        .unwrap_or_else(|_| ALL_CASES.join(","))
        .split(',')
        .map(|c| c.trim().to_owned())
        .filter(|c| !c.is_empty())
        .collect();
    if let Some(bad) = cases.iter().find(|c| !ALL_CASES.contains(&c.as_str())) {
        return Err(format!(
            "ORDERING_CASES: unknown case {bad:?} (known: {})",
            ALL_CASES.join(", ")
        ));
    }
    let events: usize = env_num("ORDERING_EVENTS", 3_000)?;
    let fail_percent: u32 = env_num("ORDERING_FAIL_PERCENT", 10)?;
    if fail_percent >= 100 {
        return Err(format!(
            "ORDERING_FAIL_PERCENT must be under 100, got {fail_percent}"
        ));
    }
    Ok(Config {
        cases,
        events,
        keys: env_num("ORDERING_KEYS", 50)?,
        fail_percent,
        kill_after: env_num("ORDERING_KILL_AFTER", (events as u64 / 2).max(1))?,
        cost_events: env_num("ORDERING_COST_EVENTS", 5_000)?,
        cost_keys: env_num("ORDERING_COST_KEYS", 100)?,
        dispatchers: env_num("ORDERING_DISPATCHERS", 3)?,
        window: env_num("ORDERING_CONFIRM_WINDOW", 1_000)?,
        limit: Duration::from_secs(env_num("ORDERING_LIMIT", 300)?),
        retry_schedule: std::env::var("ORDERING_RETRY_SCHEDULE")
            .unwrap_or_else(|_| DEFAULT_RETRY_SCHEDULE.to_owned()),
    })
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

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The name of key `i` of a run.
fn key_name(i: usize) -> String {
    format!("key-{i:03}")
}

// ---------------------------------------------------------------- receiver

/// One request as the receiver saw it.
struct Arrival {
    key: String,
    sequence: i64,
    ok: bool,
    at: Instant,
}

/// A request for a sequence whose predecessor had not been answered 2xx.
struct Violation {
    key: String,
    sequence: i64,
    at: Instant,
    /// How many requests the predecessor had had by then (all refused).
    predecessor_requests: usize,
}

/// What the receiver saw, kept under one lock so that checking a request
/// against its predecessor and recording its answer are one step.
#[derive(Default)]
struct Book {
    /// Per key, the sequences answered 2xx, with the first 2xx's time.
    succeeded: HashMap<String, BTreeMap<i64, Instant>>,
    /// Requests per (key, sequence), refused or not.
    requested: HashMap<(String, i64), usize>,
    /// Every keyed request, in arrival order.
    arrivals: Vec<Arrival>,
    violations: Vec<Violation>,
    /// 2xx answers to a (key, sequence) that already had one.
    duplicates: u64,
    /// Requests answered 500 on purpose.
    refused: u64,
    /// Distinct (key, sequence) answered 2xx.
    distinct: usize,
    /// The latest first 2xx of a (key, sequence).
    last_first_ok: Option<Instant>,
}

impl Book {
    /// Records a request for `sequence` of `key` answered 2xx (`ok`) or not.
    fn note(&mut self, key: String, sequence: i64, ok: bool, at: Instant) {
        let done = self.succeeded.entry(key.clone()).or_default();
        if sequence > 1 && !done.contains_key(&(sequence - 1)) {
            self.violations.push(Violation {
                key: key.clone(),
                sequence,
                at,
                predecessor_requests: self
                    .requested
                    .get(&(key.clone(), sequence - 1))
                    .copied()
                    .unwrap_or(0),
            });
        }
        if ok {
            match done.entry(sequence) {
                std::collections::btree_map::Entry::Occupied(_) => self.duplicates += 1,
                std::collections::btree_map::Entry::Vacant(v) => {
                    v.insert(at);
                    self.distinct += 1;
                    self.last_first_ok = Some(at);
                }
            }
        } else {
            self.refused += 1;
        }
        *self.requested.entry((key.clone(), sequence)).or_default() += 1;
        self.arrivals.push(Arrival {
            key,
            sequence,
            ok,
            at,
        });
    }
}

/// The receiver of a run's endpoint (`/hook`).
struct Receiver {
    /// Probability that a request is answered 500.
    fail_p: f64,
    book: Mutex<Book>,
    /// Keyed requests so far: the kill's trigger, read without the lock.
    requests: AtomicU64,
    /// Requests whose body has no ordering key (the warm-up).
    unkeyed: AtomicU64,
    /// Bodies that are not JSON, or have a key without a sequence.
    unreadable: AtomicU64,
}

#[derive(serde::Deserialize)]
struct Delivered {
    ordering_key: Option<String>,
    sequence: Option<i64>,
}

async fn hook(State(r): State<Arc<Receiver>>, body: Bytes) -> StatusCode {
    let at = Instant::now();
    let Ok(d) = serde_json::from_slice::<Delivered>(&body) else {
        r.unreadable.fetch_add(1, Ordering::Relaxed);
        return StatusCode::NO_CONTENT;
    };
    let Some(key) = d.ordering_key else {
        r.unkeyed.fetch_add(1, Ordering::Relaxed);
        return StatusCode::NO_CONTENT;
    };
    let Some(sequence) = d.sequence else {
        r.unreadable.fetch_add(1, Ordering::Relaxed);
        return StatusCode::NO_CONTENT;
    };
    r.requests.fetch_add(1, Ordering::Relaxed);
    let ok = !(r.fail_p > 0.0 && rand::random::<f64>() < r.fail_p);
    // Recorded before the answer leaves: the service cannot have seen
    // this 2xx before the book holds it.
    lock(&r.book).note(key, sequence, ok, at);
    if ok {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    }
}

impl Receiver {
    /// Starts the receiver; it and its endpoint URL.
    async fn start(fail_p: f64) -> Result<(Arc<Receiver>, String), String> {
        let r = Arc::new(Receiver {
            fail_p,
            book: Mutex::default(),
            requests: AtomicU64::new(0),
            unkeyed: AtomicU64::new(0),
            unreadable: AtomicU64::new(0),
        });
        let app = axum::Router::new()
            .route("/hook", axum::routing::post(hook))
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

    fn distinct(&self) -> usize {
        lock(&self.book).distinct
    }
}

// --------------------------------------------------------------- processes

// --------------------------------------------------------------------- API

struct Api {
    base: String,
    secret: String,
    client: reqwest::Client,
}

impl Api {
    /// A POST with a fresh `Idempotency-Key`: the answer's `data`.
    async fn post(&self, path: &str, body: Value) -> Result<Value, String> {
        let r = self
            .client
            .post(format!("{}{path}", self.base))
            .bearer_auth(&self.secret)
            .header(
                "Idempotency-Key",
                format!("bench-{:016x}", rand::random::<u64>()),
            )
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
}

// --------------------------------------------------------------------- run

/// One run of the stack.
struct Run {
    label: &'static str,
    /// The endpoint's `ordering`: `none` or `per_key`.
    ordering: &'static str,
    events: usize,
    keys: usize,
    fail_p: f64,
    /// SIGKILL to one dispatcher after this many keyed requests.
    kill_after: Option<u64>,
}

/// What a run measured.
struct Outcome {
    expected: usize,
    delivered: usize,
    complete: bool,
    /// From the first publish to the last first 2xx.
    elapsed: Duration,
    rate: f64,
    duplicates: u64,
    violations: usize,
    errors: Vec<String>,
}

/// What the publisher did.
struct Published {
    first: Instant,
    /// When the last confirm came.
    done: Instant,
}

/// Publishes `bodies` in order on one confirm-mode channel, `window`
/// confirms outstanding.
async fn publish_all(
    publisher: Publisher,
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
        inflight.push(publisher.publish(EVENT_TYPE, &body).await?);
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

/// Runs `run` on a stack of its own, printing as it goes; the stack is
/// released before it returns, whatever happened.
async fn run_fleet(bin: &Path, cfg: &Config, run: &Run) -> Outcome {
    let mut fleet = match Fleet::new(NAME_PREFIX) {
        Ok(f) => f,
        Err(e) => return failed_outcome(run, e),
    };
    let mut dispatchers = Dispatchers::default();
    let outcome = run_on(bin, cfg, run, &mut fleet, &mut dispatchers).await;
    let dir = fleet.dir.path().to_path_buf();
    let outcome = outcome.unwrap_or_else(|e| failed_outcome(run, e));
    tokio::task::block_in_place(|| drop(dispatchers));
    let pid = fleet.child_pid();
    if let (Some(pid), Some(status)) = (pid, tokio::task::block_in_place(|| fleet.stop_child())) {
        if !status.success() {
            println!("   !! billing api (pid {pid}) exited with {status} after SIGTERM");
        }
    }
    print_tail(&fleet.stderr_path, "billing api", 5);
    for i in 0..cfg.dispatchers {
        print_tail(
            &dir.join(format!("dispatcher{i}.stderr")),
            &format!("billing dispatcher {i}"),
            5,
        );
    }
    tokio::task::block_in_place(|| drop(fleet));
    let _ = std::io::stdout().flush();
    outcome
}

fn failed_outcome(run: &Run, e: String) -> Outcome {
    println!("   !! {e}");
    Outcome {
        expected: run.events,
        delivered: 0,
        complete: false,
        elapsed: Duration::ZERO,
        rate: 0.0,
        duplicates: 0,
        violations: 0,
        errors: vec![e],
    }
}

async fn run_on(
    bin: &Path,
    cfg: &Config,
    run: &Run,
    fleet: &mut Fleet,
    dispatchers: &mut Dispatchers,
) -> Result<Outcome, String> {
    let name = fleet.name.clone();
    let dir = fleet.dir.path().to_path_buf();
    let mut admin = pg_admin().await?;
    let redis_db = fleet.provision(&mut admin).await?;
    let _ = admin.close().await;
    let (receiver, hook_url) = Receiver::start(run.fail_p).await?;

    // The stack: the API first (it migrates), then the dispatchers.
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
            "BILLING_DELIVERY__RETRY_SCHEDULE",
            cfg.retry_schedule.clone(),
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
    let base = format!("http://127.0.0.1:{api_port}");
    let client = reqwest::Client::new();
    fleet.await_ready(&client, &base, "api").await?;
    for i in 0..cfg.dispatchers {
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
        let n = consumers(&name).await;
        if n >= cfg.dispatchers {
            break;
        }
        if let Some((i, status)) = dispatchers
            .children
            .iter_mut()
            .enumerate()
            .find_map(|(i, c)| c.try_wait().ok().flatten().map(|s| (i, s)))
        {
            return Err(format!(
                "billing dispatcher {i} exited during start-up: {status}"
            ));
        }
        if started.elapsed() > READY_LIMIT {
            return Err(format!(
                "{n} of {} dispatchers consume {QUEUE} after {} s",
                cfg.dispatchers,
                READY_LIMIT.as_secs()
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let pids: Vec<u32> = dispatchers.children.iter().map(Child::id).collect();

    let (secret, env_ref) = bootstrap_sandbox(bin, &dir, &envs).await?;
    let api = Api {
        base,
        secret,
        client,
    };
    let endpoint = api
        .post(
            "/api/v1/webhook_endpoints",
            json!({"url": hook_url, "ordering": run.ordering}),
        )
        .await?;
    if endpoint["ordering"] != run.ordering {
        return Err(format!(
            "the endpoint was created with ordering {}, not {}",
            endpoint["ordering"], run.ordering
        ));
    }
    let endpoint_ref = endpoint["endpoint_ref"]
        .as_str()
        .ok_or_else(|| format!("no endpoint reference in {endpoint}"))?
        .to_owned();
    api.post(
        &format!("/api/v1/webhook_endpoints/{endpoint_ref}/subscriptions"),
        json!({"public_event_type": EVENT_TYPE, "scope_type": "environment",
            "scope_ref": env_ref, "dto_version": 1}),
    )
    .await?;

    // Statistics for the planner, now and every 2 s.
    let mut db = PgConnection::connect(&pg_url_for(&name))
        .await
        .map_err(|e| format!("PostgreSQL {name}: {e}"))?;
    db.execute("ANALYZE")
        .await
        .map_err(|e| format!("ANALYZE: {e}"))?;
    let stop_analyzer = CancellationToken::new();
    let analyzer_task = tokio::spawn(analyzer(name.clone(), ANALYZE_EVERY, stop_analyzer.clone()));
    let outcome = measure(
        cfg,
        run,
        &receiver,
        &mut db,
        &amqp_url,
        &env_ref,
        dispatchers,
        &pids,
    )
    .await;
    stop_analyzer.cancel();
    let analyzes = analyzer_task.await.unwrap_or(0);
    let _ = db.close().await;
    println!(
        "   stack: billing api pid {}, dispatchers {pids:?}; database, vhost and Redis prefix \
         {name} (Redis db {redis_db}); {analyzes} periodic ANALYZE",
        fleet.child_pid().unwrap_or(0)
    );
    outcome
}

/// The measured part of a run, on a stack that is ready.
#[allow(clippy::too_many_arguments)]
async fn measure(
    cfg: &Config,
    run: &Run,
    receiver: &Receiver,
    db: &mut PgConnection,
    amqp_url: &str,
    env_ref: &str,
    dispatchers: &mut Dispatchers,
    pids: &[u32],
) -> Result<Outcome, String> {
    let publisher = Publisher::connect(amqp_url, "billing-ordering-bench").await?;

    // Warm-up: one event without a key, not measured.
    let data = domain::webhook::catalogue::example(EVENT_TYPE, 1).unwrap_or_default();
    let (_, warm) = envelope(env_ref, EVENT_TYPE, &data);
    confirmed(publisher.publish(EVENT_TYPE, &warm).await?.await)?;
    let warm_started = Instant::now();
    while receiver.unkeyed.load(Ordering::Relaxed) == 0 {
        if warm_started.elapsed() > WARM_UP_LIMIT {
            return Err(format!(
                "the warm-up event was not delivered within {} s",
                WARM_UP_LIMIT.as_secs()
            ));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let warm_up = warm_started.elapsed();

    // The envelopes, serialised before the clock starts: event j has key
    // j % keys, so each key's events go out in order.
    let mut per_key = vec![0i64; run.keys];
    let bodies: Vec<Vec<u8>> = (0..run.events)
        .map(|j| {
            let k = j % run.keys;
            per_key[k] += 1;
            let (_, body) = envelope(env_ref, EVENT_TYPE, &data);
            let mut v: Value = serde_json::from_slice(&body).expect("an envelope is JSON");
            v["ordering_key"] = json!(key_name(k));
            serde_json::to_vec(&v).expect("JSON serialises")
        })
        .collect();
    println!(
        "   ready; warm-up delivered in {:.0} ms; publishing {} events over {} keys ...",
        warm_up.as_secs_f64() * 1000.0,
        thousands(run.events as u64),
        run.keys
    );

    // Publishing runs on its own, so the kill can come while it does.
    let publishing = tokio::spawn(publish_all(publisher, bodies, cfg.window));
    let mut publishing = Some(publishing);
    let mut published: Option<Published> = None;
    let mut publisher: Option<Publisher> = None;
    // (when, pid, index, keyed requests then, distinct 2xx then)
    let mut kill: Option<(Instant, u32, usize, u64, usize)> = None;
    let complete = loop {
        let requests = receiver.requests.load(Ordering::Relaxed);
        if let Some(after) = run.kill_after {
            if kill.is_none() && requests >= after {
                let idx = rand::random::<usize>() % dispatchers.children.len();
                let pid = pids[idx];
                let at = Instant::now();
                let _ = std::process::Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
                let _ = tokio::task::block_in_place(|| dispatchers.children[idx].wait());
                let distinct = receiver.distinct();
                println!(
                    "   SIGKILL to dispatcher {idx} (pid {pid}) at {} keyed requests, {} of {} \
                     events delivered; not restarted",
                    thousands(requests),
                    thousands(distinct as u64),
                    thousands(run.events as u64)
                );
                kill = Some((at, pid, idx, requests, distinct));
            }
        }
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
        if receiver.distinct() >= run.events && published.is_some() {
            break true;
        }
        if published
            .as_ref()
            .is_some_and(|p| p.done.elapsed() > cfg.limit)
        {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let published = published.expect("the loop ends after the publish");
    if let Some(p) = publisher {
        p.close().await;
    }

    // Until the store holds no pending delivery: the duplicates are in.
    let settle_from = Instant::now();
    let pending_sql = "SELECT count(*) FROM webhook_deliveries WHERE status IN ('pending', 'held')";
    let mut pending = count(db, pending_sql).await?;
    while complete && pending > 0 && settle_from.elapsed() < SETTLE_LIMIT {
        tokio::time::sleep(Duration::from_millis(250)).await;
        pending = count(db, pending_sql).await?;
    }
    let settled_in = settle_from.elapsed();

    // Figures.
    let book = std::mem::take(&mut *lock(&receiver.book));
    let end = book.last_first_ok.unwrap_or(published.first);
    let elapsed = end.saturating_duration_since(published.first);
    let delivered = book.distinct;
    let rate = delivered as f64 / elapsed.as_secs_f64().max(1e-9);
    let statuses: Vec<(String, i64)> = sqlx::query_as(
        "SELECT status, count(*) FROM webhook_deliveries GROUP BY status ORDER BY status",
    )
    .fetch_all(&mut *db)
    .await
    .map_err(|e| e.to_string())?;
    let attempts = count(db, billing_tests::ATTEMPTS_RECORDED_SQL).await?;
    let requests = book.arrivals.len() as u64;
    let t = |at: Instant| at.saturating_duration_since(published.first).as_secs_f64();
    println!(
        "{}",
        row(
            "delivered (distinct key, sequence)",
            format!(
                "{} of {}",
                thousands(delivered as u64),
                thousands(run.events as u64)
            )
        )
    );
    println!(
        "{}",
        row(
            "elapsed (first publish to last)",
            format!("{:.2} s", elapsed.as_secs_f64())
        )
    );
    println!("{}", row("deliveries/s", format!("{rate:.0}")));
    println!(
        "{}",
        row(
            "receiver requests (keyed)",
            format!(
                "{} ({} answered 500 on purpose)",
                thousands(requests),
                thousands(book.refused)
            )
        )
    );
    println!(
        "{}",
        row("duplicates (2xx again)", thousands(book.duplicates))
    );
    println!(
        "{}",
        row(
            if run.ordering == "per_key" {
                "violations"
            } else {
                "out of order (no promise: info)"
            },
            book.violations.len().to_string()
        )
    );
    // The longest time without a new (key, sequence) answered 2xx: after a
    // kill, the dead process's leases expiring.
    let mut firsts: Vec<Instant> = book
        .succeeded
        .values()
        .flat_map(|done| done.values().copied())
        .collect();
    firsts.sort_unstable();
    if let Some((from, to)) = firsts
        .windows(2)
        .map(|w| (w[0], w[1]))
        .max_by_key(|(a, b)| b.saturating_duration_since(*a))
    {
        println!(
            "{}",
            row(
                "longest pause in new 2xx",
                format!(
                    "{:.2} s (t={:.2} s to {:.2} s)",
                    to.saturating_duration_since(from).as_secs_f64(),
                    t(from),
                    t(to)
                )
            )
        );
    }
    if let Some((at, pid, idx, requests, distinct)) = kill {
        println!(
            "{}",
            row(
                "kill",
                format!(
                    "dispatcher {idx} (pid {pid}) at {:.2} s, after {} requests, {} delivered",
                    t(at),
                    thousands(requests),
                    thousands(distinct as u64)
                )
            )
        );
    }
    println!(
        "{}",
        row(
            "in the store (with the warm-up)",
            format!(
                "{}; {} attempts recorded{}",
                statuses
                    .iter()
                    .map(|(s, n)| format!("{s} {n}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                thousands(attempts as u64),
                if complete {
                    format!(
                        ", settled {:.1} s after the last receipt",
                        settled_in.as_secs_f64()
                    )
                } else {
                    String::new()
                }
            )
        )
    );

    let mut errors = Vec::new();
    let unreadable = receiver.unreadable.load(Ordering::Relaxed);
    if unreadable > 0 {
        errors.push(format!(
            "{unreadable} delivered bodies unreadable or with an ordering_key but no sequence"
        ));
    }
    // Sequences outside 1..=n of a key, or keys never published.
    let strays: Vec<String> = book
        .succeeded
        .iter()
        .flat_map(|(k, done)| {
            let n = k
                .strip_prefix("key-")
                .and_then(|i| i.parse::<usize>().ok())
                .and_then(|i| per_key.get(i).copied())
                .unwrap_or(0);
            done.keys()
                .filter(move |s| **s < 1 || **s > n)
                .map(move |s| format!("{k}#{s}"))
        })
        .collect();
    if !strays.is_empty() {
        errors.push(format!(
            "{} deliveries of sequences never published: {}",
            strays.len(),
            strays
                .iter()
                .take(SHOWN)
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if complete && pending > 0 {
        errors.push(format!(
            "{pending} deliveries still pending in the store {} s after the last receipt",
            SETTLE_LIMIT.as_secs()
        ));
    }
    if run.ordering == "per_key" && !book.violations.is_empty() {
        println!("   violations (first {SHOWN}; t from the first publish):");
        for v in book.violations.iter().take(SHOWN) {
            println!(
                "     {} seq {} requested at t={:.3} s while seq {} was not answered 2xx \
                 ({} requests of it by then, all refused); the key's last requests before it: {}",
                v.key,
                v.sequence,
                t(v.at),
                v.sequence - 1,
                v.predecessor_requests,
                history(&book, &v.key, v.at, &t)
            );
        }
        let keys: std::collections::BTreeSet<&str> =
            book.violations.iter().map(|v| v.key.as_str()).collect();
        errors.push(format!(
            "{} violations on keys {}: first {}",
            book.violations.len(),
            keys.iter()
                .take(SHOWN)
                .copied()
                .collect::<Vec<_>>()
                .join(", "),
            book.violations
                .iter()
                .take(5)
                .map(|v| format!(
                    "{} seq {} before {} succeeded",
                    v.key,
                    v.sequence,
                    v.sequence - 1
                ))
                .collect::<Vec<_>>()
                .join("; ")
        ));
    }
    if run.kill_after.is_some() && kill.is_none() {
        errors.push("the kill never happened (too few requests)".to_owned());
    }
    if !complete {
        let missing = describe_missing(&book, &per_key, db, &t).await;
        errors.push(format!(
            "incomplete {} s after the last publish: {} of {} delivered; {missing}",
            cfg.limit.as_secs(),
            delivered,
            run.events
        ));
    }
    Ok(Outcome {
        expected: run.events,
        delivered,
        complete,
        elapsed,
        rate,
        duplicates: book.duplicates,
        violations: book.violations.len(),
        errors,
    })
}

/// A key's last requests (up to 5) before `at`, as `seq:2xx|500@t`.
fn history(book: &Book, key: &str, at: Instant, t: &dyn Fn(Instant) -> f64) -> String {
    let mut last: Vec<String> = book
        .arrivals
        .iter()
        .filter(|a| a.key == key && a.at < at)
        .map(|a| {
            format!(
                "{}:{}@{:.3}",
                a.sequence,
                if a.ok { "2xx" } else { "500" },
                t(a.at)
            )
        })
        .collect();
    let n = last.len();
    last.drain(..n.saturating_sub(5));
    last.join(" ")
}

/// A delivery's row as `describe_missing` shows it: reference, sequence,
/// status, attempts, due time, lease owner and end (ms since the epoch).
type StoreRow = (
    String,
    i64,
    String,
    i64,
    Option<i64>,
    Option<String>,
    Option<i64>,
);

/// Prints what is missing of an incomplete run, key by key, with the
/// store's rows of each key's first missing sequence and its predecessor;
/// returns a one-line summary.
async fn describe_missing(
    book: &Book,
    per_key: &[i64],
    db: &mut PgConnection,
    t: &dyn Fn(Instant) -> f64,
) -> String {
    let now = domain::Timestamp::now().millis();
    let mut summary = Vec::new();
    println!("   missing (first {SHOWN} keys):");
    let empty = BTreeMap::new();
    let mut shown = 0;
    for (i, n) in per_key.iter().enumerate() {
        let key = key_name(i);
        let done = book.succeeded.get(&key).unwrap_or(&empty);
        let missing: Vec<i64> = (1..=*n).filter(|s| !done.contains_key(s)).collect();
        let Some(first) = missing.first().copied() else {
            continue;
        };
        summary.push(format!(
            "{key} from seq {first} ({} missing)",
            missing.len()
        ));
        if shown >= SHOWN {
            continue;
        }
        shown += 1;
        let requested = |s: i64| book.requested.get(&(key.clone(), s)).copied().unwrap_or(0);
        println!(
            "     {key}: {} of {n} missing, the first seq {first} (requested {} times; seq {} \
             requested {} times); last requests: {}",
            missing.len(),
            requested(first),
            first - 1,
            requested(first - 1),
            history(book, &key, Instant::now(), t)
        );
        let rows: Vec<StoreRow> = sqlx::query_as(
            "SELECT delivery_ref, sequence, status, attempt_count, next_attempt_at, \
                 lease_owner, lease_until FROM webhook_deliveries \
                 WHERE ordering_key = $1 AND sequence IN ($2, $3) ORDER BY sequence",
        )
        .bind(&key)
        .bind(first - 1)
        .bind(first)
        .fetch_all(&mut *db)
        .await
        .unwrap_or_default();
        for (r, s, status, attempts, due, owner, until) in rows {
            println!(
                "       store: seq {s} {r} {status}, {attempts} attempts, due {}, lease {}",
                due.map_or("none (waiting)".to_owned(), |d| format!("{:+} ms", d - now)),
                match (owner, until) {
                    (Some(o), Some(u)) => format!("{o} until {:+} ms", u - now),
                    _ => "none".to_owned(),
                }
            );
        }
        let counter: Option<(i64, i64)> = sqlx::query_as(
            "SELECT last_sequence, accepted_through FROM ordering_keys WHERE ordering_key = $1",
        )
        .bind(&key)
        .fetch_optional(&mut *db)
        .await
        .unwrap_or_default();
        if let Some((last, through)) = counter {
            println!("       ordering_keys: last_sequence {last}, accepted_through {through}");
        }
    }
    format!(
        "{} keys incomplete: {}",
        summary.len(),
        summary
            .into_iter()
            .take(SHOWN)
            .collect::<Vec<_>>()
            .join(", ")
    )
}

// ------------------------------------------------------------------ cases

#[derive(Default)]
struct Summary {
    verdicts: Vec<String>,
    errors: Vec<String>,
}

fn verdict(summary: &mut Summary, pass: bool, fail_word: &str, text: String) {
    let line = format!("{:<4} {text}", if pass { "PASS" } else { fail_word });
    println!("   -> {line}");
    summary.verdicts.push(line);
}

fn keep_errors(summary: &mut Summary, label: &str, outcome: &Outcome) {
    for e in &outcome.errors {
        println!("   !! {e}");
        summary.errors.push(format!("{label}: {e}"));
    }
}

/// `kill`: a per_key endpoint, a receiver refusing some, a dispatcher
/// killed midway.
async fn kill_case(bin: &Path, cfg: &Config, summary: &mut Summary) {
    let run = Run {
        label: "kill",
        ordering: "per_key",
        events: cfg.events,
        keys: cfg.keys,
        fail_p: f64::from(cfg.fail_percent) / 100.0,
        kill_after: Some(cfg.kill_after),
    };
    println!();
    println!(
        "== kill: per_key endpoint, {} events over {} keys, receiver answers 500 to {} % at \
         random, {} dispatchers, SIGKILL to one after {} requests; retry schedule {}",
        thousands(run.events as u64),
        run.keys,
        cfg.fail_percent,
        cfg.dispatchers,
        thousands(cfg.kill_after),
        cfg.retry_schedule
    );
    let o = run_fleet(bin, cfg, &run).await;
    verdict(
        summary,
        o.complete,
        "FAIL",
        format!(
            "kill: every event delivered: {} of {} in {:.2} s = {:.0} deliveries/s",
            thousands(o.delivered as u64),
            thousands(o.expected as u64),
            o.elapsed.as_secs_f64(),
            o.rate
        ),
    );
    verdict(
        summary,
        o.violations == 0 && o.delivered > 0,
        "FAIL",
        format!(
            "kill: no sequence requested before its predecessor was answered 2xx: {} violations \
             ({} duplicates, at-least-once, allowed)",
            o.violations, o.duplicates
        ),
    );
    keep_errors(summary, run.label, &o);
}

/// `cost`: the same load to an unordered endpoint, then to a per_key one.
async fn cost_case(bin: &Path, cfg: &Config, summary: &mut Summary) {
    let mut rates = Vec::new();
    for (label, ordering) in [("cost/unordered", "none"), ("cost/per_key", "per_key")] {
        let run = Run {
            label,
            ordering,
            events: cfg.cost_events,
            keys: cfg.cost_keys,
            fail_p: 0.0,
            kill_after: None,
        };
        println!();
        println!(
            "== {label}: endpoint ordering {ordering}, {} events over {} keys, receiver always \
             204, {} dispatchers",
            thousands(run.events as u64),
            run.keys,
            cfg.dispatchers
        );
        let o = run_fleet(bin, cfg, &run).await;
        if ordering == "per_key" {
            verdict(
                summary,
                o.violations == 0 && o.delivered > 0,
                "FAIL",
                format!(
                    "{label}: no sequence requested before its predecessor was answered 2xx: {} \
                     violations",
                    o.violations
                ),
            );
        }
        keep_errors(summary, label, &o);
        rates.push((o.complete, o.rate, o.delivered));
    }
    let [(u_ok, u_rate, _), (o_ok, o_rate, _)] = rates[..] else {
        return;
    };
    let ratio = o_rate / u_rate.max(1e-9);
    println!();
    println!("== cost of order");
    println!("{}", row("unordered deliveries/s", format!("{u_rate:.0}")));
    println!("{}", row("per_key deliveries/s", format!("{o_rate:.0}")));
    println!(
        "{}",
        row("ratio per_key / unordered", format!("{ratio:.2}"))
    );
    verdict(
        summary,
        u_ok && o_ok && ratio >= GOAL_RATIO,
        "MISS",
        format!(
            "cost: per_key {o_rate:.0}/s vs unordered {u_rate:.0}/s, ratio {ratio:.2} (goal >= \
             {GOAL_RATIO})"
        ),
    );
}

// ------------------------------------------------------------------- main

async fn bench(cfg: Config, bin: PathBuf) -> ExitCode {
    println!(
        "ordering benchmark: {} (billing api + {} billing dispatcher over PostgreSQL, RabbitMQ, \
         Redis on 127.0.0.1); {} cores",
        bin.display(),
        cfg.dispatchers,
        std::thread::available_parallelism().map_or(0, |p| p.get())
    );
    remove_leftovers(NAME_PREFIX).await;
    let mut summary = Summary::default();
    for case in &cfg.cases {
        match case.as_str() {
            "kill" => kill_case(&bin, &cfg, &mut summary).await,
            "cost" => cost_case(&bin, &cfg, &mut summary).await,
            _ => {}
        }
    }
    if CLEANUP_FAILED.load(Ordering::SeqCst) {
        summary.errors.push("cleanup failed (see above)".to_owned());
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
