//! Receiver protection (contract 13.2) kept by running dispatchers, on
//! every backend and in a fleet of Redis dispatchers: an endpoint's
//! `rate_limit` holds in any second, its `max_in_flight` at every moment;
//! a `429` with `Retry-After` holds the whole endpoint off and halves its
//! effective rate (health shows both); waiting for room is never an
//! attempt.
//!
//! These tests wait on real dispatchers and a real receiver: the limits
//! are measured in wall-clock arrivals, which is what a receiver sees.

use billing_tests::kit::api::*;
use billing_tests::kit::{get, text};
use billing_tests::poll::wait_until;
use billing_tests::receiver::{Behaviour, Received, TestReceiver};
use billing_tests::{backend_tests, DispatcherHandle, TestApp};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const TYPE: &str = "refund.created";

/// An endpoint for `url` with `settings` (its limits), subscribed to TYPE.
async fn limited_endpoint(app: &TestApp, url: &str, settings: Value) -> String {
    let mut body = json!({ "url": url });
    for (k, v) in settings.as_object().expect("an object") {
        body[k] = v.clone();
    }
    let r = app.post(ENDPOINTS, body).send().await;
    r.expect(201);
    let endpoint = text(&r.data()["endpoint_ref"]);
    app.subscribe(&endpoint, TYPE, 1).await;
    endpoint
}

async fn publish(app: &TestApp, n: usize) {
    let data = domain::webhook::catalogue::example(TYPE, 1).expect("example");
    for _ in 0..n {
        app.publish(TYPE, data.clone()).await;
    }
}

/// Waits until `receiver` has had `n` requests.
async fn received(receiver: &TestReceiver, n: usize, within: Duration) -> Vec<Received> {
    wait_until(
        within,
        || format!("{} of {n} requests", receiver.count()),
        || async { (receiver.count() >= n).then(|| receiver.received()) },
    )
    .await
}

/// The most arrivals in any window of `window` (arrival times sorted).
fn most_in_any(received: &[Received], window: Duration) -> usize {
    let mut at: Vec<Instant> = received.iter().map(|r| r.at).collect();
    at.sort();
    let mut most = 0;
    let mut first = 0;
    for (i, t) in at.iter().enumerate() {
        while *t - at[first] >= window {
            first += 1;
        }
        most = most.max(i + 1 - first);
    }
    most
}

async fn health(app: &TestApp, endpoint: &str) -> Value {
    let r = get(app, &format!("{ENDPOINTS}/{endpoint}/health")).await;
    r.expect(200);
    r.data().clone()
}

/// Every delivery of the endpoint was attempted exactly once: waiting for
/// room moved no retry and counted no failure.
async fn each_attempted_once(app: &TestApp, endpoint: &str, n: usize) {
    let all = billing_tests::kit::deliveries(app, endpoint).await;
    assert_eq!(all.len(), n);
    for d in all {
        assert_eq!(d["status"], "succeeded", "{d}");
        assert_eq!(d["attempt_count"], 1, "{d}");
    }
}

fn start(app: &TestApp) -> DispatcherHandle {
    app.start_dispatcher(app.dispatch_settings("0s,1s,1s"))
}

/// 45 events at a limit of 15 a second: never more than 15 requests in
/// any second, and about three seconds in all (not far below the limit).
async fn a_rate_limit_holds_in_any_second(app: TestApp) {
    let receiver = TestReceiver::start(Behaviour::Status(204)).await;
    let endpoint = limited_endpoint(&app, &receiver.url(), json!({"rate_limit": 15})).await;
    let dispatcher = start(&app);
    let began = Instant::now();
    publish(&app, 45).await;
    let got = received(&receiver, 45, Duration::from_secs(30)).await;
    let took = began.elapsed();
    assert!(
        most_in_any(&got, Duration::from_secs(1)) <= 15,
        "{} in one second",
        most_in_any(&got, Duration::from_secs(1))
    );
    assert!(
        took >= Duration::from_millis(1900),
        "45 at 15/s in {took:?}"
    );
    assert!(took < Duration::from_secs(10), "45 at 15/s took {took:?}");
    dispatcher.shutdown().await;
    each_attempted_once(&app, &endpoint, 45).await;
    assert_eq!(health(&app, &endpoint).await["effective_rate"], 15.0);
}

/// A receiver that answers after 300 ms, limited to 2 in flight: never a
/// third request while two are open.
async fn max_in_flight_holds_at_every_moment(app: TestApp) {
    let receiver = TestReceiver::start(Behaviour::Hang(Duration::from_millis(300))).await;
    let endpoint = limited_endpoint(&app, &receiver.url(), json!({"max_in_flight": 2})).await;
    let dispatcher = start(&app);
    publish(&app, 8).await;
    let got = received(&receiver, 8, Duration::from_secs(30)).await;
    // Each request stays open 300 ms from its arrival: three arrivals
    // within less than that would be three open at once. (A little less,
    // for the time between the receiver's answer and the dispatcher's
    // next start.)
    assert!(
        most_in_any(&got, Duration::from_millis(280)) <= 2,
        "{} open at once",
        most_in_any(&got, Duration::from_millis(280))
    );
    dispatcher.shutdown().await;
    wait_until(
        Duration::from_secs(10),
        || "the attempts recorded".to_owned(),
        || async {
            let all = billing_tests::kit::deliveries(&app, &endpoint).await;
            all.iter().all(|d| d["status"] == "succeeded").then_some(())
        },
    )
    .await;
    each_attempted_once(&app, &endpoint, 8).await;
}

/// A `429` with `Retry-After: 2` holds the whole endpoint off: deliveries
/// of other events wait too, and none starts before the hold ends;
/// health shows `throttled_until` and a halved `effective_rate`, and an
/// endpoint without limits shows neither.
async fn a_429_holds_the_whole_endpoint_off(app: TestApp) {
    let receiver = TestReceiver::start(Behaviour::RetryAfter(429, 2)).await;
    let endpoint = limited_endpoint(&app, &receiver.url(), json!({"rate_limit": 100})).await;
    let calm = health(&app, &endpoint).await;
    assert!(calm["throttled_until"].is_null(), "{calm}");
    assert_eq!(calm["effective_rate"], 100.0);
    let dispatcher = start(&app);
    publish(&app, 1).await;
    received(&receiver, 1, Duration::from_secs(10)).await;
    let pushed = wait_until(
        Duration::from_secs(10),
        || "health to show the hold-off".to_owned(),
        || async {
            let h = health(&app, &endpoint).await;
            (!h["throttled_until"].is_null()).then_some(h)
        },
    )
    .await;
    assert_eq!(pushed["effective_rate"], 50.0, "{pushed}");
    let until = domain::Timestamp::parse(&text(&pushed["throttled_until"])).expect("a timestamp");
    receiver.set(Behaviour::Status(204));
    publish(&app, 4).await;
    let got = received(&receiver, 6, Duration::from_secs(20)).await;
    let first = got[0].at;
    for r in &got[1..] {
        // Arrival times are the test's clock; the hold-off is 2 s after
        // the first answer, so no later request arrives within 1.9 s.
        assert!(
            r.at - first >= Duration::from_millis(1900),
            "a request {:?} after the 429",
            r.at - first
        );
    }
    assert!(domain::Timestamp::now() >= until);
    dispatcher.shutdown().await;
    let all = billing_tests::kit::deliveries(&app, &endpoint).await;
    let attempts: i64 = all
        .iter()
        .map(|d| d["attempt_count"].as_i64().unwrap())
        .sum();
    assert_eq!(attempts, 6, "one 429, then each once: {all:?}");

    let plain = limited_endpoint(&app, &receiver.url(), json!({})).await;
    let h = health(&app, &plain).await;
    assert!(
        h["effective_rate"].is_null() && h["throttled_until"].is_null(),
        "{h}"
    );
}

backend_tests!(
    a_rate_limit_holds_in_any_second,
    max_in_flight_holds_at_every_moment,
    a_429_holds_the_whole_endpoint_off,
);

/// Three dispatchers over one Redis schedule: the limit holds across them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleets_dispatchers_share_the_limit() {
    let Some(app) = TestApp::spawn_fleet().await else {
        return;
    };
    let (schedule, _) = billing_tests::redis::fresh_schedule(&app.store).await;
    let receiver = TestReceiver::start(Behaviour::Status(204)).await;
    let endpoint = limited_endpoint(&app, &receiver.url(), json!({"rate_limit": 20})).await;
    let fleet: Vec<DispatcherHandle> = (0..3)
        .map(|_| app.start_redis_dispatcher(app.dispatch_settings("0s,1s,1s"), schedule.clone()))
        .collect();
    let began = Instant::now();
    publish(&app, 60).await;
    let got = received(&receiver, 60, Duration::from_secs(30)).await;
    let took = began.elapsed();
    // The contract bounds when attempts start; the receiver stamps when
    // its handler runs, on the same two worker threads as three
    // dispatchers and the API. The governor's window keeps 50 ms for the
    // way from admission to receiver; counting in 900 ms windows leaves
    // this loaded runtime 150 ms. Dispatchers that each kept a limit of
    // their own would still send 60 within about a second, and the time
    // the 60 take bounds the fleet's rate over the whole run.
    let most = most_in_any(&got, Duration::from_millis(900));
    assert!(most <= 20, "{most} in 900 ms across the fleet");
    assert!(
        took >= Duration::from_millis(1900),
        "60 at 20/s in {took:?}"
    );
    for d in fleet {
        d.shutdown().await;
    }
    each_attempted_once(&app, &endpoint, 60).await;
    billing_tests::redis::delete_prefix(schedule.key_prefix()).await;
}
