//! The README's walkthrough "A first sale", run as written, so that it
//! cannot rot: `billing serve` (private destinations allowed) over a fresh
//! folder, then the README's shell blocks marked `<!-- first-sale -->`, in
//! order, as one bash script under `set -euo pipefail`, in that folder, with
//! this build's `billing` first on `PATH`. Only the variables the README
//! itself reads are set from outside: `BILLING` (the API's base URL) and
//! `RECEIVER_PORT` (its receiver's port). The README's own receiver (the
//! Python script it writes) must then have recorded a `payment.succeeded`
//! whose Standard Webhooks signature holds for the endpoint's secret and
//! whose `data` is the payment as `retrievePayment` answers it, and the
//! service must have recorded the delivery as succeeded.
//!
//! It needs `bash`, `curl` and `python3` on `PATH`, as the README does
//! (`.ci/run` installs them when missing).

use crate::common::poll::Poll;
use crate::common::{billing, free_port, wait_ready, Process};
use domain::webhook::signing::{verify, SigningSecret};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The README, read when the test is built (a change to it rebuilds the test).
const README: &str = include_str!("../../../README.md");

/// The line that marks a walkthrough block; the next line opens it (```` ```sh ````).
const MARKER: &str = "<!-- first-sale -->";

/// How long the walkthrough's script may run (a debug build on a busy machine).
const SCRIPT_WITHIN: Duration = Duration::from_secs(180);

/// How long the webhook, and then its recorded success, may take after the
/// script ended (the first attempt is due at once; a receiver not yet
/// listening gets it again 5 s later).
const DELIVERED_WITHIN: Duration = Duration::from_secs(60);

/// The bodies of the blocks of `readme` marked with [`MARKER`], in order.
/// A marker not followed by a ```` ```sh ```` block that ends is a failure.
fn marked_blocks(readme: &str) -> Vec<String> {
    let mut lines = readme.lines();
    let mut blocks = Vec::new();
    while let Some(line) = lines.next() {
        if line.trim() != MARKER {
            continue;
        }
        assert_eq!(
            lines.next().map(str::trim_end),
            Some("```sh"),
            "README.md: `{MARKER}` must be followed by a ```sh block"
        );
        let mut block = String::new();
        loop {
            let line = lines
                .next()
                .expect("README.md: a marked ```sh block is not closed");
            if line.trim_end() == "```" {
                break;
            }
            block.push_str(line);
            block.push('\n');
        }
        blocks.push(block);
    }
    blocks
}

/// The script run: the marked blocks under `set -euo pipefail`, then one
/// line writing the README's variables `KEY` (the sandbox credential),
/// `WEBHOOK_SECRET` (the endpoint's secret) and `PAYMENT` (the payment's
/// reference) to `walkthrough.vars`, one per line.
fn script(blocks: &[String]) -> String {
    let mut s = String::from("set -euo pipefail\n");
    for block in blocks {
        s.push_str(block);
    }
    s.push_str("printf '%s\\n' \"$KEY\" \"$WEBHOOK_SECRET\" \"$PAYMENT\" > walkthrough.vars\n");
    s
}

/// The script's process group (bash and what it leaves in the background:
/// the README's receiver), killed when the test ends however it ends.
struct Group(Child);

impl Drop for Group {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0.id())])
            .status();
        let _ = self.0.wait();
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// The first request the README's receiver recorded in
/// `first-sale/webhooks.jsonl` whose body is a `payment.succeeded`, with
/// its body parsed.
fn payment_succeeded(log: &str) -> Option<(serde_json::Value, serde_json::Value)> {
    log.lines().find_map(|line| {
        let request: serde_json::Value = serde_json::from_str(line).ok()?;
        let body: serde_json::Value = serde_json::from_str(request["body"].as_str()?).ok()?;
        (body["public_event_type"] == "payment.succeeded").then_some((request, body))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_first_sale_delivers_a_signed_payment() {
    let blocks = marked_blocks(README);
    assert!(!blocks.is_empty(), "README.md has no `{MARKER}` blocks");
    let dir = tempfile::tempdir().unwrap();
    let api = format!("http://127.0.0.1:{}", free_port());
    let mut serve = Process::spawn_logged(
        billing(dir.path(), &[])
            .arg("serve")
            .env("BILLING_DELIVERY__ALLOW_PRIVATE_NETWORKS", "true")
            .env("BILLING_API__LISTEN", &api["http://".len()..])
            .env(
                "BILLING_METRICS__LISTEN",
                format!("127.0.0.1:{}", free_port()),
            ),
        dir.path().join("serve.log"),
    );
    let client = reqwest::Client::new();
    wait_ready(&client, &api, || serve.log_tail()).await;

    // The walkthrough, with this build's `billing` first on PATH.
    let bin = Path::new(env!("CARGO_BIN_EXE_billing")).parent().unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    std::fs::write(dir.path().join("walkthrough.sh"), script(&blocks)).unwrap();
    let log_path = dir.path().join("walkthrough.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let receiver_port = free_port();
    let mut bash = Command::new("bash");
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("BILLING")) {
        bash.env_remove(k);
    }
    bash.arg("walkthrough.sh")
        .current_dir(dir.path())
        .env("PATH", path)
        .env("BILLING", &api)
        .env("RECEIVER_PORT", receiver_port.to_string())
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    let mut group = Group(bash.spawn().expect("bash runs"));
    let poll = Poll::within(SCRIPT_WITHIN).every(Duration::from_millis(100));
    let status = loop {
        if let Some(status) = group.0.try_wait().unwrap() {
            break status;
        }
        poll.tick(|| {
            format!(
                "the walkthrough did not end:\n{}\n{}",
                read(&log_path),
                serve.log_tail()
            )
        })
        .await;
    };
    let said = || format!("walkthrough output:\n{}", read(&log_path));
    assert!(
        status.success(),
        "the walkthrough failed ({status}); {}",
        said()
    );
    let vars = read(&dir.path().join("walkthrough.vars"));
    let [key, webhook_secret, payment_ref] = vars.lines().collect::<Vec<_>>()[..] else {
        panic!("walkthrough.vars: {vars:?}; {}", said());
    };

    // The README's receiver got the payment.succeeded.
    let webhooks = dir.path().join("first-sale/webhooks.jsonl");
    let poll = Poll::within((SCRIPT_WITHIN + DELIVERED_WITHIN).saturating_sub(poll.elapsed()))
        .every(Duration::from_millis(100));
    let (request, body) = loop {
        if let Some(found) = payment_succeeded(&read(&webhooks)) {
            break found;
        }
        poll.tick(|| {
            format!(
                "no payment.succeeded reached the receiver; it recorded:\n{}\n{}\n{}",
                read(&webhooks),
                said(),
                serve.log_tail()
            )
        })
        .await;
    };
    let header = |name: &str| request[name].as_str().unwrap().to_owned();
    let (id, timestamp) = (header("webhook-id"), header("webhook-timestamp"));
    assert!(id.starts_with("whd_"), "webhook-id {id}");

    // Its signature holds for the endpoint's secret, by our verifier
    // (checked against the Standard Webhooks reference vector) and by the
    // README's, which answered 204 only then.
    let secret = SigningSecret::parse(webhook_secret).expect("a whsec_ secret");
    assert!(
        verify(
            &secret,
            &id,
            timestamp.parse().unwrap(),
            request["body"].as_str().unwrap().as_bytes(),
            &header("webhook-signature"),
        ),
        "the signature does not verify: {request}"
    );
    assert_eq!(
        request["verified"], true,
        "the README's receiver refused it"
    );
    // The README's check is no formality: the same headers over a body
    // that says the payment failed are refused.
    let original = request["body"].as_str().unwrap();
    let forged = original.replacen(r#""succeeded""#, r#""failed""#, 1);
    assert_ne!(forged, original);
    let refused = client
        .post(format!("http://127.0.0.1:{receiver_port}/webhooks"))
        .header("webhook-id", &id)
        .header("webhook-timestamp", &timestamp)
        .header("webhook-signature", header("webhook-signature"))
        .body(forged)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 400, "a forged body is refused");

    // Its data is the payment as the API shows it.
    assert_eq!(body["dto_version"], 2, "{body}");
    let get = |path: String| {
        let request = client.get(format!("{api}/api/v1/{path}")).bearer_auth(key);
        async move {
            let answer = request.send().await.unwrap();
            assert_eq!(answer.status(), 200);
            answer.json::<serde_json::Value>().await.unwrap()["data"].take()
        }
    };
    let payment = get(format!("payments/{payment_ref}")).await;
    assert_eq!(payment["status"], "succeeded", "{payment}");
    assert_eq!(body["data"], payment, "the webhook's data is the payment");

    // And the service recorded the receiver's answer as a success.
    let poll = Poll::within(DELIVERED_WITHIN).every(Duration::from_millis(100));
    loop {
        let delivery = get(format!("webhook_deliveries/{id}")).await;
        if delivery["status"] == "succeeded" {
            break;
        }
        poll.tick(|| format!("delivery {id} not recorded as succeeded: {delivery}"))
            .await;
    }
    drop(group);
    assert!(serve.terminate_cleanly(), "SIGTERM exits cleanly");
}
