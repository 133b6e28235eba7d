//! The events a payment emits, end to end (issue 17; contract section 9;
//! `docs/checkout.md`): a real local receiver subscribed to
//! `payment.succeeded` versions 1 and 2, `checkout_session.completed`,
//! `order.created`, `invoice.paid`, `entitlement.granted` and
//! `subscription.started` gets each event of a one-time and a recurring
//! payment exactly once, signed so that the official Standard Webhooks
//! verifier accepts it, its `data` the resource as its retrieve answers it,
//! with the personal fields left out unless the endpoint's data profile
//! grant covers them. A session's `custom_fields` object always arrives;
//! inside it, a value only for an endpoint whose grant names that field's
//! `custom_field_ref` (contract 9, issue 27).
//!
//! The writes' events leave through the outbox: into the store's queue on
//! every backend (`backend_tests!`), and across RabbitMQ to two dispatchers
//! in the fleet variant (only with `BILLING_TEST_FLEET=1`; then a missing
//! broker or PostgreSQL is a failure, never a skip).

use billing_tests::kit::api::*;
use billing_tests::kit::{
    self, all_succeeded, eur, get, is_ref, listed_as_received, retrieve, sellable, text,
};
use billing_tests::receiver::{Behaviour, Received, TestReceiver};
use billing_tests::{
    backend_tests, fleet_or_say, verifier, Backend, EventPipeline as Pipeline, TestApp, TestQueues,
};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Once;

/// The buyers of the two sessions, and the custom field values of the
/// first: personal data that must not reach an endpoint whose grant does
/// not cover it.
const ADA: (&str, &str) = ("ada.lovelace@example.com", "Ada Lovelace");
const GRACE: (&str, &str) = ("grace.hopper@example.com", "Grace Hopper");
const GIFT_NOTE: &str = "Leave it with the concierge";
const PO_NUMBER: &str = "PO-7781-Kestrel";
/// The one-time config's custom fields and the first session's values.
const FIELD_VALUES: &[(&str, &str)] = &[("gift_note", GIFT_NOTE), ("po_number", PO_NUMBER)];

/// What every endpoint here subscribes to. An endpoint may hold one
/// subscription per type and scope (contract 9: the same endpoint, type and
/// scope twice is `semantic_error`), so `payment.succeeded` version 2 is
/// subscribed in the environment's scope and version 1 in the scope of each
/// product: the one-time payment matches two of those (book and poster) and
/// is still delivered once in version 1.
const SUBSCRIBED: &[(&str, u32)] = &[
    ("payment.succeeded", 2),
    ("payment.succeeded", 1),
    ("checkout_session.completed", 1),
    ("order.created", 1),
    ("invoice.paid", 1),
    ("entitlement.granted", 1),
    ("subscription.started", 1),
];

/// The deliveries the two payments make to each endpoint, by type and
/// version: a one-time session of two products and a monthly session of
/// one, so three entitlements and one subscription.
const EXPECTED_COUNTS: &[((&str, u32), usize)] = &[
    (("payment.succeeded", 1), 2),
    (("payment.succeeded", 2), 2),
    (("checkout_session.completed", 1), 2),
    (("order.created", 1), 2),
    (("invoice.paid", 1), 2),
    (("entitlement.granted", 1), 3),
    (("subscription.started", 1), 1),
];

/// The distinct events of the two payments (a `payment.succeeded` event is
/// delivered once per subscribed version).
const EVENTS: usize = 12;

fn total_deliveries() -> usize {
    EXPECTED_COUNTS.iter().map(|(_, n)| n).sum()
}

// ---- helpers --------------------------------------------------------------------

/// Every item of the list at `base` (this test's environment holds only
/// the two payments' records), each as its retrieve answers it.
async fn retrieve_all(app: &TestApp, base: &str, ref_field: &str) -> Vec<Value> {
    let r = app.get(&format!("{base}?limit=100")).send().await;
    r.expect(200);
    let mut out = Vec::new();
    for item in r.data()["items"].as_array().expect("items") {
        out.push(retrieve(app, base, &text(&item[ref_field])).await);
    }
    out
}

/// A published product with a published price of `amount`; returns
/// `(product_ref, offer_ref)`.
async fn offer(
    app: &TestApp,
    name: &str,
    amount: Value,
    interval: Option<&str>,
) -> (String, String) {
    let s = sellable(app, name, amount, interval).await;
    (s.product, s.offer)
}

/// Creates and publishes a checkout config from `body`; its reference and
/// its custom fields' references by key.
async fn published_config(app: &TestApp, body: Value) -> (String, BTreeMap<String, String>) {
    let r = app.post(CONFIGS, body).send().await;
    r.expect(201);
    let config = text(&r.data()["config_ref"]);
    let fields = kit::field_refs(r.data());
    let created = r.data()["custom_fields"].clone();
    let r = app
        .post(&format!("{CONFIGS}/{config}/publish"), json!({}))
        .send()
        .await;
    r.expect(200);
    assert_eq!(r.data()["custom_fields"], created, "publishing keeps them");
    (config, fields)
}

/// Opens a session of `config` for `buyer` and pays it with `pm_card_visa`;
/// returns `(checkout_session_ref, payment_ref)`.
async fn pay_session(
    app: &TestApp,
    config: &str,
    buyer: (&str, &str),
    custom_fields: Option<Value>,
    result: &str,
) -> (String, String) {
    let mut body = json!({"config_ref": config, "buyer": {"email": buyer.0, "name": buyer.1}});
    if let Some(fields) = custom_fields {
        body["custom_fields"] = fields;
    }
    let r = app.post(SESSIONS, body).send().await;
    r.expect(201);
    let session = text(&r.data()["checkout_session_ref"]);
    let r = app
        .post(
            &format!("{SESSIONS}/{session}/pay"),
            json!({"payment_method": "pm_card_visa"}),
        )
        .send()
        .await;
    r.expect(200);
    assert_eq!(r.data()["result"], result, "{}", r.text);
    assert_eq!(r.data()["payment"]["status"], "succeeded", "{}", r.text);
    assert_eq!(r.data()["checkout_session"]["status"], "complete");
    (session, text(&r.data()["payment"]["payment_intent_ref"]))
}

/// What the two payments buy: a one-time config of two products (book and
/// poster, with two custom fields) and a monthly config of one (magazine,
/// no custom field).
struct Catalogue {
    one_time: String,
    monthly: String,
    /// Book, poster, magazine.
    products: Vec<String>,
    /// The one-time config's `custom_field_ref`s by key.
    field_refs: BTreeMap<String, String>,
}

async fn catalogue(app: &TestApp) -> Catalogue {
    let (book, book_offer) = offer(app, "Book", eur("1999"), None).await;
    let (poster, poster_offer) = offer(app, "Poster", eur("500"), None).await;
    let (magazine, magazine_offer) = offer(app, "Magazine", eur("999"), Some("month")).await;
    let (one_time, field_refs) = published_config(
        app,
        json!({"name": "Shop", "success_url": "https://example.com/ok",
            "line_items": [{"offer_ref": book_offer, "quantity": 2}, {"offer_ref": poster_offer, "quantity": 1}],
            "custom_fields": [{"key": "gift_note", "label": "Gift note", "type": "text"},
                {"key": "po_number", "label": "PO number", "type": "text"}]}),
    )
    .await;
    assert_eq!(field_refs.len(), 2);
    assert_ne!(field_refs["gift_note"], field_refs["po_number"]);
    let (monthly, _) = published_config(
        app,
        json!({"name": "Subscribe", "success_url": "https://example.com/ok",
            "line_items": [{"offer_ref": magazine_offer, "quantity": 1}]}),
    )
    .await;
    Catalogue {
        one_time,
        monthly,
        products: vec![book, poster, magazine],
        field_refs,
    }
}

/// The two payments' sessions and payments.
struct Purchases {
    sessions: Vec<String>,
    payments: Vec<String>,
}

async fn make_purchases(app: &TestApp, c: &Catalogue) -> Purchases {
    let (s1, p1) = pay_session(
        app,
        &c.one_time,
        ADA,
        Some(json!({ "gift_note": GIFT_NOTE, "po_number": PO_NUMBER })),
        "retrieve_payment_response",
    )
    .await;
    let (s2, p2) = pay_session(app, &c.monthly, GRACE, None, "subscription_started").await;
    Purchases {
        sessions: vec![s1, s2],
        payments: vec![p1, p2],
    }
}

// ---- endpoints ------------------------------------------------------------------

/// An endpoint subscribed to everything in `SUBSCRIBED`, with its receiver.
struct Endpoint {
    endpoint_ref: String,
    secret: String,
    receiver: TestReceiver,
    /// Whether its grant covers `contact` and `payment_instrument`.
    granted: bool,
    /// The keys of the one-time config's custom fields whose references
    /// its grant names.
    fields: Vec<&'static str>,
}

impl Endpoint {
    fn who(&self) -> String {
        format!(
            "{}, fields {:?}",
            if self.granted {
                "granted"
            } else {
                "no classes"
            },
            self.fields
        )
    }
}

/// An endpoint without a grant (`granted` false, no `fields`), or with one
/// covering `contact` and `payment_instrument` when `granted` and naming
/// the references of the custom fields `fields`.
async fn endpoint(
    app: &TestApp,
    c: &Catalogue,
    granted: bool,
    fields: &[&'static str],
) -> Endpoint {
    let receiver = TestReceiver::start(Behaviour::Status(204)).await;
    let (endpoint_ref, secret) = app
        .subscribed_endpoint(&receiver.url(), "payment.succeeded", 2)
        .await;
    let subscribe = |event_type: &str, dto_version: u32, scope_type: &str, scope_ref: &str| {
        app.post(
            &format!("{ENDPOINTS}/{endpoint_ref}/subscriptions"),
            json!({"public_event_type": event_type, "scope_type": scope_type,
                "scope_ref": scope_ref, "dto_version": dto_version}),
        )
        .send()
    };
    for (event_type, dto_version) in &SUBSCRIBED[2..] {
        subscribe(
            event_type,
            *dto_version,
            "environment",
            &app.sandbox.environment_ref,
        )
        .await
        .expect(201);
    }
    for product in &c.products {
        subscribe("payment.succeeded", 1, "product", product)
            .await
            .expect(201);
    }
    if granted || !fields.is_empty() {
        let classes: &[&str] = if granted {
            &["contact", "payment_instrument"]
        } else {
            &[]
        };
        grant(app, &endpoint_ref, classes, &field_refs(c, fields)).await;
    }
    Endpoint {
        endpoint_ref,
        secret,
        receiver,
        granted,
        fields: fields.to_vec(),
    }
}

/// The references of the one-time config's fields `keys`.
fn field_refs(c: &Catalogue, keys: &[&str]) -> Vec<String> {
    keys.iter().map(|k| c.field_refs[*k].clone()).collect()
}

/// Gives `endpoint_ref` a new active grant of `classes` and `field_refs`.
async fn grant(app: &TestApp, endpoint_ref: &str, classes: &[&str], field_refs: &[String]) {
    let r = app
        .post(
            &format!("{ENDPOINTS}/{endpoint_ref}/data_profile_grants"),
            json!({"purpose": "fulfillment", "reason": "ship the goods",
                "data_classes": classes, "custom_field_refs": field_refs}),
        )
        .send()
        .await;
    r.expect(201);
    assert_eq!(r.data()["status"], "active", "{}", r.text);
    assert_eq!(r.data()["custom_field_refs"], json!(field_refs));
}

/// Waits until every endpoint's receiver got all its deliveries, the
/// endpoint lists them all as succeeded, and the pipeline is idle (no event
/// left to relay or fan out, no delivery due): a duplicate would have been
/// made by then.
async fn all_delivered(app: &TestApp, endpoints: &[&Endpoint]) {
    let total = total_deliveries();
    for e in endpoints {
        all_succeeded(app, &e.receiver, &e.endpoint_ref, total).await;
    }
    app.eventually(15, || async { app.idle().await.then_some(()) })
        .await;
}

// ---- what is expected -------------------------------------------------------------

/// The reference field that names the resource an event of `event_type`
/// and `dto_version` carries.
fn ref_field(event_type: &str, dto_version: u32) -> &'static str {
    match (event_type, dto_version) {
        ("payment.succeeded", _) => "payment_ref",
        ("checkout_session.completed", _) => "checkout_session_ref",
        ("order.created", _) => "order_ref",
        ("invoice.paid", _) => "invoice_ref",
        ("entitlement.granted", _) => "entitlement_ref",
        ("subscription.started", _) => "subscription_ref",
        other => panic!("no such event here: {other:?}"),
    }
}

/// `payment.succeeded` version 1: the flat shape of the payment resource
/// (`docs/checkout.md`), built here from the retrieve answer.
fn payment_v1(p: &Value) -> Value {
    json!({
        "payment_ref": p["payment_ref"],
        "amount": p["amount"],
        "status": p["status"],
        "captured_at": p["captured_at"],
        "buyer_ref": p["buyer_ref"],
        "buyer_email": p["buyer"]["email"],
        "buyer_name": p["buyer"]["name"],
        "card_brand": p["payment_method"]["brand"],
        "card_last4": p["payment_method"]["last4"],
        "product_refs": p["product_refs"],
    })
}

/// The resources the events must carry, unshaped, by (type, version),
/// each keyed by its reference, as their retrieves answer now.
type Resources = BTreeMap<(String, u32), BTreeMap<String, Value>>;

async fn resources(app: &TestApp, purchases: &Purchases) -> Resources {
    let mut out: Resources = BTreeMap::new();
    let mut put = |event_type: &str, version: u32, v: Value| {
        let key = text(&v[ref_field(event_type, version)]);
        let previous = out
            .entry((event_type.to_owned(), version))
            .or_default()
            .insert(key.clone(), v);
        assert!(previous.is_none(), "{key} twice");
    };
    for p in &purchases.payments {
        let payment = retrieve(app, PAYMENTS, p).await;
        assert_eq!(payment["payment_ref"], payment["payment_intent_ref"]);
        assert_eq!(payment["payment_method"]["brand"], "visa", "{payment}");
        assert_eq!(payment["payment_method"]["last4"], "4242", "{payment}");
        put("payment.succeeded", 1, payment_v1(&payment));
        put("payment.succeeded", 2, payment);
    }
    for s in &purchases.sessions {
        put(
            "checkout_session.completed",
            1,
            retrieve(app, SESSIONS, s).await,
        );
    }
    let first = retrieve(app, SESSIONS, &purchases.sessions[0]).await;
    assert_eq!(
        first["custom_fields"],
        json!({ "gift_note": GIFT_NOTE, "po_number": PO_NUMBER })
    );
    let second = retrieve(app, SESSIONS, &purchases.sessions[1]).await;
    assert_eq!(second["custom_fields"], json!({}));
    for (event_type, base, field) in [
        ("order.created", ORDERS, "order_ref"),
        ("invoice.paid", INVOICES, "invoice_ref"),
        ("entitlement.granted", ENTITLEMENTS, "entitlement_ref"),
        ("subscription.started", SUBSCRIPTIONS, "subscription_ref"),
    ] {
        for v in retrieve_all(app, base, field).await {
            put(event_type, 1, v);
        }
    }
    for ((event_type, version), n) in EXPECTED_COUNTS {
        let got = out
            .get(&((*event_type).to_owned(), *version))
            .map_or(0, BTreeMap::len);
        assert_eq!(got, *n, "records behind {event_type} v{version}");
    }
    out
}

/// Removes the field at the dotted `path`, if there.
fn remove(data: &mut Value, path: &str) {
    let (parent, last) = match path.rsplit_once('.') {
        Some((parent, last)) => (
            data.pointer_mut(&format!("/{}", parent.replace('.', "/"))),
            last,
        ),
        None => (Some(data), path),
    };
    if let Some(Value::Object(obj)) = parent {
        obj.remove(last);
    }
}

/// The personal fields of each shape (`docs/checkout.md`): `contact` (the
/// buyer's e-mail and name) and `payment_instrument` (the card). Shaping omits a field whose class the grant does not cover
/// (contract 9: "otherwise the field is omitted").
fn personal_fields(event_type: &str, dto_version: u32) -> &'static [&'static str] {
    match (event_type, dto_version) {
        ("payment.succeeded", 1) => &["buyer_email", "buyer_name", "card_brand", "card_last4"],
        ("payment.succeeded", 2) => &["buyer.email", "buyer.name", "payment_method"],
        ("checkout_session.completed", 1) => &["buyer.email", "buyer.name"],
        _ => &[],
    }
}

/// What endpoint `e` must receive as `data` for `resource`: without the
/// grant of classes, without its personal fields; a checkout session's
/// `custom_fields` object with only the values of the fields whose
/// references the grant names (contract 9: the object itself always).
fn delivered_form(event_type: &str, dto_version: u32, resource: &Value, e: &Endpoint) -> Value {
    let mut data = resource.clone();
    if !e.granted {
        for path in personal_fields(event_type, dto_version) {
            remove(&mut data, path);
        }
    }
    if event_type == "checkout_session.completed" {
        let fields = data["custom_fields"]
            .as_object_mut()
            .expect("a session's custom_fields is an object");
        fields.retain(|key, _| e.fields.contains(&key.as_str()));
    }
    data
}

// ---- checks -------------------------------------------------------------------

/// Checks everything `e` received against `expected`; returns the event
/// references it got.
async fn check_endpoint(app: &TestApp, e: &Endpoint, expected: &Resources) -> BTreeSet<String> {
    let got: Vec<Received> = e.receiver.received();
    let who = e.who();
    assert_eq!(
        got.len(),
        total_deliveries(),
        "{who}: every delivery exactly once: {:#?}",
        got.iter()
            .map(|r| (
                r.header("webhook-id").to_owned(),
                r.json()["public_event_type"].clone()
            ))
            .collect::<Vec<_>>()
    );
    assert!(got.iter().all(Received::succeeded));

    // One request per delivery, one delivery per (event, dto_version).
    verifier::each_signed_once(&got, &e.secret, &format!("{who}: "));
    let mut per_event: BTreeMap<String, Vec<(String, u32)>> = BTreeMap::new();
    let mut by_kind: BTreeMap<(String, u32), BTreeMap<String, Value>> = BTreeMap::new();
    for r in &got {
        let body = r.json();
        is_ref(&body["event_ref"], "evt_");
        assert_eq!(body["environment_ref"], app.sandbox.environment_ref);
        assert!(
            body["occurred_at"]
                .as_str()
                .and_then(domain::Timestamp::parse)
                .is_some(),
            "{body}"
        );
        let event_type = text(&body["public_event_type"]);
        let version = body["dto_version"].as_u64().expect("dto_version") as u32;
        assert!(
            SUBSCRIBED.contains(&(event_type.as_str(), version)),
            "{who}: not subscribed: {body}"
        );
        per_event
            .entry(text(&body["event_ref"]))
            .or_default()
            .push((event_type.clone(), version));
        let data = body["data"].clone();
        let key = text(&data[ref_field(&event_type, version)]);
        let previous = by_kind
            .entry((event_type.clone(), version))
            .or_default()
            .insert(key.clone(), data);
        assert!(
            previous.is_none(),
            "{who}: {event_type} v{version} of {key} arrived twice"
        );

        // Personal data never travels without a grant, wherever it would sit.
        let raw = String::from_utf8_lossy(&r.body);
        let session_event = event_type == "checkout_session.completed";
        let mut secret_values: Vec<&str> = FIELD_VALUES
            .iter()
            .filter(|(key, _)| !(session_event && e.fields.contains(key)))
            .map(|(_, value)| *value)
            .collect();
        if !e.granted {
            secret_values.extend([ADA.0, ADA.1, GRACE.0, GRACE.1]);
        }
        for s in secret_values {
            assert!(!raw.contains(s), "{who}: {s:?} was delivered: {raw}");
        }
    }

    // Each event once, in each subscribed version; payment.succeeded in both.
    assert_eq!(per_event.len(), EVENTS, "{who}: {per_event:#?}");
    for (event_ref, kinds) in &per_event {
        let types: BTreeSet<&str> = kinds.iter().map(|(t, _)| t.as_str()).collect();
        assert_eq!(types.len(), 1, "{event_ref}: {kinds:?}");
        let mut versions: Vec<u32> = kinds.iter().map(|(_, v)| *v).collect();
        versions.sort_unstable();
        let want = if types.contains("payment.succeeded") {
            vec![1, 2]
        } else {
            vec![1]
        };
        assert_eq!(versions, want, "{who}: {event_ref}: {kinds:?}");
    }

    // The data is the resource as its retrieve answers it, shaped.
    for ((event_type, version), want) in expected {
        let have = by_kind
            .get(&(event_type.clone(), *version))
            .cloned()
            .unwrap_or_default();
        assert_eq!(
            have.keys().collect::<Vec<_>>(),
            want.keys().collect::<Vec<_>>(),
            "{who}: {event_type} v{version}: the resources delivered"
        );
        for (key, resource) in want {
            let shaped = delivered_form(event_type, *version, resource, e);
            assert_eq!(
                have[key], shaped,
                "{who}: {event_type} v{version} of {key}: delivered (left) vs retrieved and shaped (right)"
            );
        }
    }
    assert_eq!(by_kind.len(), expected.len(), "{who}: {by_kind:#?}");

    // The personal fields, stated outright.
    for v2 in by_kind[&("payment.succeeded".to_owned(), 2)].values() {
        if e.granted {
            assert!(
                [ADA.0, GRACE.0].contains(&v2["buyer"]["email"].as_str().unwrap_or("")),
                "{v2}"
            );
            assert!(v2["buyer"]["name"].is_string(), "{v2}");
            assert_eq!(v2["payment_method"]["type"], "card", "{v2}");
            assert_eq!(v2["payment_method"]["brand"], "visa", "{v2}");
            assert_eq!(v2["payment_method"]["last4"], "4242", "{v2}");
            assert!(v2["payment_method"]["exp_month"].is_u64(), "{v2}");
            assert!(v2["payment_method"]["exp_year"].is_u64(), "{v2}");
        } else {
            assert_eq!(v2["buyer"], json!({}), "{v2}");
            assert!(v2.get("payment_method").is_none(), "{v2}");
        }
        is_ref(&v2["buyer_ref"], "buy_");
        assert_eq!(v2["status"], "succeeded");
        assert!(v2["amount"].is_object());
    }
    for v1 in by_kind[&("payment.succeeded".to_owned(), 1)].values() {
        let fields: BTreeSet<&str> = v1
            .as_object()
            .expect("an object")
            .keys()
            .map(String::as_str)
            .collect();
        let mut want: BTreeSet<&str> = [
            "payment_ref",
            "amount",
            "status",
            "captured_at",
            "buyer_ref",
            "product_refs",
        ]
        .into();
        if e.granted {
            want.extend(["buyer_email", "buyer_name", "card_brand", "card_last4"]);
            assert_eq!(v1["card_brand"], "visa", "{v1}");
            assert_eq!(v1["card_last4"], "4242", "{v1}");
            assert!(
                [ADA.0, GRACE.0].contains(&v1["buyer_email"].as_str().unwrap_or("")),
                "{v1}"
            );
        }
        assert_eq!(fields, want, "{who}: the flat shape: {v1}");
        is_ref(&v1["payment_ref"], "pay_");
    }
    for s in by_kind[&("checkout_session.completed".to_owned(), 1)].values() {
        if e.granted {
            assert!(s["buyer"]["email"].is_string(), "{s}");
            assert!(s["buyer"]["name"].is_string(), "{s}");
        } else {
            assert_eq!(s["buyer"], json!({}), "{s}");
        }
        assert_eq!(s["status"], "complete", "{s}");
        // The one-time session's values, those the grant names; the
        // monthly session has none. The object arrives either way.
        let retrieved = &expected[&("checkout_session.completed".to_owned(), 1)]
            [&text(&s["checkout_session_ref"])];
        let values: serde_json::Map<String, Value> = if retrieved["custom_fields"] == json!({}) {
            serde_json::Map::new()
        } else {
            FIELD_VALUES
                .iter()
                .filter(|(key, _)| e.fields.contains(key))
                .map(|(key, value)| ((*key).to_owned(), json!(value)))
                .collect()
        };
        assert_eq!(s["custom_fields"], Value::Object(values), "{who}: {s}");
    }

    // Every matching subscription is a match reason of its one delivery,
    // and the body view is the body as delivered.
    for r in &got {
        let body = r.json();
        let event_type = text(&body["public_event_type"]);
        let version = body["dto_version"].as_u64().unwrap_or(0);
        let reason = |scope_type: &str, scope_ref: &Value| {
            json!({"kind": "subscription", "public_event_type": event_type,
                "scope_type": scope_type, "scope_ref": scope_ref, "dto_version": version})
        };
        let mut want: Vec<Value> = if (event_type.as_str(), version) == ("payment.succeeded", 1) {
            body["data"]["product_refs"]
                .as_array()
                .expect("product_refs")
                .iter()
                .map(|p| reason("product", p))
                .collect()
        } else {
            vec![reason("environment", &json!(app.sandbox.environment_ref))]
        };
        let view = get(
            app,
            &format!("/api/v1/webhook_deliveries/{}/body", r.header("webhook-id")),
        )
        .await;
        let view = view.data();
        assert_eq!(view["body_status"], "available", "{view}");
        assert_eq!(view["payload"], body, "{who}: the body view");
        let mut have = view["match_reasons"]
            .as_array()
            .expect("match_reasons")
            .clone();
        let order = |v: &Value| v.to_string();
        have.sort_by_key(order);
        want.sort_by_key(order);
        assert_eq!(have, want, "{who}: match reasons of {body}");
    }

    // The endpoint's deliveries are exactly the requests received.
    listed_as_received(app, &e.endpoint_ref, &got, &format!("{who}: ")).await;

    per_event.into_keys().collect()
}

// ---- tests --------------------------------------------------------------------

/// Endpoint A has no data profile grant: every event of the two payments
/// arrives once per subscription, verified, as its resource without the
/// personal fields.
async fn payment_events_arrive_once_signed_and_redacted(app: TestApp) {
    let c = catalogue(&app).await;
    let a = endpoint(&app, &c, false, &[]).await;
    let pipeline = Pipeline::embedded(&app);
    let purchases = make_purchases(&app, &c).await;
    all_delivered(&app, &[&a]).await;
    let expected = resources(&app, &purchases).await;
    check_endpoint(&app, &a, &expected).await;
    pipeline.shutdown().await;
    assert!(app.store.outbox_batch(10).await.unwrap().is_empty());
}

/// Endpoint B's grant covers `contact` and `payment_instrument` and names
/// no custom field: it gets the same events with the buyer's e-mail and
/// name and the card, and the session's `custom_fields` as `{}`; endpoint
/// A, beside it, still gets them without.
async fn a_grant_delivers_contact_and_card(app: TestApp) {
    let c = catalogue(&app).await;
    let a = endpoint(&app, &c, false, &[]).await;
    let b = endpoint(&app, &c, true, &[]).await;
    let pipeline = Pipeline::embedded(&app);
    let purchases = make_purchases(&app, &c).await;
    all_delivered(&app, &[&a, &b]).await;
    let expected = resources(&app, &purchases).await;
    let seen_by_b = check_endpoint(&app, &b, &expected).await;
    let seen_by_a = check_endpoint(&app, &a, &expected).await;
    assert_eq!(seen_by_a, seen_by_b, "both endpoints got the same events");
    pipeline.shutdown().await;
}

/// The `data` of the `checkout_session.completed` delivery `e` received for
/// `session`, and the delivery's reference.
fn session_delivered(e: &Endpoint, session: &str) -> (String, Value) {
    let found: Vec<(String, Value)> = e
        .receiver
        .received()
        .iter()
        .map(|r| (r.header("webhook-id").to_owned(), r.json()))
        .filter(|(_, body)| {
            body["public_event_type"] == "checkout_session.completed"
                && body["data"]["checkout_session_ref"] == session
        })
        .map(|(id, body)| (id, body["data"].clone()))
        .collect();
    assert_eq!(found.len(), 1, "{}: one delivery of {session}", e.who());
    found.into_iter().next().unwrap_or_default()
}

/// The delivery `e` received of `event_type` in `version` for the resource
/// `reference`.
fn delivery_of(e: &Endpoint, event_type: &str, version: u32, reference: &str) -> String {
    e.receiver
        .received()
        .iter()
        .find(|r| {
            let body = r.json();
            body["public_event_type"] == event_type
                && body["dto_version"] == version
                && body["data"][ref_field(event_type, version)] == reference
        })
        .map(|r| r.header("webhook-id").to_owned())
        .unwrap_or_else(|| panic!("{}: no {event_type} v{version} of {reference}", e.who()))
}

async fn body_status(app: &TestApp, delivery: &str) -> Value {
    let r = get(app, &format!("/api/v1/webhook_deliveries/{delivery}/body")).await;
    r.data()["body_status"].clone()
}

/// A session with two custom fields (issue 27): endpoint `both`'s grant
/// names both fields' `custom_field_ref`s and receives both values, `one`'s
/// names one and receives that one, `none` has no grant and receives `{}`;
/// each receives the session as `retrieveCheckoutSession` answers it with
/// the values its grant does not name removed (and, without `contact`, the
/// buyer's e-mail and name). Grants decide by reference afterwards too: a
/// new grant naming the same fields keeps the stored session body, one
/// naming fewer redacts it, and so does revoking; bodies holding no value
/// stay.
async fn custom_fields_reach_the_endpoints_whose_grants_name_them(app: TestApp) {
    let c = catalogue(&app).await;
    let none = endpoint(&app, &c, false, &[]).await;
    let one = endpoint(&app, &c, false, &["gift_note"]).await;
    let both = endpoint(&app, &c, false, &["gift_note", "po_number"]).await;
    let pipeline = Pipeline::embedded(&app);
    let purchases = make_purchases(&app, &c).await;
    all_delivered(&app, &[&none, &one, &both]).await;
    let expected = resources(&app, &purchases).await;
    let seen = check_endpoint(&app, &none, &expected).await;
    assert_eq!(check_endpoint(&app, &one, &expected).await, seen);
    assert_eq!(check_endpoint(&app, &both, &expected).await, seen);
    pipeline.shutdown().await;

    // Stated outright, against the retrieve answer.
    let (with_values, without_values) = (&purchases.sessions[0], &purchases.sessions[1]);
    let retrieved = retrieve(&app, SESSIONS, with_values).await;
    assert_eq!(
        retrieved["custom_fields"],
        json!({"gift_note": GIFT_NOTE, "po_number": PO_NUMBER})
    );
    for (e, values) in [
        (&none, json!({})),
        (&one, json!({ "gift_note": GIFT_NOTE })),
        (
            &both,
            json!({ "gift_note": GIFT_NOTE, "po_number": PO_NUMBER }),
        ),
    ] {
        let (_, data) = session_delivered(e, with_values);
        let mut want = retrieved.clone();
        want["buyer"] = json!({});
        want["custom_fields"] = values;
        assert_eq!(
            data,
            want,
            "{}: delivered (left) vs retrieved, shaped",
            e.who()
        );
        let (_, other) = session_delivered(e, without_values);
        assert_eq!(other["custom_fields"], json!({}), "{}", e.who());
    }

    // A new grant naming the same fields covers the stored session body;
    // one naming fewer does not, and the body is redacted; the other
    // session's body (no values) and the payment's stay.
    let (both_session, _) = session_delivered(&both, with_values);
    let (both_other, _) = session_delivered(&both, without_values);
    let both_payment = delivery_of(&both, "payment.succeeded", 2, &purchases.payments[0]);
    grant(
        &app,
        &both.endpoint_ref,
        &[],
        &field_refs(&c, &["po_number", "gift_note"]),
    )
    .await;
    assert_eq!(body_status(&app, &both_session).await, "available");
    grant(
        &app,
        &both.endpoint_ref,
        &[],
        &field_refs(&c, &["po_number"]),
    )
    .await;
    assert_eq!(body_status(&app, &both_session).await, "redacted");
    assert_eq!(body_status(&app, &both_other).await, "available");
    assert_eq!(body_status(&app, &both_payment).await, "available");

    // Revoking `one`'s grant redacts its session body with a value.
    let (one_session, _) = session_delivered(&one, with_values);
    let (one_other, _) = session_delivered(&one, without_values);
    let r = app
        .get(&format!("{ENDPOINTS}/{}", one.endpoint_ref))
        .send()
        .await;
    r.expect(200);
    app.post(
        &format!(
            "{ENDPOINTS}/{}/data_profile_grants/revoke",
            one.endpoint_ref
        ),
        json!({"reason": "no longer needed"}),
    )
    .if_match(&r.etag())
    .send()
    .await
    .expect(200);
    assert_eq!(body_status(&app, &one_session).await, "redacted");
    assert_eq!(body_status(&app, &one_other).await, "available");
    let (none_session, _) = session_delivered(&none, with_values);
    assert_eq!(body_status(&app, &none_session).await, "available");
}

backend_tests!(
    payment_events_arrive_once_signed_and_redacted,
    a_grant_delivers_contact_and_card,
    custom_fields_reach_the_endpoints_whose_grants_name_them,
);

/// Fleet mode: the API on PostgreSQL, its events relayed across RabbitMQ
/// (`billing.events`, consumed from a queue of this test's own by two
/// consumers), two dispatchers; each event arrives exactly once. Endpoint
/// B's grant also names one of the session's two custom fields: the
/// dispatchers resolve it and deliver that value only.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fleet_events_cross_rabbitmq_to_two_dispatchers_once() {
    static NOTICE: Once = Once::new();
    if !fleet_or_say(&NOTICE, "RabbitMQ, PostgreSQL") {
        return;
    }
    let queues = TestQueues::declare().await;
    let settings = &queues.settings;
    let app = TestApp::spawn(Backend::Postgres).await;
    let c = catalogue(&app).await;
    let a = endpoint(&app, &c, false, &[]).await;
    let b = endpoint(&app, &c, true, &["po_number"]).await;

    let pipeline = Pipeline::fleet(&app, settings);

    let purchases = make_purchases(&app, &c).await;
    all_delivered(&app, &[&a, &b]).await;
    let expected = resources(&app, &purchases).await;
    let seen_by_a = check_endpoint(&app, &a, &expected).await;
    let seen_by_b = check_endpoint(&app, &b, &expected).await;
    assert_eq!(seen_by_a, seen_by_b, "both endpoints got the same events");
    pipeline.shutdown().await;
    assert!(app.store.outbox_batch(10).await.unwrap().is_empty());
    queues.cleanup().await;
}
