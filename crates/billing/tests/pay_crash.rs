//! Crash test for pay (issue 17) with the real binary: 120 checkout
//! sessions of one one-time offer, each paid once with `pm_card_visa` under
//! its own `Idempotency-Key`, all at once, and a SIGKILL of `billing serve`
//! while the pays are in flight: some have answered, some have committed
//! without answering, the others have not committed (see `WAVE_A`). The
//! server starts again on the same store and every key is replayed with the
//! same body, twice.
//!
//! A pay writes its payment, capture, order, invoice (next number),
//! entitlement, the session `complete`, its events (into the outbox) and the
//! key's recorded result in one transaction, so: every key answers 200 now;
//! a key that answered before the kill replays its original status and body
//! with `Idempotent-Replayed: true`; a key that never answered either
//! replays (it committed before the kill) or runs now; and the store holds
//! exactly one succeeded payment per session, each with exactly one capture,
//! order, invoice and entitlement, the invoice numbers gapless, and exactly
//! one `payment.succeeded`, `checkout_session.completed`, `order.created`,
//! `invoice.paid` and `entitlement.granted` event for each, and no event of
//! a payment that does not exist. The same holds of the store as the kill
//! left it (checked before the restart), where every session either has
//! its whole payment or none and is still open.
//!
//! Events are read where they may be: the outbox (not relayed yet) and the
//! events queue (relayed). A relayed event keeps its data only until it is
//! fanned out (migration 0010); the deliveries keep it from then on. So the
//! sandbox has a paused webhook endpoint subscribed to the five event types,
//! environment-wide: every fanned-out event has a held delivery that carries
//! its data, and nothing is sent anywhere.
//!
//! Embedded mode (a SQLite file) always runs; fleet mode (PostgreSQL, a fresh
//! database per run) runs only with BILLING_TEST_FLEET=1.

use crate::common::crash::{
    client, crash_tests, fire_and_kill, post, probe, read_events, replay_all, verdict, Answer,
    Envs, Keyed, Replays, Site, Waves,
};
use crate::common::{rand_u32, say, text};
use sqlx::Connection;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

const PAYS: usize = 120;
/// The pays go in two waves, each all at once: wave A (a quarter of the
/// keys) first, wave B (the rest) as soon as the first answer of wave A
/// arrives. The server is killed while wave B's payments are being written
/// (see `common::crash::fire_and_kill` and `Waves::amid_b`).
const WAVE_A: usize = PAYS / 4;

/// What a successful pay emits, with the newest dto version of each (the
/// one its data is written in).
const PAID_EVENTS: [(&str, u32); 5] = [
    ("payment.succeeded", 2),
    ("checkout_session.completed", 1),
    ("order.created", 1),
    ("invoice.paid", 1),
    ("entitlement.granted", 1),
];

fn payment_ref(a: &Answer) -> Option<&str> {
    a.data()["payment"]["payment_intent_ref"].as_str()
}

/// A setup POST, which must answer `expect`: its `data`.
async fn setup_post(
    api: &str,
    secret: &str,
    path: &str,
    key: &str,
    if_match: Option<&str>,
    body: serde_json::Value,
    expect: u16,
) -> serde_json::Value {
    let a = post(
        &client(),
        &format!("{api}{path}"),
        secret,
        key,
        if_match,
        &body,
    )
    .await
    .unwrap_or_else(|e| panic!("POST {path}: {e}"));
    assert_eq!(a.status, expect, "POST {path} {body}: {}", a.short());
    a.body["data"].clone()
}

/// The wave of request `i` (`a` or `b`), which its buyer's e-mail starts
/// with after `buyer-`.
fn wave(i: usize) -> char {
    if i < WAVE_A {
        'a'
    } else {
        'b'
    }
}

fn email_of(i: usize) -> String {
    format!("buyer-{}{i:03}@example.com", wave(i))
}

fn key_of(run: &str, i: usize) -> String {
    format!("pay-crash-{run}-{i:03}")
}

fn pay_body() -> serde_json::Value {
    serde_json::json!({"payment_method": "pm_card_visa"})
}

fn pay_path(session: &str) -> String {
    format!("/api/v1/checkout-sessions/{session}/pay")
}

/// What the test sells and watches.
struct Shop {
    product: String,
    /// The checkout sessions, by request number.
    sessions: Vec<String>,
    /// The paused endpoint whose held deliveries keep the events' data.
    endpoint: String,
}

/// Through the API: a published product with a published one-time price
/// (EUR 19.99), a published checkout config of its offer, the paused
/// endpoint and its subscriptions, and `PAYS` open sessions, one per buyer.
async fn open_shop(api: &str, secret: &str, environment_ref: &str, run: &str) -> Shop {
    let key = |what: &str| format!("setup-{run}-{what}");
    let product = setup_post(
        api,
        secret,
        "/api/v1/products",
        &key("product"),
        None,
        serde_json::json!({"name": "Crash-tested product"}),
        201,
    )
    .await;
    let product = text(&product, "product_ref");
    setup_post(
        api,
        secret,
        &format!("/api/v1/products/{product}/publish"),
        &key("product-publish"),
        None,
        serde_json::json!({}),
        200,
    )
    .await;
    let price = setup_post(
        api,
        secret,
        "/api/v1/prices",
        &key("price"),
        None,
        serde_json::json!({
            "product_ref": product,
            "amount": {"currency": "EUR", "unit": "minor", "value": "1999"},
            "type": "one_time",
        }),
        201,
    )
    .await;
    let price = text(&price, "price_ref");
    setup_post(
        api,
        secret,
        &format!("/api/v1/prices/{price}/publish"),
        &key("price-publish"),
        None,
        serde_json::json!({}),
        200,
    )
    .await;
    let r = client()
        .get(format!("{api}/api/v1/offers"))
        .query(&[("product_ref", &product)])
        .bearer_auth(secret)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let offers: serde_json::Value = r.json().await.unwrap();
    let items = offers["data"]["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "one offer per product: {offers}");
    let offer = text(&items[0], "offer_ref");
    let config = setup_post(
        api,
        secret,
        "/api/v1/checkout-configs",
        &key("config"),
        None,
        serde_json::json!({
            "name": "Crash checkout",
            "line_items": [{"offer_ref": offer, "quantity": 1}],
            "success_url": "https://example.com/ok",
        }),
        201,
    )
    .await;
    let config = text(&config, "config_ref");
    setup_post(
        api,
        secret,
        &format!("/api/v1/checkout-configs/{config}/publish"),
        &key("config-publish"),
        None,
        serde_json::json!({}),
        200,
    )
    .await;

    let endpoint = setup_post(
        api,
        secret,
        "/api/v1/webhook_endpoints",
        &key("endpoint"),
        None,
        serde_json::json!({"url": "https://example.com/pay-crash-hooks"}),
        201,
    )
    .await;
    let endpoint_ref = text(&endpoint, "endpoint_ref");
    let paused = setup_post(
        api,
        secret,
        &format!("/api/v1/webhook_endpoints/{endpoint_ref}/pause"),
        &key("endpoint-pause"),
        Some(&text(&endpoint, "etag")),
        serde_json::json!({}),
        200,
    )
    .await;
    assert_eq!(paused["status"], "paused", "{paused}");
    for (event_type, dto_version) in PAID_EVENTS {
        setup_post(
            api,
            secret,
            &format!("/api/v1/webhook_endpoints/{endpoint_ref}/subscriptions"),
            &key(&format!("subscribe-{event_type}")),
            None,
            serde_json::json!({
                "public_event_type": event_type,
                "scope_type": "environment",
                "scope_ref": environment_ref,
                "dto_version": dto_version,
            }),
            201,
        )
        .await;
    }

    // The sessions, a few at a time.
    let gate = Arc::new(tokio::sync::Semaphore::new(8));
    let mut tasks = Vec::with_capacity(PAYS);
    for i in 0..PAYS {
        let (gate, api, secret, config, key) = (
            gate.clone(),
            api.to_owned(),
            secret.to_owned(),
            config.clone(),
            key(&format!("session-{i:03}")),
        );
        tasks.push(tokio::spawn(async move {
            let _turn = gate.acquire().await.unwrap();
            let session = setup_post(
                &api,
                &secret,
                "/api/v1/checkout-sessions",
                &key,
                None,
                serde_json::json!({
                    "config_ref": config,
                    "buyer": {"email": email_of(i), "name": format!("Buyer {i}")},
                }),
                201,
            )
            .await;
            assert_eq!(session["status"], "open", "{session}");
            text(&session, "checkout_session_ref")
        }));
    }
    let mut sessions = Vec::with_capacity(PAYS);
    for t in tasks {
        sessions.push(t.await.unwrap());
    }
    Shop {
        product,
        sessions,
        endpoint: endpoint_ref,
    }
}

/// The pay of session `i` of `sessions` under its key of `run`, as a
/// [`Keyed`] request.
fn pays(api: &str, secret: &str, run: &str, sessions: &[String]) -> impl Keyed {
    let (client, api, secret, run) = (client(), api.to_owned(), secret.to_owned(), run.to_owned());
    let sessions: Arc<[String]> = sessions.into();
    move |i| {
        let (client, secret, key) = (client.clone(), secret.clone(), key_of(&run, i));
        let url = format!("{api}{}", pay_path(&sessions[i]));
        async move { post(&client, &url, &secret, &key, None, &pay_body()).await }
    }
}

/// A pay's records as the store holds them.
struct Paid {
    payment: String,
    buyer: Option<String>,
    order: Option<String>,
}

/// The checks of the module docs on the store, with no server running;
/// returns a one-line summary of what it counted. `all_paid`: after the
/// replays, every session has its payment; else (right after the kill) a
/// session has either its whole payment or nothing at all (still open).
async fn check_store(
    probe_url: &str,
    shop: &Shop,
    answered: &HashMap<usize, String>,
    all_paid: bool,
    problems: &mut Vec<String>,
) -> String {
    let mut db = probe(probe_url).await;

    // Sessions: all ours, each complete and naming its payment.
    let sessions: Vec<(String, String, Option<String>, Option<String>)> = sqlx::query_as(
        "SELECT checkout_session_ref, status, payment_intent_ref, buyer_ref FROM checkout_sessions",
    )
    .fetch_all(&mut db)
    .await
    .unwrap();
    let sessions: HashMap<String, (String, Option<String>, Option<String>)> = sessions
        .into_iter()
        .map(|(s, status, p, b)| (s, (status, p, b)))
        .collect();
    if sessions.len() != PAYS {
        problems.push(format!(
            "{} checkout sessions in the store, not {PAYS}",
            sessions.len()
        ));
    }

    // Payments: exactly one per session, succeeded.
    let payments: Vec<(String, String, String, Option<String>)> = sqlx::query_as(
        "SELECT payment_intent_ref, checkout_session_ref, status, buyer_ref FROM payments",
    )
    .fetch_all(&mut db)
    .await
    .unwrap();
    if all_paid && payments.len() != PAYS {
        problems.push(format!(
            "{} payments in the store, not {PAYS}",
            payments.len()
        ));
    }
    let mut by_session: HashMap<String, Vec<String>> = HashMap::new();
    let mut paid: HashMap<String, Paid> = HashMap::new();
    for (payment, session, status, buyer) in &payments {
        by_session
            .entry(session.clone())
            .or_default()
            .push(payment.clone());
        if status != "succeeded" {
            problems.push(format!("payment {payment} of {session} is {status}"));
        }
        paid.insert(
            payment.clone(),
            Paid {
                payment: payment.clone(),
                buyer: buyer.clone(),
                order: None,
            },
        );
    }
    for (i, session) in shop.sessions.iter().enumerate() {
        let payments = by_session.remove(session).unwrap_or_default();
        if payments.is_empty() && !all_paid {
            match sessions.get(session) {
                Some((status, None, None)) if status == "open" => {}
                s => problems.push(format!(
                    "session {session} (key {i}) has no payment, but is {s:?}"
                )),
            }
            if let Some(a) = answered.get(&i) {
                problems.push(format!(
                    "key {i} answered payment {a}, which is not in the store"
                ));
            }
            continue;
        }
        if payments.len() != 1 {
            problems.push(format!(
                "session {session} (key {i}) has {} payments: {payments:?}",
                payments.len()
            ));
        }
        match sessions.get(session) {
            None => problems.push(format!("session {session} (key {i}) is not in the store")),
            Some((status, payment, buyer)) => {
                if status != "complete" {
                    problems.push(format!("session {session} (key {i}) is {status}"));
                }
                if payments.len() == 1 && payment.as_ref() != payments.first() {
                    problems.push(format!(
                        "session {session} (key {i}) names payment {payment:?}, but its payment is {payments:?}"
                    ));
                }
                if let Some(p) = payments.first().and_then(|p| paid.get(p)) {
                    if p.buyer.is_none() || p.buyer != *buyer {
                        problems.push(format!(
                            "session {session} (key {i}) has buyer {buyer:?}, its payment {:?}",
                            p.buyer
                        ));
                    }
                }
            }
        }
        if let Some(a) = answered.get(&i) {
            if payments.first() != Some(a) {
                problems.push(format!(
                    "key {i} answers payment {a}, but its session's payments are {payments:?}"
                ));
            }
        }
    }
    for (session, payments) in by_session {
        problems.push(format!(
            "payments {payments:?} of session {session}, which no key paid"
        ));
    }

    // Captures: exactly one per payment.
    let captures: Vec<(String, String)> =
        sqlx::query_as("SELECT capture_ref, payment_intent_ref FROM captures")
            .fetch_all(&mut db)
            .await
            .unwrap();
    let mut captured: HashMap<&str, usize> = HashMap::new();
    for (capture, payment) in &captures {
        if !paid.contains_key(payment) {
            problems.push(format!(
                "capture {capture} of payment {payment}, which does not exist"
            ));
        }
        *captured.entry(payment.as_str()).or_default() += 1;
    }

    // Orders: exactly one per payment, of its session and buyer, paid.
    let orders: Vec<(String, String, String, String, String)> = sqlx::query_as(
        "SELECT order_ref, payment_intent_ref, checkout_session_ref, buyer_ref, status FROM orders",
    )
    .fetch_all(&mut db)
    .await
    .unwrap();
    let mut ordered: HashMap<String, Vec<String>> = HashMap::new();
    let mut order_payment: HashMap<String, String> = HashMap::new();
    for (order, payment, session, buyer, status) in &orders {
        ordered
            .entry(payment.clone())
            .or_default()
            .push(order.clone());
        order_payment.insert(order.clone(), payment.clone());
        if status != "paid" {
            problems.push(format!("order {order} is {status}"));
        }
        match payments.iter().find(|p| &p.0 == payment) {
            None => problems.push(format!(
                "order {order} of payment {payment}, which does not exist"
            )),
            Some((_, s, _, b)) => {
                if s != session || b.as_ref() != Some(buyer) {
                    problems.push(format!(
                        "order {order} is of session {session} and buyer {buyer}, its payment {payment} of {s} and {b:?}"
                    ));
                }
            }
        }
    }

    // Invoices: exactly one per order, paid; numbers gapless per year.
    let invoices: Vec<(String, String, String, String)> =
        sqlx::query_as("SELECT invoice_ref, order_ref, number, status FROM invoices")
            .fetch_all(&mut db)
            .await
            .unwrap();
    let mut invoiced: HashMap<&str, usize> = HashMap::new();
    let mut numbers: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for (invoice, order, number, status) in &invoices {
        if !order_payment.contains_key(order) {
            problems.push(format!(
                "invoice {invoice} of order {order}, which does not exist"
            ));
        }
        *invoiced.entry(order.as_str()).or_default() += 1;
        if status != "paid" {
            problems.push(format!("invoice {invoice} is {status}"));
        }
        let parsed = number
            .split_once('-')
            .filter(|(_, n)| n.len() == 6)
            .and_then(|(y, n)| Some((y.parse::<i64>().ok()?, n.parse::<i64>().ok()?)));
        match parsed {
            Some((year, n)) => numbers.entry(year).or_default().push(n),
            None => problems.push(format!("invoice {invoice} has number {number:?}")),
        }
    }
    let counters: Vec<(i64, i64)> =
        sqlx::query_as("SELECT year, last_number FROM invoice_counters")
            .fetch_all(&mut db)
            .await
            .unwrap();
    let counters: HashMap<i64, i64> = counters.into_iter().collect();
    for (year, ns) in &mut numbers {
        ns.sort_unstable();
        let expected: Vec<i64> = (1..=ns.len() as i64).collect();
        if *ns != expected {
            let mut seen = HashSet::new();
            let twice: Vec<i64> = ns.iter().filter(|n| !seen.insert(**n)).copied().collect();
            let missing: Vec<i64> = expected
                .iter()
                .filter(|n| !seen.contains(n))
                .copied()
                .collect();
            problems.push(format!(
                "invoice numbers of {year} are not 1..={}: given twice {twice:?}, missing {missing:?}",
                ns.len()
            ));
        }
        if counters.get(year) != Some(&(ns.len() as i64)) {
            problems.push(format!(
                "the invoice counter of {year} is {:?}, with {} invoices",
                counters.get(year),
                ns.len()
            ));
        }
    }

    // Entitlements: exactly one per order, to the product.
    let entitlements: Vec<(String, String, String)> =
        sqlx::query_as("SELECT entitlement_ref, order_ref, product_ref FROM entitlements")
            .fetch_all(&mut db)
            .await
            .unwrap();
    let mut entitled: HashMap<&str, usize> = HashMap::new();
    for (entitlement, order, product) in &entitlements {
        if !order_payment.contains_key(order) {
            problems.push(format!(
                "entitlement {entitlement} of order {order}, which does not exist"
            ));
        }
        if *product != shop.product {
            problems.push(format!(
                "entitlement {entitlement} is to {product}, not {}",
                shop.product
            ));
        }
        *entitled.entry(order.as_str()).or_default() += 1;
    }

    for p in paid.values_mut() {
        let payment = p.payment.as_str();
        let n = captured.get(payment).copied().unwrap_or(0);
        if n != 1 {
            problems.push(format!("payment {payment} has {n} captures"));
        }
        let orders = ordered.get(payment).cloned().unwrap_or_default();
        if orders.len() != 1 {
            problems.push(format!("payment {payment} has orders {orders:?}"));
        }
        p.order = orders.first().cloned();
        if let Some(order) = &p.order {
            for (what, counts) in [("invoices", &invoiced), ("entitlements", &entitled)] {
                let n = counts.get(order.as_str()).copied().unwrap_or(0);
                if n != 1 {
                    problems.push(format!("order {order} (payment {payment}) has {n} {what}"));
                }
            }
        }
    }

    // Events: for each payment exactly one of each paid event, and nothing
    // else; no event of a payment, order or session that does not exist.
    let (events, sources) = read_events(&mut db, &shop.endpoint, problems).await;
    drop(db.close().await);
    let invoice_order: HashMap<&str, &str> = invoices
        .iter()
        .map(|(i, o, _, _)| (i.as_str(), o.as_str()))
        .collect();
    let entitlement_order: HashMap<&str, &str> = entitlements
        .iter()
        .map(|(e, o, _)| (e.as_str(), o.as_str()))
        .collect();
    let session_payment: HashMap<&str, &str> = payments
        .iter()
        .map(|(p, s, _, _)| (s.as_str(), p.as_str()))
        .collect();
    // (event type, payment) -> event refs
    let mut of_payment: HashMap<(&str, String), Vec<&str>> = HashMap::new();
    for (event_ref, e) in &events {
        let Some(data) = &e.data else {
            problems.push(format!(
                "event {event_ref} ({}) has no data anywhere (not in the outbox, not pending, no delivery)",
                e.event_type
            ));
            continue;
        };
        let field = |name: &str| data[name].as_str().unwrap_or_default().to_owned();
        // The payment the event is of, through what its data names.
        let payment = match e.event_type.as_str() {
            "payment.succeeded" => Some(field("payment_intent_ref")),
            "checkout_session.completed" => {
                let named = field("payment_intent_ref");
                let of_session = session_payment
                    .get(field("checkout_session_ref").as_str())
                    .map(|p| p.to_string());
                if of_session.as_deref() != Some(named.as_str()) {
                    problems.push(format!(
                        "event {event_ref} (checkout_session.completed) names payment {named:?}, its session's payment is {of_session:?}"
                    ));
                }
                Some(named)
            }
            "order.created" => {
                let named = field("payment_intent_ref");
                let of_order = order_payment.get(&field("order_ref")).cloned();
                if of_order.as_deref() != Some(named.as_str()) {
                    problems.push(format!(
                        "event {event_ref} (order.created) names payment {named:?}, its order's payment is {of_order:?}"
                    ));
                }
                Some(named)
            }
            "invoice.paid" => invoice_order
                .get(field("invoice_ref").as_str())
                .filter(|o| **o == field("order_ref"))
                .and_then(|o| order_payment.get(*o).cloned()),
            "entitlement.granted" => entitlement_order
                .get(field("entitlement_ref").as_str())
                .filter(|o| **o == field("order_ref"))
                .and_then(|o| order_payment.get(*o).cloned()),
            other => {
                problems.push(format!(
                    "event {event_ref} is {other}, which no successful pay emits: {data}"
                ));
                continue;
            }
        };
        let Some(payment) = payment.filter(|p| paid.contains_key(p)) else {
            problems.push(format!(
                "event {event_ref} ({}) is of no payment of the store: {data}",
                e.event_type
            ));
            continue;
        };
        let buyer = paid[&payment].buyer.clone();
        if e.scope["buyer_ref"].as_str() != buyer.as_deref() {
            problems.push(format!(
                "event {event_ref} ({}) has scope {}, its payment's buyer is {buyer:?}",
                e.event_type, e.scope
            ));
        }
        if e.scope["product_refs"] != serde_json::json!([shop.product]) {
            problems.push(format!(
                "event {event_ref} ({}) has scope {}, not the product {}",
                e.event_type, e.scope, shop.product
            ));
        }
        of_payment
            .entry((event_type_of(&e.event_type), payment))
            .or_default()
            .push(event_ref);
    }
    for payment in paid.keys() {
        for (event_type, _) in PAID_EVENTS {
            let found = of_payment
                .get(&(event_type, payment.clone()))
                .cloned()
                .unwrap_or_default();
            if found.len() != 1 {
                problems.push(format!(
                    "payment {payment} has {} {event_type} events: {found:?}",
                    found.len()
                ));
            }
        }
    }
    format!(
        "{} payments, {} captures, {} orders, {} invoices (numbers {numbers_summary}), {} entitlements; \
         {} events ({} in the outbox, {} pending and {} processed in the queue, {} in both)",
        payments.len(),
        captures.len(),
        orders.len(),
        invoices.len(),
        entitlements.len(),
        events.len(),
        sources.outbox,
        sources.queued_pending,
        sources.queued_processed,
        sources.in_both,
        numbers_summary = numbers
            .iter()
            .map(|(y, ns)| format!(
                "{y}: {}..={}",
                ns.first().unwrap_or(&0),
                ns.last().unwrap_or(&0)
            ))
            .collect::<Vec<_>>()
            .join(", "),
    )
}

/// The static name of a paid event type.
fn event_type_of(name: &str) -> &'static str {
    PAID_EVENTS
        .iter()
        .map(|(t, _)| *t)
        .find(|t| *t == name)
        .expect("a paid event type")
}

/// The scenario of the module docs against a store the environment
/// variables `envs` name (a fleet store if `fleet`); `probe_url` reads that
/// store beside the server.
async fn crash_and_replay(label: &str, dir: &Path, envs: Envs, probe_url: &str, fleet: bool) {
    let run = format!("{label}-{:08x}", rand_u32());
    let site = Site::new(dir, envs);
    let api = site.api.clone();
    let sandbox = site.bootstrap();
    let secret = sandbox.secret;

    let started = Instant::now();
    let mut first = site.serve("serve-1.log").await;
    let ready_after = started.elapsed();
    let shop = open_shop(&api, &secret, &sandbox.environment_ref, &run).await;
    let setup_after = started.elapsed();

    // 1. Wave A at once, then wave B at once as soon as wave A starts
    //    answering; SIGKILL while wave B's payments are being written.
    let waves = Waves {
        n: PAYS,
        wave_a: WAVE_A,
        what: "pay",
        count_b: "SELECT COUNT(*) FROM payments WHERE buyer_email LIKE $1",
        b_pattern: "buyer-b%".to_owned(),
        probe_url,
        kill_at: Waves::amid_b(PAYS, WAVE_A, fleet),
    };
    let pays = || pays(&api, &secret, &run, &shop.sessions);
    let kill = fire_and_kill(&mut first, waves, pays()).await;
    drop(first);
    let (before, log_1) = (&kill.before, &kill.log);
    let not_paid: Vec<String> = before
        .iter()
        .filter(|(_, a)| a.status != 200 || a.data()["payment"]["status"] != "succeeded")
        .map(|(i, a)| format!("key {i}: {}", a.short()))
        .collect();
    assert!(
        not_paid.is_empty(),
        "before the kill, {} of {} answered pays did not succeed:\n{}\n{log_1}",
        not_paid.len(),
        before.len(),
        not_paid.join("\n")
    );

    // 2. The store as the kill left it: each session paid whole or not at
    //    all, the events of the committed pays in the outbox or the queue.
    let answered_before: HashMap<usize, String> = before
        .iter()
        .filter_map(|(i, a)| Some((*i, payment_ref(a)?.to_owned())))
        .collect();
    let mut problems_at_kill: Vec<String> = Vec::new();
    let counted_at_kill = check_store(
        probe_url,
        &shop,
        &answered_before,
        false,
        &mut problems_at_kill,
    )
    .await;

    // 3. The same store, a new process; every key again, with its body.
    let mut second = site.serve("serve-2.log").await;
    let restarted_after = kill.killed.elapsed();
    let (after, retries) = replay_all(PAYS, pays()).await;
    // And once more: whatever ran after the restart is now a kept result.
    let (again, retries_again) = replay_all(PAYS, pays()).await;

    let mut problems: Vec<String> = problems_at_kill
        .into_iter()
        .map(|p| format!("at the kill: {p}"))
        .collect();
    let mut replays = Replays::default();
    let mut answered: HashMap<usize, String> = HashMap::new();
    for (i, session) in shop.sessions.iter().enumerate() {
        let Some(now) = Replays::after(i, &after, 200, &mut problems) else {
            continue;
        };
        let Some(payment) = payment_ref(now) else {
            problems.push(format!("key {i}: no payment_intent_ref in {}", now.short()));
            continue;
        };
        let d = now.data();
        if d["result"] != "retrieve_payment_response"
            || d["payment"]["status"] != "succeeded"
            || d["payment"]["checkout_session_ref"] != session.as_str()
            || d["checkout_session"]["checkout_session_ref"] != session.as_str()
            || d["checkout_session"]["status"] != "complete"
            || d["checkout_session"]["payment_intent_ref"] != payment
        {
            problems.push(format!(
                "key {i}: not a succeeded payment of session {session}: {}",
                now.short()
            ));
        }
        replays.check(
            i,
            before.get(&i),
            now,
            &again[&i],
            payment_ref,
            &mut problems,
        );
        answered.insert(i, payment.to_owned());
    }

    // 4. The store, once the server has stopped (so that the relay moves no
    //    event between two reads).
    let log_2 = second.log_tail();
    let clean_exit = second.terminate_cleanly();
    let counted = check_store(probe_url, &shop, &answered, true, &mut problems).await;

    say(&format!(
        "pay crash [{label}]: server ready in {} ms, shop of {PAYS} sessions open after {} ms; SIGKILL (pid {}) {} ms after firing {PAYS} pays, \
         wave B fired after {} ms, {} of wave B's payments in the store at the kill; {} answered (all 200; {} of them seen before the kill) and {} not; \
         after the restart ({} ms to ready) {} of those replayed (committed before the kill) and {} ran now; {} + {} retries on 409/503; \
         store at the kill: {counted_at_kill}; store at the end: {counted}; {} problems; total {} ms",
        ready_after.as_millis(),
        setup_after.as_millis(),
        kill.pid,
        kill.killed_after.as_millis(),
        kill.b_fired_after.as_millis(),
        kill.b_in_store,
        before.len(),
        kill.at_decision,
        kill.lost.len(),
        restarted_after.as_millis(),
        replays.replayed_lost,
        replays.ran_lost,
        retries,
        retries_again,
        problems.len(),
        started.elapsed().as_millis(),
    ));
    assert!(
        replays.ran_lost > 0,
        "[{label}] every pay had committed by the time of the kill: nothing uncommitted was in flight"
    );
    verdict(
        label,
        "after a crash mid-flight",
        &problems,
        &format!("{log_1}\n{log_2}"),
        clean_exit,
    );
}

crash_tests!(
    embedded_crash_mid_pays_leaves_each_payment_whole_once,
    fleet_crash_mid_pays_leaves_each_payment_whole_once,
    on_fleet_store("fleet pay crash test", "billing_pay", 8),
    |label, dir, envs, url, fleet| crash_and_replay(label, dir, envs, url, fleet)
);
