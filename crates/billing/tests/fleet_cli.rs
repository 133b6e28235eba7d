//! The real binary in fleet mode: `billing serve` over PostgreSQL, RabbitMQ
//! and Redis. An endpoint is created through the API, an event is published
//! with `billing admin publish-event` (through RabbitMQ), and the receiver
//! gets it signed. Runs only with BILLING_TEST_FLEET=1; then a missing
//! service is a failure.

use axum::extract::State;
use axum::http::HeaderMap;
use sqlx::{Connection, Executor, PgConnection};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Whether fleet tests run; if not, says so (on the stream itself:
/// libtest captures `eprintln!`).
fn fleet() -> bool {
    let on = std::env::var("BILLING_TEST_FLEET").is_ok_and(|v| v == "1");
    if !on {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "fleet CLI test not run: set BILLING_TEST_FLEET=1"
        );
    }
    on
}

fn pg_admin_url() -> String {
    std::env::var("BILLING_TEST_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

fn billing(dir: &std::path::Path, envs: &[(&str, String)]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_billing"));
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("BILLING_")) {
        c.env_remove(k);
    }
    c.current_dir(dir);
    for (k, v) in envs {
        c.env(k, v);
    }
    c
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

type Seen = Arc<Mutex<Vec<HeaderMap>>>;

async fn receive(State(seen): State<Seen>, headers: HeaderMap) -> &'static str {
    seen.lock().unwrap().push(headers);
    "ok"
}

/// A fresh database on the fleet's PostgreSQL: the admin connection (to
/// drop it at the end), its name and the store URL for it.
async fn fresh_database() -> (PgConnection, String, String) {
    let db = format!("billing_cli_{}_{:08x}", std::process::id(), rand_u32());
    let mut admin = PgConnection::connect(&pg_admin_url())
        .await
        .expect("PostgreSQL reachable");
    admin
        .execute(format!("CREATE DATABASE \"{db}\"").as_str())
        .await
        .unwrap();
    let base = pg_admin_url();
    let store_url = format!("{}/{db}", &base[..base.rfind('/').unwrap()]);
    (admin, db, store_url)
}

/// A local receiver recording every request's headers, and its URL.
async fn receiver() -> (Seen, String) {
    let seen: Seen = Arc::default();
    let app = axum::Router::new()
        .fallback(receive)
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (seen, hook)
}

/// `billing admin bootstrap --json`: the sandbox environment's secret and
/// reference.
fn bootstrap(dir: &std::path::Path, envs: &[(&str, String)]) -> (String, String) {
    let boot = billing(dir, envs)
        .args(["admin", "bootstrap", "--json"])
        .output()
        .unwrap();
    assert!(
        boot.status.success(),
        "{}",
        String::from_utf8_lossy(&boot.stderr)
    );
    let boot: serde_json::Value = serde_json::from_slice(&boot.stdout).unwrap();
    let sandbox = &boot["environments"][0];
    (
        sandbox["secret"].as_str().unwrap().to_owned(),
        sandbox["environment_ref"].as_str().unwrap().to_owned(),
    )
}

/// Waits (up to 30 s) for the API at `api` to answer `/readyz`; its body.
async fn wait_ready(client: &reqwest::Client, api: &str) -> serde_json::Value {
    let started = Instant::now();
    loop {
        if let Ok(r) = client.get(format!("{api}/readyz")).send().await {
            return r.json().await.unwrap();
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the API did not start"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Creates an endpoint for `hook` through the API; its reference.
async fn create_endpoint(client: &reqwest::Client, api: &str, secret: &str, hook: &str) -> String {
    let endpoint: serde_json::Value = client
        .post(format!("{api}/api/v1/webhook_endpoints"))
        .bearer_auth(secret)
        .header("Idempotency-Key", "cli-endpoint")
        .json(&serde_json::json!({"url": hook}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    endpoint["data"]["endpoint_ref"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_in_fleet_mode_delivers_a_published_event() {
    if !fleet() {
        return;
    }
    let (mut admin, db, store_url) = fresh_database().await;

    let dir = tempfile::tempdir().unwrap();
    let (api_port, metrics_port) = (free_port(), free_port());
    let envs = vec![
        ("BILLING_STORE__URL", store_url.clone()),
        (
            "BILLING_QUEUE__URL",
            "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned(),
        ),
        (
            "BILLING_SCHEDULER__URL",
            "redis://127.0.0.1:6379".to_owned(),
        ),
        ("BILLING_API__LISTEN", format!("127.0.0.1:{api_port}")),
        (
            "BILLING_METRICS__LISTEN",
            format!("127.0.0.1:{metrics_port}"),
        ),
        (
            "BILLING_DELIVERY__ALLOW_PRIVATE_NETWORKS",
            "true".to_owned(),
        ),
        (
            "BILLING_SECRETS__KEY",
            "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=".to_owned(),
        ),
    ];
    let (secret, env_ref) = bootstrap(dir.path(), &envs);

    let (seen, hook) = receiver().await;

    let mut serve = billing(dir.path(), &envs)
        .arg("serve")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let api = format!("http://127.0.0.1:{api_port}");
    let client = reqwest::Client::new();
    let ready = wait_ready(&client, &api).await;
    assert_eq!(ready["checks"]["queue"], "ok", "{ready}");
    assert_eq!(ready["checks"]["scheduler"], "ok", "{ready}");

    let endpoint_ref = create_endpoint(&client, &api, &secret, &hook).await;
    let sub = client
        .post(format!(
            "{api}/api/v1/webhook_endpoints/{endpoint_ref}/subscriptions"
        ))
        .bearer_auth(&secret)
        .header("Idempotency-Key", "cli-subscription")
        .json(
            &serde_json::json!({"public_event_type": "payout.paid", "scope_type": "environment",
            "scope_ref": env_ref, "dto_version": 1}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(sub.status(), 201);

    let event_ref = format!("evt_{:012}", rand_u32());
    let event = serde_json::json!({"event_ref": event_ref, "public_event_type": "payout.paid",
        "environment_ref": env_ref, "occurred_at": "2026-11-22T10:00:00Z",
        "scope": {"product_refs": [], "buyer_ref": null, "beneficiary_business_ref": null}, "data": {}});
    let file = dir.path().join("event.json");
    std::fs::write(&file, event.to_string()).unwrap();
    let published = billing(dir.path(), &envs)
        .args(["admin", "publish-event", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        published.status.success(),
        "{}",
        String::from_utf8_lossy(&published.stderr)
    );
    assert!(String::from_utf8_lossy(&published.stdout).contains("billing.events"));

    let started = Instant::now();
    while seen.lock().unwrap().is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the event never reached the receiver"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let headers = seen.lock().unwrap()[0].clone();
    assert!(headers
        .get("webhook-signature")
        .unwrap()
        .to_str()
        .unwrap()
        .starts_with("v1,"));

    Command::new("kill")
        .args(["-TERM", &serve.id().to_string()])
        .status()
        .unwrap();
    assert!(serve.wait().unwrap().success());
    drop(
        admin
            .execute(format!("DROP DATABASE IF EXISTS \"{db}\" WITH (FORCE)").as_str())
            .await,
    );
    // The fixed consumer queue of the binary is durable; leave nothing behind.
    if let Ok(conn) =
        dispatcher::amqp::connect("amqp://guest:guest@127.0.0.1:5672/%2f", "fleet-cli-cleanup")
            .await
    {
        if let Ok(ch) = conn.create_channel().await {
            for queue in ["billing.events.dispatcher", "billing.events.dead"] {
                let _ = ch.queue_delete(queue, Default::default()).await;
            }
        }
        let _ = conn.close(0, "done").await;
    }
}

fn rand_u32() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    t.subsec_nanos() ^ std::process::id()
}

/// Processes the test started, killed if the test ends early: a
/// dispatcher left running would share the next run's Redis schedule and
/// take its deliveries.
struct Children(Vec<std::process::Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for p in &mut self.0 {
            let _ = p.kill();
            let _ = p.wait();
        }
    }
}

/// A fleet of two processes, `billing api` and `billing dispatcher`, over
/// PostgreSQL and Redis: a test send made through the API process reaches
/// the receiver at once, because the API's write notifies the dispatcher
/// (PostgreSQL `NOTIFY`); the dispatcher does not poll the store for it
/// (its periodic pass comes only every 30 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_test_send_through_an_api_process_wakes_the_dispatcher_process() {
    if !fleet() {
        return;
    }
    let (mut admin, db, store_url) = fresh_database().await;
    let dir = tempfile::tempdir().unwrap();
    let api_port = free_port();
    // The events queue stays in the store: this fleet must not share the
    // broker's dispatcher queue with the other test's. Redis database 5
    // keeps its schedule (under the fixed prefix `billing`) apart from
    // theirs; it is emptied first, in case an earlier run was killed.
    let envs = vec![
        ("BILLING_STORE__URL", store_url.clone()),
        ("BILLING_QUEUE__URL", "embedded".to_owned()),
        (
            "BILLING_SCHEDULER__URL",
            "redis://127.0.0.1:6379/5".to_owned(),
        ),
        ("BILLING_API__LISTEN", format!("127.0.0.1:{api_port}")),
        (
            "BILLING_DELIVERY__ALLOW_PRIVATE_NETWORKS",
            "true".to_owned(),
        ),
        (
            "BILLING_SECRETS__KEY",
            "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=".to_owned(),
        ),
    ];
    use dispatcher::redis_schedule::redis;
    let redis = redis::Client::open("redis://127.0.0.1:6379/5").unwrap();
    let mut conn = redis.get_multiplexed_async_connection().await.unwrap();
    redis::cmd("FLUSHDB")
        .query_async::<()>(&mut conn)
        .await
        .unwrap();
    // As if this schedule had been fed before: the dispatcher must not
    // take the test for a Redis that lost its data (which makes it pass
    // over the store every second for a minute).
    redis::cmd("SET")
        .arg("billing:fed")
        .arg(1)
        .query_async::<()>(&mut conn)
        .await
        .unwrap();
    let with_metrics = |port: u16| {
        let mut e = envs.clone();
        e.push(("BILLING_METRICS__LISTEN", format!("127.0.0.1:{port}")));
        e
    };
    let (secret, _) = bootstrap(dir.path(), &with_metrics(free_port()));

    let (seen, hook) = receiver().await;

    let mut processes = Children(Vec::new());
    for role in ["dispatcher", "api"] {
        let log = std::fs::File::create(dir.path().join(format!("{role}.log"))).unwrap();
        processes.0.push(
            billing(dir.path(), &with_metrics(free_port()))
                .arg(role)
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .unwrap(),
        );
    }
    let logs = || {
        ["dispatcher", "api"]
            .map(|role| {
                let text = std::fs::read_to_string(dir.path().join(format!("{role}.log")))
                    .unwrap_or_default();
                format!("--- {role}:\n{text}")
            })
            .join("\n")
    };
    let api = format!("http://127.0.0.1:{api_port}");
    let client = reqwest::Client::new();
    wait_ready(&client, &api).await;
    let endpoint_ref = create_endpoint(&client, &api, &secret, &hook).await;
    // Past the dispatcher's start-up pass over the store.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let sent = Instant::now();
    let r = client
        .post(format!(
            "{api}/api/v1/webhook_endpoints/{endpoint_ref}/test_send"
        ))
        .bearer_auth(&secret)
        .header("Idempotency-Key", "cli-notify-test-send")
        .json(&serde_json::json!({"public_event_type": "webhook.test"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    while seen.lock().unwrap().is_empty() {
        assert!(
            sent.elapsed() < Duration::from_secs(5),
            "the dispatcher process did not hear of the test send: it would find it only at its next periodic pass\n{}",
            logs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!(
        "test send through the API process received after {} ms",
        sent.elapsed().as_millis()
    );

    for mut p in std::mem::take(&mut processes.0) {
        Command::new("kill")
            .args(["-TERM", &p.id().to_string()])
            .status()
            .unwrap();
        assert!(p.wait().unwrap().success());
    }
    drop(
        admin
            .execute(format!("DROP DATABASE IF EXISTS \"{db}\" WITH (FORCE)").as_str())
            .await,
    );
}
