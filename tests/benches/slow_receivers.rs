//! Benchmark: many slow endpoints beside a healthy one (issue 19), in
//! embedded mode (SQLite store, the store's event queue), in one process.
//!
//! `BENCH_SLOW_ENDPOINTS` endpoints (default 10,000) each get one delivery
//! (one event of a type they all subscribe to), answered 200 after
//! `BENCH_SLOW_MS` (default 1,500 ms, inside the 5 s time-out used here):
//! far more attempts than the dispatcher's default 512 slots, so they wait
//! in the store for tens of seconds. A healthy endpoint (answers 204 at
//! once) subscribed to another type gets `BENCH_RATE` events a second
//! (default 100) for `BENCH_SECONDS` (default 10), twice: alone, then
//! while the slow backlog waits. Its event-to-receipt p99 beside the slow
//! ones must stay within what `tests/isolation.rs` allows beside one
//! hanging endpoint: twice its p99 alone, or its p99 alone plus 20 ms.
//!
//! Printed: the healthy p50/p90/p99/max alone and beside, split into the
//! intake's share (the publish call: the store's commit, on SQLite a turn
//! of the one writer shared with recording the slow attempts) and the
//! dispatcher's (commit to receipt), the lateness of a 5 ms timer (a
//! stalled runtime shows there), the verdict, the slow requests received
//! before and after the measurement (the backlog must not have drained
//! during it), and the resident memory.
//! The binary fails only when something went wrong (a healthy event never
//! received), not on a missed target (`bench_summary`).
//!
//! Run with `cargo bench -p billing-tests --bench slow_receivers`. The
//! scaled-down check that runs in CI is
//! `tests/hostile_receivers.rs` (`many_slow_endpoints_do_not_slow_a_healthy_one`).

/// The allocator of the `billing` binary, so that the figures are its own.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use billing_tests::receiver::{Behaviour, TestReceiver};
use billing_tests::{env_num, ms, percentile_ms, Backend, TestApp};
use futures::StreamExt;
use serde_json::Value;
use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

const HEALTHY_TYPE: &str = "payment.succeeded";
const SLOW_TYPE: &str = "order.created";
/// The attempt time-out: a slow answer is well inside it.
const TIMEOUT: Duration = Duration::from_secs(5);

struct Config {
    slow_endpoints: usize,
    slow_answer: Duration,
    rate: u64,
    seconds: u64,
}

fn config() -> Result<Config, String> {
    Ok(Config {
        slow_endpoints: env_num("BENCH_SLOW_ENDPOINTS", 10_000)?,
        slow_answer: Duration::from_millis(env_num("BENCH_SLOW_MS", 1_500)?),
        rate: env_num("BENCH_RATE", 100)?,
        seconds: env_num("BENCH_SECONDS", 10)?,
    })
}

fn payment() -> Value {
    domain::webhook::catalogue::example(HEALTHY_TYPE, 2).expect("example")
}

/// As in `tests/isolation.rs`.
fn allowed_p99(alone_p99: Duration) -> Duration {
    (alone_p99 * 2).max(alone_p99 + Duration::from_millis(20))
}

/// Resident memory of this process, in MiB.
fn rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// How late a task woken every 5 ms runs, while it lives: a stalled
/// runtime (every worker busy or blocked) shows here, not only in the
/// deliveries.
struct Lag {
    samples: Arc<std::sync::Mutex<Vec<Duration>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Lag {
    fn start() -> Lag {
        let samples: Arc<std::sync::Mutex<Vec<Duration>>> = Arc::default();
        let into = samples.clone();
        let task = tokio::spawn(async move {
            loop {
                let due = Instant::now() + Duration::from_millis(5);
                tokio::time::sleep_until(due.into()).await;
                let late = Instant::now().saturating_duration_since(due);
                into.lock().expect("lock").push(late);
            }
        });
        Lag { samples, task }
    }

    fn stop(self) -> Vec<Duration> {
        self.task.abort();
        let mut s = std::mem::take(&mut *self.samples.lock().expect("lock"));
        s.sort_unstable();
        s
    }
}

/// The healthy endpoint's figures of one measurement, each sorted.
struct Measured {
    /// Event to receipt: publish started, request received.
    latencies: Vec<Duration>,
    /// The publish call alone: the intake's commit (the store's share).
    intake: Vec<Duration>,
    /// Publish returned (event committed) to request received: the
    /// dispatcher's share.
    dispatch: Vec<Duration>,
    /// The runtime's lateness meanwhile (`Lag`).
    lag: Vec<Duration>,
}

/// Publishes `rate` healthy events a second for `seconds` (each publish
/// its own task, so a slow one does not delay the next) and measures their
/// deliveries, or says why some never arrived.
async fn healthy_latencies(
    app: &Arc<TestApp>,
    healthy: &TestReceiver,
    cfg: &Config,
) -> Result<Measured, String> {
    let before = healthy.count();
    let total = (cfg.rate * cfg.seconds) as usize;
    let data = Arc::new(payment());
    let lag = Lag::start();
    let mut interval = tokio::time::interval(Duration::from_nanos(1_000_000_000 / cfg.rate));
    let mut tasks = Vec::with_capacity(total);
    for _ in 0..total {
        interval.tick().await;
        let (app, data) = (app.clone(), data.clone());
        tasks.push(tokio::spawn(async move {
            let at = Instant::now();
            let event_ref = app.publish(HEALTHY_TYPE, (*data).clone()).await;
            (event_ref, at, Instant::now())
        }));
    }
    let mut published: HashMap<String, (Instant, Instant)> = HashMap::with_capacity(total);
    for t in futures::future::join_all(tasks).await {
        let (event_ref, at, committed) = t.expect("publish task completes");
        published.insert(event_ref, (at, committed));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while healthy.count() < before + total && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut m = Measured {
        latencies: Vec::with_capacity(total),
        intake: Vec::with_capacity(total),
        dispatch: Vec::with_capacity(total),
        lag: lag.stop(),
    };
    for r in &healthy.received()[before..] {
        let Some((t0, committed)) = r.json()["event_ref"]
            .as_str()
            .and_then(|e| published.get(e))
        else {
            continue;
        };
        m.latencies.push(r.at.saturating_duration_since(*t0));
        m.intake.push(committed.saturating_duration_since(*t0));
        m.dispatch.push(r.at.saturating_duration_since(*committed));
    }
    if m.latencies.len() < total {
        return Err(format!(
            "the healthy endpoint received {} of {total} events within 60 s",
            m.latencies.len()
        ));
    }
    m.latencies.sort_unstable();
    m.intake.sort_unstable();
    m.dispatch.sort_unstable();
    Ok(m)
}

fn print(m: &Measured) {
    println!("   event-to-receipt: {}", describe(&m.latencies));
    println!(
        "   of which the intake (publish call): {}",
        describe(&m.intake)
    );
    println!(
        "   of which the dispatcher (commit to receipt): {}",
        describe(&m.dispatch)
    );
    println!(
        "   runtime lateness of a 5 ms timer meanwhile: {}",
        describe(&m.lag)
    );
}

fn describe(latencies: &[Duration]) -> String {
    format!(
        "p50 {}, p90 {}, p99 {}, max {}",
        ms(percentile_ms(latencies, 50.0)),
        ms(percentile_ms(latencies, 90.0)),
        ms(percentile_ms(latencies, 99.0)),
        ms(latencies.last().map(|d| d.as_secs_f64() * 1000.0))
    )
}

async fn bench(cfg: Config) -> ExitCode {
    let mut verdicts = Vec::new();
    let mut errors = Vec::new();
    println!(
        "slow receivers benchmark, embedded mode (SQLite), one process: {} slow endpoints answering after {} ms, \
         a healthy one at {} events/s for {} s; time-out {} s; RSS at start {:.1} MiB",
        cfg.slow_endpoints,
        cfg.slow_answer.as_millis(),
        cfg.rate,
        cfg.seconds,
        TIMEOUT.as_secs(),
        rss_mb()
    );
    let app = Arc::new(TestApp::spawn(Backend::Sqlite).await);
    let healthy = TestReceiver::start(Behaviour::Status(204)).await;
    app.subscribed_endpoint(&healthy.url(), HEALTHY_TYPE, 2)
        .await;
    let slow = TestReceiver::start(Behaviour::Hang(cfg.slow_answer)).await;
    let started = Instant::now();
    futures::stream::iter(0..cfg.slow_endpoints)
        .map(|i| {
            let (app, url) = (app.clone(), format!("{}/{i}", slow.url()));
            async move { app.subscribed_endpoint(&url, SLOW_TYPE, 1).await }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
    println!(
        "   {} slow endpoints created and subscribed in {:.1} s",
        cfg.slow_endpoints,
        started.elapsed().as_secs_f64()
    );

    let mut settings = app.dispatch_settings("0s,5s");
    settings.timeout = TIMEOUT;
    println!(
        "   dispatcher: max_in_flight {}, per endpoint {}, claim batch {}, poll {} ms",
        settings.max_in_flight,
        settings.max_in_flight_per_endpoint,
        settings.claim_batch,
        settings.poll_interval.as_millis()
    );
    let dispatcher = app.start_dispatcher(settings);
    // Warm-up: the healthy endpoint's first delivery opens the connection
    // and shows the dispatcher that it answers at once.
    app.publish(HEALTHY_TYPE, payment()).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while healthy.count() < 1 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    println!();
    println!("== healthy endpoint alone");
    let alone = match healthy_latencies(&app, &healthy, &cfg).await {
        Ok(l) => l,
        Err(e) => {
            errors.push(format!("alone: {e}"));
            return billing_tests::bench_summary(&verdicts, &errors);
        }
    };
    print(&alone);

    println!();
    println!(
        "== healthy endpoint beside {} slow deliveries waiting",
        cfg.slow_endpoints
    );
    let published = Instant::now();
    app.publish(SLOW_TYPE, serde_json::json!({})).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while slow.count() < 100.min(cfg.slow_endpoints) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let slow_before = slow.count();
    println!(
        "   slow event published; {slow_before} slow requests received after {:.1} s",
        published.elapsed().as_secs_f64()
    );
    let beside = healthy_latencies(&app, &healthy, &cfg).await;
    let slow_after = slow.count();
    let window = published.elapsed();
    println!(
        "   slow requests received: {slow_before} before the measurement, {slow_after} after it \
         ({:.0} a second since the slow event), of {}; RSS {:.1} MiB",
        slow_after as f64 / window.as_secs_f64(),
        cfg.slow_endpoints,
        rss_mb()
    );
    // Stop at once: a graceful stop would wait for the slow attempts.
    dispatcher.stop.cancel();
    dispatcher.kill();
    let beside = match beside {
        Ok(l) => l,
        Err(e) => {
            errors.push(format!("beside: {e}"));
            return billing_tests::bench_summary(&verdicts, &errors);
        }
    };
    print(&beside);
    if slow_after >= cfg.slow_endpoints {
        errors.push(format!(
            "the slow backlog drained during the measurement ({slow_after} of {}): \
             raise BENCH_SLOW_ENDPOINTS or BENCH_SLOW_MS",
            cfg.slow_endpoints
        ));
    }
    let percentile = |l: &[Duration]| billing_tests::percentile(l, 99.0).unwrap_or_default();
    let (alone_p99, beside_p99) = (percentile(&alone.latencies), percentile(&beside.latencies));
    let allowed = allowed_p99(alone_p99);
    let pass = beside_p99 <= allowed;
    let line = format!(
        "{:<4} healthy p99 beside {} slow endpoints: {:.1} ms (alone {:.1} ms; allowed {:.1} ms, as tests/isolation.rs)",
        if pass { "PASS" } else { "MISS" },
        cfg.slow_endpoints,
        beside_p99.as_secs_f64() * 1000.0,
        alone_p99.as_secs_f64() * 1000.0,
        allowed.as_secs_f64() * 1000.0
    );
    println!("  -> {line}");
    verdicts.push(line);
    billing_tests::bench_summary(&verdicts, &errors)
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
