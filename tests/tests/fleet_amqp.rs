//! RabbitMQ intake in fleet mode (contract section 9, "Events on the
//! queue"), against the real broker at 127.0.0.1:5672 and PostgreSQL.
//!
//! Run only with `BILLING_TEST_FLEET=1`; then a missing broker is a
//! failure, never a skip. Each test consumes its own queue bound to
//! `billing.events` (and keeps dead letters in its own queue bound to
//! `billing.events.dead`), since tests run in parallel over separate
//! databases; the binary uses the fixed `billing.events.dispatcher`. Every
//! queue bound with `#` sees every test's messages, so each test recognises
//! its own by `event_ref` or body; events of another test's environment
//! match no subscription here.

use billing_tests::kit::settled;
use billing_tests::poll::Poll;
use billing_tests::receiver::{Behaviour, TestReceiver};
use billing_tests::{fleet_enabled, fleet_or_say, Backend, TestApp, TestQueues, BROKER};
use dispatcher::amqp;
use lapin::options::{BasicAckOptions, BasicGetOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use serde_json::{json, Value};
use std::sync::Once;
use std::time::Duration;
use store::dispatch::outbox::Emit;
use tokio_util::sync::CancellationToken;

/// A test's app, its own queues, and a broker connection to inspect them.
struct Fleet {
    app: TestApp,
    queues: TestQueues,
}

/// The running consumer of a test.
struct Intake {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Intake {
    async fn shutdown(self) {
        self.stop.cancel();
        tokio::time::timeout(Duration::from_secs(15), self.task)
            .await
            .expect("the intake stops promptly")
            .expect("the intake does not panic");
    }
}

/// `None` (after saying once that these tests were not run) unless
/// `BILLING_TEST_FLEET=1`.
async fn fleet() -> Option<Fleet> {
    static NOTICE: Once = Once::new();
    if !fleet_or_say(&NOTICE, "RabbitMQ") {
        return None;
    }
    let queues = TestQueues::declare().await;
    let app = TestApp::spawn(Backend::Postgres).await;
    Some(Fleet { app, queues })
}

impl Fleet {
    fn start_intake(&self) -> Intake {
        let stop = CancellationToken::new();
        let task = tokio::spawn(amqp::consume(
            self.app.queue.clone(),
            self.queues.settings.clone(),
            stop.clone(),
        ));
        Intake { stop, task }
    }

    /// A valid envelope of the sandbox environment: `(event_ref, body)`.
    fn envelope(&self, event_type: &str, data: Value) -> (String, Vec<u8>) {
        let event_ref = domain::Ref::generate(domain::Prefix::Event).into_string();
        let body = json!({
            "event_ref": event_ref,
            "public_event_type": event_type,
            "environment_ref": self.app.sandbox.environment_ref,
            "occurred_at": domain::Timestamp::now().to_rfc3339(),
            "scope": {"product_refs": [], "buyer_ref": null, "beneficiary_business_ref": null},
            "data": data,
        });
        (event_ref, body.to_string().into_bytes())
    }

    /// Publishes `body` on `billing.events` as another system would.
    async fn publish(&self, body: &[u8], routing_key: &str) {
        amqp::publish(BROKER, body, routing_key)
            .await
            .expect("the broker confirms the message");
    }

    /// How many messages wait in this test's queue, unconsumed (every
    /// test's events reach it: at least this test's).
    async fn waiting(&self) -> u32 {
        self.queues
            .channel
            .queue_declare(
                &self.queues.settings.queue,
                QueueDeclareOptions {
                    passive: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .expect("the test's queue exists")
            .message_count()
    }

    /// Reads this test's dead letter queue until a message with `body`
    /// arrives; returns its `x-dead-reason`.
    async fn dead_letter(&self, body: &[u8]) -> String {
        let poll = Poll::within(Duration::from_secs(20)).every(Duration::from_millis(50));
        loop {
            let got = self
                .queues
                .channel
                .basic_get(&self.queues.settings.dead_queue, BasicGetOptions::default())
                .await
                .expect("basic.get");
            match got {
                Some(message) => {
                    let d = message.delivery;
                    d.ack(BasicAckOptions::default()).await.expect("ack");
                    if d.data == body {
                        let headers = d.properties.headers().clone().unwrap_or_default();
                        return match headers.inner().get(amqp::DEAD_REASON_HEADER) {
                            Some(AMQPValue::LongString(s)) => s.to_string(),
                            other => panic!("no x-dead-reason header: {other:?}"),
                        };
                    }
                }
                None => {
                    poll.tick(|| {
                        format!(
                            "the message did not reach {}",
                            self.queues.settings.dead_queue
                        )
                    })
                    .await
                }
            }
        }
    }

    /// Deletes this test's queues.
    async fn cleanup(self) {
        self.queues.cleanup().await;
    }
}

/// How many requests `receiver` got for `event_ref`.
fn received_for(receiver: &TestReceiver, event_ref: &str) -> usize {
    receiver
        .received()
        .iter()
        .filter(|r| r.json()["event_ref"] == event_ref)
        .count()
}

/// Waits until `receiver` got every one of `event_refs`.
async fn all_received(app: &TestApp, receiver: &TestReceiver, event_refs: &[&str]) {
    app.eventually(20, || async {
        event_refs
            .iter()
            .all(|e| received_for(receiver, e) > 0)
            .then_some(())
    })
    .await
}

fn payment() -> Value {
    domain::webhook::catalogue::example("payment.succeeded", 2).expect("example")
}

/// The intake says when its queue is bound, which `/readyz` waits for: an
/// event published before then reaches no queue of the store's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_intake_says_once_its_queue_is_bound() {
    let Some(fleet) = fleet().await else { return };
    let bound = fleet.queues.settings.bound.clone();
    assert!(!bound.is_bound(), "bound before any intake ran");
    let intake = fleet.start_intake();
    tokio::time::timeout(Duration::from_secs(10), bound.wait())
        .await
        .expect("the intake binds its queue within 10 s");
    assert!(bound.is_bound());
    intake.shutdown().await;
    assert!(
        bound.is_bound(),
        "a bound queue stays bound when its consumer stops"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_published_event_is_delivered_signed() {
    let Some(fleet) = fleet().await else { return };
    let app = &fleet.app;
    let receiver = TestReceiver::start(Behaviour::Status(204)).await;
    let (endpoint, secret) = app
        .subscribed_endpoint(&receiver.url(), "payment.succeeded", 2)
        .await;
    let dispatcher = app.start_dispatcher(app.dispatch_settings("0s"));
    let intake = fleet.start_intake();

    let (event_ref, body) = fleet.envelope("payment.succeeded", payment());
    fleet.publish(&body, "payment.succeeded").await;
    let d = settled(app, &endpoint, "succeeded").await;
    intake.shutdown().await;
    dispatcher.shutdown().await;

    let req = &receiver.the_one_signed(&d, &secret);
    let delivered = req.json();
    assert_eq!(delivered["event_ref"], event_ref);
    assert_eq!(delivered["public_event_type"], "payment.succeeded");
    assert_eq!(delivered["environment_ref"], app.sandbox.environment_ref);
    fleet.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_event_ref_is_delivered_once() {
    let Some(fleet) = fleet().await else { return };
    let app = &fleet.app;
    let receiver = TestReceiver::start(Behaviour::Status(200)).await;
    let (endpoint, _) = app
        .subscribed_endpoint(&receiver.url(), "refund.created", 1)
        .await;
    let dispatcher = app.start_dispatcher(app.dispatch_settings("0s"));
    let intake = fleet.start_intake();

    let data = json!({"refund_ref": "ref_AAAAAAAAAAAA"});
    let (event_ref, body) = fleet.envelope("refund.created", data.clone());
    fleet.publish(&body, "refund.created").await;
    fleet.publish(&body, "refund.created").await;
    // A later event shows the queue was worked past both copies.
    let (later, later_body) = fleet.envelope("refund.created", data);
    fleet.publish(&later_body, "refund.created").await;
    all_received(app, &receiver, &[&event_ref, &later]).await;
    settled(app, &endpoint, "succeeded").await;
    // Nothing left to fan out or deliver: a second delivery of the
    // duplicate would have been made by then.
    app.eventually(15, || async { app.idle().await.then_some(()) })
        .await;
    intake.shutdown().await;
    dispatcher.shutdown().await;

    assert_eq!(received_for(&receiver, &event_ref), 1);
    assert_eq!(received_for(&receiver, &later), 1);
    assert_eq!(receiver.count(), 2);
    fleet.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_message_is_dead_lettered_and_the_consumer_goes_on() {
    let Some(fleet) = fleet().await else { return };
    let app = &fleet.app;
    let receiver = TestReceiver::start(Behaviour::Status(200)).await;
    app.subscribed_endpoint(&receiver.url(), "payout.paid", 1)
        .await;
    let dispatcher = app.start_dispatcher(app.dispatch_settings("0s"));
    let intake = fleet.start_intake();

    // Not JSON at all, with a marker so this test knows its own copy.
    let marker = domain::Ref::generate(domain::Prefix::Event).into_string();
    let garbage = format!("this is not an envelope {marker}").into_bytes();
    fleet.publish(&garbage, "payout.paid").await;
    // Well-formed JSON naming a type outside the catalogue.
    let (_, unknown) = fleet.envelope("payout.exploded", json!({}));
    fleet.publish(&unknown, "payout.exploded").await;

    let reason = fleet.dead_letter(&garbage).await;
    assert!(reason.contains("not a valid envelope"), "{reason}");
    let reason = fleet.dead_letter(&unknown).await;
    assert!(reason.contains("catalogue"), "{reason}");
    // Kept in the store's dead letters too.
    app.eventually(10, || async {
        (app.store.dispatch().dead_letter_count().await.unwrap() >= 2).then_some(())
    })
    .await;

    // The consumer is still there: a valid event afterwards goes through.
    // (Other systems' payouts are projected: the data is a whole payout.)
    let payout = domain::webhook::catalogue::example("payout.paid", 1).expect("an example");
    let (event_ref, body) = fleet.envelope("payout.paid", payout);
    fleet.publish(&body, "payout.paid").await;
    all_received(app, &receiver, &[&event_ref]).await;
    assert!(!intake.task.is_finished());
    intake.shutdown().await;
    dispatcher.shutdown().await;
    assert_eq!(received_for(&receiver, &event_ref), 1);
    fleet.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_published_while_the_consumer_is_down_are_delivered() {
    let Some(fleet) = fleet().await else { return };
    let app = &fleet.app;
    let receiver = TestReceiver::start(Behaviour::Status(200)).await;
    app.subscribed_endpoint(&receiver.url(), "invoice.paid", 1)
        .await;
    let dispatcher = app.start_dispatcher(app.dispatch_settings("0s"));

    // Nothing consumes yet: the queue keeps the message.
    let data = json!({"invoice_ref": "inv_AAAAAAAAAAAA"});
    let (first, body) = fleet.envelope("invoice.paid", data.clone());
    fleet.publish(&body, "invoice.paid").await;
    // Confirmed by the broker, so in the queue by now.
    assert!(fleet.waiting().await >= 1, "the queue keeps the message");
    assert_eq!(receiver.count(), 0);
    let intake = fleet.start_intake();
    all_received(app, &receiver, &[&first]).await;

    // Stopped after it ran: what arrives meanwhile waits for the next start.
    intake.shutdown().await;
    let (second, body) = fleet.envelope("invoice.paid", data.clone());
    fleet.publish(&body, "invoice.paid").await;
    let (third, body) = fleet.envelope("invoice.paid", data);
    fleet.publish(&body, "invoice.paid").await;
    assert!(fleet.waiting().await >= 2, "the queue keeps the messages");
    assert_eq!(receiver.count(), 1);
    let intake = fleet.start_intake();
    all_received(app, &receiver, &[&second, &third]).await;
    app.eventually(15, || async { app.idle().await.then_some(()) })
        .await;
    intake.shutdown().await;
    dispatcher.shutdown().await;
    for e in [&first, &second, &third] {
        assert_eq!(received_for(&receiver, e), 1, "{e}");
    }
    fleet.cleanup().await;
}

/// The broker's pid of the connection named `name`, from `rabbitmqctl`
/// (tab-separated `pid client_properties` lines; the pid in the form
/// `close_connection` takes).
fn connection_pid(name: &str) -> Option<String> {
    let out = std::process::Command::new("rabbitmqctl")
        .args([
            "list_connections",
            "-q",
            "--no-table-headers",
            "pid",
            "client_properties",
        ])
        .output()
        .expect("rabbitmqctl runs");
    assert!(
        out.status.success(),
        "rabbitmqctl list_connections failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|line| line.contains(name))
        .and_then(|line| line.split('\t').next())
        .map(|pid| pid.trim().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_consumer_reconnects_after_the_broker_closes_its_connection() {
    let Some(fleet) = fleet().await else { return };
    let rabbitmqctl = std::process::Command::new("rabbitmqctl")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !rabbitmqctl {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "connection drop test not run: rabbitmqctl is not available"
        );
        fleet.cleanup().await;
        return;
    }
    let app = &fleet.app;
    let receiver = TestReceiver::start(Behaviour::Status(200)).await;
    app.subscribed_endpoint(&receiver.url(), "order.created", 1)
        .await;
    let dispatcher = app.start_dispatcher(app.dispatch_settings("0s"));
    let intake = fleet.start_intake();
    let data = json!({"order_ref": "ord_AAAAAAAAAAAA"});
    let (first, body) = fleet.envelope("order.created", data.clone());
    fleet.publish(&body, "order.created").await;
    all_received(app, &receiver, &[&first]).await;

    // Only this test's consumer connection is closed, from the server side.
    let name = fleet.queues.settings.connection_name.clone();
    let pid = app
        .eventually(10, || {
            let name = name.clone();
            async move {
                tokio::task::spawn_blocking(move || connection_pid(&name))
                    .await
                    .ok()?
            }
        })
        .await;
    let closed = std::process::Command::new("rabbitmqctl")
        .args(["close_connection", &pid, "test: connection drop"])
        .output()
        .expect("rabbitmqctl runs");
    assert!(
        closed.status.success(),
        "{}",
        String::from_utf8_lossy(&closed.stderr)
    );

    let (second, body) = fleet.envelope("order.created", data);
    fleet.publish(&body, "order.created").await;
    all_received(app, &receiver, &[&second]).await;
    assert!(!intake.task.is_finished());
    // A new connection of the same name replaced the closed one.
    let again = tokio::task::spawn_blocking(move || connection_pid(&name))
        .await
        .unwrap()
        .expect("the consumer is connected again");
    assert_ne!(again, pid);
    intake.shutdown().await;
    dispatcher.shutdown().await;
    assert_eq!(received_for(&receiver, &first), 1);
    assert_eq!(received_for(&receiver, &second), 1);
    fleet.cleanup().await;
}

/// An event emitted (committed to the outbox) while RabbitMQ cannot be
/// reached stays in the outbox and is relayed, then delivered, once it can.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_outbox_keeps_events_until_the_broker_confirms_them() {
    let Some(fleet) = fleet().await else { return };
    let app = &fleet.app;
    let receiver = TestReceiver::start(Behaviour::Status(204)).await;
    app.subscribed_endpoint(&receiver.url(), "payment.succeeded", 2)
        .await;
    let dispatcher = app.start_dispatcher(app.dispatch_settings("0s"));
    let intake = fleet.start_intake();
    let events: Vec<store::EventRecord> = (0..5)
        .map(|_| {
            let (_, body) = fleet.envelope("payment.succeeded", payment());
            dispatcher::intake::parse(&body).expect("a valid event")
        })
        .collect();
    let mut tx = app.store.begin().await.unwrap();
    tx.emit_all(&events).await.expect("emitted");
    tx.commit().await.expect("emitted");

    // A broker that does not answer: the relay's connections are taken and
    // closed at once; nothing leaves the outbox.
    let mute = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a free port");
    let dead_url = format!(
        "amqp://guest:guest@127.0.0.1:{}/%2f",
        mute.local_addr().unwrap().port()
    );
    let stop = CancellationToken::new();
    let relay = tokio::spawn(dispatcher::outbox::relay(
        app.store.clone(),
        dispatcher::outbox::Target::Amqp(dead_url),
        stop.clone(),
    ));
    // Two attempts: the relay has tried, failed, and tried again.
    for _ in 0..2 {
        let (socket, _) = tokio::time::timeout(Duration::from_secs(20), mute.accept())
            .await
            .expect("the relay tries the broker")
            .expect("accept");
        drop(socket);
    }
    stop.cancel();
    relay.await.expect("the relay stops");
    assert_eq!(app.store.outbox_batch(10).await.unwrap().len(), 5);
    assert!(receiver.received().is_empty());

    // The real broker: every event is published, consumed and delivered.
    let stop = CancellationToken::new();
    let relay = tokio::spawn(dispatcher::outbox::relay(
        app.store.clone(),
        dispatcher::outbox::Target::Amqp(BROKER.to_owned()),
        stop.clone(),
    ));
    let refs: Vec<&str> = events.iter().map(|e| e.event_ref.as_str()).collect();
    all_received(app, &receiver, &refs).await;
    // The relay deletes an event once the broker confirmed it, which may
    // come after the consumer took it: it is checked once the relay ended
    // its round and stopped.
    stop.cancel();
    relay.await.expect("the relay stops");
    assert!(app.store.outbox_batch(10).await.unwrap().is_empty());
    intake.shutdown().await;
    dispatcher.shutdown().await;
    fleet.cleanup().await;
}

/// The API's readiness probe opens a whole AMQP connection: a broker that
/// takes TCP connections but refuses the login or the virtual host is not
/// ready, and one that is not listening neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readiness_probe_logs_in_to_the_virtual_host() {
    if !fleet_enabled() {
        return;
    }
    amqp::reachable(BROKER).await.expect("the broker is ready");
    let missing_vhost = "amqp://guest:guest@127.0.0.1:5672/no-such-vhost-for-readiness";
    assert!(amqp::reachable(missing_vhost).await.is_err());
    let wrong_password = "amqp://guest:not-the-password@127.0.0.1:5672/%2f";
    assert!(amqp::reachable(wrong_password).await.is_err());
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let nobody = format!("amqp://guest:guest@127.0.0.1:{port}/%2f");
    assert!(amqp::reachable(&nobody).await.is_err());
}
