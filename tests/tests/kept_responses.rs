//! An idempotency record keeps its response packed (`store::packed`), as
//! an event's copy is kept: a replay answers the first response byte for
//! byte, and a record stored plain (before packing) still replays as it
//! was stored.

use billing_tests::{backend_tests, unique_key, TestApp};
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

async fn a_kept_response_is_stored_packed_and_replays_the_same(app: TestApp) {
    let key = unique_key();
    let body = json!({"name": "Packed product", "description": "kept, packed and replayed"});
    let send = || {
        app.req("POST", "/api/v1/products")
            .idem(&key)
            .json(&body)
            .send()
    };
    let first = send().await;
    first.expect(201);

    let stored = stored_response(&app, &key).await;
    assert!(stored.starts_with("~2"), "stored packed: {stored}");
    assert!(
        stored.len() < first.text.len(),
        "{} bytes stored for a response of {}",
        stored.len(),
        first.text.len()
    );
    assert_eq!(store::packed::unpack(&stored), first.text.as_str());

    let replay = send().await;
    replay.expect(201);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.text, first.text, "a replay is the first response");
}

async fn a_response_stored_before_packing_still_replays(app: TestApp) {
    let key = unique_key();
    let body = json!({"name": "Plain product"});
    let send = || {
        app.req("POST", "/api/v1/products")
            .idem(&key)
            .json(&body)
            .send()
    };
    let first = send().await;
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

    let replay = send().await;
    replay.expect(201);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.text, first.text);
}

backend_tests!(
    a_kept_response_is_stored_packed_and_replays_the_same,
    a_response_stored_before_packing_still_replays,
);
