//! An endpoint's settings (contract 13.2, "Settings"), black-box, on every
//! backend: `createWebhookEndpoint` takes `rate_limit` and `max_in_flight`
//! and the resource shows them (`max_in_flight` is the deployment's
//! default when the endpoint set none); out-of-range or mistyped limits are
//! refused by name; `updateWebhookEndpoint` (`PATCH`) changes any of
//! `description`, `ordering`, `rate_limit` and `max_in_flight`, a field left
//! out staying as it is and `null` clearing it, under `Idempotency-Key` and
//! `If-Match` like every conditional write; health shows `effective_rate`
//! and `throttled_until`. How the dispatcher keeps the limits is
//! `receiver_limits.rs`.

use billing_tests::kit::api::*;
use billing_tests::kit::{etag_matches, get, invalid, text};
use billing_tests::receiver::{Behaviour, TestReceiver};
use billing_tests::{backend_tests, unique_key, Backend, Resp, TestApp};
use serde_json::{json, Value};

const URL: &str = "https://example.com/hooks";
const TYPE: &str = "refund.created";

/// The path of `endpoint` (and `tail`).
fn ep(endpoint: &str, tail: &str) -> String {
    format!("{ENDPOINTS}/{endpoint}{tail}")
}

/// Creates an endpoint with `extra` fields besides its url.
async fn create(app: &TestApp, extra: Value) -> Resp {
    let mut body = json!({ "url": URL });
    if let (Some(b), Some(x)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(x.clone());
    }
    app.post(ENDPOINTS, body).send().await
}

/// A new endpoint with `extra` fields: its reference and ETag.
async fn created(app: &TestApp, extra: Value) -> (String, String) {
    let r = create(app, extra).await;
    r.expect(201);
    (text(&r.data()["endpoint_ref"]), etag_matches(&r))
}

/// `updateWebhookEndpoint` with a fresh key and `If-Match: tag`.
async fn patch(app: &TestApp, endpoint: &str, tag: &str, body: Value) -> Resp {
    app.req("PATCH", &ep(endpoint, ""))
        .idem(&unique_key())
        .if_match(tag)
        .json(&body)
        .send()
        .await
}

/// `patch` that must succeed; the endpoint it answers, and its ETag.
async fn patched(app: &TestApp, endpoint: &str, tag: &str, body: Value) -> (Value, String) {
    let r = patch(app, endpoint, tag, body).await;
    r.expect(200);
    let tag = etag_matches(&r);
    (r.data().clone(), tag)
}

async fn retrieve(app: &TestApp, endpoint: &str) -> Value {
    let r = get(app, &ep(endpoint, "")).await;
    r.expect(200);
    r.data().clone()
}

async fn health(app: &TestApp, endpoint: &str) -> Value {
    let r = get(app, &ep(endpoint, "/health")).await;
    r.expect(200);
    r.data().clone()
}

/// `(rate_limit, max_in_flight)` of an endpoint as shown.
fn limits(e: &Value) -> (Value, Value) {
    (e["rate_limit"].clone(), e["max_in_flight"].clone())
}

/// The limits the contract refuses, each with the field it names.
fn refused_limits() -> Vec<Value> {
    vec![
        json!({"rate_limit": 0}),
        json!({"rate_limit": 10001}),
        json!({"rate_limit": -1}),
        json!({"rate_limit": 1.5}),
        json!({"rate_limit": "10"}),
        json!({"rate_limit": true}),
        json!({"rate_limit": 1e20}),
        json!({"max_in_flight": 0}),
        json!({"max_in_flight": 1001}),
        json!({"max_in_flight": 2.5}),
        json!({"max_in_flight": "5"}),
        json!({"max_in_flight": [5]}),
    ]
}

/// The field a body of `refused_limits` names.
fn field_of(body: &Value) -> String {
    body.as_object()
        .and_then(|o| o.keys().next())
        .cloned()
        .unwrap_or_default()
}

async fn endpoint_count(app: &TestApp) -> usize {
    let r = get(app, &format!("{ENDPOINTS}?limit=100")).await;
    r.data()["items"].as_array().map_or(0, Vec::len)
}

/// Created with limits, an endpoint shows them in every answer (create,
/// retrieve, list); created without, it has no rate limit and the
/// deployment's `max_in_flight` (100), as with explicit nulls.
async fn limits_are_set_at_create_and_shown(app: TestApp) {
    let r = create(
        &app,
        json!({"rate_limit": 50, "max_in_flight": 10, "ordering": "per_key"}),
    )
    .await;
    r.expect(201);
    assert_eq!(limits(r.data()), (json!(50), json!(10)));
    assert_eq!(r.data()["ordering"], "per_key");
    let limited = text(&r.data()["endpoint_ref"]);
    let shown = retrieve(&app, &limited).await;
    assert_eq!(limits(&shown), (json!(50), json!(10)));
    let listed = get(&app, ENDPOINTS).await;
    let item = listed.data()["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["endpoint_ref"] == limited.as_str())
        .cloned()
        .expect("listed");
    assert_eq!(limits(&item), (json!(50), json!(10)));

    for extra in [
        json!({}),
        json!({"rate_limit": null, "max_in_flight": null}),
    ] {
        let r = create(&app, extra.clone()).await;
        r.expect(201);
        assert_eq!(limits(r.data()), (Value::Null, json!(100)), "{extra}");
        assert_eq!(r.data()["ordering"], "none");
        let e = retrieve(&app, &text(&r.data()["endpoint_ref"])).await;
        assert_eq!(limits(&e), (Value::Null, json!(100)));
    }
    // The bounds themselves are accepted.
    let r = create(&app, json!({"rate_limit": 1, "max_in_flight": 1})).await;
    r.expect(201);
    assert_eq!(limits(r.data()), (json!(1), json!(1)));
    let r = create(&app, json!({"rate_limit": 10000, "max_in_flight": 1000})).await;
    r.expect(201);
    assert_eq!(limits(r.data()), (json!(10000), json!(1000)));
}

/// A limit out of range, not an integer or of another type is
/// `validation_failed` naming its field, and creates nothing.
async fn create_refuses_bad_limits_by_name(app: TestApp) {
    let before = endpoint_count(&app).await;
    for body in refused_limits() {
        let r = create(&app, body.clone()).await;
        invalid(&r, &field_of(&body));
        assert!(
            !r.text.contains("10001") && !r.text.contains("\"10\""),
            "the refused value is not echoed: {}",
            r.text
        );
    }
    assert_eq!(endpoint_count(&app).await, before, "nothing was created");
}

/// PATCH changes each field, a field left out stays as it is, `null`
/// clears `rate_limit` and `description` and puts `max_in_flight` back to
/// the deployment's default; each change is a new ETag, a body that
/// changes nothing keeps it.
async fn update_changes_what_it_names(app: TestApp) {
    let (e, tag) = created(&app, json!({"description": "first"})).await;

    let (after, tag2) = patched(&app, &e, &tag, json!({"rate_limit": 20})).await;
    assert_ne!(tag2, tag, "the ETag changes with the endpoint");
    assert_eq!(limits(&after), (json!(20), json!(100)));
    assert_eq!(after["description"], "first", "left out: unchanged");
    assert_eq!(after["ordering"], "none");
    assert_eq!(limits(&retrieve(&app, &e).await), (json!(20), json!(100)));

    let (after, tag3) = patched(&app, &e, &tag2, json!({"max_in_flight": 5})).await;
    assert_eq!(limits(&after), (json!(20), json!(5)), "rate_limit stays");

    let (after, tag4) = patched(&app, &e, &tag3, json!({"rate_limit": null})).await;
    assert_eq!(limits(&after), (Value::Null, json!(5)), "null clears");

    let (after, tag5) = patched(&app, &e, &tag4, json!({"max_in_flight": null})).await;
    assert_eq!(
        limits(&after),
        (Value::Null, json!(100)),
        "back to the deployment's default"
    );

    let (after, tag6) = patched(
        &app,
        &e,
        &tag5,
        json!({"description": "second", "ordering": "per_key", "rate_limit": 7, "max_in_flight": 3}),
    )
    .await;
    assert_eq!(after["description"], "second");
    assert_eq!(after["ordering"], "per_key");
    assert_eq!(limits(&after), (json!(7), json!(3)));

    let (after, tag7) = patched(&app, &e, &tag6, json!({"description": null})).await;
    assert!(after["description"].is_null());
    assert_eq!(after["ordering"], "per_key");
    assert_eq!(limits(&after), (json!(7), json!(3)));

    // Nothing to change: answered as it is, same ETag, nothing written.
    let updated_at = after["updated_at"].clone();
    for body in [json!({}), json!({"rate_limit": 7, "ordering": "per_key"})] {
        let (same, tag8) = patched(&app, &e, &tag7, body).await;
        assert_eq!(tag8, tag7);
        assert_eq!(same["updated_at"], updated_at);
    }
    // `*` matches the endpoint whatever its version.
    let (after, _) = patched(&app, &e, "*", json!({"ordering": "none"})).await;
    assert_eq!(after["ordering"], "none");
    let shown = retrieve(&app, &e).await;
    assert_eq!(shown["ordering"], "none");
    assert_eq!(limits(&shown), (json!(7), json!(3)));
}

/// The checks of contract 2, in order: permission, the key, the
/// precondition's presence and format, the body, existence, the
/// precondition's match.
async fn update_checks_headers_body_and_existence(app: TestApp) {
    let (e, tag) = created(&app, json!({"rate_limit": 9})).await;
    let path = ep(&e, "");
    app.req("PATCH", &path)
        .if_match(&tag)
        .json(&json!({"rate_limit": 10}))
        .send()
        .await
        .expect_error(400, "idempotency_key_required");
    app.req("PATCH", &path)
        .idem(&unique_key())
        .json(&json!({"rate_limit": 10}))
        .send()
        .await
        .expect_error(428, "precondition_required");
    // Header presence comes before the body.
    app.req("PATCH", &path)
        .idem(&unique_key())
        .json(&json!({"bogus": 1}))
        .send()
        .await
        .expect_error(428, "precondition_required");
    invalid(&patch(&app, &e, "abc", json!({})).await, "If-Match");
    patch(&app, &e, "\"stale\"", json!({"rate_limit": 10}))
        .await
        .expect_error(412, "precondition_failed");

    for body in refused_limits() {
        invalid(&patch(&app, &e, &tag, body.clone()).await, &field_of(&body));
    }
    invalid(&patch(&app, &e, &tag, json!({"bogus": 1})).await, "bogus");
    invalid(
        &patch(&app, &e, &tag, json!({"rate_limit": 10, "url": URL})).await,
        "url",
    );
    for bad in [json!(null), json!("fifo"), json!(1)] {
        invalid(
            &patch(&app, &e, &tag, json!({ "ordering": bad })).await,
            "ordering",
        );
    }
    invalid(
        &patch(&app, &e, &tag, json!({"description": "x".repeat(501)})).await,
        "description",
    );
    invalid(
        &patch(&app, &e, &tag, json!({"description": 5})).await,
        "description",
    );
    let not_object = app
        .req("PATCH", &path)
        .idem(&unique_key())
        .if_match(&tag)
        .json(&json!([{"rate_limit": 10}]))
        .send()
        .await;
    invalid(&not_object, "body");
    let empty = app
        .req("PATCH", &path)
        .idem(&unique_key())
        .if_match(&tag)
        .raw("")
        .send()
        .await;
    invalid(&empty, "body");
    // A bad body is refused before the endpoint is looked up, and before
    // its ETag is compared.
    invalid(
        &patch(&app, "whep_N5xP3cV8bT1m", "*", json!({"rate_limit": 0})).await,
        "rate_limit",
    );
    invalid(
        &patch(&app, &e, "\"stale\"", json!({"rate_limit": 0})).await,
        "rate_limit",
    );
    patch(&app, "whep_N5xP3cV8bT1m", "*", json!({"rate_limit": 10}))
        .await
        .expect_error(404, "not_found");
    invalid(&patch(&app, "nope", "*", json!({})).await, "endpoint_ref");
    // Nothing above changed it.
    let shown = retrieve(&app, &e).await;
    assert_eq!(limits(&shown), (json!(9), json!(100)));
    assert_eq!(shown["etag"], tag.as_str());

    // Another environment's endpoint does not exist for this caller.
    let live = app
        .req("PATCH", &path)
        .auth(&app.live.secret)
        .idem(&unique_key())
        .if_match("*")
        .json(&json!({"rate_limit": 10}))
        .send()
        .await;
    live.expect_error(404, "not_found");
    assert_eq!(limits(&retrieve(&app, &e).await), (json!(9), json!(100)));
}

/// Only `webhooks:manage_update_endpoint` may update an endpoint.
async fn update_needs_its_permission(app: TestApp) {
    let (e, tag) = created(&app, json!({})).await;
    let (_, reader) = app
        .principal_with(&[
            "webhooks:read_retrieve_endpoint",
            "webhooks:manage_create_endpoint",
            "webhooks:manage_pause_endpoint",
        ])
        .await;
    let r = app
        .req("PATCH", &ep(&e, ""))
        .auth(&reader)
        .idem(&unique_key())
        .if_match(&tag)
        .json(&json!({"rate_limit": 10}))
        .send()
        .await;
    r.expect_error(403, "forbidden");
    assert!(
        r.text.contains("webhooks:manage_update_endpoint"),
        "{}",
        r.text
    );
    // Without the permission, forbidden whatever the reference.
    app.req("PATCH", &ep("whep_N5xP3cV8bT1m", ""))
        .auth(&reader)
        .idem(&unique_key())
        .if_match("*")
        .json(&json!({}))
        .send()
        .await
        .expect_error(403, "forbidden");
    let (_, updater) = app
        .principal_with(&["webhooks:manage_update_endpoint"])
        .await;
    let r = app
        .req("PATCH", &ep(&e, ""))
        .auth(&updater)
        .idem(&unique_key())
        .if_match(&tag)
        .json(&json!({"rate_limit": 10}))
        .send()
        .await;
    r.expect(200);
    assert_eq!(r.data()["rate_limit"], 10);
    // The operation is logged under its id.
    let logs = get(
        &app,
        "/api/v1/request_logs?operation_id=updateWebhookEndpoint&status=200",
    )
    .await;
    let logged = &logs.data()["items"][0];
    assert_eq!(logged["method"], "PATCH");
    assert_eq!(logged["path"], ep(&e, ""));
}

/// The same key and body replays the kept answer (even after the endpoint
/// moved on); the same key with another body is a mismatch; a kept 412 is
/// replayed too.
async fn update_replays_under_its_key(app: TestApp) {
    let (e, tag) = created(&app, json!({})).await;
    let key = unique_key();
    let send = |body: Value, tag: String| {
        let key = key.clone();
        let path = ep(&e, "");
        let app = &app;
        async move {
            app.req("PATCH", &path)
                .idem(&key)
                .if_match(&tag)
                .json(&body)
                .send()
                .await
        }
    };
    let first = send(json!({"rate_limit": 30}), tag.clone()).await;
    first.expect(200);
    assert_eq!(first.header("idempotent-replayed"), None);
    let again = send(json!({"rate_limit": 30}), tag.clone()).await;
    again.expect(200);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.text, first.text);
    assert_eq!(again.etag(), first.etag());
    send(json!({"rate_limit": 31}), tag.clone())
        .await
        .expect_error(422, "idempotency_mismatch");
    assert_eq!(retrieve(&app, &e).await["rate_limit"], 30, "written once");

    // A decided 412 is kept and replayed as it was.
    let key = unique_key();
    let stale = || {
        app.req("PATCH", &ep(&e, ""))
            .idem(&key)
            .if_match(&tag)
            .json(&json!({"rate_limit": 40}))
            .send()
    };
    let first = stale().await;
    first.expect_error(412, "precondition_failed");
    let again = stale().await;
    again.expect_error(412, "precondition_failed");
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(retrieve(&app, &e).await["rate_limit"], 30);
}

/// Health shows the rate attempts may start at now (null when nothing
/// limits the endpoint, its `rate_limit` when one does) and no hold-off.
async fn health_shows_the_effective_rate(app: TestApp) {
    let (e, tag) = created(&app, json!({})).await;
    let h = health(&app, &e).await;
    assert!(h["effective_rate"].is_null(), "{h}");
    assert!(h["throttled_until"].is_null(), "{h}");
    assert!(h.as_object().unwrap().contains_key("effective_rate"));
    assert!(h.as_object().unwrap().contains_key("throttled_until"));

    patched(&app, &e, &tag, json!({"rate_limit": 25})).await;
    let h = health(&app, &e).await;
    assert_eq!(h["effective_rate"].as_f64(), Some(25.0), "{h}");
    assert!(h["throttled_until"].is_null(), "{h}");

    // `max_in_flight` alone limits no rate.
    let (other, _) = created(&app, json!({"max_in_flight": 3})).await;
    assert!(health(&app, &other).await["effective_rate"].is_null());
}

/// `per_key` to `none` is accepted, and the deliveries waiting behind a
/// failed head go at once: they no longer wait for their key.
async fn ordering_can_be_turned_off(app: TestApp) {
    let receiver = TestReceiver::start(Behaviour::Status(500)).await;
    let r = app
        .post(
            ENDPOINTS,
            json!({"url": receiver.url(), "ordering": "per_key"}),
        )
        .send()
        .await;
    r.expect(201);
    let e = text(&r.data()["endpoint_ref"]);
    app.subscribe(&e, TYPE, 1).await;
    for n in 0..2 {
        let (_, envelope) = app.envelope(TYPE, json!({"refund_ref": "ref_AAAAAAAAAAAA", "n": n}));
        let mut envelope: Value = serde_json::from_str(&envelope).unwrap();
        envelope["ordering_key"] = json!("k");
        app.accept(&envelope.to_string()).await;
    }
    app.dispatch_due("0s").await;
    let mut ds = billing_tests::kit::deliveries(&app, &e).await;
    ds.sort_by_key(|d| d["sequence"].as_i64());
    assert_eq!(ds[0]["status"], "failed");
    assert_eq!(ds[1]["status"], "pending");
    assert_eq!(ds[1]["waiting_for"], ds[0]["delivery_ref"]);
    assert_eq!(receiver.count(), 1);

    let tag = retrieve(&app, &e).await["etag"]
        .as_str()
        .unwrap()
        .to_owned();
    let (after, _) = patched(&app, &e, &tag, json!({"ordering": "none"})).await;
    assert_eq!(after["ordering"], "none");
    let waiting = text(&ds[1]["delivery_ref"]);
    let d = get(&app, &format!("/api/v1/webhook_deliveries/{waiting}")).await;
    assert!(d.data()["waiting_for"].is_null(), "{}", d.text);
    assert!(d.data()["next_attempt_at"].is_string(), "due: {}", d.text);
    receiver.set(Behaviour::Status(200));
    app.dispatch_due("0s").await;
    let d = get(&app, &format!("/api/v1/webhook_deliveries/{waiting}")).await;
    assert_eq!(d.data()["status"], "succeeded", "{}", d.text);
    assert_eq!(
        health(&app, &e).await["blocked_keys"],
        0,
        "no key is blocked once the endpoint stops ordering"
    );
}

backend_tests!(
    limits_are_set_at_create_and_shown,
    create_refuses_bad_limits_by_name,
    update_changes_what_it_names,
    update_checks_headers_body_and_existence,
    update_needs_its_permission,
    update_replays_under_its_key,
    health_shows_the_effective_rate,
    ordering_can_be_turned_off,
);

/// An endpoint that set no `max_in_flight` shows the deployment's
/// (`delivery.endpoint_max_in_flight`); one that set its own shows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_max_in_flight_is_the_deployments() {
    let app = TestApp::spawn_with(Backend::Sqlite, |s| {
        s.webhooks.endpoint_max_in_flight = 7;
    })
    .await;
    let (e, tag) = created(&app, json!({})).await;
    assert_eq!(retrieve(&app, &e).await["max_in_flight"], 7);
    let (after, tag) = patched(&app, &e, &tag, json!({"max_in_flight": 40})).await;
    assert_eq!(after["max_in_flight"], 40);
    let (after, _) = patched(&app, &e, &tag, json!({"max_in_flight": null})).await;
    assert_eq!(after["max_in_flight"], 7);
}
