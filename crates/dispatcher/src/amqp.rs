//! RabbitMQ event intake for fleet mode (contract section 9, "Events on the
//! queue").
//!
//! Topology, declared (idempotently) by every consumer and publisher:
//!
//! - `billing.events`: durable topic exchange; messages are persistent and
//!   their routing key is the event type.
//! - `billing.events.dispatcher.<store identity>` ([`queue_of`], or the
//!   name `queue.name` sets): the durable queue a store's dispatchers
//!   share, bound to `billing.events` with `#` (competing consumers within
//!   the store's fleet; each store has a queue of its own).
//! - `billing.events.dead`: a durable fanout exchange and a durable queue of
//!   the same name bound to it, holding every message that could not be
//!   parsed or validated, with the reason in the `x-dead-reason` header.
//!
//! Delivery guarantees: a message is acknowledged only after its effect is
//! durable: a valid event after the store accepted it (a duplicate
//! `event_ref` is ignored by the store, so a redelivery is harmless); an
//! invalid one after it was kept in the store's dead letters and published
//! to `billing.events.dead` with a publisher confirm. The acks of messages
//! settled together go as one bulk ack (`acks`). When the store cannot
//! be written, the message is handed back (nack with requeue) after a short
//! pause: it is never lost. A lost connection is re-established with a
//! backoff of 100 ms doubling to 5 s; messages that were not acknowledged
//! are redelivered by the broker.

mod acks;

pub use crate::error::AmqpError;
use crate::intake;
use crate::metrics as m;
use crate::queue::EventQueue;
use futures::StreamExt;
use lapin::message::Delivery;
use lapin::options::{
    BasicCancelOptions, BasicConsumeOptions, BasicNackOptions, BasicPublishOptions,
    BasicQosOptions, ConfirmSelectOptions, ExchangeDeclareOptions, QueueBindOptions,
    QueueDeclareOptions,
};
use lapin::publisher_confirm::Confirmation;
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::uri::AMQPUri;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// The topic exchange domain events are published on.
pub const EXCHANGE: &str = "billing.events";
/// The start of the name of the queue a fleet's dispatchers consume from;
/// [`queue_of`] gives a store's.
pub const QUEUE: &str = "billing.events.dispatcher";
/// The exchange refused messages are published on.
pub const DEAD_EXCHANGE: &str = "billing.events.dead";
/// The queue that keeps refused messages.
pub const DEAD_QUEUE: &str = "billing.events.dead";
/// The header of a dead letter that says why it was refused.
pub const DEAD_REASON_HEADER: &str = "x-dead-reason";

/// The `source` label of the intake metrics.
const SOURCE: &str = "amqp";
const MIN_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// How long a message waits before it is handed back when the store failed.
const STORE_RETRY_DELAY: Duration = Duration::from_secs(1);
/// How long shutdown waits for handlers to finish their message.
const DRAIN: Duration = Duration::from_secs(10);
/// How long opening a connection may take (TCP and the AMQP handshake).
const CONNECT_WITHIN: Duration = Duration::from_secs(10);
/// How long a publish may wait for the broker's confirm. A broker that
/// blocks publishers (a resource alarm) or was cut off mid-way answers
/// nothing: the message counts as not published and is sent again (the
/// intake keeps each `event_ref` once).
const CONFIRM_WITHIN: Duration = Duration::from_secs(10);
/// How long closing a connection may take: a broker that is gone never
/// answers the close.
const CLOSE_WITHIN: Duration = Duration::from_secs(2);

/// The queue of the store `owner`'s fleet when `queue.name` does not name
/// one: `billing.events.dispatcher.<store identity>`. Each store's queue
/// is bound to `billing.events` with `#`, so every store sees every event
/// and keeps its own environments' (`intake::screen`); two stores never
/// compete for one queue's messages.
pub fn queue_of(owner: &domain::StoreId) -> String {
    format!("{QUEUE}.{owner}")
}

/// Where and how to consume.
#[derive(Clone)]
pub struct AmqpSettings {
    /// `amqp://user:password@host:port/vhost`.
    pub url: String,
    /// The queue bound to `billing.events` with `#`.
    pub queue: String,
    /// The queue bound to `billing.events.dead`.
    pub dead_queue: String,
    /// Unacknowledged messages the broker hands this consumer at once.
    pub prefetch: u16,
    /// Lets the broker delete the queues after they have been unused this
    /// long (`x-expires`; for tests). `None` in production.
    pub queue_expires: Option<Duration>,
    /// Names the connection (visible in the broker's management tools).
    pub connection_name: String,
    /// Set once the queue is declared and bound.
    pub bound: Bound,
}

/// Whether a consumer has declared and bound its queue. From then on the
/// broker keeps every event for the store, also while the consumer
/// reconnects, so a process is ready (`/readyz`) only once this is set:
/// an event published earlier routes to no queue of the store's and is
/// never seen by it.
#[derive(Clone, Debug)]
pub struct Bound(Arc<tokio::sync::watch::Sender<bool>>);

impl Default for Bound {
    fn default() -> Bound {
        Bound(Arc::new(tokio::sync::watch::Sender::new(false)))
    }
}

impl Bound {
    /// Whether the queue has been declared and bound.
    pub fn is_bound(&self) -> bool {
        *self.0.borrow()
    }

    /// Returns once the queue has been declared and bound.
    pub async fn wait(&self) {
        let _ = self.0.subscribe().wait_for(|bound| *bound).await;
    }

    fn set(&self) {
        self.0.send_replace(true);
    }
}

impl AmqpSettings {
    /// The topology on `url` with the queue `billing.events.dispatcher`
    /// and the dead letter queue; a fleet names its store's queue instead
    /// (`queue_of`, or `queue.name`).
    pub fn new(url: impl Into<String>) -> AmqpSettings {
        AmqpSettings {
            url: url.into(),
            queue: QUEUE.to_owned(),
            dead_queue: DEAD_QUEUE.to_owned(),
            prefetch: 256,
            queue_expires: None,
            connection_name: format!("billing-dispatcher-{}", std::process::id()),
            bound: Bound::default(),
        }
    }
}

impl std::fmt::Debug for AmqpSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AmqpSettings")
            .field("url", &redact(&self.url))
            .field("queue", &self.queue)
            .field("dead_queue", &self.dead_queue)
            .field("prefetch", &self.prefetch)
            .field("queue_expires", &self.queue_expires)
            .field("connection_name", &self.connection_name)
            .field("bound", &self.bound.is_bound())
            .finish()
    }
}

/// Hides the password of an `amqp://user:password@host/vhost` URL.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => match url[s + 3..at].find(':') {
            Some(c) => format!("{}:***{}", &url[..s + 3 + c], &url[at..]),
            None => url.to_owned(),
        },
        _ => url.to_owned(),
    }
}

/// Parses an `amqp://` or `amqps://` URL. The URL parser of lapin 2 takes
/// only domain names as hosts and silently replaces an IP address with
/// `localhost`; the address is restored here.
pub fn parse_url(url: &str) -> Result<AMQPUri, AmqpError> {
    let mut uri: AMQPUri = url.parse().map_err(AmqpError::InvalidUrl)?;
    let authority = url
        .split_once("://")
        .map_or("", |(_, rest)| rest)
        .split(['/', '?', '#'])
        .next()
        .unwrap_or("");
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = match host_port.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host_port.split(':').next().unwrap_or(""),
    };
    if host.parse::<std::net::IpAddr>().is_ok() {
        uri.authority.host = host.to_owned();
    }
    Ok(uri)
}

/// Opens a connection that runs on the current tokio runtime, within
/// [`CONNECT_WITHIN`].
pub async fn connect(url: &str, connection_name: &str) -> Result<Connection, lapin::Error> {
    connect_within(url, connection_name, CONNECT_WITHIN).await
}

/// `connect`, giving up after `within`: a broker that takes the TCP
/// connection and never finishes the handshake (overloaded, or cut off
/// behind a proxy) is an error the caller retries, not a wait for ever.
async fn connect_within(
    url: &str,
    connection_name: &str,
    within: Duration,
) -> Result<Connection, lapin::Error> {
    let io_error =
        |kind, text: String| lapin::Error::IOError(Arc::new(std::io::Error::new(kind, text)));
    let uri =
        parse_url(url).map_err(|e| io_error(std::io::ErrorKind::InvalidInput, e.to_string()))?;
    let properties = ConnectionProperties::default()
        .with_connection_name(connection_name.into())
        .with_executor(tokio_executor_trait::Tokio::current())
        .with_reactor(tokio_reactor_trait::Tokio);
    match tokio::time::timeout(within, Connection::connect_uri(uri, properties)).await {
        Ok(connected) => connected,
        Err(_) => Err(io_error(
            std::io::ErrorKind::TimedOut,
            format!(
                "RabbitMQ did not open a connection within {} ms",
                within.as_millis()
            ),
        )),
    }
}

fn durable_exchange() -> ExchangeDeclareOptions {
    ExchangeDeclareOptions {
        durable: true,
        ..ExchangeDeclareOptions::default()
    }
}

/// Declares the exchanges and `settings`' queues with their bindings.
/// Declaring is idempotent; every consumer does it on (re)connect.
pub async fn declare(channel: &Channel, settings: &AmqpSettings) -> Result<(), lapin::Error> {
    channel
        .exchange_declare(
            EXCHANGE,
            ExchangeKind::Topic,
            durable_exchange(),
            FieldTable::default(),
        )
        .await?;
    channel
        .exchange_declare(
            DEAD_EXCHANGE,
            ExchangeKind::Fanout,
            durable_exchange(),
            FieldTable::default(),
        )
        .await?;
    let mut arguments = FieldTable::default();
    if let Some(expires) = settings.queue_expires {
        let millis = u32::try_from(expires.as_millis()).unwrap_or(u32::MAX);
        arguments.insert("x-expires".into(), AMQPValue::LongUInt(millis));
    }
    let durable_queue = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    for (queue, exchange, key) in [
        (&settings.queue, EXCHANGE, "#"),
        (&settings.dead_queue, DEAD_EXCHANGE, ""),
    ] {
        channel
            .queue_declare(queue, durable_queue, arguments.clone())
            .await?;
        channel
            .queue_bind(
                queue,
                exchange,
                key,
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await?;
    }
    Ok(())
}

/// Publishes with `mandatory` set on a channel in confirm mode and waits for
/// the broker's confirm: `Ok` means the message is routed and accepted.
async fn publish_confirmed(
    channel: &Channel,
    exchange: &str,
    routing_key: &str,
    body: &[u8],
    properties: BasicProperties,
) -> Result<(), AmqpError> {
    let options = BasicPublishOptions {
        mandatory: true,
        ..BasicPublishOptions::default()
    };
    let confirmation = channel
        .basic_publish(exchange, routing_key, options, body, properties)
        .await?
        .await?;
    match confirmation {
        Confirmation::Ack(None) => Ok(()),
        Confirmation::Ack(Some(_)) => Err(AmqpError::Unroutable {
            exchange: exchange.to_owned(),
            routing_key: routing_key.to_owned(),
        }),
        Confirmation::Nack(_) | Confirmation::NotRequested => Err(AmqpError::NotConfirmed),
    }
}

/// A connection and channel in confirm mode for publishing events on
/// `billing.events`.
pub struct Publisher {
    connection: Connection,
    channel: Channel,
}

impl Publisher {
    pub async fn connect(url: &str) -> Result<Publisher, AmqpError> {
        let connection = connect(url, "billing-publisher").await?;
        let channel = connection.create_channel().await?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await?;
        channel
            .exchange_declare(
                EXCHANGE,
                ExchangeKind::Topic,
                durable_exchange(),
                FieldTable::default(),
            )
            .await?;
        Ok(Publisher {
            connection,
            channel,
        })
    }

    /// Publishes one envelope, persistent, and waits for the confirm. A
    /// message no queue is bound for is an error, not a silent loss.
    pub async fn publish(&self, event_json: &[u8], routing_key: &str) -> Result<(), AmqpError> {
        let properties = BasicProperties::default()
            .with_content_type("application/json".into())
            .with_delivery_mode(2);
        let publish =
            publish_confirmed(&self.channel, EXCHANGE, routing_key, event_json, properties);
        match tokio::time::timeout(CONFIRM_WITHIN, publish).await {
            Ok(outcome) => outcome,
            Err(_) => Err(AmqpError::NoAnswer(CONFIRM_WITHIN)),
        }
    }

    /// Closes the connection, waiting at most `CLOSE_WITHIN` for the broker.
    pub async fn close(self) {
        let _ = tokio::time::timeout(CLOSE_WITHIN, self.connection.close(200, "done")).await;
    }
}

/// Publishes one envelope on `billing.events` (routing key = event type)
/// with a publisher confirm, over a connection of its own.
pub async fn publish(url: &str, event_json: &[u8], routing_key: &str) -> Result<(), AmqpError> {
    let publisher = Publisher::connect(url).await?;
    let result = publisher.publish(event_json, routing_key).await;
    publisher.close().await;
    result
}

/// Consumes `settings.queue` into the event queue until `shutdown` is
/// cancelled, reconnecting with a backoff whenever the connection is lost.
/// The queue wakes a dispatcher of this process itself: it hands fresh
/// deliveries over and passes on those it left due (`handoff::Intake`).
pub async fn consume(queue: EventQueue, settings: AmqpSettings, shutdown: CancellationToken) {
    let mut backoff = MIN_BACKOFF;
    loop {
        if shutdown.is_cancelled() {
            return;
        }
        match session(&queue, &settings, &shutdown, &mut backoff).await {
            Ok(()) => return,
            Err(e) => tracing::warn!(
                error = %e,
                broker = %redact(&settings.url),
                retry_in_ms = backoff.as_millis() as u64,
                "RabbitMQ intake interrupted; reconnecting"
            ),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// One connection's life: `Ok` on shutdown, `Err` when it must be redone.
async fn session(
    queue: &EventQueue,
    settings: &AmqpSettings,
    shutdown: &CancellationToken,
    backoff: &mut Duration,
) -> Result<(), AmqpError> {
    let connection = connect(&settings.url, &settings.connection_name).await?;
    let result = run_session(&connection, queue, settings, shutdown, backoff).await;
    // Closing hands unacknowledged messages back to the broker.
    let _ = tokio::time::timeout(
        Duration::from_secs(2),
        connection.close(200, "dispatcher stopping"),
    )
    .await;
    result
}

struct Handler {
    queue: EventQueue,
    /// The consuming channel's acks, sent in bulk.
    acks: acks::Acks,
    dead: Channel,
    /// Cancelled by a handler whose dead letter channel failed.
    broken: CancellationToken,
    shutdown: CancellationToken,
}

async fn run_session(
    connection: &Connection,
    queue: &EventQueue,
    settings: &AmqpSettings,
    shutdown: &CancellationToken,
    backoff: &mut Duration,
) -> Result<(), AmqpError> {
    let channel = connection.create_channel().await?;
    declare(&channel, settings).await?;
    settings.bound.set();
    channel
        .basic_qos(settings.prefetch, BasicQosOptions::default())
        .await?;
    let dead = connection.create_channel().await?;
    dead.confirm_select(ConfirmSelectOptions::default()).await?;
    let mut consumer = channel
        .basic_consume(
            &settings.queue,
            &settings.connection_name,
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await?;
    tracing::info!(
        broker = %redact(&settings.url),
        queue = %settings.queue,
        "consuming events from RabbitMQ"
    );
    *backoff = MIN_BACKOFF;
    let acks_done = CancellationToken::new();
    let (acks, ack_task) = acks::Acks::start(channel.clone(), acks_done.clone());
    let handler = Arc::new(Handler {
        queue: queue.clone(),
        acks,
        dead,
        broken: CancellationToken::new(),
        shutdown: shutdown.clone(),
    });
    // As many handlers as unacknowledged messages the broker sends: a
    // handler waits for the queue's group commit (it holds no connection),
    // so every message delivered joins the next shared write instead of
    // waiting in memory for a handler.
    let handlers = usize::from(settings.prefetch.max(1));
    let slots = Arc::new(Semaphore::new(handlers));
    let outcome = loop {
        let next = tokio::select! {
            _ = shutdown.cancelled() => break Ok(()),
            _ = handler.broken.cancelled() => break Err(AmqpError::DeadLetterChannel),
            next = consumer.next() => next,
        };
        let delivery = match next {
            Some(Ok(delivery)) => delivery,
            Some(Err(e)) => break Err(e.into()),
            None => break Err(AmqpError::ConsumerCancelled),
        };
        let permit = tokio::select! {
            _ = shutdown.cancelled() => None,
            permit = slots.clone().acquire_owned() => permit.ok(),
        };
        let Some(permit) = permit else {
            // Not acknowledged: the broker redelivers it once the
            // connection closes.
            break Ok(());
        };
        let handler = handler.clone();
        tokio::spawn(async move {
            handler.handle(delivery).await;
            drop(permit);
        });
    };
    // Let the handlers finish their message (each acks or hands it back).
    let _ = tokio::time::timeout(DRAIN, slots.acquire_many(handlers as u32)).await;
    acks_done.cancel();
    let _ = ack_task.await;
    if outcome.is_ok() {
        let _ = channel
            .basic_cancel(consumer.tag().as_str(), BasicCancelOptions::default())
            .await;
        let _ = channel.close(200, "dispatcher stopping").await;
        let _ = handler.dead.close(200, "dispatcher stopping").await;
    }
    outcome
}

impl Handler {
    async fn handle(&self, delivery: Delivery) {
        let parsed = match intake::parse_with_producer(&delivery.data) {
            Ok((event, producer)) => {
                match intake::screen(&self.queue, event, producer.as_deref()).await {
                    Ok(screened) => screened,
                    Err(e) => {
                        tracing::warn!(error = %e, "event not screened; handing it back");
                        self.hand_back(&delivery).await;
                        return;
                    }
                }
            }
            Err(refused) => intake::Screened::Refuse(refused),
        };
        match parsed {
            intake::Screened::Foreign => {
                metrics::counter!(m::EVENTS_FOREIGN, "source" => SOURCE).increment(1);
                self.ack(&delivery);
            }
            intake::Screened::Accept(event) => match self.queue.enqueue(&event).await {
                Ok(_) => {
                    // The event is durable now: even if the ack is lost, a
                    // redelivery is a duplicate the store ignores.
                    metrics::counter!(m::EVENTS_CONSUMED, "source" => SOURCE).increment(1);
                    self.ack(&delivery);
                }
                Err(e) => {
                    tracing::warn!(error = %e, event_ref = %event.event_ref, "event not stored; handing it back");
                    self.hand_back(&delivery).await;
                }
            },
            intake::Screened::Refuse(refused) => self.dead_letter(&delivery, refused).await,
        }
    }

    /// Keeps a refused message in the store and on `billing.events.dead`,
    /// then acknowledges it.
    async fn dead_letter(&self, delivery: &Delivery, refused: intake::EnvelopeError) {
        let reason = refused.to_string();
        if let Err(e) = self
            .queue
            .store()
            .dispatch()
            .dead_letter(&String::from_utf8_lossy(&delivery.data), &reason)
            .await
        {
            tracing::warn!(error = %e, "dead letter not stored; handing the message back");
            self.hand_back(delivery).await;
            return;
        }
        let mut headers = delivery.properties.headers().clone().unwrap_or_default();
        headers.insert(
            DEAD_REASON_HEADER.into(),
            AMQPValue::LongString(reason.as_str().into()),
        );
        headers.insert(
            "x-original-routing-key".into(),
            AMQPValue::LongString(delivery.routing_key.as_str().into()),
        );
        let mut properties = BasicProperties::default()
            .with_delivery_mode(2)
            .with_headers(headers);
        if let Some(content_type) = delivery.properties.content_type() {
            properties = properties.with_content_type(content_type.clone());
        }
        let routing_key: ShortString = delivery.routing_key.clone();
        if let Err(e) = publish_confirmed(
            &self.dead,
            DEAD_EXCHANGE,
            routing_key.as_str(),
            &delivery.data,
            properties,
        )
        .await
        {
            tracing::warn!(error = %e, "dead letter not published; handing the message back");
            self.broken.cancel();
            self.hand_back(delivery).await;
            return;
        }
        tracing::warn!(
            reason = %reason,
            routing_key = %delivery.routing_key,
            "message refused and dead-lettered"
        );
        metrics::counter!(m::EVENTS_DEAD, "source" => SOURCE).increment(1);
        self.ack(delivery);
    }

    fn ack(&self, delivery: &Delivery) {
        self.acks.ack(delivery.delivery_tag);
    }

    /// Hands a message back for redelivery after a pause, so a failing
    /// store is not hammered.
    async fn hand_back(&self, delivery: &Delivery) {
        tokio::select! {
            _ = self.shutdown.cancelled() => {}
            _ = tokio::time::sleep(STORE_RETRY_DELAY) => {}
        }
        let requeue = BasicNackOptions {
            requeue: true,
            ..BasicNackOptions::default()
        };
        if let Err(e) = delivery.nack(requeue).await {
            tracing::warn!(error = %e, "nack failed; the broker will redeliver the message");
        }
        self.acks.nacked(delivery.delivery_tag);
    }
}

/// Whether the broker opens an AMQP connection with this URL's
/// credentials and virtual host (the whole handshake, then closed): the
/// readiness probe of processes that do not hold a connection of their
/// own (the API). A broker that takes TCP connections but refuses the
/// login or the virtual host is not ready.
pub async fn reachable(url: &str) -> Result<(), AmqpError> {
    /// How long the probe waits for the connection to open.
    const WAIT: Duration = Duration::from_secs(2);
    let connection = connect_within(url, "billing-readiness-probe", WAIT).await?;
    let _ = connection.close(200, "readiness probe done").await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_hidden() {
        assert_eq!(
            redact("amqp://guest:secret@127.0.0.1:5672/%2f"),
            "amqp://guest:***@127.0.0.1:5672/%2f"
        );
        assert_eq!(redact("amqp://127.0.0.1"), "amqp://127.0.0.1");
        let s = format!("{:?}", AmqpSettings::new("amqp://u:pw@h/v"));
        assert!(!s.contains("pw"), "{s}");
    }

    #[test]
    fn ip_hosts_are_kept() {
        let u = parse_url("amqp://guest:guest@127.0.0.1:5672/%2f").unwrap();
        assert_eq!(
            (u.authority.host.as_str(), u.authority.port),
            ("127.0.0.1", 5672)
        );
        assert_eq!(u.vhost, "/");
        let u = parse_url("amqp://[::1]/").unwrap();
        assert_eq!(u.authority.host, "::1");
        let u = parse_url("amqps://u:p@rabbit.internal/billing").unwrap();
        assert_eq!(
            (u.authority.host.as_str(), u.authority.port),
            ("rabbit.internal", 5671)
        );
        assert!(matches!(
            parse_url("http://h/"),
            Err(AmqpError::InvalidUrl(_))
        ));
        assert!(parse_url("amqp://h:port/").is_err());
    }

    /// `config/event-envelope.schema.json` documents what `intake::parse`
    /// accepts: the catalogue's business types and the reference shapes.
    #[test]
    fn the_envelope_schema_matches_the_intake() {
        let schema: serde_json::Value =
            serde_json::from_str(include_str!("../../../config/event-envelope.schema.json"))
                .expect("the schema is JSON");
        let listed: Vec<&str> = schema["properties"]["public_event_type"]["enum"]
            .as_array()
            .expect("an enum")
            .iter()
            .filter_map(|v| v.as_str())
            .collect();
        let business: Vec<&str> = domain::webhook::catalogue::all()
            .iter()
            .filter(|t| !t.diagnostic)
            .map(|t| t.name)
            .collect();
        assert_eq!(listed, business);
        for (def, prefix) in [
            ("eventRef", domain::Prefix::Event),
            ("environmentRef", domain::Prefix::Environment),
            ("productRef", domain::Prefix::Product),
            ("buyerRef", domain::Prefix::Buyer),
            (
                "beneficiaryBusinessRef",
                domain::Prefix::BeneficiaryBusiness,
            ),
        ] {
            assert_eq!(
                schema["$defs"][def]["pattern"],
                format!("^{}_[A-Za-z0-9]{{12}}$", prefix.as_str()),
                "{def}"
            );
        }
        for example in schema["examples"].as_array().expect("examples") {
            intake::parse(example.to_string().as_bytes()).expect("the example is accepted");
        }
    }

    /// A broker that takes the TCP connection and never answers the
    /// handshake: the connection fails in time instead of waiting for ever
    /// (the outbox relay and the intake retry it).
    #[tokio::test]
    async fn a_broker_that_never_answers_fails_in_time() {
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = silent.local_addr().unwrap().port();
        let url = format!("amqp://guest:guest@127.0.0.1:{port}/%2f");
        let started = std::time::Instant::now();
        let refused = connect_within(&url, "silent", Duration::from_millis(300)).await;
        let Err(e) = refused else {
            panic!("a silent listener is no broker");
        };
        assert!(started.elapsed() < Duration::from_secs(5), "{e}");
        assert!(e.to_string().contains("within 300 ms"), "{e}");
    }

    #[test]
    fn production_names_are_fixed() {
        let s = AmqpSettings::new("amqp://h");
        assert_eq!(
            (s.queue.as_str(), s.dead_queue.as_str()),
            (QUEUE, DEAD_QUEUE)
        );
        assert_eq!(s.queue_expires, None);
    }
}
