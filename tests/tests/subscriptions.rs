//! Subscriptions over time (contract 12.4) on every backend: renewals on a
//! test clock, month-end periods, dunning of a card that declines every
//! renewal, cancel now and at the period's end, concurrent advances and
//! runners, jobs that fail for good during an advance (counted, the clock
//! still ready), live environments without clocks.
//!
//! Timed work is driven through its seam (`commerce::jobs::run_due` at
//! the wall time), so an advance runs when the test says, with no sleep;
//! one test runs the real background runner instead.

use billing_tests::clocks::{self, CLOCKS};
use billing_tests::kit::api::{INVOICES, PAYMENTS, SESSIONS, SUBSCRIPTIONS};
use billing_tests::kit::{at, eur, invalid, items, list, published_config, sellable, text};
use billing_tests::receiver::{Behaviour, TestReceiver};
use billing_tests::verifier::each_signed_once;
use billing_tests::{backend_tests, EventPipeline, TestApp};
use commerce::jobs::{run_due, Rules};
use domain::Timestamp;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// Creates a test clock at `time`; its reference.
async fn clock(app: &TestApp, time: &str) -> String {
    let c = clocks::created(app, time, Some("test")).await;
    assert_eq!(c["status"], "ready");
    assert_eq!(c["frozen_time"], time);
    assert_eq!(c["failed_jobs"], 0);
    text(&c["test_clock_ref"])
}

/// A published config selling a subscription of `amount` EUR a month.
async fn monthly_config(app: &TestApp, amount: &str) -> String {
    let s = sellable(app, "Magazine", eur(amount), Some("month")).await;
    published_config(
        app,
        json!({"name": "Subscribe", "success_url": "https://example.com/ok",
            "line_items": [{"offer_ref": s.offer, "quantity": 1}]}),
    )
    .await
}

/// Pays a new session of `config` on `clock` with `pm`; the subscription.
async fn subscribe(app: &TestApp, config: &str, clock: &str, pm: &str) -> Value {
    let email = format!("{}@example.com", billing_tests::unique_key());
    let (session, paid) = clocks::pay_on(app, config, clock, &email, pm).await;
    assert_eq!(session["test_clock_ref"], clock);
    let sub = paid["subscription"].clone();
    assert_eq!(sub["status"], "active", "{sub}");
    assert_eq!(sub["test_clock_ref"], clock);
    sub
}

/// Asks `clock` to advance to `time` (202, `advancing`).
async fn ask_advance(app: &TestApp, clock: &str, time: &str) {
    let asked = clocks::ask_advance(app, clock, time).await;
    assert_eq!(asked["status"], "advancing");
}

/// Advances `clock` to `time` and runs its work through the seam; the
/// clock, `ready` at `time`.
async fn advance(app: &TestApp, clock: &str, time: &str) -> Value {
    ask_advance(app, clock, time).await;
    let c = clocks::settle(app, clock).await;
    assert_eq!(c["frozen_time"], time);
    c
}

async fn get(app: &TestApp, path: &str) -> Value {
    let r = app.get(path).send().await;
    r.expect(200);
    r.data().clone()
}

async fn subscription(app: &TestApp, sub: &Value) -> Value {
    get(app, &at(SUBSCRIPTIONS, &text(&sub["subscription_ref"]), "")).await
}

/// The buyer's payments and invoices, oldest first.
async fn money_of(app: &TestApp, sub: &Value) -> (Vec<Value>, Vec<Value>) {
    let buyer = text(&sub["buyer_ref"]);
    let mut payments = list(app, &format!("{PAYMENTS}?buyer_ref={buyer}")).await;
    let mut invoices = list(app, &format!("{INVOICES}?buyer_ref={buyer}")).await;
    payments.sort_by_key(|p| text(&p["created_at"]));
    invoices.sort_by_key(|i| text(&i["number"]));
    (payments, invoices)
}

fn numbers(invoices: &[Value]) -> Vec<u32> {
    invoices
        .iter()
        .map(|i| text(&i["number"])[5..].parse().unwrap())
        .collect()
}

/// The one line of a subscription's invoice (contract 14.1): a `period`
/// line of the subscription's price, from `start` to `end`, of the whole
/// `amount_total`.
#[track_caller]
fn assert_period_line(invoice: &Value, sub: &Value, start: &str, end: &str) {
    let lines = invoice["lines"].as_array().expect("lines");
    assert_eq!(lines.len(), 1, "{invoice}");
    let l = &lines[0];
    assert_eq!(l["kind"], "period", "{invoice}");
    assert_eq!(l["price_ref"], sub["price_ref"], "{invoice}");
    assert_eq!(l["amount"], invoice["amount_total"], "{invoice}");
    assert_eq!(l["period_start"], start, "{invoice}");
    assert_eq!(l["period_end"], end, "{invoice}");
    assert!(l["description"].is_string(), "{invoice}");
}

async fn entitlement_statuses(app: &TestApp, sub: &Value) -> Vec<String> {
    let buyer = text(&sub["buyer_ref"]);
    list(app, &format!("/api/v1/entitlements?buyer_ref={buyer}"))
        .await
        .iter()
        .map(|e| text(&e["status"]))
        .collect()
}

/// A monthly subscription on a clock advanced 12 months renews 12 times:
/// 13 payments, 13 invoices with consecutive numbers, and an endpoint
/// receives each renewal's events once, signed, each the resource.
async fn a_year_on_a_clock_renews_twelve_times(app: TestApp) {
    let receiver = TestReceiver::start(Behaviour::Status(204)).await;
    let (endpoint, secret) = app
        .subscribed_endpoint(&receiver.url(), "subscription.renewed", 1)
        .await;
    app.subscribe(&endpoint, "invoice.paid", 1).await;
    let config = monthly_config(&app, "999").await;
    let clock = clock(&app, "2026-01-15T10:00:00.000Z").await;
    let sub = subscribe(&app, &config, &clock, "pm_card_visa").await;
    assert_eq!(sub["current_period_start"], "2026-01-15T10:00:00.000Z");
    assert_eq!(sub["current_period_end"], "2026-02-15T10:00:00.000Z");

    let pipeline = EventPipeline::embedded(&app);
    advance(&app, &clock, "2027-01-15T10:00:00.000Z").await;

    let now = subscription(&app, &sub).await;
    assert_eq!(now["status"], "active");
    assert_eq!(now["current_period_start"], "2027-01-15T10:00:00.000Z");
    assert_eq!(now["current_period_end"], "2027-02-15T10:00:00.000Z");
    let (payments, invoices) = money_of(&app, &sub).await;
    assert_eq!(payments.len(), 13, "{payments:#?}");
    assert!(payments.iter().all(|p| p["status"] == "succeeded"));
    assert!(payments.iter().all(|p| p["amount"] == eur("999")));
    assert_eq!(invoices.len(), 13);
    let n = numbers(&invoices);
    // Each year numbers its invoices from 1; the renewal on 2027-01-15 is
    // the first of 2027.
    assert_eq!(n[..12], (1..=12).collect::<Vec<u32>>()[..], "{n:?}");
    assert!(text(&invoices[12]["number"]).starts_with("2027-"));
    for i in &invoices {
        assert_eq!(i["status"], "paid");
        assert!(i["payment_intent_ref"].is_string(), "{i}");
    }
    // The first invoice bills the first period, each renewal's the next.
    let month = |k: usize| format!("{:04}-{:02}-15T10:00:00.000Z", 2026 + k / 12, k % 12 + 1);
    for (k, i) in invoices.iter().enumerate() {
        assert_eq!(i["amount_total"], eur("999"));
        assert_period_line(i, &sub, &month(k), &month(k + 1));
    }
    // Records carry clock time: the twelfth renewal's payment was made on
    // 2027-01-15.
    assert_eq!(payments[12]["created_at"], "2027-01-15T10:00:00.000Z");
    let changes = list(
        &app,
        &format!(
            "/api/v1/subscription-changes?subscription_ref={}",
            text(&sub["subscription_ref"])
        ),
    )
    .await;
    let renewals = changes.iter().filter(|c| c["kind"] == "renewal").count();
    assert_eq!(renewals, 12);

    // Every renewal's events, once each, signed, each the resource.
    app.eventually(30, || async {
        (receiver.distinct_deliveries() >= 25).then_some(())
    })
    .await;
    pipeline.shutdown().await;
    let got = receiver.received();
    each_signed_once(&got, &secret, "renewals");
    let mut by_type: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for r in &got {
        let body = r.json();
        by_type
            .entry(text(&body["public_event_type"]))
            .or_default()
            .push(body);
    }
    assert_eq!(by_type["subscription.renewed"].len(), 12);
    // 13 invoices were paid: the first period's and 12 renewals'.
    assert_eq!(by_type["invoice.paid"].len(), 13);
    for body in &by_type["invoice.paid"] {
        let retrieved = get(&app, &at(INVOICES, &text(&body["data"]["invoice_ref"]), "")).await;
        assert_eq!(body["data"], retrieved);
    }
    let last = by_type["subscription.renewed"]
        .iter()
        .max_by_key(|b| text(&b["occurred_at"]))
        .unwrap();
    assert_eq!(last["occurred_at"], "2027-01-15T10:00:00.000Z");
    assert_eq!(last["data"], now);
}

/// A Jan 31 start renews on Feb 28, then on Mar 31, then Apr 30.
async fn a_month_end_start_keeps_its_day(app: TestApp) {
    let config = monthly_config(&app, "500").await;
    let clock = clock(&app, "2026-01-31T09:30:00.000Z").await;
    let sub = subscribe(&app, &config, &clock, "pm_card_mastercard").await;
    assert_eq!(sub["current_period_end"], "2026-02-28T09:30:00.000Z");
    advance(&app, &clock, "2026-03-31T09:30:00.000Z").await;
    let now = subscription(&app, &sub).await;
    assert_eq!(now["current_period_start"], "2026-03-31T09:30:00.000Z");
    assert_eq!(now["current_period_end"], "2026-04-30T09:30:00.000Z");
    let (payments, _) = money_of(&app, &sub).await;
    let made: Vec<String> = payments.iter().map(|p| text(&p["created_at"])).collect();
    assert_eq!(
        made,
        [
            "2026-01-31T09:30:00.000Z",
            "2026-02-28T09:30:00.000Z",
            "2026-03-31T09:30:00.000Z"
        ]
    );
}

/// `pm_card_renewal_fails` pays the first period, then its renewal is
/// declined: `past_due` with an open invoice, retried on days 1, 3 and 5,
/// then `canceled` for nonpayment with the invoice uncollectible and the
/// entitlement revoked.
async fn a_declined_renewal_is_dunned_then_canceled(app: TestApp) {
    let config = monthly_config(&app, "100").await;
    let clock = clock(&app, "2026-03-01T00:00:00.000Z").await;
    let sub = subscribe(&app, &config, &clock, "pm_card_renewal_fails").await;
    assert_eq!(entitlement_statuses(&app, &sub).await, ["active"]);

    advance(&app, &clock, "2026-04-01T00:00:00.000Z").await;
    let s = subscription(&app, &sub).await;
    assert_eq!(s["status"], "past_due", "{s}");
    let (payments, invoices) = money_of(&app, &sub).await;
    assert_eq!(payments.len(), 2);
    assert_eq!(payments[1]["status"], "failed");
    assert_eq!(payments[1]["failure_code"], "insufficient_funds");
    assert_eq!(invoices.len(), 2);
    let open = &invoices[1];
    assert_eq!(open["status"], "open");
    assert_eq!(open["payment_intent_ref"], Value::Null);
    assert_eq!(open["paid_at"], Value::Null);
    // A declined renewal's invoice bills the period all the same.
    assert_period_line(
        open,
        &sub,
        "2026-04-01T00:00:00.000Z",
        "2026-05-01T00:00:00.000Z",
    );
    assert_eq!(entitlement_statuses(&app, &sub).await, ["active"]);

    // Day 1: the first retry, declined.
    advance(&app, &clock, "2026-04-02T00:00:00.000Z").await;
    let (payments, _) = money_of(&app, &sub).await;
    assert_eq!(payments.len(), 3);
    assert_eq!(subscription(&app, &sub).await["status"], "past_due");

    // Days 3 and 5: the last two; then it is over.
    advance(&app, &clock, "2026-04-10T00:00:00.000Z").await;
    let (payments, invoices) = money_of(&app, &sub).await;
    let tried: Vec<String> = payments[1..]
        .iter()
        .map(|p| text(&p["created_at"]))
        .collect();
    assert_eq!(
        tried,
        [
            "2026-04-01T00:00:00.000Z",
            "2026-04-02T00:00:00.000Z",
            "2026-04-04T00:00:00.000Z",
            "2026-04-06T00:00:00.000Z"
        ]
    );
    assert!(payments[1..].iter().all(|p| p["status"] == "failed"));
    assert_eq!(invoices[1]["status"], "uncollectible");
    assert_eq!(invoices[1]["attempt_count"], 4);
    let s = subscription(&app, &sub).await;
    assert_eq!(s["status"], "canceled");
    assert_eq!(s["cancel_reason"], "nonpayment");
    assert_eq!(s["canceled_at"], "2026-04-06T00:00:00.000Z");
    assert_eq!(entitlement_statuses(&app, &sub).await, ["revoked"]);
    // Nothing is left to run: a later advance charges nothing more.
    advance(&app, &clock, "2026-06-01T00:00:00.000Z").await;
    assert_eq!(money_of(&app, &sub).await.0.len(), 5);
}

async fn cancel(app: &TestApp, sub: &Value, body: Value) -> billing_tests::Resp {
    let current = subscription(app, sub).await;
    app.post(
        &at(SUBSCRIPTIONS, &text(&sub["subscription_ref"]), "/cancel"),
        body,
    )
    .if_match(&text(&current["etag"]))
    .send()
    .await
}

/// Cancel now revokes at once; cancel at the period's end cancels instead
/// of renewing. Both emit `subscription.canceled`; a canceled subscription
/// cannot be canceled again.
async fn cancel_now_and_at_the_period_end(app: TestApp) {
    let receiver = TestReceiver::start(Behaviour::Status(204)).await;
    let (_, secret) = app
        .subscribed_endpoint(&receiver.url(), "subscription.canceled", 1)
        .await;
    let config = monthly_config(&app, "300").await;
    let clock = clock(&app, "2026-05-10T12:00:00.000Z").await;
    let now_sub = subscribe(&app, &config, &clock, "pm_card_visa").await;
    let end_sub = subscribe(&app, &config, &clock, "pm_card_visa").await;

    let r = cancel(
        &app,
        &now_sub,
        json!({"at_period_end": false, "reason": "moving"}),
    )
    .await;
    r.expect(200);
    assert_eq!(r.data()["status"], "canceled");
    assert_eq!(r.data()["cancel_reason"], "requested");
    assert_eq!(r.data()["canceled_at"], "2026-05-10T12:00:00.000Z");
    assert_eq!(entitlement_statuses(&app, &now_sub).await, ["revoked"]);
    cancel(&app, &now_sub, json!({"at_period_end": true}))
        .await
        .expect_error(422, "semantic_error");

    let r = cancel(&app, &end_sub, json!({"at_period_end": true})).await;
    r.expect(200);
    assert_eq!(r.data()["status"], "active");
    assert_eq!(r.data()["cancel_at_period_end"], true);
    assert_eq!(entitlement_statuses(&app, &end_sub).await, ["active"]);

    let pipeline = EventPipeline::embedded(&app);
    advance(&app, &clock, "2026-07-01T00:00:00.000Z").await;
    let s = subscription(&app, &end_sub).await;
    assert_eq!(s["status"], "canceled");
    assert_eq!(s["cancel_reason"], "requested");
    assert_eq!(s["canceled_at"], "2026-06-10T12:00:00.000Z");
    assert_eq!(entitlement_statuses(&app, &end_sub).await, ["revoked"]);
    // Neither renewed: one payment each.
    assert_eq!(money_of(&app, &end_sub).await.0.len(), 1);
    assert_eq!(money_of(&app, &now_sub).await.0.len(), 1);

    app.eventually(20, || async {
        (receiver.distinct_deliveries() >= 2).then_some(())
    })
    .await;
    pipeline.shutdown().await;
    let got = receiver.received();
    each_signed_once(&got, &secret, "cancels");
    let mut canceled: Vec<Value> = got.iter().map(|r| r.json()["data"].clone()).collect();
    canceled.sort_by_key(|d| text(&d["canceled_at"]));
    assert_eq!(canceled[0], subscription(&app, &now_sub).await);
    assert_eq!(canceled[1], s);
}

/// Bad requests are refused by name, without a change.
async fn bad_requests_are_refused(app: TestApp) {
    let config = monthly_config(&app, "300").await;
    let clock = clock(&app, "2026-05-10T12:00:00.000Z").await;
    let sub = subscribe(&app, &config, &clock, "pm_card_visa").await;
    let path = at(SUBSCRIPTIONS, &text(&sub["subscription_ref"]), "/cancel");
    // No If-Match; a stale one; a body without at_period_end.
    app.post(&path, json!({"at_period_end": false}))
        .send()
        .await
        .expect_error(428, "precondition_required");
    app.post(&path, json!({"at_period_end": false}))
        .if_match("\"stale\"")
        .send()
        .await
        .expect_error(412, "precondition_failed");
    let r = cancel(&app, &sub, json!({})).await;
    invalid(&r, "at_period_end");
    assert_eq!(subscription(&app, &sub).await["status"], "active");

    for (body, field) in [
        (json!({"frozen_time": "yesterday"}), "frozen_time"),
        (
            json!({"frozen_time": "2026-05-10T12:00:00.000Z"}),
            "frozen_time",
        ),
        (
            json!({"frozen_time": "2026-05-01T00:00:00.000Z"}),
            "frozen_time",
        ),
        (
            json!({"frozen_time": "2028-05-10T12:00:00.001Z"}),
            "frozen_time",
        ),
        (json!({}), "frozen_time"),
    ] {
        let r = app.post(&at(CLOCKS, &clock, "/advance"), body).send().await;
        invalid(&r, field);
    }
    invalid(
        &app.post(CLOCKS, json!({"frozen_time": "soon"}))
            .send()
            .await,
        "frozen_time",
    );
    app.get(&at(CLOCKS, "clk_N5xP3cV8bT1m", ""))
        .send()
        .await
        .expect_error(404, "not_found");
    let r = app
        .post(
            SESSIONS,
            json!({"config_ref": config, "buyer": {"email": "a@example.com"},
                "test_clock_ref": "clk_N5xP3cV8bT1m"}),
        )
        .send()
        .await;
    r.expect_error(404, "not_found");
    let listed = items(&app.get(CLOCKS).send().await);
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["test_clock_ref"], clock);
}

/// An advance asked while one is running answers 409; the running one
/// finishes at its own target.
async fn an_advance_while_one_runs_is_a_conflict(app: TestApp) {
    let clock = clock(&app, "2026-01-01T00:00:00.000Z").await;
    ask_advance(&app, &clock, "2026-02-01T00:00:00.000Z").await;
    app.post(
        &at(CLOCKS, &clock, "/advance"),
        json!({"frozen_time": "2026-03-01T00:00:00.000Z"}),
    )
    .send()
    .await
    .expect_error(409, "version_conflict");
    run_due(&app.store, &Rules::default(), "test", Timestamp::now()).await;
    let c = get(&app, &at(CLOCKS, &clock, "")).await;
    assert_eq!(c["status"], "ready");
    assert_eq!(c["frozen_time"], "2026-02-01T00:00:00.000Z");
}

/// Clocks exist in sandboxes only: a live environment answers `not_found`
/// to every clock operation and to a session naming one.
async fn live_environments_have_no_clocks(app: TestApp) {
    let sandbox_clock = clock(&app, "2026-01-01T00:00:00.000Z").await;
    let live = &app.live.secret;
    app.post(CLOCKS, json!({"frozen_time": "2026-01-01T00:00:00.000Z"}))
        .auth(live)
        .send()
        .await
        .expect_error(404, "not_found");
    app.get(CLOCKS)
        .auth(live)
        .send()
        .await
        .expect_error(404, "not_found");
    app.get(&at(CLOCKS, &sandbox_clock, ""))
        .auth(live)
        .send()
        .await
        .expect_error(404, "not_found");
    app.post(
        &at(CLOCKS, &sandbox_clock, "/advance"),
        json!({"frozen_time": "2026-02-01T00:00:00.000Z"}),
    )
    .auth(live)
    .send()
    .await
    .expect_error(404, "not_found");
}

/// Two runners and one advance of many subscriptions: each renewal runs
/// once, and no invoice number is skipped or shared.
async fn two_runners_renew_each_subscription_once(app: TestApp) {
    let config = monthly_config(&app, "100").await;
    let clock = clock(&app, "2026-01-10T08:00:00.000Z").await;
    let mut subs = Vec::new();
    for _ in 0..8 {
        subs.push(subscribe(&app, &config, &clock, "pm_card_visa").await);
    }
    ask_advance(&app, &clock, "2026-04-10T08:00:00.000Z").await;
    let rules = Rules::default();
    let now = Timestamp::now();
    let (a, b) = tokio::join!(
        run_due(&app.store, &rules, "runner-a", now),
        run_due(&app.store, &rules, "runner-b", now),
    );
    // The advance is one job: one runner takes it, the other finds it
    // leased (or done).
    assert!(a + b >= 1);
    // If a runner stopped before the clock was ready, the lease keeps the
    // other away until it ends; run again until ready.
    app.eventually(30, || async {
        run_due(&app.store, &rules, "runner-c", Timestamp::now()).await;
        (get(&app, &at(CLOCKS, &clock, "")).await["status"] == "ready").then_some(())
    })
    .await;
    let mut all_numbers = Vec::new();
    for sub in &subs {
        let (payments, invoices) = money_of(&app, sub).await;
        assert_eq!(payments.len(), 4, "{payments:#?}");
        assert_eq!(invoices.len(), 4);
        all_numbers.extend(numbers(&invoices));
    }
    all_numbers.sort_unstable();
    assert_eq!(all_numbers, (1..=32).collect::<Vec<u32>>());
}

/// The service's own runner (not the seam) takes an advance in the
/// background and the clock becomes ready.
async fn the_background_runner_advances_a_clock(app: TestApp) {
    billing_tests::kit::timed_work(&app);
    let config = monthly_config(&app, "200").await;
    let clock = clock(&app, "2026-02-01T00:00:00.000Z").await;
    let sub = subscribe(&app, &config, &clock, "pm_card_visa").await;
    ask_advance(&app, &clock, "2026-03-01T00:00:00.000Z").await;
    app.eventually(20, || async {
        (get(&app, &at(CLOCKS, &clock, "")).await["status"] == "ready").then_some(())
    })
    .await;
    assert_eq!(money_of(&app, &sub).await.0.len(), 2);
}

/// Without a clock, a subscription renews by the wall clock: its job is
/// due at the period's end and not a millisecond before, and the renewal
/// is dated then (driven at the times the test names).
async fn without_a_clock_the_wall_clock_renews(app: TestApp) {
    let config = monthly_config(&app, "700").await;
    let session = billing_tests::kit::new_session(&app, &config).await;
    let r = billing_tests::kit::pay(&app, &session, "pm_card_visa").await;
    let sub = r.data()["subscription"].clone();
    assert_eq!(sub["test_clock_ref"], Value::Null);
    let end = Timestamp::parse(&text(&sub["current_period_end"])).unwrap();
    let rules = Rules::default();
    assert_eq!(
        run_due(&app.store, &rules, "wall", end.plus_millis(-1)).await,
        0
    );
    assert_eq!(money_of(&app, &sub).await.0.len(), 1);
    assert_eq!(run_due(&app.store, &rules, "wall", end).await, 1);
    let (payments, invoices) = money_of(&app, &sub).await;
    assert_eq!(payments.len(), 2);
    assert_eq!(payments[1]["created_at"], sub["current_period_end"]);
    assert_eq!(invoices[1]["status"], "paid");
    let now = subscription(&app, &sub).await;
    assert_eq!(now["current_period_start"], sub["current_period_end"]);
    // Nothing else is due until the next period's end.
    assert_eq!(
        run_due(&app.store, &rules, "wall", end.plus_seconds(86_400)).await,
        0
    );
}

/// Jobs due together run as one unit of work; one that fails (here a
/// renewal of a subscription that does not exist) is run alone and left
/// for after its lease, and holds back none of the others due with it.
async fn a_failing_job_holds_back_none_due_with_it(app: TestApp) {
    let config = monthly_config(&app, "300").await;
    let mut subs = Vec::new();
    for _ in 0..3 {
        let session = billing_tests::kit::new_session(&app, &config).await;
        let r = billing_tests::kit::pay(&app, &session, "pm_card_visa").await;
        subs.push(r.data()["subscription"].clone());
    }
    let end = subs
        .iter()
        .map(|s| Timestamp::parse(&text(&s["current_period_end"])).unwrap())
        .max()
        .unwrap();
    let mut tx = app.store.begin().await.unwrap();
    store::billing::jobs::schedule(
        &mut tx,
        commerce::renewals::RENEW,
        &domain::Ref::from_trusted("sub_nosuchsubscription".into()),
        &domain::Ref::from_trusted(app.sandbox.environment_ref.clone()),
        end,
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let rules = Rules::default();
    assert_eq!(run_due(&app.store, &rules, "wall", end).await, 3);
    for sub in &subs {
        assert_eq!(money_of(&app, sub).await.0.len(), 2);
    }
    // The failed job stays leased until its lease ends, then fails again.
    assert_eq!(run_due(&app.store, &rules, "wall", end).await, 0);
    assert_eq!(
        run_due(&app.store, &rules, "wall", end.plus_seconds(6)).await,
        0
    );
}

/// A clock never stays `advancing`: jobs of the clock that fail every
/// time (here a renewal of a subscription that does not exist, and one of
/// a subscription whose stored method was lost) fail for good. The
/// advance drops each, counts it in `failed_jobs`, runs the rest of the
/// clock's work, and the clock ends `ready` at its new time; the broken
/// subscription is left as it was, and a later advance runs nothing of
/// the dropped jobs again.
async fn a_job_that_fails_for_good_leaves_the_clock_ready(app: TestApp) {
    let config = monthly_config(&app, "400").await;
    let clock = clock(&app, "2026-01-10T08:00:00.000Z").await;
    let healthy = subscribe(&app, &config, &clock, "pm_card_visa").await;
    let broken = subscribe(&app, &config, &clock, "pm_card_visa").await;
    let pool = app.raw_pool().await;
    sqlx::query(&format!(
        "UPDATE subscriptions SET stored_payment_method_ref = NULL WHERE subscription_ref = '{}'",
        text(&broken["subscription_ref"])
    ))
    .execute(&pool)
    .await
    .unwrap();
    let clock_ref = domain::Ref::from_trusted(clock.clone());
    let mut tx = app.store.begin().await.unwrap();
    store::billing::jobs::schedule_on(
        &mut tx,
        commerce::renewals::RENEW,
        &domain::Ref::from_trusted("sub_nosuchsubscription".into()),
        &domain::Ref::from_trusted(app.sandbox.environment_ref.clone()),
        Timestamp::parse("2026-01-20T00:00:00.000Z").unwrap(),
        Some(&clock_ref),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();

    let c = advance(&app, &clock, "2026-03-10T08:00:00.000Z").await;
    assert_eq!(c["failed_jobs"], 2, "{c}");
    assert_eq!(c["advancing_to"], Value::Null);
    // The rest of the clock's work ran: two renewals.
    let (payments, _) = money_of(&app, &healthy).await;
    assert_eq!(payments.len(), 3, "{payments:#?}");
    assert_eq!(
        subscription(&app, &healthy).await["current_period_end"],
        "2026-04-10T08:00:00.000Z"
    );
    // The broken subscription is as it was: no renewal, its period unmoved.
    let left = subscription(&app, &broken).await;
    assert_eq!(left["status"], "active");
    assert_eq!(left["current_period_end"], broken["current_period_end"]);
    assert_eq!(money_of(&app, &broken).await.0.len(), 1);
    // The failed jobs were dropped with their count.
    let n: i64 = sqlx::query_scalar(&format!(
        "SELECT COUNT(*) FROM jobs WHERE test_clock_ref = '{clock}' AND due_at <= {}",
        Timestamp::parse("2026-03-10T08:00:00.000Z")
            .unwrap()
            .millis()
    ))
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(n, 0, "no job of the clock is left due");
    pool.close().await;

    // A later advance fails nothing more and goes on renewing.
    let c = advance(&app, &clock, "2026-04-10T08:00:00.000Z").await;
    assert_eq!(c["failed_jobs"], 2, "{c}");
    assert_eq!(money_of(&app, &healthy).await.0.len(), 4);
    assert_eq!(money_of(&app, &broken).await.0.len(), 1);
    let listed = list(&app, CLOCKS).await;
    let listed = listed
        .iter()
        .find(|l| l["test_clock_ref"] == clock.as_str())
        .expect("the clock is listed");
    assert_eq!(listed["failed_jobs"], 2);
}

/// A renewal's payment refunded with `access_effect: revoke` revokes the
/// subscription's entitlements: the renewal paid for them through the
/// order that started the subscription.
async fn a_refunded_renewal_revokes_its_access(app: TestApp) {
    use commerce::jobs::SETTLE_AFTER_MS;
    let config = monthly_config(&app, "800").await;
    let session = billing_tests::kit::new_session(&app, &config).await;
    let r = billing_tests::kit::pay(&app, &session, "pm_card_visa").await;
    let sub = r.data()["subscription"].clone();
    let end = Timestamp::parse(&text(&sub["current_period_end"])).unwrap();
    let rules = Rules::default();
    assert_eq!(run_due(&app.store, &rules, "wall", end).await, 1);
    let (payments, _) = money_of(&app, &sub).await;
    assert_eq!(payments.len(), 2);
    assert_eq!(entitlement_statuses(&app, &sub).await, ["active"]);
    let refund = app
        .post(
            "/api/v1/refunds",
            json!({"payment_intent_ref": payments[1]["payment_intent_ref"],
                "reason": "requested_by_customer", "access_effect": "revoke"}),
        )
        .send()
        .await;
    refund.expect(201);
    let settle = Timestamp::now().plus_millis(SETTLE_AFTER_MS + 1_000);
    assert_eq!(run_due(&app.store, &rules, "wall", settle).await, 1);
    let refund_ref = text(&refund.data()["refund_ref"]);
    let settled = get(&app, &format!("/api/v1/refunds/{refund_ref}")).await;
    assert_eq!(settled["status"], "succeeded", "{settled}");
    assert_eq!(entitlement_statuses(&app, &sub).await, ["revoked"]);
}

backend_tests!(
    without_a_clock_the_wall_clock_renews,
    a_refunded_renewal_revokes_its_access,
    a_failing_job_holds_back_none_due_with_it,
    a_job_that_fails_for_good_leaves_the_clock_ready,
    a_year_on_a_clock_renews_twelve_times,
    a_month_end_start_keeps_its_day,
    a_declined_renewal_is_dunned_then_canceled,
    cancel_now_and_at_the_period_end,
    bad_requests_are_refused,
    an_advance_while_one_runs_is_a_conflict,
    live_environments_have_no_clocks,
    two_runners_renew_each_subscription_once,
    the_background_runner_advances_a_clock,
);
