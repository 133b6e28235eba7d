//! Test clocks the subscription tests share: creating one (`clock`,
//! `created`), asking it to advance (`ask_advance`), running its work until
//! it is `ready` again (`settle`, `advance`) and paying a checkout session
//! on it (`pay_on`). Each asserts only what every caller needs; a test file
//! keeps its own further assertions at the call site.

use crate::kit::api::SESSIONS;
use crate::kit::{at, text};
use crate::TestApp;
use commerce::jobs::{run_due, Rules};
use domain::Timestamp;
use serde_json::{json, Value};

/// The test clocks' collection.
pub const CLOCKS: &str = "/api/v1/test_clocks";

/// Creates a test clock frozen at `time` (named `name`, when given); the
/// created clock.
pub async fn created(app: &TestApp, time: &str, name: Option<&str>) -> Value {
    let body = match name {
        Some(name) => json!({"frozen_time": time, "name": name}),
        None => json!({"frozen_time": time}),
    };
    let r = app.post(CLOCKS, body).send().await;
    r.expect(201);
    r.data().clone()
}

/// Creates a test clock frozen at `time` (named `name`, when given); its
/// reference.
pub async fn clock(app: &TestApp, time: &str, name: Option<&str>) -> String {
    text(&created(app, time, name).await["test_clock_ref"])
}

/// Asks `clock` to advance to `time` (202); the answer's data.
pub async fn ask_advance(app: &TestApp, clock: &str, time: &str) -> Value {
    let r = app
        .post(&at(CLOCKS, clock, "/advance"), json!({"frozen_time": time}))
        .send()
        .await;
    r.expect(202);
    r.data().clone()
}

/// Runs the due work through the seam; the clock, asserted `ready`.
pub async fn settle(app: &TestApp, clock: &str) -> Value {
    run_due(&app.store, &Rules::default(), "test", Timestamp::now()).await;
    let r = app.get(&at(CLOCKS, clock, "")).send().await;
    r.expect(200);
    let c = r.data().clone();
    assert_eq!(c["status"], "ready", "{c}");
    c
}

/// Advances `clock` to `time` and runs its work through the seam; the
/// clock, `ready`.
pub async fn advance(app: &TestApp, clock: &str, time: &str) -> Value {
    ask_advance(app, clock, time).await;
    settle(app, clock).await
}

/// Creates a session of `config` on `clock` for `email` (201) and pays it
/// with `pm` (200); (the created session, the pay answer).
pub async fn pay_on(
    app: &TestApp,
    config: &str,
    clock: &str,
    email: &str,
    pm: &str,
) -> (Value, Value) {
    let r = app
        .post(
            SESSIONS,
            json!({"config_ref": config, "buyer": {"email": email}, "test_clock_ref": clock}),
        )
        .send()
        .await;
    r.expect(201);
    let session = r.data().clone();
    let r = app
        .post(
            &at(SESSIONS, &text(&session["checkout_session_ref"]), "/pay"),
            json!({"payment_method": pm}),
        )
        .send()
        .await;
    r.expect(200);
    (session, r.data().clone())
}
