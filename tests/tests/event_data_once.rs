//! An event's data is stored once per dto version its deliveries carry
//! (packed: the lowest version on the event's row, any other in
//! `webhook_event_data`), not in every delivery: a fan-out to three
//! endpoints on one version keeps one copy, each endpoint still receives
//! the data in its own version, the copies go with their event, and a
//! delivery written before (with its own copy) is delivered from it. A
//! body shaped for no grant is not stored either: the body view builds it
//! again from the event's copy, the same as it was sent; a body a grant
//! shaped is kept as sent. Nor are the match reasons of a delivery that
//! one environment-wide subscription matched.

use billing_tests::receiver::{Behaviour, TestReceiver};
use billing_tests::{backend_tests, event_copies_sql, TestApp};
use domain::retention::RetentionPolicy;
use domain::Timestamp;
use serde_json::Value;
use std::time::Duration;

const DAY: Duration = Duration::from_secs(86_400);

fn payment() -> Value {
    domain::webhook::catalogue::example("payment.succeeded", 2).expect("example")
}

/// What an endpoint without a grant receives of `payment()` in version 2.
fn shaped() -> Value {
    domain::webhook::shaping::shape_owned("payment.succeeded", 2, payment(), None)
}

/// The one text column `sql` selects, row by row.
async fn texts(app: &TestApp, sql: &str) -> Vec<Option<String>> {
    let pool = app.raw_pool().await;
    let rows: Vec<Option<String>> = sqlx::query_scalar(sql).fetch_all(&pool).await.unwrap();
    pool.close().await;
    rows
}

/// The `data` of the one body `receiver` got.
fn data_received(receiver: &TestReceiver) -> Value {
    let got = receiver.received();
    assert_eq!(got.len(), 1, "one request");
    got[0].json()["data"].clone()
}

async fn a_fan_out_keeps_one_copy_per_version_and_each_endpoint_its_data(app: TestApp) {
    let on_two: Vec<TestReceiver> = vec![
        TestReceiver::start(Behaviour::Status(204)).await,
        TestReceiver::start(Behaviour::Status(204)).await,
        TestReceiver::start(Behaviour::Status(204)).await,
    ];
    for r in &on_two {
        app.subscribed_endpoint(&r.url(), "payment.succeeded", 2)
            .await;
    }
    let on_one = TestReceiver::start(Behaviour::Status(204)).await;
    app.subscribed_endpoint(&on_one.url(), "payment.succeeded", 1)
        .await;
    let event = app.publish("payment.succeeded", payment()).await;

    let stored = event_copies_sql(&event);
    let copies = format!("SELECT COUNT(*) FROM ({stored}) copies");
    assert_eq!(app.count(&copies).await, 2, "one copy per dto version");
    let on_event = format!("SELECT COUNT(*) FROM ({stored}) copies WHERE copy_on_event = 1");
    assert_eq!(
        app.count(&on_event).await,
        1,
        "the lowest version's on the event's row"
    );
    let versions = format!("SELECT copy_dto_version FROM events WHERE event_ref = '{event}'");
    assert_eq!(
        app.count(&versions).await,
        1,
        "version 1 on the event's row"
    );
    for copy in texts(&app, &stored).await.into_iter().flatten() {
        let data = store::packed::unpack(&copy);
        assert!(copy.starts_with("~2"), "stored packed: {copy}");
        assert!(
            copy.len() < data.len(),
            "packed shorter: {} of {} bytes",
            copy.len(),
            data.len()
        );
        serde_json::from_str::<Value>(&data).expect("it unpacks to the event's JSON data");
    }
    let own = format!(
        "SELECT COUNT(*) FROM webhook_deliveries WHERE event_ref = '{event}' AND event_data <> ''"
    );
    assert_eq!(app.count(&own).await, 0, "no delivery keeps its own");

    app.dispatch_due("0s").await;
    let sent = shaped();
    for r in &on_two {
        assert_eq!(data_received(r), sent, "version 2 as published, shaped");
    }
    let older = data_received(&on_one);
    let v1 = domain::webhook::shaping::convert("payment.succeeded", 2, 1, &payment());
    let v1 = domain::webhook::shaping::shape_owned("payment.succeeded", 1, v1, None);
    assert_ne!(older, sent, "version 1 is its own shape");
    assert_eq!(older, v1, "converted from version 2, shaped");

    // Settled and past retention, the event goes with its copies.
    let policy = RetentionPolicy::new(DAY, DAY, DAY, DAY).expect("a valid policy");
    let later = Timestamp::now().plus_millis(2 * DAY.as_millis() as i64);
    dispatcher::retention::sweep(&app.store, &policy, later)
        .await
        .expect("the sweep runs");
    assert_eq!(app.count(&copies).await, 0, "gone with their event");
}

async fn a_delivery_written_with_its_own_copy_is_delivered_from_it(app: TestApp) {
    let receiver = TestReceiver::start(Behaviour::Status(204)).await;
    let (endpoint, _) = app
        .subscribed_endpoint(&receiver.url(), "payment.succeeded", 2)
        .await;
    // As a delivery written before its event's data was shared: its own
    // copy, no shared one.
    let env = &app.sandbox.environment_ref;
    let now = Timestamp::now().millis();
    let data = payment().to_string().replace('\'', "''");
    let pool = app.raw_pool().await;
    sqlx::query(&format!(
        "INSERT INTO webhook_deliveries (delivery_ref, environment_ref, endpoint_ref, \
         event_ref, public_event_type, dto_version, status, diagnostic, generation, attempt_count, \
         next_attempt_at, occurred_at, event_data, match_reasons, body_status, created_at, \
         updated_at) VALUES ('whd_before', '{env}', '{endpoint}', 'evt_before', \
         'payment.succeeded', 2, 'pending', 0, 1, 0, {now}, {now}, '{data}', '[]', 'available', \
         {now}, {now})"
    ))
    .execute(&pool)
    .await
    .unwrap();
    pool.close().await;

    app.dispatch_due("0s").await;
    assert_eq!(data_received(&receiver), shaped());
}

/// The body view of `endpoint`'s one delivery, and the delivery's stored
/// `payload` column.
async fn body_of(app: &TestApp, endpoint: &str) -> (Value, Option<String>) {
    let list = app
        .get(&format!("/api/v1/webhook_endpoints/{endpoint}/deliveries"))
        .send()
        .await;
    list.expect(200);
    let items = list.data()["items"].as_array().cloned().unwrap_or_default();
    assert_eq!(items.len(), 1, "one delivery: {}", list.text);
    let delivery = items[0]["delivery_ref"].as_str().unwrap().to_owned();
    let view = app
        .get(&format!("/api/v1/webhook_deliveries/{delivery}/body"))
        .send()
        .await;
    view.expect(200);
    assert_eq!(view.data()["body_status"], "available", "{}", view.text);
    let stored = texts(
        app,
        &format!("SELECT payload FROM webhook_deliveries WHERE delivery_ref = '{delivery}'"),
    )
    .await;
    assert_eq!(stored.len(), 1, "one row");
    (view.data().clone(), stored[0].clone())
}

async fn a_body_shaped_for_no_grant_is_built_again_and_a_granted_one_kept(app: TestApp) {
    let plain = TestReceiver::start(Behaviour::Status(204)).await;
    let (plain_ref, _) = app
        .subscribed_endpoint(&plain.url(), "payment.succeeded", 2)
        .await;
    let granted = TestReceiver::start(Behaviour::Status(204)).await;
    let (granted_ref, _) = app
        .subscribed_endpoint(&granted.url(), "payment.succeeded", 2)
        .await;
    app.post(
        &format!("/api/v1/webhook_endpoints/{granted_ref}/data_profile_grants"),
        serde_json::json!({"purpose": "fulfillment", "reason": "ship the goods",
            "data_classes": ["contact"], "custom_field_refs": []}),
    )
    .send()
    .await
    .expect(201);
    app.publish("payment.succeeded", payment()).await;
    app.dispatch_due("0s").await;

    let (view, stored) = body_of(&app, &plain_ref).await;
    assert_eq!(stored.as_deref(), Some(""), "not stored: built again");
    let sent = plain.received()[0].json();
    assert_eq!(view["payload"], sent, "the body view is the body sent");
    assert_eq!(sent["data"], shaped());
    // One subscription over the whole environment: its reasons are the
    // delivery's own type, environment and version, not stored but shown.
    let reasons = texts(
        &app,
        &format!("SELECT match_reasons FROM webhook_deliveries WHERE endpoint_ref = '{plain_ref}'"),
    )
    .await;
    assert_eq!(reasons, [Some("null".to_owned())]);
    let env = &app.sandbox.environment_ref;
    assert_eq!(
        view["match_reasons"],
        serde_json::json!([{"kind": "subscription", "public_event_type": "payment.succeeded",
            "scope_type": "environment", "scope_ref": env, "dto_version": 2}])
    );

    let (view, stored) = body_of(&app, &granted_ref).await;
    let sent = granted.received()[0].json();
    assert_eq!(view["payload"], sent, "the body view is the body sent");
    assert_eq!(sent["data"]["buyer"]["email"], payment()["buyer"]["email"]);
    let stored: Value = serde_json::from_str(&stored.expect("kept")).expect("JSON");
    assert_eq!(stored, sent, "kept as sent");
}

backend_tests!(
    a_fan_out_keeps_one_copy_per_version_and_each_endpoint_its_data,
    a_delivery_written_with_its_own_copy_is_delivered_from_it,
    a_body_shaped_for_no_grant_is_built_again_and_a_granted_one_kept,
);
