//! Isolation between endpoints: an endpoint whose receiver hangs (longer
//! than the dispatcher's time-out) must not slow down a healthy endpoint
//! beside it. The healthy endpoint's event-to-receipt latency is measured
//! twice, on a fresh store each time: alone, and beside the hanging
//! endpoint with every event delivered to both; the second p99 must stay
//! within twice the first (with a floor, see `allowed_p99`).
//!
//! SQLite only: isolation is the dispatcher's concern, and the embedded
//! store is where writers contend most.

use billing_tests::receiver::{Behaviour, TestReceiver};
use billing_tests::{Backend, TestApp};
use serde_json::Value;
use std::time::Duration;

/// Events per second published during a run.
const RATE: u64 = 100;
/// How long each run publishes.
const SECONDS: u64 = 4;
/// The dispatcher's per-attempt time-out in these runs.
const TIMEOUT: Duration = Duration::from_secs(1);
/// How long the hanging receiver takes to answer: well past the time-out.
const HANG: Duration = Duration::from_secs(5);
const EVENT_TYPE: &str = "payment.succeeded";

fn payment() -> Value {
    domain::webhook::catalogue::example(EVENT_TYPE, 2).expect("example")
}

/// Nearest-rank percentile `p` of sorted `values`.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    billing_tests::percentile(sorted, p).expect("no latencies measured")
}

/// Publishes `RATE` events a second for `SECONDS` and returns the healthy
/// endpoint's event-to-receipt latencies, sorted. With `beside_hanging`,
/// every event is also delivered to an endpoint that never answers in time.
async fn healthy_latencies(beside_hanging: bool) -> Vec<Duration> {
    let app = TestApp::spawn(Backend::Sqlite).await;
    let healthy = TestReceiver::start(Behaviour::Status(204)).await;
    app.subscribed_endpoint(&healthy.url(), EVENT_TYPE, 2).await;
    let hanging = TestReceiver::start(Behaviour::Hang(HANG)).await;
    if beside_hanging {
        app.subscribed_endpoint(&hanging.url(), EVENT_TYPE, 2).await;
    }
    let mut settings = app.dispatch_settings("0s,1s,1s,1s,1s,1s,1s,1s");
    settings.timeout = TIMEOUT;
    let dispatcher = app.start_dispatcher(settings);

    // Warm-up: the first delivery opens the connection and fills caches.
    app.publish(EVENT_TYPE, payment()).await;
    app.eventually(10, || async { (healthy.count() >= 1).then_some(()) })
        .await;
    let warm_up = healthy.count();

    let total = (RATE * SECONDS) as usize;
    let published = app
        .publish_at_rate(EVENT_TYPE, &payment(), total, RATE)
        .await;
    app.eventually(15, || async {
        (healthy.count() >= warm_up + total).then_some(())
    })
    .await;
    if beside_hanging {
        assert!(
            hanging.count() > 0,
            "the hanging endpoint was never attempted, so nothing was isolated"
        );
    }
    // Stop at once: a graceful stop would wait for the hanging attempts.
    // Cancelling first ends the dispatcher's fan-out loop too.
    dispatcher.stop.cancel();
    dispatcher.kill();

    let mut latencies: Vec<Duration> = healthy
        .received()
        .iter()
        .filter_map(|r| {
            let event_ref = r.json()["event_ref"].as_str()?.to_owned();
            published
                .get(&event_ref)
                .map(|t0| r.at.saturating_duration_since(*t0))
        })
        .collect();
    assert_eq!(
        latencies.len(),
        total,
        "every published event reaches the healthy endpoint exactly once"
    );
    latencies.sort_unstable();
    latencies
}

/// The largest p99 the healthy endpoint may show beside the hanging one:
/// twice its p99 alone, but never less than its p99 alone plus 20 ms. The
/// floor keeps the test from failing on noise when the alone p99 is tiny
/// (a few milliseconds, where one scheduler hiccup or one SQLite busy wait
/// on this shared machine is already "2x"); 20 ms is one test poll interval
/// (`TestApp::dispatch_settings`), the granularity at which the dispatcher
/// picks up new work.
fn allowed_p99(alone_p99: Duration) -> Duration {
    (alone_p99 * 2).max(alone_p99 + Duration::from_millis(20))
}

/// Rounds of (alone, beside) measurements. One round within bounds passes:
/// on a shared CI machine a single round can catch a stall of the whole
/// machine (seen once in a few dozen runs) that has nothing to do with
/// isolation, while a real isolation failure (the hanging endpoint taking
/// the healthy one's slots) fails every round by seconds, not milliseconds.
const ROUNDS: usize = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_endpoint_does_not_slow_a_healthy_one() {
    let _alone = crate::alone().await;
    let mut summaries = Vec::new();
    for round in 1..=ROUNDS {
        let alone = healthy_latencies(false).await;
        let beside = healthy_latencies(true).await;
        let (alone_p50, alone_p99) = (percentile(&alone, 50.0), percentile(&alone, 99.0));
        let (beside_p50, beside_p99) = (percentile(&beside, 50.0), percentile(&beside, 99.0));
        let allowed = allowed_p99(alone_p99);
        // Shown with `--nocapture`, and with the failure message otherwise.
        let summary = format!(
            "round {round}: healthy endpoint at {RATE} events/s for {SECONDS} s: alone p50 {alone_p50:?} p99 {alone_p99:?}; \
             beside a hanging endpoint p50 {beside_p50:?} p99 {beside_p99:?}; allowed p99 {allowed:?}"
        );
        println!("{summary}");
        if beside_p99 <= allowed {
            return;
        }
        summaries.push(summary);
    }
    panic!(
        "the healthy endpoint's p99 beside a hanging one exceeded twice its p99 alone in every round:\n{}",
        summaries.join("\n")
    );
}
