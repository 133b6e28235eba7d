//! Checkout sessions, pay and the records a payment makes (issue 17;
//! contract sections 8, 10 and 10.1; the wire shapes and decisions of
//! `docs/checkout.md`), black-box, on every backend: sessions and their
//! price snapshot, the sandbox cards, stored payment methods, subscriptions,
//! authentication, refused pays, the live environment's missing processor,
//! concurrent pays, invoice numbering, idempotent replays, lists and their
//! filters, isolation between environments and the buyer scope of webhook
//! subscriptions.

use billing_tests::kit::{
    at, etag_matches, eur, has_fields, invalid, is_ref, is_ts, items, refs, refused, text, ts_of,
};
use billing_tests::{backend_tests, unique_key, Resp, TestApp};
use domain::Timestamp;
use serde_json::{json, Value};
use std::collections::HashSet;

const PRODUCTS: &str = "/api/v1/products";
const PRICES: &str = "/api/v1/prices";
const OFFERS: &str = "/api/v1/offers";
const PLAN: &str = "/api/v1/promotions/plan";
const APPLY: &str = "/api/v1/promotions/apply";
const CONFIGS: &str = "/api/v1/checkout-configs";
const SESSIONS: &str = "/api/v1/checkout-sessions";
const PAYMENTS: &str = "/api/v1/payments";
const CAPTURES: &str = "/api/v1/captures";
const ORDERS: &str = "/api/v1/orders";
const INVOICES: &str = "/api/v1/invoices";
const ENTITLEMENTS: &str = "/api/v1/entitlements";
const BUYERS: &str = "/api/v1/buyers";
const METHODS: &str = "/api/v1/payment_methods";
const SUBSCRIPTIONS: &str = "/api/v1/subscriptions";
const CHANGES: &str = "/api/v1/subscription-changes";
const JOURNEYS: &str = "/api/v1/journeys";
const ENDPOINTS: &str = "/api/v1/webhook_endpoints";
const OK_URL: &str = "https://example.com/ok";
const NAME: &str = "Ada Lovelace";

/// Well-formed references that name nothing.
const NO_CONFIG: &str = "cco_N5xP3cV8bT1m";
const NO_SESSION: &str = "cs_N5xP3cV8bT1m";
const NO_METHOD: &str = "spm_N5xP3cV8bT1m";
const NO_BUYER: &str = "buy_N5xP3cV8bT1m";

const SESSION_FIELDS: &[&str] = &[
    "checkout_session_ref",
    "config_ref",
    "config_version",
    "status",
    "mode",
    "buyer",
    "buyer_ref",
    "journey_ref",
    "line_items",
    "amount_total",
    "custom_fields",
    "payment_intent_ref",
    "subscription_ref",
    "success_url",
    "cancel_url",
    "expires_at",
    "completed_at",
    "created_at",
    "etag",
];
const LINE_ITEM_FIELDS: &[&str] = &[
    "offer_ref",
    "price_ref",
    "product_ref",
    "quantity",
    "unit_amount",
    "amount",
];
const PAY_FIELDS: &[&str] = &[
    "result",
    "payment",
    "subscription",
    "next_action",
    "checkout_session",
];
const PAYMENT_FIELDS: &[&str] = &[
    "payment_intent_ref",
    "checkout_session_ref",
    "buyer_ref",
    "buyer",
    "amount",
    "amount_refunded",
    "status",
    "failure_code",
    "payment_method",
    "stored_payment_method_ref",
    "product_refs",
    "next_action",
    "captured_at",
    "created_at",
    "etag",
];
const CAPTURE_FIELDS: &[&str] = &[
    "capture_ref",
    "payment_intent_ref",
    "amount",
    "amount_refunded",
    "captured_at",
    "created_at",
    "etag",
];
const ORDER_FIELDS: &[&str] = &[
    "order_ref",
    "checkout_session_ref",
    "buyer_ref",
    "payment_intent_ref",
    "line_items",
    "amount_total",
    "status",
    "created_at",
    "etag",
];
const INVOICE_FIELDS: &[&str] = &[
    "invoice_ref",
    "number",
    "order_ref",
    "buyer_ref",
    "subscription_ref",
    "amount_total",
    "status",
    "issued_at",
    "paid_at",
    "created_at",
    "etag",
];
const ENTITLEMENT_FIELDS: &[&str] = &[
    "entitlement_ref",
    "buyer_ref",
    "product_ref",
    "order_ref",
    "status",
    "granted_at",
    "revoked_at",
    "created_at",
    "etag",
];
const BUYER_FIELDS: &[&str] = &["buyer_ref", "email", "name", "created_at", "etag"];
const METHOD_FIELDS: &[&str] = &[
    "stored_payment_method_ref",
    "buyer_ref",
    "brand",
    "last4",
    "exp_month",
    "exp_year",
    "status",
    "created_at",
    "etag",
];
const SUBSCRIPTION_FIELDS: &[&str] = &[
    "subscription_ref",
    "buyer_ref",
    "price_ref",
    "product_ref",
    "status",
    "current_period_start",
    "current_period_end",
    "stored_payment_method_ref",
    "started_at",
    "canceled_at",
    "created_at",
    "etag",
];
const CHANGE_FIELDS: &[&str] = &[
    "subscription_change_ref",
    "subscription_ref",
    "kind",
    "from_price_ref",
    "to_price_ref",
    "effective_at",
    "created_at",
    "etag",
];
const JOURNEY_FIELDS: &[&str] = &[
    "journey_ref",
    "checkout_session_ref",
    "buyer_ref",
    "status",
    "steps",
    "created_at",
    "updated_at",
    "etag",
];

/// A kind of record: its list path, its own reference field, the prefix of
/// its references and its fields.
struct Kind {
    path: &'static str,
    ref_field: &'static str,
    prefix: &'static str,
    fields: &'static [&'static str],
}

const SESSION: Kind = Kind {
    path: SESSIONS,
    ref_field: "checkout_session_ref",
    prefix: "cs_",
    fields: SESSION_FIELDS,
};
const PAYMENT: Kind = Kind {
    path: PAYMENTS,
    ref_field: "payment_intent_ref",
    prefix: "pay_",
    fields: PAYMENT_FIELDS,
};
const CAPTURE: Kind = Kind {
    path: CAPTURES,
    ref_field: "capture_ref",
    prefix: "cap_",
    fields: CAPTURE_FIELDS,
};
const ORDER: Kind = Kind {
    path: ORDERS,
    ref_field: "order_ref",
    prefix: "ord_",
    fields: ORDER_FIELDS,
};
const INVOICE: Kind = Kind {
    path: INVOICES,
    ref_field: "invoice_ref",
    prefix: "inv_",
    fields: INVOICE_FIELDS,
};
const ENTITLEMENT: Kind = Kind {
    path: ENTITLEMENTS,
    ref_field: "entitlement_ref",
    prefix: "ent_",
    fields: ENTITLEMENT_FIELDS,
};
const BUYER: Kind = Kind {
    path: BUYERS,
    ref_field: "buyer_ref",
    prefix: "buy_",
    fields: BUYER_FIELDS,
};
const METHOD: Kind = Kind {
    path: METHODS,
    ref_field: "stored_payment_method_ref",
    prefix: "spm_",
    fields: METHOD_FIELDS,
};
const SUBSCRIPTION: Kind = Kind {
    path: SUBSCRIPTIONS,
    ref_field: "subscription_ref",
    prefix: "sub_",
    fields: SUBSCRIPTION_FIELDS,
};
const CHANGE: Kind = Kind {
    path: CHANGES,
    ref_field: "subscription_change_ref",
    prefix: "sch_",
    fields: CHANGE_FIELDS,
};
const JOURNEY: Kind = Kind {
    path: JOURNEYS,
    ref_field: "journey_ref",
    prefix: "jrn_",
    fields: JOURNEY_FIELDS,
};

/// The records a payment writes (sessions and journeys exist before it).
const RECORDS: &[&Kind] = &[
    &PAYMENT,
    &CAPTURE,
    &ORDER,
    &INVOICE,
    &ENTITLEMENT,
    &BUYER,
    &METHOD,
    &SUBSCRIPTION,
    &CHANGE,
];

// ---- helpers ------------------------------------------------------------------

fn set(list: &[String]) -> HashSet<String> {
    list.iter().cloned().collect()
}

/// `path` asking for the largest page.
fn whole(path: &str) -> String {
    let sep = if path.contains('?') { '&' } else { '?' };
    format!("{path}{sep}limit=100")
}

async fn get_as(app: &TestApp, secret: &str, path: &str) -> Resp {
    let r = app.get(path).auth(secret).send().await;
    r.expect(200);
    r
}

async fn get(app: &TestApp, path: &str) -> Resp {
    get_as(app, &app.sandbox.secret, path).await
}

/// Every item of a list (one page of the largest size).
async fn list_as(app: &TestApp, secret: &str, path: &str) -> Vec<Value> {
    items(&app.get(&whole(path)).auth(secret).send().await)
}

async fn list(app: &TestApp, path: &str) -> Vec<Value> {
    list_as(app, &app.sandbox.secret, path).await
}

/// Every item of `kind`'s list under `query` (`""` for none), each checked
/// for its fields and found equal to its retrieve, whose ETag header is its
/// `etag`.
async fn records(app: &TestApp, kind: &Kind, query: &str) -> Vec<Value> {
    let path = if query.is_empty() {
        kind.path.to_owned()
    } else {
        format!("{}?{query}", kind.path)
    };
    let listed = list(app, &path).await;
    for item in &listed {
        has_fields(item, kind.fields);
        is_ref(&item[kind.ref_field], kind.prefix);
        let r = get(app, &at(kind.path, &text(&item[kind.ref_field]), "")).await;
        etag_matches(&r);
        assert_eq!(r.data(), item, "the retrieve equals the listed item");
    }
    listed
}

/// The one item of `kind`'s list under `query`.
async fn the_one(app: &TestApp, kind: &Kind, query: &str) -> Value {
    let listed = records(app, kind, query).await;
    assert_eq!(
        listed.len(),
        1,
        "one item in {} ? {query}: {listed:?}",
        kind.path
    );
    listed[0].clone()
}

/// The retrieve of `reference` in `kind`, with its ETag checked.
async fn retrieve(app: &TestApp, kind: &Kind, reference: &str) -> Value {
    let r = get(app, &at(kind.path, reference, "")).await;
    etag_matches(&r);
    r.data().clone()
}

/// How many records of each kind a payment writes exist, per list path.
async fn census_as(app: &TestApp, secret: &str) -> Vec<(&'static str, usize)> {
    let mut counts = Vec::new();
    for kind in RECORDS {
        counts.push((kind.path, list_as(app, secret, kind.path).await.len()));
    }
    counts
}

async fn census(app: &TestApp) -> Vec<(&'static str, usize)> {
    census_as(app, &app.sandbox.secret).await
}

/// Asserts that no record a payment writes exists.
async fn no_records(app: &TestApp) {
    for (path, n) in census(app).await {
        assert_eq!(n, 0, "nothing in {path}");
    }
}

/// `<year>-<6 digits>`, as `(year, sequence)`.
#[track_caller]
fn invoice_number(v: &Value) -> (u32, u32) {
    let s = text(v);
    let ok = s.len() == 11
        && s.as_bytes()[4] == b'-'
        && s[..4].bytes().all(|b| b.is_ascii_digit())
        && s[5..].bytes().all(|b| b.is_ascii_digit());
    assert!(ok, "an invoice number matches ^\\d{{4}}-\\d{{6}}$: {s}");
    (
        s[..4].parse().expect("year"),
        s[5..].parse().expect("sequence"),
    )
}

fn this_year() -> u32 {
    Timestamp::now().to_rfc3339()[..4]
        .parse()
        .expect("the year")
}

fn days_in_month(year: i32, month: u32) -> u32 {
    match month {
        4 | 6 | 9 | 11 => 30,
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        _ => 31,
    }
}

/// One month after the RFC 3339 timestamp `start`: the same day and time of
/// the next month, or that month's last day.
fn one_month_after(start: &str) -> Timestamp {
    let year: i32 = start[..4].parse().expect("year");
    let month: u32 = start[5..7].parse().expect("month");
    let day: u32 = start[8..10].parse().expect("day");
    let (year, month) = if month == 12 {
        (year + 1, 1)
    } else {
        (year, month + 1)
    };
    let day = day.min(days_in_month(year, month));
    let rest = &start[10..];
    Timestamp::parse(&format!("{year:04}-{month:02}-{day:02}{rest}")).expect("timestamp")
}

// ---- the catalogue ---------------------------------------------------------------

/// A published product with a published price, and its offer.
struct Sellable {
    product: String,
    price: String,
    offer: String,
}

async fn sellable_as(
    app: &TestApp,
    secret: &str,
    amount: Value,
    interval: Option<&str>,
) -> Sellable {
    let r = app
        .post(PRODUCTS, json!({"name": "Product"}))
        .auth(secret)
        .send()
        .await;
    r.expect(201);
    let product = text(&r.data()["product_ref"]);
    app.post(&at(PRODUCTS, &product, "/publish"), json!({}))
        .auth(secret)
        .send()
        .await
        .expect(200);
    let body = match interval {
        Some(i) => {
            json!({"product_ref": product, "amount": amount, "type": "recurring", "interval": i})
        }
        None => json!({"product_ref": product, "amount": amount, "type": "one_time"}),
    };
    let r = app.post(PRICES, body).auth(secret).send().await;
    r.expect(201);
    let price = text(&r.data()["price_ref"]);
    app.post(&at(PRICES, &price, "/publish"), json!({}))
        .auth(secret)
        .send()
        .await
        .expect(200);
    let offers = list_as(app, secret, &format!("{OFFERS}?product_ref={product}")).await;
    assert_eq!(offers.len(), 1, "one offer per product: {offers:?}");
    Sellable {
        product,
        price,
        offer: text(&offers[0]["offer_ref"]),
    }
}

async fn sellable(app: &TestApp, amount: Value, interval: Option<&str>) -> Sellable {
    sellable_as(app, &app.sandbox.secret, amount, interval).await
}

fn line(offer: &str, quantity: u32) -> Value {
    json!({"offer_ref": offer, "quantity": quantity})
}

fn config_body(line_items: Vec<Value>) -> Value {
    json!({"name": "Checkout", "line_items": line_items, "success_url": OK_URL})
}

/// Creates a config from `body` (draft); returns its reference.
async fn draft_config_as(app: &TestApp, secret: &str, body: Value) -> String {
    let r = app.post(CONFIGS, body).auth(secret).send().await;
    r.expect(201);
    text(&r.data()["config_ref"])
}

/// Creates and publishes a config from `body`; returns its reference.
async fn config_as(app: &TestApp, secret: &str, body: Value) -> String {
    let config = draft_config_as(app, secret, body).await;
    app.post(&at(CONFIGS, &config, "/publish"), json!({}))
        .auth(secret)
        .send()
        .await
        .expect(200);
    config
}

async fn published_config(app: &TestApp, line_items: Vec<Value>) -> String {
    config_as(app, &app.sandbox.secret, config_body(line_items)).await
}

/// A published config of one one-time item (EUR 19.99 × 1).
async fn one_time_config(app: &TestApp) -> (String, Sellable) {
    let s = sellable(app, eur("1999"), None).await;
    let config = published_config(app, vec![line(&s.offer, 1)]).await;
    (config, s)
}

/// A published config of one monthly item (EUR 9.99 × 1).
async fn monthly_config(app: &TestApp) -> (String, Sellable) {
    let s = sellable(app, eur("999"), Some("month")).await;
    let config = published_config(app, vec![line(&s.offer, 1)]).await;
    (config, s)
}

// ---- sessions and pay -----------------------------------------------------------

fn session_body(config: &str, email: &str) -> Value {
    json!({"config_ref": config, "buyer": {"email": email, "name": NAME}})
}

async fn create_session_as(app: &TestApp, secret: &str, body: Value) -> Resp {
    app.post(SESSIONS, body).auth(secret).send().await
}

async fn create_session(app: &TestApp, body: Value) -> Resp {
    create_session_as(app, &app.sandbox.secret, body).await
}

/// A new open session of `config` for `email`; returns its reference.
async fn open_session(app: &TestApp, config: &str, email: &str) -> String {
    let r = create_session(app, session_body(config, email)).await;
    r.expect(201);
    assert_eq!(r.data()["status"], "open", "{}", r.text);
    text(&r.data()["checkout_session_ref"])
}

fn pay_path(session: &str) -> String {
    at(SESSIONS, session, "/pay")
}

fn card(payment_method: &str) -> Value {
    json!({ "payment_method": payment_method })
}

/// Pays `session` with `body` and a fresh idempotency key.
async fn pay(app: &TestApp, session: &str, body: Value) -> Resp {
    app.post(&pay_path(session), body).send().await
}

/// Pays `session` with `body` under the idempotency key `key`.
async fn pay_keyed(app: &TestApp, session: &str, key: &str, body: &Value) -> Resp {
    app.req("POST", &pay_path(session))
        .idem(key)
        .json(body)
        .send()
        .await
}

/// Pays `session` with `body`; asserts a 200 whose payment `status` is
/// `status`; returns the answer's data.
#[track_caller]
fn answered(r: &Resp, status: &str) -> Value {
    r.expect(200);
    let d = r.data().clone();
    has_fields(&d, PAY_FIELDS);
    has_fields(&d["payment"], PAYMENT_FIELDS);
    has_fields(&d["checkout_session"], SESSION_FIELDS);
    assert_eq!(d["payment"]["status"], status, "{}", r.text);
    d
}

async fn pay_ok(app: &TestApp, session: &str, body: Value) -> Value {
    answered(&pay(app, session, body).await, "succeeded")
}

/// Pays a new session of `config` for `email` with `pm_card_visa`; returns
/// the answer's data.
async fn paid_session(app: &TestApp, config: &str, email: &str) -> Value {
    let session = open_session(app, config, email).await;
    pay_ok(app, &session, card("pm_card_visa")).await
}

/// The session's state, retrieved.
async fn session_state(app: &TestApp, session: &str) -> Value {
    retrieve(app, &SESSION, session).await
}

/// Checks a payment's card: `brand` and `last4`, with an expiry.
#[track_caller]
fn card_is(payment: &Value, brand: &str, last4: &str) {
    let m = &payment["payment_method"];
    has_fields(m, &["type", "brand", "last4", "exp_month", "exp_year"]);
    assert_eq!(m["type"], "card", "{payment}");
    assert_eq!(m["brand"], brand, "{payment}");
    assert_eq!(m["last4"], last4, "{payment}");
    expiry(m);
}

/// `exp_month` 1–12 and an `exp_year` not in the past.
#[track_caller]
fn expiry(v: &Value) {
    let month = v["exp_month"].as_u64().expect("exp_month");
    assert!((1..=12).contains(&month), "{v}");
    let year = v["exp_year"].as_u64().expect("exp_year");
    assert!(year >= u64::from(this_year()), "{v}");
}

/// The kinds of a journey's steps, in order.
fn step_kinds(journey: &Value) -> Vec<String> {
    journey["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .map(|s| text(&s["kind"]))
        .collect()
}

/// The journey's steps of `kind`.
fn steps_of(journey: &Value, kind: &str) -> Vec<Value> {
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
async fn expire(app: &TestApp, session: &str) {
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

// ---- one-time payments ----------------------------------------------------------

async fn a_one_time_payment_writes_each_record_once(app: TestApp) {
    let a = sellable(&app, eur("1999"), None).await;
    let b = sellable(&app, eur("500"), None).await;
    let config = published_config(&app, vec![line(&a.offer, 2), line(&b.offer, 1)]).await;

    let before = Timestamp::now().plus_seconds(-2);
    let r = create_session(&app, session_body(&config, "ada@example.com")).await;
    r.expect(201);
    let tag = etag_matches(&r);
    let s = r.data().clone();
    has_fields(&s, SESSION_FIELDS);
    is_ref(&s["checkout_session_ref"], "cs_");
    let session = text(&s["checkout_session_ref"]);
    assert_eq!(s["config_ref"], config.as_str());
    assert_eq!(s["config_version"], 1);
    assert_eq!(s["status"], "open");
    assert_eq!(s["mode"], "payment");
    assert_eq!(
        s["buyer"],
        json!({"email": "ada@example.com", "name": NAME})
    );
    assert!(s["buyer_ref"].is_null(), "no buyer before a payment: {s}");
    is_ref(&s["journey_ref"], "jrn_");
    assert!(s["payment_intent_ref"].is_null());
    assert!(s["subscription_ref"].is_null());
    assert_eq!(s["success_url"], OK_URL);
    assert!(s["cancel_url"].is_null());
    assert!(s["completed_at"].is_null());
    let created = ts_of(&s["created_at"]);
    assert!(created >= before && created <= Timestamp::now().plus_seconds(2));
    assert_eq!(
        ts_of(&s["expires_at"]),
        created.plus_seconds(24 * 3600),
        "expires_at is created_at + 24 h"
    );
    let lines = s["line_items"].as_array().expect("line_items").clone();
    assert_eq!(lines.len(), 2, "{s}");
    for l in &lines {
        has_fields(l, LINE_ITEM_FIELDS);
    }
    let line_of = |offer: &str| {
        lines
            .iter()
            .find(|l| l["offer_ref"] == offer)
            .unwrap_or_else(|| panic!("a line item of {offer}: {s}"))
            .clone()
    };
    let la = line_of(&a.offer);
    assert_eq!(la["price_ref"], a.price.as_str());
    assert_eq!(la["product_ref"], a.product.as_str());
    assert_eq!(la["quantity"], 2);
    assert_eq!(la["unit_amount"], eur("1999"));
    assert_eq!(la["amount"], eur("3998"));
    let lb = line_of(&b.offer);
    assert_eq!(lb["price_ref"], b.price.as_str());
    assert_eq!(lb["product_ref"], b.product.as_str());
    assert_eq!(lb["quantity"], 1);
    assert_eq!(lb["unit_amount"], eur("500"));
    assert_eq!(lb["amount"], eur("500"));
    assert_eq!(s["amount_total"], eur("4498"));

    let got = get(&app, &at(SESSIONS, &session, "")).await;
    assert_eq!(etag_matches(&got), tag);
    assert_eq!(*got.data(), s);
    // Creating a session starts its journey.
    let journey = text(&s["journey_ref"]);
    let j = retrieve(&app, &JOURNEY, &journey).await;
    has_fields(&j, JOURNEY_FIELDS);
    assert_eq!(j["checkout_session_ref"], session.as_str());
    assert!(j["buyer_ref"].is_null());
    assert_eq!(j["status"], "open");
    assert_eq!(step_kinds(&j), ["session_created"]);
    is_ts(&j["steps"][0]["at"]);
    no_records(&app).await;

    let paid_from = Timestamp::now().plus_seconds(-2);
    let d = pay_ok(&app, &session, card("pm_card_visa")).await;
    assert_eq!(d["result"], "retrieve_payment_response");
    assert!(d["subscription"].is_null(), "one-time items: {d}");
    assert!(d["next_action"].is_null(), "{d}");

    let p = d["payment"].clone();
    is_ref(&p["payment_intent_ref"], "pay_");
    let payment = text(&p["payment_intent_ref"]);
    assert_eq!(p["checkout_session_ref"], session.as_str());
    is_ref(&p["buyer_ref"], "buy_");
    let buyer = text(&p["buyer_ref"]);
    assert_eq!(
        p["buyer"],
        json!({"email": "ada@example.com", "name": NAME})
    );
    assert_eq!(p["amount"], eur("4498"));
    assert_eq!(p["amount_refunded"], eur("0"));
    assert!(p["failure_code"].is_null(), "{p}");
    card_is(&p, "visa", "4242");
    assert!(p["stored_payment_method_ref"].is_null(), "not stored: {p}");
    let products: Vec<String> = p["product_refs"]
        .as_array()
        .expect("product_refs")
        .iter()
        .map(text)
        .collect();
    assert_eq!(products.len(), 2, "{p}");
    assert_eq!(set(&products), set(&[a.product.clone(), b.product.clone()]));
    assert!(p["next_action"].is_null());
    assert!(ts_of(&p["captured_at"]) >= paid_from);
    is_ts(&p["created_at"]);

    let cs = d["checkout_session"].clone();
    assert_eq!(cs["checkout_session_ref"], session.as_str());
    assert_eq!(cs["status"], "complete");
    assert_eq!(cs["buyer_ref"], buyer.as_str());
    assert_eq!(cs["payment_intent_ref"], payment.as_str());
    assert!(ts_of(&cs["completed_at"]) >= paid_from);
    assert_eq!(cs["amount_total"], eur("4498"));
    assert_eq!(cs["line_items"], s["line_items"]);
    assert_eq!(cs["journey_ref"], s["journey_ref"]);
    assert_ne!(cs["etag"], tag.as_str(), "the session changed");
    // The answer's resources are their retrieves.
    assert_eq!(session_state(&app, &session).await, cs);
    assert_eq!(retrieve(&app, &PAYMENT, &payment).await, p);

    // Exactly one record of each kind, each retrieve equal to its list item.
    assert_eq!(the_one(&app, &PAYMENT, "").await, p);
    let c = the_one(&app, &CAPTURE, "").await;
    assert_eq!(c["payment_intent_ref"], payment.as_str());
    assert_eq!(c["amount"], eur("4498"));
    assert_eq!(c["amount_refunded"], eur("0"));
    is_ts(&c["captured_at"]);
    let o = the_one(&app, &ORDER, "").await;
    let order = text(&o["order_ref"]);
    assert_eq!(o["checkout_session_ref"], session.as_str());
    assert_eq!(o["buyer_ref"], buyer.as_str());
    assert_eq!(o["payment_intent_ref"], payment.as_str());
    assert_eq!(o["amount_total"], eur("4498"));
    assert_eq!(o["status"], "paid");
    assert_eq!(o["line_items"].as_array().map(Vec::len), Some(2), "{o}");
    let i = the_one(&app, &INVOICE, "").await;
    let (year, _) = invoice_number(&i["number"]);
    assert_eq!(year, this_year());
    assert_eq!(i["order_ref"], order.as_str());
    assert_eq!(i["buyer_ref"], buyer.as_str());
    assert!(i["subscription_ref"].is_null());
    assert_eq!(i["amount_total"], eur("4498"));
    assert_eq!(i["status"], "paid");
    is_ts(&i["issued_at"]);
    is_ts(&i["paid_at"]);
    let ents = records(&app, &ENTITLEMENT, "").await;
    assert_eq!(ents.len(), 2, "one entitlement per product: {ents:?}");
    assert_eq!(
        set(&refs(&ents, "product_ref")),
        set(&[a.product.clone(), b.product.clone()])
    );
    for e in &ents {
        assert_eq!(e["buyer_ref"], buyer.as_str());
        assert_eq!(e["order_ref"], order.as_str());
        assert_eq!(e["status"], "active");
        is_ts(&e["granted_at"]);
        assert!(e["revoked_at"].is_null());
    }
    let by = the_one(&app, &BUYER, "").await;
    assert_eq!(by["buyer_ref"], buyer.as_str());
    assert_eq!(by["email"], "ada@example.com");
    assert_eq!(by["name"], NAME);
    is_ts(&by["created_at"]);
    let j = the_one(&app, &JOURNEY, "").await;
    assert_eq!(j["journey_ref"], journey.as_str());
    assert_eq!(j["buyer_ref"], buyer.as_str());
    assert_eq!(j["status"], "converted");
    let kinds = step_kinds(&j);
    assert_eq!(kinds[0], "session_created", "{j}");
    let succeeded = steps_of(&j, "payment_succeeded");
    assert_eq!(succeeded.len(), 1, "one payment_succeeded step: {j}");
    assert_eq!(succeeded[0]["payment_intent_ref"], payment.as_str());
    for k in ["payment_failed", "action_required", "subscription_started"] {
        assert!(!kinds.iter().any(|x| x == k), "no {k} step: {j}");
    }
    for step in j["steps"].as_array().expect("steps") {
        is_ts(&step["at"]);
    }
    let listed = the_one(&app, &SESSION, "").await;
    assert_eq!(listed, cs);
    for kind in [&METHOD, &SUBSCRIPTION, &CHANGE] {
        assert!(
            list(&app, kind.path).await.is_empty(),
            "nothing in {}",
            kind.path
        );
    }
}

async fn other_sandbox_cards_succeed(app: TestApp) {
    let (config, s) = one_time_config(&app).await;
    let session = open_session(&app, &config, "ada@example.com").await;
    let d = pay_ok(&app, &session, card("pm_card_mastercard")).await;
    assert_eq!(d["result"], "retrieve_payment_response");
    card_is(&d["payment"], "mastercard", "4444");
    assert_eq!(d["payment"]["amount"], eur("1999"));
    assert_eq!(d["payment"]["product_refs"], json!([s.product]));
    assert_eq!(d["checkout_session"]["status"], "complete");
    let payment = text(&d["payment"]["payment_intent_ref"]);
    let p = retrieve(&app, &PAYMENT, &payment).await;
    card_is(&p, "mastercard", "4444");
    // The dispute and refund cards' payments succeed (their later
    // behaviour is issue 18's).
    for pm in ["pm_card_dispute", "pm_card_refund_fails"] {
        let session = open_session(&app, &config, "ada@example.com").await;
        let d = pay_ok(&app, &session, card(pm)).await;
        assert_eq!(d["checkout_session"]["status"], "complete", "{pm}");
    }
    assert_eq!(list(&app, CAPTURES).await.len(), 3);
    assert_eq!(list(&app, BUYERS).await.len(), 1, "one buyer, found again");
}

async fn declined_cards_write_a_failed_payment_only(app: TestApp) {
    let (config, _) = one_time_config(&app).await;
    let session = open_session(&app, &config, "ada@example.com").await;
    let mut failed = Vec::new();
    for (pm, code) in [
        ("pm_card_declined", "card_declined"),
        ("pm_card_insufficient_funds", "insufficient_funds"),
    ] {
        let d = answered(&pay(&app, &session, card(pm)).await, "failed");
        assert_eq!(d["result"], "retrieve_payment_response", "{pm}");
        assert!(d["subscription"].is_null());
        assert!(d["next_action"].is_null());
        let p = d["payment"].clone();
        assert_eq!(p["failure_code"], code, "{p}");
        assert!(p["captured_at"].is_null(), "{p}");
        assert!(
            p["buyer_ref"].is_null(),
            "a buyer not known yet is not made by a decline: {p}"
        );
        assert_eq!(p["amount"], eur("1999"));
        let payment = text(&p["payment_intent_ref"]);
        let cs = d["checkout_session"].clone();
        assert_eq!(cs["status"], "open", "{pm}");
        assert!(cs["buyer_ref"].is_null());
        assert!(cs["completed_at"].is_null());
        assert_eq!(
            cs["payment_intent_ref"],
            payment.as_str(),
            "the session names its newest payment"
        );
        assert_eq!(session_state(&app, &session).await, cs);
        assert_eq!(retrieve(&app, &PAYMENT, &payment).await, p);
        failed.push(payment);
    }
    let payments = records(&app, &PAYMENT, "").await;
    assert_eq!(payments.len(), 2);
    assert!(payments.iter().all(|p| p["status"] == "failed"));
    for kind in [
        &CAPTURE,
        &ORDER,
        &INVOICE,
        &ENTITLEMENT,
        &BUYER,
        &METHOD,
        &SUBSCRIPTION,
    ] {
        assert!(
            list(&app, kind.path).await.is_empty(),
            "a decline makes nothing in {}",
            kind.path
        );
    }
    let j = the_one(&app, &JOURNEY, "").await;
    assert_eq!(j["status"], "open");
    let fails = steps_of(&j, "payment_failed");
    assert_eq!(fails.len(), 2, "{j}");
    assert_eq!(set(&refs(&fails, "payment_intent_ref")), set(&failed));

    // Paying again succeeds, with a new payment.
    let d = pay_ok(&app, &session, card("pm_card_visa")).await;
    let payment = text(&d["payment"]["payment_intent_ref"]);
    assert!(!failed.contains(&payment), "a new payment");
    assert_eq!(d["checkout_session"]["status"], "complete");
    assert_eq!(
        d["checkout_session"]["payment_intent_ref"],
        payment.as_str()
    );
    assert_eq!(list(&app, PAYMENTS).await.len(), 3);
    let c = the_one(&app, &CAPTURE, "").await;
    assert_eq!(c["payment_intent_ref"], payment.as_str());
    assert_eq!(
        the_one(&app, &ORDER, "").await["payment_intent_ref"],
        payment.as_str()
    );
    the_one(&app, &INVOICE, "").await;
    the_one(&app, &ENTITLEMENT, "").await;
    the_one(&app, &BUYER, "").await;
    // The failed payments stay as they were.
    for f in &failed {
        assert_eq!(retrieve(&app, &PAYMENT, f).await["status"], "failed");
    }
    let j = the_one(&app, &JOURNEY, "").await;
    assert_eq!(j["status"], "converted");
    assert_eq!(steps_of(&j, "payment_failed").len(), 2);
    assert_eq!(steps_of(&j, "payment_succeeded").len(), 1);
}

async fn pay_validation(app: TestApp) {
    let (config, _) = one_time_config(&app).await;
    let session = open_session(&app, &config, "ada@example.com").await;
    for (body, field) in [
        (card("pm_card_nope"), "payment_method"),
        (card("pm_card_VISA"), "payment_method"),
        (card("card_visa"), "payment_method"),
        (card(""), "payment_method"),
        (card("spm_short"), "payment_method"),
        (json!({"payment_method": 7}), "payment_method"),
        (
            json!({"payment_method": "pm_card_visa", "save_payment_method": "yes"}),
            "save_payment_method",
        ),
        (json!({"authentication": "maybe"}), "authentication"),
        (
            json!({"payment_method": "pm_card_visa", "colour": "blue"}),
            "colour",
        ),
    ] {
        let r = pay(&app, &session, body.clone()).await;
        assert_eq!(r.status, 400, "{body}: {}", r.text);
        invalid(&r, field);
    }
    // Neither a payment method nor an authentication.
    pay(&app, &session, json!({}))
        .await
        .expect_error(400, "validation_failed");
    // The idempotency key is required.
    app.req("POST", &pay_path(&session))
        .json(&card("pm_card_visa"))
        .send()
        .await
        .expect_error(400, "idempotency_key_required");
    // An unknown stored method, an unknown or malformed session.
    pay(&app, &session, card(NO_METHOD))
        .await
        .expect_error(404, "not_found");
    pay(&app, NO_SESSION, card("pm_card_visa"))
        .await
        .expect_error(404, "not_found");
    let r = pay(&app, "cs_short", card("pm_card_visa")).await;
    invalid(&r, "checkout_session_ref");
    // Nothing was written.
    let s = session_state(&app, &session).await;
    assert_eq!(s["status"], "open");
    assert!(s["payment_intent_ref"].is_null());
    no_records(&app).await;
    pay_ok(&app, &session, card("pm_card_visa")).await;
}

// ---- stored payment methods -------------------------------------------------------

async fn saved_payment_methods(app: TestApp) {
    let (config, _) = one_time_config(&app).await;
    let first = open_session(&app, &config, "Ada.Lovelace@Example.com").await;
    let d = pay_ok(
        &app,
        &first,
        json!({"payment_method": "pm_card_visa", "save_payment_method": true}),
    )
    .await;
    let buyer = text(&d["payment"]["buyer_ref"]);
    is_ref(&d["payment"]["stored_payment_method_ref"], "spm_");
    let spm = text(&d["payment"]["stored_payment_method_ref"]);
    let m = the_one(&app, &METHOD, "").await;
    assert_eq!(m["stored_payment_method_ref"], spm.as_str());
    assert_eq!(m["buyer_ref"], buyer.as_str());
    assert_eq!(m["brand"], "visa");
    assert_eq!(m["last4"], "4242");
    assert_eq!(m["status"], "active");
    expiry(&m);
    is_ts(&m["created_at"]);
    assert_eq!(
        the_one(&app, &METHOD, &format!("buyer_ref={buyer}&status=active")).await,
        m
    );

    // A later session of the same buyer, in other letter case, pays with it.
    let second = open_session(&app, &config, "ada.lovelace@EXAMPLE.COM").await;
    let d = pay_ok(&app, &second, card(&spm)).await;
    let p = &d["payment"];
    card_is(p, "visa", "4242");
    assert_eq!(p["buyer_ref"], buyer.as_str(), "the buyer is found again");
    assert_eq!(p["stored_payment_method_ref"], spm.as_str(), "{p}");
    assert_eq!(d["checkout_session"]["buyer_ref"], buyer.as_str());
    assert_eq!(d["checkout_session"]["status"], "complete");
    let b = the_one(&app, &BUYER, "").await;
    assert_eq!(b["buyer_ref"], buyer.as_str());
    assert_eq!(
        b["email"], "Ada.Lovelace@Example.com",
        "e-mails are kept as first given"
    );
    assert_eq!(
        list(&app, METHODS).await.len(),
        1,
        "paying with a stored method stores nothing new"
    );
    assert_eq!(
        list(&app, &format!("{ORDERS}?buyer_ref={buyer}"))
            .await
            .len(),
        2
    );

    // Another buyer cannot use it; nothing is written.
    let other = open_session(&app, &config, "grace@example.com").await;
    let r = pay(&app, &other, card(&spm)).await;
    r.expect_error(422, "semantic_error");
    let s = session_state(&app, &other).await;
    assert_eq!(s["status"], "open");
    assert!(s["payment_intent_ref"].is_null(), "{s}");
    assert!(list(&app, PAYMENTS)
        .await
        .iter()
        .all(|p| p["checkout_session_ref"] != other.as_str()));
    assert_eq!(list(&app, BUYERS).await.len(), 1);
    // That buyer pays with a card and saves it: a second method.
    let d = pay_ok(
        &app,
        &other,
        json!({"payment_method": "pm_card_mastercard", "save_payment_method": true}),
    )
    .await;
    let grace = text(&d["payment"]["buyer_ref"]);
    assert_ne!(grace, buyer);
    let theirs = the_one(&app, &METHOD, &format!("buyer_ref={grace}")).await;
    assert_eq!(theirs["brand"], "mastercard");
    assert_eq!(theirs["last4"], "4444");
    // Ada cannot use Grace's method either.
    let third = open_session(&app, &config, "ada.lovelace@example.com").await;
    pay(
        &app,
        &third,
        card(&text(&theirs["stored_payment_method_ref"])),
    )
    .await
    .expect_error(422, "semantic_error");
    assert_eq!(list(&app, METHODS).await.len(), 2);
    // save_payment_method: false stores nothing.
    let d = pay_ok(
        &app,
        &third,
        json!({"payment_method": "pm_card_visa", "save_payment_method": false}),
    )
    .await;
    assert!(d["payment"]["stored_payment_method_ref"].is_null());
    assert_eq!(list(&app, METHODS).await.len(), 2);
}

// ---- subscriptions ------------------------------------------------------------------

async fn a_recurring_config_starts_a_subscription(app: TestApp) {
    let monthly = sellable(&app, eur("999"), Some("month")).await;
    let once = sellable(&app, eur("2500"), None).await;
    let config = published_config(&app, vec![line(&monthly.offer, 1), line(&once.offer, 1)]).await;
    let r = create_session(&app, session_body(&config, "ada@example.com")).await;
    r.expect(201);
    assert_eq!(r.data()["mode"], "subscription");
    assert_eq!(r.data()["amount_total"], eur("3499"));
    let session = text(&r.data()["checkout_session_ref"]);

    let d = pay_ok(&app, &session, card("pm_card_visa")).await;
    assert_eq!(d["result"], "subscription_started");
    assert!(d["next_action"].is_null());
    let p = d["payment"].clone();
    assert_eq!(
        p["amount"],
        eur("3499"),
        "one-time items with the first period"
    );
    let buyer = text(&p["buyer_ref"]);
    let sub = d["subscription"].clone();
    has_fields(&sub, SUBSCRIPTION_FIELDS);
    is_ref(&sub["subscription_ref"], "sub_");
    let subscription = text(&sub["subscription_ref"]);
    assert_eq!(sub["buyer_ref"], buyer.as_str());
    assert_eq!(sub["price_ref"], monthly.price.as_str());
    assert_eq!(sub["product_ref"], monthly.product.as_str());
    assert_eq!(sub["status"], "active");
    is_ts(&sub["started_at"]);
    assert!(sub["canceled_at"].is_null());
    let start = text(&sub["current_period_start"]);
    is_ts(&sub["current_period_start"]);
    assert_eq!(
        ts_of(&sub["current_period_end"]),
        one_month_after(&start),
        "a period is one month: {sub}"
    );
    // Recurring items always store the payment method.
    is_ref(&sub["stored_payment_method_ref"], "spm_");
    let spm = text(&sub["stored_payment_method_ref"]);
    assert_eq!(p["stored_payment_method_ref"], spm.as_str());
    let m = the_one(&app, &METHOD, "").await;
    assert_eq!(m["stored_payment_method_ref"], spm.as_str());
    assert_eq!(m["buyer_ref"], buyer.as_str());
    assert_eq!(m["brand"], "visa");
    assert_eq!(m["last4"], "4242");
    assert_eq!(m["status"], "active");

    let cs = d["checkout_session"].clone();
    assert_eq!(cs["status"], "complete");
    assert_eq!(cs["subscription_ref"], subscription.as_str());
    assert_eq!(session_state(&app, &session).await, cs);
    assert_eq!(the_one(&app, &SUBSCRIPTION, "").await, sub);
    let ch = the_one(&app, &CHANGE, "").await;
    assert_eq!(ch["subscription_ref"], subscription.as_str());
    assert_eq!(ch["kind"], "started");
    assert_eq!(ch["to_price_ref"], monthly.price.as_str());
    is_ts(&ch["effective_at"]);
    let i = the_one(&app, &INVOICE, "").await;
    assert_eq!(i["subscription_ref"], subscription.as_str());
    assert_eq!(i["amount_total"], eur("3499"));
    assert_eq!(records(&app, &ENTITLEMENT, "").await.len(), 2);
    the_one(&app, &CAPTURE, "").await;
    the_one(&app, &ORDER, "").await;
    let j = the_one(&app, &JOURNEY, "").await;
    assert_eq!(j["status"], "converted");
    assert_eq!(steps_of(&j, "subscription_started").len(), 1, "{j}");
    assert_eq!(steps_of(&j, "payment_succeeded").len(), 1, "{j}");

    // A yearly price: one year later.
    let yearly = sellable(&app, eur("9900"), Some("year")).await;
    let yearly_config = published_config(&app, vec![line(&yearly.offer, 1)]).await;
    let d = paid_session(&app, &yearly_config, "grace@example.com").await;
    let sub = &d["subscription"];
    let start = text(&sub["current_period_start"]);
    let year: i32 = start[..4].parse().expect("year");
    let (month, day): (u32, u32) = (
        start[5..7].parse().expect("month"),
        start[8..10].parse().expect("day"),
    );
    let day = day.min(days_in_month(year + 1, month));
    let end = format!("{:04}-{month:02}-{day:02}{}", year + 1, &start[10..]);
    assert_eq!(
        ts_of(&sub["current_period_end"]),
        Timestamp::parse(&end).expect("end"),
        "a period is one year: {sub}"
    );
    assert_eq!(list(&app, SUBSCRIPTIONS).await.len(), 2);
    assert_eq!(list(&app, METHODS).await.len(), 2);
}

// ---- authentication -----------------------------------------------------------------

async fn authentication_approve_completes_the_payment(app: TestApp) {
    let (config, _) = one_time_config(&app).await;
    let session = open_session(&app, &config, "ada@example.com").await;
    let before = Timestamp::now().plus_seconds(-2);
    let d = answered(
        &pay(&app, &session, card("pm_card_requires_action")).await,
        "requires_action",
    );
    assert_eq!(d["result"], "retrieve_payment_response");
    assert!(d["subscription"].is_null());
    let next = d["next_action"].clone();
    assert_eq!(next["type"], "authenticate", "{d}");
    let expires = ts_of(&next["expires_at"]);
    assert!(
        expires >= before.plus_seconds(3600) && expires <= Timestamp::now().plus_seconds(3602),
        "authentication waits one hour: {next}"
    );
    let p = d["payment"].clone();
    let waiting = p.clone();
    assert_eq!(p["next_action"], next, "the payment names its next action");
    assert!(p["captured_at"].is_null());
    let payment = text(&p["payment_intent_ref"]);
    assert_eq!(d["checkout_session"]["status"], "open");
    assert_eq!(
        d["checkout_session"]["payment_intent_ref"],
        payment.as_str()
    );
    assert_eq!(retrieve(&app, &PAYMENT, &payment).await, p);
    for kind in [&CAPTURE, &ORDER, &INVOICE, &ENTITLEMENT, &BUYER] {
        assert!(list(&app, kind.path).await.is_empty(), "{}", kind.path);
    }
    let j = the_one(&app, &JOURNEY, "").await;
    assert_eq!(steps_of(&j, "action_required").len(), 1, "{j}");
    assert_eq!(j["status"], "open");

    let d = answered(
        &pay(&app, &session, json!({"authentication": "approve"})).await,
        "succeeded",
    );
    assert_eq!(d["result"], "retrieve_payment_response");
    assert!(d["next_action"].is_null());
    let p = d["payment"].clone();
    assert_eq!(
        p["payment_intent_ref"],
        payment.as_str(),
        "the same payment"
    );
    assert!(p["next_action"].is_null(), "{p}");
    assert_eq!(
        p["payment_method"], waiting["payment_method"],
        "the card that needed authentication"
    );
    assert_eq!(p["payment_method"]["brand"], "visa", "{p}");
    is_ts(&p["captured_at"]);
    assert_eq!(d["checkout_session"]["status"], "complete");
    assert_eq!(d["checkout_session"]["buyer_ref"], p["buyer_ref"], "{d}");
    assert_eq!(the_one(&app, &PAYMENT, "").await, p);
    the_one(&app, &CAPTURE, "").await;
    the_one(&app, &ORDER, "").await;
    the_one(&app, &INVOICE, "").await;
    the_one(&app, &BUYER, "").await;
    the_one(&app, &ENTITLEMENT, "").await;
    // Nothing is waiting any more; the session is complete.
    pay(&app, &session, json!({"authentication": "approve"}))
        .await
        .expect_error(422, "semantic_error");
}

async fn authentication_decline_and_nothing_waiting(app: TestApp) {
    let (config, _) = one_time_config(&app).await;
    // Nothing waits on a fresh session.
    let idle = open_session(&app, &config, "ada@example.com").await;
    for answer in ["approve", "decline"] {
        pay(&app, &idle, json!({ "authentication": answer }))
            .await
            .expect_error(422, "semantic_error");
    }
    // Nor after a plain decline.
    answered(&pay(&app, &idle, card("pm_card_declined")).await, "failed");
    pay(&app, &idle, json!({"authentication": "approve"}))
        .await
        .expect_error(422, "semantic_error");
    assert_eq!(session_state(&app, &idle).await["status"], "open");

    let session = open_session(&app, &config, "ada@example.com").await;
    let d = answered(
        &pay(&app, &session, card("pm_card_requires_action")).await,
        "requires_action",
    );
    let payment = text(&d["payment"]["payment_intent_ref"]);
    let d = answered(
        &pay(&app, &session, json!({"authentication": "decline"})).await,
        "failed",
    );
    assert_eq!(d["result"], "retrieve_payment_response");
    assert_eq!(d["payment"]["payment_intent_ref"], payment.as_str());
    assert_eq!(d["payment"]["failure_code"], "authentication_failed");
    assert!(d["next_action"].is_null());
    assert_eq!(d["checkout_session"]["status"], "open");
    assert_eq!(retrieve(&app, &PAYMENT, &payment).await["status"], "failed");
    // Once declined, nothing waits.
    pay(&app, &session, json!({"authentication": "approve"}))
        .await
        .expect_error(422, "semantic_error");
    for kind in [&CAPTURE, &ORDER, &INVOICE, &ENTITLEMENT, &BUYER] {
        assert!(list(&app, kind.path).await.is_empty(), "{}", kind.path);
    }
    // The session can still be paid.
    pay_ok(&app, &session, card("pm_card_visa")).await;
}

async fn authentication_of_a_subscription(app: TestApp) {
    let (config, s) = monthly_config(&app).await;
    let session = open_session(&app, &config, "ada@example.com").await;
    let d = answered(
        &pay(&app, &session, card("pm_card_requires_action")).await,
        "requires_action",
    );
    assert_eq!(d["result"], "subscription_setup_action_required");
    assert_eq!(d["next_action"]["type"], "authenticate", "{d}");
    is_ts(&d["next_action"]["expires_at"]);
    let sub = d["subscription"].clone();
    has_fields(&sub, SUBSCRIPTION_FIELDS);
    assert_eq!(sub["status"], "incomplete", "{sub}");
    assert_eq!(sub["product_ref"], s.product.as_str());
    let subscription = text(&sub["subscription_ref"]);
    assert_eq!(d["checkout_session"]["status"], "open");
    assert_eq!(
        retrieve(&app, &SUBSCRIPTION, &subscription).await["status"],
        "incomplete"
    );
    assert!(list(&app, CAPTURES).await.is_empty());
    assert!(list(&app, INVOICES).await.is_empty());

    let d = answered(
        &pay(&app, &session, json!({"authentication": "approve"})).await,
        "succeeded",
    );
    assert_eq!(d["result"], "subscription_started");
    assert!(d["next_action"].is_null());
    assert_eq!(d["subscription"]["subscription_ref"], subscription.as_str());
    assert_eq!(d["subscription"]["status"], "active");
    is_ref(&d["subscription"]["stored_payment_method_ref"], "spm_");
    assert_eq!(d["checkout_session"]["status"], "complete");
    assert_eq!(
        d["checkout_session"]["subscription_ref"],
        subscription.as_str()
    );
    let got = the_one(&app, &SUBSCRIPTION, "").await;
    assert_eq!(got["status"], "active");
    assert_eq!(got, d["subscription"]);
    let ch = the_one(&app, &CHANGE, "").await;
    assert_eq!(ch["kind"], "started");
    the_one(&app, &CAPTURE, "").await;
    the_one(&app, &METHOD, "").await;
    the_one(&app, &INVOICE, "").await;
}

// ---- refused pays ------------------------------------------------------------------

async fn paying_a_complete_or_expired_session_is_refused(app: TestApp) {
    let (config, _) = one_time_config(&app).await;
    let session = open_session(&app, &config, "ada@example.com").await;
    pay_ok(&app, &session, card("pm_card_visa")).await;
    let done = session_state(&app, &session).await;
    for body in [
        card("pm_card_visa"),
        card("pm_card_declined"),
        json!({"authentication": "approve"}),
    ] {
        pay(&app, &session, body)
            .await
            .expect_error(422, "semantic_error");
    }
    assert_eq!(session_state(&app, &session).await, done, "unchanged");
    assert_eq!(list(&app, PAYMENTS).await.len(), 1, "no second charge");
    assert_eq!(list(&app, CAPTURES).await.len(), 1);

    // An expired session (moved past its expiry in the store).
    let late = open_session(&app, &config, "grace@example.com").await;
    expire(&app, &late).await;
    let s = session_state(&app, &late).await;
    assert_eq!(s["status"], "expired", "{s}");
    pay(&app, &late, card("pm_card_visa"))
        .await
        .expect_error(422, "semantic_error");
    let s = session_state(&app, &late).await;
    assert_eq!(s["status"], "expired");
    assert!(s["payment_intent_ref"].is_null());
    assert_eq!(list(&app, PAYMENTS).await.len(), 1);
    // Its journey reads abandoned.
    let journey = text(&s["journey_ref"]);
    let j = retrieve(&app, &JOURNEY, &journey).await;
    assert_eq!(j["status"], "abandoned", "{j}");
    // A complete session never reads expired.
    expire(&app, &session).await;
    assert_eq!(session_state(&app, &session).await["status"], "complete");
}

/// Lists read a session's and a journey's status as their retrieves do
/// (`expired`, `abandoned` once the expiry has passed) and filter on it.
async fn expired_sessions_in_lists(app: TestApp) {
    let (config, _) = one_time_config(&app).await;
    let paid = text(
        &paid_session(&app, &config, "ada@example.com").await["checkout_session"]
            ["checkout_session_ref"],
    );
    let late = open_session(&app, &config, "grace@example.com").await;
    expire(&app, &late).await;
    expire(&app, &paid).await;
    let journey = text(&session_state(&app, &late).await["journey_ref"]);
    let item = list(&app, SESSIONS)
        .await
        .into_iter()
        .find(|i| i["checkout_session_ref"] == late.as_str())
        .expect("listed");
    assert_eq!(item["status"], "expired", "{item}");
    let item = list(&app, JOURNEYS)
        .await
        .into_iter()
        .find(|i| i["journey_ref"] == journey.as_str())
        .expect("listed");
    assert_eq!(item["status"], "abandoned", "{item}");
    let only = |v: &String| HashSet::from([v.clone()]);
    let mut wrong = Vec::new();
    for (kind, query, want) in [
        (&SESSION, "status=open", HashSet::new()),
        (&SESSION, "status=expired", only(&late)),
        (&SESSION, "status=complete", only(&paid)),
        (&JOURNEY, "status=open", HashSet::new()),
        (&JOURNEY, "status=abandoned", only(&journey)),
    ] {
        let got = filtered(&app, kind, query.to_owned()).await;
        if got != want {
            wrong.push(format!("{}?{query}: {got:?}, expected {want:?}", kind.path));
        }
    }
    assert!(
        wrong.is_empty(),
        "filters disagree with the status read: {wrong:#?}"
    );
}

async fn live_pay_is_unavailable(app: TestApp) {
    let live = app.live.secret.clone();
    let s = sellable_as(&app, &live, eur("1999"), None).await;
    let config = config_as(&app, &live, config_body(vec![line(&s.offer, 1)])).await;
    let r = create_session_as(&app, &live, session_body(&config, "ada@example.com")).await;
    r.expect(201);
    let session = text(&r.data()["checkout_session_ref"]);
    let before = get_as(&app, &live, &at(SESSIONS, &session, ""))
        .await
        .data()
        .clone();
    for body in [
        card("pm_card_visa"),
        json!({"payment_method": "pm_card_visa", "save_payment_method": true}),
        card("pm_card_declined"),
    ] {
        let r = app.post(&pay_path(&session), body).auth(&live).send().await;
        r.expect_error(503, "dependency_unavailable");
        assert!(r.header("retry-after").is_some(), "Retry-After: {r:?}");
    }
    let after = get_as(&app, &live, &at(SESSIONS, &session, ""))
        .await
        .data()
        .clone();
    assert_eq!(after, before, "nothing changed");
    assert_eq!(after["status"], "open");
    for (path, n) in census_as(&app, &live).await {
        assert_eq!(n, 0, "nothing in the live {path}");
    }
    let j = get_as(&app, &live, &at(JOURNEYS, &text(&after["journey_ref"]), "")).await;
    assert_eq!(step_kinds(j.data()), ["session_created"]);
    no_records(&app).await;
}

// ---- sessions ---------------------------------------------------------------------

async fn session_validation(app: TestApp) {
    let s = sellable(&app, eur("1999"), None).await;
    let draft = draft_config_as(
        &app,
        &app.sandbox.secret,
        config_body(vec![line(&s.offer, 1)]),
    )
    .await;
    let r = create_session(&app, session_body(&draft, "ada@example.com")).await;
    refused(&r, "draft");
    create_session(&app, session_body(NO_CONFIG, "ada@example.com"))
        .await
        .expect_error(404, "not_found");
    let config = published_config(&app, vec![line(&s.offer, 1)]).await;

    let long_local = "a".repeat(245);
    let too_long = format!("{long_local}@example.com");
    for email in [
        "",
        "ab",
        "ada.example.com",
        "ada@example",
        "ada@@example.com",
        "ada@exa@mple.com",
        too_long.as_str(),
    ] {
        let r = create_session(&app, session_body(&config, email)).await;
        assert_eq!(r.status, 400, "{email}: {}", r.text);
        invalid(&r, "buyer.email");
    }
    let email = json!({"email": "ada@example.com"});
    for (body, field) in [
        (json!({"config_ref": config}), "buyer"),
        (json!({"buyer": email}), "config_ref"),
        (
            json!({"config_ref": "cco_short", "buyer": email}),
            "config_ref",
        ),
        (json!({"config_ref": config, "buyer": {}}), "buyer.email"),
        (
            json!({"config_ref": config, "buyer": {"email": 7}}),
            "buyer.email",
        ),
        (
            json!({"config_ref": config, "buyer": {"email": "ada@example.com", "name": ""}}),
            "buyer.name",
        ),
        (
            json!({"config_ref": config, "buyer": {"email": "ada@example.com", "name": "n".repeat(201)}}),
            "buyer.name",
        ),
        (
            json!({"config_ref": config, "buyer": email, "colour": "blue"}),
            "colour",
        ),
        (
            json!({"config_ref": config, "buyer": email, "custom_fields": {"colour": "blue"}}),
            "custom_fields.colour",
        ),
    ] {
        let r = create_session(&app, body.clone()).await;
        assert_eq!(r.status, 400, "{body}: {}", r.text);
        invalid(&r, field);
    }
    assert!(list(&app, SESSIONS).await.is_empty(), "nothing was made");
    assert!(list(&app, JOURNEYS).await.is_empty(), "no journey either");

    // The limits themselves are allowed; the name is optional.
    let longest = format!("{}@example.com", "a".repeat(242));
    assert_eq!(longest.len(), 254);
    for buyer in [
        json!({"email": "a@b.c"}),
        json!({ "email": longest }),
        json!({"email": "ada@example.com", "name": "n".repeat(200)}),
        json!({"email": "ada@example.com", "name": null}),
    ] {
        let r = create_session(&app, json!({"config_ref": config, "buyer": buyer})).await;
        r.expect(201);
        assert_eq!(r.data()["buyer"]["email"], buyer["email"]);
    }
    let r = create_session(
        &app,
        json!({"config_ref": config, "buyer": {"email": "ada@example.com"}}),
    )
    .await;
    r.expect(201);
    assert!(r.data()["buyer"]["name"].is_null(), "{}", r.text);
    // Unknown and malformed sessions.
    app.get(&at(SESSIONS, NO_SESSION, ""))
        .send()
        .await
        .expect_error(404, "not_found");
    let r = app.get(&at(SESSIONS, "cs_short", "")).send().await;
    invalid(&r, "checkout_session_ref");
}

async fn session_custom_fields(app: TestApp) {
    let s = sellable(&app, eur("1999"), None).await;
    let body = json!({
        "name": "Checkout",
        "line_items": [line(&s.offer, 1)],
        "success_url": OK_URL,
        "custom_fields": [
            {"key": "company", "label": "Company", "type": "text", "required": true},
            {"key": "seats", "label": "Seats", "type": "numeric"},
            {"key": "size", "label": "Size", "type": "dropdown", "options": ["S", "M", "L"]},
        ],
    });
    let config = config_as(&app, &app.sandbox.secret, body).await;
    let with_fields = |fields: Value| json!({"config_ref": config, "buyer": {"email": "ada@example.com"}, "custom_fields": fields});
    for (fields, field) in [
        (
            json!({"company": "Acme", "colour": "blue"}),
            "custom_fields.colour",
        ),
        (json!({}), "custom_fields.company"),
        (json!({"seats": "3"}), "custom_fields.company"),
        (
            json!({"company": "Acme", "seats": "many"}),
            "custom_fields.seats",
        ),
        (
            json!({"company": "Acme", "size": "XL"}),
            "custom_fields.size",
        ),
        (
            json!({"company": "Acme", "size": "m"}),
            "custom_fields.size",
        ),
    ] {
        let r = create_session(&app, with_fields(fields.clone())).await;
        assert_eq!(r.status, 400, "{fields}: {}", r.text);
        invalid(&r, field);
    }
    // A missing required field, custom_fields absent altogether.
    let r = create_session(
        &app,
        json!({"config_ref": config, "buyer": {"email": "ada@example.com"}}),
    )
    .await;
    invalid(&r, "custom_fields.company");
    assert!(list(&app, SESSIONS).await.is_empty(), "nothing was made");

    let r = create_session(
        &app,
        with_fields(json!({"company": "Acme", "seats": "12", "size": "M"})),
    )
    .await;
    r.expect(201);
    assert_eq!(
        r.data()["custom_fields"],
        json!({"company": "Acme", "seats": "12", "size": "M"}),
        "values are kept as strings"
    );
    let session = text(&r.data()["checkout_session_ref"]);
    assert_eq!(
        session_state(&app, &session).await["custom_fields"],
        json!({"company": "Acme", "seats": "12", "size": "M"})
    );
    // Optional fields may be left out.
    let r = create_session(&app, with_fields(json!({"company": "Acme"}))).await;
    r.expect(201);
    assert_eq!(r.data()["custom_fields"], json!({"company": "Acme"}));
}

async fn a_session_uses_the_published_version(app: TestApp) {
    let s = sellable(&app, eur("1000"), None).await;
    let config = published_config(&app, vec![line(&s.offer, 1)]).await;
    // A newer version, not published: sessions keep using version 1.
    app.post(
        &at(CONFIGS, &config, "/versions"),
        json!({"line_items": [line(&s.offer, 3)]}),
    )
    .send()
    .await
    .expect(201);
    let r = create_session(&app, session_body(&config, "ada@example.com")).await;
    r.expect(201);
    assert_eq!(r.data()["config_version"], 1);
    assert_eq!(r.data()["line_items"][0]["quantity"], 1);
    assert_eq!(r.data()["amount_total"], eur("1000"));
    let v1 = text(&r.data()["checkout_session_ref"]);
    app.post(&at(CONFIGS, &config, "/publish"), json!({"version": 2}))
        .send()
        .await
        .expect(200);
    let r = create_session(&app, session_body(&config, "ada@example.com")).await;
    r.expect(201);
    assert_eq!(r.data()["config_version"], 2);
    assert_eq!(r.data()["line_items"][0]["quantity"], 3);
    assert_eq!(r.data()["line_items"][0]["amount"], eur("3000"));
    assert_eq!(r.data()["amount_total"], eur("3000"));
    // The earlier session keeps its version and charges it.
    let d = pay_ok(&app, &v1, card("pm_card_visa")).await;
    assert_eq!(d["payment"]["amount"], eur("1000"));
    assert_eq!(d["checkout_session"]["config_version"], 1);
}

async fn a_session_keeps_its_prices(app: TestApp) {
    let s = sellable(&app, eur("1999"), None).await;
    let config = published_config(&app, vec![line(&s.offer, 2)]).await;
    let first = open_session(&app, &config, "ada@example.com").await;
    let before = session_state(&app, &first).await;
    assert_eq!(before["amount_total"], eur("3998"));

    app.post(
        &at(OFFERS, &s.offer, "/reprice"),
        json!({"amount": eur("2999"), "reason": "Yearly price review"}),
    )
    .send()
    .await
    .expect(200);
    assert_eq!(
        session_state(&app, &first).await,
        before,
        "a reprice never changes an open session"
    );
    let r = create_session(&app, session_body(&config, "ada@example.com")).await;
    r.expect(201);
    let second = r.data().clone();
    assert_eq!(second["line_items"][0]["unit_amount"], eur("2999"));
    assert_ne!(second["line_items"][0]["price_ref"], s.price.as_str());
    assert_eq!(second["amount_total"], eur("5998"));

    // A promotion active when a session is created is included.
    let promo = json!({"offer_refs": [s.offer], "discount": {"percent_off": 10}});
    let plan = app.req("POST", PLAN).json(&promo).send().await;
    plan.expect(200);
    app.post(APPLY, promo)
        .if_match(&plan.etag())
        .send()
        .await
        .expect(200);
    let r = create_session(&app, session_body(&config, "ada@example.com")).await;
    r.expect(201);
    let third = r.data().clone();
    assert_eq!(third["line_items"][0]["unit_amount"], eur("2700"));
    assert_eq!(third["line_items"][0]["amount"], eur("5400"));
    assert_eq!(third["amount_total"], eur("5400"));
    let second_ref = text(&second["checkout_session_ref"]);
    assert_eq!(
        session_state(&app, &second_ref).await["amount_total"],
        eur("5998"),
        "a promotion never changes an open session"
    );
    // Each pays its own snapshot.
    for (session, total) in [
        (first.clone(), "3998"),
        (second_ref, "5998"),
        (text(&third["checkout_session_ref"]), "5400"),
    ] {
        let d = pay_ok(&app, &session, card("pm_card_visa")).await;
        assert_eq!(d["payment"]["amount"], eur(total), "{session}");
        assert_eq!(d["checkout_session"]["amount_total"], eur(total));
    }
    let totals: HashSet<String> = list(&app, INVOICES)
        .await
        .iter()
        .map(|i| text(&i["amount_total"]["value"]))
        .collect();
    assert_eq!(
        totals,
        ["3998", "5998", "5400"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    );
}

// ---- concurrency -----------------------------------------------------------------

async fn concurrent_pays_of_one_session(app: TestApp) {
    let (config, _) = one_time_config(&app).await;
    let session = open_session(&app, &config, "ada@example.com").await;
    let answers =
        futures::future::join_all((0..20).map(|_| pay(&app, &session, card("pm_card_visa")))).await;
    let mut won = Vec::new();
    for r in &answers {
        match r.status {
            200 => won.push(r.clone()),
            409 => {
                r.expect_error(409, "version_conflict");
            }
            422 => {
                r.expect_error(422, "semantic_error");
            }
            s => panic!("unexpected {s}: {}", r.text),
        }
    }
    assert_eq!(won.len(), 1, "exactly one pay completes the session");
    let d = answered(&won[0], "succeeded");
    let payment = text(&d["payment"]["payment_intent_ref"]);
    let payments = records(&app, &PAYMENT, "").await;
    assert_eq!(
        refs(&payments, "payment_intent_ref"),
        std::slice::from_ref(&payment)
    );
    let c = the_one(&app, &CAPTURE, "").await;
    assert_eq!(c["payment_intent_ref"], payment.as_str());
    let o = the_one(&app, &ORDER, "").await;
    assert_eq!(o["payment_intent_ref"], payment.as_str());
    the_one(&app, &INVOICE, "").await;
    the_one(&app, &BUYER, "").await;
    the_one(&app, &ENTITLEMENT, "").await;
    let s = session_state(&app, &session).await;
    assert_eq!(s["status"], "complete");
    assert_eq!(s["payment_intent_ref"], payment.as_str());
}

/// Pays `session` with `body`, retrying a `409` with the same key (a 409
/// keeps nothing: contract 4), until it is decided.
async fn pay_decided(app: &TestApp, session: &str, body: Value) -> Resp {
    let key = unique_key();
    for _ in 0..200 {
        let r = pay_keyed(app, session, &key, &body).await;
        if r.status != 409 {
            return r;
        }
        r.expect_error(409, "version_conflict");
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    panic!("the pay of {session} stayed in conflict");
}

async fn concurrent_pays_number_invoices_consecutively(app: TestApp) {
    let (config, _) = one_time_config(&app).await;
    // One invoice first, to number from.
    paid_session(&app, &config, "first@example.com").await;
    let mut sessions = Vec::new();
    for i in 0..50 {
        sessions.push(open_session(&app, &config, &format!("buyer{i}@example.com")).await);
    }
    let answers = futures::future::join_all(
        sessions
            .iter()
            .map(|s| pay_decided(&app, s, card("pm_card_visa"))),
    )
    .await;
    for r in &answers {
        answered(r, "succeeded");
    }
    let invoices = list(&app, INVOICES).await;
    assert_eq!(invoices.len(), 51);
    let mut numbers: Vec<(u32, u32)> = invoices
        .iter()
        .map(|i| invoice_number(&i["number"]))
        .collect();
    numbers.sort_unstable();
    let distinct: HashSet<&(u32, u32)> = numbers.iter().collect();
    assert_eq!(distinct.len(), 51, "distinct numbers: {numbers:?}");
    for pair in numbers.windows(2) {
        assert_eq!(pair[0].0, pair[1].0, "one year: {numbers:?}");
        assert_eq!(
            pair[0].1 + 1,
            pair[1].1,
            "consecutive, without gaps: {numbers:?}"
        );
    }
    assert_eq!(list(&app, CAPTURES).await.len(), 51);
    assert_eq!(list(&app, BUYERS).await.len(), 51);
}

// ---- idempotency -----------------------------------------------------------------

async fn pay_replays(app: TestApp) {
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

// ---- lists -------------------------------------------------------------------------

async fn list_filters(app: TestApp) {
    let (one_time, a) = one_time_config(&app).await;
    let (monthly, b) = monthly_config(&app).await;
    // s1: Ada pays; s2: Grace is declined and stays open; s3: Ada subscribes;
    // s4: open, untouched.
    let s1 = paid_session(&app, &one_time, "ada@example.com").await;
    let ada = text(&s1["payment"]["buyer_ref"]);
    let p1 = text(&s1["payment"]["payment_intent_ref"]);
    let s2 = open_session(&app, &one_time, "grace@example.com").await;
    let failed = answered(&pay(&app, &s2, card("pm_card_declined")).await, "failed");
    let p2 = text(&failed["payment"]["payment_intent_ref"]);
    let s3 = paid_session(&app, &monthly, "ADA@example.com").await;
    assert_eq!(s3["payment"]["buyer_ref"], ada.as_str());
    let p3 = text(&s3["payment"]["payment_intent_ref"]);
    let sub = text(&s3["subscription"]["subscription_ref"]);
    let s4 = open_session(&app, &one_time, "grace@example.com").await;
    let cs1 = text(&s1["checkout_session"]["checkout_session_ref"]);
    let cs3 = text(&s3["checkout_session"]["checkout_session_ref"]);

    let q = |kind: &'static Kind, query: &str| filtered(&app, kind, query.to_owned());
    let of = |v: &[&String]| v.iter().map(|s| s.to_string()).collect::<HashSet<String>>();

    // Sessions: status and config_ref.
    assert_eq!(
        q(&SESSION, "status=open").await,
        of(&[&s2, &s4]),
        "open sessions"
    );
    assert_eq!(q(&SESSION, "status=complete").await, of(&[&cs1, &cs3]));
    assert!(q(&SESSION, "status=expired").await.is_empty());
    assert_eq!(
        q(&SESSION, &format!("config_ref={one_time}")).await,
        of(&[&cs1, &s2, &s4])
    );
    assert_eq!(
        q(&SESSION, &format!("config_ref={monthly}&status=complete")).await,
        of(&[&cs3])
    );
    // Payments: status and buyer_ref.
    assert_eq!(q(&PAYMENT, "status=succeeded").await, of(&[&p1, &p3]));
    assert_eq!(q(&PAYMENT, "status=failed").await, of(&[&p2]));
    assert!(q(&PAYMENT, "status=requires_action").await.is_empty());
    assert_eq!(
        q(&PAYMENT, &format!("buyer_ref={ada}")).await,
        of(&[&p1, &p3])
    );
    assert!(q(&PAYMENT, &format!("buyer_ref={NO_BUYER}"))
        .await
        .is_empty());
    // Captures: payment_intent_ref.
    let caps = records(&app, &CAPTURE, &format!("payment_intent_ref={p1}")).await;
    assert_eq!(caps.len(), 1);
    assert!(q(&CAPTURE, &format!("payment_intent_ref={p2}"))
        .await
        .is_empty());
    // Orders and invoices: status and buyer_ref.
    assert_eq!(
        records(&app, &ORDER, &format!("buyer_ref={ada}&status=paid"))
            .await
            .len(),
        2
    );
    assert!(q(&ORDER, "status=refunded").await.is_empty());
    assert_eq!(
        records(&app, &INVOICE, &format!("buyer_ref={ada}"))
            .await
            .len(),
        2
    );
    assert_eq!(q(&INVOICE, "status=paid").await.len(), 2);
    // Entitlements: status, product_ref, buyer_ref.
    let ents = records(&app, &ENTITLEMENT, &format!("product_ref={}", a.product)).await;
    assert_eq!(ents.len(), 1);
    assert_eq!(ents[0]["product_ref"], a.product.as_str());
    assert_eq!(q(&ENTITLEMENT, &format!("buyer_ref={ada}")).await.len(), 2);
    assert_eq!(q(&ENTITLEMENT, "status=active").await.len(), 2);
    assert!(q(&ENTITLEMENT, "status=revoked").await.is_empty());
    // Subscriptions: status, product_ref, buyer_ref.
    for query in [
        "status=active".to_owned(),
        format!("product_ref={}", b.product),
        format!("buyer_ref={ada}"),
    ] {
        assert_eq!(q(&SUBSCRIPTION, &query).await, of(&[&sub]), "{query}");
    }
    assert!(q(&SUBSCRIPTION, "status=incomplete").await.is_empty());
    assert!(q(&SUBSCRIPTION, &format!("product_ref={}", a.product))
        .await
        .is_empty());
    // Subscription changes: subscription_ref.
    let changes = records(&app, &CHANGE, &format!("subscription_ref={sub}")).await;
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0]["subscription_ref"], sub.as_str());
    // Stored payment methods: status and buyer_ref.
    assert_eq!(q(&METHOD, &format!("buyer_ref={ada}")).await.len(), 1);
    assert_eq!(q(&METHOD, "status=active").await.len(), 1);
    assert!(q(&METHOD, "status=detached").await.is_empty());
    // Journeys: status and buyer_ref.
    assert_eq!(q(&JOURNEY, "status=converted").await.len(), 2);
    assert_eq!(q(&JOURNEY, "status=open").await.len(), 2);
    assert_eq!(q(&JOURNEY, &format!("buyer_ref={ada}")).await.len(), 2);
    // Buyers: no filters.
    assert_eq!(records(&app, &BUYER, "").await.len(), 1);

    // Anything else is refused.
    for (path, field) in [
        (format!("{SESSIONS}?buyer_ref={ada}"), "buyer_ref"),
        (format!("{SESSIONS}?status=paid"), "status"),
        (
            format!("{SESSIONS}?config_ref=prd_N5xP3cV8bT1m"),
            "config_ref",
        ),
        (format!("{PAYMENTS}?status=complete"), "status"),
        (
            format!("{PAYMENTS}?product_ref={}", a.product),
            "product_ref",
        ),
        (
            format!("{PAYMENTS}?buyer_ref=cus_N5xP3cV8bT1m"),
            "buyer_ref",
        ),
        (format!("{CAPTURES}?status=paid"), "status"),
        (format!("{CAPTURES}?buyer_ref={ada}"), "buyer_ref"),
        (format!("{ORDERS}?colour=blue"), "colour"),
        (format!("{INVOICES}?status=open"), "status"),
        (
            format!("{ENTITLEMENTS}?payment_intent_ref={p1}"),
            "payment_intent_ref",
        ),
        (format!("{BUYERS}?status=active"), "status"),
        (format!("{BUYERS}?buyer_ref={ada}"), "buyer_ref"),
        (
            format!("{METHODS}?product_ref={}", a.product),
            "product_ref",
        ),
        (format!("{SUBSCRIPTIONS}?status=past_due"), "status"),
        (format!("{CHANGES}?status=started"), "status"),
        (
            format!("{CHANGES}?subscription_ref=sch_N5xP3cV8bT1m"),
            "subscription_ref",
        ),
        (format!("{JOURNEYS}?config_ref={one_time}"), "config_ref"),
    ] {
        let r = app.get(&path).send().await;
        assert_eq!(r.status, 400, "{path}: {}", r.text);
        invalid(&r, field);
    }
    // Unknown and malformed references of each kind.
    for kind in [
        &SESSION,
        &PAYMENT,
        &CAPTURE,
        &ORDER,
        &INVOICE,
        &ENTITLEMENT,
        &BUYER,
        &METHOD,
        &SUBSCRIPTION,
        &CHANGE,
        &JOURNEY,
    ] {
        let unknown = format!("{}N5xP3cV8bT1m", kind.prefix);
        app.get(&at(kind.path, &unknown, ""))
            .send()
            .await
            .expect_error(404, "not_found");
        let r = app.get(&at(kind.path, "prd_N5xP3cV8bT1m", "")).send().await;
        assert_eq!(r.status, 400, "{}: {}", kind.path, r.text);
        r.expect_error(400, "validation_failed");
    }
}

/// The references `kind`'s list holds under `query`.
async fn filtered(app: &TestApp, kind: &Kind, query: String) -> HashSet<String> {
    let path = format!("{}?{query}", kind.path);
    set(&refs(&list(app, &path).await, kind.ref_field))
}

/// Every item of a paged list, following `next_cursor` `limit` at a time.
async fn walk(app: &TestApp, path: &str, limit: u32) -> (Vec<Value>, usize) {
    let sep = if path.contains('?') { '&' } else { '?' };
    let mut all = Vec::new();
    let mut cursor = String::new();
    let mut pages = 0;
    loop {
        let r = get(app, &format!("{path}{sep}limit={limit}{cursor}")).await;
        let page = items(&r);
        pages += 1;
        assert!(pages < 100, "the walk does not end");
        let has_more = r.data()["has_more"].as_bool().expect("has_more");
        assert!(page.len() <= limit as usize);
        all.extend(page.iter().cloned());
        match r.data()["next_cursor"].as_str() {
            Some(c) => {
                assert!(has_more && page.len() == limit as usize, "{}", r.text);
                cursor = format!("&cursor={c}");
            }
            None => {
                assert!(!has_more, "{}", r.text);
                return (all, pages);
            }
        }
    }
}

/// Newest first: `created_at` descending, then the reference descending.
#[track_caller]
fn newest_first(list: &[Value], ref_field: &str) {
    let keys: Vec<(Timestamp, String)> = list
        .iter()
        .map(|i| (ts_of(&i["created_at"]), text(&i[ref_field])))
        .collect();
    let mut sorted = keys.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(keys, sorted);
}

async fn payments_page_with_cursors(app: TestApp) {
    let (config, _) = one_time_config(&app).await;
    let mut made = Vec::new();
    for i in 0..7 {
        let session = open_session(&app, &config, &format!("b{i}@example.com")).await;
        let pm = if i % 3 == 0 {
            "pm_card_declined"
        } else {
            "pm_card_visa"
        };
        let r = pay(&app, &session, card(pm)).await;
        r.expect(200);
        made.push(text(&r.data()["payment"]["payment_intent_ref"]));
    }
    let (all, pages) = walk(&app, PAYMENTS, 2).await;
    assert_eq!(pages, 4, "7 payments, 2 a page");
    let seen = refs(&all, "payment_intent_ref");
    assert_eq!(set(&seen).len(), seen.len(), "each once: {seen:?}");
    assert_eq!(set(&seen), set(&made));
    newest_first(&all, "payment_intent_ref");
    assert_eq!(
        all,
        list(&app, PAYMENTS).await,
        "the walk is the whole list"
    );
    // A filtered walk.
    let (succeeded, _) = walk(&app, &format!("{PAYMENTS}?status=succeeded"), 2).await;
    assert_eq!(succeeded.len(), 4);
    assert!(succeeded.iter().all(|p| p["status"] == "succeeded"));
    // A cursor of another filter is refused.
    let r = get(&app, &format!("{PAYMENTS}?limit=2")).await;
    let cursor = text(&r.data()["next_cursor"]);
    let r = app
        .get(&format!("{PAYMENTS}?status=failed&limit=2&cursor={cursor}"))
        .send()
        .await;
    invalid(&r, "cursor");
    let r = app
        .get(&format!("{ORDERS}?limit=2&cursor={cursor}"))
        .send()
        .await;
    invalid(&r, "cursor");
    // Sessions and invoices page too.
    let (sessions, _) = walk(&app, SESSIONS, 3).await;
    assert_eq!(sessions.len(), 7);
    newest_first(&sessions, "checkout_session_ref");
    let (invoices, _) = walk(&app, INVOICES, 2).await;
    assert_eq!(invoices.len(), 4);
    newest_first(&invoices, "invoice_ref");
}

// ---- isolation and scopes -----------------------------------------------------------

async fn environments_are_isolated(app: TestApp) {
    let (config, _) = monthly_config(&app).await;
    let d = paid_session(&app, &config, "ada@example.com").await;
    let session = text(&d["checkout_session"]["checkout_session_ref"]);
    let mut named = vec![
        (&SESSION, session.clone()),
        (&JOURNEY, text(&d["checkout_session"]["journey_ref"])),
        (&PAYMENT, text(&d["payment"]["payment_intent_ref"])),
        (&BUYER, text(&d["payment"]["buyer_ref"])),
        (&SUBSCRIPTION, text(&d["subscription"]["subscription_ref"])),
        (
            &METHOD,
            text(&d["subscription"]["stored_payment_method_ref"]),
        ),
    ];
    for kind in [&CAPTURE, &ORDER, &INVOICE, &ENTITLEMENT, &CHANGE] {
        let one = the_one(&app, kind, "").await;
        named.push((kind, text(&one[kind.ref_field])));
    }
    let live = app.live.secret.clone();
    for (kind, reference) in &named {
        app.get(&at(kind.path, reference, ""))
            .auth(&live)
            .send()
            .await
            .expect_error(404, "not_found");
        assert!(
            list_as(&app, &live, kind.path).await.is_empty(),
            "nothing in the live {}",
            kind.path
        );
    }
    // Live cannot pay a sandbox session, nor make one of a sandbox config.
    let r = app
        .post(&pay_path(&session), card("pm_card_visa"))
        .auth(&live)
        .send()
        .await;
    assert!(matches!(r.status, 404 | 503), "{}", r.text);
    create_session_as(&app, &live, session_body(&config, "ada@example.com"))
        .await
        .expect_error(404, "not_found");
    // A live filter on a sandbox reference finds nothing.
    let buyer = text(&d["payment"]["buyer_ref"]);
    assert!(
        list_as(&app, &live, &format!("{PAYMENTS}?buyer_ref={buyer}"))
            .await
            .is_empty()
    );
}

async fn webhook_buyer_scopes_name_existing_buyers(app: TestApp) {
    let r = app
        .post(ENDPOINTS, json!({"url": "https://example.com/hooks"}))
        .send()
        .await;
    r.expect(201);
    let endpoint = text(&r.data()["endpoint_ref"]);
    let path = format!("{ENDPOINTS}/{endpoint}/subscriptions");
    let sub = |scope_ref: &str| {
        json!({"public_event_type": "payment.succeeded", "scope_type": "buyer",
            "scope_ref": scope_ref, "dto_version": 2})
    };
    app.post(&path, sub(NO_BUYER))
        .send()
        .await
        .expect_error(404, "not_found");
    let (config, _) = one_time_config(&app).await;
    let d = paid_session(&app, &config, "ada@example.com").await;
    let buyer = text(&d["payment"]["buyer_ref"]);
    let r = app.post(&path, sub(&buyer)).send().await;
    r.expect(201);
    assert_eq!(r.data()["scope_type"], "buyer");
    assert_eq!(r.data()["scope_ref"], buyer.as_str());
    assert_eq!(
        items(&app.get(&path).send().await).len(),
        1,
        "the refused one was not made"
    );
    // A sandbox buyer is unknown to the live environment.
    let r = app
        .post(ENDPOINTS, json!({"url": "https://example.com/live"}))
        .auth(&app.live.secret)
        .send()
        .await;
    r.expect(201);
    let live_endpoint = text(&r.data()["endpoint_ref"]);
    app.post(
        &format!("{ENDPOINTS}/{live_endpoint}/subscriptions"),
        sub(&buyer),
    )
    .auth(&app.live.secret)
    .send()
    .await
    .expect_error(404, "not_found");
}

// ---- the contract's naming -------------------------------------------------------

/// Contract 1: a resource's own reference field is named like its path
/// parameter (`payment_ref` for `/payments/{payment_ref}`); contract 7:
/// `payment_ref` and `payment_intent_ref` name the same value.
async fn a_payment_names_its_own_reference(app: TestApp) {
    let (config, _) = one_time_config(&app).await;
    let d = paid_session(&app, &config, "ada@example.com").await;
    let p = &d["payment"];
    assert_eq!(p["payment_ref"], p["payment_intent_ref"], "{p}");
    is_ref(&p["payment_ref"], "pay_");
}

backend_tests!(
    a_one_time_payment_writes_each_record_once,
    other_sandbox_cards_succeed,
    declined_cards_write_a_failed_payment_only,
    pay_validation,
    saved_payment_methods,
    a_recurring_config_starts_a_subscription,
    authentication_approve_completes_the_payment,
    authentication_decline_and_nothing_waiting,
    authentication_of_a_subscription,
    paying_a_complete_or_expired_session_is_refused,
    expired_sessions_in_lists,
    live_pay_is_unavailable,
    session_validation,
    session_custom_fields,
    a_session_uses_the_published_version,
    a_session_keeps_its_prices,
    concurrent_pays_of_one_session,
    concurrent_pays_number_invoices_consecutively,
    pay_replays,
    list_filters,
    payments_page_with_cursors,
    environments_are_isolated,
    webhook_buyer_scopes_name_existing_buyers,
    a_payment_names_its_own_reference,
);
