//! The real `billing` binary: help, configuration errors, bootstrap,
//! `serve` printing where it listens, and a clean exit on SIGTERM.

use crate::common::{billing, bootstrap_json, free_port, Process};
use std::io::{BufRead, BufReader};
use std::process::Stdio;

#[test]
fn help_explains_each_command() {
    let dir = tempfile::tempdir().unwrap();
    let out = billing(dir.path(), &[]).arg("--help").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    for cmd in ["serve", "api", "dispatcher", "migrate", "admin"] {
        assert!(text.contains(cmd), "{cmd} missing from help:\n{text}");
    }
    let out = billing(dir.path(), &[])
        .args(["admin", "bootstrap", "--help"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("--json"));
}

#[test]
fn bad_configuration_is_refused_with_its_field() {
    let dir = tempfile::tempdir().unwrap();
    let out = billing(dir.path(), &[])
        .arg("migrate")
        .env("BILLING_DELIVERY__TIMEOUT", "soon")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("delivery.timeout"));
    let file = dir.path().join("bad.toml");
    std::fs::write(&file, "[api]\nlisten = \"127.0.0.1:1\"\nunknown = 1\n").unwrap();
    let out = billing(dir.path(), &[])
        .args(["--config", file.to_str().unwrap(), "migrate"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn bootstrap_then_serve_then_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let boot = bootstrap_json(dir.path(), &[]);
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
    let again = bootstrap_json(dir.path(), &[]);
    assert_ne!(again["environments"][0]["secret"], envs[0]["secret"]);
    assert_eq!(
        again["environments"][0]["principal_ref"],
        envs[0]["principal_ref"]
    );
    assert!(!String::from_utf8_lossy(&serde_json::to_vec(&again).unwrap()).contains(&secret));

    let port = free_port();
    let metrics_port = free_port();
    let mut serve = Process::spawn(
        billing(dir.path(), &[])
            .arg("serve")
            .env("BILLING_API__LISTEN", format!("127.0.0.1:{port}"))
            .env(
                "BILLING_METRICS__LISTEN",
                format!("127.0.0.1:{metrics_port}"),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::null()),
    );
    let mut lines = BufReader::new(serve.take_stdout()).lines();
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
        let r = client
            .get(format!("http://127.0.0.1:{port}/api/v1/nowhere"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404);
        // Both framings at once: refused before any route is chosen.
        let smuggled = {
            use std::io::{Read, Write};
            let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
            s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
                .unwrap();
            s.write_all(
                b"POST /api/v1/service_accounts HTTP/1.1\r\nHost: x\r\n\
                  Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            )
            .unwrap();
            let mut answer = String::new();
            let _ = s.read_to_string(&mut answer);
            answer
        };
        assert!(smuggled.starts_with("HTTP/1.1 400"), "{smuggled}");
        let metrics = client
            .get(format!("http://127.0.0.1:{metrics_port}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(metrics.contains("billing_http_requests_total"), "{metrics}");
        // Each request is counted under its operation, or says why it has none.
        for (operation, status) in [
            ("listEnvironments", "200"),
            ("unknown_route", "404"),
            ("refused_before_routing", "400"),
        ] {
            let series = format!(
                "billing_http_requests_total{{operation=\"{operation}\",status=\"{status}\"}}"
            );
            assert!(metrics.contains(&series), "{series} in {metrics}");
        }
    });

    let status = serve.terminate().expect("no exit within 30 s of SIGTERM");
    assert!(status.success(), "exit status {status:?}");
}

/// `serve` mounts the operator console on the API listener (its sign-in
/// works with a bootstrap secret, its cookie is not `Secure` on loopback,
/// its pages carry the policy), and `BILLING_CONSOLE__ENABLED=false` takes
/// it away.
#[test]
fn serve_mounts_the_console_unless_disabled() {
    let dir = tempfile::tempdir().unwrap();
    let boot = bootstrap_json(dir.path(), &[]);
    let secret = boot["environments"][0]["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    let rt = tokio::runtime::Runtime::new().unwrap();
    for enabled in ["true", "false"] {
        let port = free_port();
        let mut serve = Process::spawn(
            billing(dir.path(), &[])
                .arg("serve")
                .env("BILLING_API__LISTEN", format!("127.0.0.1:{port}"))
                .env(
                    "BILLING_METRICS__LISTEN",
                    format!("127.0.0.1:{}", free_port()),
                )
                .env("BILLING_CONSOLE__ENABLED", enabled)
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        );
        let api = format!("http://127.0.0.1:{port}");
        rt.block_on(async {
            let client = reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap();
            crate::common::wait_ready(&client, &api, || "serve".to_owned()).await;
            let form = client
                .get(format!("{api}/console/sign-in"))
                .send()
                .await
                .unwrap();
            if enabled == "false" {
                assert_eq!(form.status(), 404);
                return;
            }
            assert_eq!(form.status(), 200);
            assert!(form.headers()["content-security-policy"]
                .to_str()
                .unwrap()
                .starts_with("default-src 'none'"));
            let nonce = form.headers()["set-cookie"]
                .to_str()
                .unwrap()
                .split(';')
                .next()
                .unwrap()
                .to_owned();
            let html = form.text().await.unwrap();
            let marker = "name=\"csrf\" value=\"";
            let start = html.find(marker).unwrap() + marker.len();
            let csrf = &html[start..start + html[start..].find('"').unwrap()];
            let signed = client
                .post(format!("{api}/console/sign-in"))
                .header("cookie", nonce)
                .form(&[("csrf", csrf), ("secret", secret.as_str())])
                .send()
                .await
                .unwrap();
            assert_eq!(signed.status(), 303);
            let cookie = signed
                .headers()
                .get_all("set-cookie")
                .iter()
                .map(|v| v.to_str().unwrap().to_owned())
                .find(|c| c.starts_with("billing_console="))
                .expect("a session cookie");
            assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"));
            assert!(!cookie.contains("Secure"), "loopback: {cookie}");
            let page = client
                .get(format!("{api}/console/endpoints"))
                .header("cookie", cookie.split(';').next().unwrap())
                .send()
                .await
                .unwrap();
            assert_eq!(page.status(), 200);
        });
        assert!(serve.terminate_cleanly(), "{}", serve.log_tail());
    }
}
