//! Operational events (contract 13.4), black-box, on every backend: an
//! endpoint whose attempts keep failing is announced `failing` once (with
//! `disable_at`), then `recovered` once when an attempt succeeds; each
//! delivery out of retries is announced `webhook_delivery.failed` with the
//! delivery as the API shows it; an endpoint answering 410 is announced
//! `disabled` with reason `gone`. None of them reaches the endpoint it is
//! about.

use billing_tests::kit::api::*;
use billing_tests::kit::{get, text};
use billing_tests::receiver::{Behaviour, TestReceiver};
use billing_tests::{backend_tests, TestApp};
use serde_json::{json, Value};

const TYPE: &str = "refund.created";
const OPERATIONAL: &[&str] = &[
    "webhook_endpoint.failing",
    "webhook_endpoint.recovered",
    "webhook_endpoint.disabled",
    "webhook_delivery.failed",
];

async fn endpoint(app: &TestApp, url: &str, types: &[&str]) -> String {
    let r = app.post(ENDPOINTS, json!({ "url": url })).send().await;
    r.expect(201);
    let e = text(&r.data()["endpoint_ref"]);
    for t in types {
        app.subscribe(&e, t, 1).await;
    }
    e
}

/// The bodies `receiver` got of `event_type`.
fn of_type(receiver: &TestReceiver, event_type: &str) -> Vec<Value> {
    receiver
        .received()
        .iter()
        .map(|r| r.json())
        .filter(|b| b["public_event_type"] == event_type)
        .collect()
}

/// Delivers what is due, relays the operational events that makes into
/// the queue (the embedded relay, as `billing serve` runs it), and delivers
/// those, until the outbox stays empty.
async fn settle(app: &TestApp) {
    let stop = tokio_util::sync::CancellationToken::new();
    let relay = tokio::spawn(dispatcher::outbox::relay(
        app.store.clone(),
        dispatcher::outbox::Target::Queue(app.queue.clone()),
        stop.clone(),
    ));
    for _ in 0..4 {
        app.dispatch_due("0s").await;
        app.eventually(10, || async {
            let left = app.store.outbox_batch(1).await.expect("the store");
            left.is_empty().then_some(())
        })
        .await;
    }
    stop.cancel();
    relay.await.expect("the relay stops");
}

async fn failing_then_recovered_and_each_failed_delivery(app: TestApp) {
    let watcher = TestReceiver::start(Behaviour::Status(200)).await;
    let broken = TestReceiver::start(Behaviour::Status(500)).await;
    let mut types = vec![TYPE];
    types.extend(OPERATIONAL);
    let w = endpoint(&app, &watcher.url(), OPERATIONAL).await;
    let b = endpoint(&app, &broken.url(), &types).await;
    for n in 0..6 {
        app.publish(TYPE, json!({"refund_ref": "ref_AAAAAAAAAAAA", "n": n}))
            .await;
    }
    settle(&app).await;

    let failing = of_type(&watcher, "webhook_endpoint.failing");
    assert_eq!(failing.len(), 1, "{failing:?}");
    let data = &failing[0]["data"];
    assert_eq!(data["endpoint_ref"], b.as_str());
    assert_eq!(data["health"], "failing");
    assert!(data["disable_at"].is_string(), "{data}");
    assert!(failing[0]["ordering_key"].is_null());

    let failed = of_type(&watcher, "webhook_delivery.failed");
    assert_eq!(failed.len(), 6, "{failed:?}");
    for f in &failed {
        let d = &f["data"];
        assert_eq!(d["endpoint_ref"], b.as_str());
        assert_eq!(d["status"], "failed");
        let shown = get(
            &app,
            &format!("/api/v1/webhook_deliveries/{}", text(&d["delivery_ref"])),
        )
        .await;
        assert_eq!(shown.data()["event_ref"], d["event_ref"]);
        assert_eq!(shown.data()["attempt_count"], d["attempt_count"]);
    }

    // One success: recovered, once.
    broken.set(Behaviour::Status(200));
    app.publish(TYPE, json!({"refund_ref": "ref_AAAAAAAAAAAA", "n": 9}))
        .await;
    settle(&app).await;
    let recovered = of_type(&watcher, "webhook_endpoint.recovered");
    assert_eq!(recovered.len(), 1, "{recovered:?}");
    assert_eq!(recovered[0]["data"]["endpoint_ref"], b.as_str());
    assert_eq!(of_type(&watcher, "webhook_endpoint.failing").len(), 1);

    // None reached the endpoint it is about.
    for t in OPERATIONAL {
        assert!(
            of_type(&broken, t).is_empty(),
            "{t} reached its own endpoint"
        );
    }
    let _ = w;
}

async fn a_gone_endpoint_is_announced_disabled(app: TestApp) {
    let watcher = TestReceiver::start(Behaviour::Status(200)).await;
    let gone = TestReceiver::start(Behaviour::Status(410)).await;
    endpoint(&app, &watcher.url(), OPERATIONAL).await;
    let g = endpoint(&app, &gone.url(), &[TYPE, "webhook_endpoint.disabled"]).await;
    app.publish(TYPE, json!({"refund_ref": "ref_AAAAAAAAAAAA"}))
        .await;
    settle(&app).await;
    let disabled = of_type(&watcher, "webhook_endpoint.disabled");
    assert_eq!(disabled.len(), 1, "{disabled:?}");
    let data = &disabled[0]["data"];
    assert_eq!(data["endpoint_ref"], g.as_str());
    assert_eq!(data["reason"], "gone");
    assert_eq!(data["status"], "disabled");
    assert!(of_type(&gone, "webhook_endpoint.disabled").is_empty());
}

backend_tests!(
    failing_then_recovered_and_each_failed_delivery,
    a_gone_endpoint_is_announced_disabled,
);
