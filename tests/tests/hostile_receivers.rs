//! Receivers that attack the dispatcher (issue 19), on every backend:
//!
//! - DNS rebinding: a name resolving to a private address when the
//!   dispatcher connects is never reached, on its first connection or on a
//!   later one after the name was rebound; an answer mixing an admitted and
//!   a private address reaches only the admitted one. Names are answered
//!   by a scripted lookup (`DispatchSettings::lookup`), never by real DNS;
//!   127.0.0.2 is admitted by name (`admitted_addresses`) to stand for a
//!   public address, while private networks are refused as in production.
//! - A body that never ends (one byte a second) is cut at the attempt's
//!   time-out; the status decides the attempt; a body sent as fast as the
//!   dispatcher takes it is read no further than the 1 KiB excerpt.
//! - A TLS handshake never answered fails within the time-out, saying so.
//! - Beside each hostile receiver, a healthy endpoint gets its deliveries
//!   at once.
//!
//! Many slow endpoints beside a healthy one: see `slow_endpoints` below
//! (SQLite only, like `isolation.rs`) and `benches/slow_receivers.rs`.

use billing_tests::kit::{attempts, deliveries, newest_delivery, text};
use billing_tests::receiver::{Behaviour, Script, ScriptedReceiver, TestReceiver};
use billing_tests::{backend_tests, TestApp};
use dispatcher::sending::Lookup;
use futures::future::BoxFuture;
use serde_json::Value;
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Stands for a public address: admitted by name in these tests.
const PUBLIC: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
/// A private address: refused unless private networks are allowed.
const PRIVATE: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const EVENT_TYPE: &str = "payment.succeeded";

fn payment() -> Value {
    domain::webhook::catalogue::example(EVENT_TYPE, 2).expect("example")
}

/// A name server for one test: each name's answers in turn, the last one
/// again once they are used up. Counts the lookups.
#[derive(Default)]
struct ScriptedDns {
    answers: Mutex<HashMap<String, VecDeque<Vec<IpAddr>>>>,
    lookups: AtomicUsize,
}

impl ScriptedDns {
    fn new(name: &str, answers: &[&[IpAddr]]) -> Arc<ScriptedDns> {
        let dns = ScriptedDns::default();
        dns.answers.lock().unwrap().insert(
            name.to_owned(),
            answers.iter().map(|a| a.to_vec()).collect(),
        );
        Arc::new(dns)
    }

    fn lookups(&self) -> usize {
        self.lookups.load(Ordering::SeqCst)
    }
}

impl Lookup for ScriptedDns {
    fn lookup(&self, host: &str) -> BoxFuture<'static, std::io::Result<Vec<IpAddr>>> {
        self.lookups.fetch_add(1, Ordering::SeqCst);
        let answer = match self.answers.lock().unwrap().get_mut(host) {
            Some(script) if script.len() > 1 => script.pop_front(),
            Some(script) => script.front().cloned(),
            None => None,
        };
        Box::pin(async move { answer.ok_or_else(|| std::io::ErrorKind::NotFound.into()) })
    }
}

/// The harness's settings with private networks refused (as in
/// production), `PUBLIC` admitted and names answered by `dns`.
fn guarded_settings(
    app: &TestApp,
    schedule: &str,
    dns: Arc<ScriptedDns>,
) -> dispatcher::DispatchSettings {
    let mut settings = app.dispatch_settings(schedule);
    settings.allow_private_networks = false;
    settings.admitted_addresses = vec![PUBLIC];
    settings.lookup = dns;
    settings
}

/// A receiver on `PUBLIC` and one on `PRIVATE`, on the same port, so that
/// one url reaches either, depending on what its name resolves to.
async fn on_one_port(public: Script, private: Script) -> (ScriptedReceiver, ScriptedReceiver) {
    for _ in 0..50 {
        let on_public = ScriptedReceiver::start_at(SocketAddr::new(PUBLIC, 0), public)
            .await
            .expect("bind 127.0.0.2");
        let same_port = SocketAddr::new(PRIVATE, on_public.addr.port());
        if let Ok(on_private) = ScriptedReceiver::start_at(same_port, private).await {
            return (on_public, on_private);
        }
    }
    panic!("no port free on both 127.0.0.2 and 127.0.0.1");
}

/// Waits until the endpoint has `count` deliveries, all with `status`.
async fn settled_all(app: &TestApp, endpoint: &str, count: usize, status: &str) -> Vec<Value> {
    app.eventually(20, || async {
        let items = deliveries(app, endpoint).await;
        (items.len() == count && items.iter().all(|d| d["status"] == status)).then_some(items)
    })
    .await
}

fn error_of(attempt: &Value) -> &str {
    attempt["error"].as_str().unwrap_or("")
}

/// The first connection resolves the name to a private address: refused on
/// every attempt, the receiver there never sees a connection.
async fn a_name_resolving_to_a_private_address_is_never_reached(app: TestApp) {
    let private = ScriptedReceiver::start(Script::AnswerAndClose(204)).await;
    let dns = ScriptedDns::new("private.test", &[&[PRIVATE]]);
    let url = format!("http://private.test:{}/hook", private.addr.port());
    let (endpoint, _) = app.subscribed_endpoint(&url, EVENT_TYPE, 2).await;
    let dispatcher = app.start_dispatcher(guarded_settings(&app, "0s,100ms", dns.clone()));
    app.publish(EVENT_TYPE, payment()).await;
    let d = settled_all(&app, &endpoint, 1, "failed").await;
    dispatcher.shutdown().await;

    let tried = attempts(&app, &text(&d[0]["delivery_ref"])).await;
    assert_eq!(tried.len(), 2, "{tried:?}");
    for a in &tried {
        assert_eq!(a["status"], "failed");
        assert_eq!(a["response_status"], Value::Null);
        assert!(
            error_of(a).contains("resolves only to forbidden addresses"),
            "{a}"
        );
        assert!(!error_of(a).contains("127.0.0.1"), "no address named: {a}");
    }
    assert_eq!(
        dns.lookups(),
        2,
        "the name is looked up for each connection"
    );
    assert_eq!(
        private.connections(),
        0,
        "the private receiver is never reached"
    );
}

/// The name resolves to the admitted address for the first connection, is
/// then rebound to a private address: once the first connection is closed,
/// the next one is refused, and the receiver on the private address never
/// sees a connection. The receiver on the admitted address closes each
/// connection after its answer, so the second request cannot reuse it.
async fn a_name_rebound_to_a_private_address_is_refused_on_reconnect(app: TestApp) {
    let (public, private) =
        on_one_port(Script::AnswerAndClose(204), Script::AnswerAndClose(204)).await;
    let dns = ScriptedDns::new("rebind.test", &[&[PUBLIC], &[PRIVATE]]);
    let url = format!("http://rebind.test:{}/hook", public.addr.port());
    let (endpoint, _) = app.subscribed_endpoint(&url, EVENT_TYPE, 2).await;
    let dispatcher = app.start_dispatcher(guarded_settings(&app, "0s", dns.clone()));

    app.publish(EVENT_TYPE, payment()).await;
    let first = settled_all(&app, &endpoint, 1, "succeeded").await;
    assert_eq!(
        public.requests(),
        1,
        "the first connection reaches the admitted address"
    );
    app.eventually(5, || async { (public.ended() == 1).then_some(()) })
        .await;

    app.publish(EVENT_TYPE, payment()).await;
    app.eventually(20, || async {
        let d = newest_delivery(&app, &endpoint).await;
        (d["delivery_ref"] != first[0]["delivery_ref"] && d["status"] == "failed").then_some(())
    })
    .await;
    dispatcher.shutdown().await;

    let second = newest_delivery(&app, &endpoint).await;
    let tried = attempts(&app, &text(&second["delivery_ref"])).await;
    assert_eq!(tried.len(), 1);
    assert_eq!(tried[0]["response_status"], Value::Null);
    assert!(
        error_of(&tried[0]).contains("resolves only to forbidden addresses"),
        "{tried:?}"
    );
    assert_eq!(
        dns.lookups(),
        2,
        "each new connection resolves the name again"
    );
    assert_eq!(public.requests(), 1);
    assert_eq!(
        private.connections(),
        0,
        "the private receiver is never reached"
    );
}

/// An answer with a private address first and the admitted one second: the
/// private one is dropped, the delivery goes to the admitted one.
async fn an_answer_mixing_addresses_reaches_only_the_admitted_one(app: TestApp) {
    let (public, private) =
        on_one_port(Script::AnswerAndClose(204), Script::AnswerAndClose(204)).await;
    let dns = ScriptedDns::new("mixed.test", &[&[PRIVATE, PUBLIC]]);
    let url = format!("http://mixed.test:{}/hook", public.addr.port());
    let (endpoint, _) = app.subscribed_endpoint(&url, EVENT_TYPE, 2).await;
    let dispatcher = app.start_dispatcher(guarded_settings(&app, "0s", dns));
    app.publish(EVENT_TYPE, payment()).await;
    settled_all(&app, &endpoint, 1, "succeeded").await;
    dispatcher.shutdown().await;
    assert_eq!(public.requests(), 1);
    assert_eq!(
        private.connections(),
        0,
        "the private receiver is never reached"
    );
}

/// A healthy receiver subscribed beside a hostile one: every delivery to it
/// must arrive while the hostile attempts are still running.
async fn healthy_beside(app: &TestApp) -> TestReceiver {
    let healthy = TestReceiver::start(Behaviour::Status(204)).await;
    app.subscribed_endpoint(&healthy.url(), EVENT_TYPE, 2).await;
    healthy
}

/// Publishes `events` events, then waits for the healthy receiver to get
/// them all; returns how long that took from the first publish.
async fn healthy_delivery_time(app: &TestApp, healthy: &TestReceiver, events: usize) -> Duration {
    let start = Instant::now();
    for _ in 0..events {
        app.publish(EVENT_TYPE, payment()).await;
    }
    app.eventually(20, || async { (healthy.count() >= events).then_some(()) })
        .await;
    start.elapsed()
}

/// Headers at once, then one byte of body a second forever: each attempt
/// ends at the time-out with the status it got (200: succeeded), the bytes
/// that arrived as its excerpt and a note saying the body was cut; the
/// dispatcher closes the connections; a healthy endpoint is not held up.
async fn a_body_that_never_ends_is_cut_at_the_time_out(app: TestApp) {
    const TIMEOUT: Duration = Duration::from_secs(3);
    const EVENTS: usize = 3;
    let trickling = ScriptedReceiver::start(Script::TrickleBody(200)).await;
    let (endpoint, _) = app
        .subscribed_endpoint(&trickling.url(), EVENT_TYPE, 2)
        .await;
    let healthy = healthy_beside(&app).await;
    let mut settings = app.dispatch_settings("0s");
    settings.timeout = TIMEOUT;
    let dispatcher = app.start_dispatcher(settings);

    let healthy_took = healthy_delivery_time(&app, &healthy, EVENTS).await;
    assert!(
        healthy_took < TIMEOUT,
        "the healthy endpoint waited {healthy_took:?}, as long as the trickling attempts"
    );
    let deliveries = settled_all(&app, &endpoint, EVENTS, "succeeded").await;
    dispatcher.shutdown().await;

    for d in &deliveries {
        let tried = attempts(&app, &text(&d["delivery_ref"])).await;
        assert_eq!(tried.len(), 1);
        let a = &tried[0];
        assert_eq!(a["status"], "succeeded", "the status decides: {a}");
        assert_eq!(a["response_status"], 200);
        assert!(
            error_of(a).contains("did not end within the time-out"),
            "{a}"
        );
        let excerpt = a["response_body_excerpt"].as_str().expect("excerpt");
        assert!(
            excerpt.len() <= 5 && excerpt.bytes().all(|b| b == b'x'),
            "a few trickled bytes: {excerpt:?}"
        );
        let took = Duration::from_millis(a["duration_ms"].as_u64().expect("duration"));
        assert!(
            took >= TIMEOUT - Duration::from_millis(100) && took < TIMEOUT + Duration::from_secs(1),
            "the attempt ends at the time-out, took {took:?}"
        );
    }
    app.eventually(5, || async {
        (trickling.ended() == trickling.connections()).then_some(())
    })
    .await;
    assert_eq!(trickling.connections(), EVENTS);
}

/// A body sent as fast as the dispatcher takes it, forever: the attempt
/// reads its 1 KiB excerpt and closes the connection; what the receiver
/// managed to write is what the socket buffers held, not the body.
async fn an_endless_body_is_read_no_further_than_the_excerpt(app: TestApp) {
    let endless = ScriptedReceiver::start(Script::EndlessBody(200)).await;
    let (endpoint, _) = app.subscribed_endpoint(&endless.url(), EVENT_TYPE, 2).await;
    let dispatcher = app.start_dispatcher(app.dispatch_settings("0s"));
    app.publish(EVENT_TYPE, payment()).await;
    let d = settled_all(&app, &endpoint, 1, "succeeded").await;
    dispatcher.shutdown().await;

    let a = &attempts(&app, &text(&d[0]["delivery_ref"])).await[0];
    assert_eq!(a["response_status"], 200);
    assert_eq!(a["error"], Value::Null, "{a}");
    assert_eq!(
        a["response_body_excerpt"].as_str().map(str::len),
        Some(1024)
    );
    app.eventually(5, || async { (endless.ended() == 1).then_some(()) })
        .await;
    let written = endless.body_bytes();
    assert!(
        written < 32 << 20,
        "the receiver wrote {written} bytes: the body was read past the excerpt"
    );
}

/// An https endpoint whose receiver accepts TCP and never answers the
/// ClientHello: the attempt fails before the time-out, naming the stalled
/// connection, and the dispatcher closes it; a healthy endpoint is not
/// held up.
async fn a_stalled_tls_handshake_fails_within_the_time_out(app: TestApp) {
    const TIMEOUT: Duration = Duration::from_secs(2);
    let silent = ScriptedReceiver::start(Script::Silent).await;
    let url = format!("https://{}/hook", silent.addr);
    let (endpoint, _) = app.subscribed_endpoint(&url, EVENT_TYPE, 2).await;
    let healthy = healthy_beside(&app).await;
    let mut settings = app.dispatch_settings("0s");
    settings.timeout = TIMEOUT;
    let dispatcher = app.start_dispatcher(settings);

    let healthy_took = healthy_delivery_time(&app, &healthy, 1).await;
    assert!(
        healthy_took < TIMEOUT,
        "the healthy endpoint waited {healthy_took:?}, as long as the stalled handshake"
    );
    let d = settled_all(&app, &endpoint, 1, "failed").await;
    dispatcher.shutdown().await;

    let a = &attempts(&app, &text(&d[0]["delivery_ref"])).await[0];
    assert_eq!(a["response_status"], Value::Null);
    assert!(error_of(a).contains("TLS handshake"), "{a}");
    let took = Duration::from_millis(a["duration_ms"].as_u64().expect("duration"));
    assert!(
        took < TIMEOUT + Duration::from_millis(500),
        "the attempt ends within the time-out, took {took:?}"
    );
    assert_eq!(silent.connections(), 1);
    app.eventually(5, || async { (silent.ended() == 1).then_some(()) })
        .await;
}

backend_tests!(
    a_name_resolving_to_a_private_address_is_never_reached,
    a_name_rebound_to_a_private_address_is_refused_on_reconnect,
    an_answer_mixing_addresses_reaches_only_the_admitted_one,
    a_body_that_never_ends_is_cut_at_the_time_out,
    an_endless_body_is_read_no_further_than_the_excerpt,
    a_stalled_tls_handshake_fails_within_the_time_out,
);

/// Many slow endpoints beside a healthy one (SQLite only, like
/// `isolation.rs`: isolation is the dispatcher's concern). Scaled down
/// from the benchmark's 10,000 (`benches/slow_receivers.rs`): 300 slow
/// endpoints with 3 deliveries each, every one taking 1.5 s to answer,
/// against a dispatcher of 64 slots in all: the slow ones want about
/// fourteen times the slots there are (the benchmark's 10,000 want about
/// twenty times the default 512). The slots are scaled down rather than
/// the slow attempts scaled up: hundreds at once in a debug build on two
/// cores would measure the machine, not the dispatcher. The healthy
/// endpoint's event-to-receipt p99 while they wait must stay within what
/// `isolation.rs` allows beside one hanging endpoint: twice its p99 alone,
/// or its p99 alone plus 20 ms.
///
/// Its p99 alone is measured first, then the slow endpoints' backlog is
/// published (longer than the whole test: it never drains) and the p99
/// beside it is measured up to `ROUNDS` times; one round within bounds
/// passes, for the reason `isolation.rs` gives (a stall of the whole
/// shared machine is not a failure of isolation; a real failure, the slow
/// endpoints taking the healthy one's slots, misses by seconds in every
/// round).
mod slow_endpoints {
    use super::{payment, EVENT_TYPE};
    use billing_tests::receiver::{Behaviour, TestReceiver};
    use billing_tests::{Backend, TestApp};
    use futures::StreamExt;
    use std::time::Duration;

    const SLOW_ENDPOINTS: usize = 300;
    /// Events to every slow endpoint: 900 deliveries of 1.5 s each over
    /// the 32 slots slow endpoints share (all but the reserve of one
    /// endpoint's limit), about 42 s of backlog.
    const SLOW_EVENTS: usize = 3;
    /// The dispatcher's slots in all.
    const MAX_IN_FLIGHT: usize = 64;
    /// How long a slow endpoint takes to answer (200): inside the time-out.
    const SLOW_ANSWER: Duration = Duration::from_millis(1500);
    const TIMEOUT: Duration = Duration::from_secs(2);
    const SLOW_TYPE: &str = "order.created";
    /// Healthy events per second, and for how long, in each measurement.
    const RATE: u64 = 100;
    const SECONDS: u64 = 3;
    const ROUNDS: usize = 3;

    /// As in `isolation.rs`.
    fn allowed_p99(alone_p99: Duration) -> Duration {
        (alone_p99 * 2).max(alone_p99 + Duration::from_millis(20))
    }

    /// Publishes `RATE` healthy events a second for `SECONDS`; returns
    /// their event-to-receipt latencies, sorted.
    async fn healthy_latencies(app: &TestApp, healthy: &TestReceiver) -> Vec<Duration> {
        let before = healthy.count();
        let total = (RATE * SECONDS) as usize;
        let published = app
            .publish_at_rate(EVENT_TYPE, &payment(), total, RATE)
            .await;
        app.eventually(15, || async {
            (healthy.count() >= before + total).then_some(())
        })
        .await;
        let mut latencies: Vec<Duration> = healthy.received()[before..]
            .iter()
            .filter_map(|r| {
                let t0 = published.get(r.json()["event_ref"].as_str()?)?;
                Some(r.at.saturating_duration_since(*t0))
            })
            .collect();
        assert_eq!(
            latencies.len(),
            total,
            "each event reaches the healthy endpoint once"
        );
        latencies.sort_unstable();
        latencies
    }

    fn p(sorted: &[Duration], pct: f64) -> Duration {
        billing_tests::percentile(sorted, pct).expect("latencies")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn many_slow_endpoints_do_not_slow_a_healthy_one() {
        let app = TestApp::spawn(Backend::Sqlite).await;
        let healthy = TestReceiver::start(Behaviour::Status(204)).await;
        app.subscribed_endpoint(&healthy.url(), EVENT_TYPE, 2).await;
        let slow = TestReceiver::start(Behaviour::Hang(SLOW_ANSWER)).await;
        futures::stream::iter(0..SLOW_ENDPOINTS)
            .map(|i| {
                let url = format!("{}/{i}", slow.url());
                let app = &app;
                async move { app.subscribed_endpoint(&url, SLOW_TYPE, 1).await }
            })
            .buffer_unordered(4)
            .collect::<Vec<_>>()
            .await;

        let mut settings = app.dispatch_settings("0s,1s,1s");
        settings.timeout = TIMEOUT;
        settings.max_in_flight = MAX_IN_FLIGHT;
        let dispatcher = app.start_dispatcher(settings);
        // Warm-up: the healthy endpoint's first delivery opens the
        // connection and shows the dispatcher that it answers at once.
        app.publish(EVENT_TYPE, payment()).await;
        app.eventually(10, || async { (healthy.count() >= 1).then_some(()) })
            .await;
        let alone = healthy_latencies(&app, &healthy).await;
        let (alone_p50, alone_p99) = (p(&alone, 50.0), p(&alone, 99.0));
        let allowed = allowed_p99(alone_p99);

        for _ in 0..SLOW_EVENTS {
            app.publish(SLOW_TYPE, serde_json::json!({})).await;
        }
        app.eventually(10, || async {
            (slow.count() >= MAX_IN_FLIGHT / 4).then_some(())
        })
        .await;
        let mut summaries = Vec::new();
        let mut passed = false;
        for round in 1..=ROUNDS {
            let beside = healthy_latencies(&app, &healthy).await;
            let (beside_p50, beside_p99) = (p(&beside, 50.0), p(&beside, 99.0));
            let slow_reached = slow.count();
            // Shown with `--nocapture`, and with the failure message otherwise.
            let summary = format!(
                "round {round}: healthy endpoint at {RATE} events/s for {SECONDS} s: \
                 alone p50 {alone_p50:?} p99 {alone_p99:?}; beside {SLOW_ENDPOINTS} slow endpoints \
                 p50 {beside_p50:?} p99 {beside_p99:?}; allowed p99 {allowed:?}; \
                 slow requests received so far {slow_reached} of {}",
                SLOW_EVENTS * SLOW_ENDPOINTS
            );
            println!("{summary}");
            assert!(
                slow_reached < SLOW_EVENTS * SLOW_ENDPOINTS,
                "the slow backlog drained, so it no longer competed: {summary}"
            );
            summaries.push(summary);
            if beside_p99 <= allowed {
                passed = true;
                break;
            }
        }
        // Stop at once: a graceful stop would wait for the slow attempts.
        dispatcher.stop.cancel();
        dispatcher.kill();
        assert!(
            passed,
            "the healthy endpoint's p99 beside many slow ones exceeded the allowance in every round:\n{}",
            summaries.join("\n")
        );
    }
}
