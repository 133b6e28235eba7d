//! Filters on subscriptions (contract 13.3), black-box, on every backend:
//! a subscription shows its filter; a malformed one is refused by its path;
//! an event reaches a filtered subscription only when the filter holds on
//! the body the endpoint would receive; a preview answers from the events
//! already kept and creates nothing.

use billing_tests::kit::api::*;
use billing_tests::kit::{get, text};
use billing_tests::receiver::{Behaviour, TestReceiver};
use billing_tests::{backend_tests, Resp, TestApp};
use serde_json::{json, Value};

const TYPE: &str = "refund.created";

fn subscription(app: &TestApp, filter: Option<Value>) -> Value {
    let mut body = json!({"public_event_type": TYPE, "scope_type": "environment",
        "scope_ref": app.sandbox.environment_ref, "dto_version": 1});
    if let Some(f) = filter {
        body["filter"] = f;
    }
    body
}

async fn subscribe(app: &TestApp, endpoint: &str, filter: Option<Value>) -> Resp {
    app.post(
        &format!("{ENDPOINTS}/{endpoint}/subscriptions"),
        subscription(app, filter),
    )
    .send()
    .await
}

async fn endpoint(app: &TestApp, url: &str) -> String {
    let r = app.post(ENDPOINTS, json!({ "url": url })).send().await;
    r.expect(201);
    text(&r.data()["endpoint_ref"])
}

async fn publish(app: &TestApp, n: u32, currency: &str) -> String {
    app.publish(
        TYPE,
        json!({"refund_ref": "ref_AAAAAAAAAAAA", "n": n,
            "amount": {"currency": currency, "unit": "minor", "value": format!("{}", n * 1000)}}),
    )
    .await
}

/// A subscription shows its filter, or null; a malformed filter is refused
/// with the path of each defect.
async fn a_filter_is_shown_and_checked(app: TestApp) {
    let e = endpoint(&app, "https://example.com/f").await;
    let filter = json!({"data.amount.value": {"$gte": "2000"}, "$not": {"data.n": 3}});
    let r = subscribe(&app, &e, Some(filter.clone())).await;
    r.expect(201);
    assert_eq!(r.data()["filter"], filter);
    let listed = get(&app, &format!("{ENDPOINTS}/{e}/subscriptions")).await;
    assert_eq!(
        listed.data()["items"][0]["filter"],
        filter,
        "{}",
        listed.data()
    );

    let other = endpoint(&app, "https://example.com/g").await;
    let r = subscribe(&app, &other, None).await;
    r.expect(201);
    assert!(r.data()["filter"].is_null());

    for (bad, field) in [
        (json!({"a": {"$near": 1}}), "filter.a.$near"),
        (json!({"$or": []}), "filter.$or"),
        (json!({"a": {"$in": "x"}}), "filter.a.$in"),
        (json!([1]), "filter"),
        (json!({"a": "x".repeat(5000)}), "filter"),
    ] {
        let r = subscribe(&app, &other, Some(bad)).await;
        r.expect_error(400, "validation_failed");
        let fields: Vec<String> = r.json["error"]["details"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|d| d["field"].as_str().map(str::to_owned))
            .collect();
        assert!(fields.iter().any(|f| f == field), "{field}: {}", r.text);
    }
}

/// Only events the filter holds for reach the filtered subscription's
/// endpoint; an unfiltered one gets them all.
async fn only_matching_events_are_delivered(app: TestApp) {
    let filtered = TestReceiver::start(Behaviour::Status(200)).await;
    let all = TestReceiver::start(Behaviour::Status(200)).await;
    let f = endpoint(&app, &filtered.url()).await;
    let a = endpoint(&app, &all.url()).await;
    subscribe(
        &app,
        &f,
        Some(
            json!({"data.amount.value": {"$gte": 2000}, "data.amount.currency": {"$in": ["EUR"]}}),
        ),
    )
    .await
    .expect(201);
    subscribe(&app, &a, None).await.expect(201);
    for (n, currency) in [(1, "EUR"), (2, "EUR"), (3, "USD"), (4, "EUR")] {
        publish(&app, n, currency).await;
    }
    app.dispatch_due("0s").await;
    assert_eq!(all.count(), 4);
    let mut got: Vec<i64> = filtered
        .received()
        .iter()
        .filter_map(|r| r.json()["data"]["n"].as_i64())
        .collect();
    got.sort();
    assert_eq!(got, vec![2, 4]);
}

/// A preview counts the kept events of the type the body would match, with
/// up to 10 samples, newest first, and creates nothing.
async fn a_preview_answers_from_kept_events(app: TestApp) {
    let all = TestReceiver::start(Behaviour::Status(200)).await;
    let a = endpoint(&app, &all.url()).await;
    subscribe(&app, &a, None).await.expect(201);
    let mut refs = Vec::new();
    for n in 0..5 {
        refs.push(publish(&app, n, "EUR").await);
    }
    let e = endpoint(&app, "https://example.com/p").await;
    let path = format!("{ENDPOINTS}/{e}/subscriptions/preview");
    let r = app
        .post(
            &path,
            subscription(&app, Some(json!({"data.n": {"$gte": 3}}))),
        )
        .send()
        .await;
    r.expect(200);
    assert_eq!(r.data()["examined"], 5, "{}", r.data());
    assert_eq!(r.data()["matched"], 2, "{}", r.data());
    let samples: Vec<String> = r.data()["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| text(&s["event_ref"]))
        .collect();
    assert_eq!(samples, vec![refs[4].clone(), refs[3].clone()]);
    let r = app.post(&path, subscription(&app, None)).send().await;
    assert_eq!(r.data()["matched"], 5);
    let r = app
        .post(&path, subscription(&app, Some(json!({"a": {"$bad": 1}}))))
        .send()
        .await;
    r.expect_error(400, "validation_failed");
    let listed = get(&app, &format!("{ENDPOINTS}/{e}/subscriptions")).await;
    assert_eq!(listed.data()["items"].as_array().map(Vec::len), Some(0));
}

backend_tests!(
    a_filter_is_shown_and_checked,
    only_matching_events_are_delivered,
    a_preview_answers_from_kept_events,
);
