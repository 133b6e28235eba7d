//! A RabbitMQ outage with the real binary (issue 19): `billing serve` in
//! fleet mode (PostgreSQL, and RabbitMQ for events: the outbox relay
//! publishes what the API's writes emit, the AMQP intake consumes it; the
//! retry schedule in the store), under API load (checkout sessions and
//! pays under `Idempotency-Key`s, and reads) with every `payment.succeeded`
//! event sent to a local receiver. The broker is cut off for about five
//! seconds: `billing` reaches it through a TCP proxy of this test, which
//! drops every connection and refuses new ones meanwhile. `billing` is not
//! restarted:
//!
//! - during the outage every answer is a success or `503
//!   dependency_unavailable` with `Retry-After`, never a 500, and comes in
//!   time; `/readyz` answers 503 naming `queue`, quickly;
//! - after it, `/readyz` is 200 and writes succeed;
//! - every write that answered 2xx exists, and every event of a paid
//!   payment reached the receiver exactly once (an event published twice,
//!   its confirm lost in the cut, is one event: the intake keeps each
//!   `event_ref` once).
//!
//! The shared broker on 5672 serves other tests and is never stopped: the
//! test uses a fresh virtual host of its own (so the durable queues the
//! process declares are its alone), deleted at the end. Runs only with
//! `BILLING_TEST_FLEET=1`; then a broker or PostgreSQL that cannot be
//! reached is a failure.

use crate::common::poll::Poll;
use crate::common::{fleet, fleet_env, free_port, FreshDatabase, FreshVhost};
use crate::outage::Service;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

/// How long the broker stays cut off.
const OUTAGE: Duration = Duration::from_secs(5);
/// The slowest answer accepted, in or out of the outage.
const ANSWER_WITHIN: Duration = Duration::from_secs(5);
/// The shared broker.
const BROKER: &str = "127.0.0.1:5672";

/// A TCP proxy on 127.0.0.1 to the broker that can be cut (every
/// connection dropped, new ones refused) and restored on the same port.
struct Proxy {
    port: u16,
    tasks: Arc<Mutex<Vec<AbortHandle>>>,
}

impl Proxy {
    async fn start(port: u16) -> Proxy {
        let proxy = Proxy {
            port,
            tasks: Arc::default(),
        };
        proxy.open().await;
        proxy
    }

    /// Listens on the port again (it was free: it is the proxy's).
    async fn open(&self) {
        let listener = TcpListener::bind(("127.0.0.1", self.port))
            .await
            .expect("the proxy's port is free");
        let tasks = self.tasks.clone();
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let forward = tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(BROKER).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                tasks.lock().unwrap().push(forward.abort_handle());
            }
        });
        self.tasks.lock().unwrap().push(accept.abort_handle());
    }

    /// Drops every connection and the listener: the broker is gone.
    fn cut(&self) {
        for task in self.tasks.lock().unwrap().drain(..) {
            task.abort();
        }
    }

    fn url(&self, vhost: &str) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/{vhost}", self.port)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.cut();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rabbitmq_outage_answers_in_time_and_loses_no_event() {
    if !fleet("RabbitMQ outage test (real binary)") {
        return;
    }
    let vhost = FreshVhost::create("billing_outage");
    let proxy = Proxy::start(free_port()).await;
    let db = FreshDatabase::create("billing_outage_amqp").await;
    let backing = fleet_env(&db.url, &proxy.url(&vhost.name), "embedded");
    let (service, load) = Service::under_load(backing, "amqp", None).await;
    let (api, hooks, logs) = (&service.api, &service.hooks, || service.logs());
    // Events flow through the broker before the cut.
    let poll = Poll::within(Duration::from_secs(30)).every(Duration::from_millis(50));
    while hooks.all().len() < 5 {
        poll.tick(|| format!("no event reached the receiver through RabbitMQ\n{}", logs()))
            .await;
    }

    let down = Instant::now();
    proxy.cut();
    api.through_outage("queue", down, OUTAGE, logs).await;
    let up = Instant::now();
    proxy.open().await;

    // No restart of `billing`: it reconnects by itself.
    api.wait_ready(Duration::from_secs(30), logs).await;
    let (paid, _) = service
        .stop_load(load, (down, up), ANSWER_WITHIN, "sent during the outage")
        .await;
    service.check_and_stop(&paid, Duration::from_secs(60)).await;
    drop(proxy);
    db.remove().await;
    vhost.remove();
}
