//! Idempotency.

use super::*;

pub(super) async fn pay_replays(app: TestApp) {
    let (config, _) = one_time_config(&app).await;
    let session = open_session(&app, &config, "ada@example.com").await;
    let key = unique_key();
    let body = card("pm_card_visa");
    let first = pay_keyed(&app, &session, &key, &body).await;
    answered(&first, "succeeded");
    assert!(first.header("idempotent-replayed").is_none());
    let again = pay_keyed(&app, &session, &key, &body).await;
    assert_eq!(again.status, first.status);
    assert_eq!(again.json, first.json, "the same body");
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(list(&app, PAYMENTS).await.len(), 1, "no second payment");
    assert_eq!(list(&app, CAPTURES).await.len(), 1);
    // The same key with another body.
    pay_keyed(&app, &session, &key, &card("pm_card_mastercard"))
        .await
        .expect_error(422, "idempotency_mismatch");
    // A refusal is replayed too.
    let late = unique_key();
    let refused_first = pay_keyed(&app, &session, &late, &body).await;
    refused_first.expect_error(422, "semantic_error");
    let refused_again = pay_keyed(&app, &session, &late, &body).await;
    assert_eq!(refused_again.status, 422);
    assert_eq!(refused_again.json, refused_first.json);
    assert_eq!(refused_again.header("idempotent-replayed"), Some("true"));

    // A decline replays without a second failed payment.
    let other = open_session(&app, &config, "grace@example.com").await;
    let key = unique_key();
    let declined = card("pm_card_declined");
    let first = pay_keyed(&app, &other, &key, &declined).await;
    answered(&first, "failed");
    let again = pay_keyed(&app, &other, &key, &declined).await;
    assert_eq!(again.status, 200);
    assert_eq!(again.json, first.json);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(
        list(&app, &format!("{PAYMENTS}?status=failed")).await.len(),
        1
    );
    // A session create replays too.
    let key = unique_key();
    let body = session_body(&config, "ada@example.com");
    let make = || app.req("POST", SESSIONS).idem(&key).json(&body).send();
    let first = make().await;
    first.expect(201);
    let again = make().await;
    assert_eq!(again.status, 201);
    assert_eq!(again.json, first.json);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(list(&app, SESSIONS).await.len(), 3);
}
