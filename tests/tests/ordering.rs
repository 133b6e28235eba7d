//! Order per key (contract 13.1), black-box, on every backend: events carry
//! `ordering_key` and a gapless `sequence`; a `per_key` endpoint receives
//! each key's deliveries one after another (under retries too), keys in
//! parallel; a failed head blocks its key until it is redriven or skipped;
//! `waiting_for`, `skipped_at` and health's `blocked_keys` show it. The
//! service's own events are keyed by their subscription or checkout
//! session, also when a fleet's two consumers accept them in any order.

use billing_tests::kit::api::*;
use billing_tests::kit::{get, invalid, new_session, one_time_config, pay, text};
use billing_tests::receiver::{Behaviour, Received, TestReceiver};
use billing_tests::{
    backend_tests, fleet_or_say, unique_key, EventPipeline as Pipeline, Resp, TestApp, TestQueues,
};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Once;

const TYPE: &str = "refund.created";
/// Enough immediate retries that a receiver failing a third of the time
/// lets every delivery through.
const PATIENT: &str = "0s,0s,0s,0s,0s,0s,0s,0s,0s,0s,0s,0s";

/// A `per_key` endpoint for `url`, subscribed to `event_type`.
async fn ordered_endpoint(app: &TestApp, url: &str, event_type: &str) -> String {
    let r = app
        .post(ENDPOINTS, json!({"url": url, "ordering": "per_key"}))
        .send()
        .await;
    r.expect(201);
    assert_eq!(r.data()["ordering"], "per_key");
    let endpoint = text(&r.data()["endpoint_ref"]);
    app.subscribe(&endpoint, event_type, 1).await;
    endpoint
}

/// Publishes an event of `TYPE` with `key`, as another system would, with
/// a `sequence` of its own that the service must ignore.
async fn publish_keyed(app: &TestApp, key: &str, n: u32) -> String {
    let (event_ref, envelope) =
        app.envelope(TYPE, json!({"refund_ref": "ref_AAAAAAAAAAAA", "n": n}));
    let mut envelope: Value = serde_json::from_str(&envelope).unwrap();
    envelope["ordering_key"] = json!(key);
    envelope["sequence"] = json!(99);
    app.accept(&envelope.to_string()).await;
    event_ref
}

/// `(ordering_key, sequence, answered 2xx)` of each request, in arrival order.
fn arrivals(received: &[Received]) -> Vec<(String, i64, bool)> {
    let mut sorted: Vec<&Received> = received.iter().collect();
    sorted.sort_by_key(|r| r.at);
    sorted
        .iter()
        .map(|r| {
            let body = r.json();
            (
                body["ordering_key"].as_str().unwrap_or_default().to_owned(),
                body["sequence"].as_i64().unwrap_or_default(),
                r.succeeded(),
            )
        })
        .collect()
}

/// No request of a key for a sequence before its predecessor (of those
/// the receiver got) was answered 2xx; returns each key's sequences
/// delivered, in order.
fn in_order(arrivals: &[(String, i64, bool)]) -> BTreeMap<String, Vec<i64>> {
    let mut done: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    let mut open: BTreeMap<String, i64> = BTreeMap::new();
    for (key, seq, ok) in arrivals {
        let delivered = done.entry(key.clone()).or_default();
        if let Some(o) = open.get(key) {
            assert_eq!(
                o, seq,
                "{key}: {seq} was sent while {o} was not answered 2xx"
            );
        }
        if let Some(last) = delivered.last() {
            assert!(seq > last, "{key}: {seq} after {last} had succeeded");
        }
        if *ok {
            delivered.push(*seq);
            open.remove(key);
        } else {
            open.insert(key.clone(), *seq);
        }
    }
    done
}

async fn delivery(app: &TestApp, d: &str) -> Value {
    let r = get(app, &format!("/api/v1/webhook_deliveries/{d}")).await;
    r.expect(200);
    r.data().clone()
}

/// The endpoint's deliveries of key `key`, by sequence.
async fn of_key(app: &TestApp, endpoint: &str, key: &str) -> Vec<Value> {
    let mut all = billing_tests::kit::deliveries(app, endpoint).await;
    all.retain(|d| d["ordering_key"] == key);
    all.sort_by_key(|d| d["sequence"].as_i64());
    all
}

async fn blocked_keys(app: &TestApp, endpoint: &str) -> i64 {
    let r = get(app, &format!("{ENDPOINTS}/{endpoint}/health")).await;
    r.data()["blocked_keys"].as_i64().expect("blocked_keys")
}

async fn skip(app: &TestApp, d: &Value, reason: &str) -> Resp {
    app.req(
        "POST",
        &format!(
            "/api/v1/webhook_deliveries/{}/skip",
            text(&d["delivery_ref"])
        ),
    )
    .idem(&unique_key())
    .if_match(&text(&d["etag"]))
    .json(&json!({ "reason": reason }))
    .send()
    .await
}

async fn redrive(app: &TestApp, d: &Value) -> Resp {
    app.req(
        "POST",
        &format!(
            "/api/v1/webhook_deliveries/{}/redrive",
            text(&d["delivery_ref"])
        ),
    )
    .idem(&unique_key())
    .if_match(&text(&d["etag"]))
    .json(&json!({"reason": "the receiver is back"}))
    .send()
    .await
}

/// An endpoint's `ordering` is `none` unless asked; anything else is
/// refused by name.
async fn ordering_is_a_setting(app: TestApp) {
    let r = app
        .post(ENDPOINTS, json!({"url": "https://example.com/a"}))
        .send()
        .await;
    r.expect(201);
    assert_eq!(r.data()["ordering"], "none");
    for bad in [json!("fifo"), json!(1), json!("")] {
        let r = app
            .post(
                ENDPOINTS,
                json!({"url": "https://example.com/a", "ordering": bad}),
            )
            .send()
            .await;
        invalid(&r, "ordering");
    }
}

/// Under random failures and immediate retries, each key's deliveries
/// arrive one after another, in sequence, and every one arrives; the
/// sequence in the envelope is ignored and the service numbers from 1.
async fn keys_arrive_in_order_under_retries(app: TestApp) {
    let receiver = TestReceiver::start(Behaviour::FailRandomly(0.35)).await;
    let endpoint = ordered_endpoint(&app, &receiver.url(), TYPE).await;
    for n in 0..6 {
        for key in ["order-a", "order-b", "order-c"] {
            publish_keyed(&app, key, n).await;
        }
    }
    // Rounds at a moment each: a key's next delivery is due only once its
    // predecessor's success is recorded.
    for _ in 0..200 {
        app.dispatch_due(PATIENT).await;
        let done = in_order(&arrivals(&receiver.received()));
        if done.values().map(Vec::len).sum::<usize>() == 18 {
            break;
        }
    }
    let done = in_order(&arrivals(&receiver.received()));
    for key in ["order-a", "order-b", "order-c"] {
        assert_eq!(done[key], (1..=6).collect::<Vec<_>>(), "{key}");
    }
    for d in of_key(&app, &endpoint, "order-a").await {
        assert_eq!(d["status"], "succeeded");
        assert!(d["waiting_for"].is_null());
    }
}

/// A head that failed for good blocks its key: the rest wait, with
/// `waiting_for`, and health counts the key; another key goes on. A
/// redrive sends the head first, then the rest follow in order. A skip
/// releases a key past its failed head, which stays failed with
/// `skipped_at`; skipping anything but a failed delivery is refused.
async fn a_failed_head_blocks_its_key_until_redriven_or_skipped(app: TestApp) {
    let receiver = TestReceiver::start(Behaviour::Status(500)).await;
    let endpoint = ordered_endpoint(&app, &receiver.url(), TYPE).await;
    for n in 0..3 {
        publish_keyed(&app, "blocked", n).await;
    }
    app.dispatch_due("0s").await;
    let ds = of_key(&app, &endpoint, "blocked").await;
    assert_eq!(ds.len(), 3);
    assert_eq!(ds[0]["status"], "failed");
    assert_eq!(ds[0]["sequence"], 1);
    for (i, d) in ds.iter().enumerate().skip(1) {
        assert_eq!(d["status"], "pending", "{d}");
        assert!(d["next_attempt_at"].is_null(), "{d}");
        assert_eq!(d["waiting_for"], ds[i - 1]["delivery_ref"], "{d}");
    }
    assert_eq!(receiver.count(), 1, "the head alone was attempted");
    assert_eq!(blocked_keys(&app, &endpoint).await, 1);

    // Another key is not held up.
    receiver.set(Behaviour::Status(200));
    publish_keyed(&app, "free", 0).await;
    app.dispatch_due("0s").await;
    assert_eq!(
        of_key(&app, &endpoint, "free").await[0]["status"],
        "succeeded"
    );
    assert_eq!(
        of_key(&app, &endpoint, "blocked").await[1]["status"],
        "pending"
    );

    // Skip: only a failed delivery, with If-Match and a reason.
    let pending = of_key(&app, &endpoint, "blocked").await[1].clone();
    skip(&app, &pending, "no")
        .await
        .expect_error(422, "semantic_error");
    invalid(&skip(&app, &ds[0], "").await, "reason");
    app.req(
        "POST",
        &format!(
            "/api/v1/webhook_deliveries/{}/skip",
            text(&ds[0]["delivery_ref"])
        ),
    )
    .idem(&unique_key())
    .json(&json!({"reason": "r"}))
    .send()
    .await
    .expect_error(428, "precondition_required");

    // Redrive the head: it goes first, the rest follow in order.
    redrive(&app, &ds[0]).await.expect(200);
    app.dispatch_due("0s").await;
    let after = of_key(&app, &endpoint, "blocked").await;
    assert!(
        after.iter().all(|d| d["status"] == "succeeded"),
        "{after:?}"
    );
    let done = in_order(&arrivals(&receiver.received()));
    assert_eq!(done["blocked"], vec![1, 2, 3]);
    assert_eq!(blocked_keys(&app, &endpoint).await, 0);

    // Skip: the key goes on past its failed head.
    receiver.set(Behaviour::Status(500));
    for n in 0..2 {
        publish_keyed(&app, "skipped", n).await;
    }
    app.dispatch_due("0s").await;
    let head = of_key(&app, &endpoint, "skipped").await[0].clone();
    assert_eq!(head["status"], "failed");
    assert_eq!(blocked_keys(&app, &endpoint).await, 1);
    receiver.set(Behaviour::Status(200));
    let r = skip(&app, &head, "the receiver rebuilt this order by hand").await;
    r.expect(200);
    assert_eq!(r.data()["status"], "failed");
    assert!(r.data()["skipped_at"].is_string(), "{}", r.data());
    let skipped = delivery(&app, &text(&head["delivery_ref"])).await;
    skip(&app, &skipped, "again")
        .await
        .expect_error(422, "semantic_error");
    assert_eq!(blocked_keys(&app, &endpoint).await, 0);
    app.dispatch_due("0s").await;
    let after = of_key(&app, &endpoint, "skipped").await;
    assert_eq!(after[1]["status"], "succeeded", "{after:?}");
}

/// A `per_key` endpoint for `url`, subscribed to three of a paid one-time
/// checkout's events.
async fn checkout_endpoint(app: &TestApp, url: &str) {
    let types = [
        "payment.succeeded",
        "checkout_session.completed",
        "order.created",
    ];
    let endpoint = ordered_endpoint(app, url, types[0]).await;
    for t in &types[1..] {
        app.subscribe(&endpoint, t, 1).await;
    }
}

/// The service's own events of a one-time checkout carry the session's
/// reference as their key, numbered from 1 without a gap in the order the
/// unit of work emitted them.
async fn own_events_are_keyed_by_their_session(app: TestApp) {
    let receiver = TestReceiver::start(Behaviour::Status(200)).await;
    checkout_endpoint(&app, &receiver.url()).await;
    let config = one_time_config(&app, &["1000"]).await;
    let session = new_session(&app, &config).await;
    pay(&app, &session, "pm_card_visa").await;
    let pipeline = Pipeline::embedded(&app);
    app.all_received(&receiver, 3, 20, Vec::new()).await;
    pipeline.shutdown().await;
    let mut bodies: Vec<Value> = receiver.received().iter().map(|r| r.json()).collect();
    bodies.sort_by_key(|b| b["sequence"].as_i64());
    for b in &bodies {
        assert_eq!(b["ordering_key"], session.as_str(), "{b}");
    }
    let seqs: Vec<i64> = bodies
        .iter()
        .filter_map(|b| b["sequence"].as_i64())
        .collect();
    assert_eq!(seqs.len(), 3);
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
    let done = in_order(&arrivals(&receiver.received()));
    assert_eq!(done[&session].len(), 3);
}

backend_tests!(
    ordering_is_a_setting,
    keys_arrive_in_order_under_retries,
    a_failed_head_blocks_its_key_until_redriven_or_skipped,
    own_events_are_keyed_by_their_session,
);

static FLEET: Once = Once::new();

/// A fleet: the relay publishes to RabbitMQ, two consumers accept the
/// events (in whatever order they win them) and two dispatchers deliver;
/// a per_key endpoint still receives each session's events in the order
/// their units of work emitted them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fleet_delivers_each_key_in_order() {
    if !fleet_or_say(&FLEET, "PostgreSQL and RabbitMQ") {
        return;
    }
    let Some(app) = TestApp::spawn_fleet().await else {
        return;
    };
    let queues = TestQueues::declare().await;
    // Every answer a success: the pipeline's dispatchers retry twice at
    // most, and a head that failed for good would block its key.
    let receiver = TestReceiver::start(Behaviour::Status(200)).await;
    checkout_endpoint(&app, &receiver.url()).await;
    let config = one_time_config(&app, &["1000"]).await;
    let mut sessions = BTreeSet::new();
    for _ in 0..6 {
        let session = new_session(&app, &config).await;
        pay(&app, &session, "pm_card_visa").await;
        sessions.insert(session);
    }
    let pipeline = Pipeline::fleet(&app, &queues.settings);
    let all = app
        .eventually(60, || async {
            let done = in_order(&arrivals(&receiver.received()));
            (done.values().map(Vec::len).sum::<usize>() == 18).then_some(done)
        })
        .await;
    pipeline.shutdown().await;
    queues.cleanup().await;
    for s in &sessions {
        assert_eq!(all[s], vec![1, 2, 3], "{s}");
    }
}
