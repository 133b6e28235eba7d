//! Crash test for `changeSubscription` (contract 14.2) with the real
//! binary: `CHANGES` monthly subscriptions, each changed once under its own
//! `Idempotency-Key` with `proration: charge_now`, all at once, and a
//! SIGKILL of `billing serve` while the changes are in flight: some have
//! answered, some have committed without answering, the others have not
//! committed (see `WAVE_A`). The server starts again on the same store and
//! every key is replayed with the same body and `If-Match`, twice.
//!
//! Two products, Basic (EUR 10.00 a month) and Premium (EUR 30.00 a
//! month): a product has one sellable price (publishing a second one
//! supersedes the first), so the two prices a subscription moves between
//! are of two products, and each change also moves the buyer's entitlement.
//! Every subscription is paid with `pm_card_visa` on one test clock at
//! `START`, one buyer each; the clock is then advanced to `CHANGE_AT`, so
//! every change prorates the same 21 days of 31 and its amounts are known
//! in advance (`BASIC_LEFT`, `PREMIUM_LEFT`). The even-numbered keys are
//! upgrades (Basic → Premium: an invoice of `proration_credit` −677 and
//! `proration_debit` 2032, EUR 13.55 charged at once to the stored card),
//! the odd-numbered ones downgrades (Premium → Basic: no invoice, EUR 13.55
//! to the buyer's `credit_balance`).
//!
//! A change writes its charge (payment and capture), its invoice (next
//! number) or the buyer's credit, the new price and product, its
//! `price_change` record, the entitlements (the old product's revoked, the
//! new one's granted), its events (into the outbox) and the key's recorded
//! result in one unit of work, so: every subscription has its whole change
//! or none of it, in the store as the kill left it (checked before the
//! restart) as at the end. After the restart every key answers 200 (the
//! subscription on its new price); a key that answered before the kill
//! replays its original body with `Idempotent-Replayed: true`; a key that
//! never answered either replays (it committed before the kill) or runs
//! now; and the store holds, for every subscription, exactly one
//! `price_change` record, the new price and product with its period
//! unchanged, its two entitlements (old revoked, new active, both at
//! `CHANGE_AT`), and for an upgrade exactly one change invoice (paid, its
//! two lines exact and summing to its total) paid by exactly one succeeded
//! payment of EUR 13.55 with one capture, and no credit; for a downgrade no
//! invoice and no payment beyond the first period's, and a credit balance
//! of exactly EUR 13.55 (in `credit_balances` and mirrored on the buyer).
//! The invoice numbers of 2026 are gapless and unique, the counter at the
//! last one; every change has exactly one of each event it emits
//! (`CHANGE_EVENTS`: `subscription.changed` with `from_price_ref` and
//! `to_price_ref`, `entitlement.revoked`, `entitlement.granted`, and for an
//! upgrade `payment.succeeded` and `invoice.paid`), scoped to its buyer and
//! both products, and there is no other event since the setup.
//!
//! Events are read where they may be (as in `pay_crash.rs`): the outbox,
//! the events queue, and the held deliveries of a paused webhook endpoint
//! subscribed to the change's event types, which keep the data of every
//! fanned-out event.
//!
//! Embedded mode (a SQLite file) always runs; fleet mode (PostgreSQL, a
//! fresh database per run) runs only with BILLING_TEST_FLEET=1.

use crate::common::crash::{
    client, crash_tests, fire_and_kill, post, probe, read_events, replay_all, verdict, Answer,
    Envs, Keyed, Replays, Site, Waves,
};
use crate::common::poll::Poll;
use crate::common::{rand_u32, say, text};
use serde_json::{json, Value};
use sqlx::Connection;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The subscriptions, one buyer each, and so the changes.
const CHANGES: usize = 80;
/// The changes go in two waves, each all at once: wave A (a quarter of the
/// keys) first, wave B (the rest) as soon as the first answer of wave A
/// arrives. The server is killed once the first of wave B's changes is in
/// the store (see `common::crash::fire_and_kill` and `kill_at` below).
const WAVE_A: usize = CHANGES / 4;

/// Where the clock starts: every subscription is paid then, its period
/// `START`..`PERIOD_END` (P = 31 days).
const START: &str = "2026-01-01T00:00:00.000Z";
/// Where the clock is when every change is made (r = 21 days left).
const CHANGE_AT: &str = "2026-01-11T00:00:00.000Z";
const PERIOD_END: &str = "2026-02-01T00:00:00.000Z";
/// The same instants as the store keeps them (Unix milliseconds).
const START_MS: i64 = 1_767_225_600_000;
const CHANGE_AT_MS: i64 = 1_768_089_600_000;
const PERIOD_END_MS: i64 = 1_769_904_000_000;

/// The two monthly prices (EUR, minor units).
const BASIC: i64 = 1000;
const PREMIUM: i64 = 3000;
/// Each price for the 21 days left of 31: round_half_even(1000 × 21 / 31
/// = 677.419…) and round_half_even(3000 × 21 / 31 = 2032.258…).
const BASIC_LEFT: i64 = 677;
const PREMIUM_LEFT: i64 = 2032;
/// What an upgrade charges at once, and what a downgrade gives back to the
/// buyer's credit balance: the debit less the credit, or the other way.
const MOVED: i64 = PREMIUM_LEFT - BASIC_LEFT;

/// What a change emits, with the newest dto version of each (the one its
/// data is written in); only an upgrade has a payment and an invoice.
const CHANGE_EVENTS: [(&str, u32); 5] = [
    ("subscription.changed", 1),
    ("entitlement.revoked", 1),
    ("entitlement.granted", 1),
    ("payment.succeeded", 2),
    ("invoice.paid", 1),
];

/// Which way key `i` changes its subscription: the even ones up (Basic →
/// Premium), the odd ones down.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Way {
    Up,
    Down,
}

fn way(i: usize) -> Way {
    if i.is_multiple_of(2) {
        Way::Up
    } else {
        Way::Down
    }
}

/// The event types a change of `way` emits.
fn events_of(way: Way) -> &'static [(&'static str, u32)] {
    match way {
        Way::Up => &CHANGE_EVENTS,
        Way::Down => &CHANGE_EVENTS[..3],
    }
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
    format!("change-crash-{run}-{i:03}")
}

/// The API of a server, as the sandbox's admin.
#[derive(Clone)]
struct Api {
    client: reqwest::Client,
    url: String,
    secret: String,
    /// Makes the setup's idempotency keys unique within the run.
    run: String,
}

impl Api {
    /// A setup POST of `body` to `path` under the key `setup-run-key` (and
    /// `If-Match` when given), which must answer `expect`: its `data`.
    async fn post(
        &self,
        path: &str,
        key: &str,
        if_match: Option<&str>,
        body: Value,
        expect: u16,
    ) -> Value {
        let key = format!("setup-{}-{key}", self.run);
        let url = format!("{}{path}", self.url);
        let a = post(&self.client, &url, &self.secret, &key, if_match, &body)
            .await
            .unwrap_or_else(|e| panic!("POST {path}: {e}"));
        assert_eq!(a.status, expect, "POST {path} {body}: {}", a.short());
        a.body["data"].clone()
    }

    /// A GET of `path`, which must answer 200: its `data`.
    async fn get(&self, path: &str) -> Value {
        let r = self
            .client
            .get(format!("{}{path}", self.url))
            .bearer_auth(&self.secret)
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {path}: {e:?}"));
        let status = r.status().as_u16();
        let raw = r.text().await.unwrap_or_default();
        assert_eq!(status, 200, "GET {path}: {raw}");
        let mut answer: Value = serde_json::from_str(&raw).unwrap();
        answer["data"].take()
    }
}

/// A published product with a published monthly price, and a published
/// checkout config of its offer.
struct Plan {
    product: String,
    price: String,
    config: String,
    /// The price in minor units.
    amount: i64,
}

/// A subscription the test changes, as it was before its change.
struct Sub {
    subscription: String,
    buyer: String,
    /// Its ETag at `CHANGE_AT`, sent as `If-Match` by every try of its key.
    etag: String,
}

/// What the test sells and watches.
struct Shop {
    basic: Plan,
    premium: Plan,
    /// The subscriptions, by request number.
    subs: Vec<Sub>,
    /// The paused endpoint whose held deliveries keep the events' data.
    endpoint: String,
}

impl Shop {
    /// Where subscription `i` starts and where its change takes it.
    fn plans(&self, i: usize) -> (&Plan, &Plan) {
        match way(i) {
            Way::Up => (&self.basic, &self.premium),
            Way::Down => (&self.premium, &self.basic),
        }
    }
}

/// Through the API: a product "`name`" with a published monthly price of
/// `amount` EUR (minor units) and a published checkout config of its offer.
async fn open_plan(api: &Api, name: &str, amount: i64) -> Plan {
    let product = api
        .post(
            "/api/v1/products",
            &format!("{name}-product"),
            None,
            json!({"name": name}),
            201,
        )
        .await;
    let product = text(&product, "product_ref");
    api.post(
        &format!("/api/v1/products/{product}/publish"),
        &format!("{name}-product-publish"),
        None,
        json!({}),
        200,
    )
    .await;
    let price = api
        .post(
            "/api/v1/prices",
            &format!("{name}-price"),
            None,
            json!({
                "product_ref": product,
                "amount": {"currency": "EUR", "unit": "minor", "value": amount.to_string()},
                "type": "recurring",
                "interval": "month",
            }),
            201,
        )
        .await;
    let price = text(&price, "price_ref");
    api.post(
        &format!("/api/v1/prices/{price}/publish"),
        &format!("{name}-price-publish"),
        None,
        json!({}),
        200,
    )
    .await;
    let offers = api
        .get(&format!("/api/v1/offers?product_ref={product}"))
        .await;
    let offers = offers["items"].as_array().unwrap();
    assert_eq!(offers.len(), 1, "one offer per product: {offers:?}");
    let config = api
        .post(
            "/api/v1/checkout-configs",
            &format!("{name}-config"),
            None,
            json!({
                "name": format!("{name} checkout"),
                "line_items": [{"offer_ref": text(&offers[0], "offer_ref"), "quantity": 1}],
                "success_url": "https://example.com/ok",
            }),
            201,
        )
        .await;
    let config = text(&config, "config_ref");
    api.post(
        &format!("/api/v1/checkout-configs/{config}/publish"),
        &format!("{name}-config-publish"),
        None,
        json!({}),
        200,
    )
    .await;
    Plan {
        product,
        price,
        config,
        amount,
    }
}

/// Through the API: the two plans, the paused endpoint subscribed to the
/// change's events, a test clock at `START`, `CHANGES` subscriptions paid
/// on it (Basic for an upgrade, Premium for a downgrade), and the clock
/// advanced to `CHANGE_AT`; each subscription's ETag then.
async fn open_shop(api: &Api, environment_ref: &str) -> Shop {
    let basic = open_plan(api, "Basic", BASIC).await;
    let premium = open_plan(api, "Premium", PREMIUM).await;

    let endpoint = api
        .post(
            "/api/v1/webhook_endpoints",
            "endpoint",
            None,
            json!({"url": "https://example.com/change-crash-hooks"}),
            201,
        )
        .await;
    let endpoint_ref = text(&endpoint, "endpoint_ref");
    let paused = api
        .post(
            &format!("/api/v1/webhook_endpoints/{endpoint_ref}/pause"),
            "endpoint-pause",
            Some(&text(&endpoint, "etag")),
            json!({}),
            200,
        )
        .await;
    assert_eq!(paused["status"], "paused", "{paused}");
    for (event_type, dto_version) in CHANGE_EVENTS {
        api.post(
            &format!("/api/v1/webhook_endpoints/{endpoint_ref}/subscriptions"),
            &format!("subscribe-{event_type}"),
            None,
            json!({
                "public_event_type": event_type,
                "scope_type": "environment",
                "scope_ref": environment_ref,
                "dto_version": dto_version,
            }),
            201,
        )
        .await;
    }

    let clock = api
        .post(
            "/api/v1/test_clocks",
            "clock",
            None,
            json!({"frozen_time": START, "name": "change crash"}),
            201,
        )
        .await;
    assert_eq!(clock["status"], "ready", "{clock}");
    let clock = text(&clock, "test_clock_ref");

    // The subscriptions, a few at a time.
    let gate = Arc::new(tokio::sync::Semaphore::new(8));
    let configs = [basic.config.clone(), premium.config.clone()];
    let tasks: Vec<_> = (0..CHANGES)
        .map(|i| {
            let (api, gate, clock) = (api.clone(), gate.clone(), clock.clone());
            let config = configs[usize::from(way(i) == Way::Down)].clone();
            tokio::spawn(async move {
                let _turn = gate.acquire().await.unwrap();
                let session = api
                    .post(
                        "/api/v1/checkout-sessions",
                        &format!("session-{i:03}"),
                        None,
                        json!({
                            "config_ref": config,
                            "buyer": {"email": email_of(i), "name": format!("Buyer {i}")},
                            "test_clock_ref": clock,
                        }),
                        201,
                    )
                    .await;
                let session = text(&session, "checkout_session_ref");
                let paid = api
                    .post(
                        &format!("/api/v1/checkout-sessions/{session}/pay"),
                        &format!("pay-{i:03}"),
                        None,
                        json!({"payment_method": "pm_card_visa"}),
                        200,
                    )
                    .await;
                let sub = paid["subscription"].clone();
                assert_eq!(sub["status"], "active", "{paid}");
                assert_eq!(sub["current_period_start"], START, "{sub}");
                assert_eq!(sub["current_period_end"], PERIOD_END, "{sub}");
                (text(&sub, "subscription_ref"), text(&sub, "buyer_ref"))
            })
        })
        .collect();
    let mut made = Vec::with_capacity(CHANGES);
    for t in tasks {
        made.push(t.await.unwrap());
    }

    // The clock to `CHANGE_AT`: nothing falls due on the way (the periods
    // end on `PERIOD_END`).
    let advancing = api
        .post(
            &format!("/api/v1/test_clocks/{clock}/advance"),
            "advance",
            None,
            json!({"frozen_time": CHANGE_AT}),
            202,
        )
        .await;
    assert_eq!(advancing["status"], "advancing", "{advancing}");
    Poll::within(Duration::from_secs(30))
        .every(Duration::from_millis(50))
        .until(
            || format!("the clock {clock} did not reach {CHANGE_AT}"),
            || async {
                let c = api.get(&format!("/api/v1/test_clocks/{clock}")).await;
                (c["status"] == "ready").then_some(c)
            },
        )
        .await;
    let c = api.get(&format!("/api/v1/test_clocks/{clock}")).await;
    assert_eq!(c["frozen_time"], CHANGE_AT, "{c}");
    assert_eq!(c["failed_jobs"], 0, "{c}");

    let shop = Shop {
        basic,
        premium,
        subs: Vec::new(),
        endpoint: endpoint_ref,
    };
    let mut subs = Vec::with_capacity(CHANGES);
    for (i, (subscription, buyer)) in made.into_iter().enumerate() {
        let now = api
            .get(&format!("/api/v1/subscriptions/{subscription}"))
            .await;
        let (from, _) = shop.plans(i);
        assert_eq!(now["price_ref"], from.price.as_str(), "{now}");
        assert_eq!(now["status"], "active", "{now}");
        subs.push(Sub {
            subscription,
            buyer,
            etag: text(&now, "etag"),
        });
    }
    Shop { subs, ..shop }
}

/// The change of subscription `i` of `shop` under its key of `run`, as a
/// [`Keyed`] request: its new price, `charge_now`, and its ETag from
/// before the change as `If-Match`.
fn changes(api: &Api, shop: &Shop, run: &str) -> impl Keyed {
    let (client, url, secret, run) = (
        api.client.clone(),
        api.url.clone(),
        api.secret.clone(),
        run.to_owned(),
    );
    let asks: Arc<[(String, String, Value)]> = shop
        .subs
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let (_, to) = shop.plans(i);
            (
                format!("{url}/api/v1/subscriptions/{}/change", s.subscription),
                s.etag.clone(),
                json!({"price_ref": to.price, "proration": "charge_now"}),
            )
        })
        .collect();
    move |i| {
        let (client, secret, key, asks) = (
            client.clone(),
            secret.clone(),
            key_of(&run, i),
            asks.clone(),
        );
        async move {
            let (url, etag, body) = &asks[i];
            post(&client, url, &secret, &key, Some(etag), body).await
        }
    }
}

/// The value of a Money in minor units.
fn minor(money: &Value) -> Option<i64> {
    money["value"].as_str()?.parse().ok()
}

fn subscription_ref(a: &Answer) -> Option<&str> {
    a.data()["subscription_ref"].as_str()
}

/// The problem with answer `a` to key `i`, if it is not subscription `i`
/// of `shop` on its new price.
fn wrong_answer(shop: &Shop, i: usize, a: &Answer) -> Option<String> {
    let (_, to) = shop.plans(i);
    let d = a.data();
    let right = a.status == 200
        && d["subscription_ref"] == shop.subs[i].subscription.as_str()
        && d["price_ref"] == to.price.as_str()
        && d["product_ref"] == to.product.as_str()
        && d["status"] == "active"
        && d["current_period_start"] == START
        && d["current_period_end"] == PERIOD_END;
    (!right).then(|| {
        format!(
            "key {i} ({:?}): not subscription {} on {}: {}",
            way(i),
            shop.subs[i].subscription,
            to.price,
            a.short()
        )
    })
}

/// The event refs of the store (see [`read_events`]), as the setup left
/// them: the checks count only the events made after.
async fn event_refs(probe_url: &str, endpoint: &str) -> BTreeSet<String> {
    let mut db = probe(probe_url).await;
    let mut problems = Vec::new();
    let (events, _) = read_events(&mut db, endpoint, &mut problems).await;
    drop(db.close().await);
    assert!(
        problems.is_empty(),
        "the setup's events: {}",
        problems.join("\n")
    );
    events.into_keys().collect()
}

/// A change invoice's lines as the store keeps them: `(kind, amount,
/// price_ref, period_start, period_end)`.
type Line = (String, i64, Option<String>, Option<i64>, Option<i64>);

fn lines_of(stored: Option<&str>) -> Option<Vec<Line>> {
    let v: Value = serde_json::from_str(stored?).ok()?;
    v.as_array()?
        .iter()
        .map(|l| {
            Some((
                l["kind"].as_str()?.to_owned(),
                l["amount"].as_i64()?,
                l["price_ref"].as_str().map(str::to_owned),
                l["period_start"].as_i64(),
                l["period_end"].as_i64(),
            ))
        })
        .collect()
}

/// One invoice row: `(invoice_ref, number, buyer_ref, subscription_ref,
/// currency, amount_total, status, issued_at, payment_intent_ref, lines)`.
type InvoiceRow = (
    String,
    String,
    String,
    Option<String>,
    String,
    i64,
    String,
    i64,
    Option<String>,
    Option<String>,
);

/// One subscription row: `(subscription_ref, buyer_ref, price_ref,
/// product_ref, status, current_period_start, current_period_end,
/// pending_invoice_lines)`.
type SubscriptionRow = (
    String,
    Option<String>,
    String,
    String,
    String,
    Option<i64>,
    Option<i64>,
    Option<String>,
);

/// One `price_change` row: `(subscription_change_ref, subscription_ref,
/// from_price_ref, to_price_ref, proration, effective_at)`.
type RecordRow = (
    String,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    i64,
);

/// A key's entitlement: `("from" | "to" | "other", status, granted_at,
/// revoked_at)`, its product named by where the key's change takes it.
type Held = (String, String, i64, Option<i64>);

/// The checks of the module docs on the store, with no server running;
/// returns a one-line summary of what it counted. `answered`: the keys
/// whose change answered 200 (their subscription must be changed);
/// `all_changed`: after the replays, every subscription is changed; else
/// (right after the kill) each one is changed whole or not at all.
/// `before`: the events of the setup, not counted.
async fn check_store(
    probe_url: &str,
    shop: &Shop,
    before: &BTreeSet<String>,
    answered: &BTreeSet<usize>,
    all_changed: bool,
    problems: &mut Vec<String>,
) -> String {
    let mut db = probe(probe_url).await;
    let by_buyer: HashMap<&str, usize> = shop
        .subs
        .iter()
        .enumerate()
        .map(|(i, s)| (s.buyer.as_str(), i))
        .collect();
    let of_buyer = |buyer: Option<&str>| buyer.and_then(|b| by_buyer.get(b).copied());

    // Subscriptions: which are changed, each whole.
    let rows: Vec<SubscriptionRow> = sqlx::query_as(
        "SELECT subscription_ref, buyer_ref, price_ref, product_ref, status, \
         current_period_start, current_period_end, pending_invoice_lines FROM subscriptions",
    )
    .fetch_all(&mut db)
    .await
    .unwrap();
    if rows.len() != CHANGES {
        problems.push(format!(
            "{} subscriptions in the store, not {CHANGES}",
            rows.len()
        ));
    }
    let rows: HashMap<String, _> = rows.into_iter().map(|r| (r.0.clone(), r)).collect();
    // changed[i]: whether subscription i is on its new price.
    let mut changed = [false; CHANGES];
    for (i, s) in shop.subs.iter().enumerate() {
        let (from, to) = shop.plans(i);
        let Some((_, buyer, price, product, status, start, end, pending)) =
            rows.get(&s.subscription)
        else {
            problems.push(format!(
                "subscription {} (key {i}) is missing",
                s.subscription
            ));
            continue;
        };
        changed[i] = *price == to.price;
        let product_of = if changed[i] { to } else { from };
        if (*price != to.price && *price != from.price)
            || *product != product_of.product
            || buyer.as_deref() != Some(s.buyer.as_str())
            || status != "active"
            || *start != Some(START_MS)
            || *end != Some(PERIOD_END_MS)
            || pending
                .as_deref()
                .is_some_and(|p| p != "null" && !p.is_empty())
        {
            problems.push(format!(
                "subscription {} (key {i}, {:?}) is on {price} of {product}, {status}, \
                 {start:?}..{end:?}, buyer {buyer:?}, pending {pending:?}",
                s.subscription,
                way(i)
            ));
        }
        if all_changed && !changed[i] {
            problems.push(format!(
                "subscription {} (key {i}, {:?}) is still on {price}",
                s.subscription,
                way(i)
            ));
        }
        if answered.contains(&i) && !changed[i] {
            problems.push(format!(
                "key {i} answered its change, but subscription {} is still on {price}",
                s.subscription
            ));
        }
    }

    // Price-change records: one per changed subscription, none otherwise.
    let records: Vec<RecordRow> = sqlx::query_as(
        "SELECT subscription_change_ref, subscription_ref, from_price_ref, to_price_ref, \
             proration, effective_at FROM subscription_changes WHERE kind = 'price_change'",
    )
    .fetch_all(&mut db)
    .await
    .unwrap();
    let mut recorded: HashMap<&str, usize> = HashMap::new();
    for (record, sub, from_price, to_price, proration, effective_at) in &records {
        *recorded.entry(sub.as_str()).or_default() += 1;
        let Some(i) = shop.subs.iter().position(|s| s.subscription == *sub) else {
            problems.push(format!(
                "price change {record} of {sub}, which no key changed"
            ));
            continue;
        };
        let (from, to) = shop.plans(i);
        if from_price.as_deref() != Some(from.price.as_str())
            || to_price.as_deref() != Some(to.price.as_str())
            || proration.as_deref() != Some("charge_now")
            || *effective_at != CHANGE_AT_MS
        {
            problems.push(format!(
                "price change {record} of {sub} (key {i}): {from_price:?} → {to_price:?}, \
                 {proration:?}, at {effective_at}"
            ));
        }
    }
    for (i, s) in shop.subs.iter().enumerate() {
        let n = recorded.get(s.subscription.as_str()).copied().unwrap_or(0);
        if n != usize::from(changed[i]) {
            problems.push(format!(
                "subscription {} (key {i}, changed: {}) has {n} price changes",
                s.subscription, changed[i]
            ));
        }
    }

    // Payments: the first period's (its order's), and at most one more, the
    // upgrade's.
    let orders: Vec<(String, String)> =
        sqlx::query_as("SELECT payment_intent_ref, buyer_ref FROM orders")
            .fetch_all(&mut db)
            .await
            .unwrap();
    let first_payments: HashSet<&str> = orders.iter().map(|(p, _)| p.as_str()).collect();
    let payments: Vec<(String, Option<String>, String, i64, String, i64)> = sqlx::query_as(
        "SELECT payment_intent_ref, buyer_ref, currency, amount_minor, status, created_at \
         FROM payments",
    )
    .fetch_all(&mut db)
    .await
    .unwrap();
    // Change payments by key.
    let mut charged: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    let mut first_paid: HashMap<usize, usize> = HashMap::new();
    for (payment, buyer, currency, amount, status, created_at) in &payments {
        let Some(i) = of_buyer(buyer.as_deref()) else {
            problems.push(format!("payment {payment} of buyer {buyer:?}, no key's"));
            continue;
        };
        let (from, _) = shop.plans(i);
        if first_payments.contains(payment.as_str()) {
            *first_paid.entry(i).or_default() += 1;
            if *amount != from.amount || status != "succeeded" || *created_at != START_MS {
                problems.push(format!(
                    "the first payment {payment} of key {i}: {amount} {currency}, {status}, at {created_at}"
                ));
            }
            continue;
        }
        charged.entry(i).or_default().push(payment.clone());
        if way(i) != Way::Up
            || currency != "EUR"
            || *amount != MOVED
            || status != "succeeded"
            || *created_at != CHANGE_AT_MS
        {
            problems.push(format!(
                "payment {payment} of key {i} ({:?}): {amount} {currency}, {status}, at {created_at}; \
                 expected only an upgrade's {MOVED} EUR, succeeded, at {CHANGE_AT_MS}",
                way(i)
            ));
        }
    }
    for (i, is_changed) in changed.iter().copied().enumerate() {
        let n = first_paid.get(&i).copied().unwrap_or(0);
        if n != 1 {
            problems.push(format!("key {i} has {n} first-period payments"));
        }
        let made = charged.get(&i).map_or(0, Vec::len);
        let expected = usize::from(is_changed && way(i) == Way::Up);
        if made != expected {
            problems.push(format!(
                "key {i} ({:?}, changed: {}) has {made} change payments: {:?}",
                way(i),
                is_changed,
                charged.get(&i)
            ));
        }
    }
    let change_payments: HashMap<&str, usize> = charged
        .iter()
        .flat_map(|(i, ps)| ps.iter().map(move |p| (p.as_str(), *i)))
        .collect();

    // Captures: exactly one per change payment.
    let captures: Vec<(String, String, i64)> =
        sqlx::query_as("SELECT capture_ref, payment_intent_ref, amount_minor FROM captures")
            .fetch_all(&mut db)
            .await
            .unwrap();
    let mut captured: HashMap<&str, usize> = HashMap::new();
    for (capture, payment, amount) in &captures {
        *captured.entry(payment.as_str()).or_default() += 1;
        if change_payments.contains_key(payment.as_str()) && *amount != MOVED {
            problems.push(format!("capture {capture} of {payment} is of {amount}"));
        }
    }
    for payment in change_payments.keys() {
        let n = captured.get(payment).copied().unwrap_or(0);
        if n != 1 {
            problems.push(format!("change payment {payment} has {n} captures"));
        }
    }

    // Invoices: the first period's of each, and one per upgrade; numbers
    // gapless and unique, the counter at the last.
    let invoices: Vec<InvoiceRow> = sqlx::query_as(
        "SELECT invoice_ref, number, buyer_ref, subscription_ref, currency, amount_total, status, \
         issued_at, payment_intent_ref, lines FROM invoices",
    )
    .fetch_all(&mut db)
    .await
    .unwrap();
    let mut numbers: Vec<i64> = Vec::with_capacity(invoices.len());
    let mut first_invoiced: HashMap<usize, usize> = HashMap::new();
    let mut change_invoices: BTreeMap<usize, Vec<(String, String)>> = BTreeMap::new();
    for (invoice, number, buyer, sub, currency, total, status, issued_at, paid_by, lines) in
        &invoices
    {
        match number
            .strip_prefix("2026-")
            .filter(|n| n.len() == 6)
            .and_then(|n| n.parse::<i64>().ok())
        {
            Some(n) => numbers.push(n),
            None => problems.push(format!("invoice {invoice} has number {number:?}")),
        }
        let Some(i) = of_buyer(Some(buyer.as_str())) else {
            problems.push(format!("invoice {invoice} of buyer {buyer}, no key's"));
            continue;
        };
        let (from, to) = shop.plans(i);
        if *issued_at == START_MS
            && paid_by
                .as_deref()
                .is_some_and(|p| first_payments.contains(p))
        {
            *first_invoiced.entry(i).or_default() += 1;
            if *total != from.amount || status != "paid" {
                problems.push(format!(
                    "the first invoice {invoice} of key {i}: {total} {currency}, {status}"
                ));
            }
            continue;
        }
        change_invoices
            .entry(i)
            .or_default()
            .push((invoice.clone(), number.clone()));
        let lines = lines_of(lines.as_deref());
        let expected_lines = vec![
            (
                "proration_credit".to_owned(),
                -BASIC_LEFT,
                Some(from.price.clone()),
                Some(CHANGE_AT_MS),
                Some(PERIOD_END_MS),
            ),
            (
                "proration_debit".to_owned(),
                PREMIUM_LEFT,
                Some(to.price.clone()),
                Some(CHANGE_AT_MS),
                Some(PERIOD_END_MS),
            ),
        ];
        let sum: Option<i64> = lines.as_ref().map(|ls| ls.iter().map(|l| l.1).sum());
        let payment_of = paid_by.as_deref().and_then(|p| change_payments.get(p));
        if way(i) != Way::Up
            || sub.as_deref() != Some(shop.subs[i].subscription.as_str())
            || currency != "EUR"
            || *total != MOVED
            || sum != Some(*total)
            || lines.as_ref() != Some(&expected_lines)
            || status != "paid"
            || *issued_at != CHANGE_AT_MS
            || payment_of != Some(&i)
        {
            problems.push(format!(
                "invoice {invoice} ({number}) of key {i} ({:?}): subscription {sub:?}, {total} {currency} \
                 (lines sum {sum:?}), {status}, issued {issued_at}, paid by {paid_by:?}, lines {lines:?}; \
                 expected an upgrade's {MOVED} EUR, {expected_lines:?}, paid by its change payment",
                way(i)
            ));
        }
    }
    for (i, is_changed) in changed.iter().copied().enumerate() {
        let n = first_invoiced.get(&i).copied().unwrap_or(0);
        if n != 1 {
            problems.push(format!("key {i} has {n} first-period invoices"));
        }
        let made = change_invoices.get(&i).map_or(0, Vec::len);
        let expected = usize::from(is_changed && way(i) == Way::Up);
        if made != expected {
            problems.push(format!(
                "key {i} ({:?}, changed: {}) has {made} change invoices: {:?}",
                way(i),
                is_changed,
                change_invoices.get(&i)
            ));
        }
    }
    numbers.sort_unstable();
    let expected: Vec<i64> = (1..=numbers.len() as i64).collect();
    if numbers != expected {
        let mut seen = HashSet::new();
        let twice: Vec<i64> = numbers
            .iter()
            .filter(|n| !seen.insert(**n))
            .copied()
            .collect();
        let missing: Vec<i64> = expected
            .iter()
            .filter(|n| !seen.contains(n))
            .copied()
            .collect();
        problems.push(format!(
            "invoice numbers of 2026 are not 1..={}: given twice {twice:?}, missing {missing:?}",
            numbers.len()
        ));
    }
    let counters: Vec<(i64, i64)> =
        sqlx::query_as("SELECT year, last_number FROM invoice_counters")
            .fetch_all(&mut db)
            .await
            .unwrap();
    if counters != [(2026, numbers.len() as i64)] {
        problems.push(format!(
            "invoice counters {counters:?}, with {} invoices of 2026",
            numbers.len()
        ));
    }
    let invoice_numbers: HashMap<&str, &str> = invoices
        .iter()
        .map(|r| (r.0.as_str(), r.1.as_str()))
        .collect();

    // Entitlements: the old product's (revoked at the change if changed),
    // and the new product's once changed.
    let entitlements: Vec<(String, String, String, String, i64, Option<i64>)> = sqlx::query_as(
        "SELECT entitlement_ref, buyer_ref, product_ref, status, granted_at, revoked_at \
         FROM entitlements",
    )
    .fetch_all(&mut db)
    .await
    .unwrap();
    let mut entitled: BTreeMap<usize, Vec<Held>> = BTreeMap::new();
    let mut entitlement_key: HashMap<&str, usize> = HashMap::new();
    for (entitlement, buyer, product, status, granted_at, revoked_at) in &entitlements {
        let Some(i) = of_buyer(Some(buyer.as_str())) else {
            problems.push(format!(
                "entitlement {entitlement} of buyer {buyer}, no key's"
            ));
            continue;
        };
        entitlement_key.insert(entitlement.as_str(), i);
        let (from, to) = shop.plans(i);
        let name = if *product == from.product {
            "from"
        } else if *product == to.product {
            "to"
        } else {
            "other"
        };
        entitled.entry(i).or_default().push((
            name.to_owned(),
            status.clone(),
            *granted_at,
            *revoked_at,
        ));
    }
    for (i, is_changed) in changed.iter().copied().enumerate() {
        let mut got = entitled.remove(&i).unwrap_or_default();
        got.sort();
        let from =
            |status: &str, revoked_at| ("from".to_owned(), status.to_owned(), START_MS, revoked_at);
        let expected = if is_changed {
            vec![
                from("revoked", Some(CHANGE_AT_MS)),
                ("to".to_owned(), "active".to_owned(), CHANGE_AT_MS, None),
            ]
        } else {
            vec![from("active", None)]
        };
        if got != expected {
            problems.push(format!(
                "key {i} ({:?}, changed: {}) has the entitlements {got:?}, expected {expected:?}",
                way(i),
                is_changed
            ));
        }
    }

    // Credit: a changed downgrade's buyer has exactly `MOVED`, everyone
    // else none; the buyer row mirrors it.
    let balances: Vec<(String, String, i64)> =
        sqlx::query_as("SELECT buyer_ref, currency, amount_minor FROM credit_balances")
            .fetch_all(&mut db)
            .await
            .unwrap();
    let balances: HashMap<(String, String), i64> =
        balances.into_iter().map(|(b, c, a)| ((b, c), a)).collect();
    let buyers: Vec<(String, Option<String>, i64)> =
        sqlx::query_as("SELECT buyer_ref, credit_currency, credit_minor FROM buyers")
            .fetch_all(&mut db)
            .await
            .unwrap();
    let buyers: HashMap<String, (Option<String>, i64)> =
        buyers.into_iter().map(|(b, c, m)| (b, (c, m))).collect();
    if buyers.len() != CHANGES
        || balances
            .keys()
            .any(|(b, _)| !by_buyer.contains_key(b.as_str()))
    {
        problems.push(format!(
            "{} buyers and balances of {:?}, for {CHANGES} keys",
            buyers.len(),
            balances.keys().collect::<Vec<_>>()
        ));
    }
    let mut credited = 0;
    for (i, s) in shop.subs.iter().enumerate() {
        let expected = if changed[i] && way(i) == Way::Down {
            MOVED
        } else {
            0
        };
        credited += expected;
        let balance = balances
            .get(&(s.buyer.clone(), "EUR".to_owned()))
            .copied()
            .unwrap_or(0);
        let others = balances
            .iter()
            .filter(|((b, c), _)| *b == s.buyer && c != "EUR")
            .count();
        let mirror = buyers.get(&s.buyer);
        if balance != expected || others != 0 || mirror != Some(&(Some("EUR".to_owned()), expected))
        {
            problems.push(format!(
                "key {i} ({:?}, changed: {}): buyer {} has a balance of {balance} EUR \
                 ({others} in other currencies), shown as {mirror:?}; expected {expected}",
                way(i),
                changed[i],
                s.buyer
            ));
        }
    }

    // Events since the setup: for each changed subscription exactly one of
    // each it emits, none for the others, and nothing else.
    let (events, sources) = read_events(&mut db, &shop.endpoint, problems).await;
    drop(db.close().await);
    let mut of_key: HashMap<(usize, &str), Vec<&str>> = HashMap::new();
    let mut new_events = 0;
    for (event_ref, e) in events.iter().filter(|(r, _)| !before.contains(*r)) {
        new_events += 1;
        let Some(data) = &e.data else {
            problems.push(format!(
                "event {event_ref} ({}) has no data anywhere (not in the outbox, not pending, no delivery)",
                e.event_type
            ));
            continue;
        };
        let field = |name: &str| data[name].as_str().unwrap_or_default().to_owned();
        let key = match e.event_type.as_str() {
            "subscription.changed" => {
                let i = shop
                    .subs
                    .iter()
                    .position(|s| s.subscription == field("subscription_ref"));
                if let Some(i) = i {
                    let (from, to) = shop.plans(i);
                    if field("from_price_ref") != from.price
                        || field("to_price_ref") != to.price
                        || field("price_ref") != to.price
                        || field("product_ref") != to.product
                    {
                        problems.push(format!(
                            "event {event_ref} (subscription.changed) of key {i}: {data}"
                        ));
                    }
                }
                i
            }
            "payment.succeeded" => {
                let i = change_payments
                    .get(field("payment_intent_ref").as_str())
                    .copied();
                if i.is_some() && minor(&data["amount"]) != Some(MOVED) {
                    problems.push(format!(
                        "event {event_ref} (payment.succeeded) is of {}",
                        data["amount"]
                    ));
                }
                i
            }
            "invoice.paid" => {
                let invoice = field("invoice_ref");
                let i = change_invoices
                    .iter()
                    .find(|(_, is)| is.iter().any(|(r, _)| *r == invoice))
                    .map(|(i, _)| *i);
                if i.is_some()
                    && (invoice_numbers.get(invoice.as_str()) != Some(&field("number").as_str())
                        || minor(&data["amount_total"]) != Some(MOVED))
                {
                    problems.push(format!(
                        "event {event_ref} (invoice.paid) disagrees with invoice {invoice} ({:?}): {data}",
                        invoice_numbers.get(invoice.as_str())
                    ));
                }
                i
            }
            "entitlement.revoked" | "entitlement.granted" => {
                let i = entitlement_key
                    .get(field("entitlement_ref").as_str())
                    .copied();
                if let Some(i) = i {
                    let (from, to) = shop.plans(i);
                    let (product, status) = if e.event_type == "entitlement.revoked" {
                        (from, "revoked")
                    } else {
                        (to, "active")
                    };
                    if field("product_ref") != product.product || field("status") != status {
                        problems.push(format!("event {event_ref} ({}): {data}", e.event_type));
                    }
                }
                i
            }
            other => {
                problems.push(format!(
                    "event {event_ref} is {other}, which no change emits: {data}"
                ));
                continue;
            }
        };
        let Some(i) = key.filter(|i| changed[*i]) else {
            problems.push(format!(
                "event {event_ref} ({}) is of no changed subscription (key {key:?}): {data}",
                e.event_type
            ));
            continue;
        };
        let (from, to) = shop.plans(i);
        let mut products = [from.product.as_str(), to.product.as_str()];
        let mut scoped: Vec<&str> = e.scope["product_refs"]
            .as_array()
            .map(|ps| ps.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        products.sort_unstable();
        scoped.sort_unstable();
        if e.scope["buyer_ref"] != shop.subs[i].buyer.as_str() || scoped != products {
            problems.push(format!(
                "event {event_ref} ({}) of key {i} has scope {}, not its buyer and both products",
                e.event_type, e.scope
            ));
        }
        let event_type = CHANGE_EVENTS
            .iter()
            .map(|(t, _)| *t)
            .find(|t| *t == e.event_type)
            .expect("a change event type");
        of_key.entry((i, event_type)).or_default().push(event_ref);
    }
    for i in (0..CHANGES).filter(|i| changed[*i]) {
        for (event_type, _) in events_of(way(i)) {
            let found = of_key.get(&(i, *event_type)).cloned().unwrap_or_default();
            if found.len() != 1 {
                problems.push(format!(
                    "key {i} ({:?}) has {} {event_type} events: {found:?}",
                    way(i),
                    found.len()
                ));
            }
        }
    }

    let done = |w: Way| (0..CHANGES).filter(|i| changed[*i] && way(*i) == w).count();
    format!(
        "{} of {CHANGES} changed ({} up, {} down), {} price changes, {} payments ({} of changes), \
         {} invoices (numbers 2026-{:06}..={:06}), EUR {}.{:02} credited; {new_events} events since the setup \
         ({} in the outbox, {} pending and {} processed in the queue, {} in both, {} held deliveries)",
        changed.iter().filter(|c| **c).count(),
        done(Way::Up),
        done(Way::Down),
        records.len(),
        payments.len(),
        change_payments.len(),
        invoices.len(),
        numbers.first().unwrap_or(&0),
        numbers.last().unwrap_or(&0),
        credited / 100,
        credited % 100,
        sources.outbox,
        sources.queued_pending,
        sources.queued_processed,
        sources.in_both,
        sources.deliveries,
    )
}

/// The scenario of the module docs against a store the environment
/// variables `envs` name; `probe_url` reads that store beside the server.
async fn crash_and_replay(label: &str, dir: &Path, envs: Envs, probe_url: &str) {
    let run = format!("{label}-{:08x}", rand_u32());
    let site = Site::new(dir, envs);
    let sandbox = site.bootstrap();
    let api = Api {
        client: client(),
        url: site.api.clone(),
        secret: sandbox.secret.clone(),
        run: run.clone(),
    };

    let started = Instant::now();
    let mut first = site.serve("serve-1.log").await;
    let shop = open_shop(&api, &sandbox.environment_ref).await;
    let before_changes = event_refs(probe_url, &shop.endpoint).await;
    let setup_after = started.elapsed();

    // 1. Wave A at once, then wave B at once as soon as wave A starts
    //    answering; SIGKILL once wave B's first change is in the store.
    let waves = Waves {
        n: CHANGES,
        wave_a: WAVE_A,
        what: "change",
        count_b: "SELECT COUNT(*) FROM subscription_changes c \
                  JOIN subscriptions s ON s.subscription_ref = c.subscription_ref \
                  JOIN buyers b ON b.buyer_ref = s.buyer_ref \
                  WHERE c.kind = 'price_change' AND b.email LIKE $1",
        b_pattern: "buyer-b%".to_owned(),
        probe_url,
        // At wave B's first commit: on SQLite, changes that arrive
        // together commit as one group, so half of wave B in the store
        // can mean all of it, and the kill would cut nothing uncommitted.
        kill_at: 1,
    };
    let changes = || changes(&api, &shop, &run);
    let kill = fire_and_kill(&mut first, waves, changes()).await;
    drop(first);
    let (before, log_1) = (&kill.before, &kill.log);
    let wrong: Vec<String> = before
        .iter()
        .filter_map(|(i, a)| wrong_answer(&shop, *i, a))
        .collect();
    assert!(
        wrong.is_empty(),
        "before the kill, {} of {} answered changes did not change:\n{}\n{log_1}",
        wrong.len(),
        before.len(),
        wrong.join("\n")
    );

    // 2. The store as the kill left it: each subscription changed whole or
    //    not at all, the events of the committed changes in the outbox or
    //    the queue.
    let answered_before: BTreeSet<usize> = before.keys().copied().collect();
    let mut problems_at_kill: Vec<String> = Vec::new();
    let counted_at_kill = check_store(
        probe_url,
        &shop,
        &before_changes,
        &answered_before,
        false,
        &mut problems_at_kill,
    )
    .await;

    // 3. The same store, a new process; every key again, with its body and
    //    its `If-Match`.
    let mut second = site.serve("serve-2.log").await;
    let restarted_after = kill.killed.elapsed();
    let (after, retries) = replay_all(CHANGES, changes()).await;
    // And once more: whatever ran after the restart is now a kept result.
    let (again, retries_again) = replay_all(CHANGES, changes()).await;

    let mut problems: Vec<String> = problems_at_kill
        .into_iter()
        .map(|p| format!("at the kill: {p}"))
        .collect();
    let mut replays = Replays::default();
    let mut answered = BTreeSet::new();
    for i in 0..CHANGES {
        let Some(now) = Replays::after(i, &after, 200, &mut problems) else {
            continue;
        };
        if let Some(p) = wrong_answer(&shop, i, now) {
            problems.push(p);
            continue;
        }
        replays.check(
            i,
            before.get(&i),
            now,
            &again[&i],
            subscription_ref,
            &mut problems,
        );
        answered.insert(i);
    }

    // 4. The store, once the server has stopped (so that the relay moves no
    //    event between two reads).
    let log_2 = second.log_tail();
    let clean_exit = second.terminate_cleanly();
    let counted = check_store(
        probe_url,
        &shop,
        &before_changes,
        &answered,
        true,
        &mut problems,
    )
    .await;

    say(&format!(
        "change crash [{label}]: {CHANGES} subscriptions paid and the clock at {CHANGE_AT} after {} ms; SIGKILL (pid {}) {} ms after firing \
         {CHANGES} changes, wave B fired after {} ms, {} of wave B's changes in the store at the kill; {} answered (all 200; {} of them seen \
         before the kill) and {} not; after the restart ({} ms to ready) {} of those replayed (committed before the kill) and {} ran now; \
         {} + {} retries on 409/503; store at the kill: {counted_at_kill}; store at the end: {counted}; {} problems; total {} ms",
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
        "[{label}] every change had committed by the time of the kill: nothing uncommitted was in flight"
    );
    verdict(
        label,
        "after a crash mid-changes",
        &problems,
        &format!("{log_1}\n{log_2}"),
        clean_exit,
    );
}

crash_tests!(
    embedded_crash_mid_changes_changes_each_subscription_once,
    fleet_crash_mid_changes_changes_each_subscription_once,
    on_fleet_store("fleet change crash test", "billing_change", 9),
    |label, dir, envs, url, _fleet| crash_and_replay(label, dir, envs, url)
);
