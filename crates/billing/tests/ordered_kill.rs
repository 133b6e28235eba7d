//! Order per key across a SIGKILL, with the real binary in fleet mode: one
//! `billing api` and two `billing dispatcher` processes over PostgreSQL and
//! Redis deliver 200 events of 20 keys to a `per_key` endpoint whose
//! receiver fails a quarter of the first attempts and answers each request
//! after a moment (so attempts are in flight when the kill comes). One
//! dispatcher is SIGKILLed midway. Every event arrives, and the receiver
//! never gets a request for a sequence whose predecessor it had not yet
//! answered 2xx: a repeat of a sequence already answered (the killed
//! process's attempt, never recorded) is allowed, a jump ahead is not.
//! Runs only with BILLING_TEST_FLEET=1.

use crate::common::poll::Poll;
use crate::common::{
    billing, bootstrap, first_readyz, fleet, fleet_env, free_port, subscribed_endpoint,
    FreshDatabase, Process, Sandbox, AMQP_URL, REDIS_URL,
};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use std::collections::{BTreeMap, HashSet};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const KEYS: usize = 20;
const PER_KEY: usize = 10;

/// What the receiver saw, per key.
#[derive(Default)]
struct Seen {
    /// The highest sequence answered 2xx, per key.
    done: BTreeMap<String, i64>,
    /// Sequences asked for before their predecessor was answered 2xx.
    jumps: Vec<String>,
    /// Requests for a sequence answered 2xx before.
    repeats: usize,
    requests: usize,
    /// (key, sequence) that got a first attempt, failed on purpose.
    failed_once: HashSet<(String, i64)>,
}

async fn receive(State(seen): State<Arc<Mutex<Seen>>>, body: Bytes) -> StatusCode {
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let key = body["ordering_key"].as_str().unwrap_or_default().to_owned();
    let sequence = body["sequence"].as_i64().unwrap_or_default();
    let fail = {
        let mut s = seen.lock().unwrap();
        s.requests += 1;
        let done = s.done.get(&key).copied().unwrap_or(0);
        if sequence > done + 1 {
            s.jumps.push(format!(
                "{key}: {sequence} asked while {done} was the last answered 2xx"
            ));
        }
        if sequence <= done {
            s.repeats += 1;
        }
        // A quarter of first attempts fail, by a rule that needs no dice.
        sequence > done
            && (sequence as usize + key.len()).is_multiple_of(4)
            && s.failed_once.insert((key.clone(), sequence))
    };
    tokio::time::sleep(Duration::from_millis(30)).await;
    if fail {
        return StatusCode::INTERNAL_SERVER_ERROR;
    }
    let mut s = seen.lock().unwrap();
    let done = s.done.entry(key).or_insert(0);
    *done = (*done).max(sequence);
    StatusCode::OK
}

fn dispatcher(dir: &std::path::Path, envs: &[(&str, String)]) -> Process {
    Process::spawn(
        billing(dir, envs)
            .arg("dispatcher")
            .env(
                "BILLING_METRICS__LISTEN",
                format!("127.0.0.1:{}", free_port()),
            )
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_dispatcher_never_breaks_a_keys_order() {
    if !fleet("ordered SIGKILL test") {
        return;
    }
    let db = FreshDatabase::create("billing_ordered_kill").await;
    let dir = tempfile::tempdir().unwrap();
    let api_port = free_port();
    let mut envs = fleet_env(&db.url, AMQP_URL, REDIS_URL);
    envs.extend([
        ("BILLING_API__LISTEN", format!("127.0.0.1:{api_port}")),
        (
            "BILLING_DELIVERY__ALLOW_PRIVATE_NETWORKS",
            "true".to_owned(),
        ),
        (
            "BILLING_DELIVERY__RETRY_SCHEDULE",
            "0s,1s,1s,1s,1s,1s,1s,1s".to_owned(),
        ),
        ("BILLING_DELIVERY__TIMEOUT", "2s".to_owned()),
    ]);
    let Sandbox {
        secret,
        environment_ref,
    } = bootstrap(dir.path(), &envs);

    let seen = Arc::new(Mutex::new(Seen::default()));
    let app = axum::Router::new()
        .fallback(receive)
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let mut api = Process::spawn(
        billing(dir.path(), &envs)
            .arg("api")
            .env(
                "BILLING_METRICS__LISTEN",
                format!("127.0.0.1:{}", free_port()),
            )
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    let base = format!("http://127.0.0.1:{api_port}");
    let client = reqwest::Client::new();
    first_readyz(&client, &base, String::new).await;
    subscribed_endpoint(
        &client,
        &base,
        &secret,
        serde_json::json!({"url": hook, "ordering": "per_key"}),
        "order.created",
        &environment_ref,
    )
    .await;

    let mut first = dispatcher(dir.path(), &envs);
    let mut second = dispatcher(dir.path(), &envs);
    // The events, into the store's queue as the intake accepts them, each
    // key's in order.
    let store = store::Store::connect(&db.url).await.unwrap();
    let queue = dispatcher::EventQueue::new(store.clone());
    let env = domain::Ref::parse(domain::Prefix::Environment, &environment_ref).unwrap();
    for n in 0..PER_KEY {
        for k in 0..KEYS {
            let event = store::EventRecord {
                event_ref: domain::Ref::generate(domain::Prefix::Event),
                environment_ref: env.clone(),
                public_event_type: "order.created".into(),
                occurred_at: domain::Timestamp::now(),
                scope: Default::default(),
                data: store::EventData::parse(format!(
                    r#"{{"order_ref": "ord_AAAAAAAAAAAA", "n": {n}}}"#
                ))
                .unwrap(),
                order: Some(domain::webhook::event::EventOrder::key(
                    domain::webhook::ordering::OrderingKey::parse(&format!("key-{k}")).unwrap(),
                )),
            };
            assert!(queue.enqueue(&event).await.unwrap());
        }
    }
    let total = KEYS * PER_KEY;
    let delivered = |seen: &Arc<Mutex<Seen>>| {
        seen.lock()
            .unwrap()
            .done
            .values()
            .map(|d| *d as usize)
            .sum::<usize>()
    };

    let poll = Poll::within(Duration::from_secs(60)).every(Duration::from_millis(20));
    while delivered(&seen) < total / 3 {
        poll.tick(|| "the dispatchers made no progress".to_owned())
            .await;
    }
    first.kill_hard();
    let at_kill = delivered(&seen);

    let poll = Poll::within(Duration::from_secs(120)).every(Duration::from_millis(50));
    while delivered(&seen) < total {
        poll.tick(|| {
            let s = seen.lock().unwrap();
            format!("not every event arrived: {:?}", s.done)
        })
        .await;
    }
    assert!(second.terminate_cleanly(), "SIGTERM exits cleanly");
    assert!(api.terminate_cleanly(), "SIGTERM exits cleanly");
    store.close().await;
    db.remove().await;
    let s = seen.lock().unwrap();
    assert!(s.jumps.is_empty(), "out of order: {:?}", s.jumps);
    assert!(
        s.done.values().all(|d| *d == PER_KEY as i64),
        "{:?}",
        s.done
    );
    crate::common::say(&format!(
        "ordered kill: killed at {at_kill} of {total}; {} requests, {} repeats, {} failed on purpose, 0 out of order",
        s.requests,
        s.repeats,
        s.failed_once.len()
    ));
}
