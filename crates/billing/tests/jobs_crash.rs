//! Timed work (issue 18) with the real binary: scheduled refunds, whose
//! jobs (`refund.start` at `scheduled_at`, then `refund.settle` a second
//! later) each run in one unit of work that makes their effects, emits
//! their events and deletes the job, under a lease.
//!
//! 1. A SIGKILL of `billing serve` while scheduled refunds are starting and
//!    settling, then a restart on the same store: every refund succeeds,
//!    exactly once. `REFUNDS` payments of EUR 19.99 are each refunded EUR
//!    5.00, scheduled 2–4 s ahead; the server is killed once a tenth of them
//!    have succeeded (more are pending then, and some still scheduled). Right after the kill the store is consistent (a
//!    succeeded refund has added its amount to its payment and capture and
//!    emitted its `refund.succeeded`, a pending one has its settle job, a
//!    scheduled one its start job, and nothing else has happened); after the
//!    restart every refund is `succeeded`, every payment's and capture's
//!    `amount_refunded_minor` is exactly 500, the `jobs` table is empty, and
//!    each refund has exactly one `refund.created` and one `refund.succeeded`
//!    event (and no `refund.failed` or `refund.canceled`). Embedded mode (a
//!    SQLite file) always runs; fleet mode (PostgreSQL) with
//!    BILLING_TEST_FLEET=1.
//!
//! 2. (Fleet only.) One `billing api` and two `billing dispatcher`
//!    processes on one PostgreSQL database, RabbitMQ (a fresh vhost) and
//!    Redis: `FLEET_REFUNDS` refunds scheduled 1–3 s ahead, which the two
//!    dispatchers' runners race for. Every refund succeeds, and the same
//!    once-only checks hold: no job ran twice.
//!
//! Events are read where they may be: the outbox (not relayed yet), the
//! events queue (relayed; its data is nulled once fanned out), and the held
//! deliveries of a paused webhook endpoint subscribed to the four refund
//! event types, which keep the data of every fanned-out event (as in
//! `pay_crash.rs`).

use crate::common::crash::{client, count, crash_tests, probe, read_events, verdict, Envs, Site};
use crate::common::poll::Poll;
use crate::common::{
    fleet, fleet_env, fresh_redis_schedule, rand_u32, say, text, wait_ready, FreshDatabase,
    FreshVhost, Process, REDIS_URL,
};
use domain::Timestamp;
use sqlx::Connection;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The refunds of the crash test, one per payment.
const REFUNDS: usize = 30;
/// The refunds of the two-dispatcher test, one per payment.
const FLEET_REFUNDS: usize = 40;
/// What each payment costs, and what its one refund gives back.
const PRICE_MINOR: i64 = 1999;
const REFUND_MINOR: i64 = 500;
/// How long a runner holds a job (`commerce::jobs`): a job leased by the
/// killed server runs again only once its lease has ended.
const LEASE: Duration = Duration::from_secs(30);
/// The refund event types, all subscribed by the paused endpoint.
const REFUND_EVENTS: [&str; 4] = [
    "refund.created",
    "refund.succeeded",
    "refund.failed",
    "refund.canceled",
];

/// The API of a server, as one sandbox secret.
#[derive(Clone)]
struct Api {
    client: reqwest::Client,
    url: String,
    secret: String,
}

impl Api {
    fn new(url: &str, secret: &str) -> Api {
        Api {
            client: client(),
            url: url.to_owned(),
            secret: secret.to_owned(),
        }
    }

    /// A POST of `body` to `path` with `Idempotency-Key: key` (and
    /// `If-Match` when given), which must answer `expect`: its `data`.
    async fn post(
        &self,
        path: &str,
        key: &str,
        if_match: Option<&str>,
        body: serde_json::Value,
        expect: u16,
    ) -> serde_json::Value {
        let mut req = self
            .client
            .post(format!("{}{path}", self.url))
            .bearer_auth(&self.secret)
            .header("Idempotency-Key", key)
            .json(&body);
        if let Some(tag) = if_match {
            req = req.header("If-Match", tag);
        }
        let r = req
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST {path}: {e:?}"));
        let status = r.status().as_u16();
        let raw = r.text().await.unwrap_or_default();
        assert_eq!(status, expect, "POST {path} {body}: {raw}");
        let answer: serde_json::Value = serde_json::from_str(&raw).unwrap();
        answer["data"].clone()
    }
}

/// What the test sells and watches.
struct Shop {
    config: String,
    /// The paused endpoint whose held deliveries keep the events' data.
    endpoint: String,
}

/// Through the API: a published product with a published one-time price
/// (EUR 19.99), a published checkout config of its offer, and the paused
/// endpoint subscribed to the refund events.
async fn open_shop(api: &Api, environment_ref: &str, run: &str) -> Shop {
    let key = |what: &str| format!("setup-{run}-{what}");
    let product = api
        .post(
            "/api/v1/products",
            &key("product"),
            None,
            serde_json::json!({"name": "Refunded product"}),
            201,
        )
        .await;
    let product = text(&product, "product_ref");
    api.post(
        &format!("/api/v1/products/{product}/publish"),
        &key("product-publish"),
        None,
        serde_json::json!({}),
        200,
    )
    .await;
    let price = api
        .post(
            "/api/v1/prices",
            &key("price"),
            None,
            serde_json::json!({
                "product_ref": product,
                "amount": {"currency": "EUR", "unit": "minor", "value": PRICE_MINOR.to_string()},
                "type": "one_time",
            }),
            201,
        )
        .await;
    let price = text(&price, "price_ref");
    api.post(
        &format!("/api/v1/prices/{price}/publish"),
        &key("price-publish"),
        None,
        serde_json::json!({}),
        200,
    )
    .await;
    let r = api
        .client
        .get(format!("{}/api/v1/offers", api.url))
        .query(&[("product_ref", &product)])
        .bearer_auth(&api.secret)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let offers: serde_json::Value = r.json().await.unwrap();
    let items = offers["data"]["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "one offer per product: {offers}");
    let offer = text(&items[0], "offer_ref");
    let config = api
        .post(
            "/api/v1/checkout-configs",
            &key("config"),
            None,
            serde_json::json!({
                "name": "Refund checkout",
                "line_items": [{"offer_ref": offer, "quantity": 1}],
                "success_url": "https://example.com/ok",
            }),
            201,
        )
        .await;
    let config = text(&config, "config_ref");
    api.post(
        &format!("/api/v1/checkout-configs/{config}/publish"),
        &key("config-publish"),
        None,
        serde_json::json!({}),
        200,
    )
    .await;

    let endpoint = api
        .post(
            "/api/v1/webhook_endpoints",
            &key("endpoint"),
            None,
            serde_json::json!({"url": "https://example.com/jobs-crash-hooks"}),
            201,
        )
        .await;
    let endpoint_ref = text(&endpoint, "endpoint_ref");
    let paused = api
        .post(
            &format!("/api/v1/webhook_endpoints/{endpoint_ref}/pause"),
            &key("endpoint-pause"),
            Some(&text(&endpoint, "etag")),
            serde_json::json!({}),
            200,
        )
        .await;
    assert_eq!(paused["status"], "paused", "{paused}");
    for event_type in REFUND_EVENTS {
        api.post(
            &format!("/api/v1/webhook_endpoints/{endpoint_ref}/subscriptions"),
            &key(&format!("subscribe-{event_type}")),
            None,
            serde_json::json!({
                "public_event_type": event_type,
                "scope_type": "environment",
                "scope_ref": environment_ref,
                "dto_version": 1,
            }),
            201,
        )
        .await;
    }
    Shop {
        config,
        endpoint: endpoint_ref,
    }
}

/// `n` checkout sessions, each paid with `pm_card_visa`, a few at a time:
/// the payment references.
async fn pay_all(api: &Api, run: &str, config: &str, n: usize) -> Vec<String> {
    let gate = Arc::new(tokio::sync::Semaphore::new(8));
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        let (gate, api, run, config) =
            (gate.clone(), api.clone(), run.to_owned(), config.to_owned());
        tasks.push(tokio::spawn(async move {
            let _turn = gate.acquire().await.unwrap();
            let session = api.post(
                "/api/v1/checkout-sessions",
                &format!("session-{run}-{i:03}"),
                None,
                serde_json::json!({
                    "config_ref": config,
                    "buyer": {"email": format!("buyer-{i:03}@example.com"), "name": format!("Buyer {i}")},
                }),
                201,
            )
            .await;
            let session = text(&session, "checkout_session_ref");
            let paid = api.post(
                &format!("/api/v1/checkout-sessions/{session}/pay"),
                &format!("pay-{run}-{i:03}"),
                None,
                serde_json::json!({"payment_method": "pm_card_visa"}),
                200,
            )
            .await;
            assert_eq!(paid["payment"]["status"], "succeeded", "{paid}");
            text(&paid["payment"], "payment_intent_ref")
        }));
    }
    let mut payments = Vec::with_capacity(n);
    for t in tasks {
        payments.push(t.await.unwrap());
    }
    payments
}

/// One refund of [`REFUND_MINOR`] per payment, a few at a time, each
/// scheduled `ahead_ms` plus its share of `spread_ms` after its request:
/// the refund references, by payment.
async fn refund_all(
    api: &Api,
    run: &str,
    payments: &[String],
    ahead_ms: i64,
    spread_ms: i64,
) -> BTreeMap<String, String> {
    let gate = Arc::new(tokio::sync::Semaphore::new(8));
    let n = payments.len() as i64;
    let mut tasks = Vec::with_capacity(payments.len());
    for (i, payment) in payments.iter().enumerate() {
        let (gate, api, run, payment) =
            (gate.clone(), api.clone(), run.to_owned(), payment.clone());
        tasks.push(tokio::spawn(async move {
            let _turn = gate.acquire().await.unwrap();
            let at = Timestamp::now().plus_millis(ahead_ms + spread_ms * i as i64 / n);
            let refund = api.post(
                "/api/v1/refunds",
                &format!("refund-{run}-{i:03}"),
                None,
                serde_json::json!({
                    "payment_intent_ref": payment,
                    "reason": "requested_by_customer",
                    "access_effect": "retain",
                    "amount": {"currency": "EUR", "unit": "minor", "value": REFUND_MINOR.to_string()},
                    "scheduled_at": at.to_rfc3339(),
                }),
                201,
            )
            .await;
            assert_eq!(refund["status"], "scheduled", "{refund}");
            assert_eq!(refund["scope"], "partial", "{refund}");
            (payment, text(&refund, "refund_ref"))
        }));
    }
    let mut refunds = BTreeMap::new();
    for t in tasks {
        let (payment, refund) = t.await.unwrap();
        refunds.insert(payment, refund);
    }
    refunds
}

/// How many of `ours` (refund references) are in each status.
async fn refund_statuses(
    db: &mut sqlx::AnyConnection,
    ours: &BTreeSet<String>,
) -> BTreeMap<String, usize> {
    let rows: Vec<(String, String)> = sqlx::query_as("SELECT refund_ref, status FROM refunds")
        .fetch_all(&mut *db)
        .await
        .unwrap();
    let mut by_status = BTreeMap::new();
    for (refund, status) in rows {
        if ours.contains(&refund) {
            *by_status.entry(status).or_default() += 1;
        }
    }
    by_status
}

/// The store's refunds, payments, captures, jobs and refund events against
/// `refunds` (refund by payment). `settled`: every refund must have
/// succeeded and no job be left; else (right after a kill) each refund's
/// effects must match its status, whatever it is. Returns a one-line
/// summary.
async fn check_store(
    probe_url: &str,
    refunds: &BTreeMap<String, String>,
    endpoint: &str,
    settled: bool,
    problems: &mut Vec<String>,
) -> String {
    let mut db = probe(probe_url).await;

    // Refunds: ours, one per payment, of 500 each.
    let rows: Vec<(String, String, String, String, i64, Option<i64>)> = sqlx::query_as(
        "SELECT refund_ref, payment_intent_ref, capture_ref, status, amount_minor, executed_at \
         FROM refunds",
    )
    .fetch_all(&mut db)
    .await
    .unwrap();
    let by_ref: HashMap<String, &String> = refunds.iter().map(|(p, r)| (r.clone(), p)).collect();
    if rows.len() != refunds.len() {
        problems.push(format!(
            "{} refunds in the store, not {}",
            rows.len(),
            refunds.len()
        ));
    }
    // Status and capture of each refund, by refund.
    let mut status: HashMap<String, (String, String)> = HashMap::new();
    let mut by_status: BTreeMap<String, usize> = BTreeMap::new();
    for (refund, payment, capture, st, amount, executed_at) in rows {
        *by_status.entry(st.clone()).or_default() += 1;
        match by_ref.get(&refund) {
            None => problems.push(format!(
                "refund {refund} of {payment}, which no request made"
            )),
            Some(p) if **p != payment => {
                problems.push(format!("refund {refund} is of payment {payment}, not {p}"))
            }
            Some(_) => {}
        }
        if amount != REFUND_MINOR {
            problems.push(format!(
                "refund {refund} is of {amount}, not {REFUND_MINOR}"
            ));
        }
        let ok = if settled {
            st == "succeeded"
        } else {
            matches!(st.as_str(), "scheduled" | "pending" | "succeeded")
        };
        if !ok {
            problems.push(format!("refund {refund} of {payment} is {st}"));
        }
        if (st == "succeeded") != executed_at.is_some() {
            problems.push(format!(
                "refund {refund} is {st} with executed_at {executed_at:?}"
            ));
        }
        status.insert(refund, (st, capture));
    }
    let succeeded_of = |payment: &str| {
        refunds
            .get(payment)
            .and_then(|r| status.get(r))
            .is_some_and(|(st, _)| st == "succeeded")
    };

    // Payments: each has its one refund's amount refunded if it succeeded,
    // nothing else.
    let payments: Vec<(String, String, i64, i64)> = sqlx::query_as(
        "SELECT payment_intent_ref, status, amount_minor, amount_refunded_minor FROM payments",
    )
    .fetch_all(&mut db)
    .await
    .unwrap();
    if payments.len() != refunds.len() {
        problems.push(format!(
            "{} payments in the store, not {}",
            payments.len(),
            refunds.len()
        ));
    }
    for (payment, st, amount, refunded) in &payments {
        let want = if succeeded_of(payment) {
            REFUND_MINOR
        } else {
            0
        };
        if st != "succeeded" || *amount != PRICE_MINOR || *refunded != want {
            problems.push(format!(
                "payment {payment} is {st} of {amount} with {refunded} refunded, not {want}"
            ));
        }
    }

    // Captures: the same, and each holds its refund's amount reserved.
    let captures: Vec<(String, String, i64, i64)> = sqlx::query_as(
        "SELECT capture_ref, payment_intent_ref, amount_refunded_minor, amount_reserved_minor \
         FROM captures",
    )
    .fetch_all(&mut db)
    .await
    .unwrap();
    if captures.len() != refunds.len() {
        problems.push(format!(
            "{} captures in the store, not {}",
            captures.len(),
            refunds.len()
        ));
    }
    for (capture, payment, refunded, reserved) in &captures {
        let want = if succeeded_of(payment) {
            REFUND_MINOR
        } else {
            0
        };
        if *refunded != want || *reserved != REFUND_MINOR {
            problems.push(format!(
                "capture {capture} of {payment} has {refunded} refunded and {reserved} reserved, \
                 not {want} and {REFUND_MINOR}"
            ));
        }
        let refund_capture = refunds
            .get(payment)
            .and_then(|r| status.get(r))
            .map(|(_, c)| c);
        if refund_capture.is_some_and(|c| c != capture) {
            problems.push(format!(
                "capture {capture} of {payment}, but its refund names {refund_capture:?}"
            ));
        }
    }

    // Jobs: none when settled; else exactly the next step of each refund
    // that has one (start while scheduled, settle while pending).
    let jobs: Vec<(String, String, Option<String>, Option<i64>)> =
        sqlx::query_as("SELECT kind, subject_ref, lease_owner, lease_until FROM jobs")
            .fetch_all(&mut db)
            .await
            .unwrap();
    let leased = jobs
        .iter()
        .filter(|(_, _, owner, _)| owner.is_some())
        .count();
    let mut jobs_of: HashMap<String, Vec<String>> = HashMap::new();
    for (kind, subject, _, _) in &jobs {
        jobs_of
            .entry(subject.clone())
            .or_default()
            .push(kind.clone());
    }
    if settled && !jobs.is_empty() {
        problems.push(format!(
            "{} jobs are left after every refund succeeded: {jobs:?}",
            jobs.len()
        ));
    }
    if !settled {
        for (refund, (st, _)) in &status {
            let want: &[&str] = match st.as_str() {
                "scheduled" => &["refund.start"],
                "pending" => &["refund.settle"],
                _ => &[],
            };
            let have = jobs_of.remove(refund).unwrap_or_default();
            if have != want {
                problems.push(format!("refund {refund} is {st} with jobs {have:?}"));
            }
        }
        for (subject, kinds) in jobs_of {
            problems.push(format!("jobs {kinds:?} of {subject}, which is no refund"));
        }
    }

    // Events: per refund, one refund.created, and one refund.succeeded if
    // it succeeded (none else); never failed or canceled.
    let (events, sources) = read_events(&mut db, endpoint, problems).await;
    let event_summary = format!(
        "{} events ({} in the outbox, {} in the queue, {} in both, {} held deliveries)",
        events.len(),
        sources.outbox,
        sources.queued_pending + sources.queued_processed,
        sources.in_both,
        sources.deliveries
    );
    let mut of_refund: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    let mut refund_events = 0;
    for (event_ref, e) in &events {
        if !REFUND_EVENTS.contains(&e.event_type.as_str()) {
            continue;
        }
        refund_events += 1;
        let Some(data) = &e.data else {
            problems.push(format!(
                "event {event_ref} ({}) has no data: not in the outbox, fanned out from the \
                 queue, and no held delivery",
                e.event_type
            ));
            continue;
        };
        let refund = data["refund_ref"].as_str().unwrap_or_default().to_owned();
        if !by_ref.contains_key(&refund) {
            problems.push(format!(
                "event {event_ref} ({}) is of no refund of ours: {data}",
                e.event_type
            ));
            continue;
        }
        let want_status = e.event_type.trim_start_matches("refund.");
        let want_status = if want_status == "created" {
            "scheduled"
        } else {
            want_status
        };
        let amount = data["amount"]["value"]
            .as_str()
            .and_then(|v| v.parse().ok());
        if data["status"] != want_status || amount != Some(REFUND_MINOR) {
            problems.push(format!(
                "event {event_ref} ({}) carries {data}",
                e.event_type
            ));
        }
        of_refund
            .entry((refund, e.event_type.clone()))
            .or_default()
            .push(event_ref.clone());
    }
    for refund in by_ref.keys() {
        let succeeded = status.get(refund).is_some_and(|(st, _)| st == "succeeded");
        for event_type in REFUND_EVENTS {
            let want = match event_type {
                "refund.created" => 1,
                "refund.succeeded" => usize::from(succeeded),
                _ => 0,
            };
            let found = of_refund
                .get(&(refund.clone(), event_type.to_owned()))
                .cloned()
                .unwrap_or_default();
            if found.len() != want {
                problems.push(format!(
                    "refund {refund} ({}) has {} {event_type} events, not {want}: {found:?}",
                    status.get(refund).map_or("missing", |(s, _)| s.as_str()),
                    found.len()
                ));
            }
        }
    }
    drop(db.close().await);
    format!(
        "refunds {by_status:?}; {} jobs ({leased} leased); {refund_events} refund events of {event_summary}",
        jobs.len()
    )
}

/// The crash scenario (module docs, 1) against a store the environment
/// variables `envs` name; `probe_url` reads that store beside the server.
async fn crash_and_restart(label: &str, dir: &Path, envs: Envs, probe_url: &str) {
    let run = format!("{label}-{:08x}", rand_u32());
    let site = Site::new(dir, envs);
    let sandbox = site.bootstrap();

    let started = Instant::now();
    let mut first = site.serve("serve-1.log").await;
    let calls = Api::new(&site.api, &sandbox.secret);
    let shop = open_shop(&calls, &sandbox.environment_ref, &run).await;
    let payments = pay_all(&calls, &run, &shop.config, REFUNDS).await;
    let paid_after = started.elapsed();
    let refunds = refund_all(&calls, &run, &payments, 2_000, 2_000).await;
    let requested = Instant::now();
    let ours: BTreeSet<String> = refunds.values().cloned().collect();

    // 1. SIGKILL once a tenth of the refunds have succeeded: by then more
    //    are pending, and the last ones (due up to 4 s after their request)
    //    are still scheduled.
    let mut probe = probe(probe_url).await;
    // Looked at every 5 ms: the kill must land while refunds are pending.
    let poll = Poll::within(Duration::from_secs(20)).every(Duration::from_millis(5));
    loop {
        let by_status = refund_statuses(&mut probe, &ours).await;
        if by_status.get("succeeded").copied().unwrap_or(0) >= REFUNDS / 10 {
            break;
        }
        poll.tick(|| {
            format!(
                "after the refunds were requested, only {by_status:?}\n{}",
                first.log_tail()
            )
        })
        .await;
    }
    let pid = first.pid();
    first.kill_hard();
    let killed = Instant::now();
    let killed_after = killed - requested;
    let killed_at = Timestamp::now().millis();
    let at_kill = refund_statuses(&mut probe, &ours).await;
    // The jobs the killed server held: each was leased LEASE before its
    // lease ends, so how long before the kill it was taken.
    let leases: Vec<(String, i64)> =
        sqlx::query_as("SELECT kind, lease_until FROM jobs WHERE lease_owner IS NOT NULL")
            .fetch_all(&mut probe)
            .await
            .unwrap();
    let leases: Vec<String> = leases
        .iter()
        .map(|(kind, until)| {
            let taken = until - LEASE.as_millis() as i64;
            format!("{kind} leased {} ms before the kill", killed_at - taken)
        })
        .collect();
    drop(probe.close().await);
    let log_1 = first.log_tail();
    drop(first);
    assert!(
        at_kill.get("scheduled").copied().unwrap_or(0) > 0,
        "[{label}] the kill came after every refund had started: {at_kill:?}"
    );

    // 2. The store as the kill left it.
    let mut problems_at_kill = Vec::new();
    let counted_at_kill = check_store(
        probe_url,
        &refunds,
        &shop.endpoint,
        false,
        &mut problems_at_kill,
    )
    .await;

    // 3. The same store, a new process: every refund succeeds. A job the
    //    killed server had leased waits for its lease to end.
    let mut second = site.serve("serve-2.log").await;
    let restarted_after = killed.elapsed();
    let mut probe = self::probe(probe_url).await;
    // The lease runs on the restarted server's wall clock: waited out.
    let deadline = LEASE + Duration::from_secs(10);
    let poll =
        Poll::within(deadline.saturating_sub(killed.elapsed())).every(Duration::from_millis(20));
    loop {
        let by_status = refund_statuses(&mut probe, &ours).await;
        let jobs = count(&mut probe, "SELECT COUNT(*) FROM jobs").await;
        if by_status.get("succeeded") == Some(&REFUNDS) && jobs == 0 {
            break;
        }
        poll.tick(|| {
            format!(
                "[{label}] {} s after the kill, the refunds are {by_status:?} and {jobs} jobs are left\n{log_1}\n{}",
                deadline.as_secs(),
                second.log_tail()
            )
        })
        .await;
    }
    let done_after = killed.elapsed();
    drop(probe.close().await);

    // 4. The store, once the server has stopped.
    let log_2 = second.log_tail();
    let clean_exit = second.terminate_cleanly();
    let mut problems: Vec<String> = problems_at_kill
        .into_iter()
        .map(|p| format!("at the kill: {p}"))
        .collect();
    let counted = check_store(probe_url, &refunds, &shop.endpoint, true, &mut problems).await;

    say(&format!(
        "jobs crash [{label}]: {REFUNDS} payments after {} ms; SIGKILL (pid {pid}) {} ms after \
         the refunds were requested; store at the kill: {counted_at_kill} {leases:?}; restarted and ready \
         {} ms after the kill, every refund succeeded and no job left {} ms after the kill; \
         store at the end: {counted}; {} problems; total {} ms",
        paid_after.as_millis(),
        killed_after.as_millis(),
        restarted_after.as_millis(),
        done_after.as_millis(),
        problems.len(),
        started.elapsed().as_millis(),
    ));
    verdict(
        label,
        "with refunds across a crash",
        &problems,
        &format!("{log_1}\n{log_2}"),
        clean_exit,
    );
}

crash_tests!(
    embedded_crash_with_scheduled_refunds_runs_each_once,
    fleet_crash_with_scheduled_refunds_runs_each_once,
    on_fleet_store("fleet jobs crash test", "billing_jobs", 13),
    |label, dir, envs, url, _fleet| crash_and_restart(label, dir, envs, url)
);

/// The two-dispatcher scenario (module docs, 2).
async fn two_dispatchers(dir: &Path, store_url: &str, queue_url: &str, scheduler: &str) {
    let run = format!("fleet2-{:08x}", rand_u32());
    let site = Site::new(dir, fleet_env(store_url, queue_url, scheduler));
    let sandbox = site.bootstrap();

    let started = Instant::now();
    let mut processes: Vec<Process> = vec![
        site.role("api", "api.log"),
        site.role("dispatcher", "dispatcher-1.log"),
        site.role("dispatcher", "dispatcher-2.log"),
    ];
    let logs = |processes: &[Process]| {
        processes
            .iter()
            .map(Process::log_tail)
            .collect::<Vec<_>>()
            .join("\n")
    };
    wait_ready(&client(), &site.api, || logs(&processes)).await;
    let calls = Api::new(&site.api, &sandbox.secret);
    let shop = open_shop(&calls, &sandbox.environment_ref, &run).await;
    let payments = pay_all(&calls, &run, &shop.config, FLEET_REFUNDS).await;
    let paid_after = started.elapsed();
    let refunds = refund_all(&calls, &run, &payments, 1_000, 2_000).await;
    let requested = Instant::now();
    let ours: BTreeSet<String> = refunds.values().cloned().collect();

    // Every refund succeeded, no job left, and every refund.succeeded
    // relayed through the broker into the events queue; the owners of the
    // leases seen on the way (which runners took jobs).
    let mut probe = probe(store_url).await;
    let mut owners: BTreeSet<String> = BTreeSet::new();
    let poll = Poll::within(Duration::from_secs(30)).every(Duration::from_millis(10));
    loop {
        let leased: Vec<(String,)> =
            sqlx::query_as("SELECT lease_owner FROM jobs WHERE lease_owner IS NOT NULL")
                .fetch_all(&mut probe)
                .await
                .unwrap();
        owners.extend(leased.into_iter().map(|(o,)| o));
        let by_status = refund_statuses(&mut probe, &ours).await;
        let jobs = count(&mut probe, "SELECT COUNT(*) FROM jobs").await;
        let outbox = count(&mut probe, "SELECT COUNT(*) FROM outbox").await;
        let queued = count(
            &mut probe,
            "SELECT COUNT(*) FROM events WHERE public_event_type = 'refund.succeeded'",
        )
        .await;
        if by_status.get("succeeded") == Some(&FLEET_REFUNDS)
            && jobs == 0
            && outbox == 0
            && queued >= FLEET_REFUNDS as i64
        {
            break;
        }
        poll.tick(|| {
            format!(
                "after the refunds were requested: {by_status:?}, {jobs} jobs, {outbox} events \
                 in the outbox, {queued} refund.succeeded in the queue\n{}",
                logs(&processes)
            )
        })
        .await;
    }
    let done_after = requested.elapsed();
    drop(probe.close().await);
    // Stop everything: each process finishes what it holds first, so that
    // anything still on its way (a second run of a job, its event) is in
    // the store when it is checked.
    let log = logs(&processes);
    let clean: Vec<bool> = processes
        .iter_mut()
        .map(|p| p.terminate_cleanly())
        .collect();

    let mut problems = Vec::new();
    let counted = check_store(store_url, &refunds, &shop.endpoint, true, &mut problems).await;
    say(&format!(
        "jobs two dispatchers: {FLEET_REFUNDS} payments after {} ms; every refund succeeded, no \
         job left and every refund.succeeded queued {} ms after the refunds were requested; \
         {} lease owners seen; store: {counted}; {} problems; total {} ms",
        paid_after.as_millis(),
        done_after.as_millis(),
        owners.len(),
        problems.len(),
        started.elapsed().as_millis(),
    ));
    assert!(
        problems.is_empty(),
        "{} problems with refunds run by two dispatchers:\n{}\n{log}",
        problems.len(),
        problems.join("\n")
    );
    assert!(
        clean.iter().all(|c| *c),
        "not every process exited cleanly on SIGTERM (api, dispatcher, dispatcher): {clean:?}\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_dispatchers_run_each_refund_job_once() {
    if !fleet("fleet two-dispatcher jobs test") {
        return;
    }
    let db = FreshDatabase::create("billing_jobs2").await;
    let vhost = FreshVhost::create("billing_jobs2");
    let scheduler = format!("{REDIS_URL}/14");
    fresh_redis_schedule(&scheduler, &db.url).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_owned();
    let (store_url, queue_url) = (db.url.clone(), vhost.url.clone());
    let outcome =
        tokio::spawn(
            async move { two_dispatchers(&path, &store_url, &queue_url, &scheduler).await },
        )
        .await;
    db.remove().await;
    vhost.remove();
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}
