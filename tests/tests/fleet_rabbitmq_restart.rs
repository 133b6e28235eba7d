//! A real RabbitMQ restart in fleet mode: the broker is killed (SIGKILL)
//! in the middle of a run and started again on the same data; every event
//! published before, during and after the outage is delivered once.
//!
//! The shared broker on 5672 serves other tests, so this one starts a
//! private RabbitMQ node of its own (own node name, ports and data folder,
//! no plugins) in its own process group, and ends only that group. Runs
//! only with `BILLING_TEST_FLEET=1`; then a node that cannot be started is
//! a failure.

use billing_tests::poll::Poll;
use billing_tests::receiver::{Behaviour, TestReceiver};
use billing_tests::{fleet_enabled, Backend, TestApp};
use dispatcher::amqp::{self, AmqpSettings, Publisher};
use serde_json::json;
use std::collections::HashSet;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const SERVER: &str = "/usr/lib/rabbitmq/bin/rabbitmq-server";

/// A RabbitMQ node this test started; its process group is killed when
/// dropped.
struct PrivateBroker {
    child: Child,
    killed: bool,
}

impl PrivateBroker {
    /// Starts the node on `port` with its data in `dir` (kept across
    /// restarts) and waits until it accepts AMQP connections.
    async fn start(port: u16, dir: &std::path::Path) -> PrivateBroker {
        let plugins = dir.join("enabled_plugins");
        std::fs::write(&plugins, "[].").expect("plugins file");
        let child = Command::new(SERVER)
            .env(
                "RABBITMQ_NODENAME",
                format!("billing-test-{port}@localhost"),
            )
            .env("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1")
            .env("RABBITMQ_NODE_PORT", port.to_string())
            .env("RABBITMQ_DIST_PORT", (port + 1).to_string())
            .env("RABBITMQ_MNESIA_BASE", dir.join("mnesia"))
            .env("RABBITMQ_LOG_BASE", dir.join("log"))
            .env("RABBITMQ_ENABLED_PLUGINS_FILE", &plugins)
            .env("RABBITMQ_CONFIG_FILE", dir.join("no-config"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("BILLING_TEST_FLEET=1 but {SERVER} cannot be started: {e}"));
        let broker = PrivateBroker {
            child,
            killed: false,
        };
        Poll::within(Duration::from_secs(60))
            .every(Duration::from_millis(250))
            .until(
                || "the private RabbitMQ node never came up".to_owned(),
                || async {
                    amqp::connect(&url(port), "billing-test-probe")
                        .await
                        .is_ok()
                        .then_some(())
                },
            )
            .await;
        broker
    }

    /// SIGKILL to the node's whole process group (ours alone).
    fn kill(&mut self) {
        if std::mem::replace(&mut self.killed, true) {
            return;
        }
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill")
            .args(["-KILL", "--", &group])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.wait();
    }
}

impl Drop for PrivateBroker {
    fn drop(&mut self) {
        self.kill();
    }
}

fn url(port: u16) -> String {
    format!("amqp://guest:guest@127.0.0.1:{port}/%2f")
}

/// Two adjacent free ports (AMQP and Erlang distribution).
fn free_ports() -> u16 {
    // Below the kernel's ephemeral range (32768–60999 by default), where
    // the other tests' listeners (`127.0.0.1:0`) and every outgoing
    // connection take their ports: a port picked there can be taken by
    // one of them in the seconds before the node binds it, and the node
    // then never comes up.
    use rand::Rng;
    loop {
        let port = rand::thread_rng().gen_range(20_000..32_000);
        let free = |p: u16| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok();
        if free(port) && free(port + 1) {
            return port;
        }
    }
}

/// Publishes `n` events with confirms, reconnecting until the broker takes
/// each; returns their references.
async fn publish(environment_ref: String, port: u16, n: usize) -> Vec<String> {
    let mut refs = Vec::with_capacity(n);
    let mut publisher: Option<Publisher> = None;
    // An event whose confirm was lost is published again under the same
    // reference, as a real producer must: the broker may have kept it.
    let mut event_ref = domain::Ref::generate(domain::Prefix::Event).into_string();
    // The broker is down for a while: a connection is tried again every
    // 200 ms until it takes one.
    let poll = Poll::within(Duration::from_secs(60)).every(Duration::from_millis(200));
    while refs.len() < n {
        assert!(!poll.expired(), "the broker never took the events");
        let p = match publisher.take() {
            Some(p) => p,
            None => match Publisher::connect(&url(port)).await {
                Ok(p) => p,
                Err(_) => {
                    poll.next().await;
                    continue;
                }
            },
        };
        let body = json!({
            "event_ref": event_ref,
            "public_event_type": "order.created",
            "environment_ref": environment_ref,
            "occurred_at": domain::Timestamp::now().to_rfc3339(),
            "data": {},
        });
        if p.publish(body.to_string().as_bytes(), "order.created")
            .await
            .is_ok()
        {
            refs.push(std::mem::replace(
                &mut event_ref,
                domain::Ref::generate(domain::Prefix::Event).into_string(),
            ));
            publisher = Some(p);
        }
    }
    if let Some(p) = publisher {
        p.close().await;
    }
    refs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_killed_and_restarted_mid_run_loses_no_event() {
    if !fleet_enabled() {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "fleet test (RabbitMQ restart) not run: set BILLING_TEST_FLEET=1 to run it"
        );
        return;
    }
    let dir = tempfile::tempdir().expect("a data folder");
    let port = free_ports();
    let mut broker = PrivateBroker::start(port, dir.path()).await;
    let settings = AmqpSettings::new(url(port));
    let setup = amqp::connect(&url(port), "billing-test-setup")
        .await
        .expect("the private broker answers");
    let channel = setup.create_channel().await.expect("a channel");
    amqp::declare(&channel, &settings)
        .await
        .expect("the topology is declared");
    let _ = setup.close(200, "declared").await;

    let app = TestApp::spawn(Backend::Postgres).await;
    let receiver = TestReceiver::start(Behaviour::Hang(Duration::from_millis(200))).await;
    app.subscribed_endpoint(&receiver.url(), "order.created", 1)
        .await;
    let stop = CancellationToken::new();
    let intake = tokio::spawn(amqp::consume(app.queue.clone(), settings, stop.clone()));
    let dispatcher = app.start_dispatcher(app.dispatch_settings("0s,1s"));

    // Publishing goes on through the outage: the publisher retries until
    // the broker confirms each event.
    let env = app.sandbox.environment_ref.clone();
    let during = tokio::spawn(publish(env.clone(), port, 400));
    app.eventually(30, || async { (receiver.count() >= 40).then_some(()) })
        .await;
    let at_outage = receiver.count();
    broker.kill();
    // The outage itself: the real broker stays down for a second while
    // the publisher and the intake keep trying it.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let _broker = PrivateBroker::start(port, dir.path()).await;
    let mut events = during.await.expect("the publisher finishes");
    events.extend(publish(env, port, 100).await);
    app.eventually(90, || async {
        let got: HashSet<String> = receiver
            .received()
            .iter()
            .map(|r| {
                r.json()["event_ref"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            })
            .collect();
        events.iter().all(|e| got.contains(e)).then_some(())
    })
    .await;
    stop.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(15), intake).await;
    dispatcher.shutdown().await;
    let requests = receiver.received().len();
    eprintln!(
        "rabbitmq restart: {at_outage} received before the kill, {} events, {requests} requests",
        events.len()
    );
    assert!(at_outage < 400, "the kill fell in the middle of the run");
    assert_eq!(requests, events.len(), "each event delivered once");
}
