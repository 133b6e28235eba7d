//! A PostgreSQL outage with the real binary (issue 19): `billing serve` on
//! a private, throw-away PostgreSQL cluster, under API load (checkout
//! sessions and pays under `Idempotency-Key`s, and reads) with every
//! `payment.succeeded` event sent to a local receiver. The cluster is
//! stopped (`pg_ctl stop -m fast`) for about five seconds and started
//! again, and `billing` is not restarted:
//!
//! - during the outage every answer is a success or `503
//!   dependency_unavailable` with `Retry-After`, never a 500, and comes in
//!   time; `/readyz` answers 503 naming `store`, quickly;
//! - after it, writes succeed again and `/readyz` is 200;
//! - every write that answered 2xx exists, and every event of a paid
//!   payment reached the receiver exactly once.
//!
//! The shared cluster on 5432 serves other tests and is never touched: this
//! test makes its own with `initdb` (as the user `postgres`: initdb refuses
//! root) in a temporary folder, on a free port, and always stops it
//! (`PrivatePostgres`' `Drop`). Without PostgreSQL's server binaries the
//! test says so and passes.

use crate::common::{free_port, say, SECRETS_KEY};
use crate::outage::Service;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long the cluster stays down.
const OUTAGE: Duration = Duration::from_secs(5);
/// The slowest answer accepted, in or out of the outage: a request that
/// needs the store while it is gone answers 503 within seconds, it does
/// not wait for the store to come back.
const ANSWER_WITHIN: Duration = Duration::from_secs(6);

/// The newest installed PostgreSQL's `bin` folder, if any.
fn server_binaries() -> Option<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| {
            let e = e.ok()?;
            let version = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            (bin.join("initdb").is_file() && bin.join("pg_ctl").is_file()).then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin)
}

/// A PostgreSQL cluster this test made, in a temporary folder owned by the
/// user `postgres`; stopped (immediately) when dropped.
struct PrivatePostgres {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
}

impl PrivatePostgres {
    /// `initdb` with trust authentication, then starts it on `port`.
    fn create(bin: PathBuf, port: u16) -> PrivatePostgres {
        let dir = tempfile::tempdir().unwrap();
        if running_as_root() {
            let owner = nix_ids("postgres");
            std::os::unix::fs::chown(dir.path(), Some(owner.0), Some(owner.1)).unwrap();
        }
        let cluster = PrivatePostgres { bin, dir, port };
        let initdb = cluster.bin.join("initdb");
        let data = cluster.data();
        as_postgres(&[
            initdb.to_str().unwrap(),
            "-D",
            data.to_str().unwrap(),
            "-A",
            "trust",
            "-U",
            "postgres",
            "-E",
            "UTF8",
            "--no-sync",
        ]);
        cluster.start();
        cluster
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    fn pg_ctl(&self, args: &[&str]) {
        let pg_ctl = self.bin.join("pg_ctl");
        let data = self.data();
        let mut all = vec![pg_ctl.to_str().unwrap(), "-D", data.to_str().unwrap()];
        all.extend_from_slice(args);
        as_postgres(&all);
    }

    /// Starts the cluster and waits until it accepts connections.
    fn start(&self) {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=100",
            self.port,
            self.dir.path().display()
        );
        let log = self.dir.path().join("postgres.log");
        self.pg_ctl(&[
            "-o",
            &options,
            "-l",
            log.to_str().unwrap(),
            "-w",
            "-t",
            "60",
            "start",
        ]);
    }

    /// `pg_ctl stop -m fast`: sessions are ended (57P01), the server exits.
    fn stop_fast(&self) {
        self.pg_ctl(&["-m", "fast", "-w", "-t", "60", "stop"]);
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        if self.data().join("postmaster.pid").exists() {
            let pg_ctl = self.bin.join("pg_ctl");
            let mut cmd = if running_as_root() {
                let mut c = Command::new("runuser");
                c.args(["-u", "postgres", "--"]).arg(pg_ctl);
                c
            } else {
                Command::new(pg_ctl)
            };
            let _ = cmd
                .arg("-D")
                .arg(self.data())
                .args(["-m", "immediate", "-w", "stop"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// The uid and gid of `user`.
fn nix_ids(user: &str) -> (u32, u32) {
    let id = |flag: &str| -> u32 {
        let out = Command::new("id").args([flag, user]).output().unwrap();
        assert!(out.status.success(), "no user {user}");
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    };
    (id("-u"), id("-g"))
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// Runs `args` as the user `postgres` when the test runs as root (which
/// PostgreSQL refuses), else as the test's own user; it must succeed.
fn as_postgres(args: &[&str]) {
    let mut cmd = if running_as_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).args(args);
        c
    } else {
        let mut c = Command::new(args[0]);
        c.args(&args[1..]);
        c
    };
    let out = cmd.stdin(Stdio::null()).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_stopped_and_started_loses_nothing_and_answers_503_meanwhile() {
    let Some(bin) = server_binaries() else {
        say("PostgreSQL outage test not run: no PostgreSQL server binaries in /usr/lib/postgresql/*/bin");
        return;
    };
    let cluster = PrivatePostgres::create(bin, free_port());
    let backing = vec![
        ("BILLING_STORE__URL", cluster.url()),
        ("BILLING_SECRETS__KEY", SECRETS_KEY.to_owned()),
    ];
    let pg_log = cluster.dir.path().join("postgres.log");
    let (service, load) = Service::under_load(backing, "pg", Some(pg_log)).await;
    let (api, logs) = (&service.api, || service.logs());

    let down = Instant::now();
    cluster.stop_fast();
    say(&format!(
        "PostgreSQL stopped in {} ms",
        down.elapsed().as_millis()
    ));
    api.through_outage("store", down, OUTAGE, logs).await;
    let up = Instant::now();
    cluster.start();
    say(&format!(
        "PostgreSQL started again in {} ms",
        up.elapsed().as_millis()
    ));

    // No restart of `billing`: it recovers by itself.
    api.wait_ready(Duration::from_secs(30), logs).await;
    let (paid, _) = service
        .stop_load(load, (down, up), ANSWER_WITHIN, "sent during the outage")
        .await;
    service.check_and_stop(&paid, Duration::from_secs(30)).await;
    drop(cluster);
}
