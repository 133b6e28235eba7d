//! Fault test with the real binary: SIGKILL a `billing dispatcher` in the
//! middle of a 10,000-event run, start it again, and check that every event
//! reached the receiver at least once and every delivery is recorded as
//! succeeded. The store is a SQLite file shared by the test and the process.

use axum::extract::State;
use axum::http::HeaderMap;
use base64::Engine;
use domain::webhook::cipher::SecretCipher;
use domain::webhook::signing::SigningSecret;
use domain::webhook::ScopeType;
use domain::{Prefix, Ref, Timestamp};
use std::collections::HashSet;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use store::webhooks::{endpoints, subscriptions};
use store::{EventData, EventRecord, NewSecret, NewSubscription, Store};

const EVENTS: usize = 10_000;

type Seen = Arc<Mutex<(usize, HashSet<String>)>>;

async fn receive(State(seen): State<Seen>, headers: HeaderMap) -> &'static str {
    let id = headers
        .get("webhook-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let mut s = seen.lock().unwrap();
    s.0 += 1;
    s.1.insert(id);
    "ok"
}

fn dispatcher(dir: &std::path::Path, metrics_port: u16) -> Child {
    let mut c = Command::new(env!("CARGO_BIN_EXE_billing"));
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("BILLING_")) {
        c.env_remove(k);
    }
    c.current_dir(dir)
        .arg("dispatcher")
        .env("BILLING_DELIVERY__ALLOW_PRIVATE_NETWORKS", "true")
        .env("BILLING_DELIVERY__TIMEOUT", "2s")
        .env(
            "BILLING_METRICS__LISTEN",
            format!("127.0.0.1:{metrics_port}"),
        )
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("dispatcher starts")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_run_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("data")).unwrap();
    let key = [7u8; 32];
    std::fs::write(
        dir.path().join("data/secret.key"),
        base64::engine::general_purpose::STANDARD.encode(key),
    )
    .unwrap();
    let store = Store::connect(&format!(
        "sqlite://{}/data/billing.db",
        dir.path().display()
    ))
    .await
    .unwrap();
    store.migrate().await.unwrap();
    billing::bootstrap::bootstrap(&store).await.unwrap();
    let mut tx = store.begin().await.unwrap();
    let env = store::admin::environments::ensure(&mut tx, domain::principal::Mode::Sandbox)
        .await
        .unwrap()
        .environment_ref;
    tx.commit().await.unwrap();

    let seen: Seen = Arc::default();
    let app = axum::Router::new()
        .fallback(receive)
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let secret = SigningSecret::generate();
    let sealed = NewSecret {
        ciphertext: SecretCipher::new(key).encrypt(secret.as_bytes()),
        hint: secret.hint(),
    };
    let mut tx = store.begin().await.unwrap();
    let endpoint = endpoints::create(&mut tx, &env, &url, None, sealed)
        .await
        .unwrap();
    let sub = NewSubscription {
        public_event_type: "order.created",
        scope_type: ScopeType::Environment,
        scope_ref: env.as_str(),
        dto_version: 1,
        custom_field_refs: &[],
    };
    subscriptions::create(&mut tx, &env, &endpoint.endpoint_ref, sub)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    for _ in 0..EVENTS {
        let event = EventRecord {
            event_ref: Ref::generate(Prefix::Event),
            environment_ref: env.clone(),
            public_event_type: "order.created".into(),
            occurred_at: Timestamp::now(),
            scope: Default::default(),
            data: EventData::parse(r#"{"order_ref": "ord_AAAAAAAAAAAA"}"#.to_owned()).unwrap(),
        };
        assert!(store.enqueue_event(&event).await.unwrap());
    }

    let mut first = dispatcher(dir.path(), free_port());
    let started = Instant::now();
    while seen.lock().unwrap().1.len() < EVENTS / 4 {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the first dispatcher made no progress"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Command::new("kill")
        .args(["-KILL", &first.id().to_string()])
        .status()
        .unwrap();
    first.wait().unwrap();
    let at_kill = seen.lock().unwrap().1.len();
    assert!(at_kill < EVENTS, "killed in the middle of the run");

    let mut second = dispatcher(dir.path(), free_port());
    let restarted = Instant::now();
    while seen.lock().unwrap().1.len() < EVENTS {
        assert!(
            restarted.elapsed() < Duration::from_secs(180),
            "not every event arrived after the restart"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Every delivery ends recorded as succeeded, once the last results land.
    let pending = loop {
        let n: i64 = store
            .due_backlog(Timestamp::now().plus_seconds(3600))
            .await
            .unwrap();
        if n == 0 || restarted.elapsed() > Duration::from_secs(60) {
            break n;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    Command::new("kill")
        .args(["-TERM", &second.id().to_string()])
        .status()
        .unwrap();
    assert!(second.wait().unwrap().success(), "SIGTERM exits cleanly");
    assert_eq!(pending, 0, "no delivery left pending");
    let (requests, unique) = {
        let s = seen.lock().unwrap();
        (s.0, s.1.len())
    };
    assert_eq!(unique, EVENTS, "every event delivered at least once");
    eprintln!("killed at {at_kill} of {EVENTS}; {requests} requests for {unique} deliveries");
}
