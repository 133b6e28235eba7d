//! A subscription's price change (contract 14.2) on every backend, on a
//! test clock so the proration is exact: a `charge_now` upgrade charged at
//! once, a downgrade into the buyer's credit balance that the next renewal
//! uses (`credit_applied`), `next_invoice` lines on the next renewal,
//! `none`, a preview equal to the change, every refusal, a declined charge
//! that changes nothing, the headers it needs, and `subscription.changed`.
//!
//! Every case starts on 2026-01-01 with a monthly period to 2026-02-01
//! (P = 31 days) and changes on 2026-01-11 (r = 21 days left): from 1000 to
//! 2000, credit = round_half_even(1000 × 21/31) = 677 and debit =
//! round_half_even(2000 × 21/31) = 1355.

use billing_tests::clocks;
use billing_tests::kit::api::{BUYERS, CHANGES, INVOICES, PAYMENTS, PRICES, SUBSCRIPTIONS};
use billing_tests::kit::{at, create_as, eur, list, money, published_config, sellable, text};
use billing_tests::receiver::{Behaviour, TestReceiver};
use billing_tests::verifier::each_signed_once;
use billing_tests::{backend_tests, EventPipeline, TestApp};
use serde_json::{json, Value};

const START: &str = "2026-01-01T00:00:00.000Z";
const CHANGE_AT: &str = "2026-01-11T00:00:00.000Z";
const PERIOD_END: &str = "2026-02-01T00:00:00.000Z";
const NEXT_END: &str = "2026-03-01T00:00:00.000Z";

async fn get(app: &TestApp, path: &str) -> Value {
    let r = app.get(path).send().await;
    r.expect(200);
    r.data().clone()
}

/// A published config selling `price` (a `sellable`'s offer), quantity 1.
async fn config_of(app: &TestApp, offer: &str) -> String {
    published_config(
        app,
        json!({"name": "Subscribe", "success_url": "https://example.com/ok",
            "line_items": [{"offer_ref": offer, "quantity": 1}]}),
    )
    .await
}

/// A subscription of `amount` EUR a month on a new clock at `START`, paid
/// with `pm`, its clock moved to `CHANGE_AT`; (subscription, clock).
async fn subscribed(app: &TestApp, amount: &str, pm: &str) -> (Value, String) {
    let s = sellable(app, "Basic", eur(amount), Some("month")).await;
    let config = config_of(app, &s.offer).await;
    let clock = clocks::clock(app, START, None).await;
    let email = format!("{}@example.com", billing_tests::unique_key());
    let (_, paid) = clocks::pay_on(app, &config, &clock, &email, pm).await;
    let sub = paid["subscription"].clone();
    assert_eq!(sub["current_period_end"], PERIOD_END, "{sub}");
    clocks::advance(app, &clock, CHANGE_AT).await;
    (sub, clock)
}

/// A published monthly price of `amount` of a new product.
async fn new_price(app: &TestApp, amount: &str) -> String {
    sellable(app, "Premium", eur(amount), Some("month"))
        .await
        .price
}

async fn current(app: &TestApp, sub: &Value) -> Value {
    get(app, &at(SUBSCRIPTIONS, &text(&sub["subscription_ref"]), "")).await
}

async fn change(app: &TestApp, sub: &Value, body: Value) -> billing_tests::Resp {
    let now = current(app, sub).await;
    app.post(
        &at(SUBSCRIPTIONS, &text(&sub["subscription_ref"]), "/change"),
        body,
    )
    .if_match(&text(&now["etag"]))
    .send()
    .await
}

async fn preview(app: &TestApp, sub: &Value, body: Value) -> billing_tests::Resp {
    app.req(
        "POST",
        &at(
            SUBSCRIPTIONS,
            &text(&sub["subscription_ref"]),
            "/change/preview",
        ),
    )
    .json(&body)
    .send()
    .await
}

/// The buyer's invoices, oldest first, and payments.
async fn money_of(app: &TestApp, sub: &Value) -> (Vec<Value>, Vec<Value>) {
    let buyer = text(&sub["buyer_ref"]);
    let mut invoices = list(app, &format!("{INVOICES}?buyer_ref={buyer}")).await;
    invoices.sort_by_key(|i| text(&i["number"]));
    let mut payments = list(app, &format!("{PAYMENTS}?buyer_ref={buyer}")).await;
    payments.sort_by_key(|p| text(&p["created_at"]));
    (invoices, payments)
}

async fn credit_of(app: &TestApp, sub: &Value) -> Value {
    get(app, &at(BUYERS, &text(&sub["buyer_ref"]), "")).await["credit_balance"].clone()
}

/// `(kind, value)` of each line.
fn kinds(lines: &Value) -> Vec<(String, String)> {
    lines
        .as_array()
        .expect("lines")
        .iter()
        .map(|l| (text(&l["kind"]), text(&l["amount"]["value"])))
        .collect()
}

fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
    v.iter()
        .map(|(k, a)| (k.to_string(), a.to_string()))
        .collect()
}

async fn entitlements(app: &TestApp, sub: &Value) -> Vec<(String, String)> {
    let buyer = text(&sub["buyer_ref"]);
    let mut e: Vec<(String, String)> =
        list(app, &format!("/api/v1/entitlements?buyer_ref={buyer}"))
            .await
            .iter()
            .map(|e| (text(&e["product_ref"]), text(&e["status"])))
            .collect();
    e.sort();
    e
}

/// A `charge_now` upgrade to another product: its preview, then an invoice
/// of exactly those lines charged at once, the new price and product, the
/// entitlements moved, a `price_change` record.
async fn charge_now_upgrade_is_invoiced_at_once(app: TestApp) {
    let (sub, _clock) = subscribed(&app, "1000", "pm_card_visa").await;
    assert_eq!(credit_of(&app, &sub).await, eur("0"));
    let premium = new_price(&app, "2000").await;
    let body = json!({"price_ref": premium, "proration": "charge_now"});
    let p = preview(&app, &sub, body.clone()).await;
    p.expect(200);
    let shown = p.data().clone();
    assert_eq!(
        kinds(&shown["lines"]),
        pairs(&[("proration_credit", "-677"), ("proration_debit", "1355")])
    );
    assert_eq!(shown["amount_total"], eur("678"));
    assert_eq!(shown["credit_balance_after"], eur("0"));
    assert_eq!(shown["next_renewal"]["at"], PERIOD_END);
    assert_eq!(shown["next_renewal"]["amount"], eur("2000"));
    // A preview writes nothing.
    assert_eq!(current(&app, &sub).await["price_ref"], sub["price_ref"]);

    let r = change(&app, &sub, body).await;
    r.expect(200);
    let changed = r.data().clone();
    assert_eq!(changed["price_ref"], premium.as_str());
    assert_ne!(changed["product_ref"], sub["product_ref"]);
    assert_eq!(changed["current_period_start"], sub["current_period_start"]);
    assert_eq!(changed["current_period_end"], PERIOD_END);
    assert_eq!(changed["pending_invoice_lines"], json!([]));
    assert_eq!(r.etag(), text(&changed["etag"]));

    let (invoices, payments) = money_of(&app, &sub).await;
    assert_eq!(invoices.len(), 2);
    let invoice = &invoices[1];
    assert_eq!(invoice["lines"], shown["lines"], "the preview's lines");
    assert_eq!(invoice["amount_total"], eur("678"));
    assert_eq!(invoice["status"], "paid");
    assert_eq!(invoice["issued_at"], CHANGE_AT);
    let line = &invoice["lines"][0];
    assert_eq!(line["price_ref"], sub["price_ref"]);
    assert_eq!(line["period_start"], CHANGE_AT);
    assert_eq!(line["period_end"], PERIOD_END);
    assert_eq!(invoice["lines"][1]["price_ref"], premium.as_str());
    assert_eq!(payments.len(), 2);
    assert_eq!(payments[1]["amount"], eur("678"));
    assert_eq!(payments[1]["status"], "succeeded");
    assert_eq!(
        invoice["payment_intent_ref"],
        payments[1]["payment_intent_ref"]
    );

    let mut expected = vec![
        (text(&sub["product_ref"]), "revoked".to_owned()),
        (text(&changed["product_ref"]), "active".to_owned()),
    ];
    expected.sort();
    assert_eq!(entitlements(&app, &sub).await, expected);

    let records = list(
        &app,
        &format!(
            "{CHANGES}?subscription_ref={}",
            text(&sub["subscription_ref"])
        ),
    )
    .await;
    let record = records
        .iter()
        .find(|c| c["kind"] == "price_change")
        .expect("a price_change record");
    assert_eq!(record["from_price_ref"], sub["price_ref"]);
    assert_eq!(record["to_price_ref"], premium.as_str());
    assert_eq!(record["proration"], "charge_now");
    assert_eq!(record["effective_at"], CHANGE_AT);

    // The next renewal charges the new price.
    let clock = text(&sub["test_clock_ref"]);
    clocks::advance(&app, &clock, "2026-02-02T00:00:00.000Z").await;
    let (invoices, _) = money_of(&app, &sub).await;
    assert_eq!(invoices.len(), 3);
    assert_eq!(kinds(&invoices[2]["lines"]), pairs(&[("period", "2000")]));
}

/// A downgrade whose credit exceeds its debit makes no invoice: the rest
/// goes to the buyer's credit balance, which the next renewal applies.
async fn downgrade_credits_the_balance_a_renewal_uses(app: TestApp) {
    let (sub, clock) = subscribed(&app, "2000", "pm_card_visa").await;
    let basic = new_price(&app, "1000").await;
    let body = json!({"price_ref": basic});
    let p = preview(&app, &sub, body.clone()).await;
    p.expect(200);
    assert_eq!(p.data()["amount_total"], eur("0"));
    assert_eq!(p.data()["credit_balance_after"], eur("678"));
    assert_eq!(p.data()["next_renewal"]["amount"], eur("322"));
    assert_eq!(
        kinds(&p.data()["lines"]),
        pairs(&[("proration_credit", "-1355"), ("proration_debit", "677")])
    );
    let buyer_before = get(&app, &at(BUYERS, &text(&sub["buyer_ref"]), "")).await;
    change(&app, &sub, body).await.expect(200);
    let (invoices, payments) = money_of(&app, &sub).await;
    assert_eq!((invoices.len(), payments.len()), (1, 1));
    let buyer = get(&app, &at(BUYERS, &text(&sub["buyer_ref"]), "")).await;
    assert_eq!(buyer["credit_balance"], eur("678"));
    assert_ne!(buyer["etag"], buyer_before["etag"]);

    clocks::advance(&app, &clock, "2026-02-02T00:00:00.000Z").await;
    let (invoices, payments) = money_of(&app, &sub).await;
    assert_eq!(invoices.len(), 2);
    assert_eq!(
        kinds(&invoices[1]["lines"]),
        pairs(&[("period", "1000"), ("credit_applied", "-678")])
    );
    assert_eq!(invoices[1]["amount_total"], eur("322"));
    assert_eq!(payments.len(), 2);
    assert_eq!(payments[1]["amount"], eur("322"));
    assert_eq!(credit_of(&app, &sub).await, eur("0"));
    let s = current(&app, &sub).await;
    assert_eq!(s["current_period_end"], NEXT_END);
}

/// Credit a declined renewal's invoice took goes back to the balance when
/// dunning gives the invoice up (`uncollectible`): the buyer never loses
/// credit to a charge that never happened.
async fn an_uncollectible_invoice_gives_its_credit_back(app: TestApp) {
    let (sub, clock) = subscribed(&app, "2000", "pm_card_renewal_fails").await;
    let basic = new_price(&app, "1000").await;
    change(&app, &sub, json!({"price_ref": basic}))
        .await
        .expect(200);
    assert_eq!(credit_of(&app, &sub).await, eur("678"));
    // The renewal on 02-01 is declined; its open invoice holds the credit.
    clocks::advance(&app, &clock, "2026-02-01T12:00:00.000Z").await;
    let (invoices, _) = money_of(&app, &sub).await;
    assert_eq!(invoices[1]["status"], "open");
    assert_eq!(
        kinds(&invoices[1]["lines"]),
        pairs(&[("period", "1000"), ("credit_applied", "-678")])
    );
    assert_eq!(credit_of(&app, &sub).await, eur("0"));
    // Dunning (1d, 3d, 5d) runs out: uncollectible, canceled, credit back.
    clocks::advance(&app, &clock, "2026-02-10T00:00:00.000Z").await;
    let (invoices, _) = money_of(&app, &sub).await;
    assert_eq!(invoices[1]["status"], "uncollectible");
    assert_eq!(current(&app, &sub).await["status"], "canceled");
    assert_eq!(credit_of(&app, &sub).await, eur("678"));
}

/// A balance that covers a renewal's invoice pays it without a charge.
async fn a_covered_renewal_charges_nothing(app: TestApp) {
    let (sub, clock) = subscribed(&app, "2000", "pm_card_visa").await;
    // 2000 → 10 → ... : credit 1355, debit round(10 × 21/31) = 7: 1348 back.
    let cheap = new_price(&app, "10").await;
    change(&app, &sub, json!({"price_ref": cheap}))
        .await
        .expect(200);
    assert_eq!(credit_of(&app, &sub).await, eur("1348"));
    clocks::advance(&app, &clock, "2026-02-02T00:00:00.000Z").await;
    let (invoices, payments) = money_of(&app, &sub).await;
    assert_eq!(payments.len(), 1, "no charge");
    assert_eq!(invoices.len(), 2);
    assert_eq!(
        kinds(&invoices[1]["lines"]),
        pairs(&[("period", "10"), ("credit_applied", "-10")])
    );
    assert_eq!(invoices[1]["amount_total"], eur("0"));
    assert_eq!(invoices[1]["status"], "paid");
    assert_eq!(invoices[1]["payment_intent_ref"], Value::Null);
    assert_eq!(credit_of(&app, &sub).await, eur("1338"));
    let s = current(&app, &sub).await;
    assert_eq!(s["status"], "active");
    assert_eq!(s["current_period_end"], NEXT_END);
}

/// `next_invoice` keeps the two lines on the subscription until the next
/// renewal's invoice takes them; `none` prorates nothing.
async fn next_invoice_and_none(app: TestApp) {
    let (sub, clock) = subscribed(&app, "1000", "pm_card_visa").await;
    let premium = new_price(&app, "2000").await;
    let body = json!({"price_ref": premium, "proration": "next_invoice"});
    let p = preview(&app, &sub, body.clone()).await;
    p.expect(200);
    assert_eq!(p.data()["amount_total"], eur("0"));
    assert_eq!(p.data()["next_renewal"]["amount"], eur("2678"));
    let r = change(&app, &sub, body).await;
    r.expect(200);
    assert_eq!(r.data()["pending_invoice_lines"], p.data()["lines"]);
    assert_eq!(
        kinds(&r.data()["pending_invoice_lines"]),
        pairs(&[("proration_credit", "-677"), ("proration_debit", "1355")])
    );
    assert_eq!(money_of(&app, &sub).await.0.len(), 1, "no invoice now");
    clocks::advance(&app, &clock, "2026-02-02T00:00:00.000Z").await;
    let (invoices, payments) = money_of(&app, &sub).await;
    assert_eq!(
        kinds(&invoices[1]["lines"]),
        pairs(&[
            ("period", "2000"),
            ("proration_credit", "-677"),
            ("proration_debit", "1355")
        ])
    );
    assert_eq!(invoices[1]["amount_total"], eur("2678"));
    assert_eq!(payments[1]["amount"], eur("2678"));
    assert_eq!(
        current(&app, &sub).await["pending_invoice_lines"],
        json!([])
    );

    let (sub, clock) = subscribed(&app, "1000", "pm_card_visa").await;
    let premium = new_price(&app, "2000").await;
    let body = json!({"price_ref": premium, "proration": "none"});
    let p = preview(&app, &sub, body.clone()).await;
    assert_eq!(p.data()["lines"], json!([]));
    assert_eq!(p.data()["next_renewal"]["amount"], eur("2000"));
    let r = change(&app, &sub, body).await;
    r.expect(200);
    assert_eq!(r.data()["price_ref"], premium.as_str());
    assert_eq!(r.data()["pending_invoice_lines"], json!([]));
    assert_eq!(money_of(&app, &sub).await.0.len(), 1);
    clocks::advance(&app, &clock, "2026-02-02T00:00:00.000Z").await;
    let (invoices, _) = money_of(&app, &sub).await;
    assert_eq!(kinds(&invoices[1]["lines"]), pairs(&[("period", "2000")]));
}

/// Same price, a draft price, another currency, a canceled subscription:
/// `semantic_error`, nothing changed; an unknown price is `not_found`; the
/// headers and the body are checked.
async fn refusals_change_nothing(app: TestApp) {
    let (sub, _clock) = subscribed(&app, "1000", "pm_card_visa").await;
    let secret = app.sandbox.secret.clone();
    let product = text(&current(&app, &sub).await["product_ref"]);
    let draft = create_as(
        &app,
        &secret,
        PRICES,
        json!({"product_ref": product, "amount": eur("1500"), "type": "recurring",
            "interval": "month"}),
        "price_ref",
    )
    .await;
    let usd = sellable(&app, "Dollar", money("2000", "USD"), Some("month"))
        .await
        .price;
    for price in [text(&sub["price_ref"]), draft, usd] {
        for path in ["/change", "/change/preview"] {
            let r = if path == "/change" {
                change(&app, &sub, json!({"price_ref": price})).await
            } else {
                preview(&app, &sub, json!({"price_ref": price})).await
            };
            r.expect_error(422, "semantic_error");
        }
    }
    change(&app, &sub, json!({"price_ref": "pri_N5xP3cV8bT1m"}))
        .await
        .expect_error(404, "not_found");
    let premium = new_price(&app, "2000").await;
    let path = at(SUBSCRIPTIONS, &text(&sub["subscription_ref"]), "/change");
    app.post(&path, json!({"price_ref": premium}))
        .send()
        .await
        .expect_error(428, "precondition_required");
    app.post(&path, json!({"price_ref": premium}))
        .if_match("\"stale\"")
        .send()
        .await
        .expect_error(412, "precondition_failed");
    let etag = text(&current(&app, &sub).await["etag"]);
    app.req("POST", &path)
        .json(&json!({"price_ref": premium}))
        .if_match(&etag)
        .send()
        .await
        .expect_error(400, "idempotency_key_required");
    for (body, field) in [
        (
            json!({"price_ref": premium, "proration": "later"}),
            "proration",
        ),
        (json!({"price_ref": "nope"}), "price_ref"),
        (json!({}), "price_ref"),
    ] {
        billing_tests::kit::invalid(&change(&app, &sub, body).await, field);
    }
    let after = current(&app, &sub).await;
    assert_eq!(after["price_ref"], sub["price_ref"]);
    assert_eq!(text(&after["etag"]), etag);
    assert_eq!(money_of(&app, &sub).await.0.len(), 1);

    // A canceled subscription.
    let r = app
        .post(
            &at(SUBSCRIPTIONS, &text(&sub["subscription_ref"]), "/cancel"),
            json!({"at_period_end": false}),
        )
        .if_match(&etag)
        .send()
        .await;
    r.expect(200);
    change(&app, &sub, json!({"price_ref": premium}))
        .await
        .expect_error(422, "semantic_error");
    preview(&app, &sub, json!({"price_ref": premium}))
        .await
        .expect_error(422, "semantic_error");
}

/// A declined charge records the failed payment and changes nothing else.
async fn a_declined_charge_changes_nothing(app: TestApp) {
    let (sub, _clock) = subscribed(&app, "1000", "pm_card_renewal_fails").await;
    let premium = new_price(&app, "2000").await;
    let before = current(&app, &sub).await;
    let r = change(&app, &sub, json!({"price_ref": premium})).await;
    r.expect_error(422, "semantic_error");
    assert!(r.text.contains("payment_declined"), "{}", r.text);
    let after = current(&app, &sub).await;
    assert_eq!(after, before);
    let (invoices, payments) = money_of(&app, &sub).await;
    assert_eq!(invoices.len(), 1);
    assert_eq!(payments.len(), 2, "the failed payment is recorded");
    assert_eq!(payments[1]["status"], "failed");
    assert_eq!(payments[1]["amount"], eur("678"));
    assert_eq!(
        entitlements(&app, &sub).await,
        [(text(&sub["product_ref"]), "active".to_owned())]
    );
}

/// `subscription.changed` is delivered, signed, with the prices it moved
/// between.
async fn subscription_changed_is_delivered(app: TestApp) {
    let receiver = TestReceiver::start(Behaviour::Status(204)).await;
    let (_, secret) = app
        .subscribed_endpoint(&receiver.url(), "subscription.changed", 1)
        .await;
    let (sub, _clock) = subscribed(&app, "1000", "pm_card_visa").await;
    let premium = new_price(&app, "2000").await;
    let pipeline = EventPipeline::embedded(&app);
    let r = change(&app, &sub, json!({"price_ref": premium})).await;
    r.expect(200);
    app.eventually(20, || async {
        (receiver.distinct_deliveries() >= 1).then_some(())
    })
    .await;
    pipeline.shutdown().await;
    let got = receiver.received();
    each_signed_once(&got, &secret, "changes");
    let event = got[0].json();
    assert_eq!(event["public_event_type"], "subscription.changed");
    let data = &event["data"];
    assert_eq!(data["from_price_ref"], sub["price_ref"]);
    assert_eq!(data["to_price_ref"], premium.as_str());
    assert_eq!(data["subscription_ref"], sub["subscription_ref"]);
    assert_eq!(data["price_ref"], premium.as_str());
    assert_eq!(data["etag"], r.data()["etag"]);
}

/// Concurrent changes of one buyer's subscriptions that each want the
/// buyer's whole balance: it is used once, never below zero; a loser
/// answers 409 and its retry finds the balance spent. The renewals after
/// apply what is left.
async fn concurrent_changes_never_overdraw_the_balance(app: TestApp) {
    let s = sellable(&app, "Basic", eur("1000"), Some("month")).await;
    let config = config_of(&app, &s.offer).await;
    let clock = clocks::clock(&app, START, None).await;
    let email = format!("{}@example.com", billing_tests::unique_key());
    let mut subs = Vec::new();
    for _ in 0..4 {
        let (_, paid) = clocks::pay_on(&app, &config, &clock, &email, "pm_card_visa").await;
        subs.push(paid["subscription"].clone());
    }
    assert!(subs.iter().all(|s| s["buyer_ref"] == subs[0]["buyer_ref"]));
    clocks::advance(&app, &clock, CHANGE_AT).await;
    // 1000 → 10: 677 − 7 = 670 to the balance.
    let cheap = new_price(&app, "10").await;
    change(&app, &subs[0], json!({"price_ref": cheap}))
        .await
        .expect(200);
    assert_eq!(credit_of(&app, &subs[0]).await, eur("670"));

    // Three upgrades at once, each wanting min(678, balance).
    let premium = new_price(&app, "2000").await;
    let runs = subs[1..].iter().map(|sub| {
        let app = &app;
        let premium = premium.clone();
        async move {
            loop {
                let r = change(app, sub, json!({"price_ref": premium})).await;
                match r.status {
                    200 => return,
                    409 => continue,
                    other => panic!("{other}: {}", r.text),
                }
            }
        }
    });
    futures::future::join_all(runs).await;
    let (invoices, payments) = money_of(&app, &subs[0]).await;
    let applied: i64 = invoices
        .iter()
        .flat_map(|i| i["lines"].as_array().unwrap().clone())
        .filter(|l| l["kind"] == "credit_applied")
        .map(|l| text(&l["amount"]["value"]).parse::<i64>().unwrap())
        .sum();
    assert_eq!(applied, -670, "the balance is used once");
    assert_eq!(credit_of(&app, &subs[0]).await, eur("0"));
    let charged: i64 = payments[4..]
        .iter()
        .map(|p| text(&p["amount"]["value"]).parse::<i64>().unwrap())
        .sum();
    assert_eq!(charged, 3 * 678 - 670);

    // Renewals for one buyer together: nothing left to apply.
    clocks::advance(&app, &clock, "2026-02-02T00:00:00.000Z").await;
    let (invoices, _) = money_of(&app, &subs[0]).await;
    assert_eq!(invoices.len(), 4 + 3 + 4);
    assert_eq!(credit_of(&app, &subs[0]).await, eur("0"));
}

/// A price of another interval starts a new period at the change, its
/// debit the full new price; the old period's end no longer renews, and
/// later periods count from the change.
async fn another_interval_starts_a_new_period(app: TestApp) {
    let (sub, clock) = subscribed(&app, "1000", "pm_card_visa").await;
    let yearly = sellable(&app, "Yearly", eur("12000"), Some("year"))
        .await
        .price;
    let body = json!({"price_ref": yearly});
    let p = preview(&app, &sub, body.clone()).await;
    p.expect(200);
    assert_eq!(
        kinds(&p.data()["lines"]),
        pairs(&[("proration_credit", "-677"), ("proration_debit", "12000")])
    );
    assert_eq!(p.data()["amount_total"], eur("11323"));
    assert_eq!(p.data()["next_renewal"]["at"], "2027-01-11T00:00:00.000Z");
    let r = change(&app, &sub, body).await;
    r.expect(200);
    assert_eq!(r.data()["current_period_start"], CHANGE_AT);
    assert_eq!(r.data()["current_period_end"], "2027-01-11T00:00:00.000Z");
    let (invoices, _) = money_of(&app, &sub).await;
    assert_eq!(invoices[1]["lines"], p.data()["lines"]);
    assert_eq!(
        invoices[1]["lines"][1]["period_end"],
        "2027-01-11T00:00:00.000Z"
    );
    clocks::advance(&app, &clock, "2026-02-02T00:00:00.000Z").await;
    assert_eq!(money_of(&app, &sub).await.0.len(), 2, "no renewal on Feb 1");
    // Its periods count from the change from now on, not from the start
    // (2026-01-01): the renewal a year later runs to 2028-01-11.
    clocks::advance(&app, &clock, "2027-01-12T00:00:00.000Z").await;
    let s = current(&app, &sub).await;
    assert_eq!(s["current_period_start"], "2027-01-11T00:00:00.000Z");
    assert_eq!(s["current_period_end"], "2028-01-11T00:00:00.000Z");
    let (invoices, _) = money_of(&app, &sub).await;
    assert_eq!(invoices.len(), 3);
    assert_eq!(
        invoices[2]["lines"][0]["period_end"],
        "2028-01-11T00:00:00.000Z"
    );
}

backend_tests!(
    another_interval_starts_a_new_period,
    concurrent_changes_never_overdraw_the_balance,
    charge_now_upgrade_is_invoiced_at_once,
    downgrade_credits_the_balance_a_renewal_uses,
    a_covered_renewal_charges_nothing,
    an_uncollectible_invoice_gives_its_credit_back,
    next_invoice_and_none,
    refusals_change_nothing,
    a_declined_charge_changes_nothing,
    subscription_changed_is_delivered,
);
