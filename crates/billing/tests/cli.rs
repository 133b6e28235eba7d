//! The real `billing` binary: help, configuration errors, bootstrap,
//! `serve` printing where it listens, and a clean exit on SIGTERM.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn billing(dir: &std::path::Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_billing"));
    c.current_dir(dir);
    // The environment of the test run must not leak into the child.
    for (k, _) in std::env::vars() {
        if k.starts_with("BILLING_") {
            c.env_remove(k);
        }
    }
    c
}

#[test]
fn help_explains_each_command() {
    let dir = tempfile::tempdir().unwrap();
    let out = billing(dir.path()).arg("--help").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    for cmd in ["serve", "api", "dispatcher", "migrate", "admin"] {
        assert!(text.contains(cmd), "{cmd} missing from help:\n{text}");
    }
    let out = billing(dir.path())
        .args(["admin", "bootstrap", "--help"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("--json"));
}

#[test]
fn bad_configuration_is_refused_with_its_field() {
    let dir = tempfile::tempdir().unwrap();
    let out = billing(dir.path())
        .arg("migrate")
        .env("BILLING_DELIVERY__TIMEOUT", "soon")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("delivery.timeout"));
    let file = dir.path().join("bad.toml");
    std::fs::write(&file, "[api]\nlisten = \"127.0.0.1:1\"\nunknown = 1\n").unwrap();
    let out = billing(dir.path())
        .args(["--config", file.to_str().unwrap(), "migrate"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn bootstrap_then_serve_then_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let out = billing(dir.path())
        .args(["admin", "bootstrap", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let boot: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let envs = boot["environments"].as_array().unwrap();
    assert_eq!(envs.len(), 2);
    assert_eq!(envs[0]["mode"], "sandbox");
    assert_eq!(envs[1]["mode"], "live");
    let secret = envs[0]["secret"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("sk_test_"));
    assert!(envs[1]["secret"].as_str().unwrap().starts_with("sk_live_"));
    assert!(
        dir.path().join("data/billing.db").exists(),
        "the default store is a file under data/"
    );

    // A second run issues fresh credentials; the first stays valid.
    let again = billing(dir.path())
        .args(["admin", "bootstrap", "--json"])
        .output()
        .unwrap();
    let again: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_ne!(again["environments"][0]["secret"], envs[0]["secret"]);
    assert_eq!(
        again["environments"][0]["principal_ref"],
        envs[0]["principal_ref"]
    );
    assert!(!String::from_utf8_lossy(&serde_json::to_vec(&again).unwrap()).contains(&secret));

    let port = free_port();
    let metrics_port = free_port();
    let mut child = billing(dir.path())
        .arg("serve")
        .env("BILLING_API__LISTEN", format!("127.0.0.1:{port}"))
        .env(
            "BILLING_METRICS__LISTEN",
            format!("127.0.0.1:{metrics_port}"),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    assert!(first.contains(&format!("127.0.0.1:{port}")), "{first}");
    let second = lines.next().unwrap().unwrap();
    assert!(
        second.contains("billing admin bootstrap --json"),
        "{second}"
    );

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client = reqwest::Client::new();
        let r = client
            .get(format!("http://127.0.0.1:{port}/api/v1/environments"))
            .bearer_auth(&secret)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let r = client
            .get(format!("http://127.0.0.1:{port}/readyz"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let metrics = client
            .get(format!("http://127.0.0.1:{metrics_port}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(metrics.contains("billing_http_requests_total"), "{metrics}");
    });

    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let started = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no exit within 30 s of SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "exit status {status:?}");
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
