//! Benchmark: subscriptions falling due at the same instant (issue 31,
//! contract 12.4), renewed by one test clock's advance, with their events
//! delivered as they go.
//!
//! Per backend: the real router over a fresh store (`TestApp`), the
//! embedded event pipeline (`EventPipeline::embedded`: the outbox relay
//! into the store's queue and one dispatcher) and the timed-work runner
//! (`commerce::jobs::run`, as `billing serve` runs it). A local receiver
//! answering 204 is subscribed to `subscription.renewed`.
//!
//! Setup (untimed): `BENCH_SUBSCRIPTIONS` (default 10,000) checkout sessions
//! of one monthly config on one test clock at `START`, each paid with
//! `pm_card_visa` through the API by `BENCH_CONCURRENCY` client tasks
//! (default 16): that many subscriptions, all due at `DUE`. Then the events
//! of the setup are left to drain (outbox and queue empty), and a
//! PostgreSQL store is `ANALYZE`d (the machine's server runs without
//! autovacuum).
//!
//! Measured: the clock is advanced to `DUE` (202) and polled every
//! `POLL`; renewals/s is the subscriptions over the time from the advance
//! request to the clock answering `ready`. Delivery: when the first
//! `subscription.renewed` reached the receiver, how many had when the clock
//! was ready, and how long after the advance (and after `ready`) the last
//! one arrived. Then checked: one renewal event per subscription, each
//! with the next period (`DUE`..`NEXT_END`), and the newest invoice number
//! `2026-{2N}` (one per pay and one per renewal, gapless).
//!
//! Goal (the issue's): at least 500 renewals/s embedded, with delivery
//! keeping up (here: the last event within `KEEP_UP` of `ready`). A missed
//! goal is reported, not a failure; anything that went wrong (a request
//! answered otherwise, an event missing) fails the binary
//! (`bench_summary`).
//!
//! Backends: `BENCH_BACKEND` = `sqlite`, `postgres` or `both`; unset, SQLite
//! alone, or both when `BILLING_TEST_FLEET=1`. PostgreSQL is the harness's
//! server (`BILLING_TEST_PG_URL`), a fresh database cloned from the
//! migrated template.
//!
//! Run with `cargo bench -p billing-tests --bench renewals`; a quick run:
//! `BENCH_SUBSCRIPTIONS=500 cargo bench -p billing-tests --bench renewals`.

/// The allocator of the `billing` binary, so that the figures are its own.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use billing_tests::receiver::{Behaviour, TestReceiver};
use billing_tests::{bench_summary, env_num, Backend, EventPipeline, TestApp};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The clock's start, every subscription's first period end (where the
/// advance goes), and the end of the period a renewal starts.
const START: &str = "2026-01-05T09:00:00.000Z";
const DUE: &str = "2026-02-05T09:00:00.000Z";
const NEXT_END: &str = "2026-03-05T09:00:00.000Z";
/// How often the clock and the receiver are looked at while measuring.
const POLL: Duration = Duration::from_millis(10);
/// The goal for the embedded store.
const TARGET_PER_SECOND: f64 = 500.0;
/// Delivery keeps up when the last renewal's event arrives this soon after
/// the clock is ready.
const KEEP_UP: Duration = Duration::from_secs(1);
/// How long the setup's events may take to drain, and the renewals' events
/// to arrive after the clock is ready.
const DRAIN_WAIT: Duration = Duration::from_secs(300);
const DELIVERY_WAIT: Duration = Duration::from_secs(120);

struct Config {
    subscriptions: usize,
    concurrency: usize,
    backends: Vec<Backend>,
    /// Whether the event pipeline runs (`BENCH_PIPELINE=0` turns it off,
    /// to see what the renewals cost alone).
    pipeline: bool,
}

fn config() -> Result<Config, String> {
    let backends = billing_tests::bench_backends()?;
    Ok(Config {
        subscriptions: env_num("BENCH_SUBSCRIPTIONS", 10_000)?,
        concurrency: env_num("BENCH_CONCURRENCY", 16)?,
        backends,
        pipeline: std::env::var("BENCH_PIPELINE").map_or(true, |v| v.trim() != "0"),
    })
}

fn text(v: &Value) -> Result<String, String> {
    v.as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("a string, not {v}"))
}

/// A POST with a fresh key that must answer `expect`: its `data`.
async fn post(app: &TestApp, path: &str, body: Value, expect: u16) -> Result<Value, String> {
    let r = app.post(path, body).send().await;
    if r.status != expect {
        let mut t = r.text;
        t.truncate(300);
        return Err(format!(
            "POST {path}: {} (expected {expect}): {t}",
            r.status
        ));
    }
    Ok(r.data().clone())
}

async fn get(app: &TestApp, path: &str) -> Result<Value, String> {
    let r = app.get(path).send().await;
    if r.status != 200 {
        return Err(format!("GET {path}: {}: {}", r.status, r.text));
    }
    Ok(r.data().clone())
}

/// A published monthly subscription (EUR 9.99) in a published config, and
/// a test clock at `START`: the config and the clock.
async fn shop(app: &TestApp) -> Result<(String, String), String> {
    let product = post(
        app,
        "/api/v1/products",
        json!({"name": "Bench magazine"}),
        201,
    )
    .await?;
    let product = text(&product["product_ref"])?;
    post(
        app,
        &format!("/api/v1/products/{product}/publish"),
        json!({}),
        200,
    )
    .await?;
    let price = post(
        app,
        "/api/v1/prices",
        json!({"product_ref": product, "type": "recurring", "interval": "month",
            "amount": {"currency": "EUR", "unit": "minor", "value": "999"}}),
        201,
    )
    .await?;
    let price = text(&price["price_ref"])?;
    post(
        app,
        &format!("/api/v1/prices/{price}/publish"),
        json!({}),
        200,
    )
    .await?;
    let offers = get(app, &format!("/api/v1/offers?product_ref={product}")).await?;
    let offer = text(&offers["items"][0]["offer_ref"])?;
    let config = post(
        app,
        "/api/v1/checkout-configs",
        json!({"name": "Bench subscription", "success_url": "https://example.com/ok",
            "line_items": [{"offer_ref": offer, "quantity": 1}]}),
        201,
    )
    .await?;
    let config = text(&config["config_ref"])?;
    post(
        app,
        &format!("/api/v1/checkout-configs/{config}/publish"),
        json!({}),
        200,
    )
    .await?;
    let clock = post(
        app,
        "/api/v1/test_clocks",
        json!({"frozen_time": START, "name": "bench"}),
        201,
    )
    .await?;
    Ok((config, text(&clock["test_clock_ref"])?))
}

/// `n` subscriptions of `config` on `clock` through the API, with
/// `concurrency` client tasks each opening a session and paying it.
async fn subscribe(
    app: &Arc<TestApp>,
    config: &str,
    clock: &str,
    n: usize,
    concurrency: usize,
) -> Result<(), String> {
    let next = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| {
            let (app, next) = (app.clone(), next.clone());
            let (config, clock) = (config.to_owned(), clock.to_owned());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        return Ok::<_, String>(());
                    }
                    let session = post(
                        &app,
                        "/api/v1/checkout-sessions",
                        json!({"config_ref": config, "test_clock_ref": clock,
                            "buyer": {"email": format!("renewer-{i}@bench.example")}}),
                        201,
                    )
                    .await?;
                    let session = text(&session["checkout_session_ref"])?;
                    let paid = post(
                        &app,
                        &format!("/api/v1/checkout-sessions/{session}/pay"),
                        json!({"payment_method": "pm_card_visa"}),
                        200,
                    )
                    .await?;
                    let sub = &paid["subscription"];
                    if sub["status"] != "active" || sub["current_period_end"] != DUE {
                        return Err(format!("not a subscription due at {DUE}: {sub}"));
                    }
                }
            })
        })
        .collect();
    for t in futures::future::join_all(tasks).await {
        t.map_err(|e| format!("a setup task panicked: {e}"))??;
    }
    Ok(())
}

/// Events not yet relayed (outbox) or not yet fanned out (the queue).
async fn undrained(pool: &sqlx::AnyPool) -> Result<i64, String> {
    sqlx::query_scalar::<_, i64>(
        "SELECT (SELECT COUNT(*) FROM outbox) + \
         (SELECT COUNT(*) FROM events WHERE status = 'pending')",
    )
    .fetch_one(pool)
    .await
    .map_err(|e| format!("counting undrained events: {e}"))
}

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

/// What one backend measured.
struct Measured {
    /// From the advance request to the clock answering `ready`.
    advance: Duration,
    /// CPU time of this process (API, runner, pipeline, receiver) over
    /// `advance`, in seconds.
    cpu: f64,
    /// The delivery of the renewals' events, when the pipeline ran.
    delivery: Option<Delivery>,
}

struct Delivery {
    first: Option<Duration>,
    at_ready: usize,
    all: Option<Duration>,
    /// Events delivered per second in each tenth of the advance: a rate
    /// that falls as the advance goes shows work growing with what it did.
    by_tenth: Vec<f64>,
}

/// CPU time (user and system) of this process so far, in seconds.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // After the command name (which ends with the last `)`), utime and
    // stime are the 12th and 13th fields, in clock ticks (100 a second).
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    (ticks(11) + ticks(12)) / 100.0
}

/// The delivery rate in each tenth of `advance`, from `(elapsed,
/// delivered)` samples.
fn by_tenth(timeline: &[(Duration, usize)], advance: Duration) -> Vec<f64> {
    let at = |t: Duration| {
        timeline
            .iter()
            .take_while(|(e, _)| *e <= t)
            .last()
            .map_or(0, |(_, n)| *n)
    };
    (0..10)
        .map(|i| {
            let (from, to) = (advance * i / 10, advance * (i + 1) / 10);
            (at(to) - at(from)) as f64 / (to - from).as_secs_f64().max(f64::EPSILON)
        })
        .collect()
}

/// Advances `clock` to `DUE` and waits until it is ready, watching
/// `receiver` (when the pipeline runs); then waits for every renewal's
/// event there.
async fn advance(
    app: &TestApp,
    clock: &str,
    receiver: Option<&TestReceiver>,
    n: usize,
) -> Result<Measured, String> {
    // The requests received (cheap to read) count as deliveries while
    // none is retried; `check` counts distinct ones at the end.
    let received = || receiver.map_or(0, TestReceiver::count);
    let cpu_before = cpu_seconds();
    let asked = Instant::now();
    let c = post(
        app,
        &format!("/api/v1/test_clocks/{clock}/advance"),
        json!({"frozen_time": DUE}),
        202,
    )
    .await?;
    if c["status"] != "advancing" {
        return Err(format!("the advance was not accepted: {c}"));
    }
    let mut first = None;
    let mut timeline = Vec::new();
    let advance = loop {
        let got = received();
        if first.is_none() && got > 0 {
            first = Some(asked.elapsed());
        }
        timeline.push((asked.elapsed(), got));
        let c = get(app, &format!("/api/v1/test_clocks/{clock}")).await?;
        if c["status"] == "ready" {
            break asked.elapsed();
        }
        if asked.elapsed() > Duration::from_secs(3600) {
            return Err(format!("the clock was not ready within an hour: {c}"));
        }
        tokio::time::sleep(POLL).await;
    };
    let cpu = cpu_seconds() - cpu_before;
    let Some(receiver) = receiver else {
        return Ok(Measured {
            advance,
            cpu,
            delivery: None,
        });
    };
    let at_ready = receiver.count();
    let mut all = None;
    while asked.elapsed() < advance + DELIVERY_WAIT {
        let got = receiver.count();
        if first.is_none() && got > 0 {
            first = Some(asked.elapsed());
        }
        if got >= n && receiver.distinct_deliveries() >= n {
            all = Some(asked.elapsed());
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    Ok(Measured {
        advance,
        cpu,
        delivery: Some(Delivery {
            first,
            at_ready,
            all,
            by_tenth: by_tenth(&timeline, advance),
        }),
    })
}

/// The newest invoice is the `2n`th of 2026 (one per pay, one per
/// renewal, gapless), and `receiver` (when the pipeline ran) got one
/// `subscription.renewed` per subscription, each with the next period;
/// the problems found.
async fn check(app: &TestApp, receiver: Option<&TestReceiver>, n: usize) -> Vec<String> {
    let mut problems = Vec::new();
    match get(app, "/api/v1/invoices?limit=1").await {
        Ok(page) => {
            let expected = format!("2026-{:06}", 2 * n);
            if page["items"][0]["number"] != expected.as_str() {
                problems.push(format!(
                    "the newest invoice is {}, not {expected}",
                    page["items"][0]["number"]
                ));
            }
        }
        Err(e) => problems.push(e),
    }
    let Some(receiver) = receiver else {
        return problems;
    };
    let mut renewed: HashMap<String, usize> = HashMap::new();
    for r in receiver.received() {
        let body = r.json();
        let data = &body["data"];
        if body["public_event_type"] != "subscription.renewed"
            || data["current_period_start"] != DUE
            || data["current_period_end"] != NEXT_END
        {
            problems.push(format!("not a renewal for {DUE}..{NEXT_END}: {body}"));
            continue;
        }
        let sub = data["subscription_ref"].as_str().unwrap_or("").to_owned();
        *renewed.entry(sub).or_default() += 1;
    }
    if renewed.len() != n {
        problems.push(format!(
            "{} subscriptions renewed (events received), {n} due",
            renewed.len()
        ));
    }
    let twice = renewed.values().filter(|c| **c > 1).count();
    if twice > 0 {
        problems.push(format!("{twice} renewal events arrived more than once"));
    }
    problems
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

/// Waits until the setup's events are relayed and fanned out; how long
/// that took.
async fn drain(app: &TestApp) -> Result<Duration, String> {
    let pool = app.raw_pool().await;
    let started = Instant::now();
    loop {
        let left = undrained(&pool).await?;
        if left == 0 {
            break;
        }
        if started.elapsed() > DRAIN_WAIT {
            return Err(format!(
                "{left} setup events still undrained after {DRAIN_WAIT:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    pool.close().await;
    Ok(started.elapsed())
}

/// The benchmark on one backend: its verdicts, or what went wrong.
async fn run(backend: Backend, cfg: &Config) -> Result<Vec<String>, String> {
    let n = cfg.subscriptions;
    let label = backend.label();
    let app = Arc::new(TestApp::spawn(backend).await);
    println!("{label}: {n} subscriptions");
    let (mut receiver, mut pipeline) = (None, None);
    if cfg.pipeline {
        let r = TestReceiver::start(Behaviour::Status(204)).await;
        app.subscribed_endpoint(&r.url(), "subscription.renewed", 1)
            .await;
        receiver = Some(r);
        pipeline = Some(EventPipeline::embedded(&app));
    }
    let receiver = receiver.as_ref();
    let stop = tokio_util::sync::CancellationToken::new();
    let runner = {
        let stop = stop.clone();
        tokio::spawn(commerce::jobs::run(
            app.store.clone(),
            commerce::jobs::Rules::default(),
            stop,
        ))
    };

    let (config, clock) = shop(&app).await?;
    let started = Instant::now();
    subscribe(&app, &config, &clock, n, cfg.concurrency).await?;
    let setup = started.elapsed();
    let drained = match pipeline {
        Some(_) => format!(
            "events relayed and delivered as they went, drained {} after the last pay",
            secs(drain(&app).await?)
        ),
        None => "no event pipeline: events stay in the outbox".to_owned(),
    };
    if backend == Backend::Postgres {
        analyze(&app.database_url).await?;
    }
    println!(
        "  setup: {n} sessions paid in {} ({:.0} subscriptions/s, {} client tasks); {drained}{}",
        secs(setup),
        n as f64 / setup.as_secs_f64(),
        cfg.concurrency,
        if backend == Backend::Postgres {
            "; ANALYZE"
        } else {
            ""
        },
    );

    let m = advance(&app, &clock, receiver, n).await?;
    let rate = n as f64 / m.advance.as_secs_f64();
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    println!(
        "  advance to {DUE}: ready after {} = {rate:.0} renewals/s; this process used {:.2} s of CPU meanwhile \
         ({:.2} ms per renewal, {:.0} % of {cores} cores)",
        secs(m.advance),
        m.cpu,
        m.cpu * 1000.0 / n as f64,
        m.cpu * 100.0 / (cores as f64 * m.advance.as_secs_f64()),
    );
    if let Some(d) = &m.delivery {
        println!(
            "  delivery of subscription.renewed: first after {}, {} of {n} by the time the clock was ready, all after {}{}",
            d.first.map_or("-".to_owned(), secs),
            d.at_ready,
            d.all.map_or("-".to_owned(), secs),
            d.all
                .map(|all| format!(
                    " ({} after ready; {:.0} deliveries/s over the whole)",
                    secs(all.saturating_sub(m.advance)),
                    n as f64 / all.as_secs_f64()
                ))
                .unwrap_or_default(),
        );
        let tenths: Vec<String> = d.by_tenth.iter().map(|r| format!("{r:.0}")).collect();
        println!(
            "  events delivered per second in each tenth of the advance: {}",
            tenths.join(" ")
        );
    }
    if let Some(pipeline) = pipeline {
        pipeline.shutdown().await;
    }
    stop.cancel();
    let _ = runner.await;

    let problems = check(&app, receiver, n).await;
    let mut errors = problems;
    let lag = match &m.delivery {
        Some(Delivery { all: Some(all), .. }) => Some(all.saturating_sub(m.advance)),
        Some(Delivery { all: None, .. }) => {
            errors.push(format!(
                "{} of {n} renewal events arrived within {DELIVERY_WAIT:?} of ready",
                receiver.map_or(0, TestReceiver::distinct_deliveries)
            ));
            None
        }
        None => None,
    };
    if !errors.is_empty() {
        return Err(format!("{label}: {}", errors.join("; ")));
    }
    let verdict = |met: bool| if met { "met" } else { "MISSED" };
    let goal = match backend {
        Backend::Sqlite => format!(
            " (goal >= {TARGET_PER_SECOND:.0}: {})",
            verdict(rate >= TARGET_PER_SECOND)
        ),
        Backend::Postgres => String::new(),
    };
    let mut verdicts = vec![format!(
        "{label}: {n} renewals in {} = {rate:.0} renewals/s{goal}",
        secs(m.advance)
    )];
    match lag {
        Some(lag) => verdicts.push(format!(
            "{label}: every event delivered {} after ready (keeping up, within {}: {})",
            secs(lag),
            secs(KEEP_UP),
            verdict(lag <= KEEP_UP)
        )),
        None => verdicts.push(format!("{label}: no event pipeline (BENCH_PIPELINE=0)")),
    }
    Ok(verdicts)
}

async fn bench(cfg: Config) -> ExitCode {
    let mut verdicts = Vec::new();
    let mut errors = Vec::new();
    for backend in cfg.backends.clone() {
        match run(backend, &cfg).await {
            Ok(v) => verdicts.extend(v),
            Err(e) => errors.push(e),
        }
        println!();
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
