//! A receiver that fails a fraction of its requests is not "down". It
//! answers 500 to 20 % of requests, at random and independently for each
//! one, and 204 to the others. Its successes must not be held back: the
//! circuit breaker must not open on 5xx answers mixed with 2xx ones. Retries
//! must go out on their schedule (`0s,1s,1s,2s`, ±20 % jitter): never
//! early, and late by little enough that the p99 of publish → first 2xx
//! receipt stays within 2 s of the schedule's total delay.
//!
//! 2,000 events go to one endpoint. Every event must end with exactly one
//! 2xx, except those whose four attempts all got 500 (about 0.2⁴ of them,
//! three or so). The API must show those as `failed` and the others as
//! `succeeded`. No event may be attempted after its success or more often
//! than the schedule allows.
//!
//! The test runs in both modes: embedded (SQLite, the store's own schedule)
//! and fleet (PostgreSQL and the Redis schedule; only with
//! BILLING_TEST_FLEET=1, and then unreachable services are a failure).

use billing_tests::poll::Poll;
use billing_tests::receiver::{Behaviour, Received, TestReceiver};
use billing_tests::{Backend, DispatcherHandle, TestApp};
use dispatcher::DispatchSettings;
use serde_json::json;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::time::{Duration, Instant};

const EVENTS: usize = 2_000;
/// Published together; batches follow one another.
const BATCH: usize = 100;
/// The fraction of requests the receiver answers 500.
const FAIL_FRACTION: f64 = 0.2;
const EVENT_TYPE: &str = "order.created";
/// Delays before each attempt: 4 attempts, 4 s of delay in all.
const SCHEDULE: &str = "0s,1s,1s,2s";
const DELAYS: [Duration; 4] = [
    Duration::ZERO,
    Duration::from_secs(1),
    Duration::from_secs(1),
    Duration::from_secs(2),
];
const ATTEMPTS: usize = DELAYS.len();
/// The largest p99 of publish → first 2xx: the schedule's total delay plus 2 s.
const ALLOWED_P99: Duration = Duration::from_secs(4 + 2);
/// How early a retry may arrive below its jittered minimum (80 % of its
/// delay): the store's timestamps are whole milliseconds.
const EARLY_TOLERANCE: Duration = Duration::from_millis(50);
/// From the first publish to the end of the wait.
const DEADLINE: Duration = Duration::from_secs(60);

/// Nearest-rank percentile `p` of sorted `values` (zero when empty).
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    billing_tests::percentile(sorted, p).unwrap_or_default()
}

/// What the receiver saw, per event, in order of arrival.
#[derive(Default)]
struct Tally {
    /// Requests of `received()` already absorbed.
    absorbed: usize,
    by_event: HashMap<String, Vec<(Instant, u16)>>,
    /// Requests naming no published event.
    unknown: usize,
}

impl Tally {
    fn absorb(&mut self, got: &[Received], published: &HashMap<String, Instant>) {
        for r in &got[self.absorbed.min(got.len())..] {
            match r.json()["event_ref"].as_str() {
                Some(event_ref) if published.contains_key(event_ref) => self
                    .by_event
                    .entry(event_ref.to_owned())
                    .or_default()
                    .push((r.at, r.status)),
                _ => self.unknown += 1,
            }
        }
        self.absorbed = got.len();
    }

    /// Every event answered 2xx once, or answered 500 on every attempt.
    fn complete(&self, published: &HashMap<String, Instant>) -> bool {
        published.keys().all(|e| {
            self.by_event.get(e).is_some_and(|rs| {
                rs.iter().any(|(_, s)| (200..300).contains(s)) || rs.len() >= ATTEMPTS
            })
        })
    }
}

/// Every delivery of `endpoint`: event_ref → status, through the API.
async fn delivery_statuses(app: &TestApp, endpoint: &str) -> HashMap<String, String> {
    let mut out = HashMap::with_capacity(EVENTS);
    let mut cursor = String::new();
    loop {
        let r = app
            .get(&format!(
                "/api/v1/webhook_endpoints/{endpoint}/deliveries?limit=100{cursor}"
            ))
            .send()
            .await;
        r.expect(200);
        for d in r.data()["items"].as_array().expect("items") {
            out.insert(
                d["event_ref"].as_str().expect("event_ref").to_owned(),
                d["status"].as_str().expect("status").to_owned(),
            );
        }
        match r.data()["next_cursor"].as_str() {
            Some(c) => cursor = format!("&cursor={c}"),
            None => return out,
        }
    }
}

/// True when every event has its delivery and none is still due.
fn settled(statuses: &HashMap<String, String>) -> bool {
    statuses.len() == EVENTS && statuses.values().all(|s| s == "succeeded" || s == "failed")
}

/// The figures of one run.
struct Report {
    mode: &'static str,
    publish_took: Duration,
    took: Duration,
    timed_out: bool,
    requests: usize,
    answered_500: usize,
    delivered: usize,
    /// Every attempt answered 500, none 2xx.
    failed_all: HashSet<String>,
    /// Neither delivered nor failed on every attempt.
    missing: usize,
    /// Delivered events by the attempt that succeeded (1-based).
    by_attempt: [usize; ATTEMPTS],
    p50: Duration,
    p99: Duration,
    max: Duration,
    first_attempt_p99: Duration,
    /// Events answered 2xx more than once.
    repeated_successes: usize,
    /// Events attempted again after a 2xx.
    attempted_after_success: usize,
    /// Events attempted more often than the schedule allows.
    over_attempted: usize,
    /// Retries that arrived before 80 % of their delay (less a tolerance).
    early_retries: usize,
    /// The largest lateness of a retry past 120 % of its delay.
    latest_retry: Duration,
    unknown_requests: usize,
    /// Deliveries by status, through the API.
    statuses: BTreeMap<String, usize>,
    /// Events whose delivery the API shows `failed`.
    api_failed: HashSet<String>,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{mode}: {events} events published in {publish:?}, {state} after {took:?}; \
             {requests} requests ({r500} answered 500); delivered {delivered}, \
             failed on all {ATTEMPTS} attempts {failed}, missing {missing}; \
             successes by attempt {by_attempt:?}; publish -> first 2xx p50 {p50:?} p99 {p99:?} \
             max {max:?} (allowed p99 {ALLOWED_P99:?}); publish -> first attempt p99 {first:?}; \
             repeated successes {rep}, attempted after success {after}, over-attempted {over}, \
             early retries {early}, latest retry {late:?} past its delay +20 %, \
             requests for unknown events {unknown}; deliveries by status (API) {statuses:?}",
            mode = self.mode,
            events = EVENTS,
            publish = self.publish_took,
            state = if self.timed_out {
                "NOT settled"
            } else {
                "settled"
            },
            took = self.took,
            requests = self.requests,
            r500 = self.answered_500,
            delivered = self.delivered,
            failed = self.failed_all.len(),
            missing = self.missing,
            by_attempt = self.by_attempt,
            p50 = self.p50,
            p99 = self.p99,
            max = self.max,
            first = self.first_attempt_p99,
            rep = self.repeated_successes,
            after = self.attempted_after_success,
            over = self.over_attempted,
            early = self.early_retries,
            late = self.latest_retry,
            unknown = self.unknown_requests,
            statuses = self.statuses,
        )
    }
}

/// Publishes `EVENTS` events, `BATCH` at a time; returns each event's
/// publish instant (when its acceptance began).
async fn publish_all(app: &TestApp) -> HashMap<String, Instant> {
    let mut published = HashMap::with_capacity(EVENTS);
    for _ in 0..EVENTS / BATCH {
        let batch = (0..BATCH).map(|_| async {
            let (event_ref, envelope) = app.envelope(EVENT_TYPE, json!({}));
            let at = Instant::now();
            app.accept(&envelope).await;
            (event_ref, at)
        });
        published.extend(futures::future::join_all(batch).await);
    }
    assert_eq!(published.len(), EVENTS);
    published
}

/// One run: a receiver failing `FAIL_FRACTION` of requests, one endpoint,
/// `EVENTS` events, the dispatcher `start` makes. Waits until everything
/// settled (or `DEADLINE`) and measures.
async fn run(
    app: &TestApp,
    mode: &'static str,
    start: impl FnOnce(DispatchSettings) -> DispatcherHandle,
) -> Report {
    let receiver = TestReceiver::start(Behaviour::FailRandomly(FAIL_FRACTION)).await;
    let (endpoint, _) = app
        .subscribed_endpoint(&receiver.url(), EVENT_TYPE, 1)
        .await;
    let dispatcher = start(app.dispatch_settings(SCHEDULE));
    // The deliveries that run out of retries are announced
    // (`webhook_delivery.failed`, into the outbox), so the relay runs as in
    // the service: the pipeline is idle only once they are relayed.
    let stop_relay = tokio_util::sync::CancellationToken::new();
    let relay = tokio::spawn(dispatcher::outbox::relay(
        app.store.clone(),
        dispatcher::outbox::Target::Queue(app.queue.clone()),
        stop_relay.clone(),
    ));

    let began = Instant::now();
    let published = publish_all(app).await;
    let publish_took = began.elapsed();

    let poll =
        Poll::within(DEADLINE.saturating_sub(began.elapsed())).every(Duration::from_millis(100));
    let mut tally = Tally::default();
    let statuses = loop {
        tally.absorb(&receiver.received(), &published);
        if tally.complete(&published) {
            let statuses = delivery_statuses(app, &endpoint).await;
            if settled(&statuses) {
                break Some(statuses);
            }
        }
        if !poll.next().await {
            break None;
        }
    };
    let took = began.elapsed();
    let timed_out = statuses.is_none();
    if !timed_out {
        // Every delivery has its last status: nothing is left due, so
        // whatever is sent after this is a stray attempt; the shutdown
        // lets one in flight land.
        app.eventually(5, || async { app.idle().await.then_some(()) })
            .await;
    }
    dispatcher.shutdown().await;
    stop_relay.cancel();
    relay.await.expect("the relay stops");
    let got = receiver.received();
    tally.absorb(&got, &published);
    let statuses = delivery_statuses(app, &endpoint).await;

    let mut report = Report {
        mode,
        publish_took,
        took,
        timed_out,
        requests: got.len(),
        answered_500: got.iter().filter(|r| r.status == 500).count(),
        delivered: 0,
        failed_all: HashSet::new(),
        missing: 0,
        by_attempt: [0; ATTEMPTS],
        p50: Duration::ZERO,
        p99: Duration::ZERO,
        max: Duration::ZERO,
        first_attempt_p99: Duration::ZERO,
        repeated_successes: 0,
        attempted_after_success: 0,
        over_attempted: 0,
        early_retries: 0,
        latest_retry: Duration::ZERO,
        unknown_requests: tally.unknown,
        statuses: BTreeMap::new(),
        api_failed: HashSet::new(),
    };
    for status in statuses.values() {
        *report.statuses.entry(status.clone()).or_default() += 1;
    }
    report.api_failed = statuses
        .iter()
        .filter(|(_, s)| *s == "failed")
        .map(|(e, _)| e.clone())
        .collect();

    let mut latencies = Vec::with_capacity(EVENTS);
    let mut first_attempts = Vec::with_capacity(EVENTS);
    for (event_ref, t0) in &published {
        let mut requests = tally.by_event.get(event_ref).cloned().unwrap_or_default();
        requests.sort_by_key(|(at, _)| *at);
        if let Some((at, _)) = requests.first() {
            first_attempts.push(at.saturating_duration_since(*t0));
        }
        let successes: Vec<usize> = (0..requests.len())
            .filter(|&i| (200..300).contains(&requests[i].1))
            .collect();
        if requests.len() > ATTEMPTS {
            report.over_attempted += 1;
        }
        if successes.len() > 1 {
            report.repeated_successes += 1;
        }
        for (i, pair) in requests.windows(2).enumerate() {
            // The delay before attempt i + 2, counted from attempt i + 1.
            let Some(delay) = DELAYS.get(i + 1) else {
                break;
            };
            let gap = pair[1].0.saturating_duration_since(pair[0].0);
            if gap + EARLY_TOLERANCE < delay.mul_f64(0.8) {
                report.early_retries += 1;
            }
            report.latest_retry = report
                .latest_retry
                .max(gap.saturating_sub(delay.mul_f64(1.2)));
        }
        match successes.first() {
            Some(&i) => {
                report.delivered += 1;
                if i < ATTEMPTS {
                    report.by_attempt[i] += 1;
                }
                if requests.len() > i + 1 {
                    report.attempted_after_success += 1;
                }
                latencies.push(requests[i].0.saturating_duration_since(*t0));
            }
            None if requests.len() >= ATTEMPTS => {
                report.failed_all.insert(event_ref.clone());
            }
            None => report.missing += 1,
        }
    }
    latencies.sort_unstable();
    first_attempts.sort_unstable();
    report.p50 = percentile(&latencies, 50.0);
    report.p99 = percentile(&latencies, 99.0);
    report.max = latencies.last().copied().unwrap_or_default();
    report.first_attempt_p99 = percentile(&first_attempts, 99.0);
    report
}

/// The assertions on a run's figures; the panic message carries them all.
fn check(report: &Report) {
    println!("{report}");
    let mut problems = Vec::new();
    if report.timed_out {
        problems.push(format!(
            "not every event was delivered or failed on every attempt (with the API agreeing) within {DEADLINE:?}"
        ));
    }
    if report.missing > 0 {
        problems.push(format!(
            "{} events were neither delivered nor failed on all {ATTEMPTS} attempts",
            report.missing
        ));
    }
    if report.p99 > ALLOWED_P99 {
        problems.push(format!(
            "p99 of publish -> first 2xx is {:?}, more than {ALLOWED_P99:?}",
            report.p99
        ));
    }
    for (count, what) in [
        (
            report.repeated_successes,
            "events answered 2xx more than once",
        ),
        (
            report.attempted_after_success,
            "events attempted after their 2xx",
        ),
        (
            report.over_attempted,
            "events attempted more often than the schedule allows",
        ),
        (report.early_retries, "retries sent before their delay"),
        (
            report.unknown_requests,
            "requests for events never published",
        ),
    ] {
        if count > 0 {
            problems.push(format!("{count} {what}"));
        }
    }
    let api_succeeded = report.statuses.get("succeeded").copied().unwrap_or(0);
    if !report.timed_out
        && (report.api_failed != report.failed_all || api_succeeded != report.delivered)
    {
        problems.push(format!(
            "the API's statuses disagree with the receiver: {api_succeeded} succeeded and {} failed \
             (failed only in the API: {:?}; failed only at the receiver: {:?})",
            report.api_failed.len(),
            report.api_failed.difference(&report.failed_all).collect::<Vec<_>>(),
            report.failed_all.difference(&report.api_failed).collect::<Vec<_>>(),
        ));
    }
    // The receiver itself: about FAIL_FRACTION of first attempts fail.
    let first_failed = EVENTS - report.by_attempt[0];
    let fraction = first_failed as f64 / EVENTS as f64;
    if !report.timed_out && !(0.1..=0.3).contains(&fraction) {
        problems.push(format!(
            "{fraction:.3} of first attempts failed, far from the receiver's {FAIL_FRACTION}"
        ));
    }
    assert!(problems.is_empty(), "{}\n{report}", problems.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_partial_failure_delivers_every_success_on_schedule() {
    let _alone = crate::alone().await;
    let app = TestApp::spawn(Backend::Sqlite).await;
    let report = run(&app, "embedded (SQLite)", |s| app.start_dispatcher(s)).await;
    check(&report);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_partial_failure_delivers_every_success_on_schedule() {
    let _alone = crate::alone().await;
    let Some(app) = TestApp::spawn_fleet().await else {
        return;
    };
    let (schedule, prefix) = billing_tests::redis::fresh_schedule(&app.store).await;
    let report = run(&app, "fleet (PostgreSQL + Redis)", |s| {
        app.start_redis_dispatcher(s, schedule.clone())
    })
    .await;
    billing_tests::redis::delete_prefix(&prefix).await;
    check(&report);
}
