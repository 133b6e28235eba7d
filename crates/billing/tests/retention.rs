//! Retention with the real binary, on an idle system: `billing dispatcher`
//! over a SQLite file with `retention.deliveries = 1s` and a sweep every
//! second delivers 20 events, then, with nothing else happening, deletes
//! the settled deliveries and their events within a few sweep intervals,
//! and says so in its metrics.

use crate::common::poll::Poll;
use crate::common::{billing, embedded_subscribed, enqueue_orders, free_port, receiver, Process};
use domain::Timestamp;
use std::process::Stdio;
use std::time::{Duration, Instant};

const EVENTS: usize = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_service_sweeps_on_time() {
    let dir = tempfile::tempdir().unwrap();
    let (seen, url) = receiver().await;
    let (store, env) = embedded_subscribed(dir.path(), &url, "order.created").await;
    let queue = dispatcher::EventQueue::new(store.clone());
    enqueue_orders(&queue, &env, EVENTS).await;
    let metrics = free_port();
    let mut process = Process::spawn(
        billing(dir.path(), &[])
            .arg("dispatcher")
            .env("BILLING_DELIVERY__ALLOW_PRIVATE_NETWORKS", "true")
            .env("BILLING_RETENTION__DELIVERIES", "1s")
            .env("BILLING_RETENTION__SWEEP_EVERY", "1s")
            .env("BILLING_METRICS__LISTEN", format!("127.0.0.1:{metrics}"))
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    let poll = Poll::within(Duration::from_secs(30)).every(Duration::from_millis(20));
    while seen.unique_ids() < EVENTS {
        poll.tick(|| "not delivered".to_owned()).await;
    }
    let delivered = Instant::now();
    // Idle from here: only the sweep's own clock can delete anything.
    let rows = || async {
        let deliveries = store
            .dispatch()
            .due_backlog(Timestamp::now().plus_seconds(3600))
            .await
            .unwrap();
        let oldest = store
            .retention()
            .oldest(domain::retention::RetentionKind::Events)
            .await
            .unwrap();
        (deliveries, oldest)
    };
    // The sweep runs on the process's own (wall) clock: its work is
    // watched for. Results land in the store a moment after the receiver
    // saw them.
    Poll::within(Duration::from_secs(10))
        .every(Duration::from_millis(100))
        .until(
            || {
                format!(
                    "events still kept {:?} after the last delivery",
                    delivered.elapsed()
                )
            },
            || async {
                let (pending, oldest_event) = rows().await;
                (pending == 0 && oldest_event.is_none()).then_some(())
            },
        )
        .await;
    let swept_after = delivered.elapsed();
    let text = reqwest::get(format!("http://127.0.0.1:{metrics}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let deleted = |kind: &str| {
        text.lines()
            .find(|l| {
                l.starts_with("billing_retention_deleted_total")
                    && l.contains(&format!("kind=\"{kind}\""))
            })
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|n| n.parse::<u64>().ok())
    };
    assert_eq!(deleted("deliveries"), Some(EVENTS as u64), "{text}");
    assert_eq!(deleted("events"), Some(EVENTS as u64), "{text}");
    assert!(process.terminate_cleanly(), "SIGTERM exits cleanly");
    eprintln!(
        "idle sweep: {EVENTS} deliveries and events gone {swept_after:?} after the last delivery"
    );
}
