//! `listWebhookDeliveries`' filters (contract 12.2) on every backend:
//! `status`, `public_event_type`, `created_after`, `created_before` and
//! `last_response_class`, alone and together, with cursors bound to them,
//! and bad values refused by name.

use billing_tests::kit::{invalid, items, refs};
use billing_tests::receiver::{Behaviour, TestReceiver};
use billing_tests::{backend_tests, TestApp};
use serde_json::{json, Value};
use std::time::Duration;

fn deliveries(endpoint: &str) -> String {
    format!("/api/v1/webhook_endpoints/{endpoint}/deliveries")
}

/// The endpoint's deliveries matching `query`, newest first.
async fn listed(app: &TestApp, endpoint: &str, query: &str) -> Vec<Value> {
    let r = app
        .get(&format!("{}?limit=100&{query}", deliveries(endpoint)))
        .send()
        .await;
    r.expect(200);
    items(&r)
}

/// Publishes one event and waits until the endpoint's newest delivery
/// settles in `status`; returns its reference.
/// Publishes an event, attempts its delivery once (`TestApp::dispatch_due`
/// with a short time-out) and checks it is `status`; its reference.
async fn settle(app: &TestApp, endpoint: &str, event_type: &str, status: &str) -> String {
    app.publish(event_type, json!({})).await;
    let settings = dispatcher::DispatchSettings {
        timeout: Duration::from_millis(300),
        ..app.dispatch_settings("0s")
    };
    assert_eq!(app.dispatch_due_with(settings).await.attempted, 1);
    let newest = listed(app, endpoint, "").await.remove(0);
    assert_eq!(newest["status"], status, "{newest}");
    newest["delivery_ref"].as_str().unwrap().to_owned()
}

async fn each_filter_and_their_combinations_select_what_they_name(app: TestApp) {
    let receiver = TestReceiver::start(Behaviour::Status(204)).await;
    let (endpoint, _) = app
        .subscribed_endpoint(&receiver.url(), "payment.succeeded", 1)
        .await;
    app.subscribe(&endpoint, "invoice.paid", 1).await;
    let ok = settle(&app, &endpoint, "payment.succeeded", "succeeded").await;
    receiver.set(Behaviour::Status(404));
    let client_error = settle(&app, &endpoint, "invoice.paid", "failed").await;
    let middle = domain::Timestamp::now();
    billing_tests::poll::next_millisecond().await;
    receiver.set(Behaviour::Status(500));
    let server_error = settle(&app, &endpoint, "payment.succeeded", "failed").await;
    receiver.set(Behaviour::Hang(Duration::from_secs(2)));
    let unanswered = settle(&app, &endpoint, "payment.succeeded", "failed").await;

    let select = |query: &'static str| {
        let (app, endpoint) = (&app, &endpoint);
        async move { refs(&listed(app, endpoint, query).await, "delivery_ref") }
    };
    assert_eq!(select("").await.len(), 4);
    assert_eq!(select("status=succeeded").await, std::slice::from_ref(&ok));
    assert_eq!(
        select("status=failed").await,
        [
            unanswered.clone(),
            server_error.clone(),
            client_error.clone()
        ]
    );
    assert!(select("status=pending").await.is_empty());
    assert_eq!(
        select("public_event_type=invoice.paid").await,
        std::slice::from_ref(&client_error)
    );
    assert_eq!(
        select("last_response_class=4xx").await,
        std::slice::from_ref(&client_error)
    );
    assert_eq!(
        select("last_response_class=5xx").await,
        std::slice::from_ref(&server_error)
    );
    assert_eq!(
        select("last_response_class=none").await,
        std::slice::from_ref(&unanswered)
    );
    assert_eq!(
        select("status=failed&public_event_type=payment.succeeded").await,
        [unanswered.clone(), server_error.clone()]
    );
    let at = middle.to_rfc3339();
    assert_eq!(
        refs(
            &listed(&app, &endpoint, &format!("created_before={at}")).await,
            "delivery_ref"
        ),
        [client_error.clone(), ok.clone()]
    );
    assert_eq!(
        refs(
            &listed(
                &app,
                &endpoint,
                &format!("created_after={at}&status=failed")
            )
            .await,
            "delivery_ref"
        ),
        [unanswered.clone(), server_error.clone()]
    );

    // Pages of a filtered list, with the cursor bound to its filters.
    let first = app
        .get(&format!("{}?limit=1&status=failed", deliveries(&endpoint)))
        .send()
        .await;
    first.expect(200);
    assert_eq!(first.data()["has_more"], true);
    let cursor = first.data()["next_cursor"].as_str().unwrap().to_owned();
    let next = app
        .get(&format!(
            "{}?limit=2&status=failed&cursor={cursor}",
            deliveries(&endpoint)
        ))
        .send()
        .await;
    next.expect(200);
    assert_eq!(
        refs(&items(&next), "delivery_ref"),
        [server_error, client_error]
    );
    let other = app
        .get(&format!(
            "{}?limit=2&status=succeeded&cursor={cursor}",
            deliveries(&endpoint)
        ))
        .send()
        .await;
    other.expect(400);
}

async fn bad_filter_values_are_refused_by_name(app: TestApp) {
    let receiver = TestReceiver::start(Behaviour::Status(204)).await;
    let (endpoint, _) = app
        .subscribed_endpoint(&receiver.url(), "payment.succeeded", 1)
        .await;
    for (query, field) in [
        ("status=done", "status"),
        ("public_event_type=payment.done", "public_event_type"),
        ("created_after=yesterday", "created_after"),
        ("created_before=2026-13-01T00:00:00Z", "created_before"),
        ("last_response_class=2xx", "last_response_class"),
        ("colour=red", "colour"),
    ] {
        let r = app
            .get(&format!("{}?{query}", deliveries(&endpoint)))
            .send()
            .await;
        invalid(&r, field);
    }
}

backend_tests!(
    each_filter_and_their_combinations_select_what_they_name,
    bad_filter_values_are_refused_by_name,
);
