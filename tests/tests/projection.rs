//! The projection of other systems' events onto disputes, payouts and
//! participations (issue 18; contract 10.1 "Events from other systems"),
//! black-box, on every backend: each of the six event types makes its
//! resource readable through the API; an `event_ref` is applied once; an
//! older event never overwrites a newer one; data that does not fit is
//! dead-lettered naming the field; a dispute's raw reason never reaches the
//! API or a subscriber (only `reason_safe`); a dispute without a buyer in
//! its scope gets its payment's; an opened dispute cancels its payment's
//! scheduled refunds; the service's own events (`producer` billing) are
//! never projected.
//!
//! Events are published as another system would: envelopes handed to the
//! intake (`dispatcher::intake::accept`), which asks the projector the
//! harness registered.

use billing_tests::kit::api::*;
use billing_tests::kit::{
    self, create_endpoint, deliveries, eur, items, list, one_time_config, paid_payment, text,
};
use billing_tests::receiver::{Behaviour, TestReceiver};
use billing_tests::{backend_tests, TestApp};
use dispatcher::intake::Accepted;
use domain::{Prefix, Ref, Timestamp};
use serde_json::{json, Value};

const DAY: i64 = 86_400;

const PAYOUT_FIELDS: &[&str] = &[
    "payout_ref",
    "beneficiary_business_ref",
    "status",
    "amount",
    "fee",
    "net",
    "method_key",
    "destination_label",
    "destination_last4",
    "requested_at",
    "completed_at",
    "etag",
];
const PARTICIPATION_FIELDS: &[&str] = &[
    "participation_ref",
    "beneficiary_business_ref",
    "status",
    "invited_at",
    "accepted_at",
    "terms_version",
    "terms_digest",
    "etag",
];

// ---- helpers ------------------------------------------------------------------

fn at(base: &str, reference: &str) -> String {
    format!("{base}/{reference}")
}

fn new_ref(prefix: Prefix) -> String {
    Ref::generate(prefix).into_string()
}

#[track_caller]
fn ts_of(v: &Value) -> Timestamp {
    let s = text(v);
    Timestamp::parse(&s).unwrap_or_else(|| panic!("timestamp {s}"))
}

/// A timestamp `secs` seconds from now, as upstream systems write it.
fn ts_in(secs: i64) -> String {
    Timestamp::now().plus_seconds(secs).to_rfc3339()
}

/// The exact set of fields of a resource.
#[track_caller]
fn has_exactly(v: &Value, fields: &[&str]) {
    let obj = v
        .as_object()
        .unwrap_or_else(|| panic!("an object, not {v}"));
    let mut got: Vec<&str> = obj.keys().map(String::as_str).collect();
    let mut want = fields.to_vec();
    got.sort_unstable();
    want.sort_unstable();
    assert_eq!(got, want, "{v}");
}

/// Retrieves `path` (200), checks that the ETag header is the body's
/// `etag`, and returns the resource.
async fn get(app: &TestApp, path: &str) -> Value {
    let r = app.get(path).send().await;
    r.expect(200);
    let tag = r.etag();
    assert_eq!(r.data()["etag"], tag.as_str(), "{}", r.text);
    r.data().clone()
}

async fn absent(app: &TestApp, path: &str) {
    app.get(path).send().await.expect_error(404, "not_found");
}

/// An envelope (contract section 9) of `event_type` in `environment_ref`,
/// with its `event_ref`, `occurred_at` and scope given, as another system
/// publishes it (no `producer`).
fn envelope_in(
    environment_ref: &str,
    event_ref: &str,
    event_type: &str,
    occurred_at: &str,
    data: Value,
) -> Value {
    json!({
        "event_ref": event_ref,
        "public_event_type": event_type,
        "environment_ref": environment_ref,
        "occurred_at": occurred_at,
        "scope": {"product_refs": [], "buyer_ref": null, "beneficiary_business_ref": null},
        "data": data,
    })
}

/// A new sandbox event of `event_type` that occurred at `occurred_at`.
fn event_at(app: &TestApp, event_type: &str, occurred_at: &str, data: Value) -> (String, Value) {
    let event_ref = new_ref(Prefix::Event);
    let e = envelope_in(
        &app.sandbox.environment_ref,
        &event_ref,
        event_type,
        occurred_at,
        data,
    );
    (event_ref, e)
}

/// A new sandbox event of `event_type` that occurred now.
fn event(app: &TestApp, event_type: &str, data: Value) -> (String, Value) {
    event_at(app, event_type, &Timestamp::now().to_rfc3339(), data)
}

/// What the intake makes of `envelope`.
async fn accept(app: &TestApp, envelope: &Value) -> Accepted {
    dispatcher::intake::accept(&app.queue, envelope.to_string().as_bytes(), "test")
        .await
        .expect("store reachable")
}

/// Accepts `envelope`, which must be new.
async fn accept_new(app: &TestApp, envelope: &Value) {
    assert_eq!(accept(app, envelope).await, Accepted::New, "{envelope}");
}

/// Accepts `envelope`, which must be dead-lettered; returns the reason.
async fn accept_dead(app: &TestApp, envelope: &Value) -> String {
    match accept(app, envelope).await {
        Accepted::Dead(reason) => reason,
        other => panic!("expected a dead letter, got {other:?} for {envelope}"),
    }
}

fn dispute_data(dispute: &str, payment: &str, status: &str, opened_at: &str) -> Value {
    json!({
        "dispute_ref": dispute, "payment_intent_ref": payment, "amount": eur("1999"),
        "kind": "chargeback", "status": status, "reason": "Fraudulent",
        "opened_at": opened_at,
    })
}

/// The catalogue's payout example (`payout.paid` or `payout.failed`)
/// renamed to `payout`, without the derived `net` and the `etag`.
fn payout_data(event_type: &str, payout: &str) -> Value {
    let mut d = domain::webhook::catalogue::example(event_type, 1).expect("example");
    let o = d.as_object_mut().expect("object");
    o.insert("payout_ref".into(), json!(payout));
    o.remove("net");
    o.remove("etag");
    d
}

/// The catalogue's participation example renamed to `participation`.
fn participation_data(event_type: &str, participation: &str) -> Value {
    let mut d = domain::webhook::catalogue::example(event_type, 1).expect("example");
    d["participation_ref"] = json!(participation);
    d
}

// ---- paying ---------------------------------------------------------------------

/// A published config selling one EUR 19.99 product, one-time.
async fn config_1999(app: &TestApp) -> String {
    one_time_config(app, &["1999"]).await
}

/// A succeeded sandbox payment of `config` (visa) for a buyer of its own:
/// `(payment_intent_ref, buyer_ref)`.
async fn paid(app: &TestApp, config: &str) -> (String, String) {
    let p = paid_payment(app, config, "pm_card_visa").await;
    (text(&p["payment_intent_ref"]), text(&p["buyer_ref"]))
}

/// A refund of `amount` of `payment` scheduled a minute ahead.
async fn scheduled_refund(app: &TestApp, payment: &str, amount: &str) -> String {
    let r = app
        .post(
            REFUNDS,
            json!({"payment_intent_ref": payment, "reason": "requested_by_customer",
                "access_effect": "retain", "amount": eur(amount),
                "scheduled_at": ts_in(60)}),
        )
        .send()
        .await;
    r.expect(201);
    assert_eq!(r.data()["status"], "scheduled", "{}", r.text);
    text(&r.data()["refund_ref"])
}

// ---- webhooks -------------------------------------------------------------------

/// An endpoint for `url` with one subscription to `event_type` (version 1)
/// in the scope `scope_type`/`scope_ref`.
async fn endpoint_scoped(
    app: &TestApp,
    url: &str,
    event_type: &str,
    scope_type: &str,
    scope_ref: &str,
) -> String {
    let (endpoint, _) = create_endpoint(app, url).await;
    app.post(
        &format!("{ENDPOINTS}/{endpoint}/subscriptions"),
        json!({"public_event_type": event_type, "scope_type": scope_type,
            "scope_ref": scope_ref, "dto_version": 1}),
    )
    .send()
    .await
    .expect(201);
    endpoint
}

/// The payloads of an endpoint's deliveries as the body view shows them
/// (once attempted), newest first.
async fn delivered_payloads(app: &TestApp, endpoint: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for d in deliveries(app, endpoint).await {
        let body = get_body(app, &text(&d["delivery_ref"])).await;
        out.push(body);
    }
    out
}

async fn get_body(app: &TestApp, delivery: &str) -> Value {
    let r = kit::get(app, &format!("/api/v1/webhook_deliveries/{delivery}/body")).await;
    r.data()["payload"].clone()
}

/// Every object key anywhere in `v`.
fn keys(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                out.push(k.clone());
                keys(x, out);
            }
        }
        Value::Array(a) => a.iter().for_each(|x| keys(x, out)),
        _ => {}
    }
}

// ---- 1. each type is projected --------------------------------------------------

async fn each_type_makes_its_resource_readable(app: TestApp) {
    let config = config_1999(&app).await;
    let (payment, _) = paid(&app, &config).await;

    // dispute.opened
    let dispute = new_ref(Prefix::Dispute);
    let opened_at = ts_in(-3600);
    accept_new(
        &app,
        &event(
            &app,
            "dispute.opened",
            dispute_data(&dispute, &payment, "needs_response", &opened_at),
        )
        .1,
    )
    .await;
    let d = get(&app, &at(DISPUTES, &dispute)).await;
    has_exactly(&d, DISPUTE_FIELDS);
    assert_eq!(d["dispute_ref"], dispute.as_str(), "{d}");
    assert_eq!(d["payment_intent_ref"], payment.as_str(), "{d}");
    assert_eq!(d["amount"], eur("1999"), "{d}");
    assert_eq!(d["kind"], "chargeback", "{d}");
    assert_eq!(d["status"], "needs_response", "{d}");
    assert_eq!(d["reason_safe"], "Fraudulent", "{d}");
    let opened = ts_of(&d["opened_at"]);
    assert_eq!(opened, Timestamp::parse(&opened_at).unwrap(), "{d}");
    assert_eq!(
        ts_of(&d["evidence_due_at"]),
        opened.plus_seconds(7 * DAY),
        "{d}"
    );
    assert!(d["resolved_at"].is_null(), "{d}");
    let opened_tag = text(&d["etag"]);
    assert_eq!(
        list(&app, &format!("{DISPUTES}?payment_intent_ref={payment}")).await,
        vec![d.clone()]
    );

    // dispute.closed: the same dispute, won later.
    let resolved_at = ts_in(-60);
    let mut closed = dispute_data(&dispute, &payment, "won", &opened_at);
    closed["resolved_at"] = json!(resolved_at);
    accept_new(&app, &event(&app, "dispute.closed", closed).1).await;
    let d = get(&app, &at(DISPUTES, &dispute)).await;
    has_exactly(&d, DISPUTE_FIELDS);
    assert_eq!(d["status"], "won", "{d}");
    assert_eq!(
        ts_of(&d["resolved_at"]),
        Timestamp::parse(&resolved_at).unwrap(),
        "{d}"
    );
    assert_eq!(ts_of(&d["opened_at"]), opened, "{d}");
    assert_ne!(text(&d["etag"]), opened_tag, "a new version: {d}");
    assert_eq!(list(&app, &format!("{DISPUTES}?status=won")).await, vec![d]);

    // payout.paid: `net` is derived, amount − fee.
    let paid_payout = new_ref(Prefix::Payout);
    let sent = payout_data("payout.paid", &paid_payout);
    accept_new(&app, &event(&app, "payout.paid", sent.clone()).1).await;
    let p = get(&app, &at(PAYOUTS, &paid_payout)).await;
    has_exactly(&p, PAYOUT_FIELDS);
    assert_eq!(p["payout_ref"], paid_payout.as_str(), "{p}");
    assert_eq!(
        p["beneficiary_business_ref"], sent["beneficiary_business_ref"],
        "{p}"
    );
    assert_eq!(p["status"], "paid", "{p}");
    assert_eq!(p["amount"], eur("100000"), "{p}");
    assert_eq!(p["fee"], eur("250"), "{p}");
    assert_eq!(p["net"], eur("99750"), "{p}");
    for f in ["method_key", "destination_label", "destination_last4"] {
        assert_eq!(p[f], sent[f], "{f}: {p}");
    }
    assert_eq!(ts_of(&p["requested_at"]), ts_of(&sent["requested_at"]));
    assert_eq!(ts_of(&p["completed_at"]), ts_of(&sent["completed_at"]));

    // payout.failed, of other amounts: never completed.
    let failed_payout = new_ref(Prefix::Payout);
    let mut sent = payout_data("payout.failed", &failed_payout);
    sent["amount"] = eur("5000");
    sent["fee"] = eur("125");
    accept_new(&app, &event(&app, "payout.failed", sent.clone()).1).await;
    let p = get(&app, &at(PAYOUTS, &failed_payout)).await;
    has_exactly(&p, PAYOUT_FIELDS);
    assert_eq!(p["status"], "failed", "{p}");
    assert_eq!(p["amount"], eur("5000"), "{p}");
    assert_eq!(p["fee"], eur("125"), "{p}");
    assert_eq!(p["net"], eur("4875"), "{p}");
    assert!(p["completed_at"].is_null(), "{p}");
    assert_eq!(list(&app, PAYOUTS).await.len(), 2);
    assert_eq!(
        list(&app, &format!("{PAYOUTS}?status=failed")).await,
        vec![p]
    );

    // participation.invited, then accepted.
    let participation = new_ref(Prefix::Participation);
    let sent = participation_data("participation.invited", &participation);
    accept_new(
        &app,
        &event_at(&app, "participation.invited", &ts_in(-10), sent.clone()).1,
    )
    .await;
    let p = get(&app, &at(PARTICIPATIONS, &participation)).await;
    has_exactly(&p, PARTICIPATION_FIELDS);
    assert_eq!(p["participation_ref"], participation.as_str(), "{p}");
    assert_eq!(
        p["beneficiary_business_ref"], sent["beneficiary_business_ref"],
        "{p}"
    );
    assert_eq!(p["status"], "invited", "{p}");
    assert_eq!(ts_of(&p["invited_at"]), ts_of(&sent["invited_at"]));
    assert!(p["accepted_at"].is_null(), "{p}");
    assert_eq!(p["terms_version"], 1, "{p}");
    assert!(p["terms_digest"].is_null(), "{p}");
    let invited_tag = text(&p["etag"]);

    let sent = participation_data("participation.accepted", &participation);
    accept_new(&app, &event(&app, "participation.accepted", sent.clone()).1).await;
    let p = get(&app, &at(PARTICIPATIONS, &participation)).await;
    has_exactly(&p, PARTICIPATION_FIELDS);
    assert_eq!(p["status"], "accepted", "{p}");
    assert_eq!(ts_of(&p["accepted_at"]), ts_of(&sent["accepted_at"]));
    assert_eq!(p["terms_version"], 1, "{p}");
    assert_eq!(p["terms_digest"], sent["terms_digest"], "{p}");
    assert_ne!(text(&p["etag"]), invited_tag, "a new version: {p}");
    assert_eq!(list(&app, PARTICIPATIONS).await, vec![p]);

    // Nothing leaks into the other environment.
    for base in [DISPUTES, PAYOUTS, PARTICIPATIONS] {
        let r = app.get(base).auth(&app.live.secret).send().await;
        assert!(items(&r).is_empty(), "{base} in live: {}", r.text);
    }
}

// ---- 2. once per event_ref ------------------------------------------------------

async fn a_duplicate_event_is_applied_once(app: TestApp) {
    let payout = new_ref(Prefix::Payout);
    let (event_ref, first) = event(&app, "payout.paid", payout_data("payout.paid", &payout));
    accept_new(&app, &first).await;
    let before = get(&app, &at(PAYOUTS, &payout)).await;

    // The same message again, and the same event_ref with other data.
    assert_eq!(accept(&app, &first).await, Accepted::Duplicate);
    let mut other = payout_data("payout.failed", &payout);
    other["amount"] = eur("7000");
    other["fee"] = eur("0");
    let again = envelope_in(
        &app.sandbox.environment_ref,
        &event_ref,
        "payout.failed",
        &ts_in(60),
        other,
    );
    assert_eq!(accept(&app, &again).await, Accepted::Duplicate);
    let after = get(&app, &at(PAYOUTS, &payout)).await;
    assert_eq!(after, before, "applied once: same body, same etag");

    // A new event with the very same data is applied: a new version.
    accept_new(
        &app,
        &event(&app, "payout.paid", payout_data("payout.paid", &payout)).1,
    )
    .await;
    let third = get(&app, &at(PAYOUTS, &payout)).await;
    assert_ne!(third["etag"], before["etag"], "{third}");
    assert_eq!(third["status"], "paid");
}

// ---- 3. out of order ------------------------------------------------------------

async fn an_older_event_never_overwrites_a_newer_one(app: TestApp) {
    let config = config_1999(&app).await;
    let (payment, _) = paid(&app, &config).await;
    let receiver = TestReceiver::start(Behaviour::Status(204)).await;
    let endpoint = endpoint_scoped(
        &app,
        &receiver.url(),
        "dispute.opened",
        "environment",
        &app.sandbox.environment_ref,
    )
    .await;
    let refund = scheduled_refund(&app, &payment, "500").await;

    // The close, which occurred now, arrives first.
    let dispute = new_ref(Prefix::Dispute);
    let opened_at = ts_in(-3600);
    let mut closed = dispute_data(&dispute, &payment, "won", &opened_at);
    closed["resolved_at"] = json!(ts_in(-1));
    accept_new(&app, &event(&app, "dispute.closed", closed).1).await;
    let won = get(&app, &at(DISPUTES, &dispute)).await;
    assert_eq!(won["status"], "won", "{won}");

    // The opening, an hour older, arrives late: accepted, not applied.
    let (opened_ref, opened) = event_at(
        &app,
        "dispute.opened",
        &opened_at,
        dispute_data(&dispute, &payment, "needs_response", &opened_at),
    );
    accept_new(&app, &opened).await;
    let d = get(&app, &at(DISPUTES, &dispute)).await;
    assert_eq!(d, won, "the newer state stays, same version");
    // It is still delivered.
    app.dispatch_due("0s,1s").await;
    let got = receiver.received();
    assert_eq!(got.len(), 1, "delivered once");
    let body = got[0].json();
    assert_eq!(body["event_ref"], opened_ref.as_str(), "{body}");
    assert_eq!(body["public_event_type"], "dispute.opened", "{body}");
    assert_eq!(body["data"]["dispute_ref"], dispute.as_str(), "{body}");
    let payloads = delivered_payloads(&app, &endpoint).await;
    assert_eq!(payloads, vec![body], "the body view is the body delivered");
    // A stale opening of a closed dispute cancels nothing.
    let r = get(&app, &at(REFUNDS, &refund)).await;
    assert_eq!(r["status"], "scheduled", "{r}");

    // Payouts likewise: a late `payout.failed` that occurred earlier.
    let payout = new_ref(Prefix::Payout);
    accept_new(
        &app,
        &event(&app, "payout.paid", payout_data("payout.paid", &payout)).1,
    )
    .await;
    let paid_payout = get(&app, &at(PAYOUTS, &payout)).await;
    accept_new(
        &app,
        &event_at(
            &app,
            "payout.failed",
            &ts_in(-600),
            payout_data("payout.failed", &payout),
        )
        .1,
    )
    .await;
    assert_eq!(get(&app, &at(PAYOUTS, &payout)).await, paid_payout);
}

// ---- 4. data that does not fit ---------------------------------------------------

#[track_caller]
fn names_field(reason: &str, field: &str) {
    assert!(
        reason.starts_with(&format!("data.{field}:")),
        "expected a reason naming data.{field}, got {reason:?}"
    );
}

async fn malformed_data_is_dead_lettered(app: TestApp) {
    let config = config_1999(&app).await;
    let (payment, _) = paid(&app, &config).await;
    let mut dead = 0;

    // A payout without an amount, with a fee above it, with a wrong net.
    let payout = new_ref(Prefix::Payout);
    let mut d = payout_data("payout.paid", &payout);
    d.as_object_mut().unwrap().remove("amount");
    names_field(
        &accept_dead(&app, &event(&app, "payout.paid", d).1).await,
        "amount",
    );
    let mut d = payout_data("payout.paid", &payout);
    d["fee"] = eur("100001");
    names_field(
        &accept_dead(&app, &event(&app, "payout.paid", d).1).await,
        "fee",
    );
    let mut d = payout_data("payout.paid", &payout);
    d["net"] = eur("100000");
    names_field(
        &accept_dead(&app, &event(&app, "payout.paid", d).1).await,
        "net",
    );
    let mut d = payout_data("payout.failed", &payout);
    d["status"] = json!("lost");
    names_field(
        &accept_dead(&app, &event(&app, "payout.failed", d).1).await,
        "status",
    );
    dead += 4;
    absent(&app, &at(PAYOUTS, &payout)).await;

    // A dispute whose payment reference has the wrong shape.
    let dispute = new_ref(Prefix::Dispute);
    for bad in [
        json!("pay_123"),
        json!(NO_PAYMENT.replace("pay_", "ord_")),
        json!(7),
    ] {
        let mut d = dispute_data(&dispute, &payment, "needs_response", &ts_in(0));
        d["payment_intent_ref"] = bad;
        names_field(
            &accept_dead(&app, &event(&app, "dispute.opened", d).1).await,
            "payment_intent_ref",
        );
        dead += 1;
    }
    let mut d = dispute_data(&dispute, &payment, "needs_response", &ts_in(0));
    d["amount"] = json!({"currency": "EUR", "unit": "minor", "value": "-5"});
    names_field(
        &accept_dead(&app, &event(&app, "dispute.opened", d).1).await,
        "amount.value",
    );
    dead += 1;

    // A dispute of a payment that does not exist in its environment.
    let d = dispute_data(&dispute, NO_PAYMENT, "needs_response", &ts_in(0));
    assert_eq!(
        accept(&app, &event(&app, "dispute.opened", d).1).await,
        Accepted::Dead("unknown payment".to_owned())
    );
    let in_live = envelope_in(
        &app.live.environment_ref,
        &new_ref(Prefix::Event),
        "dispute.opened",
        &ts_in(0),
        dispute_data(&dispute, &payment, "needs_response", &ts_in(0)),
    );
    assert_eq!(
        accept(&app, &in_live).await,
        Accepted::Dead("unknown payment".to_owned()),
        "a sandbox payment is unknown to live"
    );
    dead += 2;
    absent(&app, &at(DISPUTES, &dispute)).await;

    // A participation whose terms digest is one digit short.
    let participation = new_ref(Prefix::Participation);
    let mut d = participation_data("participation.accepted", &participation);
    d["terms_digest"] = json!("a".repeat(63));
    names_field(
        &accept_dead(&app, &event(&app, "participation.accepted", d).1).await,
        "terms_digest",
    );
    let mut d = participation_data("participation.invited", &participation);
    d.as_object_mut()
        .unwrap()
        .remove("beneficiary_business_ref");
    names_field(
        &accept_dead(&app, &event(&app, "participation.invited", d).1).await,
        "beneficiary_business_ref",
    );
    dead += 2;
    absent(&app, &at(PARTICIPATIONS, &participation)).await;

    for base in [DISPUTES, PAYOUTS, PARTICIPATIONS] {
        assert!(list(&app, base).await.is_empty(), "{base}");
    }
    assert_eq!(
        app.store.dispatch().dead_letter_count().await.unwrap(),
        dead
    );
}

// ---- 5. markup never leaves -----------------------------------------------------

async fn markup_in_a_reason_never_reaches_anyone(app: TestApp) {
    let config = config_1999(&app).await;
    let (payment, buyer) = paid(&app, &config).await;
    let everyone = TestReceiver::start(Behaviour::Status(204)).await;
    let buyers = TestReceiver::start(Behaviour::Status(204)).await;
    endpoint_scoped(
        &app,
        &everyone.url(),
        "dispute.opened",
        "environment",
        &app.sandbox.environment_ref,
    )
    .await;
    // Matched only once the dispute's scope carries the payment's buyer.
    endpoint_scoped(&app, &buyers.url(), "dispute.opened", "buyer", &buyer).await;

    let raw = "<script>alert(1)</script>Fraud <b>bad</b>";
    let dispute = new_ref(Prefix::Dispute);
    let mut d = dispute_data(&dispute, &payment, "needs_response", &ts_in(0));
    d["reason"] = json!(raw);
    // A `reason_safe` sent upstream is not trusted either.
    d["reason_safe"] = json!("<img src=x onerror=alert(2)>");
    let (event_ref, e) = event(&app, "dispute.opened", d);
    accept_new(&app, &e).await;

    let shown = get(&app, &at(DISPUTES, &dispute)).await;
    let safe = text(&shown["reason_safe"]);
    assert!(!safe.contains('<') && !safe.contains('>'), "{safe:?}");
    assert!(safe.contains("Fraud") && safe.contains("bad"), "{safe:?}");
    assert!(!safe.contains("img"), "{safe:?}");
    assert_eq!(safe, domain::outside::reason_safe(raw));
    assert!(shown.get("reason").is_none(), "{shown}");

    app.dispatch_due("0s,1s").await;
    for r in [&everyone, &buyers] {
        let got = r.received();
        assert_eq!(got.len(), 1, "delivered once");
        let raw_body = String::from_utf8_lossy(&got[0].body).into_owned();
        assert!(!raw_body.contains("<script"), "{raw_body}");
        assert!(!raw_body.contains("<img"), "{raw_body}");
        let body = got[0].json();
        assert_eq!(body["event_ref"], event_ref.as_str(), "{body}");
        let mut all = Vec::new();
        keys(&body, &mut all);
        assert!(
            !all.iter()
                .any(|k| k.contains("reason") && k != "reason_safe"),
            "no reason but reason_safe: {body}"
        );
        assert_eq!(body["data"]["reason_safe"], safe.as_str(), "{body}");
        assert_eq!(body["data"]["dispute_ref"], dispute.as_str(), "{body}");
        assert_eq!(body["data"]["status"], "needs_response", "{body}");
    }
}

// ---- 6. an opened dispute cancels scheduled refunds ------------------------------

async fn an_opened_dispute_cancels_scheduled_refunds(app: TestApp) {
    tokio::spawn(commerce::jobs::run(
        app.store.clone(),
        commerce::jobs::Rules::default(),
        tokio_util::sync::CancellationToken::new(),
    ));
    let stop = tokio_util::sync::CancellationToken::new();
    let relay = tokio::spawn(dispatcher::outbox::relay(
        app.store.clone(),
        dispatcher::outbox::Target::Queue(app.queue.clone()),
        stop.clone(),
    ));
    let receiver = TestReceiver::start(Behaviour::Status(204)).await;
    let config = config_1999(&app).await;
    let (payment, _) = paid(&app, &config).await;
    let (bystander, _) = paid(&app, &config).await;
    endpoint_scoped(
        &app,
        &receiver.url(),
        "refund.canceled",
        "environment",
        &app.sandbox.environment_ref,
    )
    .await;
    let dispatcher = app.start_dispatcher(app.dispatch_settings("0s,1s"));
    let refund = scheduled_refund(&app, &payment, "900").await;
    let other = scheduled_refund(&app, &bystander, "900").await;

    let dispute = new_ref(Prefix::Dispute);
    let before = Timestamp::now().plus_seconds(-1);
    accept_new(
        &app,
        &event(
            &app,
            "dispute.opened",
            dispute_data(&dispute, &payment, "needs_response", &ts_in(0)),
        )
        .1,
    )
    .await;

    let c = get(&app, &at(REFUNDS, &refund)).await;
    assert_eq!(c["status"], "canceled", "{c}");
    assert_eq!(c["cancelable"], false, "{c}");
    assert!(c["executed_at"].is_null(), "{c}");
    assert!(ts_of(&c["canceled_at"]) >= before, "{c}");
    let o = get(&app, &at(REFUNDS, &other)).await;
    assert_eq!(o["status"], "scheduled", "another payment's: {o}");

    // A disputed payment cannot be refunded.
    app.post(
        REFUNDS,
        json!({"payment_intent_ref": payment, "reason": "requested_by_customer",
            "access_effect": "retain", "amount": eur("100")}),
    )
    .send()
    .await
    .expect_error(422, "semantic_error");

    // Subscribers hear of the cancellation.
    app.eventually(20, || async { (receiver.count() >= 1).then_some(()) })
        .await;
    // Everything emitted is relayed and everything due attempted before
    // the count.
    stop.cancel();
    let _ = relay.await;
    dispatcher.shutdown().await;
    assert!(app.store.outbox_batch(10).await.unwrap().is_empty());
    app.dispatch_due("0s").await;
    let got: Vec<Value> = receiver.received().iter().map(|r| r.json()).collect();
    assert_eq!(got.len(), 1, "one refund.canceled: {got:?}");
    assert_eq!(got[0]["public_event_type"], "refund.canceled");
    assert_eq!(
        got[0]["data"]["refund_ref"],
        refund.as_str(),
        "{:?}",
        got[0]
    );
    assert_eq!(got[0]["data"]["status"], "canceled", "{:?}", got[0]);
}

// ---- 7. the service's own events ------------------------------------------------

async fn billings_own_events_are_never_projected(app: TestApp) {
    let payout = new_ref(Prefix::Payout);
    let (_, mut e) = event(&app, "payout.paid", payout_data("payout.paid", &payout));
    e["producer"] = json!("billing");
    accept_new(&app, &e).await;
    absent(&app, &at(PAYOUTS, &payout)).await;
    assert!(list(&app, PAYOUTS).await.is_empty());

    // Even data the projection would refuse passes as it is.
    let mut d = payout_data("payout.paid", &payout);
    d.as_object_mut().unwrap().remove("amount");
    let (_, mut e) = event(&app, "payout.paid", d);
    e["producer"] = json!("billing");
    accept_new(&app, &e).await;
    assert_eq!(app.store.dispatch().dead_letter_count().await.unwrap(), 0);

    // Another producer is projected.
    let (_, mut e) = event(&app, "payout.paid", payout_data("payout.paid", &payout));
    e["producer"] = json!("payout-engine");
    accept_new(&app, &e).await;
    assert_eq!(get(&app, &at(PAYOUTS, &payout)).await["status"], "paid");
}

/// A reference another environment already holds is refused, not applied
/// nor delivered there; a dispute that moves to another payment is listed
/// and checked under the new one.
async fn references_stay_in_their_environment_and_disputes_follow_their_payment(app: TestApp) {
    let payout = new_ref(Prefix::Payout);
    let (_, sandbox) = event(&app, "payout.paid", payout_data("payout.paid", &payout));
    accept_new(&app, &sandbox).await;
    let live = envelope_in(
        &app.live.environment_ref,
        &new_ref(Prefix::Event),
        "payout.paid",
        &ts_in(0),
        payout_data("payout.paid", &payout),
    );
    let reason = accept_dead(&app, &live).await;
    assert!(reason.contains("another environment"), "{reason}");

    let config = config_1999(&app).await;
    let (first, _) = paid(&app, &config).await;
    let (second, _) = paid(&app, &config).await;
    let dispute = new_ref(Prefix::Dispute);
    let opened = ts_in(-60);
    let (_, e) = event(
        &app,
        "dispute.opened",
        dispute_data(&dispute, &first, "needs_response", &opened),
    );
    accept_new(&app, &e).await;
    let (_, e) = event(
        &app,
        "dispute.opened",
        dispute_data(&dispute, &second, "under_review", &opened),
    );
    accept_new(&app, &e).await;
    let listed = |payment: &str| format!("{DISPUTES}?payment_intent_ref={payment}");
    assert!(list(&app, &listed(&first)).await.is_empty());
    assert_eq!(list(&app, &listed(&second)).await.len(), 1);
}

backend_tests!(
    each_type_makes_its_resource_readable,
    a_duplicate_event_is_applied_once,
    an_older_event_never_overwrites_a_newer_one,
    malformed_data_is_dead_lettered,
    markup_in_a_reason_never_reaches_anyone,
    an_opened_dispute_cancels_scheduled_refunds,
    billings_own_events_are_never_projected,
    references_stay_in_their_environment_and_disputes_follow_their_payment,
);
