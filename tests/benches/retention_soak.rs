//! Retention soak in embedded mode (issue 29): does the SQLite store level
//! off under a steady load, and what does the sweep cost live traffic?
//!
//! In one process, over a SQLite file (`TestApp::spawn(Backend::Sqlite)`,
//! `synchronous = FULL` unless `BILLING_STORE__SYNCHRONOUS` says
//! otherwise): `BENCH_ENDPOINTS` endpoints (default 5), each subscribed to
//! `order.created`, all served by one local axum receiver that answers 204
//! and records each delivery's latency (receipt time minus the publish
//! time the event's data carries; no bodies kept). Events are published
//! into the embedded queue at `BENCH_RATE` per second (default 200, so
//! 5 × 200 deliveries/s) for `BENCH_SECONDS` (default 600) by a tokio
//! interval, each publish its own task. A dispatcher delivers them, and,
//! unless `BENCH_SWEEP=off`, the retention sweep (`dispatcher::retention`)
//! runs every `BENCH_SWEEP_EVERY_SECONDS` (default 10) with
//! `retention.deliveries` = `BENCH_RETENTION_SECONDS` (default 60).
//!
//! Every `BENCH_SAMPLE_SECONDS` (default 30) a line: elapsed time, the
//! store's size on disk (the database file plus its WAL), its free pages
//! (`PRAGMA freelist_count`), rows of deliveries, attempts and events
//! (`webhook_attempts`: a delivery's success is kept on its own row, so
//! with a receiver that answers 204 that table stays nearly empty),
//! deliveries received and rows deleted per second over the window, and
//! the window's delivery p50 and p99. At the end: the size's growth over
//! the last third of the run against its growth over the first third,
//! rows deleted per second against rows written per second, and the
//! whole run's p99.
//!
//! Run with `cargo bench -p billing-tests --bench retention_soak`; run it
//! again with `BENCH_SWEEP=off` for the p99 without the sweep.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use billing_tests::{env_num, ms, percentile_ms, Backend, TestApp};
use domain::retention::{RetentionKind, RetentionPolicy};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// What the receiver saw: deliveries and their latencies (µs).
#[derive(Default)]
struct Seen {
    received: AtomicU64,
    latencies: Mutex<Vec<u32>>,
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or_default()
}

async fn receive(State(seen): State<Arc<Seen>>, body: Bytes) -> StatusCode {
    let at = now_us();
    let sent = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v["data"]["sent_us"].as_u64());
    seen.received.fetch_add(1, Ordering::Relaxed);
    if let Some(sent) = sent {
        let latency = at.saturating_sub(sent).min(u64::from(u32::MAX)) as u32;
        seen.latencies.lock().unwrap().push(latency);
    }
    StatusCode::NO_CONTENT
}

/// The store's size on disk: the database file and its WAL.
fn store_bytes(path: &str) -> u64 {
    [path.to_owned(), format!("{path}-wal")]
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.len())
        .sum()
}

fn p(latencies: &mut [u32], q: f64) -> Option<f64> {
    latencies.sort_unstable();
    let d: Vec<Duration> = latencies
        .iter()
        .map(|us| Duration::from_micros(u64::from(*us)))
        .collect();
    percentile_ms(&d, q)
}

fn main() -> ExitCode {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(run())
}

/// A numeric setting, or the reason it is not one.
fn setting<T: std::str::FromStr + PartialOrd + Default>(name: &str, default: T) -> T {
    env_num(name, default).unwrap_or_else(|e| panic!("{e}"))
}

async fn run() -> ExitCode {
    let endpoints: usize = setting("BENCH_ENDPOINTS", 5);
    let rate: u64 = setting("BENCH_RATE", 200);
    let seconds: u64 = setting("BENCH_SECONDS", 600);
    let sample: u64 = setting("BENCH_SAMPLE_SECONDS", 30);
    let retention: u64 = setting("BENCH_RETENTION_SECONDS", 60);
    let every: u64 = setting("BENCH_SWEEP_EVERY_SECONDS", 10);
    let sweep = std::env::var("BENCH_SWEEP").map_or(true, |v| v != "off");

    let app = Arc::new(TestApp::spawn(Backend::Sqlite).await);
    let path = app
        .database_url
        .trim_start_matches("sqlite://")
        .split('?')
        .next()
        .unwrap_or_default()
        .to_owned();
    let seen = Arc::new(Seen::default());
    let router = axum::Router::new()
        .fallback(receive)
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    for i in 0..endpoints {
        app.subscribed_endpoint(&format!("http://{addr}/hook/{i}"), "order.created", 1)
            .await;
    }
    let dispatcher = app.start_dispatcher(app.dispatch_settings("0s,5s"));
    let stop = tokio_util::sync::CancellationToken::new();
    if sweep {
        let policy = RetentionPolicy::new(
            Duration::from_secs(retention),
            Duration::from_secs(retention),
            Duration::from_secs(86_400),
            Duration::from_secs(86_400),
        )
        .expect("policy");
        tokio::spawn(dispatcher::retention::run(
            app.store.clone(),
            policy,
            Duration::from_secs(every),
            stop.clone(),
        ));
    }
    println!(
        "== retention soak, embedded (SQLite): {rate} events/s to {endpoints} endpoints for {seconds} s; \
         sweep {} (retention.deliveries {retention} s, every {every} s)",
        if sweep { "on" } else { "off" }
    );
    println!(
        "   t(s)  store MiB  free pages  deliveries  attempts  events  received/s  deleted/s  p50 ms  p99 ms"
    );

    let publisher = {
        let (app, stop) = (app.clone(), stop.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_nanos(1_000_000_000 / rate));
            let end = Instant::now() + Duration::from_secs(seconds);
            let mut published = 0u64;
            while Instant::now() < end && !stop.is_cancelled() {
                tick.tick().await;
                let app = app.clone();
                tokio::spawn(async move {
                    app.publish(
                        "order.created",
                        serde_json::json!({"order_ref": "ord_AAAAAAAAAAAA", "sent_us": now_us()}),
                    )
                    .await;
                });
                published += 1;
            }
            published
        })
    };

    let pool = app.raw_pool().await;
    let count = |table: &'static str| {
        let pool = pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>(&format!("SELECT COUNT(*) FROM {table}"))
                .fetch_one(&pool)
                .await
                .unwrap_or(-1)
        }
    };
    let started = Instant::now();
    let mut sizes: Vec<(f64, u64)> = vec![(0.0, store_bytes(&path))];
    let (mut last_received, mut last_deleted) = (0u64, 0u64);
    let mut all_latencies: Vec<u32> = Vec::new();
    let deleted_total = Arc::new(AtomicU64::new(0));
    while started.elapsed() < Duration::from_secs(seconds) {
        tokio::time::sleep(Duration::from_secs(sample)).await;
        let t = started.elapsed().as_secs_f64();
        let bytes = store_bytes(&path);
        sizes.push((t, bytes));
        let free: i64 = sqlx::query_scalar("PRAGMA freelist_count")
            .fetch_one(&pool)
            .await
            .unwrap_or(-1);
        let (deliveries, attempts, events) = (
            count("webhook_deliveries").await,
            count("webhook_attempts").await,
            count("events").await,
        );
        let received = seen.received.load(Ordering::Relaxed);
        // Rows deleted so far: every row written minus every row kept.
        let written_events = received / endpoints as u64;
        let deleted = (received as i64 - deliveries).max(0) as u64
            + (written_events as i64 - events).max(0) as u64;
        deleted_total.store(deleted, Ordering::Relaxed);
        let mut window = std::mem::take(&mut *seen.latencies.lock().unwrap());
        let (p50, p99) = (p(&mut window, 50.0), p(&mut window, 99.0));
        all_latencies.extend_from_slice(&window);
        println!(
            "   {t:>5.0}  {:>9.1}  {free:>10}  {deliveries:>10}  {attempts:>8}  {events:>6}  {:>10.0}  {:>9.0}  {:>6}  {:>6}",
            bytes as f64 / 1_048_576.0,
            (received - last_received) as f64 / sample as f64,
            deleted.saturating_sub(last_deleted) as f64 / sample as f64,
            ms(p50),
            ms(p99),
        );
        last_received = received;
        last_deleted = deleted;
    }
    let published = publisher.await.unwrap_or_default();
    // Let the last deliveries land.
    let deadline = Instant::now() + Duration::from_secs(30);
    while seen.received.load(Ordering::Relaxed) < published * endpoints as u64
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.cancel();
    dispatcher.shutdown().await;
    all_latencies.extend_from_slice(&std::mem::take(&mut *seen.latencies.lock().unwrap()));
    let received = seen.received.load(Ordering::Relaxed);
    let expected = published * endpoints as u64;

    let third = seconds as f64 / 3.0;
    let at = |t: f64| {
        sizes
            .iter()
            .min_by(|a, b| (a.0 - t).abs().total_cmp(&(b.0 - t).abs()))
            .map_or(0, |s| s.1) as f64
    };
    let first = at(third) - at(0.0);
    let last = at(seconds as f64) - at(2.0 * third);
    let elapsed = started.elapsed().as_secs_f64();
    let written = (received + received / endpoints as u64) as f64 / elapsed;
    let deleted = deleted_total.load(Ordering::Relaxed) as f64 / elapsed;
    println!(
        "   published {published} events, {received} of {expected} deliveries received; \
         store grew {:.1} MiB in the first third, {:.1} MiB in the last ({:.1} %)",
        first / 1_048_576.0,
        last / 1_048_576.0,
        if first > 0.0 {
            100.0 * last / first
        } else {
            0.0
        }
    );
    println!(
        "   rows written {written:.0}/s (deliveries and events), deleted {deleted:.0}/s; \
         whole-run delivery p50 {}, p99 {}",
        ms(p(&mut all_latencies, 50.0)),
        ms(p(&mut all_latencies, 99.0)),
    );
    let oldest = app
        .store
        .retention()
        .oldest(RetentionKind::Deliveries)
        .await
        .ok()
        .flatten();
    if let Some(oldest) = oldest {
        println!(
            "   oldest settled delivery kept: {:.0} s old",
            (domain::Timestamp::now().millis() - oldest.millis()) as f64 / 1000.0
        );
    }
    if received < expected {
        eprintln!(
            "lost deliveries: {} of {expected} not received",
            expected - received
        );
        return ExitCode::FAILURE;
    }
    if sweep && first > 0.0 && last >= 0.05 * first {
        println!(
            "   MISS: the store still grows ({:.1} % of the first third's growth)",
            100.0 * last / first
        );
    } else if sweep {
        println!("   PASS: the store levels off (< 5 % of the first third's growth)");
    }
    ExitCode::SUCCESS
}
