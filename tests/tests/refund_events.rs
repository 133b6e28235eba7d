//! The refund, dispute, payout and participation events end to end (issue
//! 18: "End to end with a receiver: the refund, dispute, payout and
//! participation events arrive signed, once each"; contract 9 and 10.1).
//!
//! One endpoint, subscribed in the environment's scope to every one of
//! those types, gets from a real local receiver:
//!
//! * a refund with `access_effect: revoke` that succeeds: `refund.created`,
//!   `refund.succeeded` and `entitlement.revoked` for each of its order's
//!   two entitlements;
//! * a refund of a `pm_card_refund_fails` payment: `refund.created`,
//!   `refund.failed`;
//! * a scheduled refund whose payment another system then disputes
//!   (`dispute.opened`, published from outside and projected):
//!   `refund.created`, `dispute.opened`, `refund.canceled`, and the
//!   dispute's `dispute.closed`;
//! * two payouts (`payout.paid`, `payout.failed`) and a participation that
//!   is invited and accepts (`participation.invited`,
//!   `participation.accepted`).
//!
//! Each event arrives exactly once, signed so that the official Standard
//! Webhooks verifier accepts it, its `data` the resource as its retrieve
//! answers it now, or as it answered at the event's time when it changed
//! since; a dispute's upstream `reason` never leaves, only `reason_safe`.
//!
//! The refunds' events leave through the outbox: into the store's queue on
//! every backend (`backend_tests!`), and across RabbitMQ to two dispatchers
//! in the fleet variant (only with `BILLING_TEST_FLEET=1`; then a missing
//! broker or PostgreSQL is a failure, never a skip). The other systems'
//! events enter through the intake (`dispatcher::intake::accept`), which
//! projects them before they are fanned out.

use billing_tests::kit::api::*;
use billing_tests::kit::{
    all_succeeded, at, eur, is_ref, list, listed_as_received, one_time_config, order_of,
    paid_payment, retrieve, text, timed_work,
};
use billing_tests::receiver::{Behaviour, Received, TestReceiver};
use billing_tests::{
    backend_tests, fleet_or_say, verifier, Backend, EventPipeline as Pipeline, TestApp, TestQueues,
};
use domain::{Prefix, Ref, Timestamp};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashSet};
use std::sync::Once;

/// The upstream reason of the dispute: markup and a control character,
/// which only its safe form (`reason_safe`) may carry, cleaned.
const RAW_REASON: &str = "<b>Fraudulent</b>\u{7} card use <script>alert(1)</script>";

/// What the endpoint subscribes to (version 1, environment scope).
const SUBSCRIBED: &[&str] = &[
    "refund.created",
    "refund.succeeded",
    "refund.failed",
    "refund.canceled",
    "entitlement.revoked",
    "dispute.opened",
    "dispute.closed",
    "payout.paid",
    "payout.failed",
    "participation.invited",
    "participation.accepted",
];

/// The deliveries expected, by type: three refunds created, one each
/// succeeded, failed and canceled, the two entitlements of the revoked
/// order, and one of each outside event.
const EXPECTED_COUNTS: &[(&str, usize)] = &[
    ("refund.created", 3),
    ("refund.succeeded", 1),
    ("refund.failed", 1),
    ("refund.canceled", 1),
    ("entitlement.revoked", 2),
    ("dispute.opened", 1),
    ("dispute.closed", 1),
    ("payout.paid", 1),
    ("payout.failed", 1),
    ("participation.invited", 1),
    ("participation.accepted", 1),
];

fn total_deliveries() -> usize {
    EXPECTED_COUNTS.iter().map(|(_, n)| n).sum()
}

/// The reference field naming the resource an event of `event_type` carries.
fn ref_field(event_type: &str) -> &'static str {
    match event_type.split('.').next() {
        Some("refund") => "refund_ref",
        Some("entitlement") => "entitlement_ref",
        Some("dispute") => "dispute_ref",
        Some("payout") => "payout_ref",
        Some("participation") => "participation_ref",
        _ => panic!("no such event here: {event_type}"),
    }
}

/// The fields of each resource that change with its status: a resource
/// retrieved after a later event may differ from an earlier event's data
/// in these only.
fn status_fields(event_type: &str) -> &'static [&'static str] {
    match event_type.split('.').next() {
        Some("refund") => &[
            "status",
            "cancelable",
            "executed_at",
            "canceled_at",
            "updated_at",
            "etag",
        ],
        Some("dispute") => &["status", "resolved_at", "etag"],
        Some("participation") => &[
            "status",
            "accepted_at",
            "terms_version",
            "terms_digest",
            "etag",
        ],
        _ => &["status", "etag"],
    }
}

// ---- helpers --------------------------------------------------------------------

// ---- paying and refunding ---------------------------------------------------------

/// A succeeded payment, its buyer and order.
struct Paid {
    payment: String,
    buyer: String,
    order: String,
}

/// Pays a new session of `config` with `pm` for a buyer of its own.
async fn paid(app: &TestApp, config: &str, pm: &str) -> Paid {
    let p = paid_payment(app, config, pm).await;
    let payment = text(&p["payment_intent_ref"]);
    let buyer = text(&p["buyer_ref"]);
    let order = order_of(app, &p).await;
    Paid {
        payment,
        buyer,
        order: text(&order["order_ref"]),
    }
}

/// Creates a refund of the whole remainder of `payment`; 201; the refund
/// as the create (and its retrieve at that moment) answers it.
async fn refund(
    app: &TestApp,
    payment: &str,
    access_effect: &str,
    scheduled_at: Option<Timestamp>,
) -> Value {
    let mut body = json!({"payment_intent_ref": payment, "reason": "requested_by_customer",
        "access_effect": access_effect});
    if let Some(t) = scheduled_at {
        body["scheduled_at"] = json!(t.to_rfc3339());
    }
    let r = app.post(REFUNDS, body).send().await;
    r.expect(201);
    let d = r.data().clone();
    is_ref(&d["refund_ref"], "ref_");
    let status = if scheduled_at.is_some() {
        "scheduled"
    } else {
        "pending"
    };
    assert_eq!(d["status"], status, "{d}");
    d
}

/// Waits until the refund leaves `scheduled` and `pending`; returns it.
async fn settled(app: &TestApp, refund_ref: &str) -> Value {
    app.eventually(10, || async {
        let r = retrieve(app, REFUNDS, refund_ref).await;
        (!matches!(r["status"].as_str(), Some("scheduled" | "pending"))).then_some(r)
    })
    .await
}

/// The order's entitlements.
async fn entitlements(app: &TestApp, p: &Paid) -> Vec<Value> {
    list(app, &format!("{ENTITLEMENTS}?buyer_ref={}", p.buyer))
        .await
        .into_iter()
        .filter(|e| e["order_ref"] == p.order.as_str())
        .collect()
}

// ---- other systems' events ----------------------------------------------------------

/// Publishes an event of another system into the queue (through the
/// intake, which projects it), stamped `occurred_at`; its `event_ref`.
async fn publish(app: &TestApp, event_type: &str, data: Value, occurred_at: Timestamp) -> String {
    let event_ref = Ref::generate(Prefix::Event).into_string();
    let envelope = json!({
        "event_ref": event_ref,
        "public_event_type": event_type,
        "environment_ref": app.sandbox.environment_ref,
        "occurred_at": occurred_at.to_rfc3339(),
        "scope": {"product_refs": [], "buyer_ref": null, "beneficiary_business_ref": null},
        "data": data,
    });
    app.accept(&envelope.to_string()).await;
    event_ref
}

/// A time strictly after every earlier one of this test, so that each
/// outside event is newer than the one before it.
async fn later() -> Timestamp {
    billing_tests::poll::next_millisecond().await;
    Timestamp::now()
}

/// The catalogue's example `data` of `event_type`, naming `reference` in
/// its reference field.
fn example(event_type: &str, reference: &str) -> Value {
    let mut data = domain::webhook::catalogue::example(event_type, 1).expect("an example");
    data[ref_field(event_type)] = json!(reference);
    data
}

// ---- the endpoint ---------------------------------------------------------------

struct Endpoint {
    endpoint_ref: String,
    secret: String,
    receiver: TestReceiver,
}

async fn endpoint(app: &TestApp) -> Endpoint {
    let receiver = TestReceiver::start(Behaviour::Status(204)).await;
    let (endpoint_ref, secret) = app
        .subscribed_endpoint(&receiver.url(), SUBSCRIBED[0], 1)
        .await;
    for event_type in &SUBSCRIBED[1..] {
        app.post(
            &at(ENDPOINTS, &endpoint_ref, "/subscriptions"),
            json!({"public_event_type": event_type, "scope_type": "environment",
                "scope_ref": app.sandbox.environment_ref, "dto_version": 1}),
        )
        .send()
        .await
        .expect(201);
    }
    Endpoint {
        endpoint_ref,
        secret,
        receiver,
    }
}

/// Waits until the receiver got every delivery, the endpoint lists them
/// all as succeeded, and the pipeline is idle (no event left to relay or
/// fan out, no delivery due): a duplicate would have been made by then.
async fn all_delivered(app: &TestApp, e: &Endpoint) {
    let total = total_deliveries();
    all_succeeded(app, &e.receiver, &e.endpoint_ref, total).await;
    app.eventually(15, || async { app.idle().await.then_some(()) })
        .await;
}

// ---- what is expected -------------------------------------------------------------

/// The data each event must carry, by (type, resource reference).
type Expected = BTreeMap<(String, String), Value>;

fn put(expected: &mut Expected, event_type: &str, resource: Value) {
    let key = text(&resource[ref_field(event_type)]);
    let previous = expected.insert((event_type.to_owned(), key.clone()), resource);
    assert!(previous.is_none(), "{event_type} of {key} expected twice");
}

/// `earlier` (an event's data) and `now` (the resource's retrieve after a
/// later change) are the same resource apart from the fields that change
/// with its status.
#[track_caller]
fn same_but_status(event_type: &str, earlier: &Value, now: &Value) {
    let strip = |v: &Value| {
        let mut v = v.clone();
        for f in status_fields(event_type) {
            v.as_object_mut().expect("an object").remove(*f);
        }
        v
    };
    assert_eq!(
        strip(earlier),
        strip(now),
        "{event_type}: the resource at the event's time (left) and now (right) differ beyond their status"
    );
}

// ---- checks -------------------------------------------------------------------

/// Checks every delivery `e` received against `expected`.
async fn check_deliveries(app: &TestApp, e: &Endpoint, expected: &Expected) {
    let got: Vec<Received> = e.receiver.received();
    let summary = || {
        got.iter()
            .map(|r| {
                let b = r.json();
                (
                    r.header("webhook-id").to_owned(),
                    b["public_event_type"].clone(),
                    b["data"].clone(),
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(
        got.len(),
        total_deliveries(),
        "every delivery exactly once: {:#?}",
        summary()
    );
    assert!(got.iter().all(Received::succeeded));

    verifier::each_signed_once(&got, &e.secret, "");
    let mut event_refs: HashSet<String> = HashSet::new();
    let mut delivered: Expected = BTreeMap::new();
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for r in &got {
        let id = r.header("webhook-id");
        let body = r.json();
        is_ref(&body["event_ref"], "evt_");
        assert!(
            event_refs.insert(text(&body["event_ref"])),
            "event {} delivered twice: {:#?}",
            body["event_ref"],
            summary()
        );
        assert_eq!(body["environment_ref"], app.sandbox.environment_ref);
        assert_eq!(body["dto_version"], 1, "{body}");
        assert!(
            body["occurred_at"]
                .as_str()
                .and_then(Timestamp::parse)
                .is_some(),
            "{body}"
        );
        let event_type = text(&body["public_event_type"]);
        assert!(
            SUBSCRIBED.contains(&event_type.as_str()),
            "not subscribed: {body}"
        );
        *counts.entry(event_type.clone()).or_default() += 1;
        let data = body["data"].clone();
        let key = text(&data[ref_field(&event_type)]);
        let previous = delivered.insert((event_type.clone(), key.clone()), data.clone());
        assert!(previous.is_none(), "{event_type} of {key} arrived twice");

        // The upstream reason of a dispute never leaves.
        let raw = String::from_utf8_lossy(&r.body);
        assert!(
            !raw.contains("<script>") && !raw.contains("<b>"),
            "the raw dispute reason was delivered: {raw}"
        );
        if event_type.starts_with("dispute.") {
            assert!(data.get("reason").is_none(), "a raw `reason`: {data}");
            let safe = text(&data["reason_safe"]);
            assert!(!safe.is_empty() && safe.len() <= 200, "{data}");
            assert!(safe.contains("Fraudulent"), "{data}");
            assert!(!safe.contains('<') && !safe.contains('\u{7}'), "{data}");
        }

        // The body view is the body as delivered, matched by the
        // environment subscription.
        let view = app
            .get(&format!("/api/v1/webhook_deliveries/{id}/body"))
            .send()
            .await;
        view.expect(200);
        let view = view.data();
        assert_eq!(view["payload"], body, "the body view of {id}");
        assert_eq!(
            view["match_reasons"],
            json!([{"kind": "subscription", "public_event_type": event_type,
                "scope_type": "environment", "scope_ref": app.sandbox.environment_ref,
                "dto_version": 1}]),
            "{view}"
        );
    }

    let want_counts: BTreeMap<String, usize> = EXPECTED_COUNTS
        .iter()
        .map(|(t, n)| ((*t).to_owned(), *n))
        .collect();
    assert_eq!(counts, want_counts, "deliveries by type");
    assert_eq!(
        delivered.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>(),
        "the events delivered, by type and resource"
    );
    for (key, want) in expected {
        assert_eq!(
            delivered[key], *want,
            "{key:?}: delivered (left) vs retrieved (right)"
        );
    }

    // The endpoint's deliveries are exactly the requests received.
    listed_as_received(app, &e.endpoint_ref, &got, "").await;
}

// ---- the test -------------------------------------------------------------------

/// Embedded mode, on every backend.
async fn refund_dispute_payout_and_participation_events_arrive_once_signed(app: TestApp) {
    let pipeline = Pipeline::embedded(&app);
    scenario(&app, pipeline).await;
}

/// The refunds, the dispute, the payouts and the participation, with `pipeline`
/// carrying their events; then every check.
async fn scenario(app: &TestApp, pipeline: Pipeline) {
    timed_work(app);
    let config = one_time_config(app, &["1999", "500"]).await;
    let e = endpoint(app).await;
    let mut expected: Expected = BTreeMap::new();
    // Snapshots of resources at their events' time, by (type, reference).
    let mut then: Expected = BTreeMap::new();

    // A refund that succeeds and revokes the order's access.
    let revoked = paid(app, &config, "pm_card_visa").await;
    let ents = entitlements(app, &revoked).await;
    assert_eq!(ents.len(), 2, "{ents:?}");
    let ok = refund(app, &revoked.payment, "revoke", None).await;
    put(&mut then, "refund.created", ok.clone());
    let ok_ref = text(&ok["refund_ref"]);
    let done = settled(app, &ok_ref).await;
    assert_eq!(done["status"], "succeeded", "{done}");

    // A refund of the card whose refunds fail.
    let failing = paid(app, &config, "pm_card_refund_fails").await;
    let bad = refund(app, &failing.payment, "retain", None).await;
    put(&mut then, "refund.created", bad.clone());
    let bad_ref = text(&bad["refund_ref"]);
    let failed = settled(app, &bad_ref).await;
    assert_eq!(failed["status"], "failed", "{failed}");

    // A scheduled refund, canceled when another system reports a dispute
    // of its payment.
    let disputed = paid(app, &config, "pm_card_visa").await;
    let later_one = refund(
        app,
        &disputed.payment,
        "retain",
        Some(Timestamp::now().plus_seconds(60)),
    )
    .await;
    put(&mut then, "refund.created", later_one.clone());
    let later_ref = text(&later_one["refund_ref"]);
    let dispute_ref = Ref::generate(Prefix::Dispute).into_string();
    let opened_at = Timestamp::now();
    let dispute = json!({"dispute_ref": dispute_ref, "payment_intent_ref": disputed.payment,
        "amount": eur("2499"), "kind": "chargeback", "status": "needs_response",
        "reason": RAW_REASON, "opened_at": opened_at.to_rfc3339()});
    publish(app, "dispute.opened", dispute.clone(), opened_at).await;
    let opened = retrieve(app, DISPUTES, &dispute_ref).await;
    assert_eq!(opened["status"], "needs_response", "{opened}");
    assert_eq!(opened["payment_intent_ref"], disputed.payment.as_str());
    put(&mut then, "dispute.opened", opened.clone());
    let canceled = retrieve(app, REFUNDS, &later_ref).await;
    assert_eq!(
        canceled["status"], "canceled",
        "the dispute canceled it: {canceled}"
    );
    let closed_at = later().await;
    let mut closed = dispute.clone();
    closed["status"] = json!("won");
    closed["resolved_at"] = json!(closed_at.to_rfc3339());
    publish(app, "dispute.closed", closed, closed_at).await;

    // Two payouts, one paid, one failed.
    let payout_paid = Ref::generate(Prefix::Payout).into_string();
    let payout_failed = Ref::generate(Prefix::Payout).into_string();
    publish(
        app,
        "payout.paid",
        example("payout.paid", &payout_paid),
        later().await,
    )
    .await;
    publish(
        app,
        "payout.failed",
        example("payout.failed", &payout_failed),
        later().await,
    )
    .await;

    // A participation invited, then accepted.
    let participation = Ref::generate(Prefix::Participation).into_string();
    publish(
        app,
        "participation.invited",
        example("participation.invited", &participation),
        later().await,
    )
    .await;
    let invited = retrieve(app, PARTICIPATIONS, &participation).await;
    assert_eq!(invited["status"], "invited", "{invited}");
    put(&mut then, "participation.invited", invited);
    publish(
        app,
        "participation.accepted",
        example("participation.accepted", &participation),
        later().await,
    )
    .await;

    all_delivered(app, &e).await;

    // What each event must carry: the resource as its retrieve answers it
    // now, or, when it changed since, as it answered at the event's time.
    let succeeded = retrieve(app, REFUNDS, &ok_ref).await;
    assert_eq!(succeeded["status"], "succeeded", "{succeeded}");
    put(&mut expected, "refund.succeeded", succeeded.clone());
    let failed = retrieve(app, REFUNDS, &bad_ref).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    put(&mut expected, "refund.failed", failed.clone());
    let canceled = retrieve(app, REFUNDS, &later_ref).await;
    assert_eq!(canceled["status"], "canceled", "{canceled}");
    put(&mut expected, "refund.canceled", canceled.clone());
    for (now, status) in [
        (&succeeded, "pending"),
        (&failed, "pending"),
        (&canceled, "scheduled"),
    ] {
        let key = ("refund.created".to_owned(), text(&now["refund_ref"]));
        let created = then.remove(&key).expect("created");
        assert_eq!(created["status"], status, "{created}");
        same_but_status("refund.created", &created, now);
        put(&mut expected, "refund.created", created);
    }
    for ent in entitlements(app, &revoked).await {
        let now = retrieve(app, ENTITLEMENTS, &text(&ent["entitlement_ref"])).await;
        assert_eq!(now["status"], "revoked", "{now}");
        put(&mut expected, "entitlement.revoked", now);
    }
    for ent in entitlements(app, &failing)
        .await
        .into_iter()
        .chain(entitlements(app, &disputed).await)
    {
        assert_eq!(ent["status"], "active", "{ent}");
    }
    let closed = retrieve(app, DISPUTES, &dispute_ref).await;
    assert_eq!(closed["status"], "won", "{closed}");
    assert!(closed["resolved_at"].is_string(), "{closed}");
    assert_eq!(
        closed["reason_safe"], opened["reason_safe"],
        "the API shows the same safe reason"
    );
    assert!(closed.get("reason").is_none(), "{closed}");
    same_but_status("dispute.opened", &opened, &closed);
    put(&mut expected, "dispute.closed", closed);
    let opened = then
        .remove(&("dispute.opened".to_owned(), dispute_ref.clone()))
        .expect("opened");
    put(&mut expected, "dispute.opened", opened);
    let paid_out = retrieve(app, PAYOUTS, &payout_paid).await;
    assert_eq!(paid_out["status"], "paid", "{paid_out}");
    put(&mut expected, "payout.paid", paid_out);
    let not_paid = retrieve(app, PAYOUTS, &payout_failed).await;
    assert_eq!(not_paid["status"], "failed", "{not_paid}");
    put(&mut expected, "payout.failed", not_paid);
    let accepted = retrieve(app, PARTICIPATIONS, &participation).await;
    assert_eq!(accepted["status"], "accepted", "{accepted}");
    let invited = then
        .remove(&("participation.invited".to_owned(), participation.clone()))
        .expect("invited");
    same_but_status("participation.invited", &invited, &accepted);
    put(&mut expected, "participation.accepted", accepted);
    put(&mut expected, "participation.invited", invited);
    assert!(then.is_empty(), "{then:?}");
    assert_eq!(expected.len(), total_deliveries());

    check_deliveries(app, &e, &expected).await;
    pipeline.shutdown().await;
    assert!(app.store.outbox_batch(10).await.unwrap().is_empty());
}

backend_tests!(refund_dispute_payout_and_participation_events_arrive_once_signed);

/// Fleet mode: the API on PostgreSQL, the refunds' events relayed across
/// RabbitMQ (`billing.events`, consumed from a queue of this test's own by
/// two consumers), two dispatchers; each event still arrives exactly once.
/// Only with `BILLING_TEST_FLEET=1`; then a missing broker or PostgreSQL is
/// a failure, never a skip.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fleet_refund_events_cross_rabbitmq_to_two_dispatchers_once() {
    static NOTICE: Once = Once::new();
    if !fleet_or_say(&NOTICE, "RabbitMQ, PostgreSQL") {
        return;
    }
    let queues = TestQueues::declare().await;
    let app = TestApp::spawn(Backend::Postgres).await;
    let pipeline = Pipeline::fleet(&app, &queues.settings);
    scenario(&app, pipeline).await;
    queues.cleanup().await;
}
