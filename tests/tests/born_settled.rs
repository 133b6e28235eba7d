//! Deliveries attempted before they are written (`dispatcher::queue`), on
//! every backend: to a quick endpoint, a fresh delivery whose first
//! attempt succeeds is born settled (its row written once, its attempt
//! listed as any); one still in flight when the write stops waiting, or
//! that failed, is written leased and recorded as any; and its reference
//! is keyed, so that the same event accepted again, by another process
//! racing this one, sends the same `webhook-id`.

use billing_tests::kit::{attempts, deliveries};
use billing_tests::receiver::{Behaviour, TestReceiver};
use billing_tests::{backend_tests, TestApp};
use serde_json::Value;
use std::time::Duration;

fn payment() -> Value {
    domain::webhook::catalogue::example("payment.succeeded", 2).expect("example")
}

/// How many times the delivery's row was written (its `version`).
async fn writes(app: &TestApp, delivery_ref: &str) -> i64 {
    app.count(&format!(
        "SELECT version FROM webhook_deliveries WHERE delivery_ref = '{delivery_ref}'"
    ))
    .await
}

/// The delivery of `event_ref` to the endpoint, once it has `status`.
async fn delivery_of(app: &TestApp, endpoint: &str, event_ref: &str, status: &str) -> Value {
    app.eventually(20, || async {
        deliveries(app, endpoint)
            .await
            .into_iter()
            .find(|d| d["event_ref"] == event_ref && d["status"] == status)
    })
    .await
}

/// A receiver behind an endpoint subscribed to `payment.succeeded` v2, a
/// dispatcher with `settings`, and a first delivery made: its attempt
/// shows the endpoint quick to the dispatcher.
struct Quick {
    receiver: TestReceiver,
    endpoint: String,
    dispatcher: billing_tests::DispatcherHandle,
    /// The first delivery, succeeded.
    first: Value,
}

async fn quick_endpoint(
    app: &TestApp,
    behaviour: Behaviour,
    settings: dispatcher::DispatchSettings,
) -> Quick {
    let receiver = TestReceiver::start(behaviour).await;
    let (endpoint, _) = app
        .subscribed_endpoint(&receiver.url(), "payment.succeeded", 2)
        .await;
    let dispatcher = app.start_dispatcher(settings);
    let event_ref = app.publish("payment.succeeded", payment()).await;
    let first = delivery_of(app, &endpoint, &event_ref, "succeeded").await;
    Quick {
        receiver,
        endpoint,
        dispatcher,
        first,
    }
}

/// The reference the delivery of `event_ref` (occurred at
/// `occurred_at`) to `endpoint` is keyed to.
fn keyed(app: &TestApp, event_ref: &str, endpoint: &str, occurred_at: i64) -> domain::Ref {
    domain::Ref::keyed(
        domain::Prefix::WebhookDelivery,
        occurred_at,
        app.cipher.reference_key(),
        &format!("{event_ref}/{endpoint}/2"),
    )
}

/// The requests `receiver` got for `event_ref`.
fn sent_for(receiver: &TestReceiver, event_ref: &str) -> Vec<billing_tests::receiver::Received> {
    receiver
        .received()
        .into_iter()
        .filter(|r| r.json()["event_ref"] == event_ref)
        .collect()
}

async fn a_quick_endpoints_delivery_is_born_settled(app: TestApp) {
    let settings = app.dispatch_settings("0s,1s");
    let Quick {
        receiver,
        endpoint,
        dispatcher,
        first,
    } = quick_endpoint(&app, Behaviour::Status(204), settings).await;
    let first_ref = first["delivery_ref"].as_str().unwrap();
    let event_ref = app.publish("payment.succeeded", payment()).await;
    let d = delivery_of(&app, &endpoint, &event_ref, "succeeded").await;
    let delivery_ref = d["delivery_ref"].as_str().unwrap();
    dispatcher.shutdown().await;

    assert_eq!(writes(&app, first_ref).await, 2, "inserted, then recorded");
    assert_eq!(writes(&app, delivery_ref).await, 1, "inserted settled");
    assert_eq!(d["attempt_count"], 1, "{d}");
    let tried = attempts(&app, delivery_ref).await;
    assert_eq!(tried.len(), 1, "{tried:?}");
    assert_eq!(tried[0]["status"], "succeeded");
    assert_eq!(tried[0]["response_status"], 204);
    // Created before its attempt started, as any delivery.
    assert!(
        d["created_at"].as_str() <= tried[0]["started_at"].as_str(),
        "{d} {tried:?}"
    );
    let sent = sent_for(&receiver, &event_ref);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].header("webhook-id"), delivery_ref);
    let body = app
        .get(&format!("/api/v1/webhook_deliveries/{delivery_ref}/body"))
        .send()
        .await;
    assert_eq!(body.data()["payload"], sent[0].json());
    // Its reference is keyed: the same event, endpoint and version give
    // it again, in this process or another sharing the secret key.
    let occurred_at = app
        .count(&format!(
            "SELECT occurred_at FROM webhook_deliveries WHERE delivery_ref = '{delivery_ref}'"
        ))
        .await;
    let keyed = keyed(&app, &event_ref, &endpoint, occurred_at);
    assert_eq!(keyed.as_str(), delivery_ref);
}

async fn an_attempt_still_in_flight_is_written_leased_and_recorded(app: TestApp) {
    // Slower than the write waits (`FIRST_ATTEMPTS`), quicker than the
    // quick limit (a second).
    let hang = Behaviour::Hang(Duration::from_millis(500));
    let settings = app.dispatch_settings("0s,1s");
    let Quick {
        receiver,
        endpoint,
        dispatcher,
        ..
    } = quick_endpoint(&app, hang, settings).await;
    let event_ref = app.publish("payment.succeeded", payment()).await;
    let d = delivery_of(&app, &endpoint, &event_ref, "succeeded").await;
    dispatcher.shutdown().await;
    let delivery_ref = d["delivery_ref"].as_str().unwrap();
    assert_eq!(
        writes(&app, delivery_ref).await,
        2,
        "inserted, then recorded"
    );
    assert_eq!(attempts(&app, delivery_ref).await.len(), 1);
    assert_eq!(receiver.count(), 2, "one request per delivery");
}

async fn a_first_attempt_that_fails_is_recorded_with_its_retry(app: TestApp) {
    let settings = app.dispatch_settings("0s,30s");
    let Quick {
        receiver,
        endpoint,
        dispatcher,
        ..
    } = quick_endpoint(&app, Behaviour::Status(204), settings).await;
    receiver.set(Behaviour::Status(500));
    let event_ref = app.publish("payment.succeeded", payment()).await;
    let d = app
        .eventually(20, || async {
            deliveries(&app, &endpoint)
                .await
                .into_iter()
                .find(|d| d["event_ref"] == event_ref.as_str() && d["attempt_count"] == 1)
        })
        .await;
    dispatcher.shutdown().await;
    assert_eq!(d["status"], "pending", "{d}");
    let tried = attempts(&app, d["delivery_ref"].as_str().unwrap()).await;
    assert_eq!(tried.len(), 1, "{tried:?}");
    assert_eq!(tried[0]["status"], "failed");
    assert_eq!(tried[0]["response_status"], 500);
    assert!(tried[0]["next_attempt_at"].is_string(), "{tried:?}");
}

async fn one_event_accepted_by_two_processes_sends_one_webhook_id(app: TestApp) {
    let receiver = TestReceiver::start(Behaviour::Status(204)).await;
    let (endpoint, _) = app
        .subscribed_endpoint(&receiver.url(), "payment.succeeded", 2)
        .await;
    // A second process: its own queue and dispatcher over the same store.
    let other_queue = dispatcher::EventQueue::new(app.store.clone());
    let mut settings = app.dispatch_settings("0s,1s");
    settings.worker_id = "the-other-process".into();
    let stop = tokio_util::sync::CancellationToken::new();
    let other =
        tokio::spawn(dispatcher::Dispatcher::new(other_queue.clone(), settings).run(stop.clone()));
    let mine = app.start_dispatcher(app.dispatch_settings("0s,1s"));
    // Each shows the endpoint quick to itself.
    for queue in [&app.queue, &other_queue] {
        let (event_ref, envelope) = app.envelope("payment.succeeded", payment());
        dispatcher::intake::accept(queue, envelope.as_bytes(), "test")
            .await
            .expect("accepted");
        delivery_of(&app, &endpoint, &event_ref, "succeeded").await;
    }
    for _ in 0..5 {
        let (event_ref, envelope) = app.envelope("payment.succeeded", payment());
        let (a, b) = tokio::join!(
            dispatcher::intake::accept(&app.queue, envelope.as_bytes(), "test"),
            dispatcher::intake::accept(&other_queue, envelope.as_bytes(), "test"),
        );
        a.expect("accepted");
        b.expect("accepted");
        let d = delivery_of(&app, &endpoint, &event_ref, "succeeded").await;
        let ids: std::collections::BTreeSet<String> = sent_for(&receiver, &event_ref)
            .iter()
            .map(|r| r.header("webhook-id").to_owned())
            .collect();
        assert_eq!(
            ids.into_iter().collect::<Vec<_>>(),
            vec![d["delivery_ref"].as_str().unwrap().to_owned()]
        );
        let stored = app
            .count(&format!(
                "SELECT COUNT(*) FROM webhook_deliveries WHERE event_ref = '{event_ref}'"
            ))
            .await;
        assert_eq!(stored, 1);
    }
    mine.shutdown().await;
    stop.cancel();
    let _ = other.await;
}

async fn a_keyed_reference_taken_already_is_drawn_again(app: TestApp) {
    let settings = app.dispatch_settings("0s,1s");
    let Quick {
        receiver,
        endpoint,
        dispatcher,
        first: d,
    } = quick_endpoint(&app, Behaviour::Status(204), settings).await;
    // Another delivery holds the reference the next event's would be
    // keyed to, as one of another event of the same millisecond could.
    let (event_ref, envelope) = app.envelope("payment.succeeded", payment());
    let occurred_at: Value =
        serde_json::from_str::<Value>(&envelope).unwrap()["occurred_at"].clone();
    let occurred_at = domain::Timestamp::parse(occurred_at.as_str().unwrap())
        .expect("an RFC 3339 time")
        .millis();
    let keyed = keyed(&app, &event_ref, &endpoint, occurred_at);
    let pool = app.raw_pool().await;
    sqlx::query(&format!(
        "UPDATE webhook_deliveries SET delivery_ref = '{keyed}' WHERE delivery_ref = '{}'",
        d["delivery_ref"].as_str().unwrap()
    ))
    .execute(&pool)
    .await
    .expect("the delivery moved");
    pool.close().await;
    app.accept(&envelope).await;
    let d = delivery_of(&app, &endpoint, &event_ref, "succeeded").await;
    dispatcher.shutdown().await;
    assert_ne!(d["delivery_ref"], keyed.as_str(), "{d}");
    let sent: Vec<String> = sent_for(&receiver, &event_ref)
        .iter()
        .map(|r| r.header("webhook-id").to_owned())
        .collect();
    assert_eq!(sent.last().map(String::as_str), d["delivery_ref"].as_str());
}

/// `n` events accepted together; the reference of each one's delivery to
/// `endpoint`, once it succeeded.
async fn accepted_together(app: &TestApp, endpoint: &str, n: usize) -> Vec<String> {
    let envelopes: Vec<(String, String)> = (0..n)
        .map(|_| app.envelope("payment.succeeded", payment()))
        .collect();
    futures::future::join_all(envelopes.iter().map(|(_, e)| app.accept(e))).await;
    let mut refs = Vec::new();
    for (event_ref, _) in &envelopes {
        let d = delivery_of(app, endpoint, event_ref, "succeeded").await;
        refs.push(d["delivery_ref"].as_str().unwrap().to_owned());
    }
    refs
}

/// How many of the deliveries `refs` were born settled (their row written
/// once), each checked to have been attempted once.
async fn born_settled(app: &TestApp, refs: &[String]) -> usize {
    let mut settled_at_birth = 0;
    for r in refs {
        assert_eq!(attempts(app, r).await.len(), 1, "{r}");
        settled_at_birth += usize::from(writes(app, r).await == 1);
    }
    settled_at_birth
}

async fn deliveries_waiting_for_a_slot_are_attempted_before_the_write(app: TestApp) {
    let mut settings = app.dispatch_settings("0s,1s");
    settings.max_in_flight_per_endpoint = 1;
    let hang = Behaviour::Hang(Duration::from_millis(20));
    let Quick {
        receiver,
        endpoint,
        dispatcher,
        first,
    } = quick_endpoint(&app, hang, settings).await;
    // Accepted together, they share a group write or two: one slot, so
    // most wait for it before the write.
    let refs = accepted_together(&app, &endpoint, 6).await;
    dispatcher.shutdown().await;
    let mut ids = receiver.webhook_ids();
    ids.sort();
    let mut expected: Vec<String> = refs.clone();
    expected.push(first["delivery_ref"].as_str().unwrap().to_owned());
    expected.sort();
    assert_eq!(
        ids, expected,
        "one request per delivery, under its reference"
    );
    let settled_at_birth = born_settled(&app, &refs).await;
    assert!(settled_at_birth > 0, "none of {refs:?} was born settled");
}

/// One slot in all: an attempt made before its write gives it up when it
/// ends, not when its write does, so the group's next delivery takes it
/// and is attempted before the same write.
async fn a_slot_is_given_up_when_its_attempt_ends_not_its_write(app: TestApp) {
    let mut settings = app.dispatch_settings("0s,1s");
    settings.max_in_flight = 1;
    settings.max_in_flight_per_endpoint = 1;
    let Quick {
        endpoint,
        dispatcher,
        ..
    } = quick_endpoint(&app, Behaviour::Hang(Duration::from_millis(10)), settings).await;
    let refs = accepted_together(&app, &endpoint, 12).await;
    dispatcher.shutdown().await;
    let settled_at_birth = born_settled(&app, &refs).await;
    // Held until the write, the one slot would serve one delivery per
    // group write (3 of 12 here: the 12 take three group writes).
    assert!(
        settled_at_birth >= 6,
        "{settled_at_birth} of 12 born settled"
    );
}

backend_tests!(
    a_quick_endpoints_delivery_is_born_settled,
    a_slot_is_given_up_when_its_attempt_ends_not_its_write,
    an_attempt_still_in_flight_is_written_leased_and_recorded,
    a_first_attempt_that_fails_is_recorded_with_its_retry,
    one_event_accepted_by_two_processes_sends_one_webhook_id,
    a_keyed_reference_taken_already_is_drawn_again,
    deliveries_waiting_for_a_slot_are_attempted_before_the_write,
);
