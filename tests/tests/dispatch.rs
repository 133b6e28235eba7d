//! The dispatcher end to end, on every backend: an event accepted into the
//! queue reaches a real local receiver, signed so that the official
//! Standard Webhooks verifier accepts it; failures are retried on schedule;
//! exhaustion fails; redrive delivers generation 2; pause holds and resume
//! releases; the receiver's misbehaviour never harms the dispatcher.

use billing_tests::kit::{attempts, deliveries, newest_delivery, set_paused, settled};
use billing_tests::receiver::{Behaviour, TestReceiver};
use billing_tests::{backend_tests, unique_key, verifier, TestApp};
use serde_json::{json, Value};
use std::time::Duration;
use store::dispatch::outbox::Emit;

fn payment() -> Value {
    domain::webhook::catalogue::example("payment.succeeded", 2).expect("example")
}

async fn delivered_signed_and_recorded(app: TestApp) {
    let receiver = TestReceiver::start(Behaviour::Status(204)).await;
    let (endpoint, secret) = app
        .subscribed_endpoint(&receiver.url(), "payment.succeeded", 2)
        .await;
    let dispatcher = app.start_dispatcher(app.dispatch_settings("0s,1s"));
    let event_ref = app.publish("payment.succeeded", payment()).await;
    let d = settled(&app, &endpoint, "succeeded").await;
    dispatcher.shutdown().await;

    let req = &receiver.the_one_signed(&d, &secret);
    assert!(!verifier::verifies_request(
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        req
    ));
    let body = req.json();
    assert_eq!(body["event_ref"], event_ref);
    assert_eq!(body["public_event_type"], "payment.succeeded");
    assert_eq!(body["dto_version"], 2);
    assert_eq!(body["environment_ref"], app.sandbox.environment_ref);
    // Without a grant, contact and card fields are not delivered;
    // references, amounts and statuses are.
    assert!(body["data"]["buyer"].get("email").is_none(), "{body}");
    assert!(body["data"].get("payment_method").is_none(), "{body}");
    for kept in ["payment_intent_ref", "buyer_ref", "amount", "status"] {
        assert_eq!(body["data"][kept], payment()[kept], "{kept}: {body}");
    }
    assert_eq!(
        body["data"],
        domain::webhook::shaping::shape("payment.succeeded", 2, &payment(), None)
    );

    let stored = app
        .get(&format!(
            "/api/v1/webhook_deliveries/{}/body",
            d["delivery_ref"].as_str().unwrap()
        ))
        .send()
        .await;
    assert_eq!(
        stored.data()["payload"],
        body,
        "the body view is the body as delivered"
    );
    assert_eq!(stored.data()["match_reasons"][0]["kind"], "subscription");
    let a = attempts(&app, d["delivery_ref"].as_str().unwrap()).await;
    assert_eq!(a.len(), 1);
    assert_eq!(
        (a[0]["status"].as_str(), a[0]["response_status"].as_i64()),
        (Some("succeeded"), Some(204))
    );
    assert_eq!(
        (a[0]["generation"].as_i64(), a[0]["attempt_number"].as_i64()),
        (Some(1), Some(1))
    );
    let health = app
        .get(&format!("/api/v1/webhook_endpoints/{endpoint}/health"))
        .send()
        .await;
    assert_eq!(health.data()["health"], "healthy");
    assert_eq!(health.data()["last_delivery_status"], "succeeded");
}

async fn duplicates_are_processed_once(app: TestApp) {
    let receiver = TestReceiver::start(Behaviour::Status(200)).await;
    let (endpoint, _) = app
        .subscribed_endpoint(&receiver.url(), "refund.created", 1)
        .await;
    let event_ref = app
        .publish("refund.created", json!({"refund_ref": "ref_AAAAAAAAAAAA"}))
        .await;
    let again = json!({"event_ref": event_ref, "public_event_type": "refund.created",
        "environment_ref": app.sandbox.environment_ref, "occurred_at": "2026-11-22T10:00:00Z", "data": {}});
    let accepted = dispatcher::intake::accept(&app.queue, again.to_string().as_bytes(), "test")
        .await
        .unwrap();
    assert_eq!(accepted, dispatcher::intake::Accepted::Duplicate);
    let bad = dispatcher::intake::accept(&app.queue, b"{\"event_ref\": 5}", "test")
        .await
        .unwrap();
    assert!(matches!(bad, dispatcher::intake::Accepted::Dead(_)));
    assert_eq!(app.store.dispatch().dead_letter_count().await.unwrap(), 1);
    let dispatcher = app.start_dispatcher(app.dispatch_settings("0s"));
    settled(&app, &endpoint, "succeeded").await;
    dispatcher.shutdown().await;
    // Nothing else is due: no second delivery of the event waits.
    assert_eq!(app.dispatch_due("0s").await.attempted, 0);
    assert_eq!(receiver.count(), 1);
}

/// An event naming an environment this store does not have is another
/// store's (on a shared exchange every store's queue sees it): it passes,
/// neither stored nor dead-lettered.
async fn another_stores_events_pass(app: TestApp) {
    let elsewhere = domain::Ref::generate(domain::Prefix::Environment);
    let event_ref = domain::Ref::generate(domain::Prefix::Event);
    let envelope = json!({"event_ref": event_ref.as_str(), "public_event_type": "refund.created",
        "environment_ref": elsewhere.as_str(), "occurred_at": "2026-11-22T10:00:00Z",
        "data": {"refund_ref": "ref_AAAAAAAAAAAA"}});
    for _ in 0..2 {
        let accepted =
            dispatcher::intake::accept(&app.queue, envelope.to_string().as_bytes(), "test")
                .await
                .unwrap();
        assert_eq!(accepted, dispatcher::intake::Accepted::Foreign);
    }
    assert_eq!(app.store.dispatch().dead_letter_count().await.unwrap(), 0);
    let pool = app.raw_pool().await;
    let (stored,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM events WHERE event_ref = $1")
        .bind(event_ref.as_str())
        .fetch_one(&pool)
        .await
        .unwrap();
    pool.close().await;
    assert_eq!(stored, 0, "another store's event is not kept here");
    // The store's own environment is accepted as before.
    app.publish("refund.created", json!({"refund_ref": "ref_AAAAAAAAAAAA"}))
        .await;
}

/// The `(status, data)` of the queued event `event_ref`, read straight from
/// the store's `events` table (no API shows it).
async fn queued_event(app: &TestApp, event_ref: &str) -> (String, Option<String>) {
    let pool = app.raw_pool().await;
    let row: (String, Option<String>) =
        sqlx::query_as("SELECT status, data FROM events WHERE event_ref = $1")
            .bind(event_ref)
            .fetch_one(&pool)
            .await
            .expect("the event is queued");
    pool.close().await;
    row
}

/// The queue keeps an event's data only until the event is fanned out: the
/// deliveries carry it from then on. The intake fans out as it accepts; an
/// event an older version left pending is fanned out when a dispatcher
/// starts.
async fn an_events_data_is_kept_only_until_its_fan_out(app: TestApp) {
    let receiver = TestReceiver::start(Behaviour::Status(204)).await;
    app.subscribed_endpoint(&receiver.url(), "payment.succeeded", 2)
        .await;
    // Accepted by the intake: fanned out in the same transaction.
    let accepted = app.publish("payment.succeeded", payment()).await;
    assert_eq!(
        queued_event(&app, &accepted).await,
        ("processed".to_owned(), None)
    );
    // Left pending by an older version, whose embedded relay queued events
    // before fanning them out: kept with its data until the dispatcher's
    // start-up drain fans it out.
    let (relayed, envelope) = app.envelope("payment.succeeded", payment());
    let event = dispatcher::intake::parse(envelope.as_bytes()).expect("a valid event");
    let mut tx = app.store.begin().await.unwrap();
    tx.emit(&event).await.unwrap();
    tx.commit().await.unwrap();
    let pool = app.raw_pool().await;
    sqlx::query(
        "INSERT INTO events (event_ref, environment_ref, public_event_type, occurred_at, scope, \
         data, status, received_at) SELECT event_ref, environment_ref, public_event_type, \
         occurred_at, scope, data, 'pending', created_at FROM outbox",
    )
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query("DELETE FROM outbox")
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;
    let (status, data) = queued_event(&app, &relayed).await;
    assert_eq!(status, "pending");
    let data: Value = serde_json::from_str(&data.expect("data kept")).unwrap();
    assert_eq!(data, payment());
    // Both deliveries still go out with the event's data.
    let dispatcher = app.start_dispatcher(app.dispatch_settings("0s"));
    app.eventually(20, || async { (receiver.count() == 2).then_some(()) })
        .await;
    dispatcher.shutdown().await;
    assert_eq!(
        queued_event(&app, &relayed).await,
        ("processed".to_owned(), None)
    );
    for got in receiver.received() {
        assert_eq!(
            got.json()["data"],
            domain::webhook::shaping::shape("payment.succeeded", 2, &payment(), None)
        );
    }
}

async fn failures_retry_on_schedule_then_fail(app: TestApp) {
    let receiver = TestReceiver::start(Behaviour::Status(500)).await;
    let (endpoint, _) = app
        .subscribed_endpoint(&receiver.url(), "payment.failed", 1)
        .await;
    let dispatcher = app.start_dispatcher(app.dispatch_settings("0s,300ms,300ms"));
    app.publish("payment.failed", json!({})).await;
    let d = settled(&app, &endpoint, "failed").await;
    dispatcher.shutdown().await;
    let got = receiver.received();
    assert_eq!(got.len(), 3, "one attempt per schedule entry");
    let gap = got[1].at.duration_since(got[0].at);
    assert!(gap >= Duration::from_millis(230), "retry waited {gap:?}");
    let a = attempts(&app, d["delivery_ref"].as_str().unwrap()).await;
    assert_eq!(a.len(), 3);
    assert!(a
        .iter()
        .all(|x| x["status"] == "failed" && x["response_status"] == 500));
    let numbers: Vec<i64> = a
        .iter()
        .map(|x| x["attempt_number"].as_i64().unwrap())
        .collect();
    assert_eq!(numbers, vec![3, 2, 1], "newest first");
    assert!(a[0]["next_attempt_at"].is_null() && a[1]["next_attempt_at"].is_string());
    // All three share one webhook-id: it is stable across attempts.
    assert!(got
        .iter()
        .all(|r| r.header("webhook-id") == d["delivery_ref"]));
}

/// The health gauge (`dispatcher::metrics::record_endpoint_health`) reads
/// every endpoint's status, then the outcomes of the active ones, many per
/// statement: an endpoint never attempted has none (`unknown`).
async fn the_health_gauge_reads_which_endpoints_were_attempted(app: TestApp) {
    let receiver = TestReceiver::start(Behaviour::Status(500)).await;
    let (attempted, _) = app
        .subscribed_endpoint(&receiver.url(), "payment.failed", 1)
        .await;
    let (idle, _) = app
        .subscribed_endpoint(&receiver.url(), "payout.paid", 1)
        .await;
    let dispatcher = app.start_dispatcher(app.dispatch_settings("0s"));
    app.publish("payment.failed", json!({})).await;
    settled(&app, &attempted, "failed").await;
    dispatcher.shutdown().await;
    let statuses = app.store.webhooks().endpoint_statuses(100).await.unwrap();
    let refs: Vec<&domain::Ref> = statuses.iter().map(|(r, _)| r).collect();
    let outcomes = app
        .store
        .webhooks()
        .recent_attempt_outcomes_of(&refs, 100)
        .await
        .unwrap();
    let of = |e: &str| {
        statuses
            .iter()
            .find(|(r, _)| r.as_str() == e)
            .map(|(_, s)| {
                let attempted = outcomes.get(e).is_some_and(|o| !o.is_empty());
                (*s, attempted)
            })
    };
    use domain::webhook::EndpointStatus::Active;
    assert_eq!(of(&attempted), Some((Active, true)));
    assert_eq!(of(&idle), Some((Active, false)));
    dispatcher::metrics::record_endpoint_health(&app.store)
        .await
        .unwrap();
}

/// The health gauge reads many endpoints' newest outcomes in one statement
/// (`recent_attempt_outcomes_of`): for each, its newest attempts' outcomes
/// (ties by reference, newest first), at most `limit`, as the read of that
/// endpoint alone gives them; endpoints without an attempt are left out,
/// across statements.
async fn recent_outcomes_of_many_endpoints_match_each_alone(app: TestApp) {
    let receiver = TestReceiver::start(Behaviour::Status(500)).await;
    let (many, _) = app
        .subscribed_endpoint(&receiver.url(), "payment.failed", 1)
        .await;
    let (few, _) = app
        .subscribed_endpoint(&receiver.url(), "refund.created", 1)
        .await;
    app.publish("payment.failed", json!({})).await;
    app.publish("refund.created", json!({"refund_ref": "ref_AAAAAAAAAAAA"}))
        .await;
    let pool = app.raw_pool().await;
    let mut inserted: std::collections::HashMap<String, Vec<(i64, String, &str)>> =
        Default::default();
    for (endpoint, n) in [(&many, 150i64), (&few, 3)] {
        let (delivery,): (String,) =
            sqlx::query_as("SELECT delivery_ref FROM webhook_deliveries WHERE endpoint_ref = $1")
                .bind(endpoint.as_str())
                .fetch_one(&pool)
                .await
                .expect("the endpoint's delivery");
        for i in 0..n {
            let status = if i % 3 == 0 { "succeeded" } else { "failed" };
            let attempt_ref = domain::Ref::generate(domain::Prefix::DeliveryAttempt).into_string();
            // Pairs of attempts start at the same millisecond.
            let started_at = 1_000 + i / 2;
            sqlx::query(
                "INSERT INTO webhook_attempts (attempt_ref, delivery_ref, environment_ref, \
                 endpoint_ref, generation, attempt_number, status, duration_ms, started_at, \
                 created_at) VALUES ($1, $2, $3, $4, 1, $5, $6, 1, $7, $7)",
            )
            .bind(attempt_ref.as_str())
            .bind(delivery.as_str())
            .bind(app.sandbox.environment_ref.as_str())
            .bind(endpoint.as_str())
            .bind(i + 1)
            .bind(status)
            .bind(started_at)
            .execute(&pool)
            .await
            .expect("an attempt");
            inserted
                .entry(endpoint.clone())
                .or_default()
                .push((started_at, attempt_ref, status));
        }
    }
    pool.close().await;
    let refs: Vec<domain::Ref> = [&many, &few]
        .iter()
        .map(|e| domain::Ref::parse(domain::Prefix::WebhookEndpoint, e).expect("a reference"))
        .collect();
    // The second endpoint comes after 1,000 without attempts: another
    // statement on either engine (SQLite reads 100 endpoints a statement,
    // PostgreSQL 1,000).
    let unattempted: Vec<domain::Ref> = (0..1_000)
        .map(|_| domain::Ref::generate(domain::Prefix::WebhookEndpoint))
        .collect();
    let mut asked: Vec<&domain::Ref> = vec![&refs[0]];
    asked.extend(&unattempted);
    asked.push(&refs[1]);
    let webhooks = app.store.webhooks();
    let together = webhooks
        .recent_attempt_outcomes_of(&asked, 100)
        .await
        .unwrap();
    assert_eq!(together.len(), 2, "only endpoints with attempts");
    for (endpoint, want) in [(&refs[0], 100), (&refs[1], 3)] {
        let mut newest = inserted[endpoint.as_str()].clone();
        newest.sort_by(|a, b| (b.0, &b.1).cmp(&(a.0, &a.1)));
        let newest: Vec<&str> = newest.iter().take(100).map(|(_, _, s)| *s).collect();
        assert_eq!(newest.len(), want);
        let wire = |o: &[domain::webhook::AttemptStatus]| -> Vec<&str> {
            o.iter().map(|s| s.as_str()).collect()
        };
        assert_eq!(wire(&together[endpoint.as_str()]), newest, "{endpoint}");
        let alone = webhooks
            .recent_attempt_outcomes(endpoint, 100)
            .await
            .unwrap();
        assert_eq!(wire(&alone), newest, "{endpoint} alone");
    }
}

async fn redrive_delivers_generation_two(app: TestApp) {
    let receiver = TestReceiver::start(Behaviour::Status(500)).await;
    let (endpoint, _) = app
        .subscribed_endpoint(&receiver.url(), "order.created", 1)
        .await;
    let dispatcher = app.start_dispatcher(app.dispatch_settings("0s"));
    app.publish("order.created", json!({"order_ref": "ord_AAAAAAAAAAAA"}))
        .await;
    let failed = settled(&app, &endpoint, "failed").await;
    receiver.set(Behaviour::Status(200));
    let delivery = failed["delivery_ref"].as_str().unwrap();
    let r = app
        .req(
            "POST",
            &format!("/api/v1/webhook_deliveries/{delivery}/redrive"),
        )
        .idem(&unique_key())
        .if_match(failed["etag"].as_str().unwrap())
        .json(&json!({"reason": "receiver fixed"}))
        .send()
        .await;
    r.expect(200);
    assert_eq!(r.data()["outcome"], "queued");
    let done = settled(&app, &endpoint, "succeeded").await;
    dispatcher.shutdown().await;
    assert_eq!(done["generation"], 2);
    let a = attempts(&app, delivery).await;
    assert_eq!(
        (a[0]["generation"].as_i64(), a[0]["attempt_number"].as_i64()),
        (Some(2), Some(1))
    );
    let got = receiver.received();
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].header("webhook-id"), got[1].header("webhook-id"));
}

async fn pause_holds_and_resume_releases(app: TestApp) {
    let receiver = TestReceiver::start(Behaviour::Status(200)).await;
    let (endpoint, _) = app
        .subscribed_endpoint(&receiver.url(), "invoice.paid", 1)
        .await;
    set_paused(&app, &endpoint, "pause").await;
    let dispatcher = app.start_dispatcher(app.dispatch_settings("0s"));
    app.publish("invoice.paid", json!({})).await;
    settled(&app, &endpoint, "held").await;
    assert_eq!(app.dispatch_due("0s").await.attempted, 0);
    assert_eq!(receiver.count(), 0, "held deliveries are not sent");
    set_paused(&app, &endpoint, "resume").await;
    settled(&app, &endpoint, "succeeded").await;
    dispatcher.shutdown().await;
    assert_eq!(receiver.count(), 1);
}

/// Deliveries claimed while their endpoint was at its limit wait in the
/// dispatcher for a free slot; a pause made meanwhile holds them too.
async fn a_pause_holds_deliveries_waiting_for_a_slot(app: TestApp) {
    let receiver = TestReceiver::start(Behaviour::Hang(Duration::from_millis(800))).await;
    let (endpoint, _) = app
        .subscribed_endpoint(&receiver.url(), "invoice.paid", 1)
        .await;
    let mut settings = app.dispatch_settings("0s");
    settings.max_in_flight_per_endpoint = 1;
    let dispatcher = app.start_dispatcher(settings);
    for _ in 0..3 {
        app.publish("invoice.paid", json!({})).await;
    }
    app.eventually(10, || async { (receiver.count() == 1).then_some(()) })
        .await;
    set_paused(&app, &endpoint, "pause").await;
    // The first attempt ends 800 ms after it began, and frees the slot;
    // the other two must not follow it: once it is recorded and the
    // dispatcher has given those two back held (no lease left on them),
    // nothing can send them.
    let pool = app.raw_pool().await;
    app.eventually(10, || async {
        let (succeeded, held): (i64, i64) = sqlx::query_as(
            "SELECT COALESCE(SUM(CASE WHEN status = 'succeeded' THEN 1 ELSE 0 END), 0), \
             COALESCE(SUM(CASE WHEN status = 'held' AND lease_owner IS NULL THEN 1 ELSE 0 END), 0) \
             FROM webhook_deliveries WHERE endpoint_ref = $1",
        )
        .bind(endpoint.as_str())
        .fetch_one(&pool)
        .await
        .expect("the deliveries read");
        (succeeded == 1 && held == 2).then_some(())
    })
    .await;
    assert_eq!(receiver.count(), 1, "nothing is sent after the pause");
    set_paused(&app, &endpoint, "resume").await;
    app.eventually(20, || async { (receiver.count() == 3).then_some(()) })
        .await;
    dispatcher.shutdown().await;
}

async fn test_send_goes_out(app: TestApp) {
    let receiver = TestReceiver::start(Behaviour::Status(200)).await;
    let (endpoint, secret) = app
        .subscribed_endpoint(&receiver.url(), "invoice.paid", 1)
        .await;
    let dispatcher = app.start_dispatcher(app.dispatch_settings("0s"));
    app.post(
        &format!("/api/v1/webhook_endpoints/{endpoint}/test_send"),
        json!({"public_event_type": "webhook.test"}),
    )
    .send()
    .await
    .expect(201);
    settled(&app, &endpoint, "succeeded").await;
    dispatcher.shutdown().await;
    let req = &receiver.received()[0];
    assert_eq!(req.json()["public_event_type"], "webhook.test");
    assert!(verifier::verifies_request(&secret, req));
}

async fn retry_after_is_honoured(app: TestApp) {
    let receiver = TestReceiver::start(Behaviour::RetryAfter(429, 3)).await;
    let (endpoint, _) = app
        .subscribed_endpoint(&receiver.url(), "payout.paid", 1)
        .await;
    let dispatcher = app.start_dispatcher(app.dispatch_settings("0s,100ms"));
    app.publish("payout.paid", example("payout.paid")).await;
    let d = app
        .eventually(10, || async {
            let d = newest_delivery(&app, &endpoint).await;
            (d["attempt_count"] == 1).then_some(d)
        })
        .await;
    dispatcher.shutdown().await;
    let a = attempts(&app, d["delivery_ref"].as_str().unwrap()).await;
    let started = domain::Timestamp::parse(a[0]["started_at"].as_str().unwrap()).unwrap();
    let next = domain::Timestamp::parse(a[0]["next_attempt_at"].as_str().unwrap()).unwrap();
    assert!(
        next.millis() - started.millis() >= 2_900,
        "Retry-After: 3 delays the next attempt"
    );
    assert_eq!(a[0]["response_status"], 429);
}

async fn gone_disables_the_endpoint(app: TestApp) {
    let receiver = TestReceiver::start(Behaviour::Status(410)).await;
    let (endpoint, _) = app
        .subscribed_endpoint(&receiver.url(), "payout.failed", 1)
        .await;
    let dispatcher = app.start_dispatcher(app.dispatch_settings("0s,100ms,100ms"));
    app.publish("payout.failed", example("payout.failed")).await;
    settled(&app, &endpoint, "failed").await;
    dispatcher.shutdown().await;
    assert_eq!(receiver.count(), 1, "410 is final");
    let e = app
        .get(&format!("/api/v1/webhook_endpoints/{endpoint}"))
        .send()
        .await;
    assert_eq!(e.data()["status"], "disabled");
    let h = app
        .get(&format!("/api/v1/webhook_endpoints/{endpoint}/health"))
        .send()
        .await;
    assert_eq!(h.data()["health"], "disabled");
}

async fn misbehaving_receivers_are_contained(app: TestApp) {
    let hanging = TestReceiver::start(Behaviour::Hang(Duration::from_secs(10))).await;
    let redirecting = TestReceiver::start(Behaviour::Redirect).await;
    let huge = TestReceiver::start(Behaviour::HugeBody(100 << 20)).await;
    let refused = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        drop(l);
        format!("http://{addr}/hook")
    };
    let mut endpoints = Vec::new();
    for url in [hanging.url(), redirecting.url(), huge.url(), refused] {
        endpoints.push(app.subscribed_endpoint(&url, "order.created", 1).await.0);
    }
    let mut settings = app.dispatch_settings("0s");
    settings.timeout = Duration::from_millis(500);
    let dispatcher = app.start_dispatcher(settings);
    app.publish("order.created", json!({})).await;
    let mut errors = Vec::new();
    for e in &endpoints {
        let d = settled(&app, e, "failed").await;
        let a = attempts(&app, d["delivery_ref"].as_str().unwrap()).await;
        errors.push((
            a[0]["error"].clone(),
            a[0]["response_status"].clone(),
            a[0]["response_body_excerpt"].clone(),
        ));
    }
    dispatcher.shutdown().await;
    assert!(
        errors[0].0.as_str().unwrap().contains("timed out"),
        "{errors:?}"
    );
    assert_eq!(errors[1].1, 302);
    assert!(errors[1].0.as_str().unwrap().contains("redirect"));
    assert_eq!(errors[2].1, 500);
    assert_eq!(
        errors[2].2.as_str().unwrap().len(),
        1024,
        "the excerpt stops at 1 KiB"
    );
    assert!(
        errors[3].0.as_str().unwrap().contains("connection"),
        "{errors:?}"
    );
}

async fn destinations_are_checked_at_connect_time(app: TestApp) {
    // Created while private networks were allowed, sent by a dispatcher
    // that refuses them: the check at connect time stops it.
    let receiver = TestReceiver::start(Behaviour::Status(200)).await;
    let (endpoint, _) = app
        .subscribed_endpoint(
            &format!("http://localhost:{}/hook", receiver.addr.port()),
            "entitlement.granted",
            1,
        )
        .await;
    let mut settings = app.dispatch_settings("0s");
    settings.allow_private_networks = false;
    let dispatcher = app.start_dispatcher(settings);
    app.publish("entitlement.granted", json!({})).await;
    let d = settled(&app, &endpoint, "failed").await;
    dispatcher.shutdown().await;
    assert_eq!(receiver.count(), 0);
    let a = attempts(&app, d["delivery_ref"].as_str().unwrap()).await;
    assert!(
        a[0]["error"].as_str().unwrap().contains("forbidden"),
        "{a:?}"
    );
}

async fn two_dispatchers_never_attempt_one_delivery_twice(app: TestApp) {
    let receiver = TestReceiver::start(Behaviour::Status(200)).await;
    let (endpoint, _) = app
        .subscribed_endpoint(&receiver.url(), "subscription.started", 1)
        .await;
    for _ in 0..300 {
        app.publish("subscription.started", json!({})).await;
    }
    let a = app.start_dispatcher(app.dispatch_settings("0s"));
    let b = app.start_dispatcher(app.dispatch_settings("0s"));
    let ids = app.all_received(&receiver, 300, 60, vec![a, b]).await;
    let unique: std::collections::HashSet<_> = ids.iter().collect();
    assert_eq!(
        (ids.len(), unique.len()),
        (300, 300),
        "every delivery exactly once"
    );
    assert!(deliveries(&app, &endpoint)
        .await
        .iter()
        .all(|d| d["status"] == "succeeded"));
}

async fn a_killed_dispatchers_work_is_taken_over(app: TestApp) {
    let receiver = TestReceiver::start(Behaviour::Hang(Duration::from_millis(700))).await;
    let (endpoint, _) = app
        .subscribed_endpoint(&receiver.url(), "subscription.canceled", 1)
        .await;
    for _ in 0..20 {
        app.publish("subscription.canceled", json!({})).await;
    }
    let mut settings = app.dispatch_settings("0s");
    settings.lease_margin = Duration::from_millis(500);
    let first = app.start_dispatcher(settings.clone());
    app.eventually(10, || async { (receiver.count() > 0).then_some(()) })
        .await;
    first.kill();
    receiver.set(Behaviour::Status(200));
    let second = app.start_dispatcher(settings);
    app.eventually(30, || async {
        let list = app
            .get(&format!(
                "/api/v1/webhook_endpoints/{endpoint}/deliveries?limit=100"
            ))
            .send()
            .await;
        let items = list.data()["items"].as_array().unwrap().clone();
        (items.len() == 20 && items.iter().all(|d| d["status"] == "succeeded")).then_some(())
    })
    .await;
    second.shutdown().await;
    let unique: std::collections::HashSet<String> = receiver
        .received()
        .iter()
        .map(|r| r.header("webhook-id").to_owned())
        .collect();
    assert_eq!(unique.len(), 20, "every event delivered at least once");
}

/// An event emitted by a committed write leaves through the outbox: the
/// relay moves it into the queue and it is delivered; the outbox is empty
/// afterwards.
async fn emitted_events_leave_through_the_outbox(app: TestApp) {
    let receiver = TestReceiver::start(Behaviour::Status(204)).await;
    app.subscribed_endpoint(&receiver.url(), "payment.succeeded", 2)
        .await;
    let event = dispatcher::intake::parse(
        json!({
            "event_ref": domain::Ref::generate(domain::Prefix::Event).as_str(),
            "public_event_type": "payment.succeeded",
            "environment_ref": app.sandbox.environment_ref,
            "occurred_at": domain::Timestamp::now().to_rfc3339(),
            "data": payment(),
        })
        .to_string()
        .as_bytes(),
    )
    .expect("a valid event");
    // Emitted before any relay runs: it waits in the outbox.
    let mut tx = app.store.begin().await.unwrap();
    tx.emit(&event).await.expect("emitted");
    tx.commit().await.expect("emitted");
    assert_eq!(
        app.store.outbox_batch(10).await.unwrap(),
        vec![event.clone()]
    );

    let stop = tokio_util::sync::CancellationToken::new();
    let relay = tokio::spawn(dispatcher::outbox::relay(
        app.store.clone(),
        dispatcher::outbox::Target::Queue(app.queue.clone()),
        stop.clone(),
    ));
    let dispatcher = app.start_dispatcher(app.dispatch_settings("0s"));
    // The relay deletes the row once the queue has the event, which may
    // be after the receiver has it.
    app.eventually(20, || async {
        let relayed = app.store.outbox_batch(10).await.unwrap().is_empty();
        (relayed && receiver.received().len() == 1).then_some(())
    })
    .await;
    assert_eq!(
        receiver.received()[0].json()["event_ref"],
        event.event_ref.as_str()
    );
    stop.cancel();
    relay.await.expect("the relay stops");
    dispatcher.shutdown().await;
}

/// A successful attempt of `d` by the worker that leased it.
fn succeeded(d: &store::DeliveryRecord) -> store::AttemptResult {
    use domain::webhook::{AttemptStatus, DeliveryStatus};
    store::AttemptResult {
        delivery_ref: d.delivery_ref.clone(),
        environment_ref: d.environment_ref.clone(),
        endpoint_ref: d.endpoint_ref.clone(),
        generation: d.generation,
        attempt_number: d.attempt_count + 1,
        status: AttemptStatus::Succeeded,
        response_status: Some(200),
        error: None,
        response_body_excerpt: None,
        duration_ms: 5,
        started_at: domain::Timestamp::now(),
        next_attempt_at: None,
        delivery_status: DeliveryStatus::Succeeded,
        payload: store::Payload::Verbatim("{}".to_owned()),
        disable_endpoint: false,
        ordered_key: None,
        pushback: None,
    }
}

/// A result is recorded only where its worker still holds the delivery's
/// lease: one whose lease expired and went to another worker is dropped
/// whole (neither the delivery's next state nor an attempt), for one
/// result, a few and many at once (PostgreSQL records up to 8 with one
/// statement and more in a transaction).
async fn a_result_is_recorded_only_under_its_lease(app: TestApp) {
    let (endpoint, _) = app
        .subscribed_endpoint("https://example.com/hook", "invoice.paid", 1)
        .await;
    let dispatch = app.store.dispatch();
    assert_eq!(
        dispatch
            .record_attempts("a", &[], silent())
            .await
            .unwrap()
            .recorded,
        0
    );
    for n in [1usize, 6, 20] {
        for _ in 0..n {
            app.publish("invoice.paid", json!({})).await;
        }
        let now = domain::Timestamp::now();
        let first = dispatch
            .claim_due_deliveries("a", now, now.plus_millis(1), 100)
            .await
            .unwrap();
        assert_eq!(first.len(), n);
        // Once "a"'s leases expired, "b" takes half of them (at least one).
        let taken = n.div_ceil(2);
        let later = now.plus_seconds(1);
        let second = dispatch
            .claim_due_deliveries("b", later, later.plus_seconds(60), taken as u32)
            .await
            .unwrap();
        assert_eq!(second.len(), taken);
        let a: Vec<_> = first.iter().map(succeeded).collect();
        let b: Vec<_> = second.iter().map(succeeded).collect();
        assert_eq!(
            dispatch
                .record_attempts("a", &a, silent())
                .await
                .unwrap()
                .recorded,
            n - taken
        );
        assert_eq!(
            dispatch
                .record_attempts("b", &b, silent())
                .await
                .unwrap()
                .recorded,
            taken
        );
        // A result repeated after its lease was cleared is dropped too.
        assert_eq!(
            dispatch
                .record_attempts("b", &b, silent())
                .await
                .unwrap()
                .recorded,
            0
        );
    }
    let all = deliveries(&app, &endpoint).await;
    assert_eq!(all.len(), 27);
    for d in &all {
        assert_eq!(d["status"], "succeeded", "{d}");
        let tried = attempts(&app, d["delivery_ref"].as_str().unwrap()).await;
        assert_eq!(tried.len(), 1, "one attempt of {d}");
    }
}

backend_tests!(
    a_result_is_recorded_only_under_its_lease,
    emitted_events_leave_through_the_outbox,
    delivered_signed_and_recorded,
    duplicates_are_processed_once,
    another_stores_events_pass,
    an_events_data_is_kept_only_until_its_fan_out,
    failures_retry_on_schedule_then_fail,
    the_health_gauge_reads_which_endpoints_were_attempted,
    recent_outcomes_of_many_endpoints_match_each_alone,
    redrive_delivers_generation_two,
    pause_holds_and_resume_releases,
    a_pause_holds_deliveries_waiting_for_a_slot,
    test_send_goes_out,
    retry_after_is_honoured,
    gone_disables_the_endpoint,
    misbehaving_receivers_are_contained,
    destinations_are_checked_at_connect_time,
    two_dispatchers_never_attempt_one_delivery_twice,
    a_killed_dispatchers_work_is_taken_over,
);

/// A type's catalogue example: whole data, as other systems' payouts need
/// to be projected.
fn example(event_type: &str) -> serde_json::Value {
    domain::webhook::catalogue::example(event_type, 1).expect("an example")
}

/// Records without operational events: these tests write attempts by hand.
fn silent() -> std::sync::Arc<dyn store::dispatch::operational::Announce> {
    std::sync::Arc::new(store::dispatch::operational::Silent)
}
