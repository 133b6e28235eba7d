//! Load benchmark of the control API over a SQLite store (embedded), or a
//! PostgreSQL one.
//!
//! Starts the real router through the test harness, then, for each scenario,
//! drives it with a fixed number of concurrent client tasks (sharing one
//! `reqwest::Client`) for a warm-up second and then a measured period, and
//! prints requests, errors, successful requests per second and the p50/p99
//! latency of successful requests.
//!
//! Every response is checked: its status must be the expected one (200 for
//! reads and pays, 201 for creations and their replays) and the
//! `Idempotent-Replayed` header must be present exactly when a replay is
//! expected; a pay's answer must also say that the payment succeeded and
//! the session is complete. Anything else, including transport failures,
//! counts as an error, is excluded from the latency figures and the rate,
//! and makes the binary exit with failure.
//!
//! The pay scenarios (issues 17 and 32) run last, as in production: a webhook
//! endpoint (a local receiver answering 204) is subscribed to
//! `payment.succeeded` (version 2) and `order.created`, and the outbox relay
//! and a dispatcher run in the process, as `billing serve` runs them in the
//! embedded mode. Each pay needs an open session of a published checkout
//! config (one one-time item); the sessions are made before each phase, in
//! an untimed pass (enough for `PAY_CEILING` pays per second, or for the
//! pace), and only the pay calls are measured. `POST pay (max)` drives them
//! with the client tasks; `POST pay (100/s)` sends them open-loop at 100 per
//! second, its latency counted from the moment each pay was due. Should the
//! sessions run out, the phase ends early and says so. Afterwards every
//! pay's two webhooks must reach the receiver within `DELIVERY_WAIT`, and
//! the figures are set against the targets (a missed target is
//! reported, not a failure).
//!
//! Settings (environment): `BENCH_CONCURRENCY` (client tasks, default 16),
//! `BENCH_SECONDS` (measured seconds per scenario, default 5; fractions
//! allowed), `BENCH_BACKEND` (`sqlite`, the default, or `postgres`: the same
//! scenarios over a fresh PostgreSQL database on the harness's server,
//! `BILLING_TEST_PG_URL`, with the events relayed to the store's own queue
//! as on SQLite; the database is `ANALYZE`d after each untimed pass, since
//! the machine's server runs without autovacuum), `BENCH_ONLY` (`pay`: only
//! the pay rows, with the catalogue they need; unset or `all`: every
//! scenario). Command-line arguments (cargo passes `--bench`) are ignored.
//!
//! Before the pay phases, with nothing else running in the process (no
//! relay, no dispatcher yet), `COUNTED_PAYS` pays are sent one at a time
//! and the statements the store sent meanwhile are counted
//! (`store::db::count`): the statements of one pay request, everything
//! from authentication to the request log. Then the relay and the
//! dispatcher start, and the statements until those pays' webhooks are
//! delivered and recorded (the process quiet again) count as the pay's
//! events' share, less the statements the idle process makes on its own
//! over that time (its loops' polls, at the rate counted for 3 s after).
//!
//! Run with `cargo bench -p billing-tests --bench api`.

/// The allocator of the `billing` binary, so that the figures are its own.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use billing_tests::receiver::{Behaviour, TestReceiver};
use billing_tests::{Backend, TestApp};
use reqwest::{Client, RequestBuilder, StatusCode};
use serde_json::Value;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const DEFAULT_CONCURRENCY: usize = 16;
const DEFAULT_SECONDS: f64 = 5.0;
const WARM_UP: Duration = Duration::from_secs(1);
/// Error descriptions kept per scenario, to show what went wrong.
const MAX_ERROR_SAMPLES: usize = 5;

/// Products the catalogue setup makes, each published with a published
/// price (so each has an offer); the first one's offer is the one read.
const CATALOGUE_PRODUCTS: usize = 10;

/// Pays per second the sessions made before a `POST pay (max)` phase
/// suffice for.
const PAY_CEILING: f64 = 3_000.0;
/// The pace of `POST pay (100/s)`, pays per second.
const PAY_PACE: u32 = 100;
/// The card every pay uses (always succeeds).
const PAY_METHOD: &str = "pm_card_visa";
/// The event types the endpoint is subscribed to, with their versions:
/// each successful pay sends one webhook of each.
const PAY_EVENTS: [(&str, u32); 2] = [("payment.succeeded", 2), ("order.created", 1)];
/// How long the webhooks of all pays may take to arrive after the last pay.
const DELIVERY_WAIT: Duration = Duration::from_secs(60);
/// Issue 32's targets on one engine: pays per second at full speed, and
/// the p99 of a pay at full speed and at `PAY_PACE`, in milliseconds.
struct Targets {
    pays_per_second: f64,
    max_p99_ms: f64,
    paced_p99_ms: f64,
}

fn targets(backend: Backend) -> Targets {
    match backend {
        Backend::Sqlite => Targets {
            pays_per_second: 1_000.0,
            max_p99_ms: 50.0,
            paced_p99_ms: 10.0,
        },
        Backend::Postgres => Targets {
            pays_per_second: 500.0,
            max_p99_ms: 100.0,
            paced_p99_ms: 30.0,
        },
    }
}

/// Makes idempotency keys unique within the run (the store is fresh).
static NEXT_KEY: AtomicU64 = AtomicU64::new(0);
/// Makes the buyers' e-mail addresses unique: each pay makes its buyer.
static NEXT_BUYER: AtomicU64 = AtomicU64::new(0);

fn fresh_key() -> String {
    format!("bench-{}", NEXT_KEY.fetch_add(1, Ordering::Relaxed))
}

struct Config {
    concurrency: usize,
    measure: Duration,
    backend: Backend,
    /// `BENCH_ONLY=pay`: only the pay scenarios.
    only_pay: bool,
}

/// Pays sent one at a time to count their statements.
const COUNTED_PAYS: usize = 100;
/// How long the statement count must stand still for the process to
/// count as quiet (every webhook delivered and recorded).
const QUIET: Duration = Duration::from_millis(500);
/// How long the idle process's statements are counted, to take them out
/// of the events' share.
const IDLE_SAMPLE: Duration = Duration::from_secs(3);

fn backend_name(backend: Backend) -> &'static str {
    match backend {
        Backend::Sqlite => "sqlite",
        Backend::Postgres => "postgres",
    }
}

fn config() -> Result<Config, String> {
    let concurrency = match std::env::var("BENCH_CONCURRENCY") {
        Ok(v) => match v.trim().parse::<usize>() {
            Ok(n) if n > 0 => n,
            _ => {
                return Err(format!(
                    "BENCH_CONCURRENCY must be a positive integer, got {v:?}"
                ))
            }
        },
        Err(_) => DEFAULT_CONCURRENCY,
    };
    let seconds = match std::env::var("BENCH_SECONDS") {
        Ok(v) => match v.trim().parse::<f64>() {
            Ok(s) if s.is_finite() && s > 0.0 => s,
            _ => {
                return Err(format!(
                    "BENCH_SECONDS must be a positive number, got {v:?}"
                ))
            }
        },
        Err(_) => DEFAULT_SECONDS,
    };
    let backend = match std::env::var("BENCH_BACKEND") {
        Ok(v) => match v.trim() {
            "sqlite" => Backend::Sqlite,
            "postgres" => Backend::Postgres,
            _ => {
                return Err(format!(
                    "BENCH_BACKEND must be sqlite or postgres, got {v:?}"
                ))
            }
        },
        Err(_) => Backend::Sqlite,
    };
    let only_pay = match std::env::var("BENCH_ONLY") {
        Ok(v) => match v.trim() {
            "pay" => true,
            "all" | "" => false,
            _ => return Err(format!("BENCH_ONLY must be pay or all, got {v:?}")),
        },
        Err(_) => false,
    };
    Ok(Config {
        concurrency,
        measure: Duration::from_secs_f64(seconds),
        backend,
        only_pay,
    })
}

/// Builds the request a client task sends; the argument is the task index.
/// `None` when there is nothing left to send (the phase then ends).
type Build = dyn Fn(&Client, usize) -> Option<RequestBuilder> + Send + Sync;

/// Checks the body of a response whose status and headers passed.
type Check = fn(&[u8]) -> Result<(), String>;

#[derive(Clone)]
struct Scenario {
    name: &'static str,
    expect: StatusCode,
    /// Whether the response must carry `Idempotent-Replayed: true`.
    replayed: bool,
    /// What the body must say, beyond the status.
    check: Option<Check>,
    /// Requests per second, sent open-loop; `None`: as fast as the client
    /// tasks go.
    pace: Option<u32>,
    build: Arc<Build>,
}

impl Scenario {
    /// Sends one request and checks its response and body.
    async fn exchange(&self, request: RequestBuilder) -> Result<(), String> {
        let body = exchange_body(request, self.expect, self.replayed).await?;
        self.check.map_or(Ok(()), |check| check(body.as_ref()))
    }
}

#[derive(Default)]
struct TaskResult {
    latencies: Vec<Duration>,
    errors: u64,
    samples: Vec<String>,
}

impl TaskResult {
    fn record(&mut self, outcome: Result<Duration, String>) {
        match outcome {
            Ok(latency) => self.latencies.push(latency),
            Err(e) => {
                self.errors += 1;
                if self.samples.len() < MAX_ERROR_SAMPLES {
                    self.samples.push(e);
                }
            }
        }
    }
}

struct Report {
    name: &'static str,
    errors: u64,
    elapsed: Duration,
    /// Latencies of successful requests, sorted.
    latencies: Vec<Duration>,
    samples: Vec<String>,
}

impl Report {
    fn requests(&self) -> u64 {
        self.latencies.len() as u64 + self.errors
    }

    fn rate(&self) -> f64 {
        self.latencies.len() as f64 / self.elapsed.as_secs_f64()
    }

    /// Nearest-rank percentile `p` (0 < p <= 100), in milliseconds.
    fn percentile_ms(&self, p: f64) -> Option<f64> {
        let n = self.latencies.len();
        if n == 0 {
            return None;
        }
        let rank = ((p / 100.0) * n as f64).ceil() as usize;
        let index = rank.clamp(1, n) - 1;
        Some(self.latencies[index].as_secs_f64() * 1000.0)
    }
}

/// Sends one request, reads the whole body and checks the response.
async fn exchange(
    request: RequestBuilder,
    expect: StatusCode,
    replayed: bool,
) -> Result<(), String> {
    exchange_body(request, expect, replayed).await.map(drop)
}

/// Sends one setup request (not a replay), checks it like `exchange` and
/// returns the answer's `data`.
async fn fetch(request: RequestBuilder, expect: StatusCode) -> Result<Value, String> {
    let body = exchange_body(request, expect, false).await?;
    let mut answer: Value =
        serde_json::from_slice(body.as_ref()).map_err(|e| format!("body is not JSON: {e}"))?;
    Ok(answer["data"].take())
}

/// The `ref_field` string of `data`.
fn reference(data: &Value, ref_field: &str) -> Result<String, String> {
    data[ref_field]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("answer has no {ref_field}: {data}"))
}

/// `exchange`, keeping the body of a response that passes the checks.
async fn exchange_body(
    request: RequestBuilder,
    expect: StatusCode,
    replayed: bool,
) -> Result<impl AsRef<[u8]>, String> {
    let response = request
        .send()
        .await
        .map_err(|e| format!("transport error: {e}"))?;
    let status = response.status();
    let replay_header = response
        .headers()
        .get("idempotent-replayed")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = response
        .bytes()
        .await
        .map_err(|e| format!("body read error: {e}"))?;
    if status != expect {
        let text = String::from_utf8_lossy(&body);
        let snippet: String = text.chars().take(200).collect();
        return Err(format!("status {status} (expected {expect}): {snippet}"));
    }
    match (replayed, replay_header.as_deref()) {
        (true, Some("true")) | (false, None) => Ok(body),
        (true, other) => Err(format!("expected Idempotent-Replayed: true, got {other:?}")),
        (false, Some(other)) => Err(format!("unexpected Idempotent-Replayed: {other}")),
    }
}

/// Drives `scenario` for `duration`: open-loop at its pace, or with
/// `concurrency` tasks.
async fn run_phase(
    client: &Client,
    scenario: &Scenario,
    concurrency: usize,
    duration: Duration,
) -> Report {
    match scenario.pace {
        Some(rate) => run_paced(client, scenario, rate, duration).await,
        None => run_closed(client, scenario, concurrency, duration).await,
    }
}

/// Drives `scenario` with `concurrency` tasks until `duration` has passed
/// (or its requests run out).
async fn run_closed(
    client: &Client,
    scenario: &Scenario,
    concurrency: usize,
    duration: Duration,
) -> Report {
    let started = Instant::now();
    let deadline = started + duration;
    let tasks: Vec<_> = (0..concurrency)
        .map(|task| {
            let client = client.clone();
            let scenario = scenario.clone();
            tokio::spawn(async move {
                let mut result = TaskResult::default();
                while Instant::now() < deadline {
                    let Some(request) = (scenario.build)(&client, task) else {
                        break;
                    };
                    let sent = Instant::now();
                    let outcome = scenario.exchange(request).await;
                    result.record(outcome.map(|()| sent.elapsed()));
                }
                result
            })
        })
        .collect();
    let results = futures::future::join_all(tasks).await;
    let elapsed = started.elapsed();
    let results = results
        .into_iter()
        .map(|r| r.expect("client task completes"));
    report(scenario.name, elapsed, results)
}

/// Sends `scenario`'s requests open-loop, `rate` per second, for `duration`
/// (or until they run out), each on its own task; a request's latency counts
/// from the moment it was due, so a late start counts too. The rate is over
/// the sending period.
async fn run_paced(client: &Client, scenario: &Scenario, rate: u32, duration: Duration) -> Report {
    let started = Instant::now();
    let deadline = started + duration;
    let mut ticker = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(rate)));
    let mut tasks = Vec::new();
    loop {
        let due = ticker.tick().await.into_std();
        if due >= deadline {
            break;
        }
        let Some(request) = (scenario.build)(client, 0) else {
            break;
        };
        let scenario = scenario.clone();
        tasks.push(tokio::spawn(async move {
            let outcome = scenario.exchange(request).await;
            outcome.map(|()| due.elapsed())
        }));
    }
    let sending = started.elapsed().min(duration);
    let mut result = TaskResult::default();
    for outcome in futures::future::join_all(tasks).await {
        result.record(outcome.expect("request task completes"));
    }
    report(scenario.name, sending, [result])
}

/// Gathers the tasks' results of one phase.
fn report(
    name: &'static str,
    elapsed: Duration,
    results: impl IntoIterator<Item = TaskResult>,
) -> Report {
    let mut report = Report {
        name,
        errors: 0,
        elapsed,
        latencies: Vec::new(),
        samples: Vec::new(),
    };
    for result in results {
        report.errors += result.errors;
        report.latencies.extend(result.latencies);
        for sample in result.samples {
            if report.samples.len() < MAX_ERROR_SAMPLES {
                report.samples.push(sample);
            }
        }
    }
    report.latencies.sort_unstable();
    report
}

/// What the catalogue scenarios work on.
struct Catalogue {
    /// The offer the read retrieves.
    offer_ref: String,
    /// The product the write creates prices for.
    write_product_ref: String,
}

/// The body that creates a one-time price of 19.99 EUR for `product_ref`.
fn price_body(product_ref: &str) -> Value {
    serde_json::json!({
        "product_ref": product_ref,
        "amount": {"currency": "EUR", "unit": "minor", "value": "1999"},
        "type": "one_time",
    })
}

/// Makes `CATALOGUE_PRODUCTS` published products with a published price
/// each, finds the first one's offer, and makes the write's product.
async fn seed_catalogue(client: &Client, base: &str, secret: &str) -> Result<Catalogue, String> {
    let post = |path: &str, body: Value| {
        client
            .post(format!("{base}{path}"))
            .bearer_auth(secret)
            .header("Idempotency-Key", fresh_key())
            .json(&body)
    };
    let mut read_product = None;
    for i in 0..CATALOGUE_PRODUCTS {
        let body = serde_json::json!({"name": format!("bench product {i}")});
        let product = fetch(post("/api/v1/products", body), StatusCode::CREATED).await?;
        let product_ref = reference(&product, "product_ref")?;
        let publish = post(
            &format!("/api/v1/products/{product_ref}/publish"),
            serde_json::json!({}),
        );
        fetch(publish, StatusCode::OK).await?;
        let price = post("/api/v1/prices", price_body(&product_ref));
        let price = fetch(price, StatusCode::CREATED).await?;
        let price_ref = reference(&price, "price_ref")?;
        let publish = post(
            &format!("/api/v1/prices/{price_ref}/publish"),
            serde_json::json!({}),
        );
        fetch(publish, StatusCode::OK).await?;
        read_product.get_or_insert((product_ref, price_ref));
    }
    let (product_ref, price_ref) = read_product.ok_or("no catalogue product made")?;

    let list = client
        .get(format!("{base}/api/v1/offers?product_ref={product_ref}"))
        .bearer_auth(secret);
    let offers = fetch(list, StatusCode::OK).await?;
    let offer_ref = match offers["items"].as_array().map(Vec::as_slice) {
        Some([offer]) if offer["price_ref"] == price_ref.as_str() => reference(offer, "offer_ref")?,
        _ => {
            return Err(format!(
                "expected one offer of {product_ref} at {price_ref}, got: {offers}"
            ))
        }
    };

    let body = serde_json::json!({"name": "bench price target"});
    let product = fetch(post("/api/v1/products", body), StatusCode::CREATED).await?;
    Ok(Catalogue {
        offer_ref,
        write_product_ref: reference(&product, "product_ref")?,
    })
}

/// Open checkout sessions of the pay config, made ahead of the pays.
#[derive(Default)]
struct Sessions {
    open: Mutex<Vec<String>>,
    /// Set when a pay found none left.
    ran_out: AtomicBool,
}

impl Sessions {
    fn take(&self) -> Option<String> {
        let session = self.open.lock().expect("sessions lock").pop();
        if session.is_none() {
            self.ran_out.store(true, Ordering::Relaxed);
        }
        session
    }

    fn len(&self) -> usize {
        self.open.lock().expect("sessions lock").len()
    }
}

/// What the pay scenarios work on.
struct Checkout {
    client: Client,
    base: String,
    secret: String,
    /// The published config the sessions are of.
    config_ref: String,
    /// Tasks making sessions.
    concurrency: usize,
    /// The PostgreSQL database to `ANALYZE` after each untimed pass.
    analyze: Option<String>,
    sessions: Arc<Sessions>,
}

impl Checkout {
    /// Makes open sessions, each for a buyer of its own, until `want` are
    /// waiting (untimed); returns how many it made and how long that took.
    async fn fill(&self, want: usize) -> Result<(usize, Duration), String> {
        let missing = want.saturating_sub(self.sessions.len());
        let started = Instant::now();
        let url = format!("{}/api/v1/checkout-sessions", self.base);
        let tasks: Vec<_> = (0..self.concurrency)
            .map(|task| {
                let share =
                    missing / self.concurrency + usize::from(task < missing % self.concurrency);
                let (client, url) = (self.client.clone(), url.clone());
                let (secret, config_ref) = (self.secret.clone(), self.config_ref.clone());
                tokio::spawn(async move {
                    let mut made = Vec::with_capacity(share);
                    for _ in 0..share {
                        let buyer = NEXT_BUYER.fetch_add(1, Ordering::Relaxed);
                        let body = serde_json::json!({
                            "config_ref": config_ref,
                            "buyer": {"email": format!("buyer-{buyer}@bench.example")},
                        });
                        let request = client
                            .post(&url)
                            .bearer_auth(&secret)
                            .header("Idempotency-Key", fresh_key())
                            .json(&body);
                        let session = fetch(request, StatusCode::CREATED).await?;
                        if session["status"] != "open" {
                            return Err(format!("a new session is not open: {session}"));
                        }
                        made.push(reference(&session, "checkout_session_ref")?);
                    }
                    Ok::<_, String>(made)
                })
            })
            .collect();
        let mut made = Vec::with_capacity(missing);
        for task in futures::future::join_all(tasks).await {
            made.extend(task.expect("session task completes")?);
        }
        let took = started.elapsed();
        self.sessions
            .open
            .lock()
            .expect("sessions lock")
            .extend(made);
        if let Some(url) = &self.analyze {
            analyze(url).await?;
        }
        Ok((missing, took))
    }
}

/// Brings the planner's statistics of a PostgreSQL database up to date.
async fn analyze(url: &str) -> Result<(), String> {
    use sqlx::{Connection, Executor};
    let mut conn = sqlx::PgConnection::connect(url)
        .await
        .map_err(|e| format!("connecting to ANALYZE failed: {e}"))?;
    conn.execute("ANALYZE")
        .await
        .map_err(|e| format!("ANALYZE failed: {e}"))?;
    let _ = conn.close().await;
    Ok(())
}

/// Makes and publishes a checkout config of one `offer_ref` (quantity 1);
/// returns its reference.
async fn seed_checkout(
    client: &Client,
    base: &str,
    secret: &str,
    offer_ref: &str,
) -> Result<String, String> {
    let post = |path: &str, body: Value| {
        client
            .post(format!("{base}{path}"))
            .bearer_auth(secret)
            .header("Idempotency-Key", fresh_key())
            .json(&body)
    };
    let body = serde_json::json!({
        "name": "bench checkout",
        "line_items": [{"offer_ref": offer_ref, "quantity": 1}],
        "success_url": "https://example.com/paid",
    });
    let config = fetch(post("/api/v1/checkout-configs", body), StatusCode::CREATED).await?;
    let config_ref = reference(&config, "config_ref")?;
    let publish = post(
        &format!("/api/v1/checkout-configs/{config_ref}/publish"),
        serde_json::json!({}),
    );
    let published = fetch(publish, StatusCode::OK).await?;
    if published["status"] != "published" {
        return Err(format!("the config did not publish: {published}"));
    }
    Ok(config_ref)
}

/// A pay's answer must show the payment succeeded and the session complete.
fn check_pay(body: &[u8]) -> Result<(), String> {
    let answer: Value =
        serde_json::from_slice(body).map_err(|e| format!("pay answer is not JSON: {e}"))?;
    let data = &answer["data"];
    let (payment, session) = (
        &data["payment"]["status"],
        &data["checkout_session"]["status"],
    );
    if payment == "succeeded" && session == "complete" {
        Ok(())
    } else {
        Err(format!(
            "pay answered payment {payment}, session {session} (expected succeeded, complete)"
        ))
    }
}

/// The endpoint the pays' webhooks go to: a local receiver answering 204,
/// subscribed to `PAY_EVENTS` in the sandbox environment.
async fn subscribe_receiver(app: &TestApp) -> TestReceiver {
    let receiver = TestReceiver::start(Behaviour::Status(204)).await;
    let (first, version) = PAY_EVENTS[0];
    let (endpoint, _) = app
        .subscribed_endpoint(&receiver.url(), first, version)
        .await;
    for (event_type, version) in &PAY_EVENTS[1..] {
        app.post(
            &format!("/api/v1/webhook_endpoints/{endpoint}/subscriptions"),
            serde_json::json!({"public_event_type": event_type, "scope_type": "environment",
                "scope_ref": app.sandbox.environment_ref, "dto_version": version}),
        )
        .send()
        .await
        .expect(201);
    }
    receiver
}

/// Waits until `expected` webhooks have reached `receiver`, for at most
/// `DELIVERY_WAIT`; returns how many arrived and when the last one needed
/// came (`None` if they did not all come).
async fn await_deliveries(receiver: &TestReceiver, expected: usize) -> (usize, Option<Duration>) {
    let started = Instant::now();
    loop {
        let count = receiver.count();
        if count >= expected {
            return (count, Some(started.elapsed()));
        }
        if started.elapsed() > DELIVERY_WAIT {
            return (count, None);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The statement count once it has stood still for `QUIET` (at most
/// `DELIVERY_WAIT`).
async fn quiet() -> u64 {
    let started = Instant::now();
    let mut last = store::db::count::statements();
    let mut still_since = Instant::now();
    while still_since.elapsed() < QUIET && started.elapsed() < DELIVERY_WAIT {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = store::db::count::statements();
        if now != last {
            last = now;
            still_since = Instant::now();
        }
    }
    last
}

fn ms(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| format!("{v:.2}"))
}

fn print_row(report: &Report) {
    println!(
        "{:<22} {:>9} {:>7} {:>9.0} {:>8} {:>8}",
        report.name,
        report.requests(),
        report.errors,
        report.rate(),
        ms(report.percentile_ms(50.0)),
        ms(report.percentile_ms(99.0)),
    );
}

/// Says on stderr that the warm-up had errors, if it had.
fn warn_warm_up(warm: &Report) {
    if warm.errors > 0 {
        eprintln!(
            "warning: {} errors during warm-up of {}, first: {}",
            warm.errors,
            warm.name,
            warm.samples.first().map_or("-", String::as_str)
        );
    }
}

/// Runs `scenario`'s warm-up and measured phases; returns the measured
/// report.
async fn measure(client: &Client, scenario: &Scenario, config: &Config) -> Report {
    let warm = run_phase(client, scenario, config.concurrency, WARM_UP).await;
    warn_warm_up(&warm);
    run_phase(client, scenario, config.concurrency, config.measure).await
}

/// Sessions a phase of `duration` of `scenario` needs: at its pace, else at
/// `PAY_CEILING`, one more per client task.
fn sessions_for(scenario: &Scenario, config: &Config, duration: Duration) -> usize {
    let rate = scenario.pace.map_or(PAY_CEILING, f64::from);
    (rate * duration.as_secs_f64()).ceil() as usize + config.concurrency
}

async fn bench(config: Config) -> ExitCode {
    let app = TestApp::spawn(config.backend).await;
    let client = app.client.clone();
    let secret = app.sandbox.secret.clone();
    let base = app.base.clone();

    let account = app.create_account("bench-target").await;
    let principal = account["principal_ref"]
        .as_str()
        .expect("created account has a principal_ref")
        .to_owned();

    let create_url = format!("{base}/api/v1/service_accounts");
    let create_body: Value = serde_json::json!({"name": "bench"});

    // One key per client task, used once here (a creation, not a replay)
    // so that every measured request with it is a replay.
    let mut replay_keys = Vec::with_capacity(config.concurrency);
    let replays = if config.only_pay {
        0
    } else {
        config.concurrency
    };
    for _ in 0..replays {
        let key = fresh_key();
        let request = client
            .post(&create_url)
            .bearer_auth(&secret)
            .header("Idempotency-Key", key.as_str())
            .json(&create_body);
        if let Err(e) = exchange(request, StatusCode::CREATED, false).await {
            eprintln!("seeding a replay key failed: {e}");
            return ExitCode::FAILURE;
        }
        replay_keys.push(key);
    }
    let replay_keys = Arc::new(replay_keys);

    let catalogue = match seed_catalogue(&client, &base, &secret).await {
        Ok(catalogue) => catalogue,
        Err(e) => {
            eprintln!("seeding the catalogue failed: {e}");
            return ExitCode::FAILURE;
        }
    };

    let scenarios = {
        let (s1, s2, s3, s4, s5, s6) = (
            secret.clone(),
            secret.clone(),
            secret.clone(),
            secret.clone(),
            secret.clone(),
            secret.clone(),
        );
        let account_url = format!("{base}/api/v1/service_accounts/{principal}");
        let environments_url = format!("{base}/api/v1/environments");
        let (create_url2, body2) = (create_url.clone(), create_body.clone());
        let offer_url = format!("{base}/api/v1/offers/{}", catalogue.offer_ref);
        let prices_url = format!("{base}/api/v1/prices");
        let price = price_body(&catalogue.write_product_ref);
        vec![
            Scenario {
                name: "GET service account",
                expect: StatusCode::OK,
                replayed: false,
                check: None,
                pace: None,
                build: Arc::new(move |c: &Client, _| Some(c.get(&account_url).bearer_auth(&s1))),
            },
            Scenario {
                name: "GET environments",
                expect: StatusCode::OK,
                replayed: false,
                check: None,
                pace: None,
                build: Arc::new(move |c: &Client, _| {
                    Some(c.get(&environments_url).bearer_auth(&s2))
                }),
            },
            Scenario {
                name: "POST fresh key",
                expect: StatusCode::CREATED,
                replayed: false,
                check: None,
                pace: None,
                build: Arc::new(move |c: &Client, _| {
                    Some(
                        c.post(&create_url)
                            .bearer_auth(&s3)
                            .header("Idempotency-Key", fresh_key())
                            .json(&create_body),
                    )
                }),
            },
            Scenario {
                name: "POST replay",
                expect: StatusCode::CREATED,
                replayed: true,
                check: None,
                pace: None,
                build: Arc::new(move |c: &Client, task| {
                    Some(
                        c.post(&create_url2)
                            .bearer_auth(&s4)
                            .header("Idempotency-Key", replay_keys[task].as_str())
                            .json(&body2),
                    )
                }),
            },
            Scenario {
                name: "GET offer",
                expect: StatusCode::OK,
                replayed: false,
                check: None,
                pace: None,
                build: Arc::new(move |c: &Client, _| Some(c.get(&offer_url).bearer_auth(&s5))),
            },
            Scenario {
                name: "POST price",
                expect: StatusCode::CREATED,
                replayed: false,
                check: None,
                pace: None,
                build: Arc::new(move |c: &Client, _| {
                    Some(
                        c.post(&prices_url)
                            .bearer_auth(&s6)
                            .header("Idempotency-Key", fresh_key())
                            .json(&price),
                    )
                }),
            },
        ]
    };

    println!(
        "backend {}, {} client tasks, {:.1} s warm-up + {:.1} s measured per scenario",
        backend_name(config.backend),
        config.concurrency,
        WARM_UP.as_secs_f64(),
        config.measure.as_secs_f64()
    );
    println!("(req/s counts successful requests; latencies are of successful requests)");
    println!();
    println!(
        "{:<22} {:>9} {:>7} {:>9} {:>8} {:>8}",
        "scenario", "requests", "errors", "req/s", "p50 ms", "p99 ms"
    );

    let mut reports = Vec::new();
    for scenario in scenarios.iter().filter(|_| !config.only_pay) {
        let report = measure(&client, scenario, &config).await;
        print_row(&report);
        reports.push(report);
    }

    // The pay path, with its webhooks going out as in production: the
    // outbox relay and a dispatcher run once the pays' statements are
    // counted.
    let receiver = subscribe_receiver(&app).await;
    let config_ref = match seed_checkout(&client, &base, &secret, &catalogue.offer_ref).await {
        Ok(config_ref) => config_ref,
        Err(e) => {
            eprintln!("seeding the checkout config failed: {e}");
            return ExitCode::FAILURE;
        }
    };
    let checkout = Checkout {
        client: client.clone(),
        base: base.clone(),
        secret: secret.clone(),
        config_ref,
        concurrency: config.concurrency,
        analyze: (config.backend == Backend::Postgres).then(|| app.database_url.clone()),
        sessions: Arc::new(Sessions::default()),
    };
    let pay = {
        let (sessions, secret, base) = (checkout.sessions.clone(), secret.clone(), base.clone());
        let body = serde_json::json!({"payment_method": PAY_METHOD});
        let build: Arc<Build> = Arc::new(move |c: &Client, _| {
            let session = sessions.take()?;
            Some(
                c.post(format!("{base}/api/v1/checkout-sessions/{session}/pay"))
                    .bearer_auth(&secret)
                    .header("Idempotency-Key", fresh_key())
                    .json(&body),
            )
        });
        [
            Scenario {
                name: "POST pay (max)",
                expect: StatusCode::OK,
                replayed: false,
                check: Some(check_pay),
                pace: None,
                build: build.clone(),
            },
            Scenario {
                name: "POST pay (100/s)",
                expect: StatusCode::OK,
                replayed: false,
                check: Some(check_pay),
                pace: Some(PAY_PACE),
                build,
            },
        ]
    };

    let mut notes = Vec::new();
    let mut setup_errors = Vec::new();
    // Successful pays, warm-ups included: each sends `PAY_EVENTS`.
    let mut paid = 0;

    // Statements per pay: the requests alone, then their events' share
    // (module docs).
    let per_pay = |statements: u64, pays: usize| statements as f64 / pays.max(1) as f64;
    let mut counted = None;
    match checkout.fill(COUNTED_PAYS).await {
        Ok(_) => {
            let before = store::db::count::statements();
            let mut ok = 0;
            for _ in 0..COUNTED_PAYS {
                match pay[0].build.as_ref()(&client, 0) {
                    Some(request) => match pay[0].exchange(request).await {
                        Ok(()) => ok += 1,
                        Err(e) => setup_errors.push(format!("a counted pay failed: {e}")),
                    },
                    None => break,
                }
            }
            counted = Some((ok, store::db::count::statements() - before));
            paid += ok;
        }
        Err(e) => setup_errors.push(format!("making the counted pays' sessions failed: {e}")),
    }
    let before_events = store::db::count::statements();
    let events_started = Instant::now();
    let relay_stop = tokio_util::sync::CancellationToken::new();
    let relay = tokio::spawn(dispatcher::outbox::relay(
        app.store.clone(),
        dispatcher::outbox::Target::Queue(app.queue.clone()),
        relay_stop.clone(),
    ));
    let dispatcher = app.start_dispatcher(app.dispatch_settings("0s,1s,5s"));
    if let Some((ok, statements)) = counted {
        let (arrived, _) = await_deliveries(&receiver, ok * PAY_EVENTS.len()).await;
        let events = quiet().await - before_events;
        let waited = events_started.elapsed();
        // The idle process's own statements (the loops' polls) over the
        // same time, at the rate they run once nothing is left to do.
        let idle_from = (store::db::count::statements(), Instant::now());
        tokio::time::sleep(IDLE_SAMPLE).await;
        let idle_rate = (store::db::count::statements() - idle_from.0) as f64
            / idle_from.1.elapsed().as_secs_f64();
        let polls = (idle_rate * waited.as_secs_f64()).min(events as f64);
        println!(
            "statements per pay ({ok} pays, one at a time): {:.1} for the request; \
             {:.1} more for its events ({arrived} webhooks: relay, intake, fan-out, \
             delivery records), after taking out {:.1} per pay of the idle process's \
             polls ({idle_rate:.1}/s over the {:.1} s counted)",
            per_pay(statements, ok),
            (events as f64 - polls) / ok.max(1) as f64,
            polls / ok.max(1) as f64,
            waited.as_secs_f64(),
        );
        println!();
    }
    let mut pay_reports = Vec::new();
    for scenario in &pay {
        // Sessions made for this scenario, and the time that took.
        let mut made = (0, Duration::ZERO);
        match checkout
            .fill(sessions_for(scenario, &config, WARM_UP))
            .await
        {
            Ok((n, took)) => made = (made.0 + n, made.1 + took),
            Err(e) => {
                setup_errors.push(format!("{}: making sessions failed: {e}", scenario.name));
                break;
            }
        }
        let warm = run_phase(&client, scenario, config.concurrency, WARM_UP).await;
        warn_warm_up(&warm);
        paid += warm.latencies.len();
        match checkout
            .fill(sessions_for(scenario, &config, config.measure))
            .await
        {
            Ok((n, took)) => made = (made.0 + n, made.1 + took),
            Err(e) => {
                setup_errors.push(format!("{}: making sessions failed: {e}", scenario.name));
                break;
            }
        }
        checkout.sessions.ran_out.store(false, Ordering::Relaxed);
        let report = run_phase(&client, scenario, config.concurrency, config.measure).await;
        print_row(&report);
        paid += report.latencies.len();
        notes.push(if made.0 > 0 {
            format!(
                "{}: {} sessions made beforehand, untimed ({:.0} sessions/s)",
                scenario.name,
                made.0,
                made.0 as f64 / made.1.as_secs_f64().max(f64::EPSILON)
            )
        } else {
            format!(
                "{}: paid sessions left over from an earlier untimed pass",
                scenario.name
            )
        });
        if checkout.sessions.ran_out.load(Ordering::Relaxed) {
            notes.push(format!(
                "{}: the sessions ran out after {:.2} s of the measured period",
                scenario.name,
                report.elapsed.as_secs_f64()
            ));
        }
        pay_reports.push(report);
    }
    let last_pay = Instant::now();

    let expected = paid * PAY_EVENTS.len();
    let (received, complete) = await_deliveries(&receiver, expected).await;
    dispatcher.shutdown().await;
    relay_stop.cancel();
    let _ = relay.await;
    let mut by_type = std::collections::BTreeMap::<String, usize>::new();
    for delivery in receiver.received() {
        let event_type = delivery.json()["public_event_type"]
            .as_str()
            .unwrap_or("?")
            .to_owned();
        *by_type.entry(event_type).or_default() += 1;
    }
    for (event_type, _) in PAY_EVENTS {
        let got = by_type.get(event_type).copied().unwrap_or(0);
        if complete.is_some() && got < paid {
            setup_errors.push(format!(
                "webhooks: {got} {event_type} received for {paid} pays"
            ));
        }
    }
    let by_type: Vec<String> = by_type.iter().map(|(t, n)| format!("{t} {n}")).collect();

    println!();
    println!(
        "webhooks: {paid} pays (warm-ups included) x {} subscribed types = {expected} expected; \
         {received} received ({})",
        PAY_EVENTS.len(),
        by_type.join(", ")
    );
    match complete {
        Some(after) => println!(
            "  all arrived {:.2} s after the last pay ended",
            after.as_secs_f64()
        ),
        None => setup_errors.push(format!(
            "webhooks: {received} of {expected} arrived within {} s after the last pay ({:.0} s ago)",
            DELIVERY_WAIT.as_secs(),
            last_pay.elapsed().as_secs_f64()
        )),
    }
    for note in &notes {
        println!("  {note}");
    }

    println!();
    let goal = targets(config.backend);
    println!("issue 32 targets ({}):", backend_name(config.backend));
    let verdict = |met: bool| if met { "met" } else { "MISSED" };
    if let Some(max) = pay_reports.iter().find(|r| r.name == pay[0].name) {
        let p99 = max.percentile_ms(99.0);
        println!(
            "  >= {:.0} pays/s: {:.0} pays/s: {}",
            goal.pays_per_second,
            max.rate(),
            verdict(max.rate() >= goal.pays_per_second)
        );
        println!(
            "  p99 <= {:.0} ms at full speed: {} ms: {}",
            goal.max_p99_ms,
            ms(p99),
            verdict(p99.is_some_and(|p| p <= goal.max_p99_ms))
        );
    }
    if let Some(paced) = pay_reports.iter().find(|r| r.name == pay[1].name) {
        let p99 = paced.percentile_ms(99.0);
        println!(
            "  p99 <= {:.0} ms at {PAY_PACE} pays/s: p50 {} ms, p99 {} ms: {}",
            goal.paced_p99_ms,
            ms(paced.percentile_ms(50.0)),
            ms(p99),
            verdict(p99.is_some_and(|p| p <= goal.paced_p99_ms))
        );
    }
    reports.extend(pay_reports);

    let failed: Vec<&Report> = reports.iter().filter(|r| r.errors > 0).collect();
    if failed.is_empty() && setup_errors.is_empty() {
        return ExitCode::SUCCESS;
    }
    println!();
    for error in &setup_errors {
        println!("{error}");
    }
    for report in failed {
        println!("{}: {} errors, for example:", report.name, report.errors);
        for sample in &report.samples {
            println!("  {sample}");
        }
    }
    ExitCode::FAILURE
}

fn main() -> ExitCode {
    let config = match config() {
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
    runtime.block_on(bench(config))
}
