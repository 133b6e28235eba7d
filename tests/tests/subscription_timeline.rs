//! The webhook timeline of `docs/subscriptions.md` (contract 14), recorded
//! from a test-clock run and kept true: a 14-day trial of EUR 10.00 a
//! month, its `trial_will_end`, its conversion, a `charge_now` upgrade to
//! EUR 20.00, a downgrade back into the buyer's credit, the renewal that
//! uses the credit, and a cancel, each step at its own clock time. An
//! endpoint subscribed to the subscription, invoice and payment events
//! collects what is delivered; each step waits for the pipeline to be
//! idle, then lists its webhooks by `occurred_at`, then payment, invoice,
//! subscription (the order the unit of work emits them in).
//!
//! The rendered table must equal the block between the doc's
//! `<!-- timeline:begin -->` and `<!-- timeline:end -->` markers;
//! `BILLING_WRITE_TIMELINE=1` rewrites the block instead.

use billing_tests::clocks;
use billing_tests::kit::api::{BUYERS, SUBSCRIPTIONS};
use billing_tests::kit::{at, eur, published_config, sellable, text};
use billing_tests::receiver::{Behaviour, TestReceiver};
use billing_tests::{backend_tests, EventPipeline, TestApp};
use serde_json::{json, Value};
use std::collections::HashSet;

const DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/subscriptions.md");
const BEGIN: &str = "<!-- timeline:begin -->";
const END: &str = "<!-- timeline:end -->";

/// The endpoint's event types, in the order one instant's events are
/// listed.
const TYPES: [&str; 7] = [
    "payment.succeeded",
    "invoice.paid",
    "subscription.started",
    "subscription.trial_will_end",
    "subscription.renewed",
    "subscription.changed",
    "subscription.canceled",
];

/// The run: its app, clock, endpoint and what it has recorded.
struct Run {
    app: TestApp,
    clock: String,
    receiver: TestReceiver,
    seen: HashSet<String>,
    /// Price refs and their names in the table.
    names: Vec<(String, &'static str)>,
    rows: Vec<String>,
}

impl Run {
    async fn get(&self, path: &str) -> Value {
        let r = self.app.get(path).send().await;
        r.expect(200);
        r.data().clone()
    }

    async fn advance(&self, time: &str) {
        let c = clocks::advance(&self.app, &self.clock, time).await;
        assert_eq!(c["failed_jobs"], 0, "{c}");
    }

    fn name(&self, price: &Value) -> String {
        let p = text(price);
        self.names
            .iter()
            .find(|(r, _)| *r == p)
            .map(|(_, n)| n.to_string())
            .unwrap_or(p)
    }

    /// Waits for the pipeline to deliver what the step emitted, then adds
    /// the step's row and a row per new webhook.
    async fn step(&mut self, time: &str, action: &str, buyer: &str) {
        let app = &self.app;
        app.eventually(30, || async { app.idle().await.then_some(()) })
            .await;
        let mut new: Vec<Value> = Vec::new();
        for r in self.receiver.received() {
            let id = r.header("webhook-id").to_owned();
            if r.succeeded() && self.seen.insert(id) {
                new.push(r.json());
            }
        }
        new.sort_by_key(|b| {
            let t = text(&b["public_event_type"]);
            let rank = TYPES.iter().position(|x| *x == t).unwrap_or(TYPES.len());
            (text(&b["occurred_at"]), rank)
        });
        let credit = self.get(&at(BUYERS, buyer, "")).await["credit_balance"].clone();
        self.rows.push(format!(
            "| {} | **{action}** | | credit_balance {} |",
            short(time),
            money(&credit)
        ));
        for b in &new {
            let t = text(&b["public_event_type"]);
            let fields = self.fields(&t, &b["data"]);
            self.rows.push(format!(
                "| {} | | `{t}` | {fields} |",
                short(&text(&b["occurred_at"]))
            ));
        }
    }

    /// The deterministic fields of an event's resource.
    fn fields(&self, t: &str, d: &Value) -> String {
        match t {
            "payment.succeeded" => format!("{} {}", text(&d["status"]), money(&d["amount"])),
            "invoice.paid" => {
                let lines: Vec<String> = d["lines"]
                    .as_array()
                    .expect("lines")
                    .iter()
                    .map(|l| format!("{} {}", text(&l["kind"]), text(&l["amount"]["value"])))
                    .collect();
                let paid_by = if d["payment_intent_ref"].is_null() {
                    "no payment"
                } else {
                    "charged"
                };
                format!(
                    "{} {}, {paid_by}; lines: {}",
                    text(&d["status"]),
                    money(&d["amount_total"]),
                    lines.join(", ")
                )
            }
            _ => {
                let mut f = format!(
                    "{} on {}, period {} → {}",
                    text(&d["status"]),
                    self.name(&d["price_ref"]),
                    short(&text(&d["current_period_start"])),
                    short(&text(&d["current_period_end"]))
                );
                if t == "subscription.changed" {
                    f.push_str(&format!(
                        ", from {} to {}",
                        self.name(&d["from_price_ref"]),
                        self.name(&d["to_price_ref"])
                    ));
                }
                if d["status"] == "trialing" {
                    f.push_str(&format!(", trial_end {}", short(&text(&d["trial_end"]))));
                }
                let pending = d["pending_invoice_lines"].as_array().map_or(0, Vec::len);
                if pending > 0 {
                    f.push_str(&format!(", {pending} pending lines"));
                }
                f
            }
        }
    }
}

/// A clock time without its zero seconds and the `Z`'s milliseconds.
fn short(t: &str) -> String {
    t.trim_end_matches(":00.000Z").replace('T', " ")
}

fn money(m: &Value) -> String {
    if m.is_null() {
        return "null".into();
    }
    format!("{} {}", text(&m["currency"]), text(&m["value"]))
}

/// The table the run records.
fn table(rows: &[String]) -> String {
    let mut out =
        String::from("| clock time (UTC) | step | webhook | key fields |\n|---|---|---|---|\n");
    for r in rows {
        out.push_str(r);
        out.push('\n');
    }
    out
}

/// Compares `recorded` with the doc's block, or rewrites the block when
/// `BILLING_WRITE_TIMELINE=1`.
fn check_doc(recorded: &str) {
    let doc = std::fs::read_to_string(DOC).expect("docs/subscriptions.md reads");
    let start = doc
        .find(BEGIN)
        .expect("the doc has the timeline:begin marker")
        + BEGIN.len();
    let end = doc.find(END).expect("the doc has the timeline:end marker");
    let block = format!("\n{recorded}");
    if std::env::var("BILLING_WRITE_TIMELINE").as_deref() == Ok("1") {
        let updated = format!("{}{block}{}", &doc[..start], &doc[end..]);
        if updated != doc {
            std::fs::write(DOC, updated).expect("docs/subscriptions.md writes");
        }
        return;
    }
    let shown = &doc[start..end];
    if shown != block {
        let mut diff = String::new();
        let (a, b): (Vec<&str>, Vec<&str>) = (shown.lines().collect(), block.lines().collect());
        for i in 0..a.len().max(b.len()) {
            match (a.get(i), b.get(i)) {
                (Some(x), Some(y)) if x == y => {}
                (x, y) => {
                    if let Some(x) = x {
                        diff.push_str(&format!("- {x}\n"));
                    }
                    if let Some(y) = y {
                        diff.push_str(&format!("+ {y}\n"));
                    }
                }
            }
        }
        panic!(
            "docs/subscriptions.md's webhook timeline is not what a run records \
             (- doc, + run):\n{diff}\nIf the change is intended, update the doc with \
             BILLING_WRITE_TIMELINE=1 cargo test -p billing-tests --test suite \
             subscription_timeline::sqlite"
        );
    }
}

/// Trial → `trial_will_end` → conversion → upgrade (`charge_now`) →
/// downgrade (credit) → renewal using the credit → cancel.
async fn the_documented_timeline_is_what_a_run_delivers(app: TestApp) {
    let receiver = TestReceiver::start(Behaviour::Status(204)).await;
    let (endpoint, _secret) = app.subscribed_endpoint(&receiver.url(), TYPES[0], 1).await;
    for t in &TYPES[1..] {
        app.subscribe(&endpoint, t, 1).await;
    }
    let basic = sellable(&app, "Basic", eur("1000"), Some("month")).await;
    let premium = sellable(&app, "Premium", eur("2000"), Some("month")).await;
    let config = published_config(
        &app,
        json!({"name": "Try it", "success_url": "https://example.com/ok",
            "line_items": [{"offer_ref": basic.offer, "quantity": 1}],
            "trial_period_days": 14}),
    )
    .await;
    let clock = clocks::clock(&app, "2026-01-01T00:00:00.000Z", Some("timeline")).await;
    let pipeline = EventPipeline::embedded(&app);
    let mut run = Run {
        app,
        clock,
        receiver,
        seen: HashSet::new(),
        names: vec![(basic.price, "Basic"), (premium.price.clone(), "Premium")],
        rows: Vec::new(),
    };

    let email = format!("{}@example.com", billing_tests::unique_key());
    let (_, paid) = clocks::pay_on(&run.app, &config, &run.clock, &email, "pm_card_visa").await;
    let sub = paid["subscription"].clone();
    let sub_path = at(SUBSCRIPTIONS, &text(&sub["subscription_ref"]), "");
    let buyer = text(&sub["buyer_ref"]);
    run.step(
        "2026-01-01T00:00:00.000Z",
        "pay: 14-day trial of Basic (EUR 10.00 a month)",
        &buyer,
    )
    .await;

    run.advance("2026-01-13T00:00:00.000Z").await;
    run.step("2026-01-13T00:00:00.000Z", "advance the clock", &buyer)
        .await;
    run.advance("2026-01-16T00:00:00.000Z").await;
    run.step(
        "2026-01-16T00:00:00.000Z",
        "advance past trial_end: conversion",
        &buyer,
    )
    .await;

    run.advance("2026-01-25T00:00:00.000Z").await;
    let etag = text(&run.get(&sub_path).await["etag"]);
    run.app
        .post(
            &format!("{sub_path}/change"),
            json!({"price_ref": premium.price, "proration": "charge_now"}),
        )
        .if_match(&etag)
        .send()
        .await
        .expect(200);
    run.step(
        "2026-01-25T00:00:00.000Z",
        "change to Premium (EUR 20.00), charge_now",
        &buyer,
    )
    .await;

    run.advance("2026-02-04T00:00:00.000Z").await;
    let etag = text(&run.get(&sub_path).await["etag"]);
    let basic_price = run.names[0].0.clone();
    run.app
        .post(
            &format!("{sub_path}/change"),
            json!({"price_ref": basic_price, "proration": "charge_now"}),
        )
        .if_match(&etag)
        .send()
        .await
        .expect(200);
    run.step(
        "2026-02-04T00:00:00.000Z",
        "change back to Basic, charge_now",
        &buyer,
    )
    .await;

    run.advance("2026-02-16T00:00:00.000Z").await;
    run.step(
        "2026-02-16T00:00:00.000Z",
        "advance past the period end: renewal",
        &buyer,
    )
    .await;

    run.advance("2026-02-20T00:00:00.000Z").await;
    let etag = text(&run.get(&sub_path).await["etag"]);
    run.app
        .post(
            &format!("{sub_path}/cancel"),
            json!({"at_period_end": false}),
        )
        .if_match(&etag)
        .send()
        .await
        .expect(200);
    run.step("2026-02-20T00:00:00.000Z", "cancel now", &buyer)
        .await;
    pipeline.shutdown().await;

    check_doc(&table(&run.rows));
}

backend_tests!(the_documented_timeline_is_what_a_run_delivers);
