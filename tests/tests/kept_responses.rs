//! An idempotency record keeps its response packed on PostgreSQL
//! (`store::packed`, as an event's copy is kept) and as it is on SQLite,
//! whose unit of work holds the file's one write lock; either way a replay
//! answers the first response byte for byte, and a record stored plain
//! (on SQLite, or on PostgreSQL before packing) replays as it was stored.

use billing_tests::{backend_tests, unique_key, Backend, TestApp};
use serde_json::json;

/// The stored response of the record of `key`, as its row holds it.
async fn stored_response(app: &TestApp, key: &str) -> String {
    let pool = app.raw_pool().await;
    let stored: String =
        sqlx::query_scalar("SELECT response_body FROM idempotency_keys WHERE idem_key = $1")
            .bind(key)
            .fetch_one(&pool)
            .await
            .unwrap();
    pool.close().await;
    stored
}

/// `POST /api/v1/products` with `body` under `key`.
async fn create_product(app: &TestApp, key: &str, body: &serde_json::Value) -> billing_tests::Resp {
    app.req("POST", "/api/v1/products")
        .idem(key)
        .json(body)
        .send()
        .await
}

async fn a_kept_response_replays_the_same_and_is_packed_on_postgres(app: TestApp) {
    let key = unique_key();
    let body = json!({"name": "Packed product", "description": "kept, packed and replayed"});
    let first = create_product(&app, &key, &body).await;
    first.expect(201);

    let stored = stored_response(&app, &key).await;
    match app.backend {
        Backend::Postgres => {
            assert!(stored.starts_with("~2"), "stored packed: {stored}");
            assert!(
                stored.len() < first.text.len(),
                "{} bytes stored for a response of {}",
                stored.len(),
                first.text.len()
            );
            assert_eq!(store::packed::unpack(&stored), first.text.as_str());
        }
        Backend::Sqlite => assert_eq!(stored, first.text, "stored as it is"),
    }

    let replay = create_product(&app, &key, &body).await;
    replay.expect(201);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.text, first.text, "a replay is the first response");
}

async fn a_response_stored_plain_still_replays(app: TestApp) {
    let key = unique_key();
    let body = json!({"name": "Plain product"});
    let first = create_product(&app, &key, &body).await;
    first.expect(201);
    // As a record written before packing holds it.
    let pool = app.raw_pool().await;
    sqlx::query("UPDATE idempotency_keys SET response_body = $1 WHERE idem_key = $2")
        .bind(first.text.as_str())
        .bind(key.as_str())
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;
    assert_eq!(stored_response(&app, &key).await, first.text);

    let replay = create_product(&app, &key, &body).await;
    replay.expect(201);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.text, first.text);
}

backend_tests!(
    a_kept_response_replays_the_same_and_is_packed_on_postgres,
    a_response_stored_plain_still_replays,
);
