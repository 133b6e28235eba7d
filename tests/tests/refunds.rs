//! Refunds, their timed work and the sandbox dispute (issue 18; contract
//! section 10.1 "Refunds"), black-box, on every backend: the create matrix
//! (scope, remainder, currency, capture, schedule window, validation),
//! settlement and what it changes (capture, payment, order, entitlements),
//! concurrent refunds against one remainder, scheduled refunds, the card
//! whose refunds fail, the dispute of `pm_card_dispute` canceling scheduled
//! refunds, list filters and idempotent replays.
//!
//! The test harness starts no dispatcher, so each test runs the timed work
//! (`commerce::jobs::run`) itself.

use billing_tests::kit::api::*;
use billing_tests::kit::{
    at, eur, has_fields, invalid, is_ref, items, list, money, new_session, one_time_config,
    order_of, paid_payment, pay, text, timed_work,
};
use billing_tests::{backend_tests, unique_key, Resp, TestApp};
use domain::Timestamp;
use serde_json::{json, Value};

const REFUND_FIELDS: &[&str] = &[
    "refund_ref",
    "payment_intent_ref",
    "capture_ref",
    "status",
    "scope",
    "amount",
    "reason",
    "access_effect",
    "cancelable",
    "requested_at",
    "scheduled_at",
    "executed_at",
    "canceled_at",
    "created_at",
    "updated_at",
    "etag",
];

const DAY: i64 = 86_400;

// ---- helpers ------------------------------------------------------------------

fn eur_n(value: u64) -> Value {
    eur(&value.to_string())
}

/// The minor units of an EUR money value.
#[track_caller]
fn minor(v: &Value) -> u64 {
    assert_eq!(v["currency"], "EUR", "{v}");
    assert_eq!(v["unit"], "minor", "{v}");
    text(&v["value"]).parse().expect("minor units")
}

#[track_caller]
fn ts_of(v: &Value) -> Timestamp {
    let s = text(v);
    assert!(s.ends_with('Z'), "timestamp {s}");
    Timestamp::parse(&s).unwrap_or_else(|| panic!("timestamp {s}"))
}

/// The single-resource ETag header equals the body's `etag` field.
#[track_caller]
fn etag_matches(r: &Resp) {
    let tag = r.etag();
    assert!(tag.starts_with('"') && tag.ends_with('"'), "strong: {tag}");
    assert_eq!(r.data()["etag"], tag.as_str(), "{}", r.text);
}

/// Asserts `422 semantic_error`.
#[track_caller]
fn refused(r: &Resp) {
    r.expect_error(422, "semantic_error");
}

async fn get(app: &TestApp, path: &str) -> Value {
    let r = app.get(path).send().await;
    r.expect(200);
    etag_matches(&r);
    r.data().clone()
}

// ---- paying ---------------------------------------------------------------------

/// A published config of one EUR 19.99 item.
async fn config_1999(app: &TestApp) -> String {
    one_time_config(app, &["1999"]).await
}

/// A succeeded payment and the records it made.
#[derive(Debug, Clone)]
struct Paid {
    payment: String,
    capture: String,
    order: String,
    buyer: String,
    captured_at: Timestamp,
}

/// Pays a new session of `config` with `pm` for a buyer of its own.
async fn pay_raw(app: &TestApp, config: &str, pm: &str) -> Value {
    let session = new_session(app, config).await;
    pay(app, &session, pm).await.data()["payment"].clone()
}

/// A payment of `config` with `pm` that succeeded, with its capture and order.
async fn paid(app: &TestApp, config: &str, pm: &str) -> Paid {
    let p = paid_payment(app, config, pm).await;
    let payment = text(&p["payment_intent_ref"]);
    let buyer = text(&p["buyer_ref"]);
    let captures = list(app, &format!("{CAPTURES}?payment_intent_ref={payment}")).await;
    assert_eq!(captures.len(), 1, "{captures:?}");
    let order = order_of(app, &p).await;
    Paid {
        payment,
        capture: text(&captures[0]["capture_ref"]),
        order: text(&order["order_ref"]),
        buyer,
        captured_at: ts_of(&p["captured_at"]),
    }
}

// ---- refunds --------------------------------------------------------------------

fn body(payment: &str, amount: Option<u64>) -> Value {
    let mut b = json!({"payment_intent_ref": payment, "reason": "requested_by_customer",
        "access_effect": "retain"});
    if let Some(a) = amount {
        b["amount"] = eur_n(a);
    }
    b
}

fn scheduled_body(payment: &str, amount: u64, at: Timestamp) -> Value {
    let mut b = body(payment, Some(amount));
    b["scheduled_at"] = json!(at.to_rfc3339());
    b
}

async fn create(app: &TestApp, body: Value) -> Resp {
    app.post(REFUNDS, body).send().await
}

/// Creates a refund; asserts 201, its shape and tag; returns it.
async fn created(app: &TestApp, body: Value) -> Value {
    let r = create(app, body.clone()).await;
    r.expect(201);
    etag_matches(&r);
    let d = r.data().clone();
    has_fields(&d, REFUND_FIELDS);
    is_ref(&d["refund_ref"], "ref_");
    is_ref(&d["capture_ref"], "cap_");
    assert_eq!(d["payment_intent_ref"], body["payment_intent_ref"], "{d}");
    assert_eq!(d["reason"], body["reason"], "{d}");
    assert_eq!(d["access_effect"], body["access_effect"], "{d}");
    if body.get("amount").is_some() {
        assert_eq!(d["amount"], body["amount"], "{d}");
    }
    let scheduled = body.get("scheduled_at").is_some();
    let status = if scheduled { "scheduled" } else { "pending" };
    assert_eq!(d["status"], status, "{d}");
    assert_eq!(d["cancelable"], scheduled, "{d}");
    assert!(d["executed_at"].is_null(), "{d}");
    assert!(d["canceled_at"].is_null(), "{d}");
    let requested = ts_of(&d["requested_at"]);
    assert_eq!(ts_of(&d["created_at"]), requested, "{d}");
    assert_eq!(ts_of(&d["updated_at"]), requested, "{d}");
    let now = Timestamp::now();
    assert!(
        requested > now.plus_seconds(-10) && requested <= now.plus_seconds(2),
        "{d}"
    );
    if scheduled {
        assert_eq!(
            ts_of(&d["scheduled_at"]),
            Timestamp::parse(&text(&body["scheduled_at"])).expect("timestamp"),
            "{d}"
        );
    } else {
        assert!(d["scheduled_at"].is_null(), "{d}");
    }
    assert_eq!(get(app, &at(REFUNDS, &text(&d["refund_ref"]), "")).await, d);
    d
}

fn refund_ref(r: &Value) -> String {
    text(&r["refund_ref"])
}

async fn refund_state(app: &TestApp, refund: &str) -> Value {
    get(app, &at(REFUNDS, refund, "")).await
}

/// Waits (at most `secs`) until the refund leaves `scheduled` and
/// `pending`; returns it.
async fn settled_within(app: &TestApp, refund: &str, secs: u64) -> Value {
    app.eventually(secs, || async {
        let r = refund_state(app, refund).await;
        (!matches!(r["status"].as_str(), Some("scheduled" | "pending"))).then_some(r)
    })
    .await
}

/// Runs the timed work due by the time a refund asked for now settles
/// (`jobs::run_due` at now + `SETTLE_AFTER_MS`), then reads the refund,
/// which must have left `scheduled` and `pending`. A test that also runs
/// a runner in the background (`timed_work`) may see that one take the
/// job first: then its commit is waited for.
async fn settled(app: &TestApp, refund: &str) -> Value {
    let at = Timestamp::now().plus_millis(commerce::jobs::SETTLE_AFTER_MS);
    commerce::jobs::run_due(&app.store, &commerce::jobs::Rules::default(), "settler", at).await;
    settled_within(app, refund, 10).await
}

/// A settled refund: `status`, stamped `executed_at`, not cancelable.
#[track_caller]
fn is_settled(r: &Value, status: &str) {
    assert_eq!(r["status"], status, "{r}");
    assert_eq!(r["cancelable"], false, "{r}");
    assert!(r["canceled_at"].is_null(), "{r}");
    let executed = ts_of(&r["executed_at"]);
    let requested = ts_of(&r["requested_at"]);
    let start = if r["scheduled_at"].is_null() {
        requested
    } else {
        ts_of(&r["scheduled_at"])
    };
    assert!(executed >= start, "executed after its start: {r}");
    assert!(
        executed <= start.plus_seconds(6),
        "the sandbox settles within ~2 s: {r}"
    );
    assert_eq!(ts_of(&r["updated_at"]), executed, "{r}");
}

async fn payment_refunded(app: &TestApp, p: &Paid) -> u64 {
    minor(&get(app, &at(PAYMENTS, &p.payment, "")).await["amount_refunded"])
}

async fn capture_refunded(app: &TestApp, p: &Paid) -> u64 {
    minor(&get(app, &at(CAPTURES, &p.capture, "")).await["amount_refunded"])
}

async fn order_status(app: &TestApp, p: &Paid) -> String {
    text(&get(app, &at(ORDERS, &p.order, "")).await["status"])
}

/// Asserts what the payment's succeeded refunds add up to, on the payment
/// and the capture, and the order's status.
async fn refunded_is(app: &TestApp, p: &Paid, refunded: u64, order: &str) {
    assert_eq!(payment_refunded(app, p).await, refunded, "payment");
    assert_eq!(capture_refunded(app, p).await, refunded, "capture");
    assert_eq!(order_status(app, p).await, order, "order");
}

/// The order's entitlements.
async fn entitlements(app: &TestApp, p: &Paid) -> Vec<Value> {
    list(app, &format!("{ENTITLEMENTS}?buyer_ref={}", p.buyer))
        .await
        .into_iter()
        .filter(|e| e["order_ref"] == p.order.as_str())
        .collect()
}

// ---- the matrix -----------------------------------------------------------------

async fn the_refund_matrix(app: TestApp) {
    let config = config_1999(&app).await;

    // Full: the whole captured amount, named.
    let a = paid(&app, &config, "pm_card_visa").await;
    let full = created(&app, body(&a.payment, Some(1999))).await;
    assert_eq!(full["scope"], "full", "{full}");
    assert_eq!(full["capture_ref"], a.capture.as_str());
    // Nothing is left: neither an amount nor the remainder.
    refused(&create(&app, body(&a.payment, Some(1))).await);
    refused(&create(&app, body(&a.payment, None)).await);

    // Partial, then more than the remainder, another currency, then the
    // remainder (no amount).
    let b = paid(&app, &config, "pm_card_visa").await;
    let partial = created(&app, body(&b.payment, Some(500))).await;
    assert_eq!(partial["scope"], "partial", "{partial}");
    assert_eq!(partial["amount"], eur("500"));
    refused(&create(&app, body(&b.payment, Some(1500))).await);
    let mut usd = body(&b.payment, None);
    usd["amount"] = money("100", "USD");
    refused(&create(&app, usd).await);
    let rest = created(&app, body(&b.payment, None)).await;
    assert_eq!(rest["amount"], eur("1499"), "the remainder: {rest}");
    assert_eq!(
        rest["scope"], "partial",
        "less than the captured amount: {rest}"
    );
    refused(&create(&app, body(&b.payment, Some(1))).await);

    // A capture of another payment.
    let c = paid(&app, &config, "pm_card_visa").await;
    let mut other = body(&c.payment, Some(100));
    other["capture_ref"] = json!(a.capture);
    refused(&create(&app, other).await);
    let mut other = body(&c.payment, Some(100));
    other["capture_ref"] = json!(b.capture);
    refused(&create(&app, other).await);

    // The schedule window.
    let now = Timestamp::now();
    invalid(
        &create(&app, scheduled_body(&c.payment, 100, now.plus_seconds(-60))).await,
        "scheduled_at",
    );
    invalid(
        &create(
            &app,
            scheduled_body(&c.payment, 100, now.plus_seconds(91 * DAY)),
        )
        .await,
        "scheduled_at",
    );
    invalid(
        &create(
            &app,
            scheduled_body(&c.payment, 100, now.plus_seconds(90 * DAY + 120)),
        )
        .await,
        "scheduled_at",
    );
    let mut garbage = body(&c.payment, Some(100));
    garbage["scheduled_at"] = json!("tomorrow");
    invalid(&create(&app, garbage).await, "scheduled_at");

    // Malformed bodies.
    invalid(&create(&app, body(&c.payment, Some(0))).await, "amount");
    let mut bad = body(&c.payment, Some(100));
    bad["reason"] = json!("changed_my_mind");
    invalid(&create(&app, bad).await, "reason");
    let mut bad = body(&c.payment, Some(100));
    bad["access_effect"] = json!("keep");
    invalid(&create(&app, bad).await, "access_effect");
    let mut bad = body(&c.payment, Some(100));
    bad.as_object_mut().expect("object").remove("access_effect");
    create(&app, bad)
        .await
        .expect_error(400, "validation_failed");
    let mut bad = body(&c.payment, Some(100));
    bad.as_object_mut().expect("object").remove("reason");
    create(&app, bad)
        .await
        .expect_error(400, "validation_failed");

    // Malformed and unknown references, unknown fields.
    invalid(
        &create(&app, body("nonsense", Some(100))).await,
        "payment_intent_ref",
    );
    let mut bad = body(&c.payment, Some(100));
    bad["capture_ref"] = json!(c.payment);
    invalid(&create(&app, bad).await, "capture_ref");
    let mut bad = body(&c.payment, Some(100));
    bad["capture_ref"] = json!("cap_N5xP3cV8bT1m");
    create(&app, bad).await.expect_error(404, "not_found");
    let mut bad = body(&c.payment, Some(100));
    bad["currency"] = json!("EUR");
    create(&app, bad)
        .await
        .expect_error(400, "validation_failed");
    // A sandbox payment is unknown to the live environment.
    app.post(REFUNDS, body(&c.payment, Some(100)))
        .auth(&app.live.secret)
        .send()
        .await
        .expect_error(404, "not_found");

    // Unknown and failed payments.
    create(&app, body(NO_PAYMENT, Some(100)))
        .await
        .expect_error(404, "not_found");
    let declined = pay_raw(&app, &config, "pm_card_declined").await;
    assert_eq!(declined["status"], "failed", "{declined}");
    refused(&create(&app, body(&text(&declined["payment_intent_ref"]), None)).await);
    refused(
        &create(
            &app,
            body(&text(&declined["payment_intent_ref"]), Some(100)),
        )
        .await,
    );

    // Nothing refused held anything: c's capture, named, and a refund
    // scheduled almost 90 days ahead, then the remainder.
    let mut own = scheduled_body(
        &c.payment,
        100,
        Timestamp::now().plus_seconds(90 * DAY - 120),
    );
    own["capture_ref"] = json!(c.capture);
    own["reason"] = json!("duplicate");
    let far = created(&app, own).await;
    assert_eq!(far["capture_ref"], c.capture.as_str());
    assert_eq!(far["scope"], "partial");
    let mut last = body(&c.payment, None);
    last["reason"] = json!("fraudulent");
    last["access_effect"] = json!("revoke");
    let last = created(&app, last).await;
    assert_eq!(last["amount"], eur("1899"), "{last}");
    let mut other_reason = body(&c.payment, None);
    other_reason["reason"] = json!("other");
    refused(&create(&app, other_reason).await);

    let all = list(&app, REFUNDS).await;
    assert_eq!(all.len(), 5, "only the accepted refunds exist: {all:?}");
}

// ---- settlement -----------------------------------------------------------------

async fn settlement_updates_payment_capture_and_order(app: TestApp) {
    let config = config_1999(&app).await;
    let p = paid(&app, &config, "pm_card_visa").await;
    refunded_is(&app, &p, 0, "paid").await;

    let first = created(&app, body(&p.payment, Some(500))).await;
    // Nothing is refunded while the refund is pending (the payment is read
    // first: success changes both at once).
    let before = payment_refunded(&app, &p).await;
    if refund_state(&app, &refund_ref(&first)).await["status"] == "pending" {
        assert_eq!(before, 0, "a pending refund is not refunded yet");
    }
    let done = settled(&app, &refund_ref(&first)).await;
    is_settled(&done, "succeeded");
    assert_ne!(done["etag"], first["etag"], "a new version");
    for f in ["refund_ref", "amount", "scope", "reason", "requested_at"] {
        assert_eq!(done[f], first[f], "{f}");
    }
    refunded_is(&app, &p, 500, "partially_refunded").await;

    let second = created(&app, body(&p.payment, None)).await;
    assert_eq!(second["amount"], eur("1499"));
    is_settled(&settled(&app, &refund_ref(&second)).await, "succeeded");
    refunded_is(&app, &p, 1999, "refunded").await;
    refused(&create(&app, body(&p.payment, Some(1))).await);

    // A full refund at once.
    let q = paid(&app, &config, "pm_card_mastercard").await;
    let full = created(&app, body(&q.payment, None)).await;
    assert_eq!(full["scope"], "full");
    is_settled(&settled(&app, &refund_ref(&full)).await, "succeeded");
    refunded_is(&app, &q, 1999, "refunded").await;
    // The first payment is untouched by the second's refund.
    refunded_is(&app, &p, 1999, "refunded").await;
}

async fn concurrent_refunds_never_exceed_the_capture(app: TestApp) {
    let config = config_1999(&app).await;
    let p = paid(&app, &config, "pm_card_visa").await;
    let calls = (0..10).map(|_| create(&app, body(&p.payment, Some(300))));
    let answers = futures::future::join_all(calls).await;
    let mut accepted = Vec::new();
    for r in &answers {
        match r.status {
            201 => accepted.push(r.data().clone()),
            _ => refused(r),
        }
    }
    let sum: u64 = accepted.iter().map(|r| minor(&r["amount"])).sum();
    assert!(sum <= 1999, "accepted {sum} of 1999");
    assert_eq!(
        accepted.len(),
        6,
        "every refund that fits is accepted (6 × 300 ≤ 1999 < 7 × 300)"
    );
    let listed = list(&app, &format!("{REFUNDS}?payment_intent_ref={}", p.payment)).await;
    assert_eq!(listed.len(), accepted.len(), "one refund per 201");
    // The remainder is what is left: 199.
    refused(&create(&app, body(&p.payment, Some(200))).await);
    let last = created(&app, body(&p.payment, None)).await;
    assert_eq!(last["amount"], eur_n(1999 - sum));

    let mut succeeded = 0;
    for r in accepted.iter().chain([&last]) {
        let s = settled(&app, &refund_ref(r)).await;
        is_settled(&s, "succeeded");
        succeeded += minor(&s["amount"]);
    }
    assert_eq!(succeeded, 1999);
    refunded_is(&app, &p, succeeded, "refunded").await;
}

async fn a_scheduled_refund_executes_at_its_time(app: TestApp) {
    timed_work(&app);
    let config = config_1999(&app).await;
    let p = paid(&app, &config, "pm_card_visa").await;
    let when = Timestamp::now().plus_seconds(3);
    let r = created(&app, scheduled_body(&p.payment, 700, when)).await;
    assert_eq!(r["status"], "scheduled");
    assert_eq!(r["cancelable"], true);
    assert_eq!(r["scope"], "partial");
    let refund = refund_ref(&r);
    // A scheduled refund holds its amount.
    refused(&create(&app, body(&p.payment, Some(1300))).await);
    // It is listed as scheduled.
    let scheduled = list(&app, &format!("{REFUNDS}?status=scheduled")).await;
    assert_eq!(scheduled.len(), 1);
    assert_eq!(scheduled[0], refund_state(&app, &refund).await);

    // Watch it: scheduled until its time, then pending, then succeeded.
    let mut seen: Vec<String> = Vec::new();
    let poll = billing_tests::poll::Poll::within(std::time::Duration::from_secs(10));
    let done = loop {
        let s = refund_state(&app, &refund).await;
        let status = text(&s["status"]);
        if status != "scheduled" && seen.iter().all(|x| x == "scheduled") {
            assert!(
                Timestamp::now() >= when,
                "left `scheduled` before its time: {s}"
            );
        }
        if status == "pending" {
            assert_eq!(s["cancelable"], false, "{s}");
            assert!(s["executed_at"].is_null(), "{s}");
        }
        if seen.last() != Some(&status) {
            seen.push(status.clone());
        }
        if status == "succeeded" || status == "failed" {
            break s;
        }
        poll.tick(|| format!("not settled: {seen:?}")).await;
    };
    assert_eq!(
        seen,
        ["scheduled", "pending", "succeeded"],
        "the statuses it went through"
    );
    is_settled(&done, "succeeded");
    assert!(
        Timestamp::now() <= when.plus_seconds(8),
        "executed within ~8 s"
    );
    assert_eq!(ts_of(&done["scheduled_at"]), when);
    refunded_is(&app, &p, 700, "partially_refunded").await;
}

/// Timed work driven by a clock the test owns (`jobs::run_due`), with no
/// runner in the background and no sleep: a refund scheduled a day ahead
/// stays scheduled until the clock reaches its time, starts then, and
/// settles once the clock passes its settlement time.
async fn scheduled_work_runs_when_the_clock_says(app: TestApp) {
    use commerce::jobs::{run_due, Rules, SETTLE_AFTER_MS};
    let config = config_1999(&app).await;
    let p = paid(&app, &config, "pm_card_visa").await;
    let now = Timestamp::now();
    let when = now.plus_seconds(86_400);
    let r = created(&app, scheduled_body(&p.payment, 700, when)).await;
    let refund = refund_ref(&r);
    let status = |s: Value| text(&s["status"]);
    assert_eq!(
        run_due(&app.store, &Rules::default(), "clock", now).await,
        0
    );
    assert_eq!(
        run_due(&app.store, &Rules::default(), "clock", when.plus_millis(-1)).await,
        0
    );
    assert_eq!(status(refund_state(&app, &refund).await), "scheduled");
    // Its time: it starts, and its settlement is due a moment later.
    assert_eq!(
        run_due(&app.store, &Rules::default(), "clock", when).await,
        1
    );
    assert_eq!(status(refund_state(&app, &refund).await), "pending");
    assert_eq!(
        run_due(&app.store, &Rules::default(), "clock", when).await,
        0
    );
    let settle_at = when.plus_millis(SETTLE_AFTER_MS);
    assert_eq!(
        run_due(&app.store, &Rules::default(), "clock", settle_at).await,
        1
    );
    let done = refund_state(&app, &refund).await;
    is_settled(&done, "succeeded");
    assert_eq!(ts_of(&done["scheduled_at"]), when);
    refunded_is(&app, &p, 700, "partially_refunded").await;
    // Nothing is left to run, however late the clock.
    assert_eq!(
        run_due(
            &app.store,
            &Rules::default(),
            "clock",
            when.plus_seconds(86_400)
        )
        .await,
        0
    );
}

async fn failed_refunds_give_their_amount_back(app: TestApp) {
    let config = one_time_config(&app, &["1999", "500"]).await;
    let p = paid(&app, &config, "pm_card_refund_fails").await;
    let mut b = body(&p.payment, None);
    b["access_effect"] = json!("revoke");
    let r = created(&app, b.clone()).await;
    assert_eq!(r["amount"], eur("2499"));
    assert_eq!(r["scope"], "full");
    let f = settled(&app, &refund_ref(&r)).await;
    is_settled(&f, "failed");
    refunded_is(&app, &p, 0, "paid").await;
    let ents = entitlements(&app, &p).await;
    assert_eq!(ents.len(), 2, "{ents:?}");
    for e in &ents {
        assert_eq!(
            e["status"], "active",
            "a failed refund revokes nothing: {e}"
        );
        assert!(e["revoked_at"].is_null(), "{e}");
    }

    // The amount is back: the whole of it can be refunded again (and fails
    // again, for this card).
    let again = created(&app, b).await;
    assert_eq!(again["amount"], eur("2499"), "the remainder is back");
    assert_ne!(again["refund_ref"], r["refund_ref"]);
    is_settled(&settled(&app, &refund_ref(&again)).await, "failed");
    let part = created(&app, body(&p.payment, Some(1000))).await;
    is_settled(&settled(&app, &refund_ref(&part)).await, "failed");
    refunded_is(&app, &p, 0, "paid").await;
    let failed = list(&app, &format!("{REFUNDS}?status=failed")).await;
    assert_eq!(failed.len(), 3);
    assert!(list(&app, &format!("{REFUNDS}?status=succeeded"))
        .await
        .is_empty());
}

async fn revoke_and_retain(app: TestApp) {
    let config = one_time_config(&app, &["1999", "500"]).await;

    let revoked = paid(&app, &config, "pm_card_visa").await;
    let kept = paid(&app, &config, "pm_card_visa").await;
    for p in [&revoked, &kept] {
        let ents = entitlements(&app, p).await;
        assert_eq!(ents.len(), 2, "{ents:?}");
        assert!(ents.iter().all(|e| e["status"] == "active"), "{ents:?}");
    }

    let mut b = body(&revoked.payment, None);
    b["access_effect"] = json!("revoke");
    let r = created(&app, b).await;
    // Until it has succeeded, access stays (the entitlements are read
    // first: success revokes them in its own unit of work).
    let ents = entitlements(&app, &revoked).await;
    if refund_state(&app, &refund_ref(&r)).await["status"] == "pending" {
        assert!(ents.iter().all(|e| e["status"] == "active"), "{ents:?}");
    }
    let done = settled(&app, &refund_ref(&r)).await;
    is_settled(&done, "succeeded");
    let executed = ts_of(&done["executed_at"]);
    let ents = entitlements(&app, &revoked).await;
    assert_eq!(ents.len(), 2, "{ents:?}");
    for e in &ents {
        assert_eq!(e["status"], "revoked", "{e}");
        let at = ts_of(&e["revoked_at"]);
        assert!(
            at >= ts_of(&e["granted_at"]) && at >= executed.plus_seconds(-1),
            "{e}"
        );
        // Timed work dates what it does at the time it runs for, here the
        // refund's settlement (`settled`), not the wall clock.
        assert!(
            at <= executed.plus_seconds(1),
            "revoked with its refund: {e}"
        );
        assert_eq!(
            get(&app, &at_ent(&e["entitlement_ref"])).await,
            *e,
            "the retrieve agrees"
        );
    }
    refunded_is(&app, &revoked, 2499, "refunded").await;

    // Retain: a partial, then the rest; access stays throughout.
    let first = created(&app, body(&kept.payment, Some(1000))).await;
    is_settled(&settled(&app, &refund_ref(&first)).await, "succeeded");
    let rest = created(&app, body(&kept.payment, None)).await;
    is_settled(&settled(&app, &refund_ref(&rest)).await, "succeeded");
    refunded_is(&app, &kept, 2499, "refunded").await;
    let ents = entitlements(&app, &kept).await;
    assert_eq!(ents.len(), 2, "{ents:?}");
    for e in &ents {
        assert_eq!(e["status"], "active", "{e}");
        assert!(e["revoked_at"].is_null(), "{e}");
    }
    // The revoked order's entitlements are the only revoked ones.
    let revoked_all = list(&app, &format!("{ENTITLEMENTS}?status=revoked")).await;
    assert_eq!(revoked_all.len(), 2, "{revoked_all:?}");
    assert!(revoked_all
        .iter()
        .all(|e| e["order_ref"] == revoked.order.as_str()));
}

fn at_ent(reference: &Value) -> String {
    at(ENTITLEMENTS, &text(reference), "")
}

// ---- the sandbox dispute ----------------------------------------------------------

async fn a_dispute_cancels_scheduled_refunds(app: TestApp) {
    timed_work(&app);
    let config = config_1999(&app).await;
    let p = paid(&app, &config, "pm_card_dispute").await;
    let bystander = paid(&app, &config, "pm_card_visa").await;
    // Before the dispute: a refund settled at once (not canceled later),
    // and one scheduled a minute ahead (canceled by the dispute).
    let now_one = created(&app, body(&p.payment, Some(100))).await;
    let later = created(
        &app,
        scheduled_body(&p.payment, 900, Timestamp::now().plus_seconds(60)),
    )
    .await;
    assert_eq!(later["cancelable"], true);
    // Another payment's scheduled refund is not the dispute's business.
    let other = created(
        &app,
        scheduled_body(&bystander.payment, 900, Timestamp::now().plus_seconds(60)),
    )
    .await;
    is_settled(&settled(&app, &refund_ref(&now_one)).await, "succeeded");

    let query = format!("{DISPUTES}?payment_intent_ref={}", p.payment);
    let d = app
        .eventually(20, || async {
            let l = list(&app, &query).await;
            (!l.is_empty()).then_some(l)
        })
        .await;
    assert_eq!(d.len(), 1, "one dispute: {d:?}");
    let d = d[0].clone();
    has_fields(&d, DISPUTE_FIELDS);
    is_ref(&d["dispute_ref"], "dsp_");
    assert_eq!(d["payment_intent_ref"], p.payment.as_str());
    assert_eq!(d["status"], "needs_response", "{d}");
    assert_eq!(d["kind"], "chargeback", "{d}");
    assert_eq!(d["amount"], eur("1999"), "{d}");
    let reason = text(&d["reason_safe"]);
    assert!(!reason.is_empty() && reason.len() <= 200, "{d}");
    assert!(d["resolved_at"].is_null(), "{d}");
    let opened = ts_of(&d["opened_at"]);
    assert!(
        opened >= p.captured_at.plus_seconds(10).plus_millis(-50),
        "opened 10 s after the payment: {d}"
    );
    assert!(opened <= Timestamp::now(), "{d}");
    assert_eq!(ts_of(&d["evidence_due_at"]), opened.plus_seconds(7 * DAY));
    let dispute = text(&d["dispute_ref"]);
    assert_eq!(get(&app, &at(DISPUTES, &dispute, "")).await, d);
    assert_eq!(
        list(&app, &format!("{DISPUTES}?status=needs_response")).await,
        vec![d.clone()]
    );
    assert!(list(
        &app,
        &format!("{DISPUTES}?payment_intent_ref={}", bystander.payment)
    )
    .await
    .is_empty());
    app.get(&at(DISPUTES, NO_DISPUTE, ""))
        .send()
        .await
        .expect_error(404, "not_found");

    // The scheduled refund was canceled with the dispute; its amount is
    // no longer held, nothing was refunded by it.
    let c = refund_state(&app, &refund_ref(&later)).await;
    assert_eq!(c["status"], "canceled", "{c}");
    assert_eq!(c["cancelable"], false, "{c}");
    assert!(c["executed_at"].is_null(), "{c}");
    let canceled_at = ts_of(&c["canceled_at"]);
    assert!(canceled_at >= opened.plus_seconds(-1), "{c}");
    assert_eq!(ts_of(&c["updated_at"]), canceled_at, "{c}");
    assert_eq!(c["amount"], eur("900"));
    // The refund that had already succeeded stays so.
    assert_eq!(
        refund_state(&app, &refund_ref(&now_one)).await["status"],
        "succeeded"
    );
    refunded_is(&app, &p, 100, "partially_refunded").await;
    assert_eq!(
        refund_state(&app, &refund_ref(&other)).await["status"],
        "scheduled"
    );

    // A disputed payment cannot be refunded.
    let r = create(&app, body(&p.payment, Some(100))).await;
    refused(&r);
    refused(&create(&app, body(&p.payment, None)).await);
    // The bystander still can.
    created(&app, body(&bystander.payment, Some(100))).await;
    // The canceled refund is the only one.
    let canceled = list(&app, &format!("{REFUNDS}?status=canceled")).await;
    assert_eq!(canceled.len(), 1, "{canceled:?}");
    assert_eq!(canceled[0]["refund_ref"], later["refund_ref"]);
}

// ---- lists ------------------------------------------------------------------------

async fn list_filters(app: TestApp) {
    let config = config_1999(&app).await;
    let p = paid(&app, &config, "pm_card_visa").await;
    let q = paid(&app, &config, "pm_card_refund_fails").await;
    let ok = created(&app, body(&p.payment, Some(500))).await;
    let far = created(
        &app,
        scheduled_body(&p.payment, 300, Timestamp::now().plus_seconds(DAY)),
    )
    .await;
    let bad = created(&app, body(&q.payment, Some(400))).await;
    settled(&app, &refund_ref(&ok)).await;
    settled(&app, &refund_ref(&bad)).await;

    let refs = |l: Vec<Value>| -> Vec<String> { l.iter().map(refund_ref).collect() };
    let mut all = refs(list(&app, REFUNDS).await);
    all.sort();
    let mut expected = vec![refund_ref(&ok), refund_ref(&far), refund_ref(&bad)];
    expected.sort();
    assert_eq!(all, expected);
    for item in list(&app, REFUNDS).await {
        has_fields(&item, REFUND_FIELDS);
        assert_eq!(refund_state(&app, &refund_ref(&item)).await, item);
    }

    let by = |q: String| {
        let app = &app;
        async move { refs(list(app, &format!("{REFUNDS}?{q}")).await) }
    };
    assert_eq!(by("status=succeeded".into()).await, [refund_ref(&ok)]);
    assert_eq!(by("status=failed".into()).await, [refund_ref(&bad)]);
    assert_eq!(by("status=scheduled".into()).await, [refund_ref(&far)]);
    assert!(by("status=pending".into()).await.is_empty());
    assert!(by("status=canceled".into()).await.is_empty());
    let mut of_p = by(format!("payment_intent_ref={}", p.payment)).await;
    of_p.sort();
    let mut expected = vec![refund_ref(&ok), refund_ref(&far)];
    expected.sort();
    assert_eq!(of_p, expected);
    assert_eq!(
        by(format!("payment_intent_ref={}", q.payment)).await,
        [refund_ref(&bad)]
    );
    assert_eq!(
        by(format!("payment_intent_ref={}&status=scheduled", p.payment)).await,
        [refund_ref(&far)]
    );
    assert!(
        by(format!("payment_intent_ref={}&status=succeeded", q.payment))
            .await
            .is_empty()
    );
    assert!(by(format!("payment_intent_ref={NO_PAYMENT}"))
        .await
        .is_empty());

    // Filters that do not exist, or values that cannot be.
    for query in [
        "buyer_ref=buy_N5xP3cV8bT1m",
        "colour=red",
        "status=refunded",
        "payment_intent_ref=nonsense",
    ] {
        app.get(&format!("{REFUNDS}?{query}"))
            .send()
            .await
            .expect_error(400, "validation_failed");
    }
    for query in ["colour=red", "status=open"] {
        app.get(&format!("{DISPUTES}?{query}"))
            .send()
            .await
            .expect_error(400, "validation_failed");
    }
    assert!(list(&app, DISPUTES).await.is_empty());
    app.get(&at(REFUNDS, NO_REFUND, ""))
        .send()
        .await
        .expect_error(404, "not_found");
    // A page of one, then the next.
    let r = app.get(&format!("{REFUNDS}?limit=2")).send().await;
    let first = items(&r);
    assert_eq!(first.len(), 2);
    let cursor = text(&r.data()["next_cursor"]);
    let second = items(
        &app.get(&format!("{REFUNDS}?limit=2&cursor={cursor}"))
            .send()
            .await,
    );
    assert_eq!(second.len(), 1);
    assert!(!first.contains(&second[0]));
    // Another environment sees none of them.
    let live = app.get(REFUNDS).auth(&app.live.secret).send().await;
    assert!(items(&live).is_empty());
    app.get(&at(REFUNDS, &refund_ref(&ok), ""))
        .auth(&app.live.secret)
        .send()
        .await
        .expect_error(404, "not_found");
}

// ---- replays ----------------------------------------------------------------------

async fn create_refund_replays(app: TestApp) {
    timed_work(&app);
    let config = config_1999(&app).await;
    let p = paid(&app, &config, "pm_card_visa").await;
    let key = unique_key();
    let b = body(&p.payment, Some(600));
    let send = |b: Value| {
        let key = key.clone();
        let app = &app;
        async move { app.req("POST", REFUNDS).idem(&key).json(&b).send().await }
    };
    let first = send(b.clone()).await;
    first.expect(201);
    assert!(first.header("idempotent-replayed").is_none());
    let again = send(b.clone()).await;
    assert_eq!(again.status, 201);
    assert_eq!(again.json, first.json, "the same answer");
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    let listed = list(&app, REFUNDS).await;
    assert_eq!(listed.len(), 1, "one refund: {listed:?}");
    // The same key with another body.
    send(body(&p.payment, Some(601)))
        .await
        .expect_error(422, "idempotency_mismatch");
    // After settlement the replay still answers what was answered.
    is_settled(&settled(&app, &refund_ref(first.data())).await, "succeeded");
    let late = send(b).await;
    assert_eq!(late.status, 201);
    assert_eq!(late.json, first.json, "the stored answer");
    assert_eq!(late.header("idempotent-replayed"), Some("true"));
    assert_eq!(list(&app, REFUNDS).await.len(), 1);
    refunded_is(&app, &p, 600, "partially_refunded").await;
    // Only the replayed refund was taken from the remainder.
    let rest = created(&app, body(&p.payment, None)).await;
    assert_eq!(rest["amount"], eur("1399"));

    // A refusal replays as well.
    let key2 = unique_key();
    let over = body(&p.payment, Some(5000));
    let r1 = app
        .req("POST", REFUNDS)
        .idem(&key2)
        .json(&over)
        .send()
        .await;
    refused(&r1);
    let r2 = app
        .req("POST", REFUNDS)
        .idem(&key2)
        .json(&over)
        .send()
        .await;
    assert_eq!(r2.status, 422);
    assert_eq!(r2.json, r1.json);
    assert_eq!(r2.header("idempotent-replayed"), Some("true"));
    // No key: refused.
    app.req("POST", REFUNDS)
        .json(&body(&p.payment, Some(1)))
        .send()
        .await
        .expect_error(400, "idempotency_key_required");
}

backend_tests!(
    the_refund_matrix,
    settlement_updates_payment_capture_and_order,
    concurrent_refunds_never_exceed_the_capture,
    a_scheduled_refund_executes_at_its_time,
    scheduled_work_runs_when_the_clock_says,
    failed_refunds_give_their_amount_back,
    revoke_and_retain,
    a_dispute_cancels_scheduled_refunds,
    list_filters,
    create_refund_replays,
);
