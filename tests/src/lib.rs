//! Black-box test harness: `TestApp::spawn` starts the real router (the
//! API's and the operator console's) on a random port over a fresh store (a SQLite file in a temporary folder, or a
//! PostgreSQL database cloned from a migrated template), bootstraps both
//! environments and hands out an HTTP client with request helpers.
//!
//! `backend_tests!` runs each behavioural test against every backend. The
//! PostgreSQL variants run when `BILLING_TEST_FLEET=1`; then a missing server
//! is a failure, never a skip. Without the variable they say so once.

pub mod browser;
pub mod clocks;
pub mod console_kit;
pub mod kit;
pub mod pg;
pub mod poll;
pub mod receiver;
pub mod redis;
pub mod verifier;

use billing::bootstrap::{bootstrap, BootstrappedEnvironment};
use control_api::state::WebhookSettings;
use control_api::ApiSettings;
use domain::webhook::cipher::SecretCipher;
use serde_json::Value;
use std::net::SocketAddr;
use std::sync::Once;
use store::Store;
use tokio::net::TcpListener;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// Runs each named `async fn(TestApp)` against SQLite and PostgreSQL.
#[macro_export]
macro_rules! backend_tests {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::TestApp::spawn($crate::Backend::Sqlite).await).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    if let Some(app) = $crate::TestApp::spawn_fleet().await {
                        super::$name(app).await
                    }
                }
            )*
        }
    };
}

/// A running API over its own store.
pub struct TestApp {
    pub addr: SocketAddr,
    pub base: String,
    pub client: reqwest::Client,
    pub store: Store,
    /// The event queue of the app's process: the dispatchers the test
    /// starts take fresh deliveries from it.
    pub queue: dispatcher::EventQueue,
    pub backend: Backend,
    /// The store's database URL, for tests that look at rows no API shows.
    pub database_url: String,
    /// The bootstrap admin of the sandbox environment.
    pub sandbox: BootstrappedEnvironment,
    /// The bootstrap admin of the live environment.
    pub live: BootstrappedEnvironment,
    /// The key the app encrypts signing secrets with.
    pub cipher: SecretCipher,
    /// The app's clock (its API and the dispatchers the test starts):
    /// the wall clock until `advance` moves it.
    pub clock: domain::Clock,
    hand: domain::ClockHand,
    _guard: StoreGuard,
}

/// The schema a test's store starts with.
#[derive(Debug, Clone, Copy)]
enum Schema {
    /// Every migration: the schema this build writes.
    Current,
    /// The migrations up to this version only.
    Through(i64),
}

enum StoreGuard {
    Sqlite(#[allow(dead_code)] tempfile::TempDir),
    Postgres(#[allow(dead_code)] pg::TestDatabase),
}

pub fn fleet_enabled() -> bool {
    std::env::var("BILLING_TEST_FLEET").is_ok_and(|v| v == "1")
}

/// Whether the fleet tests run (`BILLING_TEST_FLEET=1`); when they do
/// not, says once per `notice` that those needing `services` were not run.
pub fn fleet_or_say(notice: &Once, services: &str) -> bool {
    if fleet_enabled() {
        return true;
    }
    notice.call_once(|| {
        // Written to the stream itself: libtest captures `eprintln!`.
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "fleet tests ({services}) not run: set BILLING_TEST_FLEET=1 to run them"
        );
    });
    false
}

/// The RabbitMQ broker of the fleet tests.
pub const BROKER: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

/// The attempts a store recorded, for a count to compare with the requests
/// a receiver got: the rows of `webhook_attempts` and the successes kept
/// on their deliveries' rows (`store::webhooks::attempts`).
pub const ATTEMPTS_RECORDED_SQL: &str = "SELECT (SELECT count(*) FROM webhook_attempts) + \
     (SELECT count(*) FROM webhook_deliveries WHERE success_duration_ms IS NOT NULL)";

/// The stored copies of `event_ref`'s data (packed, one per dto version),
/// as the column `data` of rows `copy_on_event` (1 on the event's row, 0 in
/// `webhook_event_data`; migration 0037).
pub fn event_copies_sql(event_ref: &str) -> String {
    format!(
        "SELECT copy_data AS data, 1 AS copy_on_event FROM events \
         WHERE event_ref = '{event_ref}' AND copy_data IS NOT NULL UNION ALL \
         SELECT data, 0 FROM webhook_event_data WHERE event_ref = '{event_ref}'"
    )
}

/// A fleet test's own queues on `billing.events` and a broker connection
/// to inspect them. Every queue bound to `billing.events` with `#` sees
/// every test's events; those of other tests' environments match no
/// subscription of this test.
pub struct TestQueues {
    pub settings: dispatcher::amqp::AmqpSettings,
    pub connection: lapin::Connection,
    pub channel: lapin::Channel,
}

impl TestQueues {
    /// Declares a new test's queues, before any consumer runs, as a
    /// previous run of the service would have: nothing published from now
    /// on is lost. A broker that cannot be reached is a failure.
    pub async fn declare() -> TestQueues {
        use dispatcher::amqp::{self, AmqpSettings};
        let id = format!("{:016x}", rand::random::<u64>());
        let connection = amqp::connect(BROKER, &format!("billing-test-client-{id}"))
            .await
            .unwrap_or_else(|e| {
                panic!("BILLING_TEST_FLEET=1 but RabbitMQ is not reachable at {BROKER}: {e}")
            });
        let channel = connection.create_channel().await.expect("a channel");
        let settings = AmqpSettings {
            queue: format!("billing.events.test-{id}"),
            dead_queue: format!("billing.events.dead.test-{id}"),
            // Left-overs of a test that failed half-way go away by themselves.
            queue_expires: Some(std::time::Duration::from_secs(300)),
            connection_name: format!("billing-test-intake-{id}"),
            ..AmqpSettings::new(BROKER)
        };
        amqp::declare(&channel, &settings)
            .await
            .expect("the topology is declared");
        TestQueues {
            settings,
            connection,
            channel,
        }
    }

    /// Deletes the test's queues and closes the connection.
    pub async fn cleanup(self) {
        for q in [&self.settings.queue, &self.settings.dead_queue] {
            let _ = self
                .channel
                .queue_delete(q, lapin::options::QueueDeleteOptions::default())
                .await;
        }
        let _ = self.connection.close(200, "test done").await;
    }
}

/// The background work that carries the service's own events to
/// receivers: the outbox relay, RabbitMQ consumers (in fleet mode) and
/// dispatchers.
pub struct EventPipeline {
    stop: tokio_util::sync::CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    dispatchers: Vec<DispatcherHandle>,
}

impl EventPipeline {
    /// Embedded mode: the relay moves events into the store's queue; one
    /// dispatcher fans them out and delivers.
    pub fn embedded(app: &TestApp) -> EventPipeline {
        let stop = tokio_util::sync::CancellationToken::new();
        let relay = tokio::spawn(dispatcher::outbox::relay(
            app.store.clone(),
            dispatcher::outbox::Target::Queue(app.queue.clone()),
            stop.clone(),
        ));
        EventPipeline {
            stop,
            tasks: vec![relay],
            dispatchers: vec![app.start_dispatcher(app.dispatch_settings("0s,1s"))],
        }
    }

    /// Fleet mode: the relay publishes to RabbitMQ, two consumers of the
    /// test's own queue (`settings`) accept into the store, two dispatchers
    /// deliver.
    pub fn fleet(app: &TestApp, settings: &dispatcher::amqp::AmqpSettings) -> EventPipeline {
        let stop = tokio_util::sync::CancellationToken::new();
        let mut tasks = vec![tokio::spawn(dispatcher::outbox::relay(
            app.store.clone(),
            dispatcher::outbox::Target::Amqp(BROKER.to_owned()),
            stop.clone(),
        ))];
        for n in 1..=2 {
            let consumer = dispatcher::amqp::AmqpSettings {
                connection_name: format!("{}-{n}", settings.connection_name),
                ..settings.clone()
            };
            tasks.push(tokio::spawn(dispatcher::amqp::consume(
                app.queue.clone(),
                consumer,
                stop.clone(),
            )));
        }
        let dispatchers = (0..2)
            .map(|_| app.start_dispatcher(app.dispatch_settings("0s,1s")))
            .collect();
        EventPipeline {
            stop,
            tasks,
            dispatchers,
        }
    }

    /// Stops the relay and consumers (promptly, without a panic), then the
    /// dispatchers.
    pub async fn shutdown(self) {
        self.stop.cancel();
        for t in self.tasks {
            tokio::time::timeout(std::time::Duration::from_secs(15), t)
                .await
                .expect("the relay and consumers stop promptly")
                .expect("the relay and consumers do not panic");
        }
        for d in self.dispatchers {
            d.shutdown().await;
        }
    }
}

impl TestApp {
    pub async fn spawn(backend: Backend) -> TestApp {
        TestApp::spawn_with(backend, |_| {}).await
    }

    /// Settings for tests: private destinations allowed (the receivers
    /// run on loopback), a fresh secret encryption key, no rate limit.
    pub fn settings() -> ApiSettings {
        let mut key = [0u8; 32];
        rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut key);
        let webhooks = WebhookSettings {
            allow_private_networks: true,
            ..WebhookSettings::with_cipher(SecretCipher::new(key))
        };
        ApiSettings {
            // Tests and benchmarks drive one credential far beyond the
            // default limit; `tests/tests/rate_limit.rs` turns it on.
            rate_limit: 0,
            ..ApiSettings::new(webhooks)
        }
    }

    /// Like `spawn`, with `tweak` applied to the test settings.
    pub async fn spawn_with(backend: Backend, tweak: impl FnOnce(&mut ApiSettings)) -> TestApp {
        TestApp::spawn_on(backend, Schema::Current, tweak).await
    }

    /// Like `spawn`, over a store of an earlier release's schema: its
    /// migrations up to version `last` only. The test writes that
    /// release's rows, then applies the rest (`app.store.migrate()`).
    pub async fn spawn_released(backend: Backend, last: i64) -> TestApp {
        TestApp::spawn_on(backend, Schema::Through(last), |_| {}).await
    }

    async fn spawn_on(
        backend: Backend,
        schema: Schema,
        tweak: impl FnOnce(&mut ApiSettings),
    ) -> TestApp {
        let (url, guard) = match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().expect("temporary folder");
                let url = format!("sqlite://{}/billing.db", dir.path().display());
                (url, StoreGuard::Sqlite(dir))
            }
            Backend::Postgres => {
                let db = match schema {
                    Schema::Current => pg::TestDatabase::create().await,
                    Schema::Through(_) => pg::TestDatabase::create_empty().await,
                };
                (db.url.clone(), StoreGuard::Postgres(db))
            }
        };
        TestApp::serve(backend, url, guard, schema, tweak).await
    }

    /// The app a new process of the service makes of this one's store:
    /// new connections, and the store migrated to the current schema as
    /// the service migrates it when it starts (the upgrade of a store a
    /// release left, `spawn_released`). This app's connections are
    /// closed first, as its process would have ended: a SQLite
    /// connection that read the old schema must not read the new one.
    pub async fn restarted(self) -> TestApp {
        let TestApp {
            store,
            backend,
            database_url,
            _guard,
            ..
        } = self;
        store.close().await;
        TestApp::serve(backend, database_url, _guard, Schema::Current, |_| {}).await
    }

    /// Serves the store at `url` (kept by `guard`) after migrating it to
    /// `schema` and bootstrapping it.
    async fn serve(
        backend: Backend,
        url: String,
        guard: StoreGuard,
        schema: Schema,
        tweak: impl FnOnce(&mut ApiSettings),
    ) -> TestApp {
        // Wired as `billing::app::open_store` wires the service's.
        let store = Store::connect_with(&url, store_options())
            .await
            .expect("store opens")
            .waking(Default::default());
        let database_url = url.clone();
        match schema {
            Schema::Current => store.migrate().await,
            Schema::Through(last) => store.migrate_through(last).await,
        }
        .expect("migrations apply");
        let boot = bootstrap(&store).await.expect("bootstrap");
        let mut envs = boot.environments.into_iter();
        let sandbox = envs.next().expect("sandbox");
        let live = envs.next().expect("live");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let mut settings = TestApp::settings();
        let (clock, hand) = domain::Clock::with_hand();
        settings.clock = clock.clone();
        tweak(&mut settings);
        let cipher = (*settings.webhooks.cipher).clone();
        let state = control_api::AppState::new(store.clone(), settings);
        // The listener serves the operator console too, as `serve` does.
        let mut console_key = [0u8; 32];
        rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut console_key);
        let console = console::ConsoleSettings::new(&console_key, addr);
        let router =
            control_api::router(state.clone()).merge(console::router(state.clone(), console));
        tokio::spawn(control_api::run_router(
            router,
            state,
            listener,
            control_api::ServeLimits::default(),
            tokio_util::sync::CancellationToken::new(),
        ));
        TestApp {
            addr,
            base: format!("http://{addr}"),
            client: reqwest::Client::new(),
            queue: billing::app::event_queue(&store),
            store,
            backend,
            database_url,
            sandbox,
            live,
            cipher,
            clock,
            hand,
            _guard: guard,
        }
    }

    /// Moves the app's clock `by` forward: what expires, ends a grace
    /// period or leaves retention after `by` has done so for its rules.
    /// Due times and leases keep the wall clock.
    pub fn advance(&self, by: std::time::Duration) {
        self.hand.advance(by);
    }

    /// The PostgreSQL app when fleet tests are enabled; otherwise `None`,
    /// after saying once that they were not run.
    pub async fn spawn_fleet() -> Option<TestApp> {
        static NOTICE: Once = Once::new();
        if !fleet_or_say(&NOTICE, "PostgreSQL") {
            return None;
        }
        Some(TestApp::spawn(Backend::Postgres).await)
    }

    /// A request to `path` (absolute, starting with `/`) as the sandbox admin.
    pub fn req(&self, method: &str, path: &str) -> Call {
        self.anon(method, path).auth(&self.sandbox.secret)
    }

    /// A request without credentials.
    pub fn anon(&self, method: &str, path: &str) -> Call {
        Call::new(self.client.request(
            method.parse().expect("method"),
            format!("{}{}", self.base, path),
        ))
    }

    pub fn get(&self, path: &str) -> Call {
        self.req("GET", path)
    }

    /// A POST with a fresh idempotency key and `body`.
    pub fn post(&self, path: &str, body: Value) -> Call {
        self.req("POST", path).idem(&unique_key()).json(&body)
    }

    /// A state-changing action with an empty body (pause, resume,
    /// suspend, …), with a fresh idempotency key and `If-Match: if_match`.
    pub fn action(&self, path: &str, if_match: &str) -> Call {
        self.post(path, serde_json::json!({})).if_match(if_match)
    }

    /// Creates a service account and returns it.
    pub async fn create_account(&self, name: &str) -> Value {
        let r = self
            .post(
                "/api/v1/service_accounts",
                serde_json::json!({"name": name}),
            )
            .send()
            .await;
        r.expect(201);
        r.data().clone()
    }

    /// Creates an account holding exactly `permissions`, with a credential;
    /// returns `(principal_ref, secret)`.
    pub async fn principal_with(&self, permissions: &[&str]) -> (String, String) {
        let account = self.create_account("tester").await;
        let principal = account["principal_ref"].as_str().expect("ref").to_owned();
        for p in permissions {
            self.post(
                &format!("/api/v1/service_accounts/{principal}/grants"),
                serde_json::json!({"permission_action": p}),
            )
            .send()
            .await
            .expect(201);
        }
        let cred = self
            .post(
                &format!("/api/v1/service_accounts/{principal}/credentials"),
                serde_json::json!({}),
            )
            .send()
            .await;
        cred.expect(201);
        (
            principal,
            cred.data()["secret"].as_str().expect("secret").to_owned(),
        )
    }
}

/// A dispatcher running inside the test over the app's store.
pub struct DispatcherHandle {
    pub stop: tokio_util::sync::CancellationToken,
    pub task: tokio::task::JoinHandle<()>,
}

impl DispatcherHandle {
    /// Stops leasing, waits for in-flight attempts and the recorder.
    pub async fn shutdown(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }

    /// Stops at once, as a killed process would: leases stay behind.
    pub fn kill(self) {
        self.task.abort();
    }
}

impl TestApp {
    /// Dispatcher settings for tests: loopback receivers allowed, the
    /// app's secret key, a fast retry schedule, short time-out.
    pub fn dispatch_settings(&self, schedule: &str) -> dispatcher::DispatchSettings {
        let schedule = domain::webhook::retry::RetrySchedule::parse(schedule).expect("schedule");
        dispatcher::DispatchSettings {
            allow_private_networks: true,
            timeout: std::time::Duration::from_secs(2),
            poll_interval: std::time::Duration::from_millis(20),
            clock: self.clock.clone(),
            ..dispatcher::DispatchSettings::new(schedule, self.cipher.clone())
        }
    }

    pub fn start_dispatcher(&self, settings: dispatcher::DispatchSettings) -> DispatcherHandle {
        self.start_dispatcher_on(dispatcher::Dispatcher::new(self.queue.clone(), settings))
    }

    /// A dispatcher taking its work from a Redis schedule (fleet mode).
    pub fn start_redis_dispatcher(
        &self,
        settings: dispatcher::DispatchSettings,
        schedule: std::sync::Arc<dispatcher::redis_schedule::RedisSchedule>,
    ) -> DispatcherHandle {
        let d = dispatcher::Dispatcher::new(self.queue.clone(), settings).with_redis(schedule);
        self.start_dispatcher_on(d)
    }

    /// Attempts and records every delivery due now, and the `0s` retries
    /// they lead to, with no dispatcher running (`dispatcher::drive`): the
    /// receiver has had each request and the store holds each attempt when
    /// it returns.
    pub async fn dispatch_due(&self, schedule: &str) -> dispatcher::drive::Round {
        self.dispatch_due_with(self.dispatch_settings(schedule))
            .await
    }

    /// `dispatch_due` with other settings (a shorter time-out, say).
    pub async fn dispatch_due_with(
        &self,
        settings: dispatcher::DispatchSettings,
    ) -> dispatcher::drive::Round {
        dispatcher::drive::Driven::new(self.store.clone(), settings)
            .run_until_idle()
            .await
            .expect("the store is reachable")
    }

    fn start_dispatcher_on(&self, d: dispatcher::Dispatcher) -> DispatcherHandle {
        let stop = tokio_util::sync::CancellationToken::new();
        let task = tokio::spawn(d.run(stop.clone()));
        DispatcherHandle { stop, task }
    }

    /// Creates an endpoint for `url` subscribed to `event_type` in the
    /// sandbox environment; returns `(endpoint_ref, whsec secret)`.
    pub async fn subscribed_endpoint(
        &self,
        url: &str,
        event_type: &str,
        dto_version: u32,
    ) -> (String, String) {
        let r = self
            .post("/api/v1/webhook_endpoints", serde_json::json!({"url": url}))
            .send()
            .await;
        r.expect(201);
        let endpoint = r.data()["endpoint_ref"].as_str().expect("ref").to_owned();
        let secret = r.data()["secret_versions"][0]["secret"]
            .as_str()
            .expect("secret")
            .to_owned();
        self.subscribe(&endpoint, event_type, dto_version).await;
        (endpoint, secret)
    }

    /// Subscribes `endpoint` to `event_type` (version `dto_version`) for
    /// the whole sandbox.
    pub async fn subscribe(&self, endpoint: &str, event_type: &str, dto_version: u32) {
        self.post(
            &format!("/api/v1/webhook_endpoints/{endpoint}/subscriptions"),
            serde_json::json!({"public_event_type": event_type, "scope_type": "environment",
                "scope_ref": self.sandbox.environment_ref, "dto_version": dto_version}),
        )
        .send()
        .await
        .expect(201);
    }

    /// Publishes an event into the embedded queue, as another system
    /// would; returns its `event_ref`.
    pub async fn publish(&self, event_type: &str, data: Value) -> String {
        let (event_ref, envelope) = self.envelope(event_type, data);
        self.accept(&envelope).await;
        event_ref
    }

    /// A new event's `event_ref` and its envelope (contract section 9) as
    /// published on the queue, in this app's sandbox environment.
    pub fn envelope(&self, event_type: &str, data: Value) -> (String, String) {
        let event_ref = domain::Ref::generate(domain::Prefix::Event).into_string();
        let envelope = serde_json::json!({
            "event_ref": event_ref,
            "public_event_type": event_type,
            "environment_ref": self.sandbox.environment_ref,
            "occurred_at": domain::Timestamp::now().to_rfc3339(),
            "scope": {"product_refs": [], "buyer_ref": null, "beneficiary_business_ref": null},
            "data": data,
        });
        (event_ref, envelope.to_string())
    }

    /// Accepts a new event's envelope into the embedded queue.
    pub async fn accept(&self, envelope: &str) {
        let accepted = dispatcher::intake::accept(&self.queue, envelope.as_bytes(), "test")
            .await
            .expect("store reachable");
        assert_eq!(accepted, dispatcher::intake::Accepted::New);
    }

    /// A pool on the app's database, for tests that read or write rows no
    /// API shows.
    pub async fn raw_pool(&self) -> sqlx::AnyPool {
        sqlx::any::install_default_drivers();
        sqlx::AnyPool::connect(&self.database_url)
            .await
            .expect("database")
    }

    /// The one integer `sql` selects (a `COUNT(*)`), read on a connection
    /// of its own: for rows no API shows.
    pub async fn count(&self, sql: &str) -> i64 {
        let pool = self.raw_pool().await;
        let (n,): (i64,) = sqlx::query_as(sql).fetch_one(&pool).await.expect("count");
        pool.close().await;
        n
    }

    /// Waits (at most `secs` seconds) until `receiver` got `n` distinct
    /// deliveries and the pipeline is [`TestApp::idle`] (each delivery
    /// recorded, so that none is taken again), and shuts `dispatchers` down (each
    /// finishes what it holds, so that a duplicate in flight arrives too);
    /// every `webhook-id` received, duplicates included.
    pub async fn all_received(
        &self,
        receiver: &receiver::TestReceiver,
        n: usize,
        secs: u64,
        dispatchers: Vec<DispatcherHandle>,
    ) -> Vec<String> {
        self.eventually(secs, || async {
            (receiver.distinct_deliveries() >= n && self.idle().await).then_some(())
        })
        .await;
        for d in dispatchers {
            d.shutdown().await;
        }
        receiver.webhook_ids()
    }

    /// Publishes `total` events of `event_type` with `data`, evenly at
    /// `per_second`; when each was published, by `event_ref`.
    pub async fn publish_at_rate(
        &self,
        event_type: &str,
        data: &Value,
        total: usize,
        per_second: u64,
    ) -> std::collections::HashMap<String, std::time::Instant> {
        let mut published = std::collections::HashMap::with_capacity(total);
        let mut interval =
            tokio::time::interval(std::time::Duration::from_micros(1_000_000 / per_second));
        for _ in 0..total {
            interval.tick().await;
            let at = std::time::Instant::now();
            published.insert(self.publish(event_type, data.clone()).await, at);
        }
        published
    }

    /// How many deliveries are due within the next hour (none, once a
    /// run has delivered all).
    pub async fn due_within_an_hour(&self) -> i64 {
        self.store
            .dispatch()
            .due_backlog(domain::Timestamp::now().plus_seconds(3600))
            .await
            .expect("the backlog reads")
    }

    /// Whether the store's event pipeline has nothing left to do: no event
    /// in the outbox (not relayed), none in the events queue (not fanned
    /// out), no delivery due within the hour (each recorded).
    pub async fn idle(&self) -> bool {
        let outbox = self.store.outbox_batch(1).await.expect("the outbox reads");
        let queued = (self.store.dispatch().pending_events(1).await).expect("the queue reads");
        outbox.is_empty() && queued.is_empty() && self.due_within_an_hour().await == 0
    }

    /// Polls `f` until it returns `Some`, for at most `secs` seconds.
    pub async fn eventually<T, F, Fut>(&self, secs: u64, f: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        poll::wait_until(
            std::time::Duration::from_secs(secs),
            || "condition not met".to_owned(),
            f,
        )
        .await
    }
}

/// The store's options: the service's default durability, or the one
/// `BILLING_STORE__SYNCHRONOUS` names (`full` or `normal`), so that a
/// benchmark can compare them.
pub fn store_options() -> store::StoreOptions {
    let synchronous = std::env::var("BILLING_STORE__SYNCHRONOUS")
        .ok()
        .map(|v| store::Synchronous::parse(&v).expect("BILLING_STORE__SYNCHRONOUS: full or normal"))
        .unwrap_or_default();
    store::StoreOptions { synchronous }
}

pub fn unique_key() -> String {
    use rand::Rng;
    format!("key-{:016x}", rand::thread_rng().gen::<u64>())
}

/// A request being built. The credential is applied when it is sent, so
/// `auth` replaces the default credential rather than adding a second one.
pub struct Call {
    builder: reqwest::RequestBuilder,
    secret: Option<String>,
}

impl Call {
    fn new(builder: reqwest::RequestBuilder) -> Call {
        Call {
            builder,
            secret: None,
        }
    }
    pub fn auth(self, secret: &str) -> Call {
        Call {
            secret: Some(secret.to_owned()),
            ..self
        }
    }
    /// Sends no credential at all.
    pub fn no_auth(self) -> Call {
        Call {
            secret: None,
            ..self
        }
    }
    pub fn header(self, name: &str, value: &str) -> Call {
        Call {
            builder: self.builder.header(name, value),
            ..self
        }
    }
    pub fn idem(self, key: &str) -> Call {
        self.header("Idempotency-Key", key)
    }
    pub fn if_match(self, etag: &str) -> Call {
        self.header("If-Match", etag)
    }
    pub fn json(self, body: &Value) -> Call {
        Call {
            builder: self.builder.json(body),
            ..self
        }
    }
    pub fn raw(self, body: impl Into<reqwest::Body>) -> Call {
        Call {
            builder: self
                .builder
                .header("content-type", "application/json")
                .body(body),
            ..self
        }
    }
    pub async fn send(self) -> Resp {
        let builder = match &self.secret {
            Some(s) => self.builder.bearer_auth(s),
            None => self.builder,
        };
        let r = builder.send().await.expect("request sent");
        let status = r.status().as_u16();
        let headers = r.headers().clone();
        let text = r.text().await.expect("body read");
        let json = serde_json::from_str(&text).unwrap_or(Value::Null);
        Resp {
            status,
            headers,
            text,
            json,
        }
    }
}

/// A response, fully read.
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub text: String,
    pub json: Value,
}

impl Resp {
    /// Asserts the status, showing the body when it differs.
    #[track_caller]
    pub fn expect(&self, status: u16) -> &Resp {
        assert_eq!(
            self.status, status,
            "unexpected status; body: {}",
            self.text
        );
        self
    }

    /// Asserts an error status and code, and the contract's error shape.
    #[track_caller]
    pub fn expect_error(&self, status: u16, code: &str) -> &Resp {
        self.expect(status);
        assert_eq!(self.json["error"]["code"], code, "body: {}", self.text);
        assert!(self.json["error"]["message"].is_string());
        assert!(self.json["error"]["details"].is_array());
        self
    }

    pub fn data(&self) -> &Value {
        &self.json["data"]
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn etag(&self) -> String {
        self.header("etag").expect("an ETag header").to_owned()
    }

    /// `details[].field` of an error.
    pub fn fields(&self) -> Vec<String> {
        self.json["error"]["details"]
            .as_array()
            .map(|d| {
                d.iter()
                    .filter_map(|x| x["field"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Prints a benchmark's summary (its verdicts, then its errors, if any)
/// and the exit code it ends with: a failure only when something went
/// wrong, never for a missed target.
pub fn bench_summary(verdicts: &[String], errors: &[String]) -> std::process::ExitCode {
    println!();
    println!("summary:");
    for v in verdicts {
        println!("  {v}");
    }
    if errors.is_empty() {
        return std::process::ExitCode::SUCCESS;
    }
    println!("errors:");
    for e in errors {
        println!("  {e}");
    }
    std::process::ExitCode::FAILURE
}

/// The backends a benchmark runs on: `BENCH_BACKEND` = `sqlite`,
/// `postgres` or `both`; unset, SQLite alone, or both when
/// `BILLING_TEST_FLEET=1`.
pub fn bench_backends() -> Result<Vec<Backend>, String> {
    match std::env::var("BENCH_BACKEND").as_deref().map(str::trim) {
        Ok("sqlite") => Ok(vec![Backend::Sqlite]),
        Ok("postgres") => Ok(vec![Backend::Postgres]),
        Ok("both") => Ok(vec![Backend::Sqlite, Backend::Postgres]),
        Ok(other) => Err(format!(
            "BENCH_BACKEND must be sqlite, postgres or both, got {other:?}"
        )),
        Err(_) if fleet_enabled() => Ok(vec![Backend::Sqlite, Backend::Postgres]),
        Err(_) => Ok(vec![Backend::Sqlite]),
    }
}

impl Backend {
    /// Its name in a benchmark's figures.
    pub fn label(self) -> &'static str {
        match self {
            Backend::Sqlite => "embedded (SQLite)",
            Backend::Postgres => "PostgreSQL",
        }
    }
}

/// A benchmark setting: the positive number in the variable `name`, or
/// `default` when it is not set.
pub fn env_num<T: std::str::FromStr + PartialOrd + Default>(
    name: &str,
    default: T,
) -> Result<T, String> {
    match std::env::var(name) {
        Ok(v) => match v.trim().parse::<T>() {
            Ok(n) if n > T::default() => Ok(n),
            _ => Err(format!("{name} must be a positive integer, got {v:?}")),
        },
        Err(_) => Ok(default),
    }
}

/// Nearest-rank percentile `p` (0–100) of `sorted`; `None` when empty.
pub fn percentile(sorted: &[std::time::Duration], p: f64) -> Option<std::time::Duration> {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    (!sorted.is_empty()).then(|| sorted[rank.clamp(1, sorted.len()) - 1])
}

/// A benchmark's percentile `p` of sorted latencies, in milliseconds.
pub fn percentile_ms(sorted: &[std::time::Duration], p: f64) -> Option<f64> {
    percentile(sorted, p).map(|d| d.as_secs_f64() * 1000.0)
}

/// Milliseconds as a benchmark prints them (`-` when unknown).
pub fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v:.1} ms"))
}
