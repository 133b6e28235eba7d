//! Crash test for renewals (issue 31, contract 12.4) with the real binary:
//! a SIGKILL of `billing serve` while a test clock's advance is renewing
//! 100 subscriptions, then a restart on the same store.
//!
//! `SUBSCRIPTIONS` monthly subscriptions (EUR 9.99) are paid with
//! `pm_card_visa` on one test clock at `START` (2026-01-05); the clock is
//! advanced six months, to `TARGET` (2026-07-05): 600 renewals, each one
//! unit of work (payment, capture, paid invoice with the next number, the
//! `renewal` change, the next period and its events) committed with the
//! deletion of its job. The test watches the newest payment through the
//! API and kills the server once the advance has reached the third renewal
//! month (`KILL_FROM`), with the clock still `advancing`. The store as the
//! kill left it holds whole renewals only: as many payments as invoices,
//! and one `renewal` change per renewal payment.
//!
//! A new server on the same store takes the advance over once the killed
//! one's lease has ended (`commerce::jobs`, 5 s) and finishes it; the
//! clock is `ready` at `TARGET`. Read through the API: every subscription is
//! `active` with its period `TARGET`..2026-08-05, has exactly seven
//! payments (the first period's and six renewals', all `succeeded`, one at
//! each month's date), seven `paid` invoices each naming a payment of its
//! own, and exactly six `renewal` changes, one per renewal date; the
//! invoice numbers of the environment are exactly 2026-000001..=2026-000700
//! (all within 2026, whose numbering starts at 1), with no gap and no
//! duplicate. So every renewal ran once: none was lost with the kill, none
//! ran twice after it.
//!
//! Embedded mode (a SQLite file) always runs; fleet mode (PostgreSQL, a fresh
//! database per run) runs only with BILLING_TEST_FLEET=1. In fleet mode a
//! `billing dispatcher` starts beside the new server, so two runners race
//! for the advance and its renewals, and still each renewal runs once.

use crate::common::crash::{client, crash_tests, probe, role, verdict, Envs, Site};
use crate::common::poll::Poll;
use crate::common::{rand_u32, say, text};
use serde_json::{json, Value};
use sqlx::Connection;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The subscriptions, one buyer each.
const SUBSCRIPTIONS: usize = 100;
/// The months the clock is advanced: each subscription renews this often.
const MONTHS: usize = 6;
/// Where the clock starts, and where the advance takes it (the same year,
/// so that the invoice numbers are one gapless run).
const START: &str = "2026-01-05T09:00:00.000Z";
const TARGET: &str = "2026-07-05T09:00:00.000Z";
/// The end of every subscription's period after the advance.
const NEXT_END: &str = "2026-08-05T09:00:00.000Z";
/// The server is killed once the newest payment is of this renewal date or
/// later, while the clock is still advancing.
const KILL_FROM: &str = "2026-04-05T09:00:00.000Z";
/// The dates a subscription pays on: `START`, then each renewal.
const PAID_ON: [&str; MONTHS + 1] = [
    START,
    "2026-02-05T09:00:00.000Z",
    "2026-03-05T09:00:00.000Z",
    KILL_FROM,
    "2026-05-05T09:00:00.000Z",
    "2026-06-05T09:00:00.000Z",
    TARGET,
];
/// How long the advance may take to reach `KILL_FROM`, and the restarted
/// server to finish it.
const WITHIN: Duration = Duration::from_secs(90);

/// The API of a server, as the sandbox's admin.
#[derive(Clone)]
struct Api {
    client: reqwest::Client,
    url: String,
    secret: String,
    /// Makes the idempotency keys unique within the run.
    run: String,
}

impl Api {
    /// A POST of `body` to `path` under the key `run-key` (and `If-Match`
    /// when given), which must answer `expect`: its `data`.
    async fn post(&self, path: &str, key: &str, body: Value, expect: u16) -> Value {
        let r = self
            .client
            .post(format!("{}{path}", self.url))
            .bearer_auth(&self.secret)
            .header("Idempotency-Key", format!("{}-{key}", self.run))
            .json(&body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST {path}: {e:?}"));
        let status = r.status().as_u16();
        let raw = r.text().await.unwrap_or_default();
        assert_eq!(status, expect, "POST {path} {body}: {raw}");
        let mut answer: Value = serde_json::from_str(&raw).unwrap();
        answer["data"].take()
    }

    /// A GET of `path`, which must answer 200 (or fail to connect, when
    /// `Err`): its `data`.
    async fn try_get(&self, path: &str) -> Result<Value, String> {
        let r = self
            .client
            .get(format!("{}{path}", self.url))
            .bearer_auth(&self.secret)
            .send()
            .await
            .map_err(|e| format!("GET {path}: {e:?}"))?;
        let status = r.status().as_u16();
        let raw = r.text().await.map_err(|e| format!("GET {path}: {e:?}"))?;
        assert_eq!(status, 200, "GET {path}: {raw}");
        let mut answer: Value = serde_json::from_str(&raw).unwrap();
        Ok(answer["data"].take())
    }

    async fn get(&self, path: &str) -> Value {
        self.try_get(path).await.unwrap()
    }

    /// Every item of the list at `path`, page by page (100 a page).
    async fn walk(&self, path: &str) -> Vec<Value> {
        let mut all = Vec::new();
        let mut cursor = String::new();
        loop {
            let page = self.get(&format!("{path}?limit=100{cursor}")).await;
            all.extend(page["items"].as_array().unwrap().iter().cloned());
            match page["next_cursor"].as_str() {
                Some(c) => cursor = format!("&cursor={c}"),
                None => return all,
            }
        }
    }
}

/// Through the API: a published monthly price of a published product, a
/// published checkout config of its offer, and a test clock at `START`;
/// the config and the clock.
async fn open_shop(api: &Api) -> (String, String) {
    let product = api
        .post(
            "/api/v1/products",
            "product",
            json!({"name": "Renewal-crash magazine"}),
            201,
        )
        .await;
    let product = text(&product, "product_ref");
    api.post(
        &format!("/api/v1/products/{product}/publish"),
        "product-publish",
        json!({}),
        200,
    )
    .await;
    let price = api
        .post(
            "/api/v1/prices",
            "price",
            json!({
                "product_ref": product,
                "amount": {"currency": "EUR", "unit": "minor", "value": "999"},
                "type": "recurring",
                "interval": "month",
            }),
            201,
        )
        .await;
    let price = text(&price, "price_ref");
    api.post(
        &format!("/api/v1/prices/{price}/publish"),
        "price-publish",
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
            "config",
            json!({
                "name": "Renewal-crash checkout",
                "line_items": [{"offer_ref": text(&offers[0], "offer_ref"), "quantity": 1}],
                "success_url": "https://example.com/ok",
            }),
            201,
        )
        .await;
    let config = text(&config, "config_ref");
    api.post(
        &format!("/api/v1/checkout-configs/{config}/publish"),
        "config-publish",
        json!({}),
        200,
    )
    .await;
    let clock = api
        .post(
            "/api/v1/test_clocks",
            "clock",
            json!({"frozen_time": START, "name": "renewal crash"}),
            201,
        )
        .await;
    assert_eq!(clock["status"], "ready", "{clock}");
    (config, text(&clock, "test_clock_ref"))
}

/// `SUBSCRIPTIONS` sessions of `config` on `clock`, each paid with
/// `pm_card_visa`, a few at a time; the subscriptions, active until
/// 2026-02-05.
async fn subscribe_all(api: &Api, config: &str, clock: &str) -> Vec<Value> {
    let gate = Arc::new(tokio::sync::Semaphore::new(8));
    let tasks: Vec<_> = (0..SUBSCRIPTIONS)
        .map(|i| {
            let (api, gate) = (api.clone(), gate.clone());
            let (config, clock) = (config.to_owned(), clock.to_owned());
            tokio::spawn(async move {
                let _turn = gate.acquire().await.unwrap();
                let session = api
                    .post(
                        "/api/v1/checkout-sessions",
                        &format!("session-{i:03}"),
                        json!({
                            "config_ref": config,
                            "buyer": {"email": format!("renewer-{i:03}@example.com")},
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
                        json!({"payment_method": "pm_card_visa"}),
                        200,
                    )
                    .await;
                let sub = paid["subscription"].clone();
                assert_eq!(sub["status"], "active", "{paid}");
                assert_eq!(sub["current_period_end"], PAID_ON[1], "{sub}");
                sub
            })
        })
        .collect();
    let mut subs = Vec::with_capacity(SUBSCRIPTIONS);
    for t in tasks {
        subs.push(t.await.unwrap());
    }
    subs
}

/// Polls the newest payment and the clock until the advance has reached
/// `KILL_FROM` with the clock still `advancing`; the newest payment's time
/// then, and how many polls it took.
async fn await_kill_point(api: &Api, clock: &str, context: impl Fn() -> String) -> (String, usize) {
    // Looked at every 5 ms: the kill must land mid-advance.
    let poll = Poll::within(WITHIN).every(Duration::from_millis(5));
    let mut polls = 0;
    loop {
        polls += 1;
        let newest = api.get("/api/v1/payments?limit=1").await;
        let at = text(&newest["items"][0], "created_at");
        let c = api.get(&format!("/api/v1/test_clocks/{clock}")).await;
        assert_eq!(
            c["status"], "advancing",
            "the advance ended before the kill (newest payment of {at}): {c}"
        );
        // RFC 3339 times of one format compare as strings.
        if at.as_str() >= KILL_FROM {
            return (at, polls);
        }
        poll.tick(|| {
            format!(
                "the advance did not reach {KILL_FROM} (newest payment of {at})\n{}",
                context()
            )
        })
        .await;
    }
}

/// What the store held at the kill: payments, invoices and `renewal`
/// changes, read beside the stopped server. Each renewal is whole or not
/// there: one payment, one invoice and one change.
async fn at_the_kill(probe_url: &str) -> (i64, i64, i64) {
    let mut probe = probe(probe_url).await;
    let mut counts = [0i64; 3];
    for (n, sql) in counts.iter_mut().zip([
        "SELECT COUNT(*) FROM payments",
        "SELECT COUNT(*) FROM invoices",
        "SELECT COUNT(*) FROM subscription_changes WHERE kind = 'renewal'",
    ]) {
        *n = sqlx::query_scalar::<_, i64>(sql)
            .fetch_one(&mut probe)
            .await
            .unwrap();
    }
    drop(probe.close().await);
    let [payments, invoices, renewals] = counts;
    (payments, invoices, renewals)
}

/// Every check of the module docs on the store after the restart, read
/// through the API; the problems found, and a summary of what was read.
async fn check_renewed_once(api: &Api, subs: &[Value], problems: &mut Vec<String>) -> String {
    let subscriptions = api.walk("/api/v1/subscriptions").await;
    let payments = api.walk("/api/v1/payments").await;
    let invoices = api.walk("/api/v1/invoices").await;
    let changes = api.walk("/api/v1/subscription-changes").await;

    let ours: BTreeMap<String, &Value> = subs
        .iter()
        .map(|s| (text(s, "subscription_ref"), s))
        .collect();
    if subscriptions.len() != SUBSCRIPTIONS {
        problems.push(format!(
            "{} subscriptions listed, {SUBSCRIPTIONS} made",
            subscriptions.len()
        ));
    }
    for s in &subscriptions {
        let reference = text(s, "subscription_ref");
        if !ours.contains_key(&reference)
            || s["status"] != "active"
            || s["current_period_start"] != TARGET
            || s["current_period_end"] != NEXT_END
        {
            problems.push(format!(
                "subscription {reference} is not active for {TARGET}..{NEXT_END}: {s}"
            ));
        }
    }

    // Payments by the subscription of their buyer (one buyer each).
    let of_buyer: BTreeMap<String, String> = subs
        .iter()
        .map(|s| (text(s, "buyer_ref"), text(s, "subscription_ref")))
        .collect();
    let mut paid_on: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    let mut payment_refs = BTreeSet::new();
    for p in &payments {
        let Some(sub) = p["buyer_ref"].as_str().and_then(|b| of_buyer.get(b)) else {
            problems.push(format!("payment of no subscription: {p}"));
            continue;
        };
        if p["status"] != "succeeded" {
            problems.push(format!("payment of {sub} did not succeed: {p}"));
        }
        payment_refs.insert(text(p, "payment_intent_ref"));
        paid_on
            .entry(sub.as_str())
            .or_default()
            .push(text(p, "created_at"));
    }
    for sub in ours.keys() {
        let mut dates = paid_on.get(sub.as_str()).cloned().unwrap_or_default();
        dates.sort();
        if dates != PAID_ON {
            problems.push(format!(
                "subscription {sub} has {} payments, on {dates:?}; expected one on each of {PAID_ON:?}",
                dates.len()
            ));
        }
    }

    // Invoices: seven paid ones per subscription, each by a payment of its
    // own; their numbers one gapless run of the year.
    let mut numbers = Vec::with_capacity(invoices.len());
    let mut invoiced: BTreeMap<String, usize> = BTreeMap::new();
    let mut paying = BTreeSet::new();
    for i in &invoices {
        let number = text(i, "number");
        match number
            .strip_prefix("2026-")
            .and_then(|n| n.parse::<usize>().ok())
        {
            Some(n) => numbers.push(n),
            None => problems.push(format!("invoice number {number} is not of 2026")),
        }
        let by = i["payment_intent_ref"].as_str().unwrap_or_default();
        if i["status"] != "paid" || !payment_refs.contains(by) || !paying.insert(by.to_owned()) {
            problems.push(format!(
                "invoice {number} is not paid by a payment of its own: {i}"
            ));
        }
        *invoiced.entry(text(i, "buyer_ref")).or_default() += 1;
    }
    numbers.sort_unstable();
    let expected: Vec<usize> = (1..=SUBSCRIPTIONS * (MONTHS + 1)).collect();
    if numbers != expected {
        let seen: BTreeSet<usize> = numbers.iter().copied().collect();
        let missing: Vec<usize> = expected
            .iter()
            .filter(|n| !seen.contains(n))
            .copied()
            .collect();
        let doubled: Vec<usize> = numbers
            .windows(2)
            .filter(|w| w[0] == w[1])
            .map(|w| w[0])
            .collect();
        problems.push(format!(
            "invoice numbers are not exactly 1..={}: {} of them, missing {missing:?}, doubled {doubled:?}, highest {:?}",
            expected.len(),
            numbers.len(),
            numbers.last()
        ));
    }
    for s in subs {
        let buyer = text(s, "buyer_ref");
        let n = invoiced.get(&buyer).copied().unwrap_or(0);
        if n != MONTHS + 1 {
            problems.push(format!(
                "subscription {} has {n} invoices, not {}",
                text(s, "subscription_ref"),
                MONTHS + 1
            ));
        }
    }

    // Exactly one `renewal` change per renewal date.
    let mut renewed_on: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for c in changes.iter().filter(|c| c["kind"] == "renewal") {
        renewed_on
            .entry(text(c, "subscription_ref"))
            .or_default()
            .push(text(c, "effective_at"));
    }
    for sub in ours.keys() {
        let mut dates = renewed_on.get(sub).cloned().unwrap_or_default();
        dates.sort();
        if dates != PAID_ON[1..] {
            problems.push(format!(
                "subscription {sub} has {} renewal changes, on {dates:?}",
                dates.len()
            ));
        }
    }
    format!(
        "{} subscriptions, {} payments, {} invoices (numbers 2026-{:06}..={:06}), {} changes ({} renewals)",
        subscriptions.len(),
        payments.len(),
        invoices.len(),
        numbers.first().unwrap_or(&0),
        numbers.last().unwrap_or(&0),
        changes.len(),
        renewed_on.values().map(Vec::len).sum::<usize>(),
    )
}

/// The scenario of the module docs against a store the environment
/// variables `envs` name; `probe_url` reads that store beside the server.
/// `second_runner`: after the kill, a `billing dispatcher` starts beside
/// the new `billing serve` on the same store, so two runners race for the
/// advance the killed one held (fleet mode).
async fn crash_mid_advance(
    label: &str,
    dir: &Path,
    envs: Envs,
    probe_url: &str,
    second_runner: bool,
) {
    let site = Site::new(dir, envs);
    let api = Api {
        client: client(),
        url: site.api.clone(),
        secret: site.bootstrap().secret,
        run: format!("renewal-crash-{label}-{:08x}", rand_u32()),
    };

    let started = Instant::now();
    let mut first = site.serve("serve-1.log").await;
    let (config, clock) = open_shop(&api).await;
    let subs = subscribe_all(&api, &config, &clock).await;
    let setup_after = started.elapsed();

    // 1. The advance, and a SIGKILL once it is in its third month.
    let advancing = api
        .post(
            &format!("/api/v1/test_clocks/{clock}/advance"),
            "advance",
            json!({"frozen_time": TARGET}),
            202,
        )
        .await;
    assert_eq!(advancing["status"], "advancing", "{advancing}");
    let asked = Instant::now();
    let (newest, polls) = await_kill_point(&api, &clock, || first.log_tail()).await;
    let pid = first.pid();
    first.kill_hard();
    let killed = Instant::now();
    let log_1 = first.log_tail();
    drop(first);

    // 2. The store as the kill left it: whole renewals only, some but not
    //    all of them.
    let (payments, invoices, renewals) = at_the_kill(probe_url).await;
    let done = payments - SUBSCRIPTIONS as i64;
    let all = (SUBSCRIPTIONS * MONTHS) as i64;
    assert!(
        done > 0 && done < all,
        "[{label}] {done} of {all} renewals were done at the kill: not mid-advance\n{log_1}"
    );
    assert!(
        invoices == payments && renewals == done,
        "[{label}] at the kill: {payments} payments, {invoices} invoices, {renewals} renewal changes; \
         a renewal was left half-done\n{log_1}"
    );

    // 3. The same store, a new process (and in a fleet a dispatcher beside
    //    it, the two racing for the advance), which finishes the advance.
    let mut runner =
        second_runner.then(|| role(dir, &site.without_api(), "dispatcher", "dispatcher-2.log"));
    let mut second = site.serve("serve-2.log").await;
    let restarted_after = killed.elapsed();
    let poll =
        Poll::within(WITHIN.saturating_sub(killed.elapsed())).every(Duration::from_millis(50));
    let ready = loop {
        let c = api.get(&format!("/api/v1/test_clocks/{clock}")).await;
        if c["status"] == "ready" {
            break c;
        }
        poll.tick(|| {
            format!(
                "[{label}] the clock was not ready {WITHIN:?} after the kill: {c}\n{}",
                second.log_tail()
            )
        })
        .await;
    };
    let ready_after = killed.elapsed();
    assert_eq!(ready["frozen_time"], TARGET, "{ready}");

    // 4. Every renewal once.
    let mut problems = Vec::new();
    let counted = check_renewed_once(&api, &subs, &mut problems).await;
    let mut log_2 = second.log_tail();
    let mut clean_exit = second.terminate_cleanly();
    if let Some(runner) = runner.as_mut() {
        log_2.push_str(&runner.log_tail());
        clean_exit &= runner.terminate_cleanly();
    }

    say(&format!(
        "renewal crash [{label}]: {SUBSCRIPTIONS} subscriptions paid on a clock after {} ms; advance of {MONTHS} months asked, \
         SIGKILL (pid {pid}) {} ms later after {polls} polls (newest payment of {newest}); at the kill {done} of {all} renewals done \
         ({payments} payments, {invoices} invoices, {renewals} renewal changes); restarted server ready {} ms and the clock {} ms after the kill; \
         at the end: {counted}; {} problems; total {} ms",
        setup_after.as_millis(),
        (killed - asked).as_millis(),
        restarted_after.as_millis(),
        ready_after.as_millis(),
        problems.len(),
        started.elapsed().as_millis(),
    ));
    verdict(
        label,
        "after a crash mid-advance",
        &problems,
        &format!("{log_1}\n{log_2}"),
        clean_exit,
    );
}

crash_tests!(
    embedded_crash_mid_advance_renews_each_subscription_once,
    fleet_crash_mid_advance_renews_each_subscription_once,
    on_fleet_store("fleet renewal crash test", "billing_renewal", 12),
    |label, dir, envs, url, fleet| crash_mid_advance(label, dir, envs, url, fleet)
);
