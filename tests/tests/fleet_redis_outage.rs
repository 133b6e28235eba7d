//! A real Redis outage in fleet mode: the dispatcher's Redis server is
//! flushed (FLUSHALL), killed, and started again empty on the same port
//! while events are being delivered; every event is still delivered, and
//! none twice at once.
//!
//! The shared Redis on 6379 serves other tests, so this one starts a
//! private `redis-server` of its own on a free local port and ends only
//! that process, through its `Child` handle. Runs only with
//! `BILLING_TEST_FLEET=1`; then a missing `redis-server` is a failure.

use billing_tests::poll::Poll;
use billing_tests::receiver::{Behaviour, TestReceiver};
use billing_tests::{fleet_enabled, Backend, TestApp};
use dispatcher::redis_schedule::{redis, Keys, RedisSchedule};
use serde_json::json;
use std::collections::HashSet;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

/// A `redis-server` this test started; killed when dropped.
struct PrivateRedis {
    child: Child,
    port: u16,
}

impl PrivateRedis {
    /// Starts an empty server on `port` and waits until it answers PING.
    async fn start(port: u16) -> PrivateRedis {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("BILLING_TEST_FLEET=1 but `redis-server` cannot be started");
        let server = PrivateRedis { child, port };
        Poll::within(Duration::from_secs(10))
            .until(
                || "the private redis-server never answered".to_owned(),
                || async { server.ping().await.then_some(()) },
            )
            .await;
        server
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    async fn connection(&self) -> Option<redis::aio::MultiplexedConnection> {
        let client = redis::Client::open(self.url()).ok()?;
        client.get_multiplexed_async_connection().await.ok()
    }

    async fn ping(&self) -> bool {
        let Some(mut c) = self.connection().await else {
            return false;
        };
        redis::cmd("PING")
            .query_async::<String>(&mut c)
            .await
            .is_ok()
    }

    /// FLUSHALL, then SIGKILL: the data is gone and so is the server.
    async fn flush_and_kill(mut self) {
        let mut c = self.connection().await.expect("the private redis answers");
        let _: () = redis::cmd("FLUSHALL")
            .query_async(&mut c)
            .await
            .expect("FLUSHALL");
        self.child.kill().expect("kill our redis-server");
        self.child.wait().expect("reap our redis-server");
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    l.local_addr().expect("its address").port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restarted_without_its_data_loses_no_delivery() {
    if !fleet_enabled() {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "fleet test (Redis outage) not run: set BILLING_TEST_FLEET=1 to run it"
        );
        return;
    }
    let port = free_port();
    let server = PrivateRedis::start(port).await;
    let app = TestApp::spawn(Backend::Postgres).await;
    let schedule = Arc::new(
        RedisSchedule::connect(
            &server.url(),
            Keys::own(app.store.identity().await.unwrap()),
        )
        .await
        .expect("the private redis is reachable"),
    );
    // Slow enough that the outage falls in the middle of the run.
    let receiver = TestReceiver::start(Behaviour::Hang(Duration::from_millis(200))).await;
    app.subscribed_endpoint(&receiver.url(), "order.created", 1)
        .await;
    const BEFORE: usize = 300;
    const AFTER: usize = 100;
    for _ in 0..BEFORE {
        app.publish("order.created", json!({})).await;
    }
    let a = app.start_redis_dispatcher(app.dispatch_settings("0s,1s"), schedule.clone());
    let b = app.start_redis_dispatcher(app.dispatch_settings("0s,1s"), schedule.clone());
    app.eventually(30, || async {
        (receiver.count() >= BEFORE / 4).then_some(())
    })
    .await;

    let at_outage = receiver.count();
    server.flush_and_kill().await;
    // Events keep arriving while Redis is down: they wait in the store.
    for _ in 0..AFTER / 2 {
        app.publish("order.created", json!({})).await;
    }
    // The outage itself: the real redis-server stays down for a second
    // while the dispatchers keep running against it.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let _server = PrivateRedis::start(port).await;
    for _ in 0..AFTER / 2 {
        app.publish("order.created", json!({})).await;
    }

    let total = BEFORE + AFTER;
    let ids = app.all_received(&receiver, total, 90, vec![a, b]).await;
    let unique: HashSet<&String> = ids.iter().collect();
    eprintln!(
        "redis outage: {at_outage} received before it, {} deliveries in all, {} requests",
        unique.len(),
        ids.len()
    );
    assert!(
        at_outage < BEFORE,
        "the outage fell in the middle of the run"
    );
    assert_eq!(unique.len(), total, "every event delivered");
    assert_eq!(app.due_within_an_hour().await, 0, "nothing left to deliver");
}
