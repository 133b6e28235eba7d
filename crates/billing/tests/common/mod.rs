//! Helpers shared by the process-level tests of the `billing` binary:
//! starting the binary with a clean environment, bootstrapping, waiting for
//! `/readyz`, processes killed when a test ends early, a local webhook
//! receiver, and the fleet's PostgreSQL databases and Redis schedules.
//! `crash` is the kit of the four crash tests; `poll` is the harness's
//! polling (the same file as `billing_tests::poll`).
//!
//! `main.rs` declares it once (`mod common;`); each test module uses a part
//! of it.
#![allow(dead_code)]

pub mod crash;
/// The harness's polling (`tests/src/poll.rs`, the same file): the one
/// place these tests pause between two looks.
#[path = "../../../../tests/src/poll.rs"]
pub mod poll;

use axum::extract::State;
use axum::http::HeaderMap;
use sqlx::{Connection, Executor, PgConnection};
use std::collections::{BTreeSet, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, ExitStatus, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The broker of the fleet tests.
pub const AMQP_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
/// The Redis of the fleet tests (database 0; a test that needs its own
/// appends `/N`).
pub const REDIS_URL: &str = "redis://127.0.0.1:6379";
/// The secrets key (base64 of 32 bytes) every fleet-mode process is given.
pub const SECRETS_KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

/// Writes past libtest's capture (which takes `eprintln!`), so that the line
/// shows in every run.
pub fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Whether fleet tests run (BILLING_TEST_FLEET=1); if not, says that `what`
/// is not run.
pub fn fleet(what: &str) -> bool {
    let on = std::env::var("BILLING_TEST_FLEET").is_ok_and(|v| v == "1");
    if !on {
        say(&format!("{what} not run: set BILLING_TEST_FLEET=1"));
    }
    on
}

/// The string `field` of `v`, which must have one.
pub fn text(v: &serde_json::Value, field: &str) -> String {
    v[field]
        .as_str()
        .unwrap_or_else(|| panic!("no {field} in {v}"))
        .to_owned()
}

/// A port free on 127.0.0.1 at the time of the call, for a process the
/// test starts to listen on, and never handed out twice in one test
/// binary: tests run in parallel, and a port drawn for a process not yet
/// started (a site's API port waits out the bootstrap) is free to every
/// other draw until that process binds it. It is drawn below the kernel's
/// ephemeral range (32768 and up here), from which every outgoing
/// connection of the machine takes its local port: a port from that range
/// may be taken by a connection between this call and the process's bind.
pub fn free_port() -> u16 {
    static GIVEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    for _ in 0..2_000 {
        let port = 20_000 + (rand_u32() % 12_000) as u16;
        if !given.contains(&port) && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            given.insert(port);
            return port;
        }
    }
    panic!("no free port left below the ephemeral range");
}

/// A number that differs between runs, for unique names.
pub fn rand_u32() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    t.subsec_nanos() ^ std::process::id()
}

/// The `billing` binary, run in `dir` with the variables `envs`. The
/// `BILLING_*` environment of the test run does not leak into the child.
pub fn billing(dir: &Path, envs: &[(&str, String)]) -> Command {
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

/// Runs `cmd` to its end, which must be a success; its output.
pub fn output_ok(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `billing admin bootstrap --json`, which must succeed: what it printed.
pub fn bootstrap_json(dir: &Path, envs: &[(&str, String)]) -> serde_json::Value {
    let boot = output_ok(billing(dir, envs).args(["admin", "bootstrap", "--json"]));
    serde_json::from_slice(&boot.stdout).unwrap()
}

/// The sandbox environment `billing admin bootstrap` made.
pub struct Sandbox {
    pub secret: String,
    pub environment_ref: String,
}

/// `billing admin bootstrap --json`: its sandbox environment (the first).
pub fn bootstrap(dir: &Path, envs: &[(&str, String)]) -> Sandbox {
    let boot = bootstrap_json(dir, envs);
    let sandbox = &boot["environments"][0];
    assert_eq!(sandbox["mode"], "sandbox", "{boot}");
    Sandbox {
        secret: sandbox["secret"].as_str().unwrap().to_owned(),
        environment_ref: sandbox["environment_ref"].as_str().unwrap().to_owned(),
    }
}

/// How long a process has to exit after SIGTERM.
pub const EXIT_WITHIN: Duration = Duration::from_secs(30);

/// A process the test started; killed (SIGKILL) if the test ends before
/// it has stopped it, so that nothing is left running (a dispatcher left
/// behind would share the next run's Redis schedule and take its
/// deliveries).
pub struct Process {
    child: Option<Child>,
    log: Option<PathBuf>,
}

impl Process {
    /// Starts `cmd` with the standard streams it sets.
    pub fn spawn(cmd: &mut Command) -> Process {
        Process {
            child: Some(cmd.spawn().expect("the billing process starts")),
            log: None,
        }
    }

    /// Starts `cmd` with its stdout to nothing and its stderr to the file
    /// `log` (see [`Process::log_tail`]).
    pub fn spawn_logged(cmd: &mut Command, log: PathBuf) -> Process {
        let stderr = std::fs::File::create(&log).unwrap();
        let mut p = Process::spawn(cmd.stdout(Stdio::null()).stderr(stderr));
        p.log = Some(log);
        p
    }

    fn child(&mut self) -> &mut Child {
        self.child.as_mut().expect("the process is running")
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("the process is running").id()
    }

    /// The process's stdout, when it was started with a pipe for it.
    pub fn take_stdout(&mut self) -> ChildStdout {
        self.child().stdout.take().expect("stdout is piped")
    }

    /// SIGKILL, and wait for the process to be gone.
    pub fn kill_hard(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    /// SIGTERM, then wait up to [`EXIT_WITHIN`]: the exit status, or `None`
    /// if the process did not exit in time (it is killed then).
    pub fn terminate(&mut self) -> Option<ExitStatus> {
        let mut c = self.child.take()?;
        assert!(
            Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .status()
                .unwrap()
                .success(),
            "SIGTERM could not be sent"
        );
        let started = Instant::now();
        loop {
            if let Some(s) = c.try_wait().unwrap() {
                return Some(s);
            }
            if started.elapsed() > EXIT_WITHIN {
                let _ = c.kill();
                let _ = c.wait();
                return None;
            }
            // The process is waited on (without blocking past the
            // deadline): `Child` has no wait with a timeout.
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether SIGTERM made the process exit cleanly in time.
    pub fn terminate_cleanly(&mut self) -> bool {
        self.terminate().is_some_and(|s| s.success())
    }

    /// The last lines of the process's log, for failure messages (nothing
    /// if it was started without one).
    pub fn log_tail(&self) -> String {
        let Some(log) = &self.log else {
            return String::new();
        };
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let from = lines.len().saturating_sub(30);
        format!(
            "--- {} (last {} lines):\n{}",
            log.display(),
            lines.len() - from,
            lines[from..].join("\n")
        )
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Polls `{api}/readyz` every 50 ms until an answer `accept` takes, for up
/// to 30 s; that answer's body. `context` is added to the failure message
/// (a process log, say).
async fn poll_readyz(
    client: &reqwest::Client,
    api: &str,
    accept: fn(reqwest::StatusCode) -> bool,
    context: impl Fn() -> String,
) -> serde_json::Value {
    poll::Poll::within(Duration::from_secs(30))
        .every(Duration::from_millis(50))
        .until(
            || format!("the API at {api} was not ready\n{}", context()),
            || async {
                let r = client.get(format!("{api}/readyz")).send().await.ok()?;
                if accept(r.status()) {
                    Some(r.json().await.unwrap())
                } else {
                    None
                }
            },
        )
        .await
}

/// Makes an endpoint from `endpoint` (its create body) on the API at
/// `base`, subscribed to `event_type` (dto 1) for the whole environment
/// `environment_ref`; its ref. Each request has a fresh idempotency key
/// and must succeed.
pub async fn subscribed_endpoint(
    client: &reqwest::Client,
    base: &str,
    secret: &str,
    endpoint: serde_json::Value,
    event_type: &str,
    environment_ref: &str,
) -> String {
    let made = post_ok(
        client,
        format!("{base}/api/v1/webhook_endpoints"),
        secret,
        endpoint,
    )
    .await;
    let endpoint_ref = text(&made["data"], "endpoint_ref");
    post_ok(
        client,
        format!("{base}/api/v1/webhook_endpoints/{endpoint_ref}/subscriptions"),
        secret,
        serde_json::json!({"public_event_type": event_type, "scope_type": "environment",
            "scope_ref": environment_ref, "dto_version": 1}),
    )
    .await;
    endpoint_ref
}

async fn post_ok(
    client: &reqwest::Client,
    url: String,
    secret: &str,
    body: serde_json::Value,
) -> serde_json::Value {
    let r = client
        .post(url)
        .bearer_auth(secret)
        .header("Idempotency-Key", format!("k-{}", rand_u32()))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    r.json().await.unwrap()
}

/// Waits (up to 30 s) for the API at `api` to answer `/readyz` at all; the
/// body of its first answer, ready or not.
pub async fn first_readyz(
    client: &reqwest::Client,
    api: &str,
    context: impl Fn() -> String,
) -> serde_json::Value {
    poll_readyz(client, api, |_| true, context).await
}

/// Waits (up to 30 s) for `/readyz` at `api` to answer 200.
pub async fn wait_ready(client: &reqwest::Client, api: &str, context: impl Fn() -> String) {
    poll_readyz(client, api, |s| s == 200, context).await;
}

#[derive(Default)]
struct Requests {
    headers: Vec<HeaderMap>,
    ids: HashSet<String>,
}

/// What a [`receiver`] got: every request's headers, and the distinct
/// `webhook-id`s among them.
#[derive(Clone, Default)]
pub struct Received(Arc<Mutex<Requests>>);

impl Received {
    /// How many requests arrived.
    pub fn count(&self) -> usize {
        self.0.lock().unwrap().headers.len()
    }

    /// How many distinct `webhook-id`s arrived (a request without one
    /// counts as the empty id).
    pub fn unique_ids(&self) -> usize {
        self.0.lock().unwrap().ids.len()
    }

    /// The headers of the first request, if one arrived.
    pub fn first(&self) -> Option<HeaderMap> {
        self.0.lock().unwrap().headers.first().cloned()
    }
}

async fn receive(State(seen): State<Received>, headers: HeaderMap) -> &'static str {
    let id = headers
        .get("webhook-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let mut s = seen.0.lock().unwrap();
    s.ids.insert(id);
    s.headers.push(headers);
    "ok"
}

/// A local receiver on 127.0.0.1 answering every request 200 and recording
/// it; what it got, and its URL (path `/hook`).
pub async fn receiver() -> (Received, String) {
    let seen = Received::default();
    let app = axum::Router::new()
        .fallback(receive)
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (seen, hook)
}

fn pg_admin_url() -> String {
    std::env::var("BILLING_TEST_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

/// A fresh database on the fleet's PostgreSQL (BILLING_TEST_PG_URL names
/// its admin database), named `{prefix}_{pid}_{random}`.
pub struct FreshDatabase {
    admin: PgConnection,
    name: String,
    /// The store URL for it.
    pub url: String,
}

impl FreshDatabase {
    pub async fn create(prefix: &str) -> FreshDatabase {
        let name = format!("{prefix}_{}_{:08x}", std::process::id(), rand_u32());
        let base = pg_admin_url();
        let mut admin = PgConnection::connect(&base)
            .await
            .expect("PostgreSQL reachable");
        admin
            .execute(format!("CREATE DATABASE \"{name}\"").as_str())
            .await
            .unwrap();
        let url = format!("{}/{name}", &base[..base.rfind('/').unwrap()]);
        FreshDatabase { admin, name, url }
    }

    /// Drops the database, closing its connections; a failure is ignored.
    pub async fn remove(mut self) {
        drop(
            self.admin
                .execute(format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", self.name).as_str())
                .await,
        );
    }
}

/// The Redis database at `url` emptied (in case an earlier run was killed)
/// and marked as fed for the store at `store_url` (migrated here, which
/// gives it its identity), so that its dispatcher does not take it for a
/// Redis that lost its data (which makes it pass over the store every
/// second for a minute).
pub async fn fresh_redis_schedule(url: &str, store_url: &str) {
    use dispatcher::redis_schedule::{redis, Keys};
    let store = store::Store::connect(store_url).await.unwrap();
    store.migrate().await.unwrap();
    let owner = store.identity().await.unwrap();
    store.close().await;
    let keys = Keys::own(owner.clone());
    let redis = redis::Client::open(url).unwrap();
    let mut conn = redis.get_multiplexed_async_connection().await.unwrap();
    redis::cmd("FLUSHDB")
        .query_async::<()>(&mut conn)
        .await
        .unwrap();
    redis::cmd("SET")
        .arg(format!("{}:fed", keys.prefix()))
        .arg(owner.as_str())
        .query_async::<()>(&mut conn)
        .await
        .unwrap();
}

/// The environment of a fleet-mode process: its store, events queue and
/// scheduler at these URLs, and the fixed [`SECRETS_KEY`].
pub fn fleet_env(store: &str, queue: &str, scheduler: &str) -> Vec<(&'static str, String)> {
    vec![
        ("BILLING_STORE__URL", store.to_owned()),
        ("BILLING_QUEUE__URL", queue.to_owned()),
        ("BILLING_SCHEDULER__URL", scheduler.to_owned()),
        ("BILLING_SECRETS__KEY", SECRETS_KEY.to_owned()),
    ]
}

/// A fresh RabbitMQ virtual host on the fleet's broker (made with
/// `rabbitmqctl`, which must work), named `{prefix}_{pid}_{random}`, so
/// that the durable queues a test's processes declare (the fixed
/// `billing.events.dispatcher`, …) are theirs alone.
pub struct FreshVhost {
    pub name: String,
    /// The broker URL for it (user `guest`).
    pub url: String,
}

fn rabbitmqctl(args: &[&str]) -> Result<(), String> {
    let out = Command::new("rabbitmqctl")
        .args(args)
        .output()
        .map_err(|e| format!("rabbitmqctl {args:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "rabbitmqctl {args:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

impl FreshVhost {
    pub fn create(prefix: &str) -> FreshVhost {
        let name = format!("{prefix}_{}_{:08x}", std::process::id(), rand_u32());
        rabbitmqctl(&["add_vhost", &name]).expect("RabbitMQ reachable with rabbitmqctl");
        rabbitmqctl(&["set_permissions", "-p", &name, "guest", ".*", ".*", ".*"])
            .expect("guest may use the fresh vhost");
        let url = format!("{}/{name}", &AMQP_URL[..AMQP_URL.rfind('/').unwrap()]);
        FreshVhost { name, url }
    }

    /// Deletes the vhost with everything in it; a failure is ignored.
    pub fn remove(self) {
        drop(rabbitmqctl(&["delete_vhost", &self.name]));
    }
}

/// An embedded store in `dir` (`data/billing.db`, migrated and
/// bootstrapped, its secret key in `data/secret.key`) with one sandbox
/// endpoint at `url` subscribed to `event_type` (dto 1): the store and the
/// sandbox environment, for a test that then starts the binary over it.
pub async fn embedded_subscribed(
    dir: &Path,
    url: &str,
    event_type: &'static str,
) -> (store::Store, domain::Ref) {
    use base64::Engine;
    use domain::webhook::cipher::SecretCipher;
    use domain::webhook::signing::SigningSecret;
    use store::webhooks::{endpoints, subscriptions};
    std::fs::create_dir_all(dir.join("data")).unwrap();
    let key = [7u8; 32];
    std::fs::write(
        dir.join("data/secret.key"),
        base64::engine::general_purpose::STANDARD.encode(key),
    )
    .unwrap();
    let store = store::Store::connect(&format!("sqlite://{}/data/billing.db", dir.display()))
        .await
        .unwrap();
    store.migrate().await.unwrap();
    billing::bootstrap::bootstrap(&store).await.unwrap();
    let mut tx = store.begin().await.unwrap();
    let env = store::admin::environments::ensure(&mut tx, domain::principal::Mode::Sandbox)
        .await
        .unwrap()
        .environment_ref;
    let secret = SigningSecret::generate();
    let sealed = store::NewSecret {
        ciphertext: SecretCipher::new(key).encrypt(secret.as_bytes()),
        hint: secret.hint(),
    };
    let endpoint = endpoints::create(
        &mut tx,
        &env,
        url,
        None,
        (
            domain::webhook::ordering::EndpointOrdering::None,
            domain::webhook::limits::EndpointLimits::default(),
        ),
        sealed,
    )
    .await
    .unwrap();
    let sub = store::NewSubscription {
        public_event_type: event_type,
        scope_type: domain::webhook::ScopeType::Environment,
        scope_ref: env.as_str(),
        dto_version: 1,
        custom_field_refs: &[],
        filter: None,
    };
    subscriptions::create(&mut tx, &env, &endpoint.endpoint_ref, sub)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    (store, env)
}

/// Accepts `n` `order.created` events of `environment_ref` into `queue`,
/// each new.
pub async fn enqueue_orders(
    queue: &dispatcher::EventQueue,
    environment_ref: &domain::Ref,
    n: usize,
) {
    for _ in 0..n {
        let event = store::EventRecord {
            event_ref: domain::Ref::generate(domain::Prefix::Event),
            environment_ref: environment_ref.clone(),
            public_event_type: "order.created".into(),
            occurred_at: domain::Timestamp::now(),
            scope: Default::default(),
            data: store::EventData::parse(r#"{"order_ref": "ord_AAAAAAAAAAAA"}"#.to_owned())
                .unwrap(),
            order: None,
        };
        assert!(queue.enqueue(&event).await.unwrap());
    }
}

/// Publishes the event `event_ref` of `event_type` (its catalogue example
/// data, dto 1) in `environment_ref` to `billing.events` on `vhost`, as
/// another system would.
pub async fn publish_example(
    vhost: &str,
    environment_ref: &str,
    event_ref: &str,
    event_type: &str,
) {
    let envelope = serde_json::json!({
        "event_ref": event_ref,
        "public_event_type": event_type,
        "environment_ref": environment_ref,
        "occurred_at": domain::Timestamp::now().to_rfc3339(),
        "data": domain::webhook::catalogue::example(event_type, 1).unwrap(),
    });
    dispatcher::amqp::publish(vhost, envelope.to_string().as_bytes(), event_type)
        .await
        .expect("the event is published");
}
