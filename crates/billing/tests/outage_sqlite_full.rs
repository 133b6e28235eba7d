//! A full disk under the embedded store, with the real binary (issue 19):
//! `billing serve` keeps its SQLite file on a small tmpfs of its own, under
//! API load (checkout sessions and pays under `Idempotency-Key`s, and
//! reads) with every `payment.succeeded` event sent to a local receiver. A
//! filler file takes the rest of the filesystem while the load runs, stays
//! a few seconds, and is deleted; `billing` is not restarted:
//!
//! - while the disk is full, writes answer `503 dependency_unavailable`
//!   with `Retry-After` (never a 500) and reads keep answering 200;
//! - once the filler is gone, writes succeed again;
//! - every write that answered 2xx exists, and every event of a paid
//!   payment reached the receiver exactly once.
//!
//! Mounting needs root: otherwise the test says so and passes. The mount
//! is the test's own (a fresh temporary folder) and is always unmounted
//! (`Tmpfs`' `Drop`), after `billing` is stopped.

use crate::common::poll::Poll;
use crate::common::{say, SECRETS_KEY};
use crate::outage::{check_answers, Service};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The size of the filesystem: room for the store and its write-ahead log
/// under the test's load, little enough to fill at once.
const SIZE: &str = "32m";
/// How long the disk stays full once writes are refused.
const FULL_FOR: Duration = Duration::from_secs(4);
/// The slowest answer accepted.
const ANSWER_WITHIN: Duration = Duration::from_secs(5);

/// A tmpfs mounted on a temporary folder; unmounted when dropped.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Tmpfs {
        let dir = tempfile::tempdir().unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(status.success(), "mount -t tmpfs failed: {status}");
        Tmpfs { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let unmounted = |args: &[&str]| {
            Command::new("umount")
                .args(args)
                .arg(self.dir.path())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        // Lazily if something still holds a file there.
        if !unmounted(&[]) {
            unmounted(&["-l"]);
        }
    }
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// Writes `path` until the filesystem has no room left: returns how many
/// bytes it took.
fn fill(path: &Path) -> u64 {
    let mut file = std::fs::File::create(path).unwrap();
    let chunk = vec![0xa5u8; 64 * 1024];
    let mut written = 0u64;
    loop {
        match file.write(&chunk) {
            Ok(0) => break,
            Ok(n) => written += n as u64,
            Err(e) if e.raw_os_error() == Some(28) => break,
            Err(e) => panic!("filling {}: {e}", path.display()),
        }
    }
    // The last pages of a small write may still fit: take them too.
    let small = [0u8; 512];
    while let Ok(n) = file.write(&small) {
        if n == 0 {
            break;
        }
        written += n as u64;
    }
    let _ = file.sync_all();
    written
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_answers_503_to_writes_keeps_reads_and_loses_nothing() {
    if !running_as_root() {
        say("SQLite disk-full test not run: mounting a tmpfs needs root");
        return;
    }
    let mount = Tmpfs::mount(SIZE);
    let backing = vec![
        (
            "BILLING_STORE__URL",
            format!("sqlite://{}/billing.db", mount.path().display()),
        ),
        ("BILLING_SECRETS__KEY", SECRETS_KEY.to_owned()),
    ];
    let (service, load) = Service::under_load(backing, "full", None).await;
    let (api, logs) = (&service.api, || service.logs());

    let filler: PathBuf = mount.path().join("filler");
    let full = Instant::now();
    let took = fill(&filler);
    say(&format!(
        "filled the disk with {} KiB in {} ms",
        took / 1024,
        full.elapsed().as_millis()
    ));
    // Writes need room sooner or later (the log grows, the file grows):
    // wait for the first refusal, then keep the disk full a while.
    let refused = Poll::within(Duration::from_secs(20))
        .every(Duration::from_millis(50))
        .until(
            || format!("no write was refused with a full disk\n{}", logs()),
            || async {
                load.seen()
                    .into_iter()
                    .filter(|s| s.at >= full && s.what != "read" && !s.answer.ok())
                    .map(|s| s.at)
                    .next()
            },
        )
        .await;
    say(&format!(
        "first write refused {} ms after the disk was full",
        refused.duration_since(full).as_millis()
    ));
    // The disk stays full this long while the load goes on against the
    // real server.
    tokio::time::sleep(FULL_FOR).await;
    let (status, body, _) = api.readyz().await;
    say(&format!("/readyz with a full disk: {status} {body}"));
    let freed = Instant::now();
    std::fs::remove_file(&filler).unwrap();
    // What the full disk was answered, before waiting for the recovery.
    check_answers(&load.seen(), ANSWER_WITHIN, (refused, freed), logs);

    let (paid, during) = service
        .stop_load(
            load,
            (refused, freed),
            ANSWER_WITHIN,
            "sent while writes were refused",
        )
        .await;
    let reads = during.get("read").map_or(0, |t| t.ok);
    assert!(reads > 0, "reads answered while the disk was full");
    let refused_reads = during.get("read").map_or(0, |t| t.unavailable);
    assert_eq!(
        refused_reads, 0,
        "reads keep working while the disk is full"
    );
    service.check_and_stop(&paid, Duration::from_secs(30)).await;
    drop(mount);
}
