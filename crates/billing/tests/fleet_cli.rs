//! The real binary in fleet mode: `billing serve` over PostgreSQL, RabbitMQ
//! and Redis. An endpoint is created through the API, an event is published
//! with `billing admin publish-event` (through RabbitMQ), and the receiver
//! gets it signed. Runs only with BILLING_TEST_FLEET=1; then a missing
//! service is a failure.

use crate::common::poll::Poll;
use crate::common::{
    billing, bootstrap, first_readyz, fleet, fleet_env, free_port, fresh_redis_schedule, output_ok,
    rand_u32, receiver, FreshDatabase, Process, Sandbox, AMQP_URL, REDIS_URL,
};
use std::process::Stdio;
use std::time::{Duration, Instant};

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
    if !fleet("fleet CLI test") {
        return;
    }
    let db = FreshDatabase::create("billing_cli").await;

    let dir = tempfile::tempdir().unwrap();
    let (api_port, metrics_port) = (free_port(), free_port());
    let mut envs = fleet_env(&db.url, AMQP_URL, REDIS_URL);
    envs.extend([
        ("BILLING_API__LISTEN", format!("127.0.0.1:{api_port}")),
        (
            "BILLING_METRICS__LISTEN",
            format!("127.0.0.1:{metrics_port}"),
        ),
        (
            "BILLING_DELIVERY__ALLOW_PRIVATE_NETWORKS",
            "true".to_owned(),
        ),
    ]);
    let Sandbox {
        secret,
        environment_ref: env_ref,
    } = bootstrap(dir.path(), &envs);

    let (seen, hook) = receiver().await;

    let mut serve = Process::spawn(
        billing(dir.path(), &envs)
            .arg("serve")
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    let api = format!("http://127.0.0.1:{api_port}");
    let client = reqwest::Client::new();
    let ready = first_readyz(&client, &api, String::new).await;
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
        "scope": {"product_refs": [], "buyer_ref": null, "beneficiary_business_ref": null},
        // Other systems' payouts are projected: the data is a whole payout.
        "data": {"payout_ref": format!("wd_{:012}", rand_u32()), "status": "paid",
            "amount": {"currency": "EUR", "unit": "minor", "value": "10000"},
            "fee": {"currency": "EUR", "unit": "minor", "value": "250"}}});
    let file = dir.path().join("event.json");
    std::fs::write(&file, event.to_string()).unwrap();
    let published = output_ok(billing(dir.path(), &envs).args([
        "admin",
        "publish-event",
        file.to_str().unwrap(),
    ]));
    assert!(String::from_utf8_lossy(&published.stdout).contains("billing.events"));

    let poll = Poll::within(Duration::from_secs(30)).every(Duration::from_millis(50));
    while seen.count() == 0 {
        poll.tick(|| "the event never reached the receiver".to_owned())
            .await;
    }
    let headers = seen.first().unwrap();
    assert!(headers
        .get("webhook-signature")
        .unwrap()
        .to_str()
        .unwrap()
        .starts_with("v1,"));

    assert!(serve.terminate_cleanly());
    db.remove().await;
    // The fixed consumer queue of the binary is durable; leave nothing behind.
    if let Ok(conn) = dispatcher::amqp::connect(AMQP_URL, "fleet-cli-cleanup").await {
        if let Ok(ch) = conn.create_channel().await {
            for queue in ["billing.events.dispatcher", "billing.events.dead"] {
                let _ = ch.queue_delete(queue, Default::default()).await;
            }
        }
        let _ = conn.close(0, "done").await;
    }
}

/// A fleet of two processes, `billing api` and `billing dispatcher`, over
/// PostgreSQL and Redis: a test send made through the API process reaches
/// the receiver at once, because the API's write notifies the dispatcher
/// (PostgreSQL `NOTIFY`); the dispatcher does not poll the store for it
/// (its periodic pass comes only every 30 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_test_send_through_an_api_process_wakes_the_dispatcher_process() {
    if !fleet("fleet CLI test") {
        return;
    }
    let db = FreshDatabase::create("billing_cli").await;
    let dir = tempfile::tempdir().unwrap();
    let api_port = free_port();
    // The events queue stays in the store: this fleet must not share the
    // broker's dispatcher queue with the other test's. Redis database 5
    // keeps its schedule (under the fixed prefix `billing`) apart from
    // theirs; it is emptied first, in case an earlier run was killed.
    let scheduler = format!("{REDIS_URL}/5");
    let mut envs = fleet_env(&db.url, "embedded", &scheduler);
    envs.extend([
        ("BILLING_API__LISTEN", format!("127.0.0.1:{api_port}")),
        (
            "BILLING_DELIVERY__ALLOW_PRIVATE_NETWORKS",
            "true".to_owned(),
        ),
    ]);
    fresh_redis_schedule(&scheduler, &db.url).await;
    let with_metrics = |port: u16| {
        let mut e = envs.clone();
        e.push(("BILLING_METRICS__LISTEN", format!("127.0.0.1:{port}")));
        e
    };
    let secret = bootstrap(dir.path(), &with_metrics(free_port())).secret;

    let (seen, hook) = receiver().await;

    // Killed if the test ends early: a dispatcher left running would share
    // the next run's Redis schedule and take its deliveries.
    let mut processes: Vec<Process> = ["dispatcher", "api"]
        .into_iter()
        .map(|role| {
            Process::spawn_logged(
                billing(dir.path(), &with_metrics(free_port())).arg(role),
                dir.path().join(format!("{role}.log")),
            )
        })
        .collect();
    let logs = || {
        processes
            .iter()
            .map(Process::log_tail)
            .collect::<Vec<_>>()
            .join("\n")
    };
    let api = format!("http://127.0.0.1:{api_port}");
    let client = reqwest::Client::new();
    first_readyz(&client, &api, logs).await;
    let endpoint_ref = create_endpoint(&client, &api, &secret, &hook).await;
    // Past the dispatcher's start-up pass over the store (which would find
    // the test send by itself): the process says nothing outside when it
    // is done, so it is given the time.
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
    let poll = Poll::within(Duration::from_secs(5)).every(Duration::from_millis(20));
    while seen.count() == 0 {
        poll.tick(|| format!("the dispatcher process did not hear of the test send: it would find it only at its next periodic pass\n{}", logs()))
            .await;
    }
    eprintln!(
        "test send through the API process received after {} ms",
        sent.elapsed().as_millis()
    );

    for p in &mut processes {
        assert!(p.terminate_cleanly());
    }
    db.remove().await;
}
