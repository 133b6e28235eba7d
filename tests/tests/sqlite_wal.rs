//! The embedded store's write-ahead log stays bounded under a steady write
//! load (`store::db::checkpoint`): without a checkpoint that makes it start
//! over, SQLite appends to it for as long as writes keep coming.
//!
//! SQLite only: PostgreSQL manages its own WAL.

use billing_tests::poll::Poll;
use billing_tests::receiver::{Behaviour, TestReceiver};
use billing_tests::{Backend, TestApp};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Events published without a pause. Each writes its event row and its
/// delivery (with the event's data) and their index entries: some 3 KiB of
/// WAL, so about 75 MiB in all if the WAL never started over.
const EVENTS: usize = 24_000;
const PUBLISHERS: usize = 64;
/// The largest WAL file allowed: the 16 MiB after which the checkpoint
/// restarts it, plus what a 200 ms tick and a restart can add meanwhile.
const LIMIT: u64 = 40 << 20;

#[tokio::test]
async fn the_wal_stays_bounded_under_a_steady_write_load() {
    let app = Arc::new(TestApp::spawn(Backend::Sqlite).await);
    let receiver = TestReceiver::start(Behaviour::Status(204)).await;
    let kind = "payment.succeeded";
    let data = domain::webhook::catalogue::example(kind, 2).expect("example");
    // Subscribed, so that every event also writes a delivery; no dispatcher
    // runs, so nothing is sent.
    app.subscribed_endpoint(&receiver.url(), kind, 2).await;
    let wal = format!(
        "{}-wal",
        app.database_url
            .strip_prefix("sqlite://")
            .expect("a SQLite URL")
    );

    let largest = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (wal, largest, done) = (wal.clone(), largest.clone(), done.clone());
        tokio::spawn(async move {
            // A sample every 20 ms while the publishers run.
            let poll = Poll::within(Duration::from_secs(600)).every(Duration::from_millis(20));
            while !done.load(Ordering::SeqCst) {
                let size = std::fs::metadata(&wal).map_or(0, |m| m.len());
                largest.fetch_max(size, Ordering::SeqCst);
                poll.tick(|| "the publishers did not finish".to_owned())
                    .await;
            }
        })
    };
    let tasks: Vec<_> = (0..PUBLISHERS)
        .map(|_| {
            let (app, data) = (app.clone(), data.clone());
            tokio::spawn(async move {
                for _ in 0..EVENTS / PUBLISHERS {
                    app.publish(kind, data.clone()).await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("publisher");
    }
    done.store(true, Ordering::SeqCst);
    watcher.await.expect("watcher");
    let largest = largest.load(Ordering::SeqCst);
    assert!(
        largest > 0 && largest <= LIMIT,
        "the WAL grew to {} MiB (at most {} MiB allowed)",
        largest >> 20,
        LIMIT >> 20
    );
}
