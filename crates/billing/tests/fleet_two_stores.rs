//! Two stores, one Redis database and one RabbitMQ virtual host (issue 27):
//! `billing serve` over PostgreSQL and `billing serve` over SQLite, with
//! default settings apart from their stores, ports and a quick retry
//! schedule (`0s,1s,1s`). A fleet is its store: each keeps its Redis keys
//! and its queue under its own store identity, so neither takes the
//! other's retries, and each sees every event on `billing.events` but
//! keeps only its own environments'.
//!
//! - Both run at once; each one's receiver fails the first two attempts of
//!   every delivery. Each receives every event of its own environment
//!   (three attempts, the last answered 200) and none of the other's, and
//!   each retry starts within 0.5 s of the time its attempt row planned.
//! - The PostgreSQL fleet then stops with retries still scheduled in
//!   Redis. A third fleet on a fresh database starts on the same Redis
//!   and vhost and delivers its first retries on time, while the stopped
//!   fleet's schedule is left as it was.
//!
//! Runs with `BILLING_TEST_FLEET=1` (then a missing server is a failure).
//! Redis database 11 is this test's; it is emptied first.

use crate::common::poll::Poll;
use crate::common::{
    billing, bootstrap, first_readyz, fleet, fleet_env, free_port, FreshDatabase, FreshVhost,
    Process, Sandbox, REDIS_URL,
};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use dispatcher::redis_schedule::redis;
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How late a retry may start after the time its attempt row planned.
const ON_TIME: i64 = 500;
/// Events each store is sent.
const EVENTS: usize = 5;
/// Attempts a receiver fails before it answers 200.
const FAILURES: usize = 2;

/// What a receiver got: each `webhook-id`'s requests (the body's
/// `environment_ref` and `event_ref`); it fails the first `fail_first` of
/// each id with a 500.
/// Each `webhook-id`'s requests: `(environment_ref, event_ref)`.
type Seen = Arc<Mutex<HashMap<String, Vec<(String, String)>>>>;

#[derive(Clone)]
struct Hook {
    seen: Seen,
    fail_first: usize,
    url: String,
}

async fn hook_answer(
    State(hook): State<Hook>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> StatusCode {
    let id = headers
        .get("webhook-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let text = |k: &str| body[k].as_str().unwrap_or("").to_owned();
    let mut seen = hook.seen.lock().unwrap();
    let requests = seen.entry(id).or_default();
    requests.push((text("environment_ref"), text("event_ref")));
    if requests.len() <= hook.fail_first {
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        StatusCode::OK
    }
}

impl Hook {
    async fn start(fail_first: usize) -> Hook {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let hook = Hook {
            seen: Arc::default(),
            fail_first,
            url: format!("http://{}/hook", listener.local_addr().unwrap()),
        };
        let app = axum::Router::new()
            .fallback(hook_answer)
            .with_state(hook.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        hook
    }

    /// The event refs of the deliveries that were answered 200.
    fn delivered(&self) -> Vec<String> {
        let seen = self.seen.lock().unwrap();
        seen.values()
            .filter(|r| r.len() > self.fail_first)
            .map(|r| r[0].1.clone())
            .collect()
    }

    /// Every environment any request named.
    fn environments(&self) -> Vec<String> {
        let seen = self.seen.lock().unwrap();
        let mut envs: Vec<String> = seen.values().flatten().map(|(e, _)| e.clone()).collect();
        envs.sort();
        envs.dedup();
        envs
    }

    /// How many distinct deliveries arrived at least once.
    fn deliveries(&self) -> usize {
        self.seen.lock().unwrap().len()
    }
}

/// A running `billing serve` and what the test needs of it.
struct Fleet {
    name: &'static str,
    process: Process,
    api: String,
    sandbox: Sandbox,
    endpoint_ref: String,
    client: reqwest::Client,
}

impl Fleet {
    /// Starts `billing serve` over `store` in `dir`, bootstraps it and
    /// subscribes an endpoint at `hook` to `refund.created`.
    async fn start(
        name: &'static str,
        dir: &Path,
        store: &str,
        vhost: &str,
        scheduler: &str,
        hook: &str,
    ) -> Fleet {
        let api_port = free_port();
        let mut envs = fleet_env(store, vhost, scheduler);
        envs.extend([
            ("BILLING_API__LISTEN", format!("127.0.0.1:{api_port}")),
            ("BILLING_DELIVERY__ALLOW_PRIVATE_NETWORKS", "true".into()),
            ("BILLING_DELIVERY__RETRY_SCHEDULE", "0s,1s,1s".into()),
        ]);
        let with_metrics = |port: u16| {
            let mut e = envs.clone();
            e.push(("BILLING_METRICS__LISTEN", format!("127.0.0.1:{port}")));
            e
        };
        let sandbox = bootstrap(dir, &with_metrics(free_port()));
        let process = Process::spawn_logged(
            billing(dir, &with_metrics(free_port())).arg("serve"),
            dir.join("serve.log"),
        );
        let api = format!("http://127.0.0.1:{api_port}");
        let client = reqwest::Client::new();
        first_readyz(&client, &api, || process.log_tail()).await;
        let mut fleet = Fleet {
            name,
            process,
            api,
            sandbox,
            endpoint_ref: String::new(),
            client,
        };
        let endpoint = fleet
            .post(
                "/api/v1/webhook_endpoints",
                &format!("{name}-endpoint"),
                serde_json::json!({"url": hook}),
            )
            .await;
        fleet.endpoint_ref = endpoint["endpoint_ref"].as_str().unwrap().to_owned();
        let path = format!(
            "/api/v1/webhook_endpoints/{}/subscriptions",
            fleet.endpoint_ref
        );
        let environment_ref = fleet.sandbox.environment_ref.clone();
        fleet
            .post(
                &path,
                &format!("{name}-subscription"),
                serde_json::json!({
                    "public_event_type": "refund.created",
                    "scope_type": "environment",
                    "scope_ref": environment_ref,
                    "dto_version": 1,
                }),
            )
            .await;
        fleet
    }

    async fn post(&self, path: &str, key: &str, body: serde_json::Value) -> serde_json::Value {
        let r = self
            .client
            .post(format!("{}{path}", self.api))
            .bearer_auth(&self.sandbox.secret)
            .header("Idempotency-Key", key)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = r.status();
        let body: serde_json::Value = r.json().await.unwrap();
        assert!(
            status.is_success(),
            "{} POST {path}: {status} {body}",
            self.name
        );
        body["data"].clone()
    }

    async fn get(&self, path: &str) -> serde_json::Value {
        let r = self
            .client
            .get(format!("{}{path}", self.api))
            .bearer_auth(&self.sandbox.secret)
            .send()
            .await
            .unwrap();
        let status = r.status();
        let body: serde_json::Value = r.json().await.unwrap();
        assert!(
            status.is_success(),
            "{} GET {path}: {status} {body}",
            self.name
        );
        body
    }

    /// How late each retry of the endpoint's deliveries started after the
    /// time the attempt before it planned (milliseconds), over every
    /// delivery with more than one attempt.
    /// How late each retry of the endpoint's deliveries started after the
    /// time its attempt row planned, once every delivery is recorded
    /// settled: a receiver answers 200 before the recorder writes that
    /// attempt (it gathers results for a moment), so the receiver's count
    /// alone can run ahead of the attempt rows.
    async fn retry_lateness(&self) -> Vec<i64> {
        let poll = Poll::within(Duration::from_secs(10)).every(Duration::from_millis(50));
        loop {
            let deliveries = self
                .get(&format!(
                    "/api/v1/webhook_endpoints/{}/deliveries?limit=100",
                    self.endpoint_ref
                ))
                .await;
            let items = deliveries["data"]["items"].as_array().unwrap().clone();
            if items.iter().all(|d| d["status"] == "succeeded") {
                break;
            }
            poll.tick(|| {
                format!(
                    "{}: not every delivery recorded settled: {items:?}",
                    self.name
                )
            })
            .await;
        }
        let deliveries = self
            .get(&format!(
                "/api/v1/webhook_endpoints/{}/deliveries?limit=100",
                self.endpoint_ref
            ))
            .await;
        let millis = |v: &serde_json::Value| {
            domain::Timestamp::parse(v.as_str().unwrap_or_default())
                .map(|t| t.millis())
                .unwrap_or_else(|| panic!("{} a timestamp: {v}", self.name))
        };
        let mut late = Vec::new();
        for d in deliveries["data"]["items"].as_array().unwrap() {
            let delivery_ref = d["delivery_ref"].as_str().unwrap();
            let attempts = self
                .get(&format!(
                    "/api/v1/webhook_deliveries/{delivery_ref}/attempts?limit=100"
                ))
                .await;
            let mut attempts = attempts["data"]["items"].as_array().unwrap().clone();
            attempts.sort_by_key(|a| a["attempt_number"].as_i64());
            for pair in attempts.windows(2) {
                if pair[0]["next_attempt_at"].is_null() {
                    continue;
                }
                late.push(millis(&pair[1]["started_at"]) - millis(&pair[0]["next_attempt_at"]));
            }
        }
        late
    }
}

/// Publishes `EVENTS` `refund.created` events of `environment_ref` on the
/// vhost's `billing.events`; their refs.
async fn publish(vhost: &str, environment_ref: &str) -> Vec<String> {
    publish_type(vhost, environment_ref, "refund.created").await
}

/// Publishes `EVENTS` events of `event_type` (the catalogue's example
/// data) and `environment_ref`; their refs.
async fn publish_type(vhost: &str, environment_ref: &str, event_type: &str) -> Vec<String> {
    let mut refs = Vec::new();
    for _ in 0..EVENTS {
        let event_ref = domain::Ref::generate(domain::Prefix::Event).into_string();
        crate::common::publish_example(vhost, environment_ref, &event_ref, event_type).await;
        refs.push(event_ref);
    }
    refs
}

/// Waits until `hook` got every one of `events` answered 200.
async fn all_delivered(fleet: &Fleet, hook: &Hook, events: &[String]) {
    let poll = Poll::within(Duration::from_secs(30)).every(Duration::from_millis(100));
    loop {
        let mut got = hook.delivered();
        got.sort();
        let mut want = events.to_vec();
        want.sort();
        if got == want {
            return;
        }
        poll.tick(|| {
            format!(
                "{}: delivered {got:?}, want {want:?}\n{}",
                fleet.name,
                fleet.process.log_tail()
            )
        })
        .await;
    }
}

fn check_on_time(fleet: &Fleet, late: &[i64], retries: usize) {
    assert!(
        late.len() >= retries,
        "{}: {} retries, want {retries}",
        fleet.name,
        late.len()
    );
    for l in late {
        assert!(
            (-50..=ON_TIME).contains(l),
            "{}: a retry started {l} ms after its planned time (all: {late:?})",
            fleet.name
        );
    }
    eprintln!(
        "{}: {} retries, {} to {} ms after their planned time",
        fleet.name,
        late.len(),
        late.iter().min().unwrap(),
        late.iter().max().unwrap()
    );
}

/// The number of members of the due set of the store at `store_url`
/// under its own keys.
async fn due_members(conn: &mut redis::aio::MultiplexedConnection, store_url: &str) -> u64 {
    let store = store::Store::connect(store_url).await.unwrap();
    let owner = store.identity().await.unwrap();
    store.close().await;
    let keys = dispatcher::redis_schedule::Keys::own(owner);
    redis::cmd("ZCARD")
        .arg(format!("{}:due", keys.prefix()))
        .query_async(conn)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_stores_on_one_redis_and_one_vhost_keep_to_their_own() {
    if !fleet("two stores on one Redis and one vhost") {
        return;
    }
    let scheduler = format!("{REDIS_URL}/11");
    let mut conn = redis::Client::open(scheduler.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .expect("Redis is reachable");
    redis::cmd("FLUSHDB")
        .query_async::<()>(&mut conn)
        .await
        .unwrap();
    let vhost = FreshVhost::create("billing_two_stores");
    let db = FreshDatabase::create("billing_two_stores").await;
    let (dir_pg, dir_lite) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let lite_url = format!("sqlite://{}", dir_lite.path().join("billing.db").display());

    let (hook_pg, hook_lite) = (Hook::start(FAILURES).await, Hook::start(FAILURES).await);
    let mut pg = Fleet::start(
        "pg",
        dir_pg.path(),
        &db.url,
        &vhost.url,
        &scheduler,
        &hook_pg.url,
    )
    .await;
    let mut lite = Fleet::start(
        "sqlite",
        dir_lite.path(),
        &lite_url,
        &vhost.url,
        &scheduler,
        &hook_lite.url,
    )
    .await;

    // Both fleets' events go out on the one exchange, interleaved.
    let (sent_pg, sent_lite) = tokio::join!(
        publish(&vhost.url, &pg.sandbox.environment_ref),
        publish(&vhost.url, &lite.sandbox.environment_ref)
    );
    all_delivered(&pg, &hook_pg, &sent_pg).await;
    all_delivered(&lite, &hook_lite, &sent_lite).await;
    // Each endpoint got its own environment's events alone, each once.
    assert_eq!(
        hook_pg.environments(),
        vec![pg.sandbox.environment_ref.clone()]
    );
    assert_eq!(
        hook_lite.environments(),
        vec![lite.sandbox.environment_ref.clone()]
    );
    assert_eq!(hook_pg.deliveries(), EVENTS);
    assert_eq!(hook_lite.deliveries(), EVENTS);
    check_on_time(&pg, &pg.retry_lateness().await, EVENTS * FAILURES);
    check_on_time(&lite, &lite.retry_lateness().await, EVENTS * FAILURES);

    // The PostgreSQL fleet stops with retries scheduled in Redis: its
    // receiver now fails everything, and it stops once each new event had
    // its first attempt.
    let hook_down = Hook::start(usize::MAX).await;
    let second = pg
        .post(
            "/api/v1/webhook_endpoints",
            "pg-endpoint-down",
            serde_json::json!({"url": hook_down.url}),
        )
        .await;
    pg.endpoint_ref = second["endpoint_ref"].as_str().unwrap().to_owned();
    let environment_ref = pg.sandbox.environment_ref.clone();
    pg.post(
        &format!(
            "/api/v1/webhook_endpoints/{}/subscriptions",
            pg.endpoint_ref
        ),
        "pg-subscription-down",
        serde_json::json!({
            "public_event_type": "order.created",
            "scope_type": "environment",
            "scope_ref": environment_ref,
            "dto_version": 1,
        }),
    )
    .await;
    let left = publish_type(&vhost.url, &environment_ref, "order.created").await;
    let poll = Poll::within(Duration::from_secs(20)).every(Duration::from_millis(20));
    while hook_down.deliveries() < left.len() {
        poll.tick(|| {
            format!(
                "the failing endpoint got {} of {} first attempts\n{}",
                hook_down.deliveries(),
                left.len(),
                pg.process.log_tail()
            )
        })
        .await;
    }
    // Once those attempts are recorded (each failed one's retry, due 0.8 s
    // or more after it, waits in Redis), a crash: no shutdown tidies
    // anything.
    let poll = Poll::within(Duration::from_secs(10)).every(Duration::from_millis(20));
    loop {
        let due = due_members(&mut conn, &db.url).await;
        if due >= left.len() as u64 {
            break;
        }
        poll.tick(|| {
            format!(
                "{due} of {} failed attempts have their retry in Redis\n{}",
                left.len(),
                pg.process.log_tail()
            )
        })
        .await;
    }
    pg.process.kill_hard();
    let stranded = due_members(&mut conn, &db.url).await;
    assert!(stranded > 0, "the stopped fleet left retries in Redis");

    // A third fleet, on a fresh database, on the same Redis and vhost.
    let db_new = FreshDatabase::create("billing_two_stores_new").await;
    let dir_new = tempfile::tempdir().unwrap();
    let hook_new = Hook::start(FAILURES).await;
    let fresh = Fleet::start(
        "fresh",
        dir_new.path(),
        &db_new.url,
        &vhost.url,
        &scheduler,
        &hook_new.url,
    )
    .await;
    let sent_new = publish(&vhost.url, &fresh.sandbox.environment_ref).await;
    all_delivered(&fresh, &hook_new, &sent_new).await;
    assert_eq!(
        hook_new.environments(),
        vec![fresh.sandbox.environment_ref.clone()]
    );
    check_on_time(&fresh, &fresh.retry_lateness().await, EVENTS * FAILURES);
    // The stopped fleet's schedule is as it left it: nobody took it.
    assert_eq!(due_members(&mut conn, &db.url).await, stranded);
    // The SQLite fleet still got nothing of the others'.
    assert_eq!(
        hook_lite.environments(),
        vec![lite.sandbox.environment_ref.clone()]
    );
    assert_eq!(hook_lite.deliveries(), EVENTS);

    let mut fresh = fresh;
    assert!(fresh.process.terminate_cleanly());
    assert!(lite.process.terminate_cleanly());
    db.remove().await;
    db_new.remove().await;
    vhost.remove();
    redis::cmd("FLUSHDB")
        .query_async::<()>(&mut conn)
        .await
        .unwrap();
}
