//! Checkout sessions, pay and the records a payment makes (issue 17;
//! contract sections 8, 10 and 10.1; the wire shapes and decisions of
//! `docs/checkout.md`), black-box, on every backend: sessions and their
//! price snapshot, the sandbox cards, stored payment methods, subscriptions,
//! authentication, refused pays, the live environment's missing processor,
//! concurrent pays, invoice numbering, idempotent replays, lists and their
//! filters, isolation between environments and the buyer scope of webhook
//! subscriptions.

use billing_tests::kit::api::*;
use billing_tests::kit::{
    self, at, etag_matches, eur, get, has_fields, invalid, is_ref, is_ts, items, list, list_as,
    refs, refused, text, ts_of, Sellable,
};
use billing_tests::{backend_tests, unique_key, Resp, TestApp};
use domain::Timestamp;
use serde_json::{json, Value};
use std::collections::HashSet;

const NAME: &str = "Ada Lovelace";

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
    "lines",
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

async fn get_as(app: &TestApp, secret: &str, path: &str) -> Resp {
    let r = app.get(path).auth(secret).send().await;
    r.expect(200);
    r
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

/// `m` is `buyer`'s stored payment method `spm`: an active visa card
/// ending 4242.
#[track_caller]
fn is_stored_visa(m: &Value, spm: &str, buyer: &str) {
    assert_eq!(m["stored_payment_method_ref"], spm);
    assert_eq!(m["buyer_ref"], buyer);
    assert_eq!(m["brand"], "visa");
    assert_eq!(m["last4"], "4242");
    assert_eq!(m["status"], "active");
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

/// An invoice's lines (contract 14.1), each with its fields and in the
/// invoice's currency, after checking that they sum to `amount_total`.
#[track_caller]
fn invoice_lines(invoice: &Value) -> Vec<Value> {
    let lines = invoice["lines"]
        .as_array()
        .unwrap_or_else(|| panic!("an invoice has lines: {invoice}"))
        .clone();
    assert!(!lines.is_empty(), "at least one line: {invoice}");
    let currency = &invoice["amount_total"]["currency"];
    let mut sum: i128 = 0;
    for l in &lines {
        has_fields(
            l,
            &[
                "kind",
                "amount",
                "price_ref",
                "period_start",
                "period_end",
                "description",
            ],
        );
        assert_eq!(&l["amount"]["currency"], currency, "{invoice}");
        assert_eq!(l["amount"]["unit"], "minor");
        sum += text(&l["amount"]["value"])
            .parse::<i128>()
            .expect("a line amount");
    }
    let total: i128 = text(&invoice["amount_total"]["value"])
        .parse()
        .expect("total");
    assert_eq!(sum, total, "amount_total is the lines' sum: {invoice}");
    lines
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

/// A published product (`Product`) with a published price, and its offer.
async fn sellable_as(
    app: &TestApp,
    secret: &str,
    amount: Value,
    interval: Option<&str>,
) -> Sellable {
    kit::sellable_as(app, secret, "Product", amount, interval).await
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

mod sessions_and_pay;
use sessions_and_pay::*;
mod one_time_payments;
use one_time_payments::*;
mod stored_payment_methods;
use stored_payment_methods::*;
mod subscriptions;
use subscriptions::*;
mod authentication;
use authentication::*;
mod refused_pays;
use refused_pays::*;
mod sessions;
use sessions::*;
mod concurrency;
use concurrency::*;
mod idempotency;
use idempotency::*;
mod lists;
use lists::*;
mod isolation_and_scopes;
use isolation_and_scopes::*;
mod naming;
use naming::*;

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
