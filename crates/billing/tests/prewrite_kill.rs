//! A SIGKILL between an attempt made before the write and the write
//! itself (issue 48), with the real binary, in both modes: `billing serve`
//! over PostgreSQL, a RabbitMQ virtual host and Redis (fleet, with
//! `BILLING_TEST_FLEET=1`), and over its SQLite file (embedded).
//!
//! With a dispatcher in the process, a group of events is prepared, its
//! deliveries to quick endpoints are attempted, and only then are the
//! events and deliveries written and the events' sources told: a message
//! from RabbitMQ acknowledged (fleet), an event of the store's outbox
//! deleted (embedded, where an API's unit of work emits its events into
//! the outbox and this process's relay hands them to its queue; here the
//! test emits into the outbox as another process would). The receiver
//! holds one event's first request open and the test kills the process as
//! that request arrives: the attempt was made, nothing of it was written
//! (checked in the store: no delivery row for the event, else the try is
//! made again with another event), and the source still has the event.
//! After a restart the event is handed over again and it is delivered
//! again under the same `webhook-id` (a delivery's reference is keyed by
//! event, endpoint and version, not drawn at random), so a receiver that
//! keeps the ids it has seen drops the repeat. The store ends with one
//! delivery for the event, succeeded, whose reference is that
//! `webhook-id`.

use crate::common::crash::{count, probe};
use crate::common::poll::Poll;
use crate::common::{
    billing, bootstrap, first_readyz, fleet, fleet_env, free_port, publish_example,
    subscribed_endpoint, FreshDatabase, FreshVhost, Process, Sandbox, REDIS_URL,
};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

/// Tries at catching the moment before the write; each misses only if the
/// kill comes after the write's wait for first attempts (200 ms).
const TRIES: usize = 3;

const EVENT_TYPE: &str = "refund.created";

/// One request the receiver got.
#[derive(Clone, Debug)]
struct Request {
    webhook_id: String,
    event_ref: String,
    answered: bool,
}

/// The event whose requests are held open, and where to say one arrived.
type Held = Option<(String, mpsc::UnboundedSender<()>)>;

#[derive(Clone)]
struct Hook {
    requests: Arc<Mutex<Vec<Request>>>,
    /// Held requests are never answered.
    hold: Arc<Mutex<Held>>,
}

async fn hook_answer(
    State(hook): State<Hook>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> StatusCode {
    let webhook_id = headers
        .get("webhook-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let event_ref = body["event_ref"].as_str().unwrap_or_default().to_owned();
    let held = match &*hook.hold.lock().unwrap() {
        Some((held, arrived)) if *held == event_ref => Some(arrived.clone()),
        _ => None,
    };
    hook.requests.lock().unwrap().push(Request {
        webhook_id,
        event_ref,
        answered: held.is_none(),
    });
    match held {
        Some(arrived) => {
            let _ = arrived.send(());
            // Open until the process at the other end is gone.
            std::future::pending::<StatusCode>().await
        }
        None => StatusCode::NO_CONTENT,
    }
}

impl Hook {
    async fn start() -> (Hook, String) {
        let hook = Hook {
            requests: Arc::default(),
            hold: Arc::default(),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let app = axum::Router::new()
            .fallback(hook_answer)
            .with_state(hook.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (hook, url)
    }

    fn of(&self, event_ref: &str) -> Vec<Request> {
        let requests = self.requests.lock().unwrap();
        requests
            .iter()
            .filter(|r| r.event_ref == event_ref)
            .cloned()
            .collect()
    }

    /// Waits until `event_ref` got a request answered 2xx.
    async fn answered(&self, event_ref: &str, what: &str) {
        let poll = Poll::within(Duration::from_secs(60)).every(Duration::from_millis(20));
        while !self.of(event_ref).iter().any(|r| r.answered) {
            poll.tick(|| format!("{what}: {event_ref} was not delivered"))
                .await;
        }
    }
}

fn serve(dir: &Path, envs: &[(&str, String)], n: usize) -> Process {
    let mut envs = envs.to_vec();
    envs.push((
        "BILLING_METRICS__LISTEN",
        format!("127.0.0.1:{}", free_port()),
    ));
    Process::spawn_logged(
        billing(dir, &envs).arg("serve"),
        dir.join(format!("serve-{n}.log")),
    )
}

fn new_event_ref() -> String {
    domain::Ref::generate(domain::Prefix::Event).into_string()
}

/// Where the test's events come from.
enum Source {
    /// The `billing.events` exchange on this virtual host (fleet).
    Broker(String),
    /// The outbox of the store at this URL, which the server's relay
    /// reads (embedded).
    Outbox(String),
}

impl Source {
    /// The event `event_ref` of `EVENT_TYPE` in `environment_ref`, handed
    /// to the source.
    async fn publish(&self, environment_ref: &str, event_ref: &str) {
        match self {
            Source::Broker(vhost) => {
                publish_example(vhost, environment_ref, event_ref, EVENT_TYPE).await;
            }
            Source::Outbox(url) => {
                use store::dispatch::outbox::Emit;
                let data = domain::webhook::catalogue::example(EVENT_TYPE, 1).unwrap();
                let store = store::Store::connect(url).await.unwrap();
                let event = store::EventRecord {
                    event_ref: domain::Ref::parse(domain::Prefix::Event, event_ref).unwrap(),
                    environment_ref: domain::Ref::parse(
                        domain::Prefix::Environment,
                        environment_ref,
                    )
                    .unwrap(),
                    public_event_type: EVENT_TYPE.into(),
                    occurred_at: domain::Timestamp::now(),
                    scope: Default::default(),
                    data: store::EventData::parse(data.to_string()).unwrap(),
                    order: None,
                };
                let mut tx = store.begin().await.unwrap();
                tx.emit(&event).await.unwrap();
                tx.commit().await.unwrap();
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_between_an_attempt_and_its_write_resends_the_same_webhook_id() {
    if !fleet("SIGKILL between an attempt and its write") {
        return;
    }
    let db = FreshDatabase::create("billing_prewrite_kill").await;
    let vhost = FreshVhost::create("billing_prewrite_kill");
    let dir = tempfile::tempdir().unwrap();
    let envs = fleet_env(&db.url, &vhost.url, REDIS_URL);
    let source = Source::Broker(vhost.url.clone());
    kill_before_the_write("fleet", dir.path(), envs, &db.url, &source).await;
    db.remove().await;
    vhost.remove();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_between_an_attempt_and_its_write_resends_the_same_webhook_id_embedded() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("data/billing.db");
    let url = format!("sqlite://{}", file.display());
    let envs = vec![("BILLING_STORE__URL", url.clone())];
    let source = Source::Outbox(url);
    let probe_url = format!("sqlite://{}?mode=ro", file.display());
    kill_before_the_write("embedded", dir.path(), envs, &probe_url, &source).await;
}

/// The scenario over the store `envs` name (`probe_url` reads it), with
/// events from `source`.
async fn kill_before_the_write(
    label: &str,
    dir: &Path,
    mut envs: Vec<(&'static str, String)>,
    probe_url: &str,
    source: &Source,
) {
    let api_port = free_port();
    envs.extend([
        ("BILLING_API__LISTEN", format!("127.0.0.1:{api_port}")),
        (
            "BILLING_DELIVERY__ALLOW_PRIVATE_NETWORKS",
            "true".to_owned(),
        ),
        ("BILLING_DELIVERY__RETRY_SCHEDULE", "0s,1s,1s".to_owned()),
    ]);
    let Sandbox {
        secret,
        environment_ref,
    } = bootstrap(dir, &envs);
    let (hook, url) = Hook::start().await;
    let base = format!("http://127.0.0.1:{api_port}");
    let client = reqwest::Client::new();
    let mut store = probe(probe_url).await;

    let mut run = 1;
    let mut process = serve(dir, &envs, run);
    first_readyz(&client, &base, || process.log_tail()).await;
    subscribed_endpoint(
        &client,
        &base,
        &secret,
        serde_json::json!({"url": url}),
        EVENT_TYPE,
        &environment_ref,
    )
    .await;

    let mut published = Vec::new();
    let mut caught = None;
    for _ in 0..TRIES {
        // An endpoint's deliveries are attempted before the write once it
        // has answered this process quickly.
        let warm = new_event_ref();
        source.publish(&environment_ref, &warm).await;
        published.push(warm.clone());
        hook.answered(&warm, "the warm-up event").await;

        let (arrived, mut arrival) = mpsc::unbounded_channel();
        let target = new_event_ref();
        // The hold names the event before it is published, so its first
        // request cannot slip through.
        *hook.hold.lock().unwrap() = Some((target.clone(), arrived));
        source.publish(&environment_ref, &target).await;
        published.push(target.clone());
        tokio::time::timeout(Duration::from_secs(30), arrival.recv())
            .await
            .expect("the held event's first request arrives");
        process.kill_hard();
        *hook.hold.lock().unwrap() = None;
        let rows = count(
            &mut store,
            &format!("SELECT COUNT(*) FROM webhook_deliveries WHERE event_ref = '{target}'"),
        )
        .await;
        run += 1;
        process = serve(dir, &envs, run);
        first_readyz(&client, &base, || process.log_tail()).await;
        if rows == 0 {
            caught = Some(target);
            break;
        }
        crate::common::say(&format!(
            "prewrite kill ({label}): the write of {target} came before the kill; trying again"
        ));
    }
    let target = caught.expect("a kill landed between an attempt and its write");

    hook.answered(&target, "after the restart").await;
    for event in &published {
        hook.answered(event, "after the restart").await;
    }
    let requests = hook.of(&target);
    let ids: Vec<&str> = requests.iter().map(|r| r.webhook_id.as_str()).collect();
    assert!(
        requests.len() >= 2,
        "the killed attempt and the one after: {requests:?}"
    );
    assert!(
        ids.iter().all(|id| *id == ids[0] && !id.is_empty()),
        "every request of the event carries the same webhook-id: {requests:?}"
    );
    // Its results land with or after the write; wait for the success.
    let succeeded = format!(
        "SELECT COUNT(*) FROM webhook_deliveries WHERE event_ref = '{target}' \
         AND delivery_ref = '{}' AND status = 'succeeded'",
        ids[0]
    );
    let poll = Poll::within(Duration::from_secs(30)).every(Duration::from_millis(50));
    while count(&mut store, &succeeded).await != 1 {
        poll.tick(|| {
            format!(
                "the delivery {} of {target} is not recorded succeeded",
                ids[0]
            )
        })
        .await;
    }
    let all = format!("SELECT COUNT(*) FROM webhook_deliveries WHERE event_ref = '{target}'");
    assert_eq!(
        count(&mut store, &all).await,
        1,
        "one delivery for the event"
    );
    assert!(process.terminate_cleanly(), "SIGTERM exits cleanly");
    crate::common::say(&format!(
        "prewrite kill ({label}): {} requests for {target}, all with webhook-id {}",
        requests.len(),
        ids[0]
    ));
}
