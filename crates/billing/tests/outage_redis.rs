//! A Redis outage with the real binary (issue 19): `billing serve` in fleet
//! mode (PostgreSQL, and Redis for the retry schedule, leases and rate
//! limits; events through the store's queue), under API load (checkout
//! sessions and pays under `Idempotency-Key`s, and reads) with every
//! `payment.succeeded` event sent to a local receiver. Its Redis server is
//! killed (SIGKILL) for about five seconds and started again empty on the
//! same port; `billing` is not restarted:
//!
//! - during the outage every answer is a success or `503
//!   dependency_unavailable` with `Retry-After`, never a 500, and comes in
//!   time; `/readyz` answers 503 naming `scheduler`, quickly;
//! - after it, `/readyz` is 200 and writes succeed;
//! - every write that answered 2xx exists, and every event of a paid
//!   payment reached the receiver exactly once.
//!
//! The shared Redis on 6379 serves other tests, so this one starts a
//! private `redis-server` on a free port and ends only that process,
//! through its `Child` handle. Runs only with `BILLING_TEST_FLEET=1`; then
//! a missing `redis-server` or PostgreSQL is a failure.

use crate::common::poll::Poll;
use crate::common::{fleet, fleet_env, free_port, fresh_redis_schedule, FreshDatabase};
use crate::outage::Service;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long Redis stays down.
const OUTAGE: Duration = Duration::from_secs(5);
/// The slowest answer accepted, in or out of the outage.
const ANSWER_WITHIN: Duration = Duration::from_secs(5);

/// A `redis-server` this test started, without persistence; killed when
/// dropped.
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
            .every(Duration::from_millis(50))
            .until(
                || "the private redis-server never answered".to_owned(),
                || async { server.answers().await.then_some(()) },
            )
            .await;
        server
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    async fn answers(&self) -> bool {
        use dispatcher::redis_schedule::redis;
        let Ok(client) = redis::Client::open(self.url()) else {
            return false;
        };
        let Ok(mut c) = client.get_multiplexed_async_connection().await else {
            return false;
        };
        redis::cmd("PING")
            .query_async::<String>(&mut c)
            .await
            .is_ok()
    }

    /// SIGKILL: the server and its data are gone.
    fn kill(mut self) {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_outage_answers_in_time_and_loses_no_event() {
    if !fleet("Redis outage test (real binary)") {
        return;
    }
    let port = free_port();
    let redis = PrivateRedis::start(port).await;
    let db = FreshDatabase::create("billing_outage_redis").await;
    fresh_redis_schedule(&redis.url(), &db.url).await;
    let backing = fleet_env(&db.url, "embedded", &redis.url());
    let (service, load) = Service::under_load(backing, "redis", None).await;
    let (api, logs) = (&service.api, || service.logs());

    let down = Instant::now();
    redis.kill();
    api.through_outage("scheduler", down, OUTAGE, logs).await;
    let up = Instant::now();
    // Empty, as a Redis restarted without persistence comes back.
    let _redis = PrivateRedis::start(port).await;

    // No restart of `billing`: it recovers by itself.
    api.wait_ready(Duration::from_secs(30), logs).await;
    let (paid, _) = service
        .stop_load(load, (down, up), ANSWER_WITHIN, "sent during the outage")
        .await;
    service.check_and_stop(&paid, Duration::from_secs(60)).await;
    db.remove().await;
}
