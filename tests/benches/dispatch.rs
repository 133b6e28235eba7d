//! Benchmark of the webhook dispatcher in embedded mode (SQLite store, the
//! store's event queue), in one process: the dispatcher, the store and the
//! local receivers share this machine's cores.
//!
//! 1. Throughput. `BENCH_EVENTS` events (default 20,000), spread round-robin
//!    over `BENCH_ENDPOINTS` endpoints (default 8, each subscribed to its own
//!    event type so that every event makes exactly one delivery), each
//!    endpoint with its own counting receiver (axum, answers 204, checks
//!    every signature, keeps no bodies).
//!    - drain: the events are first accepted into the embedded queue
//!      (`dispatcher::intake::accept`, timed on its own), then the dispatcher
//!      starts; measured from its start until the receivers counted every
//!      delivery, and until no delivery is left pending in the store (every
//!      result recorded as `succeeded`).
//!    - live: the dispatcher runs while the events are published; measured
//!      from the first publish until the receivers counted every delivery.
//!      In both, the events' envelopes are serialised before the clock
//!      starts (as the bare loop's bodies are): only their acceptance is
//!      measured.
//!    - bare: a plain reqwest loop POSTs the same kind of signed bodies
//!      (shaped, serialised and signed with `domain::webhook`) to the same
//!      receivers with the dispatcher's concurrency (per endpoint
//!      `max_in_flight_per_endpoint`, in total at most `max_in_flight`).
//! 2. Latency. One endpoint; events published at `BENCH_RATE` per second
//!    (default 1,000) for `BENCH_RATE_SECONDS` (default 10) with a tokio
//!    interval; event time = when its publish starts, receipt time = when
//!    the receiver got the request (matched by the body's `event_ref`).
//! 3. Memory. `BENCH_BACKLOG` deliveries (default 1,000,000) made to wait for
//!    a retry about an hour ahead, then the process's resident memory
//!    (`VmRSS`) before, during `BENCH_BACKLOG_SECONDS` (default 10) of the
//!    dispatcher running over that backlog (with a light live load to a
//!    second, healthy endpoint), and after. The backlog is written through
//!    the store's own dispatch API (`write_events`, the intake's path, then
//!    `claim_due_deliveries`, `record_attempts`), in chunks, without HTTP:
//!    the rows are those a failed first attempt leaves (a `failed` attempt
//!    answered 500, the delivery `pending` with its next attempt due in
//!    48-72 min), but no request was sent.
//! 4. Store costs. The store calls of `BENCH_EVENTS` deliveries, timed
//!    alone (no HTTP): the intake with its fan-out, claims of 256, records
//!    of 256 results. With the bare loop's CPU time per request, it prints
//!    the ceiling those costs alone put on the ratios (`store_costs`).
//!
//! Targets are printed beside the figures with PASS or MISS. The binary
//! fails only when something went wrong (a bad signature, a transport
//! error, a delivery never received), not on a missed target.
//!
//! Other settings: `BENCH_PUBLISHERS` (concurrent publishing tasks, default
//! 256, as many as the AMQP consumer's concurrent handlers: one per message
//! of its prefetch), `BENCH_BACKLOG_CHUNK` (deliveries per seeding transaction, default
//! 5,000), `BENCH_PHASES` (any of `throughput,latency,memory,store`,
//! default all), `BILLING_STORE__SYNCHRONOUS` (`full`, the service's
//! default, or `normal`: the SQLite durability, as the service reads it).
//! For experiments only, `BENCH_MAX_IN_FLIGHT`, `BENCH_PER_ENDPOINT`,
//! `BENCH_CLAIM_BATCH` and `BENCH_POLL_MS` override the harness's
//! dispatcher settings (`TestApp::dispatch_settings`); the settings used are
//! printed.
//!
//! Run with `cargo bench -p billing-tests --bench dispatch`.

/// The allocator of the `billing` binary, so that the figures are its own.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::serve::ListenerExt;
use billing_tests::{env_num, ms, percentile_ms, Backend, TestApp};
use domain::webhook::body::DeliveredBody;
use domain::webhook::retry::RetrySchedule;
use domain::webhook::signing::{self, SigningSecret};
use domain::webhook::{catalogue, shaping, AttemptStatus, DeliveryStatus};
use domain::{Prefix, Ref, Timestamp};
use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use store::fanout::EventRow;
use store::{AttemptResult, Store};

const TARGET_RATE: f64 = 5_000.0;
const TARGET_RATIO: f64 = 0.5;
const TARGET_P99_MS: f64 = 50.0;
const TARGET_RSS_MB: f64 = 200.0;
/// Longest wait for a phase to complete before it is reported incomplete.
const PHASE_LIMIT: Duration = Duration::from_secs(300);
/// Owner name of the leases the backlog seeding takes and releases.
const SEEDER: &str = "bench-seeder";
/// Rate of the live load to the healthy endpoint during the memory phase.
const BACKLOG_LIVE_RATE: u64 = 200;

struct Config {
    events: usize,
    endpoints: usize,
    publishers: usize,
    rate: u64,
    rate_seconds: u64,
    backlog: usize,
    backlog_chunk: usize,
    backlog_seconds: u64,
    /// Phases to run (`BENCH_PHASES`, comma-separated; default all).
    phases: Vec<String>,
}

impl Config {
    fn runs(&self, phase: &str) -> bool {
        self.phases.iter().any(|p| p == phase)
    }
}

fn config() -> Result<Config, String> {
    Ok(Config {
        events: env_num("BENCH_EVENTS", 20_000)?,
        endpoints: env_num("BENCH_ENDPOINTS", 8)?,
        publishers: env_num("BENCH_PUBLISHERS", 256)?,
        rate: env_num("BENCH_RATE", 1_000)?,
        rate_seconds: env_num("BENCH_RATE_SECONDS", 10)?,
        backlog: env_num("BENCH_BACKLOG", 1_000_000)?,
        backlog_chunk: env_num("BENCH_BACKLOG_CHUNK", 5_000)?,
        backlog_seconds: env_num("BENCH_BACKLOG_SECONDS", 10)?,
        phases: std::env::var("BENCH_PHASES")
            .unwrap_or_else(|_| "throughput,latency,memory,store".to_owned())
            .split(',')
            .map(|p| p.trim().to_owned())
            .collect(),
    })
}

// ---------------------------------------------------------------- receivers

/// What the receivers of one phase counted.
#[derive(Default)]
struct Tally {
    count: AtomicU64,
    target: AtomicU64,
    /// When `count` reached `target`.
    reached: Mutex<Option<Instant>>,
    bad_signatures: AtomicU64,
    /// `(event_ref, receipt time)` of every request, when recording.
    receipts: Option<Mutex<Vec<(String, Instant)>>>,
}

impl Tally {
    fn counting() -> Arc<Tally> {
        Arc::new(Tally::default())
    }

    fn recording() -> Arc<Tally> {
        Arc::new(Tally {
            receipts: Some(Mutex::default()),
            ..Tally::default()
        })
    }

    /// Starts counting afresh towards `target`.
    fn arm(&self, target: u64) {
        *self.reached.lock().expect("lock") = None;
        self.count.store(0, Ordering::SeqCst);
        self.bad_signatures.store(0, Ordering::SeqCst);
        if let Some(r) = &self.receipts {
            r.lock().expect("lock").clear();
        }
        self.target.store(target, Ordering::SeqCst);
    }

    fn count(&self) -> u64 {
        self.count.load(Ordering::SeqCst)
    }

    fn bad(&self) -> u64 {
        self.bad_signatures.load(Ordering::SeqCst)
    }

    /// When the target was reached, waiting at most `limit`.
    async fn wait(&self, limit: Duration) -> Option<Instant> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(at) = *self.reached.lock().expect("lock") {
                return Some(at);
            }
            if Instant::now() > deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    fn take_receipts(&self) -> Vec<(String, Instant)> {
        self.receipts
            .as_ref()
            .map(|r| std::mem::take(&mut *r.lock().expect("lock")))
            .unwrap_or_default()
    }
}

struct Hook {
    status: StatusCode,
    /// The endpoint's signing secret, once the endpoint exists.
    secret: OnceLock<SigningSecret>,
    tally: Arc<Tally>,
}

struct Receiver {
    url: String,
    hook: Arc<Hook>,
}

impl Receiver {
    async fn start(status: u16, tally: Arc<Tally>) -> Receiver {
        let hook = Arc::new(Hook {
            status: StatusCode::from_u16(status).expect("status"),
            secret: OnceLock::new(),
            tally,
        });
        let app = axum::Router::new()
            .fallback(receive)
            .with_state(hook.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Receiver {
            url: format!("http://{addr}/hook"),
            hook,
        }
    }

    fn set_secret(&self, wire: &str) -> SigningSecret {
        let secret = SigningSecret::parse(wire).expect("a whsec_ secret");
        let _ = self.hook.secret.set(secret.clone());
        secret
    }
}

async fn receive(State(hook): State<Arc<Hook>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let at = Instant::now();
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    };
    let tally = &hook.tally;
    let signed = hook.secret.get().is_some_and(|secret| {
        let timestamp = header("webhook-timestamp").parse::<i64>().unwrap_or(-1);
        signing::verify(
            secret,
            header("webhook-id"),
            timestamp,
            &body,
            header("webhook-signature"),
        )
    });
    if !signed {
        tally.bad_signatures.fetch_add(1, Ordering::SeqCst);
    }
    if let (Some(receipts), Some(event_ref)) = (&tally.receipts, event_ref_of(&body)) {
        receipts.lock().expect("lock").push((event_ref, at));
    }
    let n = tally.count.fetch_add(1, Ordering::SeqCst) + 1;
    if n == tally.target.load(Ordering::SeqCst) {
        let mut reached = tally.reached.lock().expect("lock");
        if reached.is_none() {
            *reached = Some(at);
        }
    }
    hook.status
}

/// The body's `event_ref` (the first field of a delivered body).
fn event_ref_of(body: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?;
    let rest = text.split_once("\"event_ref\":\"")?.1;
    Some(rest.split_once('"')?.0.to_owned())
}

// ------------------------------------------------------------------ helpers

/// An event type with its newest DTO version and example data.
struct Kind {
    name: &'static str,
    version: u32,
    data: serde_json::Value,
}

fn kinds() -> Vec<Kind> {
    // Other systems' disputes, payouts and participations are projected
    // before they are accepted (their data must name real resources): this
    // benchmark measures delivery, so it publishes the other types.
    catalogue::all()
        .iter()
        .filter(|t| !t.diagnostic && !catalogue::is_projected(t.name))
        .map(|t| {
            let version = t.dto_versions.iter().copied().max().unwrap_or(1);
            Kind {
                name: t.name,
                version,
                data: catalogue::example(t.name, version).expect("catalogue example"),
            }
        })
        .collect()
}

/// The body the dispatcher sends for an event of `kind` (no data profile
/// grant, so the classified fields are removed).
fn delivered_body(kind: &Kind, event_ref: &Ref, app: &TestApp) -> String {
    let data = shaping::shape(kind.name, kind.version, &kind.data, None);
    DeliveredBody::new(
        event_ref.as_str(),
        kind.name,
        kind.version,
        Timestamp::now(),
        &app.sandbox.environment_ref,
        &data,
    )
    .to_json()
}

/// The envelopes of `n` events, event `i` of type `kinds[i % kinds.len()]`,
/// dealt to `publishers` publishing tasks. Built before a phase's clock
/// starts, as the bare loop builds its bodies: a producer's serialising is
/// not the dispatcher's work.
fn envelopes(app: &TestApp, kinds: &[Kind], n: usize, publishers: usize) -> Vec<Vec<String>> {
    (0..publishers)
        .map(|p| {
            (p..n)
                .step_by(publishers)
                .map(|i| {
                    let k = &kinds[i % kinds.len()];
                    app.envelope(k.name, k.data.clone()).1
                })
                .collect()
        })
        .collect()
}

/// Publishes the envelopes, one task per publisher; returns the time it
/// took.
async fn publish_all(app: &Arc<TestApp>, envelopes: Vec<Vec<String>>) -> Duration {
    let started = Instant::now();
    let tasks: Vec<_> = envelopes
        .into_iter()
        .map(|mine| {
            let app = app.clone();
            tokio::spawn(async move {
                for envelope in mine {
                    app.accept(&envelope).await;
                }
            })
        })
        .collect();
    for t in futures::future::join_all(tasks).await {
        t.expect("publisher completes");
    }
    started.elapsed()
}

/// When no event waits for fan-out and no delivery is pending any more.
async fn wait_recorded(store: &Store, limit: Duration) -> Option<Instant> {
    let deadline = Instant::now() + limit;
    loop {
        let pending_events = store
            .dispatch()
            .pending_events(1)
            .await
            .map(|e| e.len())
            .unwrap_or(1);
        let pending = store
            .dispatch()
            .next_due_at()
            .await
            .map(|t| t.is_some())
            .unwrap_or(true);
        if pending_events == 0 && !pending {
            return Some(Instant::now());
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The harness's dispatcher settings, with the overrides of
/// `BENCH_MAX_IN_FLIGHT`, `BENCH_PER_ENDPOINT`, `BENCH_CLAIM_BATCH` and
/// `BENCH_POLL_MS` (for experiments; none is set by default).
fn settings_for(app: &TestApp, schedule: &str) -> dispatcher::DispatchSettings {
    let mut s = app.dispatch_settings(schedule);
    let get = |name: &str| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .filter(|v| *v > 0)
    };
    if let Some(v) = get("BENCH_MAX_IN_FLIGHT") {
        s.max_in_flight = v as usize;
    }
    if let Some(v) = get("BENCH_PER_ENDPOINT") {
        s.max_in_flight_per_endpoint = v as usize;
    }
    if let Some(v) = get("BENCH_CLAIM_BATCH") {
        s.claim_batch = v as u32;
    }
    if let Some(v) = get("BENCH_POLL_MS") {
        s.poll_interval = Duration::from_millis(v);
    }
    s
}

/// CPU time of the whole process (every thread) at one moment.
#[derive(Clone, Copy)]
struct Cpu(Duration, Instant);

impl Cpu {
    /// From `/proc/self/stat` (`utime + stime`, in ticks of 1/100 s, the
    /// USER_HZ of Linux).
    fn now() -> Cpu {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.split_whitespace().collect())
            .unwrap_or_default();
        let tick = |i: usize| {
            fields
                .get(i)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        Cpu(
            Duration::from_millis((tick(11) + tick(12)) * 10),
            Instant::now(),
        )
    }

    /// Cores kept busy since `self`, and CPU time per item of `n`.
    fn since(self, n: usize) -> String {
        let now = Cpu::now();
        let cpu = now.0.saturating_sub(self.0);
        let wall = now.1 - self.1;
        format!(
            "CPU {:.2} of {} cores, {:.0} us per item",
            cpu.as_secs_f64() / wall.as_secs_f64(),
            std::thread::available_parallelism().map_or(0, |p| p.get()),
            cpu.as_secs_f64() * 1e6 / n.max(1) as f64
        )
    }

    /// CPU time per item of `n` since `self`, in microseconds.
    fn per_item_us(self, n: usize) -> f64 {
        Cpu::now().0.saturating_sub(self.0).as_secs_f64() * 1e6 / n.max(1) as f64
    }
}

/// Resident and peak resident memory of this process, in MiB.
fn rss_mb() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or(f64::NAN, |kb| kb / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn rate(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64()
}

/// Target verdicts and errors, printed at the end.
#[derive(Default)]
struct Summary {
    verdicts: Vec<String>,
    errors: Vec<String>,
    /// The bare loop's CPU time per request (throughput phase), for the
    /// store phase's ceiling.
    bare_us: Option<f64>,
}

impl Summary {
    fn check(&mut self, what: &str, figure: String, target: &str, pass: bool) {
        let line = format!(
            "{:<4} {what}: {figure} (target {target})",
            if pass { "PASS" } else { "MISS" }
        );
        println!("  -> {line}");
        self.verdicts.push(line);
    }

    fn error(&mut self, e: String) {
        println!("  !! {e}");
        self.errors.push(e);
    }
}

// --------------------------------------------------------------- throughput

struct Endpoint {
    receiver: Receiver,
    secret: SigningSecret,
    kind: usize,
}

async fn throughput(cfg: &Config, summary: &mut Summary) {
    let all_kinds = kinds();
    if cfg.endpoints > all_kinds.len() {
        summary.error(format!(
            "BENCH_ENDPOINTS is at most {} (one event type each)",
            all_kinds.len()
        ));
        return;
    }
    let kinds: Arc<Vec<Kind>> = Arc::new(all_kinds.into_iter().take(cfg.endpoints).collect());
    let n = cfg.events;
    let app = Arc::new(TestApp::spawn(Backend::Sqlite).await);
    let tally = Tally::counting();
    let mut endpoints = Vec::new();
    for (i, kind) in kinds.iter().enumerate() {
        let receiver = Receiver::start(204, tally.clone()).await;
        let (_, secret) = app
            .subscribed_endpoint(&receiver.url, kind.name, kind.version)
            .await;
        let secret = receiver.set_secret(&secret);
        endpoints.push(Endpoint {
            receiver,
            secret,
            kind: i,
        });
    }
    let settings = settings_for(&app, "0s,5s");
    let per_endpoint = settings.max_in_flight_per_endpoint;
    let concurrency = settings.max_in_flight.min(per_endpoint * cfg.endpoints);
    println!(
        "== 1. throughput: {n} events over {} endpoints (one event type each, so {n} deliveries), receivers answer 204",
        cfg.endpoints
    );
    println!(
        "   dispatcher settings: max_in_flight {}, max_in_flight_per_endpoint {per_endpoint}, claim_batch {}, poll_interval {} ms, timeout {} s",
        settings.max_in_flight,
        settings.claim_batch,
        settings.poll_interval.as_millis(),
        settings.timeout.as_secs()
    );

    // (a) drain: accept everything first, then start the dispatcher.
    tally.arm(n as u64);
    let published = envelopes(&app, &kinds, n, cfg.publishers);
    let cpu = Cpu::now();
    let took = publish_all(&app, published).await;
    println!(
        "   publish {n} events into the embedded queue ({} tasks, no dispatcher): {:.2} s = {:.0} events/s; {}",
        cfg.publishers,
        took.as_secs_f64(),
        rate(n, took),
        cpu.since(n)
    );
    let cpu = Cpu::now();
    let started = Instant::now();
    let dispatcher = app.start_dispatcher(settings.clone());
    let drain = match tally.wait(PHASE_LIMIT).await {
        Some(at) => Some(at - started),
        None => {
            summary.error(format!("drain: received {} of {n}", tally.count()));
            None
        }
    };
    let recorded = wait_recorded(&app.store, PHASE_LIMIT)
        .await
        .map(|at| at - started);
    let drain_cpu = cpu.since(n);
    dispatcher.shutdown().await;
    let received_total = tally.count();
    if tally.bad() > 0 || received_total != n as u64 {
        summary.error(format!(
            "drain: {received_total} requests for {n} deliveries, {} with a bad signature",
            tally.bad()
        ));
    }
    let drain_rate = drain.map(|d| rate(n, d));
    if let Some(d) = drain {
        println!(
            "   (a) drain, dispatcher start -> receivers counted {n}: {:.2} s = {:.0} deliveries/s",
            d.as_secs_f64(),
            rate(n, d)
        );
    }
    if let Some(d) = recorded {
        println!(
            "   (a) drain, dispatcher start -> all {n} recorded succeeded in the store: {:.2} s = {:.0} deliveries/s; {drain_cpu}",
            d.as_secs_f64(),
            rate(n, d)
        );
    }

    // (a') live: the dispatcher runs while the events are published.
    tally.arm(n as u64);
    let published = envelopes(&app, &kinds, n, cfg.publishers);
    let dispatcher = app.start_dispatcher(settings.clone());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let cpu = Cpu::now();
    let started = Instant::now();
    let took = publish_all(&app, published).await;
    let live = tally.wait(PHASE_LIMIT).await.map(|at| at - started);
    let live_recorded = wait_recorded(&app.store, PHASE_LIMIT)
        .await
        .map(|at| at - started);
    let live_cpu = cpu.since(n);
    dispatcher.shutdown().await;
    if live.is_none() || tally.bad() > 0 {
        summary.error(format!(
            "live: received {} of {n}, {} with a bad signature",
            tally.count(),
            tally.bad()
        ));
    }
    let live_rate = live.map(|d| rate(n, d));
    if let (Some(d), Some(r)) = (live, live_recorded) {
        println!(
            "   (a) live, first publish -> receivers counted {n}: {:.2} s = {:.0} deliveries/s (publishing took {:.2} s; all recorded after {:.2} s = {:.0}/s); {live_cpu}",
            d.as_secs_f64(),
            rate(n, d),
            took.as_secs_f64(),
            r.as_secs_f64(),
            rate(n, r)
        );
    }

    // (b) bare reqwest loop, same receivers, same concurrency.
    let bare_rate = bare_loop(
        &app,
        &kinds,
        &endpoints,
        n,
        concurrency,
        settings.timeout,
        &tally,
        summary,
    )
    .await;

    if let Some(r) = drain_rate {
        summary.check(
            "embedded drain throughput (until received)",
            format!("{r:.0} deliveries/s"),
            ">= 5000/s",
            r >= TARGET_RATE,
        );
    }
    if let Some(d) = recorded {
        let r = rate(n, d);
        summary.check(
            "embedded drain throughput (until recorded succeeded)",
            format!("{r:.0} deliveries/s"),
            ">= 5000/s",
            r >= TARGET_RATE,
        );
    }
    if let Some(r) = live_rate {
        summary.check(
            "embedded live throughput (first publish until received)",
            format!("{r:.0} deliveries/s"),
            ">= 5000/s",
            r >= TARGET_RATE,
        );
    }
    if let (Some(a), Some(b)) = (drain_rate, bare_rate) {
        summary.check(
            "ratio dispatcher drain / bare reqwest",
            format!("{:.2} ({a:.0} / {b:.0})", a / b),
            ">= 0.5",
            a / b >= TARGET_RATIO,
        );
    }
    if let (Some(a), Some(b)) = (live_rate, bare_rate) {
        summary.check(
            "ratio dispatcher live / bare reqwest",
            format!("{:.2} ({a:.0} / {b:.0})", a / b),
            ">= 0.5",
            a / b >= TARGET_RATIO,
        );
    }
}

/// One endpoint's share of the bare loop: pre-built bodies and their ids.
struct BareTarget {
    url: String,
    secret: SigningSecret,
    bodies: Vec<(String, String)>,
    next: AtomicUsize,
}

#[allow(clippy::too_many_arguments)]
async fn bare_loop(
    app: &TestApp,
    kinds: &[Kind],
    endpoints: &[Endpoint],
    n: usize,
    concurrency: usize,
    timeout: Duration,
    tally: &Arc<Tally>,
    summary: &mut Summary,
) -> Option<f64> {
    let e = endpoints.len();
    let targets: Arc<Vec<BareTarget>> = Arc::new(
        endpoints
            .iter()
            .enumerate()
            .map(|(i, ep)| {
                let kind = &kinds[ep.kind];
                let count = (n + e - 1 - i) / e;
                let bodies = (0..count)
                    .map(|_| {
                        let body = delivered_body(kind, &Ref::generate(Prefix::Event), app);
                        (Ref::generate(Prefix::WebhookDelivery).into_string(), body)
                    })
                    .collect();
                BareTarget {
                    url: ep.receiver.url.clone(),
                    secret: ep.secret.clone(),
                    bodies,
                    next: AtomicUsize::new(0),
                }
            })
            .collect(),
    );
    // Configured like the dispatcher's client (`sending.rs`).
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .pool_max_idle_per_host(64)
        .tcp_nodelay(true)
        .build()
        .expect("client");
    let errors = Arc::new(AtomicU64::new(0));
    tally.arm(n as u64);
    let cpu = Cpu::now();
    let started = Instant::now();
    let tasks: Vec<_> = (0..concurrency)
        .map(|task| {
            let (targets, client, errors) = (targets.clone(), client.clone(), errors.clone());
            tokio::spawn(async move {
                let t = &targets[task % targets.len()];
                loop {
                    let i = t.next.fetch_add(1, Ordering::Relaxed);
                    let Some((id, body)) = t.bodies.get(i) else {
                        return;
                    };
                    let timestamp = Timestamp::now().millis() / 1000;
                    let signature = signing::signature_header(
                        std::slice::from_ref(&t.secret),
                        id,
                        timestamp,
                        body.as_bytes(),
                    );
                    let sent = client
                        .post(&t.url)
                        .timeout(timeout)
                        .header("content-type", "application/json")
                        .header("webhook-id", id.as_str())
                        .header("webhook-timestamp", timestamp.to_string())
                        .header("webhook-signature", signature)
                        .body(body.clone())
                        .send()
                        .await;
                    let ok = match sent {
                        Ok(r) => r.status().is_success() && r.bytes().await.is_ok(),
                        Err(_) => false,
                    };
                    if !ok {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for t in futures::future::join_all(tasks).await {
        t.expect("bare task completes");
    }
    let done = tally.wait(Duration::from_secs(5)).await;
    summary.bare_us = Some(cpu.per_item_us(n));
    let bare_cpu = cpu.since(n);
    let errors = errors.load(Ordering::Relaxed);
    if errors > 0 || tally.bad() > 0 || done.is_none() {
        summary.error(format!(
            "bare: {errors} failed requests, {} bad signatures, {} received of {n}",
            tally.bad(),
            tally.count()
        ));
    }
    let d = done? - started;
    println!(
        "   (b) bare reqwest loop, {concurrency} tasks ({} per endpoint), same receivers: {:.2} s = {:.0} deliveries/s; {bare_cpu}",
        concurrency / e.max(1),
        d.as_secs_f64(),
        rate(n, d)
    );
    Some(rate(n, d))
}

// ------------------------------------------------------------------ latency

async fn latency(cfg: &Config, summary: &mut Summary) {
    let app = Arc::new(TestApp::spawn(Backend::Sqlite).await);
    let tally = Tally::recording();
    let receiver = Receiver::start(204, tally.clone()).await;
    let kind = kinds()
        .into_iter()
        .find(|k| k.name == "payment.succeeded")
        .expect("type");
    let (_, secret) = app
        .subscribed_endpoint(&receiver.url, kind.name, kind.version)
        .await;
    receiver.set_secret(&secret);
    let settings = settings_for(&app, "0s,5s");
    let total = (cfg.rate * cfg.rate_seconds) as usize;
    println!();
    println!(
        "== 2. latency: {} events/s for {} s to one endpoint (receiver answers 204); poll_interval {} ms",
        cfg.rate,
        cfg.rate_seconds,
        settings.poll_interval.as_millis()
    );
    let dispatcher = app.start_dispatcher(settings);
    // Warm-up: one delivery opens the connection and fills the caches.
    tally.arm(1);
    app.publish(kind.name, kind.data.clone()).await;
    if tally.wait(Duration::from_secs(10)).await.is_none() {
        summary.error("latency: the warm-up delivery never arrived".to_owned());
    }
    tally.arm(total as u64);
    let name = kind.name;
    let data = Arc::new(kind.data);
    let mut interval = tokio::time::interval(Duration::from_nanos(1_000_000_000 / cfg.rate));
    let mut tasks = Vec::with_capacity(total);
    let cpu = Cpu::now();
    let started = Instant::now();
    for _ in 0..total {
        interval.tick().await;
        let (app, data) = (app.clone(), data.clone());
        tasks.push(tokio::spawn(async move {
            let at = Instant::now();
            let event_ref = app.publish(name, (*data).clone()).await;
            (event_ref, at)
        }));
    }
    let spawned = started.elapsed();
    let mut published: HashMap<String, Instant> = HashMap::with_capacity(total);
    for t in futures::future::join_all(tasks).await {
        let (event_ref, at) = t.expect("publish task completes");
        published.insert(event_ref, at);
    }
    let publishing = started.elapsed();
    if tally.wait(Duration::from_secs(60)).await.is_none() {
        summary.error(format!("latency: received {} of {total}", tally.count()));
    }
    let latency_cpu = cpu.since(total);
    dispatcher.shutdown().await;
    let mut latencies: Vec<Duration> = Vec::with_capacity(total);
    let mut seen = std::collections::HashSet::new();
    for (event_ref, at) in tally.take_receipts() {
        if let Some(t0) = published.get(&event_ref) {
            if seen.insert(event_ref) {
                latencies.push(at.saturating_duration_since(*t0));
            }
        }
    }
    latencies.sort_unstable();
    if tally.bad() > 0 {
        summary.error(format!("latency: {} bad signatures", tally.bad()));
    }
    println!(
        "   published {total} events in {:.2} s (ticks) / {:.2} s (last insert done) = {:.0} events/s; received {} distinct; {latency_cpu}",
        spawned.as_secs_f64(),
        publishing.as_secs_f64(),
        rate(total, spawned),
        latencies.len()
    );
    let p99 = percentile_ms(&latencies, 99.0);
    println!(
        "   event-to-receipt: p50 {}, p90 {}, p99 {}, max {}",
        ms(percentile_ms(&latencies, 50.0)),
        ms(percentile_ms(&latencies, 90.0)),
        ms(p99),
        ms(latencies.last().map(|d| d.as_secs_f64() * 1000.0))
    );
    if let Some(p99) = p99 {
        summary.check(
            &format!("p99 event-to-receipt at {} events/s", cfg.rate),
            format!("{p99:.1} ms"),
            "< 50 ms",
            p99 < TARGET_P99_MS && latencies.len() == total,
        );
    }
}

// ------------------------------------------------------------------- memory

async fn memory(cfg: &Config, summary: &mut Summary) {
    let app = Arc::new(TestApp::spawn(Backend::Sqlite).await);
    let failing_tally = Tally::counting();
    let failing = Receiver::start(500, failing_tally.clone()).await;
    let payment = kinds()
        .into_iter()
        .find(|k| k.name == "payment.succeeded")
        .expect("type");
    let (failing_ref, secret) = app
        .subscribed_endpoint(&failing.url, payment.name, payment.version)
        .await;
    failing.set_secret(&secret);
    let healthy_tally = Tally::recording();
    let healthy = Receiver::start(204, healthy_tally.clone()).await;
    let refund = kinds()
        .into_iter()
        .find(|k| k.name == "refund.created")
        .expect("type");
    let (_, secret) = app
        .subscribed_endpoint(&healthy.url, refund.name, refund.version)
        .await;
    healthy.set_secret(&secret);
    let n = cfg.backlog;
    println!();
    println!("== 3. memory: {n} deliveries waiting for retry (one endpoint, receiver answers 500)");
    let (rss, _) = rss_mb();
    println!("   RSS before seeding: {rss:.1} MiB");

    let started = Instant::now();
    let seeded = match seed_backlog(&app, &payment, n, cfg.backlog_chunk).await {
        Ok(s) => s,
        Err(e) => {
            summary.error(format!("seeding the backlog failed: {e}"));
            return;
        }
    };
    let seeding = started.elapsed();
    if seeded != n {
        summary.error(format!("memory: seeded {seeded} of {n} deliveries"));
    }
    let (_, hwm_seed) = rss_mb();
    println!(
        "   seeded {seeded} deliveries in {:.1} s ({:.0}/s) through Dispatch::write_events + claim_due_deliveries + record_attempts, chunks of {}; no HTTP",
        seeding.as_secs_f64(),
        rate(seeded, seeding),
        cfg.backlog_chunk
    );
    println!(
        "   each: one failed attempt (500) recorded, status pending, next attempt in 48-72 min"
    );
    let next = app.store.dispatch().next_due_at().await.ok().flatten();
    let due_now = app
        .store
        .dispatch()
        .due_backlog(Timestamp::now())
        .await
        .unwrap_or(-1);
    println!(
        "   due now: {due_now}; earliest retry in {:.1} min",
        next.map_or(f64::NAN, |t| (t.millis() - Timestamp::now().millis())
            as f64
            / 60_000.0)
    );
    // Queries the dispatcher runs against a big backlog: the first call
    // (cold caches) and the best of the next four.
    let endpoint = Ref::from_trusted(failing_ref.clone());
    // One round per row; one query per column.
    let mut rounds = [[Duration::ZERO; 3]; 5];
    for round in &mut rounds {
        let t = Instant::now();
        let _ = app.store.dispatch().endpoint_failing_since(&endpoint).await;
        round[0] = t.elapsed();
        let t = Instant::now();
        let _ = app
            .store
            .webhooks()
            .recent_attempt_outcomes(&endpoint, 100)
            .await;
        round[1] = t.elapsed();
        let t = Instant::now();
        let _ = app
            .store
            .dispatch()
            .claim_due_deliveries("bench-probe", Timestamp::now(), Timestamp::now(), 256)
            .await;
        round[2] = t.elapsed();
    }
    let [failing_since, outcomes, claim] = [0, 1, 2].map(|q| {
        let t: Vec<Duration> = rounds.iter().map(|r| r[q]).collect();
        let warm = t[1..].iter().min().copied().unwrap_or_default();
        format!(
            "{:.1} ms first, {:.2} ms warm",
            t[0].as_secs_f64() * 1000.0,
            warm.as_secs_f64() * 1000.0
        )
    });
    println!(
        "   query times over the backlog: endpoint_failing_since {failing_since} (run after every failed attempt), recent_attempt_outcomes(100) {outcomes}, empty claim {claim}"
    );

    let (before, _) = rss_mb();
    println!(
        "   RSS before the dispatcher: {before:.1} MiB (peak while seeding {hwm_seed:.1} MiB)"
    );
    let dispatcher = app.start_dispatcher(settings_for(&app, "0s,1h"));
    let window = Duration::from_secs(cfg.backlog_seconds);
    let live_total = (BACKLOG_LIVE_RATE * cfg.backlog_seconds) as usize;
    healthy_tally.arm(live_total as u64);
    failing_tally.arm(u64::MAX);
    let publisher = {
        let app = app.clone();
        let (name, data) = (refund.name, refund.data.clone());
        tokio::spawn(async move {
            let mut interval =
                tokio::time::interval(Duration::from_nanos(1_000_000_000 / BACKLOG_LIVE_RATE));
            let mut published = HashMap::with_capacity(live_total);
            for _ in 0..live_total {
                interval.tick().await;
                let at = Instant::now();
                published.insert(app.publish(name, data.clone()).await, at);
            }
            published
        })
    };
    let mut samples = Vec::new();
    let t0 = Instant::now();
    while t0.elapsed() < window {
        tokio::time::sleep(Duration::from_millis(250)).await;
        samples.push(rss_mb().0);
    }
    let published = publisher.await.unwrap_or_default();
    let live_done = healthy_tally.wait(Duration::from_secs(10)).await;
    let mut live_latencies: Vec<Duration> = healthy_tally
        .take_receipts()
        .into_iter()
        .filter_map(|(e, at)| {
            published
                .get(&e)
                .map(|t0| at.saturating_duration_since(*t0))
        })
        .collect();
    live_latencies.sort_unstable();
    dispatcher.shutdown().await;
    let (after, _) = rss_mb();
    let during_max = samples.iter().copied().fold(f64::NAN, f64::max);
    let during_min = samples.iter().copied().fold(f64::NAN, f64::min);
    println!(
        "   RSS during {} s of the dispatcher over the backlog ({} samples): min {during_min:.1} MiB, max {during_max:.1} MiB",
        cfg.backlog_seconds,
        samples.len()
    );
    println!(
        "   meanwhile: {} of {live_total} live deliveries to a healthy endpoint received ({} events/s){}, event-to-receipt p50 {}, p99 {}; {} requests to the failing endpoint",
        healthy_tally.count(),
        BACKLOG_LIVE_RATE,
        if live_done.is_some() { "" } else { " - INCOMPLETE" },
        ms(percentile_ms(&live_latencies, 50.0)),
        ms(percentile_ms(&live_latencies, 99.0)),
        failing_tally.count()
    );
    println!("   RSS after the dispatcher stopped: {after:.1} MiB");
    let still = app
        .store
        .dispatch()
        .next_due_at()
        .await
        .ok()
        .flatten()
        .is_some();
    if !still {
        summary.error("memory: the backlog is gone after the run".to_owned());
    }
    if live_done.is_none() {
        summary.error(format!(
            "memory: live deliveries received {} of {live_total}",
            healthy_tally.count()
        ));
    }
    let worst = before.max(during_max).max(after);
    summary.check(
        &format!("RSS with {seeded} deliveries waiting (before/during max/after)"),
        format!(
            "{before:.1} / {during_max:.1} / {after:.1} MiB, growth during {:+.1} MiB",
            during_max - before
        ),
        "< 200 MB",
        worst * 1.048_576 < TARGET_RSS_MB,
    );
    drop(app);
}

/// Writes `n` deliveries that wait for a retry, in chunks; returns how many.
/// Events of `kind`, whose one subscribed endpoint has each delivery.
async fn seed_backlog(
    app: &TestApp,
    kind: &Kind,
    n: usize,
    chunk: usize,
) -> Result<usize, store::StoreError> {
    let environment = Ref::from_trusted(app.sandbox.environment_ref.clone());
    let schedule = RetrySchedule::parse("0s,1h").expect("schedule");
    let scope = shaping::Scope::default();
    let scope_json = serde_json::to_string(&scope).expect("a scope");
    let data_json = kind.data.to_string();
    // Packed by the accepting side, as `EventRow::from` packs it.
    let data_packed = store::packed::pack(&data_json).into_owned();
    let mut done = 0;
    let mut last_report = Instant::now();
    while done < n {
        let size = chunk.min(n - done);
        let now = Timestamp::now();
        let batch: Vec<EventRow> = (0..size)
            .map(|_| EventRow {
                event_ref: Ref::generate(Prefix::Event),
                environment_ref: environment.clone(),
                public_event_type: kind.name.to_owned(),
                occurred_at: now,
                scope: scope.clone(),
                scope_json: scope_json.clone(),
                data_json: data_json.clone(),
                data_packed: Some(data_packed.clone()),
                order: None,
            })
            .collect();
        app.store.dispatch().write_events::<()>(batch, None).await?;
        // Due as of now: the intake stamps them with its own clock.
        let now = Timestamp::now();
        let claimed = app
            .store
            .dispatch()
            .claim_due_deliveries(SEEDER, now, now.plus_millis(600_000), size as u32)
            .await?;
        let results: Vec<AttemptResult> = claimed
            .iter()
            .map(|d| {
                let data = serde_json::from_str(&d.event_data).expect("stored event data");
                let payload = webhook_shapes::body::delivered(d, data, None);
                let delay = schedule.delay_before(2).unwrap_or_default();
                let delay = RetrySchedule::jittered(delay, rand::random());
                AttemptResult {
                    delivery_ref: d.delivery_ref.clone(),
                    environment_ref: d.environment_ref.clone(),
                    endpoint_ref: d.endpoint_ref.clone(),
                    generation: d.generation,
                    attempt_number: 1,
                    status: AttemptStatus::Failed,
                    response_status: Some(500),
                    error: None,
                    response_body_excerpt: Some(String::new()),
                    duration_ms: 1,
                    started_at: now,
                    next_attempt_at: Some(now.plus_millis(delay.as_millis() as i64)),
                    delivery_status: DeliveryStatus::Pending,
                    payload: store::Payload::Verbatim(payload),
                    disable_endpoint: false,
                    ordered_key: None,
                    pushback: None,
                }
            })
            .collect();
        drop(claimed);
        done += app
            .store
            .dispatch()
            .record_attempts(
                SEEDER,
                &results,
                std::sync::Arc::new(store::dispatch::operational::Silent),
            )
            .await?
            .recorded;
        if last_report.elapsed() > Duration::from_secs(15) {
            last_report = Instant::now();
            println!("   ... seeded {done} of {n}");
        }
        if results.len() < size {
            // Fewer claimed than inserted: stop rather than loop forever.
            break;
        }
    }
    Ok(done)
}

// -------------------------------------------------------------- store costs

/// Times, in isolation, the store calls the dispatcher makes for `n`
/// deliveries: the intake with its fan-out (from `BENCH_PUBLISHERS` tasks,
/// sharing group commits; the process's CPU time), claims of 256 and
/// recording 256 results with the body a real attempt sends, as
/// `claim_loop` and the recorder do (one caller at a time, no HTTP; wall
/// time, which is the lane's).
///
/// With the bare loop's CPU time per request from the throughput phase, it
/// prints the ceiling these costs alone put on the throughput ratios: on
/// cores kept busy, a delivery costs at least the bare request plus its
/// store work, so `ratio <= bare / (bare + store)` whatever else the
/// dispatcher does. The live path pays the intake (the envelope's parsing
/// and the group write) and the record (a fresh delivery is handed over,
/// not claimed); the drain pays the claim and the record.
async fn store_costs(cfg: &Config, summary: &mut Summary) {
    let app = Arc::new(TestApp::spawn(Backend::Sqlite).await);
    let kind = kinds()
        .into_iter()
        .find(|k| k.name == "payment.succeeded")
        .expect("type");
    let receiver = Receiver::start(204, Tally::counting()).await;
    app.subscribed_endpoint(&receiver.url, kind.name, kind.version)
        .await;
    let n = cfg.events;
    let kinds = Arc::new(vec![kind]);
    println!();
    println!("== store costs: {n} events, one endpoint, each call alone (no HTTP, no concurrency)");
    // The intake fans out in the transaction that accepts the events; with
    // no dispatcher running here nothing is handed over, so every delivery
    // is left due for the claims below.
    let published = envelopes(&app, &kinds, n, cfg.publishers);
    let cpu = Cpu::now();
    let intake = publish_all(&app, published).await;
    let intake_us = cpu.per_item_us(n);
    println!(
        "   intake::accept with its fan-out, {} tasks: {:.0} us per event; {}",
        cfg.publishers,
        intake.as_secs_f64() * 1e6 / n as f64,
        cpu.since(n)
    );
    let payload = delivered_body(&kinds[0], &Ref::generate(Prefix::Event), &app);
    let (mut claim, mut record, mut rounds) = (Duration::ZERO, Duration::ZERO, 0);
    let mut firsts = Vec::new();
    loop {
        let now = Timestamp::now();
        let t = Instant::now();
        let claimed = match app
            .store
            .dispatch()
            .claim_due_deliveries("bench-costs", now, now.plus_millis(60_000), 256)
            .await
        {
            Ok(c) => c,
            Err(e) => {
                summary.error(format!("store costs: claim failed: {e}"));
                return;
            }
        };
        let c = t.elapsed();
        if claimed.is_empty() {
            println!(
                "   claim_due_deliveries on an empty queue: {:.1} ms",
                c.as_secs_f64() * 1e3
            );
            break;
        }
        claim += c;
        let results: Vec<AttemptResult> = claimed
            .iter()
            .map(|d| AttemptResult {
                delivery_ref: d.delivery_ref.clone(),
                environment_ref: d.environment_ref.clone(),
                endpoint_ref: d.endpoint_ref.clone(),
                generation: d.generation,
                attempt_number: 1,
                status: AttemptStatus::Succeeded,
                response_status: Some(204),
                error: None,
                response_body_excerpt: Some(String::new()),
                duration_ms: 1,
                started_at: now,
                next_attempt_at: None,
                delivery_status: DeliveryStatus::Succeeded,
                payload: store::Payload::Verbatim(payload.clone()),
                disable_endpoint: false,
                ordered_key: None,
                pushback: None,
            })
            .collect();
        let t = Instant::now();
        if let Err(e) = app
            .store
            .dispatch()
            .record_attempts(
                "bench-costs",
                &results,
                std::sync::Arc::new(store::dispatch::operational::Silent),
            )
            .await
        {
            summary.error(format!("store costs: record failed: {e}"));
            return;
        }
        let r = t.elapsed();
        record += r;
        if rounds < 3 {
            firsts.push(format!(
                "{:.1}/{:.1}",
                c.as_secs_f64() * 1e3,
                r.as_secs_f64() * 1e3
            ));
        }
        rounds += 1;
    }
    let per = |d: Duration| d.as_secs_f64() * 1e3 / rounds.max(1) as f64;
    println!(
        "   claim 256 + record 256: {rounds} rounds, {:.1} ms + {:.1} ms per round on average (first rounds, claim/record ms: {})",
        per(claim),
        per(record),
        firsts.join(", ")
    );
    let total = intake + claim + record;
    println!(
        "   store time per delivery: {:.0} us -> at most {:.0} deliveries/s through the store alone",
        total.as_secs_f64() * 1e6 / n as f64,
        rate(n, total)
    );
    let us = |d: Duration| d.as_secs_f64() * 1e6 / n as f64;
    if let Some(bare) = summary.bare_us {
        let ceiling = |store: f64| bare / (bare + store);
        let live = intake_us + us(record);
        let drain = us(claim) + us(record);
        println!(
            "   ceiling from these costs alone, bare request {bare:.0} us of CPU: live (intake {intake_us:.0} + record {:.0} us) <= {:.2}; drain (claim {:.0} + record {:.0} us) <= {:.2}",
            us(record),
            ceiling(live),
            us(claim),
            us(record),
            ceiling(drain)
        );
    }
}

// --------------------------------------------------------------------- main

async fn bench(cfg: Config) -> ExitCode {
    let (rss, _) = rss_mb();
    println!(
        "dispatcher benchmark, embedded mode (SQLite), one process; RSS at start {rss:.1} MiB"
    );
    println!();
    let mut summary = Summary::default();
    if cfg.runs("throughput") {
        throughput(&cfg, &mut summary).await;
    }
    if cfg.runs("latency") {
        latency(&cfg, &mut summary).await;
    }
    if cfg.runs("memory") {
        memory(&cfg, &mut summary).await;
    }
    if cfg.runs("store") {
        store_costs(&cfg, &mut summary).await;
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
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime builds");
    runtime.block_on(bench(cfg))
}
