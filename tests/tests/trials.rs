//! Trials (contract 14.3) on every backend, on test clocks: a trial
//! charges nothing (no payment, invoice or entitlement) and is `trialing`
//! with its `trial_end`; `subscription.trial_will_end` fires 3 days before
//! (at once when the trial is shorter); at `trial_end` the renewal path
//! charges the first period (`active`, or `past_due` and dunning on a
//! decline); one trial per buyer and product; canceling a trial charges
//! nothing; `trial_period_days` is checked.
//!
//! Timed work is driven through its seam (`commerce::jobs::run_due`);
//! events are read from the store (the outbox, or the events table once
//! relayed).

use billing_tests::clocks;
use billing_tests::kit::api::{CONFIGS, INVOICES, PAYMENTS, SESSIONS, SUBSCRIPTIONS};
use billing_tests::kit::{at, eur, invalid, list, published_config, sellable, text};
use billing_tests::{backend_tests, TestApp};
use commerce::jobs::{run_due, Rules};
use domain::Timestamp;
use serde_json::{json, Value};

const START: &str = "2026-01-10T00:00:00.000Z";
const TRIAL_END: &str = "2026-01-24T00:00:00.000Z";
const WARNING: &str = "2026-01-21T00:00:00.000Z";

/// A published config selling 9.99 EUR a month with a trial of `days`.
async fn trial_config(app: &TestApp, days: u32) -> String {
    let s = sellable(app, "Magazine", eur("999"), Some("month")).await;
    published_config(
        app,
        json!({"name": "Try it", "success_url": "https://example.com/ok",
            "line_items": [{"offer_ref": s.offer, "quantity": 1}],
            "trial_period_days": days}),
    )
    .await
}

/// Pays a new session of `config` on `clock` for `email` with `pm`; the
/// pay answer.
async fn pay(app: &TestApp, config: &str, clock: &str, email: &str, pm: &str) -> Value {
    let (_, paid) = clocks::pay_on(app, config, clock, email, pm).await;
    assert_eq!(paid["result"], "subscription_started", "{paid}");
    assert_eq!(paid["checkout_session"]["status"], "complete");
    paid
}

fn email() -> String {
    format!("{}@example.com", billing_tests::unique_key())
}

/// Pays a trial; asserts what it made: `trialing`, the trial as its
/// period, no payment.
async fn start_trial(app: &TestApp, config: &str, clock: &str, email: &str, pm: &str) -> Value {
    let paid = pay(app, config, clock, email, pm).await;
    assert_eq!(paid["payment"], Value::Null, "{paid}");
    let sub = paid["subscription"].clone();
    assert_eq!(sub["status"], "trialing", "{sub}");
    assert_eq!(sub["trial_end"], TRIAL_END);
    assert_eq!(sub["current_period_start"], START);
    assert_eq!(sub["current_period_end"], TRIAL_END);
    assert!(sub["stored_payment_method_ref"].is_string(), "{sub}");
    sub
}

/// Advances `clock` to `time` and runs its work; `ready` at `time`.
async fn advance(app: &TestApp, clock: &str, time: &str) {
    let c = clocks::advance(app, clock, time).await;
    assert_eq!(c["frozen_time"], time);
}

async fn subscription(app: &TestApp, sub: &Value) -> Value {
    let r = app
        .get(&at(SUBSCRIPTIONS, &text(&sub["subscription_ref"]), ""))
        .send()
        .await;
    r.expect(200);
    r.data().clone()
}

/// The buyer's payments, invoices and entitlement statuses.
async fn records_of(app: &TestApp, sub: &Value) -> (Vec<Value>, Vec<Value>, Vec<String>) {
    let buyer = text(&sub["buyer_ref"]);
    let payments = list(app, &format!("{PAYMENTS}?buyer_ref={buyer}")).await;
    let invoices = list(app, &format!("{INVOICES}?buyer_ref={buyer}")).await;
    let entitlements = list(app, &format!("/api/v1/entitlements?buyer_ref={buyer}"))
        .await
        .iter()
        .map(|e| text(&e["status"]))
        .collect();
    (payments, invoices, entitlements)
}

/// The events whose data mentions `reference`, `(type, occurred_at,
/// ordering_key)`, oldest first.
async fn events_of(app: &TestApp, reference: &str) -> Vec<(String, String, Option<String>)> {
    let pool = app.raw_pool().await;
    let like = format!("%{reference}%");
    let rows: Vec<(String, String, i64, Option<String>)> = sqlx::query_as(
        "SELECT event_ref, public_event_type, occurred_at, ordering_key FROM outbox \
         WHERE data LIKE $1 UNION SELECT event_ref, public_event_type, occurred_at, \
         ordering_key FROM events WHERE data LIKE $1",
    )
    .bind(like)
    .fetch_all(&pool)
    .await
    .unwrap();
    let mut out: Vec<_> = rows
        .into_iter()
        .map(|(_, t, at, key)| (at, t, key))
        .collect();
    out.sort();
    out.into_iter()
        .map(|(at, t, key)| (t, Timestamp::from_millis(at).to_rfc3339(), key))
        .collect()
}

fn of_type(events: &[(String, String, Option<String>)], t: &str) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.0 == t)
        .map(|e| e.1.clone())
        .collect()
}

/// A 14-day trial: nothing charged; the warning 3 days before its end, at
/// clock time; at its end the first period is charged and it is active.
async fn a_trial_charges_nothing_then_converts(app: TestApp) {
    let config = trial_config(&app, 14).await;
    let r = app.get(&at(CONFIGS, &config, "")).send().await;
    r.expect(200);
    assert_eq!(r.data()["trial_period_days"], 14);
    let clock = clocks::clock(&app, START, Some("trial")).await;
    let sub = start_trial(&app, &config, &clock, &email(), "pm_card_visa").await;
    let (payments, invoices, entitlements) = records_of(&app, &sub).await;
    assert!(payments.is_empty(), "{payments:?}");
    assert!(invoices.is_empty(), "{invoices:?}");
    assert!(entitlements.is_empty(), "{entitlements:?}");
    let events = events_of(&app, &text(&sub["subscription_ref"])).await;
    assert_eq!(of_type(&events, "subscription.started"), [START]);
    assert!(of_type(&events, "subscription.trial_will_end").is_empty());

    advance(&app, &clock, "2026-01-20T23:59:59.000Z").await;
    let events = events_of(&app, &text(&sub["subscription_ref"])).await;
    assert!(of_type(&events, "subscription.trial_will_end").is_empty());
    advance(&app, &clock, WARNING).await;
    let events = events_of(&app, &text(&sub["subscription_ref"])).await;
    assert_eq!(of_type(&events, "subscription.trial_will_end"), [WARNING]);
    let key = text(&sub["subscription_ref"]);
    assert!(
        events.iter().all(|e| e.2.as_deref() == Some(key.as_str())),
        "{events:?}"
    );
    assert_eq!(subscription(&app, &sub).await["status"], "trialing");
    assert!(records_of(&app, &sub).await.0.is_empty());

    advance(&app, &clock, "2026-02-01T00:00:00.000Z").await;
    let now = subscription(&app, &sub).await;
    assert_eq!(now["status"], "active", "{now}");
    assert_eq!(now["current_period_start"], TRIAL_END);
    assert_eq!(now["current_period_end"], "2026-02-24T00:00:00.000Z");
    assert_eq!(now["trial_end"], TRIAL_END);
    let (payments, invoices, entitlements) = records_of(&app, &sub).await;
    assert_eq!(payments.len(), 1, "{payments:?}");
    assert_eq!(payments[0]["status"], "succeeded");
    assert_eq!(payments[0]["amount"], eur("999"));
    assert_eq!(payments[0]["created_at"], TRIAL_END);
    assert_eq!(invoices.len(), 1, "{invoices:?}");
    let invoice = &invoices[0];
    assert_eq!(invoice["status"], "paid");
    assert_eq!(invoice["amount_total"], eur("999"));
    let lines = invoice["lines"].as_array().unwrap();
    assert_eq!(lines.len(), 1, "{invoice}");
    assert_eq!(lines[0]["kind"], "period");
    assert_eq!(lines[0]["period_start"], TRIAL_END);
    assert_eq!(lines[0]["period_end"], "2026-02-24T00:00:00.000Z");
    assert_eq!(entitlements, ["active"]);
    let events = events_of(&app, &text(&sub["subscription_ref"])).await;
    assert_eq!(of_type(&events, "subscription.trial_will_end"), [WARNING]);
    assert_eq!(of_type(&events, "invoice.paid"), [TRIAL_END]);
    let pays = events_of(&app, &text(&payments[0]["payment_intent_ref"])).await;
    assert_eq!(of_type(&pays, "payment.succeeded"), [TRIAL_END]);
}

/// A trial shorter than 3 days warns at once; a conversion that is
/// declined starts dunning.
async fn a_declined_conversion_is_past_due(app: TestApp) {
    let config = trial_config(&app, 2).await;
    let clock = clocks::clock(&app, START, Some("trial")).await;
    let paid = pay(&app, &config, &clock, &email(), "pm_card_renewal_fails").await;
    let sub = paid["subscription"].clone();
    assert_eq!(sub["status"], "trialing");
    assert_eq!(sub["trial_end"], "2026-01-12T00:00:00.000Z");
    let events = events_of(&app, &text(&sub["subscription_ref"])).await;
    assert_eq!(of_type(&events, "subscription.trial_will_end"), [START]);

    advance(&app, &clock, "2026-01-12T00:00:00.000Z").await;
    let now = subscription(&app, &sub).await;
    assert_eq!(now["status"], "past_due", "{now}");
    let (payments, invoices, _) = records_of(&app, &sub).await;
    assert_eq!(payments.len(), 1);
    assert_eq!(payments[0]["status"], "failed");
    assert_eq!(invoices.len(), 1);
    assert_eq!(invoices[0]["status"], "open");
    let events = events_of(&app, &text(&sub["subscription_ref"])).await;
    assert_eq!(
        of_type(&events, "subscription.past_due"),
        ["2026-01-12T00:00:00.000Z"]
    );
    // The warning fired once.
    assert_eq!(of_type(&events, "subscription.trial_will_end").len(), 1);
}

/// A buyer who had a subscription to the product gets no second trial:
/// charged at once, `active`, `trial_end` null.
async fn one_trial_per_buyer_and_product(app: TestApp) {
    let config = trial_config(&app, 14).await;
    let clock = clocks::clock(&app, START, Some("trial")).await;
    let buyer = email();
    let first = start_trial(&app, &config, &clock, &buyer, "pm_card_visa").await;
    let r = app
        .post(
            &at(SUBSCRIPTIONS, &text(&first["subscription_ref"]), "/cancel"),
            json!({"at_period_end": false}),
        )
        .if_match(&text(&subscription(&app, &first).await["etag"]))
        .send()
        .await;
    r.expect(200);
    let paid = pay(&app, &config, &clock, &buyer, "pm_card_visa").await;
    assert_eq!(paid["payment"]["status"], "succeeded", "{paid}");
    let second = &paid["subscription"];
    assert_eq!(second["status"], "active");
    assert_eq!(second["trial_end"], Value::Null);
    assert_eq!(second["buyer_ref"], first["buyer_ref"]);
    let (payments, invoices, _) = records_of(&app, second).await;
    assert_eq!(payments.len(), 1);
    assert_eq!(invoices.len(), 1);
}

/// Canceling a trial now charges nothing; at period end it ends at
/// `trial_end`, uncharged.
async fn canceling_a_trial_charges_nothing(app: TestApp) {
    let config = trial_config(&app, 14).await;
    let clock = clocks::clock(&app, START, Some("trial")).await;
    let now_sub = start_trial(&app, &config, &clock, &email(), "pm_card_visa").await;
    let later = start_trial(&app, &config, &clock, &email(), "pm_card_visa").await;
    for (sub, at_end) in [(&now_sub, false), (&later, true)] {
        let r = app
            .post(
                &at(SUBSCRIPTIONS, &text(&sub["subscription_ref"]), "/cancel"),
                json!({"at_period_end": at_end}),
            )
            .if_match(&text(&subscription(&app, sub).await["etag"]))
            .send()
            .await;
        r.expect(200);
    }
    assert_eq!(subscription(&app, &now_sub).await["status"], "canceled");
    let l = subscription(&app, &later).await;
    assert_eq!(l["status"], "trialing");
    assert_eq!(l["cancel_at_period_end"], true);

    advance(&app, &clock, "2026-03-01T00:00:00.000Z").await;
    let l = subscription(&app, &later).await;
    assert_eq!(l["status"], "canceled", "{l}");
    assert_eq!(l["canceled_at"], TRIAL_END);
    for sub in [&now_sub, &later] {
        let (payments, invoices, _) = records_of(&app, sub).await;
        assert!(payments.is_empty(), "{payments:?}");
        assert!(invoices.is_empty(), "{invoices:?}");
    }
}

/// By the wall clock, two runners at the warning's time: it fires once;
/// before it, never.
async fn the_warning_fires_once_with_two_runners(app: TestApp) {
    let config = trial_config(&app, 14).await;
    let r = app
        .post(
            SESSIONS,
            json!({"config_ref": config, "buyer": {"email": email()}}),
        )
        .send()
        .await;
    r.expect(201);
    let session = text(&r.data()["checkout_session_ref"]);
    let r = app
        .post(
            &at(SESSIONS, &session, "/pay"),
            json!({"payment_method": "pm_card_visa"}),
        )
        .send()
        .await;
    r.expect(200);
    let sub = r.data()["subscription"].clone();
    assert_eq!(sub["status"], "trialing", "{sub}");
    let end = Timestamp::parse(&text(&sub["trial_end"])).unwrap();
    let start = Timestamp::parse(&text(&sub["current_period_start"])).unwrap();
    assert_eq!(end.millis() - start.millis(), 14 * 86_400_000);
    let warn = end.plus_seconds(-3 * 86_400);
    let rules = Rules::default();
    let reference = text(&sub["subscription_ref"]);
    run_due(&app.store, &rules, "early", warn.plus_millis(-1)).await;
    let events = events_of(&app, &reference).await;
    assert!(of_type(&events, "subscription.trial_will_end").is_empty());
    let (a, b) = tokio::join!(
        run_due(&app.store, &rules, "a", warn),
        run_due(&app.store, &rules, "b", warn)
    );
    assert_eq!(a + b, 1, "{a} + {b}");
    let events = events_of(&app, &reference).await;
    assert_eq!(
        of_type(&events, "subscription.trial_will_end"),
        [warn.to_rfc3339()]
    );
    assert_eq!(subscription(&app, &sub).await["status"], "trialing");
}

/// `trial_period_days`: 0 to 730 (default 0), shown on the config and
/// carried to its next version; only in subscription mode.
async fn trial_period_days_is_checked(app: TestApp) {
    let monthly = sellable(&app, "Monthly", eur("500"), Some("month")).await;
    let once = sellable(&app, "Once", eur("500"), None).await;
    let body = |offer: &str, days: Value| {
        let mut b = json!({"name": "C", "success_url": "https://example.com/ok",
            "line_items": [{"offer_ref": offer, "quantity": 1}]});
        if !days.is_null() {
            b["trial_period_days"] = days;
        }
        b
    };
    for bad in [json!(731), json!(-1), json!("7"), json!(1.5)] {
        let r = app
            .post(CONFIGS, body(&monthly.offer, bad.clone()))
            .send()
            .await;
        assert_eq!(r.status, 400, "{bad}: {}", r.text);
        if bad.is_i64() {
            invalid(&r, "trial_period_days");
        }
    }
    let r = app.post(CONFIGS, body(&once.offer, json!(7))).send().await;
    r.expect_error(422, "semantic_error");

    let r = app
        .post(CONFIGS, body(&monthly.offer, Value::Null))
        .send()
        .await;
    r.expect(201);
    assert_eq!(r.data()["trial_period_days"], 0);
    let r = app
        .post(CONFIGS, body(&monthly.offer, json!(730)))
        .send()
        .await;
    r.expect(201);
    assert_eq!(r.data()["trial_period_days"], 730);
    let config = text(&r.data()["config_ref"]);
    let r = app
        .post(&at(CONFIGS, &config, "/versions"), json!({"name": "D"}))
        .send()
        .await;
    r.expect(201);
    assert_eq!(r.data()["trial_period_days"], 730);
    let r = app
        .post(
            &at(CONFIGS, &config, "/versions"),
            json!({"trial_period_days": 0}),
        )
        .send()
        .await;
    r.expect(201);
    assert_eq!(r.data()["trial_period_days"], 0);
}

backend_tests!(
    a_trial_charges_nothing_then_converts,
    a_declined_conversion_is_past_due,
    one_trial_per_buyer_and_product,
    canceling_a_trial_charges_nothing,
    the_warning_fires_once_with_two_runners,
    trial_period_days_is_checked,
);
