//! Fault test with the real binary: SIGKILL a `billing dispatcher` in the
//! middle of a 10,000-event run, start it again, and check that every event
//! reached the receiver at least once and every delivery is recorded as
//! succeeded. The store is a SQLite file shared by the test and the process.

use crate::common::poll::Poll;
use crate::common::{billing, embedded_subscribed, enqueue_orders, free_port, receiver, Process};
use domain::Timestamp;
use std::process::Stdio;
use std::time::Duration;

const EVENTS: usize = 10_000;

fn dispatcher(dir: &std::path::Path, metrics_port: u16) -> Process {
    Process::spawn(
        billing(dir, &[])
            .arg("dispatcher")
            .env("BILLING_DELIVERY__ALLOW_PRIVATE_NETWORKS", "true")
            .env("BILLING_DELIVERY__TIMEOUT", "2s")
            .env(
                "BILLING_METRICS__LISTEN",
                format!("127.0.0.1:{metrics_port}"),
            )
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_run_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (seen, url) = receiver().await;
    let (store, env) = embedded_subscribed(dir.path(), &url, "order.created").await;
    let queue = dispatcher::EventQueue::new(store.clone());
    enqueue_orders(&queue, &env, EVENTS).await;

    let mut first = dispatcher(dir.path(), free_port());
    let poll = Poll::within(Duration::from_secs(120)).every(Duration::from_millis(20));
    while seen.unique_ids() < EVENTS / 4 {
        poll.tick(|| "the first dispatcher made no progress".to_owned())
            .await;
    }
    first.kill_hard();
    let at_kill = seen.unique_ids();
    assert!(at_kill < EVENTS, "killed in the middle of the run");

    let mut second = dispatcher(dir.path(), free_port());
    let poll = Poll::within(Duration::from_secs(180)).every(Duration::from_millis(50));
    while seen.unique_ids() < EVENTS {
        poll.tick(|| "not every event arrived after the restart".to_owned())
            .await;
    }
    // Every delivery ends recorded as succeeded, once the last results land.
    let poll = Poll::within(Duration::from_secs(60)).every(Duration::from_millis(100));
    let pending = loop {
        let n: i64 = store
            .dispatch()
            .due_backlog(Timestamp::now().plus_seconds(3600))
            .await
            .unwrap();
        if n == 0 || !poll.next().await {
            break n;
        }
    };
    assert!(second.terminate_cleanly(), "SIGTERM exits cleanly");
    assert_eq!(pending, 0, "no delivery left pending");
    let (requests, unique) = (seen.count(), seen.unique_ids());
    assert_eq!(unique, EVENTS, "every event delivered at least once");
    eprintln!("killed at {at_kill} of {EVENTS}; {requests} requests for {unique} deliveries");
}
