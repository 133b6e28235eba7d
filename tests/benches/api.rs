//! Load benchmark of the embedded control API over a SQLite store.
//!
//! Starts the real router through the test harness, then, for each scenario,
//! drives it with a fixed number of concurrent client tasks (sharing one
//! `reqwest::Client`) for a warm-up second and then a measured period, and
//! prints requests, errors, successful requests per second and the p50/p99
//! latency of successful requests.
//!
//! Every response is checked: its status must be the expected one (200 for
//! reads, 201 for creations and their replays) and the `Idempotent-Replayed`
//! header must be present exactly when a replay is expected. Anything else,
//! including transport failures, counts as an error, is excluded from the
//! latency figures and the rate, and makes the binary exit with failure.
//!
//! Settings (environment): `BENCH_CONCURRENCY` (client tasks, default 16),
//! `BENCH_SECONDS` (measured seconds per scenario, default 5; fractions
//! allowed). Command-line arguments (cargo passes `--bench`) are ignored.
//!
//! Run with `cargo bench -p billing-tests --bench api`.

/// The allocator of the `billing` binary, so that the figures are its own.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use billing_tests::{Backend, TestApp};
use reqwest::{Client, RequestBuilder, StatusCode};
use serde_json::Value;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const DEFAULT_CONCURRENCY: usize = 16;
const DEFAULT_SECONDS: f64 = 5.0;
const WARM_UP: Duration = Duration::from_secs(1);
/// Error descriptions kept per scenario, to show what went wrong.
const MAX_ERROR_SAMPLES: usize = 5;

/// Products the catalogue setup makes, each published with a published
/// price (so each has an offer); the first one's offer is the one read.
const CATALOGUE_PRODUCTS: usize = 10;

/// Makes idempotency keys unique within the run (the store is fresh).
static NEXT_KEY: AtomicU64 = AtomicU64::new(0);

fn fresh_key() -> String {
    format!("bench-{}", NEXT_KEY.fetch_add(1, Ordering::Relaxed))
}

struct Config {
    concurrency: usize,
    measure: Duration,
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
    Ok(Config {
        concurrency,
        measure: Duration::from_secs_f64(seconds),
    })
}

/// Builds the request a client task sends; the argument is the task index.
type Build = dyn Fn(&Client, usize) -> RequestBuilder + Send + Sync;

#[derive(Clone)]
struct Scenario {
    name: &'static str,
    expect: StatusCode,
    /// Whether the response must carry `Idempotent-Replayed: true`.
    replayed: bool,
    build: Arc<Build>,
}

#[derive(Default)]
struct TaskResult {
    latencies: Vec<Duration>,
    errors: u64,
    samples: Vec<String>,
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

/// Drives `scenario` with `concurrency` tasks until `duration` has passed.
async fn run_phase(
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
                    let request = (scenario.build)(&client, task);
                    let sent = Instant::now();
                    let outcome = exchange(request, scenario.expect, scenario.replayed).await;
                    let latency = sent.elapsed();
                    match outcome {
                        Ok(()) => result.latencies.push(latency),
                        Err(e) => {
                            result.errors += 1;
                            if result.samples.len() < MAX_ERROR_SAMPLES {
                                result.samples.push(e);
                            }
                        }
                    }
                }
                result
            })
        })
        .collect();
    let results = futures::future::join_all(tasks).await;
    let elapsed = started.elapsed();
    let mut report = Report {
        name: scenario.name,
        errors: 0,
        elapsed,
        latencies: Vec::new(),
        samples: Vec::new(),
    };
    for result in results {
        let result = result.expect("client task completes");
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

fn ms(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| format!("{v:.2}"))
}

async fn bench(config: Config) -> ExitCode {
    let app = TestApp::spawn(Backend::Sqlite).await;
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
    for _ in 0..config.concurrency {
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
                build: Arc::new(move |c: &Client, _| c.get(&account_url).bearer_auth(&s1)),
            },
            Scenario {
                name: "GET environments",
                expect: StatusCode::OK,
                replayed: false,
                build: Arc::new(move |c: &Client, _| c.get(&environments_url).bearer_auth(&s2)),
            },
            Scenario {
                name: "POST fresh key",
                expect: StatusCode::CREATED,
                replayed: false,
                build: Arc::new(move |c: &Client, _| {
                    c.post(&create_url)
                        .bearer_auth(&s3)
                        .header("Idempotency-Key", fresh_key())
                        .json(&create_body)
                }),
            },
            Scenario {
                name: "POST replay",
                expect: StatusCode::CREATED,
                replayed: true,
                build: Arc::new(move |c: &Client, task| {
                    c.post(&create_url2)
                        .bearer_auth(&s4)
                        .header("Idempotency-Key", replay_keys[task].as_str())
                        .json(&body2)
                }),
            },
            Scenario {
                name: "GET offer",
                expect: StatusCode::OK,
                replayed: false,
                build: Arc::new(move |c: &Client, _| c.get(&offer_url).bearer_auth(&s5)),
            },
            Scenario {
                name: "POST price",
                expect: StatusCode::CREATED,
                replayed: false,
                build: Arc::new(move |c: &Client, _| {
                    c.post(&prices_url)
                        .bearer_auth(&s6)
                        .header("Idempotency-Key", fresh_key())
                        .json(&price)
                }),
            },
        ]
    };

    println!(
        "backend sqlite, {} client tasks, {:.1} s warm-up + {:.1} s measured per scenario",
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
    for scenario in &scenarios {
        let warm = run_phase(&client, scenario, config.concurrency, WARM_UP).await;
        if warm.errors > 0 {
            eprintln!(
                "warning: {} errors during warm-up of {}, first: {}",
                warm.errors,
                scenario.name,
                warm.samples.first().map_or("-", String::as_str)
            );
        }
        let report = run_phase(&client, scenario, config.concurrency, config.measure).await;
        println!(
            "{:<22} {:>9} {:>7} {:>9.0} {:>8} {:>8}",
            report.name,
            report.requests(),
            report.errors,
            report.rate(),
            ms(report.percentile_ms(50.0)),
            ms(report.percentile_ms(99.0)),
        );
        reports.push(report);
    }

    let failed: Vec<&Report> = reports.iter().filter(|r| r.errors > 0).collect();
    if failed.is_empty() {
        return ExitCode::SUCCESS;
    }
    println!();
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
