//! What the fleet benchmarks (`fleet.rs`, `soak.rs`, `redrive.rs`) share to run
//! `billing serve` from outside on resources of their own: the release
//! binary, a PostgreSQL database, a RabbitMQ virtual host and an empty
//! Redis logical database named for the run (`<prefix><pid>_<hex>`), the
//! leftovers of killed runs removed, and everything released when the
//! `Fleet` is dropped. Each benchmark includes it with `#[path]`.
//!
//! `BENCH_AMQP_QUEUE_VERSION` (`1` or `2`; unset or empty: the broker's default)
//! sets a policy `queue-version` on the run's virtual host before the
//! service declares its queues, so that an operator's choice of classic
//! queue storage can be measured without changing what the service
//! declares.
#![allow(dead_code)]

use lapin::options::{
    BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions, QueueDeclareOptions,
};
use lapin::publisher_confirm::{Confirmation, PublisherConfirm};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, ExchangeKind};
use sqlx::{Connection, Executor, PgConnection};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub const EXCHANGE: &str = "billing.events";
/// The queue `billing serve` consumes; publishing waits until it exists.
pub const QUEUE: &str = "billing.events.dispatcher";
/// Longest wait for `billing serve` (and its queue) to be ready.
pub const READY_LIMIT: Duration = Duration::from_secs(60);
pub const AMQP_BASE: &str = "amqp://guest:guest@127.0.0.1:5672";
pub const REDIS_BASE: &str = "redis://127.0.0.1:6379";
/// How long `billing` gets to exit after SIGTERM before SIGKILL.
pub const STOP_LIMIT: Duration = Duration::from_secs(30);

/// Set when releasing a run's resources failed (the benchmark then fails).
pub static CLEANUP_FAILED: AtomicBool = AtomicBool::new(false);

pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests package is inside the workspace")
        .to_path_buf()
}

/// Builds the release `billing` binary and returns its path, as cargo
/// reports it (`target/release/billing`, or under `CARGO_TARGET_DIR`).
pub fn build_billing() -> Result<PathBuf, String> {
    if let Some(given) = std::env::var_os("BENCH_BILLING_BIN") {
        let path = PathBuf::from(given);
        println!("using the binary in BENCH_BILLING_BIN (not built)");
        return if path.is_file() {
            Ok(path)
        } else {
            Err(format!(
                "BENCH_BILLING_BIN: no binary at {}",
                path.display()
            ))
        };
    }
    let root = workspace_root();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    println!("building the release binary: cargo build --release -p billing");
    let out = std::process::Command::new(&cargo)
        .current_dir(&root)
        .args([
            "build",
            "--release",
            "-p",
            "billing",
            "--bin",
            "billing",
            "--message-format=json-render-diagnostics",
        ])
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run {cargo}: {e}"))?;
    if !out.status.success() {
        return Err(format!("cargo build --release -p billing: {}", out.status));
    }
    let reported = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "billing")
        .find_map(|m| m["executable"].as_str().map(PathBuf::from));
    let path = reported.unwrap_or_else(|| {
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .map(|t| if t.is_relative() { root.join(t) } else { t })
            .unwrap_or_else(|| root.join("target"));
        target.join("release").join("billing")
    });
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!("no binary at {}", path.display()))
    }
}

/// A `billing` command with the inherited `BILLING_*` and `RUST_LOG`
/// variables removed and `envs` set.
pub fn billing_command(
    bin: &std::path::Path,
    dir: &std::path::Path,
    envs: &[(String, String)],
) -> std::process::Command {
    let mut c = std::process::Command::new(bin);
    for (k, _) in std::env::vars_os() {
        let name = k.to_string_lossy();
        if name.starts_with("BILLING_") || name == "RUST_LOG" {
            c.env_remove(&k);
        }
    }
    c.current_dir(dir);
    for (k, v) in envs {
        c.env(k, v);
    }
    c
}

/// `billing admin bootstrap --json` with `envs`: the sandbox environment's
/// admin secret and its reference.
pub async fn bootstrap_sandbox(
    bin: &std::path::Path,
    dir: &std::path::Path,
    envs: &[(String, String)],
) -> Result<(String, String), String> {
    let boot = tokio::process::Command::from(billing_command(bin, dir, envs))
        .args(["admin", "bootstrap", "--json"])
        .output()
        .await
        .map_err(|e| format!("billing admin bootstrap: {e}"))?;
    if !boot.status.success() {
        return Err(format!(
            "billing admin bootstrap: {}: {}",
            boot.status,
            String::from_utf8_lossy(&boot.stderr).trim()
        ));
    }
    let boot: serde_json::Value = serde_json::from_slice(&boot.stdout)
        .map_err(|e| format!("billing admin bootstrap --json: {e}"))?;
    let sandbox = boot["environments"]
        .as_array()
        .and_then(|envs| envs.iter().find(|e| e["mode"] == "sandbox"))
        .ok_or("bootstrap printed no sandbox environment")?;
    let (Some(secret), Some(env_ref)) = (
        sandbox["secret"].as_str(),
        sandbox["environment_ref"].as_str(),
    ) else {
        return Err(format!("bootstrap output without secret: {sandbox}"));
    };
    Ok((secret.to_owned(), env_ref.to_owned()))
}

/// `ANALYZE` of database `db` every `every` from a connection of its own
/// until `stop` (this machine's PostgreSQL runs without autovacuum);
/// returns how many ran. A table another process holds (a `VACUUM` of
/// it) is skipped, as autovacuum skips it: an `ANALYZE` that waited for
/// the lock would hold its snapshot meanwhile, and with it every dead row
/// of the database that a vacuum or a scan could otherwise remove.
pub async fn analyzer(
    db: String,
    every: Duration,
    stop: tokio_util::sync::CancellationToken,
) -> usize {
    let Ok(mut conn) = PgConnection::connect(&pg_url_for(&db)).await else {
        return 0;
    };
    let mut runs = 0;
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tick.tick() => {
                if conn.execute("ANALYZE (SKIP_LOCKED)").await.is_ok() {
                    runs += 1;
                }
            }
        }
    }
    let _ = conn.close().await;
    runs
}

pub fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}

pub fn pg_admin_url() -> String {
    std::env::var("BILLING_TEST_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

pub fn pg_url_for(db: &str) -> String {
    let base = pg_admin_url();
    let cut = base.rfind('/').unwrap_or(base.len());
    format!("{}/{db}", &base[..cut])
}

pub async fn pg_admin() -> Result<PgConnection, String> {
    PgConnection::connect(&pg_admin_url())
        .await
        .map_err(|e| format!("PostgreSQL at {}: {e}", pg_admin_url()))
}

/// Percent-encodes a virtual host name for an AMQP URL.
pub fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

pub async fn rabbitmqctl(args: &[&str]) -> Result<String, String> {
    let out = tokio::process::Command::new("rabbitmqctl")
        .args(args)
        .output()
        .await
        .map_err(|e| format!("cannot run rabbitmqctl: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "rabbitmqctl {}: {} {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Whether the benchmark process that named `name` (`<prefix><pid>_<hex>`)
/// has exited.
pub fn owner_exited(prefix: &str, name: &str) -> bool {
    name.strip_prefix(prefix)
        .and_then(|r| r.split('_').next())
        .and_then(|pid| pid.parse::<u32>().ok())
        .is_some_and(|pid| {
            pid != std::process::id() && !std::path::Path::new(&format!("/proc/{pid}")).exists()
        })
}

/// Drops the databases and virtual hosts named with `prefix` left by runs
/// that did not clean up (killed), whose process is gone.
pub async fn remove_leftovers(prefix: &str) {
    if let Ok(mut conn) = pg_admin().await {
        let pattern = format!("{}%", prefix.replace('_', "\\_"));
        let dbs: Vec<String> =
            sqlx::query_scalar("SELECT datname FROM pg_database WHERE datname LIKE $1")
                .bind(pattern)
                .fetch_all(&mut conn)
                .await
                .unwrap_or_default();
        for db in dbs.into_iter().filter(|d| owner_exited(prefix, d)) {
            println!("removing the leftover database {db}");
            let _ = conn
                .execute(format!("DROP DATABASE IF EXISTS \"{db}\" WITH (FORCE)").as_str())
                .await;
        }
        let _ = conn.close().await;
    }
    if let Ok(list) = rabbitmqctl(&["-q", "list_vhosts", "name"]).await {
        for vhost in list
            .lines()
            .map(str::trim)
            .filter(|v| owner_exited(prefix, v))
        {
            println!("removing the leftover virtual host {vhost}");
            let _ = rabbitmqctl(&["delete_vhost", vhost]).await;
        }
    }
}

pub async fn redis_conn(n: u8) -> Result<redis::aio::MultiplexedConnection, String> {
    let client = redis::Client::open(format!("{REDIS_BASE}/{n}")).map_err(|e| e.to_string())?;
    client
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| format!("Redis at {REDIS_BASE}: {e}"))
}

/// An empty Redis logical database among 1..15, picked at random.
pub async fn pick_redis_db() -> Result<u8, String> {
    use rand::seq::SliceRandom;
    let mut dbs: Vec<u8> = (1..=15).collect();
    dbs.shuffle(&mut rand::thread_rng());
    for n in dbs {
        let mut conn = redis_conn(n).await?;
        let size: u64 = redis::cmd("DBSIZE")
            .query_async(&mut conn)
            .await
            .map_err(|e| e.to_string())?;
        if size == 0 {
            return Ok(n);
        }
    }
    Err("no empty Redis database among 1..15 (others are in use)".to_owned())
}

pub async fn flush_redis(n: u8) -> Result<(), String> {
    let mut conn = redis_conn(n).await?;
    redis::cmd("FLUSHDB")
        .query_async::<()>(&mut conn)
        .await
        .map_err(|e| e.to_string())
}

/// The run's resources; dropping it releases them all: the child is
/// stopped (SIGTERM by PID, SIGKILL after `STOP_LIMIT`), the virtual host
/// deleted, the Redis database flushed, the PostgreSQL database dropped.
pub struct Fleet {
    /// The database's and the virtual host's name.
    pub name: String,
    pub dir: tempfile::TempDir,
    pub db_created: bool,
    pub vhost_created: bool,
    pub redis_db: Option<u8>,
    pub child: Option<Child>,
    pub stderr_path: PathBuf,
}

impl Fleet {
    /// Makes the run's own resources, each recorded as made so that the
    /// drop releases it: the database (through `admin`), the virtual host
    /// with guest's permissions, and an empty Redis logical database,
    /// whose number it returns.
    pub async fn provision(&mut self, admin: &mut PgConnection) -> Result<u8, String> {
        let name = self.name.clone();
        admin
            .execute(format!("CREATE DATABASE \"{name}\"").as_str())
            .await
            .map_err(|e| format!("CREATE DATABASE {name}: {e}"))?;
        self.db_created = true;
        rabbitmqctl(&["-q", "add_vhost", &name]).await?;
        self.vhost_created = true;
        rabbitmqctl(&[
            "-q",
            "set_permissions",
            "-p",
            &name,
            "guest",
            ".*",
            ".*",
            ".*",
        ])
        .await?;
        let version = match std::env::var("BENCH_AMQP_QUEUE_VERSION")
            .unwrap_or_default()
            .trim()
        {
            "" => None,
            "1" => Some(1),
            "2" => Some(2),
            other => return Err(format!("BENCH_AMQP_QUEUE_VERSION: {other:?} is not 1 or 2")),
        };
        if let Some(version) = version {
            rabbitmqctl(&[
                "-q",
                "set_policy",
                "-p",
                &name,
                "--apply-to",
                "queues",
                "queue-version",
                ".*",
                &format!("{{\"queue-version\":{version}}}"),
            ])
            .await?;
        }
        let redis_db = pick_redis_db().await?;
        self.redis_db = Some(redis_db);
        flush_redis(redis_db).await?;
        Ok(redis_db)
    }

    /// Resources named `<prefix><pid>_<hex>`, none made yet.
    pub fn new(prefix: &str) -> Result<Fleet, String> {
        let name = format!(
            "{prefix}{}_{:08x}",
            std::process::id(),
            rand::random::<u32>()
        );
        let dir = tempfile::tempdir().map_err(|e| format!("temporary folder: {e}"))?;
        let stderr_path = dir.path().join("billing.stderr");
        Ok(Fleet {
            name,
            dir,
            db_created: false,
            vhost_created: false,
            redis_db: None,
            child: None,
            stderr_path,
        })
    }

    pub fn child_pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The child's exit status if it has exited (without reaping a live one).
    pub fn child_exited(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Waits until `GET {base}/readyz` answers 200, at most
    /// [`READY_LIMIT`]; how long that took. An error when the child
    /// (`billing <command>`) exits first, or when time runs out.
    pub async fn await_ready(
        &mut self,
        client: &reqwest::Client,
        base: &str,
        command: &str,
    ) -> Result<Duration, String> {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child_exited() {
                return Err(format!(
                    "billing {command} exited during start-up: {status}"
                ));
            }
            if let Ok(r) = client.get(format!("{base}/readyz")).send().await {
                if r.status() == 200 {
                    return Ok(started.elapsed());
                }
            }
            if started.elapsed() > READY_LIMIT {
                return Err(format!(
                    "GET /readyz did not answer 200 within {} s",
                    READY_LIMIT.as_secs()
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGTERM to the child, by its PID; waits for it to exit.
    pub fn stop_child(&mut self) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + STOP_LIMIT;
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return Some(status),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => {
                    println!(
                        "!! billing (pid {}) did not stop within {} s of SIGTERM; killing it",
                        child.id(),
                        STOP_LIMIT.as_secs()
                    );
                    let _ = child.kill();
                    return child.wait().ok();
                }
            }
        }
    }

    /// The number of lines of the child's standard error and the last `n`.
    pub fn stderr_tail(&self, n: usize) -> (usize, Vec<String>) {
        let lines: Vec<String> = std::fs::File::open(&self.stderr_path)
            .map(|f| {
                std::io::BufReader::new(f)
                    .lines()
                    .map_while(Result::ok)
                    .collect()
            })
            .unwrap_or_default();
        let total = lines.len();
        (
            total,
            lines.into_iter().skip(total.saturating_sub(n)).collect(),
        )
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        let fail = |what: String| {
            println!("!! cleanup: {what}");
            CLEANUP_FAILED.store(true, Ordering::SeqCst);
        };
        self.stop_child();
        if self.vhost_created {
            match std::process::Command::new("rabbitmqctl")
                .args(["-q", "delete_vhost", &self.name])
                .output()
            {
                Ok(o) if o.status.success() => {}
                Ok(o) => fail(format!(
                    "delete_vhost {}: {}",
                    self.name,
                    String::from_utf8_lossy(&o.stderr).trim()
                )),
                Err(e) => fail(format!("rabbitmqctl: {e}")),
            }
        }
        if let Some(n) = self.redis_db {
            let flushed = redis::Client::open(format!("{REDIS_BASE}/{n}")).and_then(|c| {
                let mut conn = c.get_connection_with_timeout(Duration::from_secs(5))?;
                redis::cmd("FLUSHDB").query::<()>(&mut conn)
            });
            if let Err(e) = flushed {
                fail(format!("FLUSHDB of Redis database {n}: {e}"));
            }
        }
        if self.db_created {
            // A runtime of its own on a thread of its own: this may run
            // inside the benchmark's runtime.
            let db = self.name.clone();
            let dropped = std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| e.to_string())?;
                rt.block_on(async {
                    let mut conn = pg_admin().await?;
                    conn.execute(format!("DROP DATABASE IF EXISTS \"{db}\" WITH (FORCE)").as_str())
                        .await
                        .map_err(|e| e.to_string())?;
                    let _ = conn.close().await;
                    Ok::<(), String>(())
                })
            })
            .join()
            .unwrap_or_else(|_| Err("the dropping thread panicked".to_owned()));
            if let Err(e) = dropped {
                fail(format!("DROP DATABASE {}: {e}", self.name));
            }
        }
    }
}

/// A new event of `event_type` in `env_ref` with `data`: its reference and
/// the envelope's bytes.
pub fn envelope(env_ref: &str, event_type: &str, data: &serde_json::Value) -> (String, Vec<u8>) {
    let event_ref = domain::Ref::generate(domain::Prefix::Event).into_string();
    let body = serde_json::json!({
        "event_ref": event_ref,
        "public_event_type": event_type,
        "environment_ref": env_ref,
        "occurred_at": domain::Timestamp::now().to_rfc3339(),
        "scope": {"product_refs": [], "buyer_ref": null, "beneficiary_business_ref": null},
        "data": data,
    });
    (event_ref, body.to_string().into_bytes())
}

/// A confirm-mode channel on `billing.events`.
pub struct Publisher {
    connection: lapin::Connection,
    channel: Channel,
}

impl Publisher {
    /// A channel in confirm mode on `url`, once the service's queue exists
    /// (published messages would otherwise be unroutable).
    pub async fn connect(url: &str, name: &str) -> Result<Publisher, String> {
        let connection = dispatcher::amqp::connect(url, name)
            .await
            .map_err(|e| format!("RabbitMQ: {e}"))?;
        let deadline = Instant::now() + READY_LIMIT;
        loop {
            // A failed passive declare closes its channel: one channel each.
            let probe = connection
                .create_channel()
                .await
                .map_err(|e| e.to_string())?;
            let passive = QueueDeclareOptions {
                passive: true,
                ..QueueDeclareOptions::default()
            };
            if probe
                .queue_declare(QUEUE, passive, FieldTable::default())
                .await
                .is_ok()
            {
                let _ = probe.close(200, "found").await;
                break;
            }
            if Instant::now() > deadline {
                return Err(format!("the queue {QUEUE} was never declared"));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let channel = connection
            .create_channel()
            .await
            .map_err(|e| e.to_string())?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(|e| e.to_string())?;
        channel
            .exchange_declare(
                EXCHANGE,
                ExchangeKind::Topic,
                ExchangeDeclareOptions {
                    durable: true,
                    ..ExchangeDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .map_err(|e| e.to_string())?;
        Ok(Publisher {
            connection,
            channel,
        })
    }

    pub async fn publish(
        &self,
        routing_key: &str,
        body: &[u8],
    ) -> Result<PublisherConfirm, String> {
        let options = BasicPublishOptions {
            mandatory: true,
            ..BasicPublishOptions::default()
        };
        let properties = BasicProperties::default()
            .with_content_type("application/json".into())
            .with_delivery_mode(2);
        self.channel
            .basic_publish(EXCHANGE, routing_key, options, body, properties)
            .await
            .map_err(|e| format!("publish: {e}"))
    }

    pub async fn close(self) {
        let _ = self.connection.close(200, "done").await;
    }
}

/// A publisher confirm as a result: acknowledged and routed, or why not.
pub fn confirmed(c: Result<Confirmation, lapin::Error>) -> Result<(), String> {
    match c {
        Ok(Confirmation::Ack(None)) => Ok(()),
        Ok(Confirmation::Ack(Some(_))) => Err("a message was unroutable".to_owned()),
        Ok(other) => Err(format!("a message was not confirmed: {other:?}")),
        Err(e) => Err(format!("confirm: {e}")),
    }
}

// --------------------------------------------------------------- processes

/// The dispatcher processes of a run (the API's is the `Fleet`'s child);
/// dropping it stops those still running (SIGTERM by PID, SIGKILL after
/// `STOP_LIMIT`).
#[derive(Default)]
pub struct Dispatchers {
    pub children: Vec<Child>,
}

impl Dispatchers {
    /// The first dispatcher that has exited, with its status.
    pub fn exited(&mut self) -> Option<(usize, ExitStatus)> {
        self.children
            .iter_mut()
            .enumerate()
            .find_map(|(i, c)| c.try_wait().ok().flatten().map(|s| (i, s)))
    }
}

impl Drop for Dispatchers {
    fn drop(&mut self) {
        for child in &mut self.children {
            if let Ok(Some(_)) = child.try_wait() {
                continue;
            }
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
        }
        let deadline = Instant::now() + STOP_LIMIT;
        for child in &mut self.children {
            loop {
                match child.try_wait() {
                    Ok(Some(_)) => break,
                    Ok(None) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(20))
                    }
                    _ => {
                        println!(
                            "   !! dispatcher (pid {}) did not stop within {} s of SIGTERM; killing it",
                            child.id(),
                            STOP_LIMIT.as_secs()
                        );
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                }
            }
        }
    }
}

/// `billing <role>` with `envs` and a metrics port of its own, its
/// standard error appended to `stderr`.
pub fn spawn_billing(
    bin: &Path,
    dir: &Path,
    envs: &[(String, String)],
    role: &str,
    stderr: &Path,
) -> Result<Child, String> {
    let mut envs = envs.to_vec();
    envs.push((
        "BILLING_METRICS__LISTEN".to_owned(),
        format!("127.0.0.1:{}", free_port()?),
    ));
    let stderr = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(stderr)
        .map_err(|e| e.to_string())?;
    billing_command(bin, dir, &envs)
        .arg(role)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .map_err(|e| format!("cannot start {} {role}: {e}", bin.display()))
}

/// Consumers of the service's queue on `vhost`, as RabbitMQ counts them.
pub async fn consumers(vhost: &str) -> usize {
    rabbitmqctl(&["-q", "list_queues", "-p", vhost, "name", "consumers"])
        .await
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            (f.next() == Some(QUEUE))
                .then(|| f.next().and_then(|n| n.parse().ok()))
                .flatten()
        })
        .next()
        .unwrap_or(0)
}

/// Prints the last `last` lines a process wrote to standard error, if any.
pub fn print_tail(path: &Path, what: &str, last: usize) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    if lines.is_empty() {
        return;
    }
    println!("   {what} wrote {} lines to stderr; the last:", lines.len());
    for l in lines.iter().skip(lines.len().saturating_sub(last)) {
        let l: String = without_colours(l).chars().take(300).collect();
        println!("     | {l}");
    }
}

/// `line` without its terminal colour codes (`ESC [ … m`), which the
/// service's log writes even to a file.
pub fn without_colours(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}
