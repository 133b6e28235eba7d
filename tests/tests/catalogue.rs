//! The catalogue and checkout configs (contract sections 8, 10 and 10.1;
//! the wire shapes and decisions of `docs/catalogue.md`), black-box, on
//! every backend: products, prices, offers, repricing, promotion plans and
//! their application, checkout configs and their versions, with each
//! operation's shapes, errors, idempotent replays, concurrency, isolation
//! between environments, lists, and the product scope of webhook
//! subscriptions.

use billing_tests::kit::{
    at, etag_matches, eur, has_fields, invalid, invalid_under, is_ref, is_ts, items, later, money,
    refs, refused, text, ts_of,
};
use billing_tests::{backend_tests, unique_key, Resp, TestApp};
use domain::Timestamp;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashSet};

const PRODUCTS: &str = "/api/v1/products";
const PRICES: &str = "/api/v1/prices";
const OFFERS: &str = "/api/v1/offers";
const PLAN: &str = "/api/v1/promotions/plan";
const APPLY: &str = "/api/v1/promotions/apply";
const CONFIGS: &str = "/api/v1/checkout-configs";
const ENDPOINTS: &str = "/api/v1/webhook_endpoints";
const OK_URL: &str = "https://example.com/ok";

/// Well-formed references that name nothing.
const NO_PRODUCT: &str = "prd_N5xP3cV8bT1m";
const NO_PRICE: &str = "pri_N5xP3cV8bT1m";
const NO_OFFER: &str = "ofr_N5xP3cV8bT1m";
const NO_CONFIG: &str = "cco_N5xP3cV8bT1m";

const PRODUCT_FIELDS: &[&str] = &[
    "product_ref",
    "name",
    "description",
    "status",
    "created_at",
    "updated_at",
    "published_at",
    "etag",
];
const PRICE_FIELDS: &[&str] = &[
    "price_ref",
    "product_ref",
    "amount",
    "type",
    "interval",
    "status",
    "created_at",
    "published_at",
    "superseded_at",
    "etag",
];
const OFFER_FIELDS: &[&str] = &[
    "offer_ref",
    "product_ref",
    "price_ref",
    "base_amount",
    "amount",
    "promotion_ref",
    "status",
    "type",
    "interval",
    "created_at",
    "updated_at",
    "etag",
];
const PROMOTION_FIELDS: &[&str] = &[
    "promotion_ref",
    "offer_refs",
    "discount",
    "starts_at",
    "ends_at",
    "status",
    "created_at",
    "etag",
];
const CONFIG_FIELDS: &[&str] = &[
    "config_ref",
    "name",
    "status",
    "current_version",
    "published_version",
    "line_items",
    "mode",
    "success_url",
    "cancel_url",
    "custom_fields",
    "created_at",
    "updated_at",
    "etag",
];
const CUSTOM_FIELD_FIELDS: &[&str] = &[
    "custom_field_ref",
    "key",
    "label",
    "type",
    "required",
    "options",
];

// ---- helpers ------------------------------------------------------------------

async fn get(app: &TestApp, path: &str) -> Resp {
    let r = app.get(path).send().await;
    r.expect(200);
    r
}

async fn list(app: &TestApp, path: &str) -> Vec<Value> {
    items(&app.get(path).send().await)
}

async fn etag_of(app: &TestApp, path: &str) -> String {
    get(app, path).await.etag()
}

/// A state-changing action with `{}` and a fresh idempotency key.
async fn publish(app: &TestApp, path: &str) -> Resp {
    app.post(path, json!({})).send().await
}

async fn create_product(app: &TestApp, name: &str) -> Value {
    let r = app.post(PRODUCTS, json!({ "name": name })).send().await;
    r.expect(201);
    r.data().clone()
}

async fn published_product(app: &TestApp) -> String {
    let product = text(&create_product(app, "Product").await["product_ref"]);
    publish(app, &at(PRODUCTS, &product, "/publish"))
        .await
        .expect(200);
    product
}

/// A price body: `recurring` when `interval` is given, else `one_time`.
fn price_body(product: &str, amount: Value, interval: Option<&str>) -> Value {
    match interval {
        Some(i) => {
            json!({"product_ref": product, "amount": amount, "type": "recurring", "interval": i})
        }
        None => json!({"product_ref": product, "amount": amount, "type": "one_time"}),
    }
}

async fn create_price(
    app: &TestApp,
    product: &str,
    amount: Value,
    interval: Option<&str>,
) -> String {
    let r = app
        .post(PRICES, price_body(product, amount, interval))
        .send()
        .await;
    r.expect(201);
    text(&r.data()["price_ref"])
}

async fn price(app: &TestApp, price: &str) -> Value {
    get(app, &at(PRICES, price, "")).await.data().clone()
}

async fn offer(app: &TestApp, offer: &str) -> Value {
    get(app, &at(OFFERS, offer, "")).await.data().clone()
}

/// The product's one offer, found through the list filter.
async fn offer_of(app: &TestApp, product: &str) -> Value {
    let offers = list(app, &format!("{OFFERS}?product_ref={product}")).await;
    assert_eq!(offers.len(), 1, "one offer per product: {offers:?}");
    offers[0].clone()
}

/// A published product with a published price, and its offer.
struct Sellable {
    product: String,
    price: String,
    offer: String,
}

async fn sellable(app: &TestApp, amount: Value, interval: Option<&str>) -> Sellable {
    let product = published_product(app).await;
    let price = create_price(app, &product, amount, interval).await;
    publish(app, &at(PRICES, &price, "/publish"))
        .await
        .expect(200);
    let offer = text(&offer_of(app, &product).await["offer_ref"]);
    Sellable {
        product,
        price,
        offer,
    }
}

async fn offer_ref(app: &TestApp, amount: Value, interval: Option<&str>) -> String {
    sellable(app, amount, interval).await.offer
}

fn promo(offers: &[&str], discount: Value) -> Value {
    json!({"offer_refs": offers, "discount": discount})
}

/// `body` with `field` set to `value`.
fn with(mut body: Value, field: &str, value: Value) -> Value {
    body[field] = value;
    body
}

fn without(mut body: Value, field: &str) -> Value {
    body.as_object_mut().expect("object").remove(field);
    body
}

/// planPromotion: no idempotency key, no precondition.
async fn plan(app: &TestApp, body: &Value) -> Resp {
    app.req("POST", PLAN).json(body).send().await
}

/// Plans `body`; checks the plan's shape and returns its ETag and data.
async fn planned(app: &TestApp, body: &Value) -> (String, Value) {
    let r = plan(app, body).await;
    r.expect(200);
    has_fields(r.data(), &["changes", "plan_digest", "etag"]);
    let digest = text(&r.data()["plan_digest"]);
    let tag = etag_matches(&r);
    assert_eq!(tag, format!("\"{digest}\""), "{}", r.text);
    (tag, r.data().clone())
}

async fn apply(app: &TestApp, body: &Value, tag: &str) -> Resp {
    app.post(APPLY, body.clone()).if_match(tag).send().await
}

/// The change a plan lists for `offer`.
#[track_caller]
fn change_for(plan: &Value, offer: &str) -> Value {
    let changes = plan["changes"].as_array().expect("changes");
    let found: Vec<&Value> = changes.iter().filter(|c| c["offer_ref"] == offer).collect();
    assert_eq!(found.len(), 1, "one change for {offer}: {plan}");
    found[0].clone()
}

fn line(offer: &str, quantity: u32) -> Value {
    json!({"offer_ref": offer, "quantity": quantity})
}

fn config_body(line_items: Vec<Value>) -> Value {
    json!({"name": "Checkout", "line_items": line_items, "success_url": OK_URL})
}

async fn create_config(app: &TestApp, body: Value) -> Resp {
    app.post(CONFIGS, body).send().await
}

async fn config(app: &TestApp, items: Vec<Value>) -> String {
    let r = create_config(app, config_body(items)).await;
    r.expect(201);
    text(&r.data()["config_ref"])
}

/// The `(offer_ref, quantity)` pairs of a config's line items.
fn lines_of(config: &Value) -> Vec<(String, u64)> {
    config["line_items"]
        .as_array()
        .expect("line_items")
        .iter()
        .map(|l| {
            (
                text(&l["offer_ref"]),
                l["quantity"].as_u64().expect("quantity"),
            )
        })
        .collect()
}

/// Every item of a paged list, following `next_cursor` `limit` at a time.
async fn walk(app: &TestApp, path: &str, limit: u32) -> Vec<Value> {
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
                return all;
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

/// Asserts the same references, each exactly once.
#[track_caller]
fn same_once(seen: &[String], expected: &[String]) {
    let unique: HashSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "seen twice: {seen:?}");
    let want: HashSet<&String> = expected.iter().collect();
    assert_eq!(unique, want);
}

// ---- products -------------------------------------------------------------------

async fn products(app: TestApp) {
    let r = app.post(PRODUCTS, json!({"name": "Pro plan"})).send().await;
    r.expect(201);
    let tag = etag_matches(&r);
    let p = r.data().clone();
    has_fields(&p, PRODUCT_FIELDS);
    is_ref(&p["product_ref"], "prd_");
    assert_eq!(p["name"], "Pro plan");
    assert!(p["description"].is_null());
    assert_eq!(p["status"], "draft");
    is_ts(&p["created_at"]);
    is_ts(&p["updated_at"]);
    assert!(p["published_at"].is_null());
    let product = text(&p["product_ref"]);

    let got = get(&app, &at(PRODUCTS, &product, "")).await;
    assert_eq!(etag_matches(&got), tag);
    assert_eq!(*got.data(), p);

    let r = publish(&app, &at(PRODUCTS, &product, "/publish")).await;
    r.expect(200);
    let published = etag_matches(&r);
    assert_ne!(published, tag, "publishing changes the ETag");
    let d = r.data().clone();
    has_fields(&d, PRODUCT_FIELDS);
    assert_eq!(d["product_ref"], product.as_str());
    assert_eq!(d["name"], "Pro plan");
    assert_eq!(d["status"], "published");
    assert!(ts_of(&d["published_at"]) >= ts_of(&d["created_at"]));
    assert_eq!(d["created_at"], p["created_at"]);
    is_ts(&d["updated_at"]);
    let got = get(&app, &at(PRODUCTS, &product, "")).await;
    assert_eq!(got.etag(), published);
    assert_eq!(*got.data(), d);

    // A description, given or null.
    let r = app
        .post(
            PRODUCTS,
            json!({"name": "Team plan", "description": "For teams"}),
        )
        .send()
        .await;
    r.expect(201);
    assert_eq!(r.data()["description"], "For teams");
    let r = app
        .post(PRODUCTS, json!({"name": "Solo", "description": null}))
        .send()
        .await;
    r.expect(201);
    assert!(r.data()["description"].is_null());
}

/// docs/catalogue.md: publish takes `{}`, "an empty body or no body".
/// A POST body is a JSON object, `{}` where no field is needed (contract
/// 1): a publish without one is refused and changes nothing.
async fn publish_needs_a_json_object(app: TestApp) {
    let product = text(&create_product(&app, "Solo").await["product_ref"]);
    let r = app
        .req("POST", &at(PRODUCTS, &product, "/publish"))
        .idem(&unique_key())
        .send()
        .await;
    invalid(&r, "body");
    let r = app.get(&at(PRODUCTS, &product, "")).send().await;
    r.expect(200);
    assert_eq!(r.data()["status"], "draft");
}

async fn product_validation(app: TestApp) {
    for (body, field) in [
        (json!({}), "name"),
        (json!({"name": ""}), "name"),
        (json!({"name": "x".repeat(201)}), "name"),
        (json!({"name": 7}), "name"),
        (
            json!({"name": "ok", "description": "d".repeat(1001)}),
            "description",
        ),
        (json!({"name": "ok", "colour": "blue"}), "colour"),
    ] {
        let r = app.post(PRODUCTS, body.clone()).send().await;
        invalid(&r, field);
    }
    assert!(list(&app, PRODUCTS).await.is_empty(), "nothing was made");
    // The limits themselves are allowed.
    let r = app
        .post(
            PRODUCTS,
            json!({"name": "x".repeat(200), "description": "d".repeat(1000)}),
        )
        .send()
        .await;
    r.expect(201);
    // Lengths count characters, not bytes.
    let r = app
        .post(
            PRODUCTS,
            json!({"name": "é".repeat(200), "description": "ü".repeat(1000)}),
        )
        .send()
        .await;
    r.expect(201);
    assert_eq!(r.data()["name"], "é".repeat(200));
    // Without a key: idempotency_key_required.
    app.req("POST", PRODUCTS)
        .json(&json!({"name": "no key"}))
        .send()
        .await
        .expect_error(400, "idempotency_key_required");
}

// ---- prices and offers ----------------------------------------------------------

async fn prices_and_offers(app: TestApp) {
    let product = published_product(&app).await;
    let r = app
        .post(PRICES, price_body(&product, eur("1999"), None))
        .send()
        .await;
    r.expect(201);
    let tag = etag_matches(&r);
    let p = r.data().clone();
    has_fields(&p, PRICE_FIELDS);
    is_ref(&p["price_ref"], "pri_");
    assert_eq!(p["product_ref"], product.as_str());
    assert_eq!(p["amount"], eur("1999"));
    assert_eq!(p["type"], "one_time");
    assert!(p["interval"].is_null());
    assert_eq!(p["status"], "draft");
    is_ts(&p["created_at"]);
    assert!(p["published_at"].is_null());
    assert!(p["superseded_at"].is_null());
    let pr = text(&p["price_ref"]);
    let got = get(&app, &at(PRICES, &pr, "")).await;
    assert_eq!(etag_matches(&got), tag);
    assert_eq!(*got.data(), p);
    // No offer before the first publish.
    assert!(list(&app, &format!("{OFFERS}?product_ref={product}"))
        .await
        .is_empty());

    let r = publish(&app, &at(PRICES, &pr, "/publish")).await;
    r.expect(200);
    assert_ne!(etag_matches(&r), tag);
    let d = r.data();
    has_fields(d, PRICE_FIELDS);
    assert_eq!(d["price_ref"], pr.as_str());
    assert_eq!(d["status"], "published");
    is_ts(&d["published_at"]);
    assert!(d["superseded_at"].is_null());
    assert_eq!(d["amount"], eur("1999"));

    // The first publish makes the offer.
    let o = offer_of(&app, &product).await;
    has_fields(&o, OFFER_FIELDS);
    is_ref(&o["offer_ref"], "ofr_");
    assert_eq!(o["product_ref"], product.as_str());
    assert_eq!(o["price_ref"], pr.as_str());
    assert_eq!(o["base_amount"], eur("1999"));
    assert_eq!(o["amount"], eur("1999"));
    assert!(o["promotion_ref"].is_null());
    assert_eq!(o["status"], "active");
    assert_eq!(o["type"], "one_time");
    assert!(o["interval"].is_null());
    is_ts(&o["created_at"]);
    is_ts(&o["updated_at"]);
    let got = get(&app, &at(OFFERS, &text(&o["offer_ref"]), "")).await;
    etag_matches(&got);
    assert_eq!(*got.data(), o, "the listed offer is the retrieved one");

    // Recurring prices carry their interval, on the price and the offer.
    for interval in ["month", "year"] {
        let product = published_product(&app).await;
        let r = app
            .post(PRICES, price_body(&product, eur("900"), Some(interval)))
            .send()
            .await;
        r.expect(201);
        assert_eq!(r.data()["type"], "recurring");
        assert_eq!(r.data()["interval"], interval);
        let pr = text(&r.data()["price_ref"]);
        publish(&app, &at(PRICES, &pr, "/publish"))
            .await
            .expect(200);
        let o = offer_of(&app, &product).await;
        assert_eq!(o["type"], "recurring");
        assert_eq!(o["interval"], interval);
        assert_eq!(o["price_ref"], pr.as_str());
    }

    // A price of a draft product may be created (not published).
    let draft = text(&create_product(&app, "Draft").await["product_ref"]);
    app.post(PRICES, price_body(&draft, eur("1"), None))
        .send()
        .await
        .expect(201);
}

async fn refused_transitions(app: TestApp) {
    // A published product.
    let product = published_product(&app).await;
    let r = publish(&app, &at(PRODUCTS, &product, "/publish")).await;
    refused(&r, "published");

    // A price of a draft product: the message names the product's state.
    let draft = text(&create_product(&app, "Draft").await["product_ref"]);
    let pr = create_price(&app, &draft, eur("100"), None).await;
    let r = publish(&app, &at(PRICES, &pr, "/publish")).await;
    refused(&r, "draft");
    assert_eq!(price(&app, &pr).await["status"], "draft");
    assert!(list(&app, &format!("{OFFERS}?product_ref={draft}"))
        .await
        .is_empty());

    // A published price.
    let p1 = create_price(&app, &product, eur("100"), None).await;
    publish(&app, &at(PRICES, &p1, "/publish"))
        .await
        .expect(200);
    let r = publish(&app, &at(PRICES, &p1, "/publish")).await;
    refused(&r, "published");

    // A superseded price.
    let p2 = create_price(&app, &product, eur("200"), None).await;
    publish(&app, &at(PRICES, &p2, "/publish"))
        .await
        .expect(200);
    assert_eq!(price(&app, &p1).await["status"], "superseded");
    let r = publish(&app, &at(PRICES, &p1, "/publish")).await;
    refused(&r, "superseded");
    let o = offer_of(&app, &product).await;
    assert_eq!(o["price_ref"], p2.as_str(), "the refusal moved nothing");
    assert_eq!(price(&app, &p2).await["status"], "published");
}

async fn a_second_price_supersedes_the_first(app: TestApp) {
    let s = sellable(&app, eur("1999"), None).await;
    let offer_path = at(OFFERS, &s.offer, "");
    let before = get(&app, &offer_path).await;
    let p2 = create_price(&app, &s.product, eur("2999"), None).await;
    assert_eq!(
        offer(&app, &s.offer).await["price_ref"],
        s.price.as_str(),
        "a draft price moves nothing"
    );
    publish(&app, &at(PRICES, &p2, "/publish"))
        .await
        .expect(200);

    let old = price(&app, &s.price).await;
    assert_eq!(old["status"], "superseded");
    is_ts(&old["superseded_at"]);
    let new = price(&app, &p2).await;
    assert_eq!(new["status"], "published");
    assert!(new["superseded_at"].is_null());

    let o = offer_of(&app, &s.product).await;
    assert_eq!(o["offer_ref"], s.offer.as_str(), "the same offer moved");
    assert_eq!(o["price_ref"], p2.as_str());
    assert_eq!(o["base_amount"], eur("2999"));
    assert_eq!(o["amount"], eur("2999"));
    assert_eq!(o["created_at"], before.data()["created_at"]);
    assert_ne!(etag_of(&app, &offer_path).await, before.etag());

    let published = list(
        &app,
        &format!("{PRICES}?product_ref={}&status=published", s.product),
    )
    .await;
    assert_eq!(refs(&published, "price_ref"), vec![p2.clone()]);
    let superseded = list(
        &app,
        &format!("{PRICES}?product_ref={}&status=superseded", s.product),
    )
    .await;
    assert_eq!(refs(&superseded, "price_ref"), vec![s.price.clone()]);
}

// ---- money and intervals --------------------------------------------------------

/// Money the contract refuses (section 8), with what is wrong.
fn bad_amounts() -> Vec<(&'static str, Value)> {
    vec![
        ("a leading zero", eur("01")),
        ("a sign", eur("-5")),
        ("a plus sign", eur("+5")),
        ("a decimal point", eur("1.5")),
        ("19 digits", eur("1234567890123456789")),
        ("no digits", eur("")),
        (
            "a number",
            json!({"currency": "EUR", "unit": "minor", "value": 1999}),
        ),
        (
            "unit major",
            json!({"currency": "EUR", "unit": "major", "value": "1999"}),
        ),
        ("a lower-case currency", money("1999", "eur")),
        ("a four-letter currency", money("1999", "EURO")),
        ("no value", json!({"currency": "EUR", "unit": "minor"})),
        ("no unit", json!({"currency": "EUR", "value": "1999"})),
        ("no currency", json!({"unit": "minor", "value": "1999"})),
        (
            "an extra field",
            json!({"currency": "EUR", "unit": "minor", "value": "1999", "scale": 2}),
        ),
        ("a string", json!("1999")),
        ("null", Value::Null),
    ]
}

async fn bad_money_is_refused(app: TestApp) {
    let product = published_product(&app).await;
    for (what, amount) in bad_amounts() {
        let r = app
            .post(PRICES, price_body(&product, amount, None))
            .send()
            .await;
        assert_eq!(r.status, 400, "createPrice with {what}: {}", r.text);
        invalid_under(&r, "amount");
    }
    let r = app
        .post(
            PRICES,
            without(price_body(&product, eur("1"), None), "amount"),
        )
        .send()
        .await;
    invalid_under(&r, "amount");
    assert!(
        list(&app, &format!("{PRICES}?product_ref={product}"))
            .await
            .is_empty(),
        "nothing was made"
    );
    // Zero and 18 digits are Money.
    for value in ["0", "999999999999999999"] {
        let r = app
            .post(PRICES, price_body(&product, eur(value), None))
            .send()
            .await;
        r.expect(201);
        assert_eq!(r.data()["amount"], eur(value));
    }

    // The same rules on reprice.
    let s = sellable(&app, eur("1999"), None).await;
    let reprice = at(OFFERS, &s.offer, "/reprice");
    for (what, amount) in bad_amounts() {
        let r = app
            .post(&reprice, json!({"amount": amount, "reason": "review"}))
            .send()
            .await;
        assert_eq!(r.status, 400, "repriceOffer with {what}: {}", r.text);
        invalid_under(&r, "amount");
    }
    let r = app.post(&reprice, json!({"reason": "review"})).send().await;
    invalid_under(&r, "amount");
    assert_eq!(offer(&app, &s.offer).await["price_ref"], s.price.as_str());
    let r = app
        .post(&reprice, json!({"amount": eur("0"), "reason": "free now"}))
        .send()
        .await;
    r.expect(200);
    assert_eq!(r.data()["amount"], eur("0"));
    assert_eq!(r.data()["base_amount"], eur("0"));
}

async fn interval_rules(app: TestApp) {
    let product = published_product(&app).await;
    let base = json!({"product_ref": product, "amount": eur("500")});
    for (patch, field) in [
        (json!({"type": "recurring"}), "interval"),
        (json!({"type": "recurring", "interval": null}), "interval"),
        (json!({"type": "recurring", "interval": "week"}), "interval"),
        (json!({"type": "one_time", "interval": "month"}), "interval"),
        (json!({"type": "one_time", "interval": "year"}), "interval"),
        (json!({"type": "weekly"}), "type"),
        (json!({}), "type"),
    ] {
        let mut body = base.clone();
        for (k, v) in patch.as_object().expect("patch") {
            body[k] = v.clone();
        }
        let r = app.post(PRICES, body.clone()).send().await;
        assert_eq!(r.status, 400, "{body}: {}", r.text);
        invalid(&r, field);
    }
    let r = app
        .post(PRICES, json!({"amount": eur("5"), "type": "one_time"}))
        .send()
        .await;
    invalid(&r, "product_ref");
    let r = app
        .post(PRICES, price_body("pri_N5xP3cV8bT1m", eur("5"), None))
        .send()
        .await;
    invalid(&r, "product_ref");
    let r = app
        .post(PRICES, price_body(NO_PRODUCT, eur("5"), None))
        .send()
        .await;
    r.expect_error(404, "not_found");
    assert!(list(&app, PRICES).await.is_empty(), "nothing was made");

    // One-time with an explicit null interval is fine.
    let r = app
        .post(
            PRICES,
            json!({"product_ref": product, "amount": eur("5"), "type": "one_time", "interval": null}),
        )
        .send()
        .await;
    r.expect(201);
    assert!(r.data()["interval"].is_null());
}

// ---- reprice --------------------------------------------------------------------

async fn reprice(app: TestApp) {
    let s = sellable(&app, eur("1999"), None).await;
    let before = etag_of(&app, &at(OFFERS, &s.offer, "")).await;
    let r = app
        .post(
            &at(OFFERS, &s.offer, "/reprice"),
            json!({"amount": eur("2499"), "reason": "Yearly price review"}),
        )
        .send()
        .await;
    r.expect(200);
    let tag = etag_matches(&r);
    assert_ne!(tag, before);
    let o = r.data().clone();
    has_fields(&o, OFFER_FIELDS);
    assert_eq!(o["offer_ref"], s.offer.as_str());
    assert_eq!(o["product_ref"], s.product.as_str());
    assert_eq!(o["base_amount"], eur("2499"));
    assert_eq!(o["amount"], eur("2499"));
    assert!(o["promotion_ref"].is_null());
    assert_eq!(o["status"], "active");
    assert_eq!(o["type"], "one_time");
    assert!(o["interval"].is_null());
    let new = text(&o["price_ref"]);
    is_ref(&o["price_ref"], "pri_");
    assert_ne!(new, s.price, "a new price");
    assert_eq!(offer(&app, &s.offer).await, o);

    let np = price(&app, &new).await;
    assert_eq!(np["status"], "published");
    assert_eq!(np["product_ref"], s.product.as_str());
    assert_eq!(np["amount"], eur("2499"));
    assert_eq!(np["type"], "one_time");
    assert!(np["interval"].is_null());
    is_ts(&np["published_at"]);
    let old = price(&app, &s.price).await;
    assert_eq!(old["status"], "superseded");
    is_ts(&old["superseded_at"]);
    assert_eq!(old["amount"], eur("1999"));
    offer_of(&app, &s.product).await;
    let published = list(
        &app,
        &format!("{PRICES}?product_ref={}&status=published", s.product),
    )
    .await;
    assert_eq!(refs(&published, "price_ref"), vec![new]);

    // A recurring offer keeps its type and interval.
    let y = sellable(&app, eur("10000"), Some("year")).await;
    let r = app
        .post(
            &at(OFFERS, &y.offer, "/reprice"),
            json!({"amount": eur("12000"), "reason": "r"}),
        )
        .send()
        .await;
    r.expect(200);
    assert_eq!(r.data()["type"], "recurring");
    assert_eq!(r.data()["interval"], "year");
    let np = price(&app, &text(&r.data()["price_ref"])).await;
    assert_eq!(np["type"], "recurring");
    assert_eq!(np["interval"], "year");

    // Another currency is a semantic error; nothing moves.
    let r = app
        .post(
            &at(OFFERS, &s.offer, "/reprice"),
            json!({"amount": money("2499", "USD"), "reason": "r"}),
        )
        .send()
        .await;
    r.expect_error(422, "semantic_error");
    assert_eq!(etag_of(&app, &at(OFFERS, &s.offer, "")).await, tag);
}

async fn reprice_validation(app: TestApp) {
    let s = sellable(&app, eur("1999"), None).await;
    let path = at(OFFERS, &s.offer, "/reprice");
    for (body, field) in [
        (json!({"amount": eur("1")}), "reason"),
        (json!({"amount": eur("1"), "reason": ""}), "reason"),
        (
            json!({"amount": eur("1"), "reason": "r".repeat(201)}),
            "reason",
        ),
        (json!({"amount": eur("1"), "reason": 5}), "reason"),
        (
            json!({"amount": eur("1"), "reason": "r", "effective_at": "now"}),
            "effective_at",
        ),
    ] {
        let r = app.post(&path, body.clone()).send().await;
        assert_eq!(r.status, 400, "{body}: {}", r.text);
        invalid(&r, field);
    }
    assert_eq!(offer(&app, &s.offer).await["price_ref"], s.price.as_str());
    let r = app
        .post(
            &path,
            json!({"amount": eur("1"), "reason": "r".repeat(200)}),
        )
        .send()
        .await;
    r.expect(200);
    let r = app
        .post(
            &at(OFFERS, NO_OFFER, "/reprice"),
            json!({"amount": eur("1"), "reason": "r"}),
        )
        .send()
        .await;
    r.expect_error(404, "not_found");
}

// ---- promotions -----------------------------------------------------------------

/// An offer, its current amount and its promotional amount.
type Expected<'a> = (&'a str, &'a str, &'a str);

async fn plan_arithmetic(app: TestApp) {
    let a = offer_ref(&app, eur("1999"), None).await;
    let b = offer_ref(&app, eur("500"), None).await;
    let z = offer_ref(&app, eur("0"), None).await;
    let a_tag = etag_of(&app, &at(OFFERS, &a, "")).await;
    let (a, b, z) = (a.as_str(), b.as_str(), z.as_str());

    let cases: Vec<(Vec<&str>, Value, Vec<Expected>)> = vec![
        // floor(1999 × 15 / 100) = 299; floor(500 × 15 / 100) = 75.
        (
            vec![a, b, z],
            json!({"percent_off": 15}),
            vec![(a, "1999", "1700"), (b, "500", "425"), (z, "0", "0")],
        ),
        (
            vec![a],
            json!({"percent_off": 1}),
            vec![(a, "1999", "1980")],
        ),
        // floor(1999 × 33 / 100) = 659.
        (
            vec![a],
            json!({"percent_off": 33}),
            vec![(a, "1999", "1340")],
        ),
        // floor(1999 × 50 / 100) = 999.
        (
            vec![a],
            json!({"percent_off": 50}),
            vec![(a, "1999", "1000")],
        ),
        (
            vec![a, b],
            json!({"percent_off": 100}),
            vec![(a, "1999", "0"), (b, "500", "0")],
        ),
        // An amount discount is capped at the amount.
        (
            vec![a, b],
            json!({"amount_off": eur("600")}),
            vec![(a, "1999", "1399"), (b, "500", "0")],
        ),
        (
            vec![b],
            json!({"amount_off": eur("500")}),
            vec![(b, "500", "0")],
        ),
        (
            vec![a],
            json!({"amount_off": eur("1")}),
            vec![(a, "1999", "1998")],
        ),
    ];
    for (offers, discount, expected) in cases {
        let body = promo(&offers, discount.clone());
        let (_, plan) = planned(&app, &body).await;
        assert_eq!(
            plan["changes"].as_array().expect("changes").len(),
            expected.len(),
            "{plan}"
        );
        for (o, current, promotional) in expected {
            let c = change_for(&plan, o);
            assert_eq!(c["current_amount"], eur(current), "{discount}: {plan}");
            assert_eq!(
                c["promotional_amount"],
                eur(promotional),
                "{discount}: {plan}"
            );
        }
    }
    // Planning changes nothing.
    let o = offer(&app, a).await;
    assert_eq!(o["etag"], a_tag.as_str());
    assert_eq!(o["amount"], eur("1999"));
    assert!(o["promotion_ref"].is_null());
}

/// `floor(amount × percent_off / 100)` is exact for the largest Money:
/// 999999999999999999 × 50 does not fit in 64 bits, the answer does.
async fn plan_arithmetic_on_the_largest_amount(app: TestApp) {
    let max = "999999999999999999";
    let o = offer_ref(&app, eur(max), None).await;
    for (percent, promotional) in [
        (50, "500000000000000000"),
        (1, "990000000000000000"),
        (99, "10000000000000000"),
        (100, "0"),
    ] {
        let (_, plan) = planned(&app, &promo(&[&o], json!({ "percent_off": percent }))).await;
        let c = change_for(&plan, &o);
        assert_eq!(c["current_amount"], eur(max));
        assert_eq!(c["promotional_amount"], eur(promotional), "{percent}%");
    }
    let (_, plan) = planned(&app, &promo(&[&o], json!({"amount_off": eur(max)}))).await;
    assert_eq!(change_for(&plan, &o)["promotional_amount"], eur("0"));
}

async fn plan_digest(app: TestApp) {
    let o = offer_ref(&app, eur("1999"), None).await;
    let body = promo(&[&o], json!({"percent_off": 15}));
    let (tag, first) = planned(&app, &body).await;
    let (again, _) = planned(&app, &body).await;
    assert_eq!(tag, again, "the same plan, the same digest");
    // Key order and white space do not matter.
    let reordered = format!(r#"{{ "discount" : {{"percent_off":15}}, "offer_refs": ["{o}"] }}"#);
    let r = app.req("POST", PLAN).raw(reordered).send().await;
    r.expect(200);
    assert_eq!(r.etag(), tag);
    assert_eq!(r.data()["plan_digest"], first["plan_digest"]);
    // Another body, another digest.
    let (other, _) = planned(&app, &promo(&[&o], json!({"percent_off": 16}))).await;
    assert_ne!(other, tag);
    let (windowed, _) = planned(&app, &with(body.clone(), "ends_at", json!(later(3600)))).await;
    assert_ne!(windowed, tag);
    // A catalogue change, another digest.
    app.post(
        &at(OFFERS, &o, "/reprice"),
        json!({"amount": eur("2999"), "reason": "r"}),
    )
    .send()
    .await
    .expect(200);
    let (moved, plan) = planned(&app, &body).await;
    assert_ne!(moved, tag);
    assert_eq!(change_for(&plan, &o)["current_amount"], eur("2999"));
}

async fn apply_promotion(app: TestApp) {
    let s = sellable(&app, eur("1999"), None).await;
    let offer_tag = etag_of(&app, &at(OFFERS, &s.offer, "")).await;
    let body = promo(&[&s.offer], json!({"percent_off": 15}));
    let (tag, _) = planned(&app, &body).await;

    // If-Match is required.
    app.post(APPLY, body.clone())
        .send()
        .await
        .expect_error(428, "precondition_required");
    // So is an idempotency key.
    app.req("POST", APPLY)
        .json(&body)
        .if_match(&tag)
        .send()
        .await
        .expect_error(400, "idempotency_key_required");

    let before = Timestamp::now().plus_seconds(-2);
    let r = apply(&app, &body, &tag).await;
    r.expect(200);
    etag_matches(&r);
    let p = r.data().clone();
    has_fields(&p, PROMOTION_FIELDS);
    is_ref(&p["promotion_ref"], "prm_");
    assert_eq!(p["offer_refs"], json!([s.offer]));
    assert_eq!(p["discount"], json!({"percent_off": 15}));
    let starts = ts_of(&p["starts_at"]);
    assert!(
        starts >= before && starts <= Timestamp::now().plus_seconds(2),
        "starts_at defaults to the moment of apply: {p}"
    );
    assert!(p["ends_at"].is_null());
    assert_eq!(p["status"], "active");
    is_ts(&p["created_at"]);
    let promotion = text(&p["promotion_ref"]);

    let o = offer(&app, &s.offer).await;
    assert_eq!(o["base_amount"], eur("1999"));
    assert_eq!(o["amount"], eur("1700"));
    assert_eq!(o["promotion_ref"], promotion.as_str());
    assert_eq!(o["price_ref"], s.price.as_str(), "the price stays");
    assert_ne!(o["etag"], offer_tag.as_str(), "applying bumps the offer");
    let listed = offer_of(&app, &s.product).await;
    assert_eq!(listed["amount"], eur("1700"));

    // An amount off with an end, on another offer; `*` matches too.
    let b = offer_ref(&app, eur("500"), None).await;
    let ends = later(3600);
    let body = json!({"offer_refs": [b], "discount": {"amount_off": eur("600")}, "ends_at": ends});
    let (tag, plan) = planned(&app, &body).await;
    assert_eq!(change_for(&plan, &b)["promotional_amount"], eur("0"));
    let r = apply(&app, &body, &tag).await;
    r.expect(200);
    assert_eq!(r.data()["discount"], json!({"amount_off": eur("600")}));
    assert_eq!(
        ts_of(&r.data()["ends_at"]),
        Timestamp::parse(&ends).unwrap()
    );
    assert_eq!(r.data()["status"], "active");
    let ob = offer(&app, &b).await;
    assert_eq!(ob["amount"], eur("0"));
    assert_eq!(ob["base_amount"], eur("500"));
    assert_eq!(ob["promotion_ref"], r.data()["promotion_ref"]);

    // Overlaps: one promotion per offer at a time.
    let r = apply(&app, &promo(&[&s.offer], json!({"percent_off": 5})), "*").await;
    r.expect_error(422, "semantic_error");
    // A listed offer with a promotion refuses the whole promotion.
    let c = offer_ref(&app, eur("700"), None).await;
    let r = apply(
        &app,
        &promo(&[&c, &s.offer], json!({"percent_off": 5})),
        "*",
    )
    .await;
    r.expect_error(422, "semantic_error");
    let oc = offer(&app, &c).await;
    assert!(oc["promotion_ref"].is_null(), "nothing half-applied: {oc}");
    assert_eq!(oc["amount"], eur("700"));
    assert_eq!(
        offer(&app, &s.offer).await["promotion_ref"],
        promotion.as_str()
    );
}

async fn apply_after_a_change_is_412(app: TestApp) {
    let s = sellable(&app, eur("1999"), None).await;
    let body = promo(&[&s.offer], json!({"percent_off": 10}));
    let (tag, _) = planned(&app, &body).await;
    app.post(
        &at(OFFERS, &s.offer, "/reprice"),
        json!({"amount": eur("2999"), "reason": "r"}),
    )
    .send()
    .await
    .expect(200);
    apply(&app, &body, &tag)
        .await
        .expect_error(412, "precondition_failed");
    let o = offer(&app, &s.offer).await;
    assert!(o["promotion_ref"].is_null());
    assert_eq!(o["amount"], eur("2999"));

    // A second price published between plan and apply: 412 too.
    let (tag, _) = planned(&app, &body).await;
    let p = create_price(&app, &s.product, eur("3999"), None).await;
    publish(&app, &at(PRICES, &p, "/publish")).await.expect(200);
    apply(&app, &body, &tag)
        .await
        .expect_error(412, "precondition_failed");

    // Another body than the one planned.
    let (tag, _) = planned(&app, &body).await;
    let other = promo(&[&s.offer], json!({"percent_off": 20}));
    apply(&app, &other, &tag)
        .await
        .expect_error(412, "precondition_failed");
    assert!(offer(&app, &s.offer).await["promotion_ref"].is_null());

    // A fresh plan applies: floor(3999 × 10 / 100) = 399.
    let r = apply(&app, &body, &tag).await;
    r.expect(200);
    assert_eq!(offer(&app, &s.offer).await["amount"], eur("3600"));
}

async fn scheduled_promotions(app: TestApp) {
    let s = sellable(&app, eur("1999"), None).await;
    // Active now, for an hour.
    let now =
        json!({"offer_refs": [s.offer], "discount": {"percent_off": 15}, "ends_at": later(3600)});
    let (tag, _) = planned(&app, &now).await;
    let r = apply(&app, &now, &tag).await;
    r.expect(200);
    assert_eq!(r.data()["status"], "active");
    let active = text(&r.data()["promotion_ref"]);

    // In two hours, for an hour: the plan shows the amount now and the
    // discount applied to the base amount.
    let (starts, ends) = (later(7200), later(10800));
    let future = json!({"offer_refs": [s.offer], "discount": {"percent_off": 50},
        "starts_at": starts, "ends_at": ends});
    let (tag, plan) = planned(&app, &future).await;
    let c = change_for(&plan, &s.offer);
    assert_eq!(c["current_amount"], eur("1700"));
    assert_eq!(c["promotional_amount"], eur("1000"));
    let r = apply(&app, &future, &tag).await;
    r.expect(200);
    etag_matches(&r);
    assert_eq!(r.data()["status"], "scheduled");
    assert_eq!(
        ts_of(&r.data()["starts_at"]),
        Timestamp::parse(&starts).unwrap()
    );
    assert_eq!(
        ts_of(&r.data()["ends_at"]),
        Timestamp::parse(&ends).unwrap()
    );
    let o = offer(&app, &s.offer).await;
    assert_eq!(o["amount"], eur("1700"), "the scheduled one waits");
    assert_eq!(o["promotion_ref"], active.as_str());

    // Overlapping the scheduled one, or the active one: refused.
    for body in [
        json!({"offer_refs": [s.offer], "discount": {"percent_off": 10},
            "starts_at": later(9000), "ends_at": later(14400)}),
        json!({"offer_refs": [s.offer], "discount": {"percent_off": 10},
            "starts_at": later(1800), "ends_at": later(2400)}),
        json!({"offer_refs": [s.offer], "discount": {"percent_off": 10}, "ends_at": later(600)}),
        // Open-ended from inside the scheduled one.
        json!({"offer_refs": [s.offer], "discount": {"percent_off": 10}, "starts_at": later(10000)}),
    ] {
        apply(&app, &body, "*")
            .await
            .expect_error(422, "semantic_error");
    }
    // Between the two: allowed.
    let between = json!({"offer_refs": [s.offer], "discount": {"percent_off": 10},
        "starts_at": later(3700), "ends_at": later(7100)});
    let r = apply(&app, &between, "*").await;
    r.expect(200);
    assert_eq!(r.data()["status"], "scheduled");

    // A future window on an offer without a promotion leaves its amount.
    let b = offer_ref(&app, eur("800"), None).await;
    let body =
        json!({"offer_refs": [b], "discount": {"percent_off": 25}, "starts_at": later(3600)});
    let (tag, plan) = planned(&app, &body).await;
    assert_eq!(change_for(&plan, &b)["current_amount"], eur("800"));
    assert_eq!(change_for(&plan, &b)["promotional_amount"], eur("600"));
    let r = apply(&app, &body, &tag).await;
    r.expect(200);
    assert_eq!(r.data()["status"], "scheduled");
    assert!(r.data()["ends_at"].is_null());
    let ob = offer(&app, &b).await;
    assert_eq!(ob["amount"], eur("800"));
    assert!(ob["promotion_ref"].is_null());
}

async fn promotion_validation(app: TestApp) {
    let o = offer_ref(&app, eur("1999"), None).await;
    let usd = offer_ref(&app, money("1999", "USD"), None).await;
    let many: Vec<String> = (0..101).map(|i| format!("ofr_A{i:011}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let bad: Vec<(Value, &str)> = vec![
        (promo(&[&o], json!({"percent_off": 0})), "discount"),
        (promo(&[&o], json!({"percent_off": 101})), "discount"),
        (promo(&[&o], json!({"percent_off": -1})), "discount"),
        (promo(&[&o], json!({"percent_off": 15.5})), "discount"),
        (promo(&[&o], json!({"percent_off": "15"})), "discount"),
        (
            promo(&[&o], json!({"percent_off": 15, "amount_off": eur("1")})),
            "discount",
        ),
        (promo(&[&o], json!({})), "discount"),
        (promo(&[&o], json!({"amount_off": eur("01")})), "discount"),
        (json!({"offer_refs": [o]}), "discount"),
        (promo(&[], json!({"percent_off": 15})), "offer_refs"),
        (promo(&[&o, &o], json!({"percent_off": 15})), "offer_refs"),
        (promo(&many, json!({"percent_off": 15})), "offer_refs"),
        (
            promo(&["ofr_short"], json!({"percent_off": 15})),
            "offer_refs",
        ),
        (
            promo(&[NO_PRODUCT], json!({"percent_off": 15})),
            "offer_refs",
        ),
        (json!({"discount": {"percent_off": 15}}), "offer_refs"),
        (
            with(
                promo(&[&o], json!({"percent_off": 15})),
                "ends_at",
                json!(later(-60)),
            ),
            "ends_at",
        ),
        (
            json!({"offer_refs": [o], "discount": {"percent_off": 15},
                "starts_at": later(7200), "ends_at": later(3600)}),
            "ends_at",
        ),
        (
            with(
                promo(&[&o], json!({"percent_off": 15})),
                "starts_at",
                json!("tomorrow"),
            ),
            "starts_at",
        ),
        (
            with(
                promo(&[&o], json!({"percent_off": 15})),
                "priority",
                json!(1),
            ),
            "priority",
        ),
    ];
    for (body, field) in &bad {
        let r = plan(&app, body).await;
        assert_eq!(r.status, 400, "plan {body}: {}", r.text);
        invalid_under(&r, field);
        let r = apply(&app, body, "*").await;
        assert_eq!(r.status, 400, "apply {body}: {}", r.text);
        invalid_under(&r, field);
    }
    // A window that ends when it starts.
    let at_once = later(3600);
    let body = json!({"offer_refs": [o], "discount": {"percent_off": 15},
        "starts_at": at_once, "ends_at": at_once});
    invalid_under(&plan(&app, &body).await, "ends_at");
    // 100 well-formed offers are well-formed: unknown ones are 404.
    plan(&app, &promo(&many[..100], json!({"percent_off": 15})))
        .await
        .expect_error(404, "not_found");
    // Unknown offers: 404.
    for body in [
        promo(&[NO_OFFER], json!({"percent_off": 15})),
        promo(&[&o, NO_OFFER], json!({"percent_off": 15})),
    ] {
        plan(&app, &body).await.expect_error(404, "not_found");
        apply(&app, &body, "*").await.expect_error(404, "not_found");
    }
    // An amount off in another currency than an offer's: 422.
    for body in [
        promo(&[&o], json!({"amount_off": money("100", "USD")})),
        promo(&[&o, &usd], json!({"amount_off": eur("100")})),
    ] {
        plan(&app, &body).await.expect_error(422, "semantic_error");
        apply(&app, &body, "*")
            .await
            .expect_error(422, "semantic_error");
    }
    // Percentages are currency-free: both offers at once.
    let (_, p) = planned(&app, &promo(&[&o, &usd], json!({"percent_off": 100}))).await;
    assert_eq!(
        change_for(&p, &usd)["promotional_amount"],
        money("0", "USD")
    );
    for offer_ref in [&o, &usd] {
        assert!(offer(&app, offer_ref).await["promotion_ref"].is_null());
    }
}

// ---- checkout configs -----------------------------------------------------------

async fn checkout_configs(app: TestApp) {
    let o1 = offer_ref(&app, eur("1999"), None).await;
    let o2 = offer_ref(&app, eur("500"), None).await;
    let m = offer_ref(&app, eur("900"), Some("month")).await;

    let r = create_config(
        &app,
        json!({"name": "Spring sale", "line_items": [line(&o1, 2), line(&o2, 1)], "success_url": OK_URL}),
    )
    .await;
    r.expect(201);
    let tag = etag_matches(&r);
    let c = r.data().clone();
    has_fields(&c, CONFIG_FIELDS);
    is_ref(&c["config_ref"], "cco_");
    assert_eq!(c["name"], "Spring sale");
    assert_eq!(c["status"], "draft");
    assert_eq!(c["current_version"], 1);
    assert!(c["published_version"].is_null());
    assert_eq!(lines_of(&c), vec![(o1.clone(), 2), (o2.clone(), 1)], "{c}");
    assert_eq!(c["mode"], "payment");
    assert_eq!(c["success_url"], OK_URL);
    assert!(c["cancel_url"].is_null());
    assert_eq!(c["custom_fields"], json!([]));
    is_ts(&c["created_at"]);
    is_ts(&c["updated_at"]);
    let cfg = text(&c["config_ref"]);
    let got = get(&app, &at(CONFIGS, &cfg, "")).await;
    assert_eq!(etag_matches(&got), tag);
    assert_eq!(*got.data(), c);

    // Any recurring item makes a subscription.
    let r = create_config(
        &app,
        json!({"name": "Membership", "line_items": [line(&o1, 1), line(&m, 1)],
            "success_url": OK_URL, "cancel_url": "http://example.com/cancel"}),
    )
    .await;
    r.expect(201);
    assert_eq!(r.data()["mode"], "subscription");
    assert_eq!(r.data()["cancel_url"], "http://example.com/cancel");

    // A body's mode must agree.
    for (items, mode) in [
        (vec![line(&o1, 1)], "payment"),
        (vec![line(&m, 1)], "subscription"),
    ] {
        let r = create_config(&app, with(config_body(items), "mode", json!(mode))).await;
        r.expect(201);
        assert_eq!(r.data()["mode"], mode);
    }
    for (items, mode) in [
        (vec![line(&o1, 1)], "subscription"),
        (vec![line(&m, 1)], "payment"),
        (vec![line(&o1, 1), line(&m, 1)], "payment"),
    ] {
        create_config(&app, with(config_body(items), "mode", json!(mode)))
            .await
            .expect_error(422, "semantic_error");
    }

    // The other fields.
    let base = config_body(vec![line(&o1, 1)]);
    for (body, field) in [
        (with(base.clone(), "mode", json!("rental")), "mode"),
        (with(base.clone(), "name", json!("")), "name"),
        (with(base.clone(), "name", json!("n".repeat(201))), "name"),
        (without(base.clone(), "name"), "name"),
        (without(base.clone(), "success_url"), "success_url"),
        (
            with(base.clone(), "success_url", json!("ftp://example.com/ok")),
            "success_url",
        ),
        (
            with(base.clone(), "success_url", json!("/ok")),
            "success_url",
        ),
        (
            with(
                base.clone(),
                "success_url",
                json!(format!("https://example.com/{}", "a".repeat(2000))),
            ),
            "success_url",
        ),
        (
            with(base.clone(), "cancel_url", json!("not a url")),
            "cancel_url",
        ),
        (with(base.clone(), "theme", json!("dark")), "theme"),
    ] {
        let r = create_config(&app, body.clone()).await;
        assert_eq!(r.status, 400, "{body}: {}", r.text);
        invalid(&r, field);
    }
    let r = create_config(&app, with(base.clone(), "name", json!("n".repeat(200)))).await;
    r.expect(201);
}

async fn checkout_config_line_items(app: TestApp) {
    let eur1 = offer_ref(&app, eur("1999"), None).await;
    let usd = offer_ref(&app, money("1999", "USD"), None).await;
    let month = offer_ref(&app, eur("900"), Some("month")).await;
    let month2 = offer_ref(&app, eur("1900"), Some("month")).await;
    let year = offer_ref(&app, eur("9000"), Some("year")).await;

    for (items, field) in [
        (vec![], "line_items"),
        (vec![line(&eur1, 0)], "line_items"),
        (vec![line(&eur1, 1001)], "line_items"),
        (vec![line(&eur1, 1), line(&eur1, 2)], "line_items"),
        (vec![line("ofr_short", 1)], "line_items"),
        (vec![json!({"offer_ref": eur1})], "line_items"),
        (
            vec![json!({"offer_ref": eur1, "quantity": 1.5})],
            "line_items",
        ),
        (
            vec![json!({"offer_ref": eur1, "quantity": 1, "price": 5})],
            "line_items",
        ),
    ] {
        let body = config_body(items);
        let r = create_config(&app, body.clone()).await;
        assert_eq!(r.status, 400, "{body}: {}", r.text);
        invalid_under(&r, field);
    }
    create_config(&app, config_body(vec![line(NO_OFFER, 1)]))
        .await
        .expect_error(404, "not_found");
    for items in [
        vec![line(&eur1, 1), line(&usd, 1)],
        vec![line(&month, 1), line(&year, 1)],
        vec![line(&eur1, 1), line(&month, 1), line(&year, 1)],
    ] {
        let body = config_body(items);
        let r = create_config(&app, body.clone()).await;
        assert_eq!(r.status, 422, "{body}: {}", r.text);
        r.expect_error(422, "semantic_error");
    }
    // One interval, twice; the largest quantity.
    let r = create_config(
        &app,
        config_body(vec![line(&month, 1), line(&month2, 1000), line(&eur1, 3)]),
    )
    .await;
    r.expect(201);
    assert_eq!(r.data()["mode"], "subscription");

    // 20 items are allowed, 21 are not.
    let mut offers = vec![eur1.clone()];
    for i in 0..20 {
        offers.push(offer_ref(&app, eur(&format!("{}", 100 + i)), None).await);
    }
    let lines: Vec<Value> = offers.iter().map(|o| line(o, 1)).collect();
    let r = create_config(&app, config_body(lines[..20].to_vec())).await;
    r.expect(201);
    assert_eq!(r.data()["line_items"].as_array().unwrap().len(), 20);
    let r = create_config(&app, config_body(lines)).await;
    invalid_under(&r, "line_items");
}

async fn checkout_config_custom_fields(app: TestApp) {
    let o = offer_ref(&app, eur("1999"), None).await;
    let body = |fields: Value| with(config_body(vec![line(&o, 1)]), "custom_fields", fields);
    let text_field = |key: &str| json!({"key": key, "label": "Label", "type": "text"});

    let r = create_config(
        &app,
        body(json!([
            {"key": "company", "label": "Company", "type": "text"},
            {"key": "size", "label": "Size", "type": "dropdown", "options": ["S", "M", "L"], "required": true},
            {"key": "k".repeat(40), "label": "l".repeat(100), "type": "numeric", "required": false, "options": null},
        ])),
    )
    .await;
    r.expect(201);
    let fields = r.data()["custom_fields"]
        .as_array()
        .expect("fields")
        .clone();
    assert_eq!(fields.len(), 3);
    for f in &fields {
        has_fields(f, CUSTOM_FIELD_FIELDS);
    }
    assert_eq!(fields[0]["key"], "company");
    assert_eq!(fields[0]["label"], "Company");
    assert_eq!(fields[0]["type"], "text");
    assert_eq!(fields[0]["required"], false, "required defaults to false");
    assert!(fields[0]["options"].is_null());
    assert_eq!(fields[1]["type"], "dropdown");
    assert_eq!(fields[1]["required"], true);
    assert_eq!(fields[1]["options"], json!(["S", "M", "L"]));
    assert_eq!(fields[2]["type"], "numeric");
    assert!(fields[2]["options"].is_null());
    for f in &fields {
        is_ref(&f["custom_field_ref"], "cf_");
    }
    let refs: HashSet<String> = fields
        .iter()
        .map(|f| text(&f["custom_field_ref"]))
        .collect();
    assert_eq!(refs.len(), 3, "one reference per field: {fields:?}");

    let dropdown = |options: Value| json!([{"key": "size", "label": "Size", "type": "dropdown", "options": options}]);
    let many_options: Vec<String> = (0..21).map(|i| format!("o{i}")).collect();
    for fields in [
        json!([text_field("Bad-Key")]),
        json!([text_field("")]),
        json!([text_field(&"k".repeat(41))]),
        json!([text_field("a b")]),
        json!([
            text_field("a"),
            text_field("b"),
            text_field("c"),
            text_field("d")
        ]),
        json!([text_field("a"), text_field("a")]),
        json!([{"key": "size", "label": "Size", "type": "dropdown"}]),
        dropdown(json!(null)),
        dropdown(json!([])),
        dropdown(json!(["S", "S"])),
        dropdown(json!([""])),
        dropdown(json!(["o".repeat(101)])),
        dropdown(json!(many_options)),
        json!([{"key": "company", "label": "Company", "type": "text", "options": ["a"]}]),
        json!([{"key": "seats", "label": "Seats", "type": "numeric", "options": ["1"]}]),
        json!([{"key": "company", "label": "", "type": "text"}]),
        json!([{"key": "company", "label": "l".repeat(101), "type": "text"}]),
        json!([{"key": "company", "label": "Company", "type": "date"}]),
        json!([{"key": "company", "label": "Company"}]),
        json!([{"key": "company", "label": "Company", "type": "text", "hint": "x"}]),
        // The service assigns references; a body never gives one.
        json!([{"key": "company", "label": "Company", "type": "text",
            "custom_field_ref": "cf_K1lZ4xC7vB3n"}]),
    ] {
        let r = create_config(&app, body(fields.clone())).await;
        assert_eq!(r.status, 400, "{fields}: {}", r.text);
        invalid_under(&r, "custom_fields");
    }
}

async fn checkout_config_versions(app: TestApp) {
    let o1 = offer_ref(&app, eur("1999"), None).await;
    let o2 = offer_ref(&app, eur("500"), None).await;
    let fields = json!([{"key": "company", "label": "Company", "type": "text", "required": false, "options": null}]);
    let r = create_config(
        &app,
        json!({"name": "Shop", "line_items": [line(&o1, 1)], "success_url": OK_URL,
            "cancel_url": "https://example.com/cancel", "custom_fields": fields}),
    )
    .await;
    r.expect(201);
    let v1 = r.data().clone();
    let cfg = text(&v1["config_ref"]);
    let versions = at(CONFIGS, &cfg, "/versions");
    let publish_path = at(CONFIGS, &cfg, "/publish");

    // Only the name changes; the rest is carried over.
    let r = app.post(&versions, json!({"name": "Shop v2"})).send().await;
    r.expect(201);
    let tag2 = etag_matches(&r);
    assert_ne!(tag2, v1["etag"].as_str().unwrap());
    let v2 = r.data().clone();
    has_fields(&v2, CONFIG_FIELDS);
    assert_eq!(v2["config_ref"], cfg.as_str());
    assert_eq!(v2["current_version"], 2);
    assert_eq!(v2["name"], "Shop v2");
    for carried in [
        "line_items",
        "success_url",
        "cancel_url",
        "custom_fields",
        "mode",
        "created_at",
    ] {
        assert_eq!(v2[carried], v1[carried], "{carried}");
    }
    assert_eq!(v2["status"], "draft");
    assert!(v2["published_version"].is_null());
    assert_eq!(*get(&app, &at(CONFIGS, &cfg, "")).await.data(), v2);

    // An empty body copies the newest version.
    let r = app.post(&versions, json!({})).send().await;
    r.expect(201);
    let v3 = r.data().clone();
    assert_eq!(v3["current_version"], 3);
    for carried in [
        "name",
        "line_items",
        "success_url",
        "cancel_url",
        "custom_fields",
        "mode",
    ] {
        assert_eq!(v3[carried], v2[carried], "{carried}");
    }

    // Publish defaults to the newest.
    let r = publish(&app, &publish_path).await;
    r.expect(200);
    etag_matches(&r);
    assert_eq!(r.data()["status"], "published");
    assert_eq!(r.data()["published_version"], 3);
    assert_eq!(r.data()["current_version"], 3);

    // A new version leaves the published one.
    let r = app
        .post(&versions, json!({"line_items": [line(&o2, 3)]}))
        .send()
        .await;
    r.expect(201);
    let v4 = r.data().clone();
    assert_eq!(v4["current_version"], 4);
    assert_eq!(v4["published_version"], 3);
    assert_eq!(v4["status"], "published");
    assert_eq!(lines_of(&v4), vec![(o2.clone(), 3)]);
    assert_eq!(v4["name"], "Shop v2");

    // Rollback to version 1.
    let r = app.post(&publish_path, json!({"version": 1})).send().await;
    r.expect(200);
    assert_eq!(r.data()["published_version"], 1);
    assert_eq!(r.data()["current_version"], 4);
    assert_eq!(r.data()["status"], "published");
    let got = get(&app, &at(CONFIGS, &cfg, "")).await;
    assert_eq!(got.data()["published_version"], 1);
    assert_eq!(got.data()["current_version"], 4);
    assert_eq!(
        lines_of(got.data()),
        vec![(o2.clone(), 3)],
        "the newest shows"
    );

    // A version that does not exist; a malformed one.
    app.post(&publish_path, json!({"version": 99}))
        .send()
        .await
        .expect_error(422, "semantic_error");
    for v in [json!(0), json!(-1), json!("2"), json!(1.5)] {
        let r = app
            .post(&publish_path, json!({ "version": v }))
            .send()
            .await;
        assert_eq!(r.status, 400, "version {v}: {}", r.text);
        invalid(&r, "version");
    }
    assert_eq!(
        get(&app, &at(CONFIGS, &cfg, "")).await.data()["published_version"],
        1
    );

    // A version follows create's rules.
    let r = app
        .post(&versions, json!({"line_items": [line(&o1, 0)]}))
        .send()
        .await;
    invalid_under(&r, "line_items");
    let r = app.post(&versions, json!({"name": ""})).send().await;
    invalid(&r, "name");
    app.post(&versions, json!({"mode": "subscription"}))
        .send()
        .await
        .expect_error(422, "semantic_error");
    let usd = offer_ref(&app, money("100", "USD"), None).await;
    app.post(
        &versions,
        json!({"line_items": [line(&o1, 1), line(&usd, 1)]}),
    )
    .send()
    .await
    .expect_error(422, "semantic_error");
    app.post(&versions, json!({"line_items": [line(NO_OFFER, 1)]}))
        .send()
        .await
        .expect_error(404, "not_found");
    assert_eq!(
        get(&app, &at(CONFIGS, &cfg, "")).await.data()["current_version"],
        4,
        "refused versions are not counted"
    );
    app.post(&at(CONFIGS, NO_CONFIG, "/versions"), json!({}))
        .send()
        .await
        .expect_error(404, "not_found");

    // The mode is derived again from a version's line items.
    let m = offer_ref(&app, eur("900"), Some("month")).await;
    let r = app
        .post(&versions, json!({"line_items": [line(&m, 1)]}))
        .send()
        .await;
    r.expect(201);
    assert_eq!(r.data()["current_version"], 5);
    assert_eq!(r.data()["mode"], "subscription");
}

/// The `custom_field_ref` of each field of a config answer, by key.
fn field_refs(config: &Value) -> BTreeMap<String, String> {
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

/// A field's reference is kept across the config's versions for the same
/// key (also when a version drops the key and a later one brings it back);
/// a new key gets a new one; another config's field of the same key has
/// its own (contract 9, "Data profile grants").
async fn checkout_config_custom_field_refs(app: TestApp) {
    let o = offer_ref(&app, eur("1999"), None).await;
    let field = |key: &str, label: &str| json!({"key": key, "label": label, "type": "text"});
    let r = create_config(
        &app,
        with(
            config_body(vec![line(&o, 1)]),
            "custom_fields",
            json!([field("gift_note", "Gift note"), field("po_number", "PO")]),
        ),
    )
    .await;
    r.expect(201);
    let v1 = field_refs(r.data());
    let cfg = text(&r.data()["config_ref"]);
    let versions = at(CONFIGS, &cfg, "/versions");
    assert_eq!(v1.len(), 2);
    assert_ne!(v1["gift_note"], v1["po_number"]);

    // Same key, new label: same reference. A new key: a new reference.
    let r = app
        .post(
            &versions,
            json!({"custom_fields": [field("po_number", "Purchase order"), field("seats", "Seats")]}),
        )
        .send()
        .await;
    r.expect(201);
    let v2 = field_refs(r.data());
    assert_eq!(r.data()["current_version"], 2);
    assert_eq!(r.data()["custom_fields"][0]["label"], "Purchase order");
    assert_eq!(v2["po_number"], v1["po_number"], "kept for the same key");
    assert!(
        !v1.values().any(|r| *r == v2["seats"]),
        "a new key, a new reference: {v1:?} {v2:?}"
    );
    assert_eq!(*get(&app, &at(CONFIGS, &cfg, "")).await.data(), *r.data());

    // A key dropped in version 2 and given again in version 3 gets its
    // reference back; fields carried over keep theirs.
    let r = app
        .post(
            &versions,
            json!({"custom_fields": [field("seats", "Seats"), field("gift_note", "Note")]}),
        )
        .send()
        .await;
    r.expect(201);
    let v3 = field_refs(r.data());
    assert_eq!(v3["gift_note"], v1["gift_note"]);
    assert_eq!(v3["seats"], v2["seats"]);
    let r = app.post(&versions, json!({"name": "Renamed"})).send().await;
    r.expect(201);
    assert_eq!(field_refs(r.data()), v3, "carried over with the fields");

    // Publishing an older version still shows the newest's fields.
    let r = app
        .post(&at(CONFIGS, &cfg, "/publish"), json!({"version": 1}))
        .send()
        .await;
    r.expect(200);
    assert_eq!(field_refs(r.data()), v3);

    // Another config's field of the same key is another field.
    let r = create_config(
        &app,
        with(
            config_body(vec![line(&o, 1)]),
            "custom_fields",
            json!([field("gift_note", "Gift note")]),
        ),
    )
    .await;
    r.expect(201);
    let other = field_refs(r.data());
    assert_ne!(other["gift_note"], v1["gift_note"]);

    // A version's body may not give a reference either.
    let r = app
        .post(
            &versions,
            json!({"custom_fields": [{"key": "gift_note", "label": "Note", "type": "text",
                "custom_field_ref": v1["gift_note"]}]}),
        )
        .send()
        .await;
    invalid_under(&r, "custom_fields");
    assert_eq!(
        get(&app, &at(CONFIGS, &cfg, "")).await.data()["current_version"],
        4
    );
}

/// Versions written before custom fields had references (migration 0016)
/// get theirs when the store is migrated: the same for a key in every
/// version, shown by the config, and kept by the versions written after.
/// Migrating again changes nothing.
async fn custom_field_refs_of_versions_older_than_the_migration(app: TestApp) {
    let o = offer_ref(&app, eur("1999"), None).await;
    let field = |key: &str| json!({"key": key, "label": "Label", "type": "text"});
    let r = create_config(
        &app,
        with(
            config_body(vec![line(&o, 1)]),
            "custom_fields",
            json!([field("gift_note")]),
        ),
    )
    .await;
    r.expect(201);
    let cfg = text(&r.data()["config_ref"]);
    let versions = at(CONFIGS, &cfg, "/versions");
    app.post(
        &versions,
        json!({"custom_fields": [field("gift_note"), field("seats")]}),
    )
    .send()
    .await
    .expect(201);
    let plain = create_config(&app, config_body(vec![line(&o, 1)])).await;
    plain.expect(201);

    // Back to what an older service wrote: no references anywhere.
    let pool = app.raw_pool().await;
    let bodies: Vec<(i64, String)> = sqlx::query_as(
        "SELECT version, body FROM checkout_config_versions WHERE config_ref = $1 \
         ORDER BY version",
    )
    .bind(cfg.as_str())
    .fetch_all(&pool)
    .await
    .expect("the versions");
    assert_eq!(bodies.len(), 2);
    for (version, body) in &bodies {
        let mut content: Value = serde_json::from_str(body).expect("JSON");
        for f in content["custom_fields"].as_array_mut().expect("fields") {
            assert!(f["custom_field_ref"].is_string(), "{body}");
            f.as_object_mut()
                .expect("a field")
                .remove("custom_field_ref");
        }
        sqlx::query(
            "UPDATE checkout_config_versions SET body = $1 WHERE config_ref = $2 AND version = $3",
        )
        .bind(serde_json::to_string(&content).expect("JSON"))
        .bind(cfg.as_str())
        .bind(*version)
        .execute(&pool)
        .await
        .expect("an old body");
    }
    sqlx::query("DELETE FROM checkout_custom_fields")
        .execute(&pool)
        .await
        .expect("no references");

    app.store.migrate().await.expect("migrated again");
    let c = get(&app, &at(CONFIGS, &cfg, "")).await.data().clone();
    let refs = field_refs(&c);
    assert_eq!(refs.len(), 2);
    assert_ne!(refs["gift_note"], refs["seats"]);
    let rows: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT custom_field_ref, config_ref, key FROM checkout_custom_fields ORDER BY key",
    )
    .fetch_all(&pool)
    .await
    .expect("the references");
    assert_eq!(
        rows,
        vec![
            (
                refs["gift_note"].clone(),
                cfg.clone(),
                "gift_note".to_owned()
            ),
            (refs["seats"].clone(), cfg.clone(), "seats".to_owned()),
        ]
    );
    // Version 1's body has its field's reference too, the same.
    let (v1,): (String,) = sqlx::query_as(
        "SELECT body FROM checkout_config_versions WHERE config_ref = $1 AND version = 1",
    )
    .bind(cfg.as_str())
    .fetch_one(&pool)
    .await
    .expect("version 1");
    let v1: Value = serde_json::from_str(&v1).expect("JSON");
    assert_eq!(
        v1["custom_fields"][0]["custom_field_ref"],
        refs["gift_note"].as_str()
    );

    app.store.migrate().await.expect("migrated once more");
    assert_eq!(*get(&app, &at(CONFIGS, &cfg, "")).await.data(), c);
    let r = app
        .post(&versions, json!({"custom_fields": [field("seats")]}))
        .send()
        .await;
    r.expect(201);
    assert_eq!(field_refs(r.data())["seats"], refs["seats"]);
    let plain = get(&app, &at(CONFIGS, &text(&plain.data()["config_ref"]), "")).await;
    assert_eq!(plain.data()["custom_fields"], json!([]));
    pool.close().await;
}

// ---- concurrency ----------------------------------------------------------------

async fn concurrent_price_publishes(app: TestApp) {
    for round in 0..5 {
        let product = published_product(&app).await;
        let p1 = create_price(&app, &product, eur("1000"), None).await;
        let p2 = create_price(&app, &product, eur("2000"), None).await;
        let path1 = at(PRICES, &p1, "/publish");
        let path2 = at(PRICES, &p2, "/publish");
        let (r1, r2) = tokio::join!(publish(&app, &path1), publish(&app, &path2));
        for r in [&r1, &r2] {
            assert!(
                r.status == 200 || r.status == 409,
                "round {round}: {}",
                r.text
            );
            if r.status == 409 {
                r.expect_error(409, "version_conflict");
            }
        }
        assert!(r1.status == 200 || r2.status == 200, "one at least wins");
        let o = offer_of(&app, &product).await;
        let on = text(&o["price_ref"]);
        assert!(on == p1 || on == p2, "{o}");
        let s1 = text(&price(&app, &p1).await["status"]);
        let s2 = text(&price(&app, &p2).await["status"]);
        let published: Vec<&String> = [&s1, &s2]
            .into_iter()
            .filter(|s| *s == "published")
            .collect();
        assert_eq!(published.len(), 1, "round {round}: {s1} {s2}");
        let (mine, other, other_r) = if on == p1 {
            (&s1, &s2, &r2)
        } else {
            (&s2, &s1, &r1)
        };
        assert_eq!(mine, "published", "the offer's price is the published one");
        let expected = if other_r.status == 200 {
            "superseded"
        } else {
            "draft"
        };
        assert_eq!(other, expected, "round {round}");
        let listed = list(
            &app,
            &format!("{PRICES}?product_ref={product}&status=published"),
        )
        .await;
        assert_eq!(refs(&listed, "price_ref"), vec![on.clone()]);
        assert_eq!(o["base_amount"], price(&app, &on).await["amount"]);
    }
}

async fn concurrent_overlapping_applies(app: TestApp) {
    let allowed = |r: &Resp| {
        matches!(
            (r.status, r.json["error"]["code"].as_str()),
            (412, Some("precondition_failed"))
                | (422, Some("semantic_error"))
                | (409, Some("version_conflict"))
        )
    };
    for round in 0..4 {
        let o = offer_ref(&app, eur("1000"), None).await;
        let a = promo(&[&o], json!({"percent_off": 10}));
        let b = json!({"offer_refs": [o], "discount": {"percent_off": 20}, "ends_at": later(3600)});
        let (ta, _) = planned(&app, &a).await;
        let (tb, _) = planned(&app, &b).await;
        let (ra, rb) = tokio::join!(apply(&app, &a, &ta), apply(&app, &b, &tb));
        let won: Vec<&Resp> = [&ra, &rb].into_iter().filter(|r| r.status == 200).collect();
        assert!(won.len() <= 1, "round {round}: {ra:?} {rb:?}");
        for r in [&ra, &rb] {
            assert!(r.status == 200 || allowed(r), "round {round}: {}", r.text);
        }
        let got = offer(&app, &o).await;
        match won.first() {
            Some(w) => {
                assert_eq!(got["promotion_ref"], w.data()["promotion_ref"]);
                let expected = if w.data()["discount"]["percent_off"] == 10 {
                    "900"
                } else {
                    "800"
                };
                assert_eq!(got["amount"], eur(expected));
            }
            None => {
                assert!(got["promotion_ref"].is_null());
                assert_eq!(got["amount"], eur("1000"));
            }
        }
    }
    // One plan applied twice at once (two keys): at most one promotion.
    for round in 0..4 {
        let o = offer_ref(&app, eur("1000"), None).await;
        let body = promo(&[&o], json!({"percent_off": 10}));
        let (tag, _) = planned(&app, &body).await;
        let (r1, r2) = tokio::join!(apply(&app, &body, &tag), apply(&app, &body, &tag));
        let won = [&r1, &r2].iter().filter(|r| r.status == 200).count();
        assert!(won <= 1, "round {round}: {r1:?} {r2:?}");
        for r in [&r1, &r2] {
            assert!(r.status == 200 || allowed(r), "round {round}: {}", r.text);
        }
        let got = offer(&app, &o).await;
        assert_eq!(got["amount"], eur(if won == 1 { "900" } else { "1000" }));
    }
}

/// docs/catalogue.md, Concurrency: publishPrice and repriceOffer of one
/// product run one after the other; whatever the interleaving, the product
/// ends with one published price and its one offer on it.
async fn concurrent_reprice_and_publish(app: TestApp) {
    for round in 0..4 {
        let s = sellable(&app, eur("1000"), None).await;
        let draft = create_price(&app, &s.product, eur("2000"), None).await;
        let publish_path = at(PRICES, &draft, "/publish");
        let reprice_path = at(OFFERS, &s.offer, "/reprice");
        let (rp, rr) = tokio::join!(
            publish(&app, &publish_path),
            app.post(&reprice_path, json!({"amount": eur("3000"), "reason": "r"}))
                .send()
        );
        for r in [&rp, &rr] {
            assert!(
                r.status == 200 || r.status == 409,
                "round {round}: {}",
                r.text
            );
            if r.status == 409 {
                r.expect_error(409, "version_conflict");
            }
        }
        let o = offer_of(&app, &s.product).await;
        let published = list(
            &app,
            &format!("{PRICES}?product_ref={}&status=published", s.product),
        )
        .await;
        assert_eq!(
            refs(&published, "price_ref"),
            vec![text(&o["price_ref"])],
            "round {round}"
        );
        assert_eq!(o["base_amount"], published[0]["amount"]);
        let all = list(&app, &format!("{PRICES}?product_ref={}", s.product)).await;
        let superseded = all.iter().filter(|p| p["status"] == "superseded").count();
        let wins = [&rp, &rr].iter().filter(|r| r.status == 200).count();
        assert_eq!(superseded, wins, "round {round}: {all:?}");
    }
}

/// An offer's `amount` is its `base_amount` after the promotion active
/// now: a reprice keeps the promotion and discounts the new base.
async fn a_promotion_outlives_a_reprice(app: TestApp) {
    let s = sellable(&app, eur("1999"), None).await;
    let body = promo(&[&s.offer], json!({"percent_off": 10}));
    let (tag, _) = planned(&app, &body).await;
    let r = apply(&app, &body, &tag).await;
    r.expect(200);
    let promotion = r.data()["promotion_ref"].clone();
    let r = app
        .post(
            &at(OFFERS, &s.offer, "/reprice"),
            json!({"amount": eur("3000"), "reason": "r"}),
        )
        .send()
        .await;
    r.expect(200);
    assert_eq!(r.data()["base_amount"], eur("3000"));
    assert_eq!(r.data()["amount"], eur("2700"));
    assert_eq!(r.data()["promotion_ref"], promotion);
    let o = offer(&app, &s.offer).await;
    assert_eq!(o["amount"], eur("2700"));
    assert_eq!(o["promotion_ref"], promotion);
}

// ---- idempotency ----------------------------------------------------------------

/// Sends the same POST twice under one key; the second must be a replay.
async fn twice(app: &TestApp, path: &str, tag: Option<&str>, body: Value) -> (Resp, Resp) {
    let key = unique_key();
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
    assert_eq!(again.text, first.text, "the same body");
    assert_eq!(
        again.header("idempotent-replayed"),
        Some("true"),
        "{}",
        again.text
    );
    assert_eq!(first.header("idempotent-replayed"), None);
    (first, again)
}

async fn idempotent_replays(app: TestApp) {
    // createProduct.
    let (first, again) = twice(&app, PRODUCTS, None, json!({"name": "Once"})).await;
    first.expect(201);
    assert_eq!(again.etag(), first.etag());
    assert_eq!(list(&app, PRODUCTS).await.len(), 1, "one product");
    let product = text(&first.data()["product_ref"]);

    // Same key, another body: a mismatch, and nothing made.
    let key = unique_key();
    for (name, status) in [("First", 201), ("Second", 422)] {
        let r = app
            .req("POST", PRODUCTS)
            .idem(&key)
            .json(&json!({ "name": name }))
            .send()
            .await;
        assert_eq!(r.status, status, "{}", r.text);
        if status == 422 {
            r.expect_error(422, "idempotency_mismatch");
        }
    }
    assert_eq!(list(&app, PRODUCTS).await.len(), 2);
    // A key is scoped to its operation: the same key on createPrice is new.
    let first = text(&list(&app, PRODUCTS).await[0]["product_ref"]);
    let r = app
        .req("POST", PRICES)
        .idem(&key)
        .json(&price_body(&first, eur("1"), None))
        .send()
        .await;
    r.expect(201);
    assert_eq!(r.header("idempotent-replayed"), None);

    // Publish, and a kept semantic error.
    let path = at(PRODUCTS, &product, "/publish");
    twice(&app, &path, None, json!({})).await.0.expect(200);
    twice(&app, &path, None, json!({}))
        .await
        .0
        .expect_error(422, "semantic_error");

    // createPrice and publishPrice: the replay is not a second publish.
    let (first, _) = twice(&app, PRICES, None, price_body(&product, eur("100"), None)).await;
    first.expect(201);
    let pr = text(&first.data()["price_ref"]);
    assert_eq!(
        list(&app, &format!("{PRICES}?product_ref={product}"))
            .await
            .len(),
        1
    );
    let (first, _) = twice(&app, &at(PRICES, &pr, "/publish"), None, json!({})).await;
    first.expect(200);
    let o = text(&offer_of(&app, &product).await["offer_ref"]);

    // repriceOffer: one new price.
    let (first, _) = twice(
        &app,
        &at(OFFERS, &o, "/reprice"),
        None,
        json!({"amount": eur("150"), "reason": "r"}),
    )
    .await;
    first.expect(200);
    assert_eq!(
        list(&app, &format!("{PRICES}?product_ref={product}"))
            .await
            .len(),
        2
    );

    // applyPromotion: one promotion, replayed (not refused as an overlap).
    let body = promo(&[&o], json!({"percent_off": 10}));
    let (tag, _) = planned(&app, &body).await;
    let (first, _) = twice(&app, APPLY, Some(&tag), body).await;
    first.expect(200);
    assert_eq!(
        offer(&app, &o).await["promotion_ref"],
        first.data()["promotion_ref"]
    );

    // Checkout configs and their versions.
    let (first, _) = twice(&app, CONFIGS, None, config_body(vec![line(&o, 1)])).await;
    first.expect(201);
    let cfg = text(&first.data()["config_ref"]);
    let (first, _) = twice(
        &app,
        &at(CONFIGS, &cfg, "/versions"),
        None,
        json!({"name": "v2"}),
    )
    .await;
    first.expect(201);
    assert_eq!(first.data()["current_version"], 2);
    let (first, _) = twice(&app, &at(CONFIGS, &cfg, "/publish"), None, json!({})).await;
    first.expect(200);
    assert_eq!(
        get(&app, &at(CONFIGS, &cfg, "")).await.data()["current_version"],
        2,
        "one version made"
    );
}

// ---- environments ---------------------------------------------------------------

async fn environments_are_isolated(app: TestApp) {
    let s = sellable(&app, eur("1999"), None).await;
    let draft_price = create_price(&app, &s.product, eur("5"), None).await;
    let cfg = config(&app, vec![line(&s.offer, 1)]).await;
    let live = app.live.secret.clone();
    let lget = |path: String| {
        let call = app.get(&path).auth(&live);
        async move { call.send().await }
    };
    let lpost = |path: String, body: Value| {
        let call = app.post(&path, body).auth(&live);
        async move { call.send().await }
    };

    for path in [
        at(PRODUCTS, &s.product, ""),
        at(PRICES, &s.price, ""),
        at(OFFERS, &s.offer, ""),
        at(CONFIGS, &cfg, ""),
    ] {
        lget(path).await.expect_error(404, "not_found");
    }
    for (path, body) in [
        (at(PRODUCTS, &s.product, "/publish"), json!({})),
        (at(PRICES, &draft_price, "/publish"), json!({})),
        (
            at(OFFERS, &s.offer, "/reprice"),
            json!({"amount": eur("1"), "reason": "r"}),
        ),
        (at(CONFIGS, &cfg, "/publish"), json!({})),
        (at(CONFIGS, &cfg, "/versions"), json!({})),
        (PRICES.to_owned(), price_body(&s.product, eur("1"), None)),
        (CONFIGS.to_owned(), config_body(vec![line(&s.offer, 1)])),
        (
            PLAN.to_owned(),
            promo(&[&s.offer], json!({"percent_off": 10})),
        ),
    ] {
        let r = lpost(path.clone(), body).await;
        assert_eq!(r.status, 404, "{path}: {}", r.text);
        r.expect_error(404, "not_found");
    }
    let r = app
        .post(APPLY, promo(&[&s.offer], json!({"percent_off": 10})))
        .if_match("*")
        .auth(&live)
        .send()
        .await;
    r.expect_error(404, "not_found");
    for path in [PRODUCTS, PRICES, OFFERS] {
        assert!(items(&lget(path.to_owned()).await).is_empty(), "{path}");
    }
    // Nothing in the sandbox moved.
    assert_eq!(price(&app, &draft_price).await["status"], "draft");
    let o = offer(&app, &s.offer).await;
    assert_eq!(o["price_ref"], s.price.as_str());
    assert!(o["promotion_ref"].is_null());
    let c = get(&app, &at(CONFIGS, &cfg, "")).await;
    assert_eq!(c.data()["current_version"], 1);
    assert_eq!(c.data()["status"], "draft");

    // And the other way round.
    let r = app
        .post(PRODUCTS, json!({"name": "Live product"}))
        .auth(&live)
        .send()
        .await;
    r.expect(201);
    let live_product = text(&r.data()["product_ref"]);
    app.get(&at(PRODUCTS, &live_product, ""))
        .send()
        .await
        .expect_error(404, "not_found");
    assert_eq!(list(&app, PRODUCTS).await.len(), 1);
    assert_eq!(items(&lget(PRODUCTS.to_owned()).await).len(), 1);
}

// ---- lists ----------------------------------------------------------------------

async fn lists(app: TestApp) {
    let mut made = Vec::new();
    for i in 0..5 {
        made.push(text(
            &create_product(&app, &format!("P{i}")).await["product_ref"],
        ));
        // Distinct creation times, so that newest first is creation order reversed.
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    for p in &made[..2] {
        publish(&app, &at(PRODUCTS, p, "/publish"))
            .await
            .expect(200);
    }
    // A cursor walk over every page.
    let all = walk(&app, PRODUCTS, 2).await;
    same_once(&refs(&all, "product_ref"), &made);
    newest_first(&all, "product_ref");
    for p in &all {
        has_fields(p, PRODUCT_FIELDS);
    }
    let first_page = app.get(&format!("{PRODUCTS}?limit=2")).send().await;
    assert_eq!(first_page.data()["has_more"], true);
    assert_eq!(
        refs(&list(&app, PRODUCTS).await, "product_ref"),
        refs(&all, "product_ref"),
        "one page holds them all"
    );
    let newest: Vec<String> = made.iter().rev().cloned().collect();
    assert_eq!(refs(&all, "product_ref"), newest, "newest first");

    // Filters.
    let published = list(&app, &format!("{PRODUCTS}?status=published")).await;
    same_once(&refs(&published, "product_ref"), &made[..2]);
    let drafts = list(&app, &format!("{PRODUCTS}?status=draft")).await;
    same_once(&refs(&drafts, "product_ref"), &made[2..]);
    assert!(list(&app, &format!("{PRODUCTS}?status=archived"))
        .await
        .is_empty());
    let walked = walk(&app, &format!("{PRODUCTS}?status=draft"), 1).await;
    same_once(&refs(&walked, "product_ref"), &made[2..]);
    for (query, field) in [
        ("status=bogus", "status"),
        ("status=superseded", "status"),
        ("colour=red", "colour"),
        ("product_ref=prd_N5xP3cV8bT1m", "product_ref"),
        ("limit=0", "limit"),
        ("limit=101", "limit"),
        ("cursor=garbage", "cursor"),
    ] {
        let r = app.get(&format!("{PRODUCTS}?{query}")).send().await;
        assert_eq!(r.status, 400, "{query}: {}", r.text);
        invalid(&r, field);
    }

    // Keyset paging: a product made after the first page shifts nothing.
    let cursor = text(&first_page.data()["next_cursor"]);
    assert_eq!(
        refs(
            first_page.data()["items"].as_array().unwrap(),
            "product_ref"
        ),
        newest[..2].to_vec()
    );
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    create_product(&app, "Newer").await;
    let mut rest = Vec::new();
    let mut next = Some(cursor);
    while let Some(c) = next {
        let r = get(&app, &format!("{PRODUCTS}?limit=2&cursor={c}")).await;
        rest.extend(refs(&items(&r), "product_ref"));
        next = r.data()["next_cursor"].as_str().map(str::to_owned);
    }
    assert_eq!(rest, newest[2..].to_vec(), "the later pages are unchanged");

    // Prices: status and product_ref.
    let (a, b) = (made[0].clone(), made[1].clone());
    let a1 = create_price(&app, &a, eur("100"), None).await;
    let a2 = create_price(&app, &a, eur("200"), None).await;
    let a3 = create_price(&app, &a, eur("300"), None).await;
    let b1 = create_price(&app, &b, eur("400"), Some("month")).await;
    for p in [&a1, &a2] {
        publish(&app, &at(PRICES, p, "/publish")).await.expect(200);
    }
    let q = |query: &str| format!("{PRICES}?{query}");
    let cases: Vec<(String, Vec<String>)> = vec![
        (
            q(&format!("product_ref={a}")),
            vec![a3.clone(), a2.clone(), a1.clone()],
        ),
        (q(&format!("product_ref={b}")), vec![b1.clone()]),
        (q("status=draft"), vec![b1.clone(), a3.clone()]),
        (q("status=published"), vec![a2.clone()]),
        (q("status=superseded"), vec![a1.clone()]),
        (
            q(&format!("product_ref={a}&status=draft")),
            vec![a3.clone()],
        ),
        (
            q(&format!("status=draft&product_ref={b}")),
            vec![b1.clone()],
        ),
        (q(&format!("product_ref={}", made[4])), vec![]),
    ];
    for (path, expected) in cases {
        let got = list(&app, &path).await;
        same_once(&refs(&got, "price_ref"), &expected);
        newest_first(&got, "price_ref");
        for p in &got {
            has_fields(p, PRICE_FIELDS);
        }
    }
    let all_prices = walk(&app, PRICES, 3).await;
    same_once(
        &refs(&all_prices, "price_ref"),
        &[a1.clone(), a2.clone(), a3.clone(), b1.clone()],
    );
    newest_first(&all_prices, "price_ref");
    for (query, field) in [
        ("status=active", "status"),
        ("status=bogus", "status"),
        ("product_ref=prd_short", "product_ref"),
        ("product_ref=pri_N5xP3cV8bT1m", "product_ref"),
        ("offer_ref=ofr_N5xP3cV8bT1m", "offer_ref"),
    ] {
        let r = app.get(&q(query)).send().await;
        assert_eq!(r.status, 400, "{query}: {}", r.text);
        invalid(&r, field);
    }
    // A cursor of another list.
    let page = app.get(&q("limit=1")).send().await;
    let cursor = text(&page.data()["next_cursor"]);
    let r = app
        .get(&format!("{PRODUCTS}?limit=1&cursor={cursor}"))
        .send()
        .await;
    invalid(&r, "cursor");
    let r = app
        .get(&format!("{PRICES}?limit=1&status=draft&cursor={cursor}"))
        .send()
        .await;
    invalid(&r, "cursor");

    // Offers: status and product_ref.
    publish(&app, &at(PRICES, &b1, "/publish"))
        .await
        .expect(200);
    let oa = text(&offer_of(&app, &a).await["offer_ref"]);
    let ob = text(&offer_of(&app, &b).await["offer_ref"]);
    let offers = walk(&app, OFFERS, 1).await;
    same_once(&refs(&offers, "offer_ref"), &[oa.clone(), ob.clone()]);
    newest_first(&offers, "offer_ref");
    for o in &offers {
        has_fields(o, OFFER_FIELDS);
    }
    let active = list(&app, &format!("{OFFERS}?status=active")).await;
    same_once(&refs(&active, "offer_ref"), &[oa.clone(), ob.clone()]);
    assert!(list(&app, &format!("{OFFERS}?status=retired"))
        .await
        .is_empty());
    let only_b = list(&app, &format!("{OFFERS}?product_ref={b}&status=active")).await;
    assert_eq!(refs(&only_b, "offer_ref"), vec![ob.clone()]);
    for (query, field) in [
        ("status=published", "status"),
        ("status=bogus", "status"),
        ("product_ref=bogus", "product_ref"),
        ("price_ref=pri_N5xP3cV8bT1m", "price_ref"),
    ] {
        let r = app.get(&format!("{OFFERS}?{query}")).send().await;
        assert_eq!(r.status, 400, "{query}: {}", r.text);
        invalid(&r, field);
    }
}

// ---- references -----------------------------------------------------------------

async fn unknown_and_malformed_refs(app: TestApp) {
    for (base, unknown, param, wrong) in [
        (PRODUCTS, NO_PRODUCT, "product_ref", NO_PRICE),
        (PRICES, NO_PRICE, "price_ref", NO_PRODUCT),
        (OFFERS, NO_OFFER, "offer_ref", NO_CONFIG),
        (CONFIGS, NO_CONFIG, "config_ref", NO_OFFER),
    ] {
        app.get(&at(base, unknown, ""))
            .send()
            .await
            .expect_error(404, "not_found");
        let prefix = &unknown[..unknown.find('_').expect("prefix") + 1];
        for malformed in [
            wrong.to_owned(),
            format!("{prefix}short"),
            format!("{prefix}N5xP3cV8bT1-"),
        ] {
            let r = app.get(&at(base, &malformed, "")).send().await;
            assert_eq!(r.status, 400, "{malformed}: {}", r.text);
            invalid(&r, param);
        }
    }
    for (path, body) in [
        (at(PRODUCTS, NO_PRODUCT, "/publish"), json!({})),
        (at(PRICES, NO_PRICE, "/publish"), json!({})),
        (
            at(OFFERS, NO_OFFER, "/reprice"),
            json!({"amount": eur("1"), "reason": "r"}),
        ),
        (at(CONFIGS, NO_CONFIG, "/publish"), json!({})),
        (at(CONFIGS, NO_CONFIG, "/versions"), json!({})),
    ] {
        let r = app.post(&path, body).send().await;
        assert_eq!(r.status, 404, "{path}: {}", r.text);
        r.expect_error(404, "not_found");
    }
    for (path, body, param) in [
        (at(PRODUCTS, NO_PRICE, "/publish"), json!({}), "product_ref"),
        (at(PRICES, "pri_x", "/publish"), json!({}), "price_ref"),
        (
            at(OFFERS, NO_PRODUCT, "/reprice"),
            json!({"amount": eur("1"), "reason": "r"}),
            "offer_ref",
        ),
        (at(CONFIGS, "cco_", "/publish"), json!({}), "config_ref"),
        (at(CONFIGS, NO_OFFER, "/versions"), json!({}), "config_ref"),
    ] {
        let r = app.post(&path, body).send().await;
        assert_eq!(r.status, 400, "{path}: {}", r.text);
        invalid(&r, param);
    }
}

// ---- permissions ----------------------------------------------------------------

async fn permissions(app: TestApp) {
    let s = sellable(&app, eur("1999"), None).await;
    let (_, reader) = app
        .principal_with(&["products:read_list", "promotion:read_plan"])
        .await;
    let r = app.get(PRODUCTS).auth(&reader).send().await;
    assert_eq!(items(&r).len(), 1);
    app.post(PRODUCTS, json!({"name": "x"}))
        .auth(&reader)
        .send()
        .await
        .expect_error(403, "forbidden");
    // Forbidden whatever the reference.
    for path in [at(PRODUCTS, &s.product, ""), at(PRODUCTS, NO_PRODUCT, "")] {
        app.get(&path)
            .auth(&reader)
            .send()
            .await
            .expect_error(403, "forbidden");
    }
    let body = promo(&[&s.offer], json!({"percent_off": 10}));
    let r = app.req("POST", PLAN).json(&body).auth(&reader).send().await;
    r.expect(200);
    let tag = r.etag();
    app.post(APPLY, body.clone())
        .if_match(&tag)
        .auth(&reader)
        .send()
        .await
        .expect_error(403, "forbidden");
    assert!(offer(&app, &s.offer).await["promotion_ref"].is_null());

    let (_, pricer) = app.principal_with(&["products:reprice"]).await;
    let r = app
        .post(
            &at(OFFERS, &s.offer, "/reprice"),
            json!({"amount": eur("2999"), "reason": "r"}),
        )
        .auth(&pricer)
        .send()
        .await;
    r.expect(200);
    app.post(&at(PRICES, &s.price, "/publish"), json!({}))
        .auth(&pricer)
        .send()
        .await
        .expect_error(403, "forbidden");
    // No credential at all.
    app.get(OFFERS)
        .no_auth()
        .send()
        .await
        .expect_error(401, "authentication_failed");
}

// ---- webhook scopes -------------------------------------------------------------

async fn webhook_scopes_name_existing_products(app: TestApp) {
    let r = app
        .post(ENDPOINTS, json!({"url": "https://example.com/hooks"}))
        .send()
        .await;
    r.expect(201);
    let endpoint = text(&r.data()["endpoint_ref"]);
    let path = format!("{ENDPOINTS}/{endpoint}/subscriptions");
    let sub = |scope_ref: &str| {
        json!({"public_event_type": "order.created", "scope_type": "product",
            "scope_ref": scope_ref, "dto_version": 1})
    };
    app.post(&path, sub(NO_PRODUCT))
        .send()
        .await
        .expect_error(404, "not_found");
    // A product of the live environment is unknown here.
    let r = app
        .post(PRODUCTS, json!({"name": "Live"}))
        .auth(&app.live.secret)
        .send()
        .await;
    r.expect(201);
    app.post(&path, sub(&text(&r.data()["product_ref"])))
        .send()
        .await
        .expect_error(404, "not_found");
    // A draft product of the environment is a scope.
    let product = text(&create_product(&app, "Scoped").await["product_ref"]);
    let r = app.post(&path, sub(&product)).send().await;
    r.expect(201);
    assert_eq!(r.data()["scope_type"], "product");
    assert_eq!(r.data()["scope_ref"], product.as_str());
    let listed = list(&app, &path).await;
    assert_eq!(listed.len(), 1, "the refused ones were not made");
    // Another type with a product scope.
    app.post(
        &path,
        json!({"public_event_type": "payment.succeeded", "scope_type": "product",
            "scope_ref": NO_PRODUCT, "dto_version": 2}),
    )
    .send()
    .await
    .expect_error(404, "not_found");
}

backend_tests!(
    products,
    publish_needs_a_json_object,
    product_validation,
    prices_and_offers,
    refused_transitions,
    a_second_price_supersedes_the_first,
    bad_money_is_refused,
    interval_rules,
    reprice,
    reprice_validation,
    plan_arithmetic,
    plan_arithmetic_on_the_largest_amount,
    plan_digest,
    apply_promotion,
    apply_after_a_change_is_412,
    scheduled_promotions,
    promotion_validation,
    checkout_configs,
    checkout_config_line_items,
    checkout_config_custom_fields,
    checkout_config_custom_field_refs,
    custom_field_refs_of_versions_older_than_the_migration,
    checkout_config_versions,
    concurrent_price_publishes,
    concurrent_overlapping_applies,
    concurrent_reprice_and_publish,
    a_promotion_outlives_a_reprice,
    idempotent_replays,
    environments_are_isolated,
    lists,
    unknown_and_malformed_refs,
    permissions,
    webhook_scopes_name_existing_products,
);
