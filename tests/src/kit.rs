//! The assertion kit the black-box tests share: reading the envelope
//! (`text`, `items`, `refs`), asserting the contract's shapes (`is_ref`,
//! `is_ts`, `has_fields`, `etag_matches`) and errors (`invalid`,
//! `invalid_under`, `refused`), and building bodies (`money`, `eur`,
//! `later`, `at`). One copy here; a test file that needs a variant names it
//! differently.

use crate::{Resp, TestApp};
use domain::Timestamp;
use serde_json::{json, Value};

/// `{base}/{reference}{tail}`.
pub fn at(base: &str, reference: &str, tail: &str) -> String {
    format!("{base}/{reference}{tail}")
}

pub fn text(v: &Value) -> String {
    v.as_str()
        .unwrap_or_else(|| panic!("a string, not {v}"))
        .to_owned()
}

pub fn items(r: &Resp) -> Vec<Value> {
    r.expect(200);
    r.data()["items"].as_array().expect("items").clone()
}

pub fn refs(list: &[Value], field: &str) -> Vec<String> {
    list.iter().map(|i| text(&i[field])).collect()
}

/// Asserts `validation_failed` with a detail on `field`.
#[track_caller]
pub fn invalid(r: &Resp, field: &str) {
    r.expect_error(400, "validation_failed");
    assert!(
        r.fields().iter().any(|f| f == field),
        "expected a detail on `{field}`: {}",
        r.text
    );
}

/// Asserts `validation_failed` with a detail on `field` or inside it
/// (`amount`, `amount.value`, `line_items.0.quantity`, …).
#[track_caller]
pub fn invalid_under(r: &Resp, field: &str) {
    r.expect_error(400, "validation_failed");
    assert!(
        r.fields().iter().any(|f| f == field
            || f.starts_with(&format!("{field}."))
            || f.starts_with(&format!("{field}["))),
        "expected a detail on `{field}` or inside it: {}",
        r.text
    );
}

/// Asserts `422 semantic_error` whose message names `word` (a state).
#[track_caller]
pub fn refused(r: &Resp, word: &str) {
    r.expect_error(422, "semantic_error");
    let message = r.json["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(word),
        "the message should name `{word}`: {}",
        r.text
    );
}

/// Asserts a reference of `prefix` and the contract's shape.
#[track_caller]
pub fn is_ref(v: &Value, prefix: &str) {
    let s = text(v);
    let rest = s.strip_prefix(prefix).unwrap_or_else(|| panic!("{s}"));
    assert!(
        rest.len() == 12 && rest.chars().all(|c| c.is_ascii_alphanumeric()),
        "{s}"
    );
}

#[track_caller]
pub fn is_ts(v: &Value) {
    let s = text(v);
    assert!(
        s.ends_with('Z') && Timestamp::parse(&s).is_some(),
        "timestamp {s}"
    );
}

#[track_caller]
pub fn ts_of(v: &Value) -> Timestamp {
    is_ts(v);
    Timestamp::parse(&text(v)).expect("timestamp")
}

/// Every listed field is present (`null` fields too: never omitted).
#[track_caller]
pub fn has_fields(v: &Value, fields: &[&str]) {
    let obj = v
        .as_object()
        .unwrap_or_else(|| panic!("an object, not {v}"));
    for f in fields {
        assert!(obj.contains_key(*f), "field `{f}` missing: {v}");
    }
}

/// The single-resource ETag header equals the body's `etag` field.
#[track_caller]
pub fn etag_matches(r: &Resp) -> String {
    let tag = r.etag();
    assert!(tag.starts_with('"') && tag.ends_with('"'), "strong: {tag}");
    assert_eq!(r.data()["etag"], tag.as_str(), "{}", r.text);
    tag
}

pub fn money(value: &str, currency: &str) -> Value {
    json!({"currency": currency, "unit": "minor", "value": value})
}

pub fn eur(value: &str) -> Value {
    money(value, "EUR")
}

/// RFC 3339 for `secs` seconds from now.
pub fn later(secs: i64) -> String {
    Timestamp::now().plus_seconds(secs).to_rfc3339()
}

/// `GET path` as the sandbox admin, which must answer 200.
pub async fn get(app: &TestApp, path: &str) -> Resp {
    let r = app.get(path).send().await;
    r.expect(200);
    r
}

/// Every item of the paged list at `path`, `limit` per page, checking the
/// paging rules on the way: full pages while `has_more`, a `next_cursor`
/// exactly then, and an end.
pub async fn walk(app: &TestApp, path: &str, limit: u32) -> Vec<Value> {
    walk_from(app, path, limit, None).await
}

/// Like `walk`, from the page after `cursor`.
pub async fn walk_from(
    app: &TestApp,
    path: &str,
    limit: u32,
    cursor: Option<String>,
) -> Vec<Value> {
    walk_pages(app, path, limit, cursor).await.0
}

/// Like `walk_from`, with the number of pages it read.
pub async fn walk_pages(
    app: &TestApp,
    path: &str,
    limit: u32,
    cursor: Option<String>,
) -> (Vec<Value>, usize) {
    let sep = if path.contains('?') { '&' } else { '?' };
    let mut all = Vec::new();
    let mut cursor = cursor.map(|c| format!("&cursor={c}")).unwrap_or_default();
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
pub fn newest_first(list: &[Value], ref_field: &str) {
    let keys: Vec<(Timestamp, String)> = list
        .iter()
        .map(|i| (ts_of(&i["created_at"]), text(&i[ref_field])))
        .collect();
    let mut sorted = keys.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(keys, sorted);
}

/// Every item of the list at `path`: one page of the largest size (100).
pub async fn list(app: &TestApp, path: &str) -> Vec<Value> {
    list_as(app, &app.sandbox.secret, path).await
}

/// Like `list`, with the credential `secret`.
pub async fn list_as(app: &TestApp, secret: &str, path: &str) -> Vec<Value> {
    let sep = if path.contains('?') { '&' } else { '?' };
    items(
        &app.get(&format!("{path}{sep}limit=100"))
            .auth(secret)
            .send()
            .await,
    )
}

/// Runs the timed work (scheduled starts, settlement, sandbox disputes)
/// for the rest of the test, as the dispatcher role would.
pub fn timed_work(app: &TestApp) {
    tokio::spawn(commerce::jobs::run(
        app.store.clone(),
        commerce::jobs::Rules::default(),
        tokio_util::sync::CancellationToken::new(),
    ));
}

/// The API's collections, well-formed references that name nothing, and
/// the fields of resources more than one module reads. Modules take them
/// with `use billing_tests::kit::api::*;`.
pub mod api {
    pub const PRODUCTS: &str = "/api/v1/products";
    pub const PRICES: &str = "/api/v1/prices";
    pub const OFFERS: &str = "/api/v1/offers";
    pub const PLAN: &str = "/api/v1/promotions/plan";
    pub const APPLY: &str = "/api/v1/promotions/apply";
    pub const CONFIGS: &str = "/api/v1/checkout-configs";
    pub const SESSIONS: &str = "/api/v1/checkout-sessions";
    pub const PAYMENTS: &str = "/api/v1/payments";
    pub const CAPTURES: &str = "/api/v1/captures";
    pub const ORDERS: &str = "/api/v1/orders";
    pub const INVOICES: &str = "/api/v1/invoices";
    pub const ENTITLEMENTS: &str = "/api/v1/entitlements";
    pub const BUYERS: &str = "/api/v1/buyers";
    pub const METHODS: &str = "/api/v1/payment_methods";
    pub const SUBSCRIPTIONS: &str = "/api/v1/subscriptions";
    pub const CHANGES: &str = "/api/v1/subscription-changes";
    pub const JOURNEYS: &str = "/api/v1/journeys";
    pub const REFUNDS: &str = "/api/v1/refunds";
    pub const DISPUTES: &str = "/api/v1/disputes";
    pub const PAYOUTS: &str = "/api/v1/payouts";
    pub const PARTICIPATIONS: &str = "/api/v1/participations";
    pub const ENDPOINTS: &str = "/api/v1/webhook_endpoints";
    /// A checkout config's success URL.
    pub const OK_URL: &str = "https://example.com/ok";

    // Well-formed references that name nothing.
    pub const NO_PRODUCT: &str = "prd_N5xP3cV8bT1m";
    pub const NO_PRICE: &str = "pri_N5xP3cV8bT1m";
    pub const NO_OFFER: &str = "ofr_N5xP3cV8bT1m";
    pub const NO_CONFIG: &str = "cco_N5xP3cV8bT1m";
    pub const NO_SESSION: &str = "cs_N5xP3cV8bT1m";
    pub const NO_METHOD: &str = "spm_N5xP3cV8bT1m";
    pub const NO_BUYER: &str = "buy_N5xP3cV8bT1m";
    pub const NO_PAYMENT: &str = "pay_N5xP3cV8bT1m";
    pub const NO_REFUND: &str = "ref_N5xP3cV8bT1m";
    pub const NO_DISPUTE: &str = "dsp_N5xP3cV8bT1m";

    /// A dispute's fields (contract 10.1).
    pub const DISPUTE_FIELDS: &[&str] = &[
        "dispute_ref",
        "payment_intent_ref",
        "amount",
        "kind",
        "status",
        "reason_safe",
        "opened_at",
        "evidence_due_at",
        "resolved_at",
        "etag",
    ];
}

use api::*;

// ---- the catalogue and paying ------------------------------------------------------

/// Creates from `body` at `path` (201) with the credential `secret`;
/// returns the new resource's `ref_field`.
pub async fn create_as(
    app: &TestApp,
    secret: &str,
    path: &str,
    body: Value,
    ref_field: &str,
) -> String {
    let r = app.post(path, body).auth(secret).send().await;
    r.expect(201);
    text(&r.data()[ref_field])
}

/// Publishes `{base}/{reference}` (200) with the credential `secret`.
pub async fn publish_as(app: &TestApp, secret: &str, base: &str, reference: &str) {
    app.post(&at(base, reference, "/publish"), json!({}))
        .auth(secret)
        .send()
        .await
        .expect(200);
}

/// A published product with a published price, and its offer.
#[derive(Debug, Clone)]
pub struct Sellable {
    pub product: String,
    pub price: String,
    pub offer: String,
}

/// Publishes a product `name` and a price of `amount` for it (one-time,
/// or recurring every `interval`) with the credential `secret`; the one
/// offer the price made.
pub async fn sellable_as(
    app: &TestApp,
    secret: &str,
    name: &str,
    amount: Value,
    interval: Option<&str>,
) -> Sellable {
    let product = create_as(app, secret, PRODUCTS, json!({"name": name}), "product_ref").await;
    publish_as(app, secret, PRODUCTS, &product).await;
    let body = match interval {
        Some(i) => {
            json!({"product_ref": product, "amount": amount, "type": "recurring", "interval": i})
        }
        None => json!({"product_ref": product, "amount": amount, "type": "one_time"}),
    };
    let price = create_as(app, secret, PRICES, body, "price_ref").await;
    publish_as(app, secret, PRICES, &price).await;
    let offers = list_as(app, secret, &format!("{OFFERS}?product_ref={product}")).await;
    assert_eq!(offers.len(), 1, "one offer per product: {offers:?}");
    Sellable {
        product,
        price,
        offer: text(&offers[0]["offer_ref"]),
    }
}

/// `sellable_as` in the sandbox.
pub async fn sellable(
    app: &TestApp,
    name: &str,
    amount: Value,
    interval: Option<&str>,
) -> Sellable {
    sellable_as(app, &app.sandbox.secret, name, amount, interval).await
}

/// Creates a checkout config from `body` and publishes it; its reference.
pub async fn published_config(app: &TestApp, body: Value) -> String {
    let secret = &app.sandbox.secret;
    let config = create_as(app, secret, CONFIGS, body, "config_ref").await;
    publish_as(app, secret, CONFIGS, &config).await;
    config
}

/// A published config selling one of each of `amounts` (EUR, one-time),
/// each of its own product.
pub async fn one_time_config(app: &TestApp, amounts: &[&str]) -> String {
    let mut line_items = Vec::new();
    for amount in amounts {
        let s = sellable(app, "Product", eur(amount), None).await;
        line_items.push(json!({"offer_ref": s.offer, "quantity": 1}));
    }
    published_config(
        app,
        json!({"name": "Checkout", "line_items": line_items, "success_url": OK_URL}),
    )
    .await
}

/// Opens a session of `config` for a buyer of its own; its reference.
pub async fn new_session(app: &TestApp, config: &str) -> String {
    let email = format!("{}@example.com", crate::unique_key());
    let body = json!({"config_ref": config, "buyer": {"email": email, "name": "Ada Lovelace"}});
    create_as(
        app,
        &app.sandbox.secret,
        SESSIONS,
        body,
        "checkout_session_ref",
    )
    .await
}

/// Pays `session` with the payment method `pm` (200); the response.
pub async fn pay(app: &TestApp, session: &str, pm: &str) -> Resp {
    let r = app
        .post(
            &at(SESSIONS, session, "/pay"),
            json!({"payment_method": pm}),
        )
        .send()
        .await;
    r.expect(200);
    r
}

/// Pays a new session of `config` with `pm` for a buyer of its own; the
/// payment, which succeeded.
pub async fn paid_payment(app: &TestApp, config: &str, pm: &str) -> Value {
    let session = new_session(app, config).await;
    let p = pay(app, &session, pm).await.data()["payment"].clone();
    assert_eq!(p["status"], "succeeded", "{p}");
    p
}

/// The one order of `payment`'s buyer (a buyer of its own), which is
/// `payment`'s.
pub async fn order_of(app: &TestApp, payment: &Value) -> Value {
    let buyer = text(&payment["buyer_ref"]);
    let orders = list(app, &format!("{ORDERS}?buyer_ref={buyer}")).await;
    assert_eq!(orders.len(), 1, "{orders:?}");
    assert_eq!(
        orders[0]["payment_intent_ref"],
        payment["payment_intent_ref"]
    );
    orders[0].clone()
}

// ---- webhooks ----------------------------------------------------------------------

/// Creates an endpoint for `url` in the sandbox; its reference and the
/// response.
pub async fn create_endpoint(app: &TestApp, url: &str) -> (String, Resp) {
    let r = app.post(ENDPOINTS, json!({ "url": url })).send().await;
    r.expect(201);
    (text(&r.data()["endpoint_ref"]), r)
}

/// Pauses or resumes (`action`) `endpoint`, whatever its version.
pub async fn set_paused(app: &TestApp, endpoint: &str, action: &str) {
    app.action(&at(ENDPOINTS, endpoint, &format!("/{action}")), "*")
        .send()
        .await
        .expect(200);
}

/// The newest delivery of `endpoint`.
pub async fn newest_delivery(app: &TestApp, endpoint: &str) -> Value {
    let r = get(app, &at(ENDPOINTS, endpoint, "/deliveries")).await;
    r.data()["items"][0].clone()
}

/// Every delivery of `endpoint` (one page of 100).
pub async fn deliveries(app: &TestApp, endpoint: &str) -> Vec<Value> {
    list(app, &at(ENDPOINTS, endpoint, "/deliveries")).await
}

/// Waits (20 s at most) until the endpoint's newest delivery has `status`.
pub async fn settled(app: &TestApp, endpoint: &str, status: &str) -> Value {
    app.eventually(20, || async {
        let d = newest_delivery(app, endpoint).await;
        (d["status"] == status).then_some(d)
    })
    .await
}

/// Every attempt of `delivery` (one page of 100).
pub async fn attempts(app: &TestApp, delivery: &str) -> Vec<Value> {
    list(
        app,
        &format!("/api/v1/webhook_deliveries/{delivery}/attempts"),
    )
    .await
}

/// Sends the same POST twice under one key (with `If-Match: tag` when
/// given); the second must be a replay: the same status, marked
/// `Idempotent-Replayed: true`, the first not marked.
pub async fn twice(app: &TestApp, path: &str, tag: Option<&str>, body: Value) -> (Resp, Resp) {
    let key = crate::unique_key();
    let call = || {
        let c = app.req("POST", path).idem(&key).json(&body);
        match tag {
            Some(t) => c.if_match(t),
            None => c,
        }
    };
    let first = call().send().await;
    let again = call().send().await;
    assert_eq!(again.status, first.status, "{}", again.text);
    assert_eq!(
        again.header("idempotent-replayed"),
        Some("true"),
        "{}",
        again.text
    );
    assert_eq!(first.header("idempotent-replayed"), None);
    (first, again)
}

/// Asserts that the deliveries `endpoint` lists are exactly the requests
/// in `got`, all succeeded; `who` starts the message.
pub async fn listed_as_received(
    app: &TestApp,
    endpoint: &str,
    got: &[crate::receiver::Received],
    who: &str,
) {
    let listed: std::collections::HashSet<String> = deliveries(app, endpoint)
        .await
        .iter()
        .map(|d| {
            assert_eq!(d["status"], "succeeded", "{d}");
            text(&d["delivery_ref"])
        })
        .collect();
    let received: std::collections::HashSet<String> = got
        .iter()
        .map(|r| r.header("webhook-id").to_owned())
        .collect();
    assert_eq!(listed, received, "{who}deliveries listed vs received");
}

/// Waits until `receiver` got `total` requests and `endpoint` lists
/// `total` deliveries, all succeeded.
pub async fn all_succeeded(
    app: &TestApp,
    receiver: &crate::receiver::TestReceiver,
    endpoint: &str,
    total: usize,
) {
    app.eventually(30, || async { (receiver.count() >= total).then_some(()) })
        .await;
    app.eventually(15, || async {
        let items = deliveries(app, endpoint).await;
        (items.len() >= total && items.iter().all(|d| d["status"] == "succeeded")).then_some(())
    })
    .await;
}

/// The `custom_field_ref` of each custom field of a config answer, by key.
pub fn field_refs(config: &Value) -> std::collections::BTreeMap<String, String> {
    config["custom_fields"]
        .as_array()
        .expect("custom_fields")
        .iter()
        .map(|f| {
            is_ref(&f["custom_field_ref"], "cf_");
            (text(&f["key"]), text(&f["custom_field_ref"]))
        })
        .collect()
}

/// A retrieve of `{base}/{reference}`: 200, its ETag header the body's
/// `etag`; the resource.
pub async fn retrieve(app: &TestApp, base: &str, reference: &str) -> Value {
    let r = get(app, &at(base, reference, "")).await;
    assert_eq!(
        r.header("etag"),
        r.data()["etag"].as_str(),
        "the ETag header is the resource's etag: {}",
        r.text
    );
    r.data().clone()
}
