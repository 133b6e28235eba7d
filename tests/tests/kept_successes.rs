//! A delivery's success is kept on its own row, not as a row of
//! `webhook_attempts` (migration 0036): nearly every delivery ends in one,
//! and a row of its own cost three index entries. Every reader of attempts
//! sees it as before: the delivery's attempts (the success first, across
//! pages), the endpoint's health and newest outcomes, when its run of
//! failures began, and the console's charts. A redrive writes it out as a
//! row first, so it reads the same after. A success recorded as a row (by
//! a release before 0036) is read beside the kept ones.

use billing_tests::kit::{get, items, walk};
use billing_tests::receiver::{Behaviour, TestReceiver};
use billing_tests::{backend_tests, unique_key, TestApp};
use domain::webhook::AttemptStatus::{Failed, Succeeded};
use domain::{Prefix, Ref, Timestamp};
use serde_json::{json, Value};

fn attempts_path(delivery: &str) -> String {
    format!("/api/v1/webhook_deliveries/{delivery}/attempts")
}

/// (generation, attempt number, status) of each attempt listed.
fn numbered(attempts: &[Value]) -> Vec<(u64, u64, String)> {
    attempts
        .iter()
        .map(|a| {
            (
                a["generation"].as_u64().unwrap(),
                a["attempt_number"].as_u64().unwrap(),
                a["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

async fn a_success_after_a_failure_is_kept_on_its_delivery(app: TestApp) {
    let receiver = TestReceiver::start(Behaviour::Status(500)).await;
    let (endpoint, _) = app
        .subscribed_endpoint(&receiver.url(), "order.created", 1)
        .await;
    let endpoint = Ref::parse(Prefix::WebhookEndpoint, &endpoint).unwrap();
    let since = Timestamp::now();
    app.publish("order.created", json!({"order_ref": "ord_AAAAAAAAAAAA"}))
        .await;
    // The retry is due a second after the failure, give or take its 20 %
    // jitter: the app's clock is moved past the latest it can be.
    assert_eq!(app.dispatch_due("0s,1s").await.attempted, 1);
    receiver.set(Behaviour::Status(200));
    app.advance(std::time::Duration::from_millis(1_300));
    assert_eq!(app.dispatch_due("0s,1s").await.attempted, 1);
    let delivery: String = {
        let pool = app.raw_pool().await;
        let d = sqlx::query_scalar("SELECT delivery_ref FROM webhook_deliveries")
            .fetch_one(&pool)
            .await
            .unwrap();
        pool.close().await;
        d
    };

    // The failure is a row; the success is not.
    let rows = format!("SELECT COUNT(*) FROM webhook_attempts WHERE delivery_ref = '{delivery}'");
    assert_eq!(app.count(&rows).await, 1, "the failure alone is a row");
    let kept = format!(
        "SELECT COUNT(*) FROM webhook_deliveries WHERE delivery_ref = '{delivery}' \
         AND success_status = 200 AND success_duration_ms IS NOT NULL"
    );
    assert_eq!(app.count(&kept).await, 1, "the success is on the delivery");

    // Listed newest first, whole or a page at a time.
    let whole = items(&get(&app, &attempts_path(&delivery)).await);
    assert_eq!(
        numbered(&whole),
        [(1, 2, "succeeded".into()), (1, 1, "failed".into())]
    );
    assert_eq!(whole[0]["response_status"], 200);
    assert!(whole[0]["error"].is_null() && whole[0]["next_attempt_at"].is_null());
    assert_eq!(whole[1]["response_status"], 500);
    assert!(whole[0]["started_at"].as_str() >= whole[1]["started_at"].as_str());
    assert_eq!(walk(&app, &attempts_path(&delivery), 1).await, whole);
    assert_eq!(
        items(&get(&app, &attempts_path(&delivery)).await),
        whole,
        "the same reference at every read"
    );

    // Health, newest outcomes, the run of failures, the charts.
    let webhooks = app.store.webhooks();
    assert_eq!(
        webhooks
            .recent_attempt_outcomes(&endpoint, 100)
            .await
            .unwrap(),
        [Succeeded, Failed]
    );
    assert_eq!(
        app.store
            .dispatch()
            .endpoint_failing_since(&endpoint)
            .await
            .unwrap(),
        None,
        "its newest attempt succeeded"
    );
    let env = &Ref::parse(Prefix::Environment, &app.sandbox.environment_ref).unwrap();
    let buckets = webhooks
        .attempt_activity(env, &endpoint, since, 3_600_000, 1)
        .await
        .unwrap();
    assert_eq!((buckets[0].succeeded, buckets[0].failed), (1, 1));
    let health = get(
        &app,
        &format!("/api/v1/webhook_endpoints/{endpoint}/health"),
    )
    .await;
    assert_eq!(
        health.data()["health"],
        "degraded",
        "1 of its 2 newest succeeded"
    );
    assert_eq!(health.data()["last_delivery_status"], "succeeded");
}

async fn a_redrive_writes_the_kept_success_out_first(app: TestApp) {
    let receiver = TestReceiver::start(Behaviour::Status(200)).await;
    let (endpoint, _) = app
        .subscribed_endpoint(&receiver.url(), "order.created", 1)
        .await;
    app.publish("order.created", json!({"order_ref": "ord_AAAAAAAAAAAA"}))
        .await;
    assert_eq!(app.dispatch_due("0s").await.attempted, 1);
    let listed = items(
        &get(
            &app,
            &format!("/api/v1/webhook_endpoints/{endpoint}/deliveries"),
        )
        .await,
    );
    let delivery = listed[0]["delivery_ref"].as_str().unwrap().to_owned();
    let before = items(&get(&app, &attempts_path(&delivery)).await);
    assert_eq!(numbered(&before), [(1, 1, "succeeded".into())]);

    receiver.set(Behaviour::Status(500));
    let d = get(&app, &format!("/api/v1/webhook_deliveries/{delivery}")).await;
    app.req(
        "POST",
        &format!("/api/v1/webhook_deliveries/{delivery}/redrive"),
    )
    .if_match(&d.etag())
    .idem(&unique_key())
    .json(&json!({"reason": "replay"}))
    .send()
    .await
    .expect(200);
    let rows = format!("SELECT COUNT(*) FROM webhook_attempts WHERE delivery_ref = '{delivery}'");
    assert_eq!(app.count(&rows).await, 1, "written out as a row");
    let kept = format!(
        "SELECT COUNT(*) FROM webhook_deliveries WHERE delivery_ref = '{delivery}' \
         AND success_duration_ms IS NOT NULL"
    );
    assert_eq!(app.count(&kept).await, 0, "no longer kept on the delivery");
    assert_eq!(items(&get(&app, &attempts_path(&delivery)).await), before);

    assert_eq!(app.dispatch_due("0s,1h").await.attempted, 1);
    let after = walk(&app, &attempts_path(&delivery), 1).await;
    assert_eq!(
        numbered(&after),
        [(2, 1, "failed".into()), (1, 1, "succeeded".into())]
    );
    assert_eq!(after[1], before[0], "the first success reads as it did");
    let endpoint = Ref::parse(Prefix::WebhookEndpoint, &endpoint).unwrap();
    assert_eq!(
        app.store
            .webhooks()
            .recent_attempt_outcomes(&endpoint, 100)
            .await
            .unwrap(),
        [Failed, Succeeded]
    );
    assert!(app
        .store
        .dispatch()
        .endpoint_failing_since(&endpoint)
        .await
        .unwrap()
        .is_some());
}

/// A success recorded as a row, as a release before migration 0036 did,
/// beside one kept on a delivery: the newest outcomes merge both by time.
async fn a_success_recorded_as_a_row_is_read_beside_kept_ones(app: TestApp) {
    let receiver = TestReceiver::start(Behaviour::Status(200)).await;
    let (endpoint, _) = app
        .subscribed_endpoint(&receiver.url(), "order.created", 1)
        .await;
    app.publish("order.created", json!({"order_ref": "ord_AAAAAAAAAAAA"}))
        .await;
    app.publish("order.created", json!({"order_ref": "ord_BBBBBBBBBBBB"}))
        .await;
    assert_eq!(app.dispatch_due("0s").await.attempted, 2);
    // Far in the future, so that it is the newest: an old success row and
    // a failure row that came after every kept success.
    let pool = app.raw_pool().await;
    let delivery: String =
        sqlx::query_scalar("SELECT delivery_ref FROM webhook_deliveries LIMIT 1")
            .fetch_one(&pool)
            .await
            .unwrap();
    let far = Timestamp::now().millis() + 86_400_000;
    for (i, status) in [(0, "failed"), (1, "succeeded")] {
        sqlx::query(
            "INSERT INTO webhook_attempts (attempt_ref, delivery_ref, environment_ref, \
             endpoint_ref, generation, attempt_number, status, duration_ms, started_at, \
             created_at) VALUES ($1, $2, $3, $4, 9, $5, $6, 1, $7, $7)",
        )
        .bind(Ref::generate(Prefix::DeliveryAttempt).into_string())
        .bind(delivery.as_str())
        .bind(app.sandbox.environment_ref.as_str())
        .bind(endpoint.as_str())
        .bind(i + 1)
        .bind(status)
        .bind(far + i)
        .execute(&pool)
        .await
        .unwrap();
    }
    pool.close().await;
    let endpoint = Ref::parse(Prefix::WebhookEndpoint, &endpoint).unwrap();
    assert_eq!(
        app.store
            .webhooks()
            .recent_attempt_outcomes(&endpoint, 3)
            .await
            .unwrap(),
        [Succeeded, Failed, Succeeded]
    );
    let env = &Ref::parse(Prefix::Environment, &app.sandbox.environment_ref).unwrap();
    let buckets = app
        .store
        .webhooks()
        .attempt_activity(env, &endpoint, Timestamp::from_millis(0), i64::MAX / 4, 1)
        .await
        .unwrap();
    assert_eq!((buckets[0].succeeded, buckets[0].failed), (3, 1));
}

backend_tests!(
    a_success_after_a_failure_is_kept_on_its_delivery,
    a_redrive_writes_the_kept_success_out_first,
    a_success_recorded_as_a_row_is_read_beside_kept_ones,
);
