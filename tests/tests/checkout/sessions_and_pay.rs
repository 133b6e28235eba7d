//! Sessions and pay.

use super::*;

pub(super) fn session_body(config: &str, email: &str) -> Value {
    json!({"config_ref": config, "buyer": {"email": email, "name": NAME}})
}

pub(super) async fn create_session_as(app: &TestApp, secret: &str, body: Value) -> Resp {
    app.post(SESSIONS, body).auth(secret).send().await
}

pub(super) async fn create_session(app: &TestApp, body: Value) -> Resp {
    create_session_as(app, &app.sandbox.secret, body).await
}

/// A new open session of `config` for `email`; returns its reference.
pub(super) async fn open_session(app: &TestApp, config: &str, email: &str) -> String {
    let r = create_session(app, session_body(config, email)).await;
    r.expect(201);
    assert_eq!(r.data()["status"], "open", "{}", r.text);
    text(&r.data()["checkout_session_ref"])
}

pub(super) fn pay_path(session: &str) -> String {
    at(SESSIONS, session, "/pay")
}

pub(super) fn card(payment_method: &str) -> Value {
    json!({ "payment_method": payment_method })
}

/// Pays `session` with `body` and a fresh idempotency key.
pub(super) async fn pay(app: &TestApp, session: &str, body: Value) -> Resp {
    app.post(&pay_path(session), body).send().await
}

/// Pays `session` with `body` under the idempotency key `key`.
pub(super) async fn pay_keyed(app: &TestApp, session: &str, key: &str, body: &Value) -> Resp {
    app.req("POST", &pay_path(session))
        .idem(key)
        .json(body)
        .send()
        .await
}

/// Pays `session` with `body`; asserts a 200 whose payment `status` is
/// `status`; returns the answer's data.
#[track_caller]
pub(super) fn answered(r: &Resp, status: &str) -> Value {
    r.expect(200);
    let d = r.data().clone();
    has_fields(&d, PAY_FIELDS);
    has_fields(&d["payment"], PAYMENT_FIELDS);
    has_fields(&d["checkout_session"], SESSION_FIELDS);
    assert_eq!(d["payment"]["status"], status, "{}", r.text);
    d
}

pub(super) async fn pay_ok(app: &TestApp, session: &str, body: Value) -> Value {
    answered(&pay(app, session, body).await, "succeeded")
}

/// Pays a new session of `config` for `email` with `pm_card_visa`; returns
/// the answer's data.
pub(super) async fn paid_session(app: &TestApp, config: &str, email: &str) -> Value {
    let session = open_session(app, config, email).await;
    pay_ok(app, &session, card("pm_card_visa")).await
}

/// The session's state, retrieved.
pub(super) async fn session_state(app: &TestApp, session: &str) -> Value {
    retrieve(app, &SESSION, session).await
}

/// Checks a payment's card: `brand` and `last4`, with an expiry.
#[track_caller]
pub(super) fn card_is(payment: &Value, brand: &str, last4: &str) {
    let m = &payment["payment_method"];
    has_fields(m, &["type", "brand", "last4", "exp_month", "exp_year"]);
    assert_eq!(m["type"], "card", "{payment}");
    assert_eq!(m["brand"], brand, "{payment}");
    assert_eq!(m["last4"], last4, "{payment}");
    expiry(m);
}

/// `exp_month` 1–12 and an `exp_year` not in the past.
#[track_caller]
pub(super) fn expiry(v: &Value) {
    let month = v["exp_month"].as_u64().expect("exp_month");
    assert!((1..=12).contains(&month), "{v}");
    let year = v["exp_year"].as_u64().expect("exp_year");
    assert!(year >= u64::from(this_year()), "{v}");
}

/// The kinds of a journey's steps, in order.
pub(super) fn step_kinds(journey: &Value) -> Vec<String> {
    journey["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .map(|s| text(&s["kind"]))
        .collect()
}

/// The journey's steps of `kind`.
pub(super) fn steps_of(journey: &Value, kind: &str) -> Vec<Value> {
    journey["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .filter(|s| s["kind"] == kind)
        .cloned()
        .collect()
}

/// Marks a session as past its `expires_at`, straight in the store: no
/// operation can make 24 hours pass.
pub(super) async fn expire(app: &TestApp, session: &str) {
    let pool = app.raw_pool().await;
    let done = sqlx::query(
        "UPDATE checkout_sessions SET expires_at = created_at - 1000 \
         WHERE checkout_session_ref = $1",
    )
    .bind(session)
    .execute(&pool)
    .await
    .expect("the session's expiry is moved");
    assert_eq!(done.rows_affected(), 1);
    pool.close().await;
}
