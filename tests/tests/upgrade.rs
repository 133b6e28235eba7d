//! A store of the last release before issue 48's data model (its newest
//! migration 0031) upgrades with its rows: the migrations after it (an
//! event's data once per version, room for a row's next version, lists of
//! failed deliveries only, a success kept on its delivery) rewrite no row, so every delivery the release
//! wrote stays as it was and reads as it did. The rows are written as that
//! release wrote them: each delivery with its own copy of the event's
//! data, the body it sent stored, its match reasons stored, its event's
//! whole scope; then the new release starts on the store, migrates it,
//! and the rows are read through the API, and
//! a pending delivery and a redriven failed one are delivered from their
//! own copies.

use billing_tests::kit::{attempts, get, list, refs};
use billing_tests::receiver::{Behaviour, TestReceiver};
use billing_tests::{fleet_or_say, unique_key, Backend, TestApp};
use domain::webhook::shaping::Scope;
use domain::Timestamp;
use serde_json::{json, Value};
use std::sync::Once;

/// The newest migration of the release whose rows are upgraded.
const RELEASED: i64 = 31;

fn payment() -> Value {
    domain::webhook::catalogue::example("payment.succeeded", 2).expect("example")
}

/// What an endpoint without a grant receives of `payment()` in version 2.
fn shaped() -> Value {
    domain::webhook::shaping::shape_owned("payment.succeeded", 2, payment(), None)
}

/// `value` as an SQL string literal.
fn quoted(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

/// One delivery as the release wrote it, with its attempts' statuses.
struct Old {
    delivery_ref: &'static str,
    event_ref: &'static str,
    status: &'static str,
    attempts: &'static [i64],
}

const SUCCEEDED: Old = Old {
    delivery_ref: "whd_oldSucceeded",
    event_ref: "evt_oldSucceeded",
    status: "succeeded",
    attempts: &[204],
};
const FAILED: Old = Old {
    delivery_ref: "whd_oldFailed000",
    event_ref: "evt_oldFailed000",
    status: "failed",
    attempts: &[500, 500],
};
const PENDING: Old = Old {
    delivery_ref: "whd_oldPending00",
    event_ref: "evt_oldPending00",
    status: "pending",
    attempts: &[],
};

/// The body the release stored for a settled delivery: the one it sent.
fn sent_body(old: &Old) -> Value {
    json!({"id": old.event_ref, "type": "payment.succeeded",
        "timestamp": "2026-11-20T10:00:00.000Z", "data": shaped()})
}

/// The match reasons the release stored with every delivery.
fn reasons(env: &str) -> Value {
    json!([{"kind": "subscription", "public_event_type": "payment.succeeded",
        "scope_type": "environment", "scope_ref": env, "dto_version": 2}])
}

/// The statements that write `old` for `endpoint` as the release did.
fn written_by_release(old: &Old, env: &str, endpoint: &str, now: i64) -> Vec<String> {
    let scope = serde_json::to_string(&Scope::default()).expect("scope");
    let data = quoted(&payment().to_string());
    let settled = old.status != "pending";
    let (payload, class, next) = if settled {
        let class = if old.status == "failed" {
            "'5xx'"
        } else {
            "'2xx'"
        };
        (
            quoted(&sent_body(old).to_string()),
            class,
            "NULL".to_owned(),
        )
    } else {
        ("NULL".to_owned(), "NULL", now.to_string())
    };
    let mut sql = vec![
        format!(
            "INSERT INTO events (event_ref, environment_ref, public_event_type, occurred_at, \
             scope, data, status, received_at, processed_at) VALUES ({}, '{env}', \
             'payment.succeeded', {now}, {}, NULL, 'processed', {now}, {now})",
            quoted(old.event_ref),
            quoted(&scope),
        ),
        format!(
            "INSERT INTO webhook_deliveries (delivery_ref, environment_ref, endpoint_ref, \
             event_ref, public_event_type, dto_version, status, diagnostic, generation, \
             attempt_count, next_attempt_at, last_attempt_at, occurred_at, event_data, \
             match_reasons, body_status, payload, created_at, updated_at, version, \
             last_response_class) VALUES ('{}', '{env}', '{endpoint}', '{}', \
             'payment.succeeded', 2, '{}', 0, 1, {}, {next}, {}, {now}, {data}, {}, \
             'available', {payload}, {now}, {now}, {}, {class})",
            old.delivery_ref,
            old.event_ref,
            old.status,
            old.attempts.len(),
            if settled {
                now.to_string()
            } else {
                "NULL".to_owned()
            },
            quoted(&reasons(env).to_string()),
            1 + old.attempts.len(),
        ),
    ];
    for (i, code) in old.attempts.iter().enumerate() {
        let status = if *code < 300 { "succeeded" } else { "failed" };
        sql.push(format!(
            "INSERT INTO webhook_attempts (attempt_ref, delivery_ref, environment_ref, \
             endpoint_ref, generation, attempt_number, status, response_status, error, \
             response_body_excerpt, duration_ms, started_at, next_attempt_at, created_at) \
             VALUES ('wha_{}{i}', '{}', '{env}', '{endpoint}', 1, {}, '{status}', {code}, \
             NULL, 'answer', 12, {}, NULL, {})",
            &old.delivery_ref[4..15],
            old.delivery_ref,
            i + 1,
            now - 1_000 + i as i64,
            now - 1_000 + i as i64,
        ));
    }
    sql
}

/// The references of the endpoint's deliveries the list answers `query`.
async fn listed(app: &TestApp, endpoint: &str, query: &str) -> Vec<String> {
    let path = format!("/api/v1/webhook_endpoints/{endpoint}/deliveries?{query}");
    refs(&list(app, &path).await, "delivery_ref")
}

async fn upgrades_with_every_delivery_readable(app: TestApp) {
    let receiver = TestReceiver::start(Behaviour::Status(204)).await;
    let (endpoint, _) = app
        .subscribed_endpoint(&receiver.url(), "payment.succeeded", 2)
        .await;
    let env = app.sandbox.environment_ref.to_string();
    let now = Timestamp::now().millis();
    let pool = app.raw_pool().await;
    let copies = "SELECT COUNT(*) FROM webhook_event_data";
    let before = sqlx::query_scalar::<_, i64>(copies).fetch_one(&pool).await;
    assert!(before.is_err(), "the release's schema has no shared copies");
    for old in [&SUCCEEDED, &FAILED, &PENDING] {
        for sql in written_by_release(old, &env, &endpoint, now) {
            sqlx::query(&sql)
                .execute(&pool)
                .await
                .expect("a released row");
        }
    }
    pool.close().await;

    // The new release starts on the store and migrates it.
    let app = app.restarted().await;

    for old in [&SUCCEEDED, &FAILED, &PENDING] {
        let delivery = get(
            &app,
            &format!("/api/v1/webhook_deliveries/{}", old.delivery_ref),
        )
        .await;
        let delivery = delivery.data();
        assert_eq!(delivery["status"], old.status, "{delivery}");
        assert_eq!(delivery["event_ref"], old.event_ref, "{delivery}");
        let attempts = attempts(&app, old.delivery_ref).await;
        let statuses: Vec<i64> = attempts
            .iter()
            .rev()
            .map(|a| a["response_status"].as_i64().expect("a response"))
            .collect();
        assert_eq!(statuses, old.attempts, "{attempts:?}");
    }
    for old in [&SUCCEEDED, &FAILED] {
        let view = get(
            &app,
            &format!("/api/v1/webhook_deliveries/{}/body", old.delivery_ref),
        )
        .await;
        let view = view.data();
        assert_eq!(view["payload"], sent_body(old), "the body it sent");
        assert_eq!(view["match_reasons"], reasons(&env));
    }
    assert_eq!(
        listed(&app, &endpoint, "status=failed").await,
        [FAILED.delivery_ref]
    );
    assert_eq!(
        listed(&app, &endpoint, "status=succeeded").await,
        [SUCCEEDED.delivery_ref]
    );

    // The pending delivery, then the failed one redriven: each is sent
    // from its own copy of the event's data.
    app.dispatch_due("0s").await;
    let failed = get(
        &app,
        &format!("/api/v1/webhook_deliveries/{}", FAILED.delivery_ref),
    )
    .await;
    let failed = failed.data();
    app.req(
        "POST",
        &format!("/api/v1/webhook_deliveries/{}/redrive", FAILED.delivery_ref),
    )
    .idem(&unique_key())
    .if_match(failed["etag"].as_str().expect("etag"))
    .json(&json!({"reason": "receiver fixed"}))
    .send()
    .await
    .expect(200);
    app.dispatch_due("0s").await;
    let got = receiver.received();
    assert_eq!(got.len(), 2, "the pending and the redriven delivery");
    for request in &got {
        assert_eq!(request.json()["data"], shaped());
    }
    let pool = app.raw_pool().await;
    let shared: i64 = sqlx::query_scalar(copies).fetch_one(&pool).await.unwrap();
    pool.close().await;
    assert_eq!(shared, 0, "sent from the deliveries' own copies");
    assert!(listed(&app, &endpoint, "status=failed").await.is_empty());
    let mut succeeded = listed(&app, &endpoint, "status=succeeded").await;
    succeeded.sort();
    let mut all: Vec<String> = [&SUCCEEDED, &FAILED, &PENDING]
        .iter()
        .map(|o| o.delivery_ref.to_owned())
        .collect();
    all.sort();
    assert_eq!(succeeded, all);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_store_of_the_release_upgrades_with_every_delivery_readable() {
    upgrades_with_every_delivery_readable(TestApp::spawn_released(Backend::Sqlite, RELEASED).await)
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_store_of_the_release_upgrades_with_every_delivery_readable() {
    static NOTICE: Once = Once::new();
    if fleet_or_say(&NOTICE, "PostgreSQL") {
        upgrades_with_every_delivery_readable(
            TestApp::spawn_released(Backend::Postgres, RELEASED).await,
        )
        .await
    }
}
