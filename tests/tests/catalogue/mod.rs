//! The catalogue and checkout configs (contract sections 8, 10 and 10.1;
//! the wire shapes and decisions of `docs/catalogue.md`), black-box, on
//! every backend: products, prices, offers, repricing, promotion plans and
//! their application, checkout configs and their versions, with each
//! operation's shapes, errors, idempotent replays, concurrency, isolation
//! between environments, lists, and the product scope of webhook
//! subscriptions.

use billing_tests::kit::api::*;
use billing_tests::kit::{
    self, at, etag_matches, eur, field_refs, get, has_fields, invalid, invalid_under, is_ref,
    is_ts, items, later, money, newest_first, refs, refused, text, ts_of, walk,
};
use billing_tests::{backend_tests, unique_key, Resp, TestApp};
use domain::Timestamp;
use serde_json::{json, Value};
use std::collections::HashSet;

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

/// Asserts the same references, each exactly once.
#[track_caller]
fn same_once(seen: &[String], expected: &[String]) {
    let unique: HashSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "seen twice: {seen:?}");
    let want: HashSet<&String> = expected.iter().collect();
    assert_eq!(unique, want);
}

mod products;
use products::*;
mod prices_and_offers;
use prices_and_offers::*;
mod money_and_intervals;
use money_and_intervals::*;
mod reprice;
use reprice::*;
mod promotions;
use promotions::*;
mod checkout_configs;
use checkout_configs::*;
mod concurrency;
use concurrency::*;
mod idempotency;
use idempotency::*;
mod environments;
use environments::*;
mod lists;
use lists::*;
mod references;
use references::*;
mod permissions;
use permissions::*;
mod webhook_scopes;
use webhook_scopes::*;

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
