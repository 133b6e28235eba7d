//! Secrets never leak (issue 19), with the real binary. A full run of
//! `billing serve` with verbose logs: bootstrap (twice), service accounts,
//! credentials issued, replayed, rotated, revoked, suspended and retired,
//! failed authentications with wrong secrets in every shape, webhook
//! endpoints whose signing secrets are rotated, confirmed and revoked,
//! deliveries to a local receiver (one endpoint answering 200, one 500),
//! redrives, a checkout paid with a test card, reads of everything made,
//! request logs, `/metrics`, and error paths that could echo their input.
//!
//! Every log line (stderr and stdout of every process), every response
//! (headers and body), every request the receiver got and the SQLite files
//! are kept. Then each secret must appear only where it was made: a
//! credential secret (`sk_…`) in the bootstrap output or the issue/rotate
//! response that returned it, a signing secret (`whsec_…`) in the endpoint
//! create/rotate response that returned it, and the encryption key and the
//! wrong secrets the test presented nowhere at all.
//!
//! Two runs: text logs at trace level for the service's crates with the key
//! in `BILLING_SECRETS__KEY`, and JSON logs at debug level with the key
//! generated into the key file (`data/secret.key`).

use crate::common::poll::Poll;
use crate::common::{billing, free_port, output_ok, text, wait_ready, Process};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use rand::{distributions::Alphanumeric, Rng, RngCore};
use serde_json::{json, Value};
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Where a secret may be shown: once, where it was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// The output of the n-th `billing admin bootstrap --json`.
    Bootstrap(usize),
    /// The response of the n-th recorded exchange.
    Response(usize),
    /// Nowhere: the encryption key, and the wrong secrets the test tried.
    Nowhere,
}

/// A value that must not leak, and the forms it could leak in.
struct Secret {
    label: String,
    forms: Vec<String>,
    origin: Origin,
}

impl Secret {
    /// A credential secret: the whole, and its 32 characters after the
    /// prefix.
    fn credential(label: &str, value: &str, origin: Origin) -> Secret {
        let body = value
            .strip_prefix("sk_test_")
            .or_else(|| value.strip_prefix("sk_live_"))
            .unwrap_or_else(|| panic!("{label} is not a credential secret: {value}"));
        assert_eq!(body.len(), 32, "{label}: {value}");
        Secret {
            label: label.to_owned(),
            forms: vec![value.to_owned(), body.to_owned()],
            origin,
        }
    }

    /// A signing secret: the whole, its base64 key and that key in hex.
    fn signing(label: &str, value: &str, origin: Origin) -> Secret {
        let b64 = value
            .strip_prefix("whsec_")
            .unwrap_or_else(|| panic!("{label} is not a signing secret: {value}"));
        let key = STANDARD.decode(b64).expect("a signing secret is base64");
        assert_eq!(key.len(), 32, "{label}: {value}");
        Secret {
            label: label.to_owned(),
            forms: vec![value.to_owned(), b64.to_owned(), hex(&key)],
            origin,
        }
    }

    /// The key that encrypts signing secrets: base64, hex (both cases)
    /// and the `Debug` form of its bytes.
    fn encryption_key(key: &[u8; 32]) -> Secret {
        Secret {
            label: "encryption key".to_owned(),
            forms: vec![
                STANDARD.encode(key),
                hex(key),
                hex(key).to_uppercase(),
                format!("{key:?}"),
            ],
            origin: Origin::Nowhere,
        }
    }

    /// The raw bytes of a signing secret or of the encryption key.
    fn raw_key(&self) -> Option<Vec<u8>> {
        let b64 = self.forms[0]
            .strip_prefix("whsec_")
            .unwrap_or(&self.forms[0]);
        let bytes = STANDARD.decode(b64).ok()?;
        (bytes.len() == 32).then_some(bytes)
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// 32 random base62 characters: the body of a credential secret.
fn random_body() -> String {
    rand::thread_rng()
        .sample_iter(&Alphanumeric)
        .take(32)
        .map(char::from)
        .collect()
}

fn items(v: &Value) -> Vec<Value> {
    v["items"]
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .clone()
}

// ---------------------------------------------------------------------------
// The receiver: records every request whole; answers 200 on `/hook`, and
// 500 with a body (which becomes the attempt's excerpt) on `/fail`.

#[derive(Clone, Default)]
struct Receiver(Arc<Mutex<Vec<(String, String)>>>);

impl Receiver {
    fn count(&self, path: &str) -> usize {
        let seen = self.0.lock().unwrap();
        seen.iter().filter(|(p, _)| p == path).count()
    }

    fn texts(&self) -> Vec<String> {
        let seen = self.0.lock().unwrap();
        seen.iter().map(|(_, t)| t.clone()).collect()
    }

    /// Starts it on 127.0.0.1; its base URL.
    async fn start(&self) -> String {
        let app = axum::Router::new()
            .fallback(receive)
            .with_state(self.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        base
    }
}

async fn receive(
    State(seen): State<Receiver>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, &'static str) {
    let mut text = format!("{method} {uri}\n");
    for (k, v) in &headers {
        text.push_str(&format!("{k}: {}\n", String::from_utf8_lossy(v.as_bytes())));
    }
    text.push('\n');
    text.push_str(&String::from_utf8_lossy(&body));
    let path = uri.path().to_owned();
    let answer = if path == "/fail" {
        (StatusCode::INTERNAL_SERVER_ERROR, "receiver says no")
    } else {
        (StatusCode::OK, "ok")
    };
    seen.0.lock().unwrap().push((path, text));
    answer
}

// ---------------------------------------------------------------------------
// The client: every request goes through `Run::send`, which records it.

/// One request the test sent and what it got back.
struct Exchange {
    request: String,
    status: u16,
    /// The response's headers and body, as the client saw them.
    text: String,
    body: Value,
}

/// A request body.
enum Body<'a> {
    None,
    Json(&'a Value),
    /// Bytes sent as they are, with `Content-Type: application/json`.
    Raw(String),
}

struct Run {
    client: reqwest::Client,
    api: String,
    /// The sandbox admin's secret, which most requests use.
    admin: String,
    exchanges: Vec<Exchange>,
    secrets: Vec<Secret>,
}

impl Run {
    /// Sends a request with these `Authorization` values and headers,
    /// records it and its response; the index of the exchange.
    async fn send(
        &mut self,
        method: reqwest::Method,
        url: &str,
        auth: &[String],
        headers: &[(&str, &str)],
        body: Body<'_>,
    ) -> usize {
        let mut req = self.client.request(method.clone(), url);
        for v in auth {
            req = req.header("Authorization", v);
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        req = match body {
            Body::None => req,
            Body::Json(b) => req.json(b),
            Body::Raw(b) => req.header("Content-Type", "application/json").body(b),
        };
        let r = req.send().await;
        let r = r.unwrap_or_else(|e| panic!("{method} {url}: {e}"));
        let status = r.status().as_u16();
        let mut text = format!("HTTP {status}\n");
        for (k, v) in r.headers() {
            text.push_str(&format!("{k}: {}\n", String::from_utf8_lossy(v.as_bytes())));
        }
        let raw = r.text().await.unwrap();
        text.push('\n');
        text.push_str(&raw);
        self.exchanges.push(Exchange {
            request: format!("{method} {url}"),
            status,
            text,
            body: serde_json::from_str(&raw).unwrap_or(Value::Null),
        });
        self.exchanges.len() - 1
    }

    /// The `data` of exchange `i`, which must have answered `status`.
    fn expect(&self, i: usize, status: u16) -> Value {
        let e = &self.exchanges[i];
        assert_eq!(e.status, status, "{}: {}", e.request, e.text);
        e.body["data"].clone()
    }

    /// A GET of an API path with `secret`: the index of the exchange.
    async fn get_as(&mut self, path: &str, secret: &str) -> usize {
        let url = format!("{}{path}", self.api);
        let auth = [format!("Bearer {secret}")];
        self.send(reqwest::Method::GET, &url, &auth, &[], Body::None)
            .await
    }

    /// A GET by the admin, which must answer 200: its `data`.
    async fn get(&mut self, path: &str) -> Value {
        let admin = self.admin.clone();
        let i = self.get_as(path, &admin).await;
        self.expect(i, 200)
    }

    /// A POST with `secret`, the Idempotency-Key `key` and `If-Match` if
    /// given: the index of the exchange.
    async fn post_as(
        &mut self,
        secret: &str,
        path: &str,
        key: &str,
        if_match: Option<&str>,
        body: Body<'_>,
    ) -> usize {
        let url = format!("{}{path}", self.api);
        let mut headers = vec![("Idempotency-Key", key)];
        headers.extend(if_match.map(|tag| ("If-Match", tag)));
        let auth = [format!("Bearer {secret}")];
        self.send(reqwest::Method::POST, &url, &auth, &headers, body)
            .await
    }

    /// A POST by the admin with the Idempotency-Key `key`.
    async fn post_keyed(
        &mut self,
        path: &str,
        key: &str,
        if_match: Option<&str>,
        body: &Value,
    ) -> usize {
        let admin = self.admin.clone();
        self.post_as(&admin, path, key, if_match, Body::Json(body))
            .await
    }

    /// A POST by the admin with a fresh key: the index of the exchange.
    async fn post_raw(&mut self, path: &str, if_match: Option<&str>, body: Value) -> usize {
        let key = fresh_key();
        self.post_keyed(path, &key, if_match, &body).await
    }

    /// A POST by the admin that must succeed (200 or 201): its `data`.
    async fn post(&mut self, path: &str, if_match: Option<&str>, body: Value) -> Value {
        let i = self.post_raw(path, if_match, body).await;
        let e = &self.exchanges[i];
        assert!(matches!(e.status, 200 | 201), "{}: {}", e.request, e.text);
        e.body["data"].clone()
    }

    /// A GET of `/api/v1/environments` with these `Authorization` values,
    /// which must be refused with 401.
    async fn refused(&mut self, auth: &[String], label: &str) {
        let url = format!("{}/api/v1/environments", self.api);
        let i = self
            .send(reqwest::Method::GET, &url, auth, &[], Body::None)
            .await;
        let e = &self.exchanges[i];
        assert_eq!(e.status, 401, "{label}: {}", e.text);
        assert_eq!(e.body["error"]["code"], "authentication_failed", "{label}");
    }

    /// A POST by the admin that must be refused as `validation_failed`.
    async fn invalid(&mut self, path: &str, if_match: Option<&str>, body: Body<'_>) {
        let admin = self.admin.clone();
        let i = self
            .post_as(&admin, path, &fresh_key(), if_match, body)
            .await;
        let e = &self.exchanges[i];
        assert_eq!(e.status, 400, "{}: {}", e.request, e.text);
        assert_eq!(e.body["error"]["code"], "validation_failed", "{}", e.text);
    }

    /// A well-formed credential secret that no credential has, remembered
    /// as one that must appear nowhere.
    fn wrong(&mut self, label: &str, prefix: &str) -> String {
        let s = format!("{prefix}{}", random_body());
        self.secrets
            .push(Secret::credential(label, &s, Origin::Nowhere));
        s
    }

    /// The one secret that the response of exchange `i` shows (a
    /// credential's `secret`, or one signing secret version's), remembered
    /// as made there.
    fn shown(&mut self, i: usize, label: &str) -> String {
        let e = &self.exchanges[i];
        assert!(matches!(e.status, 200 | 201), "{label}: {}", e.text);
        let data = &e.body["data"];
        if let Some(s) = data["secret"].as_str() {
            let s = s.to_owned();
            self.secrets
                .push(Secret::credential(label, &s, Origin::Response(i)));
            return s;
        }
        let versions = data["secret_versions"].as_array();
        let shown: Vec<&str> = versions
            .unwrap_or_else(|| panic!("{label}: no secret in {data}"))
            .iter()
            .filter_map(|v| v["secret"].as_str())
            .collect();
        assert_eq!(shown.len(), 1, "{label}: one secret shown: {data}");
        let s = shown[0].to_owned();
        self.secrets
            .push(Secret::signing(label, &s, Origin::Response(i)));
        s
    }

    /// Polls `path` until `done` holds of its `data`, for up to 60 s.
    async fn wait_for(&mut self, path: &str, what: &str, done: impl Fn(&Value) -> bool) {
        let poll = Poll::within(Duration::from_secs(60)).every(Duration::from_millis(200));
        loop {
            let data = self.get(path).await;
            if done(&data) {
                return;
            }
            poll.tick(|| format!("{what}: {data}")).await;
        }
    }
}

fn fresh_key() -> String {
    format!("leak-{}", random_body())
}

// ---------------------------------------------------------------------------
// The run.

/// How a run is configured.
struct Setup {
    name: &'static str,
    log_format: &'static str,
    log_level: &'static str,
    /// The key in `BILLING_SECRETS__KEY`; `None` lets the server generate
    /// `data/secret.key`.
    key: Option<[u8; 32]>,
}

/// Text a process wrote, or a request the receiver got, named.
struct Output {
    name: String,
    text: String,
}

/// Everything kept of a run, beside the exchanges.
#[derive(Default)]
struct Kept {
    /// The stdout of each bootstrap: where its secrets are made.
    bootstraps: Vec<Output>,
    /// Where no secret may appear: logs, stdout, the receiver's requests.
    outputs: Vec<Output>,
}

fn envs(setup: &Setup, port: u16, metrics_port: u16) -> Vec<(&'static str, String)> {
    let mut v = vec![
        ("BILLING_API__LISTEN", format!("127.0.0.1:{port}")),
        (
            "BILLING_METRICS__LISTEN",
            format!("127.0.0.1:{metrics_port}"),
        ),
        (
            "BILLING_DELIVERY__ALLOW_PRIVATE_NETWORKS",
            "true".to_owned(),
        ),
        ("BILLING_DELIVERY__TIMEOUT", "5s".to_owned()),
        ("BILLING_LOG__FORMAT", setup.log_format.to_owned()),
        ("BILLING_LOG__LEVEL", setup.log_level.to_owned()),
    ];
    if let Some(key) = setup.key {
        v.push(("BILLING_SECRETS__KEY", STANDARD.encode(key)));
    }
    v
}

/// `billing admin bootstrap --json`: its stdout is kept as the place its
/// secrets are made, its stderr as logs. The sandbox and live admin
/// secrets, remembered.
fn bootstrap(
    dir: &Path,
    envs: &[(&str, String)],
    kept: &mut Kept,
    secrets: &mut Vec<Secret>,
) -> String {
    let n = kept.bootstraps.len();
    let out =
        output_ok(
            billing(dir, envs)
                .env_remove("RUST_LOG")
                .args(["admin", "bootstrap", "--json"]),
        );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let boot: Value = serde_json::from_str(&stdout).unwrap();
    let environments = boot["environments"].as_array().unwrap();
    assert_eq!(environments.len(), 2, "{boot}");
    for e in environments {
        let label = format!("bootstrap {} {} admin", n + 1, text(e, "mode"));
        secrets.push(Secret::credential(
            &label,
            &text(e, "secret"),
            Origin::Bootstrap(n),
        ));
    }
    kept.bootstraps.push(Output {
        name: format!("stdout of bootstrap {}", n + 1),
        text: stdout,
    });
    kept.outputs.push(Output {
        name: format!("stderr of bootstrap {}", n + 1),
        text: String::from_utf8_lossy(&out.stderr).into_owned(),
    });
    assert_eq!(environments[0]["mode"], "sandbox", "{boot}");
    text(&environments[0], "secret")
}

async fn leak_run(setup: Setup) {
    let dir = tempfile::tempdir().unwrap();
    let (port, metrics_port) = (free_port(), free_port());
    let envs = envs(&setup, port, metrics_port);
    let mut kept = Kept::default();
    let mut secrets = Vec::new();
    let admin = bootstrap(dir.path(), &envs, &mut kept, &mut secrets);

    let stdout_path = dir.path().join("serve.stdout");
    let stderr_path = dir.path().join("serve.stderr");
    let mut serve = Process::spawn(
        billing(dir.path(), &envs)
            .env_remove("RUST_LOG")
            .arg("serve")
            .stdout(Stdio::from(std::fs::File::create(&stdout_path).unwrap()))
            .stderr(Stdio::from(std::fs::File::create(&stderr_path).unwrap())),
    );
    let api = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let log = || std::fs::read_to_string(&stderr_path).unwrap_or_default();
    wait_ready(&client, &api, log).await;

    let key = setup.key.unwrap_or_else(|| {
        let text = std::fs::read_to_string(dir.path().join("data/secret.key"))
            .expect("serve generated data/secret.key");
        let bytes = STANDARD.decode(text.trim()).unwrap();
        bytes.try_into().expect("the key file holds 32 bytes")
    });
    secrets.push(Secret::encryption_key(&key));
    // A second bootstrap while the server runs: fresh secrets, shown once.
    let admin2 = bootstrap(dir.path(), &envs, &mut kept, &mut secrets);

    let mut run = Run {
        client,
        api: api.clone(),
        admin,
        exchanges: Vec::new(),
        secrets,
    };
    let live_admin = run.secrets[1].forms[0].clone();
    assert!(live_admin.starts_with("sk_live_"));
    let receiver = Receiver::default();
    let receiver_base = receiver.start().await;

    run.get("/api/v1/environments").await;
    let i = run.get_as("/api/v1/environments", &admin2).await;
    run.expect(i, 200);
    let (sa_path, credential_ref) = administration(&mut run, &live_admin).await;
    failed_authentications(&mut run).await;
    echoing_errors(&mut run, &sa_path, &credential_ref).await;
    webhooks(&mut run, &receiver, &receiver_base).await;
    // Retiring the account revokes its credentials.
    run.post(
        &format!("{sa_path}/retire"),
        Some("*"),
        json!({"reason": "done"}),
    )
    .await;
    request_logs(&mut run).await;

    // What the server exports besides the API: metrics, health, OpenAPI.
    let url = format!("http://127.0.0.1:{metrics_port}/metrics");
    let i = run
        .send(reqwest::Method::GET, &url, &[], &[], Body::None)
        .await;
    let metrics = &run.exchanges[i];
    assert_eq!(metrics.status, 200);
    assert!(metrics.text.contains("billing_http_requests_total"));
    for path in ["/healthz", "/readyz", "/api/v1/openapi.json"] {
        let url = format!("{api}{path}");
        run.send(reqwest::Method::GET, &url, &[], &[], Body::None)
            .await;
    }

    assert!(serve.terminate_cleanly(), "SIGTERM exits cleanly");
    let stderr = std::fs::read_to_string(&stderr_path).unwrap();
    let stdout = std::fs::read_to_string(&stdout_path).unwrap();
    check_logs_are_real(&setup, &stderr);
    kept.outputs.push(Output {
        name: "stderr of serve".into(),
        text: stderr,
    });
    kept.outputs.push(Output {
        name: "stdout of serve".into(),
        text: stdout,
    });
    for (n, t) in receiver.texts().into_iter().enumerate() {
        kept.outputs.push(Output {
            name: format!("webhook request {} received", n + 1),
            text: t,
        });
    }

    check_makers_show_their_secret(&run, &kept);
    let mut leaks = Vec::new();
    scan(&run, &kept, &mut leaks);
    scan_store(dir.path(), &run.secrets, &mut leaks);
    check_request_logs(&run, &mut leaks);
    let log_bytes: usize = kept.outputs.iter().map(|o| o.text.len()).sum();
    eprintln!(
        "[{}] {} secrets checked against {} responses and {} outputs ({log_bytes} bytes)",
        setup.name,
        run.secrets.len(),
        run.exchanges.len(),
        kept.outputs.len(),
    );
    assert!(
        leaks.is_empty(),
        "[{}] {} leak(s):\n{}",
        setup.name,
        leaks.len(),
        leaks.join("\n")
    );
}

/// Service accounts, grants and credentials: issued (and the issue
/// replayed), rotated (and replayed), used in the grace period, revoked,
/// refused while the account is suspended; a live credential too. The
/// account's path and the rotated credential.
async fn administration(run: &mut Run, live_admin: &str) -> (String, String) {
    let body = json!({"name": "leak-probe", "description": "issue 19"});
    let sa = run.post("/api/v1/service_accounts", None, body).await;
    let sa_path = format!("/api/v1/service_accounts/{}", text(&sa, "principal_ref"));
    for permission in ["environments:read_list", "service_accounts:read_list"] {
        let body = json!({"permission_action": permission});
        run.post(&format!("{sa_path}/grants"), None, body).await;
    }

    let issue = format!("{sa_path}/credentials");
    let (key, body) = (fresh_key(), json!({"name": "first"}));
    let i = run.post_keyed(&issue, &key, None, &body).await;
    let first = run.shown(i, "issued credential");
    let credential = run.expect(i, 201);
    // A replay answers again, without the secret.
    let i = run.post_keyed(&issue, &key, None, &body).await;
    let replay = run.expect(i, 201);
    assert!(replay.get("secret").is_none(), "replayed: {replay}");
    let i = run.get_as("/api/v1/environments", &first).await;
    run.expect(i, 200);

    let rotate = format!(
        "/api/v1/credentials/{}/rotate",
        text(&credential, "credential_ref")
    );
    let (key, body) = (fresh_key(), json!({"grace_period_seconds": 3600}));
    // Its use may have changed it: the ETag as listed now.
    let listed = items(&run.get(&issue).await);
    let etag = listed
        .iter()
        .find(|c| c["credential_ref"] == credential["credential_ref"])
        .map(|c| text(c, "etag"))
        .unwrap();
    let i = run.post_keyed(&rotate, &key, Some(&etag), &body).await;
    let rotated = run.shown(i, "rotated credential");
    let i = run.post_keyed(&rotate, &key, Some(&etag), &body).await;
    let replay = run.expect(i, 200);
    assert!(replay.get("secret").is_none(), "replayed: {replay}");
    // The new secret and the previous one (in its grace period) both work.
    for secret in [&rotated, &first] {
        let i = run.get_as("/api/v1/service_accounts", secret).await;
        run.expect(i, 200);
    }

    let i = run.post_raw(&issue, None, json!({})).await;
    let second = run.shown(i, "issued credential to revoke");
    let revoke = format!(
        "/api/v1/credentials/{}/revoke",
        text(&run.expect(i, 201), "credential_ref")
    );
    run.post(&revoke, Some("*"), json!({"reason": "leak test"}))
        .await;
    run.refused(&[format!("Bearer {second}")], "revoked credential")
        .await;
    for path in [&issue, &format!("{sa_path}/grants"), &sa_path] {
        run.get(path).await;
    }
    run.get("/api/v1/service_accounts").await;

    // A suspended principal's secret is refused, then works again.
    let reason = json!({"reason": "leak test"});
    run.post(&format!("{sa_path}/suspend"), Some("*"), reason)
        .await;
    run.refused(&[format!("Bearer {rotated}")], "suspended principal")
        .await;
    run.post(&format!("{sa_path}/resume"), Some("*"), json!({}))
        .await;
    let i = run.get_as("/api/v1/environments", &rotated).await;
    run.expect(i, 200);

    // A live credential (`sk_live_`), without grants: authenticated, then
    // forbidden.
    let body = Body::Json(&json!({"name": "live-probe"}));
    let i = run
        .post_as(
            live_admin,
            "/api/v1/service_accounts",
            &fresh_key(),
            None,
            body,
        )
        .await;
    let live_sa = text(&run.expect(i, 201), "principal_ref");
    let path = format!("/api/v1/service_accounts/{live_sa}/credentials");
    let body = Body::Json(&json!({"name": "live"}));
    let i = run
        .post_as(live_admin, &path, &fresh_key(), None, body)
        .await;
    let live = run.shown(i, "issued live credential");
    let i = run.get_as("/api/v1/environments", &live).await;
    run.expect(i, 403);
    (sa_path, text(&credential, "credential_ref"))
}

/// An `Authorization` value presenting a secret.
type Header = fn(&str) -> String;
/// A request body carrying a secret.
type Shape = fn(&str) -> Value;

/// Wrong credentials in every shape: each is refused and must appear in no
/// log, response or record.
async fn failed_authentications(run: &mut Run) {
    let shapes: [(&str, &str, Header); 6] = [
        ("wrong sandbox secret", "sk_test_", |s| {
            format!("Bearer {s}")
        }),
        ("wrong live secret", "sk_live_", |s| format!("Bearer {s}")),
        ("wrong secret without a scheme", "sk_test_", |s| {
            s.to_owned()
        }),
        ("wrong secret, lowercase bearer", "sk_test_", |s| {
            format!("bearer {s}")
        }),
        ("wrong secret as Basic", "sk_test_", |s| {
            format!("Basic {s}")
        }),
        ("wrong secret with white space", "sk_test_", |s| {
            format!("Bearer   {s}  ")
        }),
    ];
    for (label, prefix, header) in shapes {
        let s = run.wrong(label, prefix);
        run.refused(&[header(&s)], label).await;
    }
    // A valid secret beside a wrong one: ambiguous, refused.
    let s = run.wrong("wrong secret beside a valid one", "sk_test_");
    let auth = [format!("Bearer {}", run.admin), format!("Bearer {s}")];
    run.refused(&auth, "two credentials").await;
    // Malformed: too long, or a signing secret where a credential belongs.
    let long = format!("sk_test_{}{}", random_body(), random_body());
    run.secrets.push(Secret {
        label: "too long a secret".into(),
        forms: vec![long.clone()],
        origin: Origin::Nowhere,
    });
    run.refused(&[format!("Bearer {long}")], "too long").await;
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    let whsec = format!("whsec_{}", STANDARD.encode(bytes));
    let label = "signing secret as a credential";
    run.secrets
        .push(Secret::signing(label, &whsec, Origin::Nowhere));
    run.refused(&[format!("Bearer {whsec}")], label).await;
    // A wrong secret on a write, and on an unknown route.
    let s = run.wrong("wrong secret on a write", "sk_test_");
    let body = Body::Json(&json!({"name": "nope"}));
    let i = run
        .post_as(&s, "/api/v1/service_accounts", &fresh_key(), None, body)
        .await;
    run.expect(i, 401);
    let s = run.wrong("wrong secret on an unknown route", "sk_test_");
    let i = run.get_as("/api/v1/no-such-route", &s).await;
    run.expect(i, 404);
}

/// Validation errors whose message or `details` could echo the input: a
/// secret in an unknown field, in a field of the wrong type, in a value
/// checked by a handler, in malformed JSON, in a header, in the query.
async fn echoing_errors(run: &mut Run, sa_path: &str, credential_ref: &str) {
    let rotate = format!("/api/v1/credentials/{credential_ref}/rotate");
    let (grants, issue) = (
        format!("{sa_path}/grants"),
        format!("{sa_path}/credentials"),
    );
    let pay = "/api/v1/checkout-sessions/cs_AAAAAAAAAAAA/pay";
    let test_send = "/api/v1/webhook_endpoints/whep_AAAAAAAAAAAA/test_send";
    fn price(amount: Value) -> Value {
        json!({"product_ref": "prd_AAAAAAAAAAAA", "amount": amount, "type": "one_time"})
    }
    let probes: [(&str, &str, Option<&str>, Shape); 12] = [
        (
            "secret in an unknown field",
            "/api/v1/service_accounts",
            None,
            |s| json!({"name": "x", "token": s}),
        ),
        (
            "secret in an integer field",
            &rotate,
            Some("*"),
            |s| json!({"grace_period_seconds": s}),
        ),
        (
            "secret in a boolean field",
            pay,
            None,
            |s| json!({"payment_method": "pm_card_visa", "save_payment_method": s}),
        ),
        (
            "secret where an object belongs",
            "/api/v1/prices",
            None,
            |s| price(json!(s)),
        ),
        (
            "secret in an unknown nested field",
            "/api/v1/prices",
            None,
            |s| price(json!({"currency": "EUR", "unit": "minor", "value": "5", "extra": s})),
        ),
        (
            "secret as a permission",
            &grants,
            None,
            |s| json!({"permission_action": s}),
        ),
        (
            "secret as an expiry",
            &issue,
            None,
            |s| json!({"expires_at": s}),
        ),
        (
            "secret as a webhook URL",
            "/api/v1/webhook_endpoints",
            None,
            |s| json!({"url": s}),
        ),
        (
            "secret as a URL's password",
            "/api/v1/webhook_endpoints",
            None,
            |s| json!({"url": format!("https://hooks:{s}@example.com/hook")}),
        ),
        (
            "secret as an event type",
            test_send,
            None,
            |s| json!({"public_event_type": s}),
        ),
        (
            "secret as a payment method",
            pay,
            None,
            |s| json!({"payment_method": s}),
        ),
        (
            "secret as the body",
            "/api/v1/service_accounts",
            None,
            |s| json!(s),
        ),
    ];
    for (label, path, if_match, body) in probes {
        let s = run.wrong(label, "sk_test_");
        run.invalid(path, if_match, Body::Json(&body(&s))).await;
    }
    let s = run.wrong("secret in malformed JSON", "sk_live_");
    let raw = Body::Raw(format!("{{\"name\": {s}}}"));
    run.invalid("/api/v1/service_accounts", None, raw).await;

    // A secret as If-Match: malformed (400) or not matching (412).
    let s = run.wrong("secret as If-Match", "sk_test_");
    let admin = run.admin.clone();
    let path = format!("{sa_path}/suspend");
    let i = run
        .post_as(
            &admin,
            &path,
            &fresh_key(),
            Some(&s),
            Body::Json(&json!({})),
        )
        .await;
    let e = &run.exchanges[i];
    assert!(matches!(e.status, 400 | 412), "{}", e.text);

    for (label, path) in [
        (
            "secret as a status filter",
            "/api/v1/webhook_endpoints?status=",
        ),
        ("secret as a limit", "/api/v1/webhook_endpoints?limit="),
        ("secret as a cursor", "/api/v1/products?cursor="),
        (
            "secret as a reference filter",
            "/api/v1/offers?product_ref=",
        ),
        (
            "secret as an operation filter",
            "/api/v1/request_logs?operation_id=",
        ),
        (
            "secret as a status code filter",
            "/api/v1/request_logs?status=",
        ),
    ] {
        let s = run.wrong(label, "sk_test_");
        let i = run.get_as(&format!("{path}{s}"), &admin).await;
        run.expect(i, 400);
    }
}

/// Two endpoints on the receiver (`/hook` answers 200, `/fail` 500), each
/// with its signing secret shown once (a replay shows none), rotated,
/// confirmed, rotated and revoked; subscriptions, a data profile grant,
/// test sends, a paid checkout whose events they get, redrives, and every
/// webhook resource read back.
async fn webhooks(run: &mut Run, receiver: &Receiver, base: &str) {
    let env = text(
        &items(&run.get("/api/v1/environments").await)[0],
        "environment_ref",
    );
    let (key, body) = (
        fresh_key(),
        json!({"url": format!("{base}/hook"), "description": "leak"}),
    );
    let i = run
        .post_keyed("/api/v1/webhook_endpoints", &key, None, &body)
        .await;
    run.shown(i, "endpoint secret v1 (create)");
    let ep = format!(
        "/api/v1/webhook_endpoints/{}",
        text(&run.expect(i, 201), "endpoint_ref")
    );
    let i = run
        .post_keyed("/api/v1/webhook_endpoints", &key, None, &body)
        .await;
    let replay = run.expect(i, 201);
    assert!(!replay.to_string().contains("whsec_"), "replayed: {replay}");
    let body = json!({"url": format!("{base}/fail"), "description": "always 500"});
    let i = run.post_raw("/api/v1/webhook_endpoints", None, body).await;
    run.shown(i, "failing endpoint secret v1 (create)");
    let failing = format!(
        "/api/v1/webhook_endpoints/{}",
        text(&run.expect(i, 201), "endpoint_ref")
    );

    for (path, event_type, version) in [
        (&ep, "payment.succeeded", 2),
        (&ep, "order.created", 1),
        (&ep, "invoice.paid", 1),
        (&failing, "order.created", 1),
    ] {
        let body = json!({
            "public_event_type": event_type,
            "scope_type": "environment",
            "scope_ref": env,
            "dto_version": version,
        });
        run.post(&format!("{path}/subscriptions"), None, body).await;
    }
    let body = json!({"purpose": "support", "reason": "leak test", "data_classes": ["contact"], "custom_field_refs": []});
    run.post(&format!("{ep}/data_profile_grants"), None, body)
        .await;
    let send = json!({"public_event_type": "payment.succeeded"});
    run.post(&format!("{ep}/test_send"), None, send).await;

    // v2: pending, shown once; confirmed. v3: pending, revoked.
    let (key, body) = (fresh_key(), json!({"reason": "leak test rotation"}));
    let rotate = format!("{ep}/secret/rotate");
    let i = run.post_keyed(&rotate, &key, Some("*"), &body).await;
    run.shown(i, "endpoint secret v2 (rotate)");
    let i = run.post_keyed(&rotate, &key, Some("*"), &body).await;
    let replay = run.expect(i, 200);
    assert!(!replay.to_string().contains("whsec_"), "replayed: {replay}");
    let send = json!({"public_event_type": "order.created"});
    run.post(&format!("{ep}/test_send"), None, send).await;
    let reason = json!({"reason": "leak test"});
    run.post(&format!("{ep}/secret/confirm"), Some("*"), reason.clone())
        .await;
    let i = run.post_raw(&rotate, Some("*"), reason.clone()).await;
    run.shown(i, "endpoint secret v3 (rotate)");
    run.post(&format!("{ep}/secret/revoke"), Some("*"), reason.clone())
        .await;
    let i = run
        .post_raw(
            &format!("{failing}/secret/rotate"),
            Some("*"),
            reason.clone(),
        )
        .await;
    run.shown(i, "failing endpoint secret v2 (rotate)");
    for action in ["pause", "resume"] {
        run.post(&format!("{ep}/{action}"), Some("*"), json!({}))
            .await;
    }

    checkout(run).await;

    let deliveries = format!("{ep}/deliveries");
    run.wait_for(&deliveries, "deliveries succeeded", |d| {
        let all = items(d);
        all.len() >= 5 && all.iter().all(|x| x["status"] == "succeeded")
    })
    .await;
    run.wait_for(&format!("{failing}/deliveries"), "a failed attempt", |d| {
        items(d)
            .iter()
            .any(|x| x["attempt_count"].as_u64() > Some(0))
    })
    .await;
    assert!(
        receiver.count("/fail") >= 1,
        "the failing endpoint is called"
    );

    // Redrive one succeeded delivery, then the failing endpoint's.
    let first = items(&run.get(&deliveries).await)[0].clone();
    let before = receiver.count("/hook");
    let path = format!(
        "/api/v1/webhook_deliveries/{}/redrive",
        text(&first, "delivery_ref")
    );
    let body = json!({"reason": "leak test redrive"});
    run.post(&path, Some(&text(&first, "etag")), body).await;
    let refs: Vec<String> = items(&run.get(&format!("{failing}/deliveries")).await)
        .iter()
        .map(|d| text(d, "delivery_ref"))
        .collect();
    let body = json!({"delivery_refs": refs, "reason": "leak test batch"});
    run.post("/api/v1/webhook_deliveries/redrive", Some("*"), body)
        .await;
    let poll = Poll::within(Duration::from_secs(60)).every(Duration::from_millis(100));
    while receiver.count("/hook") <= before {
        poll.tick(|| "redriven".to_owned()).await;
    }

    for path in [&ep, &failing] {
        for part in ["", "/health", "/subscriptions", "/data_profile_grants"] {
            run.get(&format!("{path}{part}")).await;
        }
        for d in items(&run.get(&format!("{path}/deliveries")).await) {
            let d = format!("/api/v1/webhook_deliveries/{}", text(&d, "delivery_ref"));
            for part in ["", "/body", "/attempts"] {
                run.get(&format!("{d}{part}")).await;
            }
        }
    }
    run.get("/api/v1/webhook_endpoints").await;
    run.get("/api/v1/webhook_event_types").await;
    run.post(
        &format!("{ep}/data_profile_grants/revoke"),
        Some("*"),
        reason,
    )
    .await;
}

/// A product with a published price, its offer, a published checkout
/// config, a session paid with `pm_card_visa` (the method stored), and every
/// record that made, listed and retrieved.
async fn checkout(run: &mut Run) {
    let product = run
        .post(
            "/api/v1/products",
            None,
            json!({"name": "Leak-tested product"}),
        )
        .await;
    let product = text(&product, "product_ref");
    run.post(
        &format!("/api/v1/products/{product}/publish"),
        None,
        json!({}),
    )
    .await;
    let amount = json!({"currency": "EUR", "unit": "minor", "value": "1999"});
    let body = json!({"product_ref": product, "amount": amount, "type": "one_time"});
    let price = text(&run.post("/api/v1/prices", None, body).await, "price_ref");
    run.post(&format!("/api/v1/prices/{price}/publish"), None, json!({}))
        .await;
    let offers = run
        .get(&format!("/api/v1/offers?product_ref={product}"))
        .await;
    let offer = text(&items(&offers)[0], "offer_ref");
    let body = json!({
        "name": "Leak checkout",
        "line_items": [{"offer_ref": offer, "quantity": 1}],
        "success_url": "https://example.com/ok",
    });
    let config = text(
        &run.post("/api/v1/checkout-configs", None, body).await,
        "config_ref",
    );
    let config_path = format!("/api/v1/checkout-configs/{config}");
    run.post(&format!("{config_path}/publish"), None, json!({}))
        .await;
    run.get(&config_path).await;
    let buyer = json!({"email": "leak-buyer@example.com", "name": "Leak Buyer"});
    let body = json!({"config_ref": config, "buyer": buyer});
    let session = run.post("/api/v1/checkout-sessions", None, body).await;
    let session = text(&session, "checkout_session_ref");
    let body = json!({"payment_method": "pm_card_visa", "save_payment_method": true});
    let pay = format!("/api/v1/checkout-sessions/{session}/pay");
    let paid = run.post(&pay, None, body).await;
    assert_eq!(paid["payment"]["status"], "succeeded", "{paid}");

    for (list, prefix) in [
        ("products", "prd_"),
        ("prices", "pri_"),
        ("offers", "ofr_"),
        ("checkout-sessions", "cs_"),
        ("payments", "pay_"),
        ("captures", "cap_"),
        ("orders", "ord_"),
        ("invoices", "inv_"),
        ("buyers", "buy_"),
        ("entitlements", "ent_"),
        ("journeys", "jrn_"),
        ("payment_methods", "spm_"),
    ] {
        let all = items(&run.get(&format!("/api/v1/{list}")).await);
        assert!(!all.is_empty(), "the payment made {list}");
        for item in all {
            // The item's own reference: the only one of its prefix.
            let own = item.as_object().unwrap().values().filter_map(Value::as_str);
            let own = own
                .into_iter()
                .find(|v| v.starts_with(prefix))
                .unwrap_or_else(|| panic!("no {prefix} reference in {item}"))
                .to_owned();
            run.get(&format!("/api/v1/{list}/{own}")).await;
        }
    }
}

/// Every page of the request logs, and filtered lists.
async fn request_logs(run: &mut Run) {
    let mut path = "/api/v1/request_logs?limit=100".to_owned();
    let mut seen = 0;
    loop {
        let page = run.get(&path).await;
        seen += items(&page).len();
        match page["next_cursor"].as_str() {
            Some(c) if page["has_more"] == true => {
                path = format!("/api/v1/request_logs?limit=100&cursor={}", url_encode(c));
            }
            _ => break,
        }
    }
    assert!(seen > 100, "the run made many request logs ({seen})");
    // Refused credentials belong to no environment, so their logs are not
    // listed; the validation errors are.
    let invalid = run.get("/api/v1/request_logs?status=400&limit=100").await;
    assert!(!items(&invalid).is_empty(), "validation errors are logged");
    run.get("/api/v1/request_logs?operation_id=issueServiceAccountCredential")
        .await;
}

fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

// ---------------------------------------------------------------------------
// The checks.

/// The logs are what the run asked for: many lines, at debug level or
/// finer, in the format asked for, a line per request.
fn check_logs_are_real(setup: &Setup, stderr: &str) {
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(lines.len() > 100, "[{}] server logs: {stderr}", setup.name);
    let debug = if setup.log_format == "json" {
        for l in &lines {
            let v: Value = serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("[{}] a JSON log line: {e}: {l}", setup.name));
            assert!(v.get("level").is_some(), "{l}");
        }
        "\"level\":\"DEBUG\""
    } else {
        "DEBUG"
    };
    assert!(
        lines.iter().any(|l| l.contains(debug)),
        "[{}] debug lines",
        setup.name
    );
    let requests = lines.iter().filter(|l| l.contains("request")).count();
    assert!(requests > 100, "[{}] a line per request", setup.name);
}

/// Each secret shows where it was made, else the scan proves nothing.
fn check_makers_show_their_secret(run: &Run, kept: &Kept) {
    for s in &run.secrets {
        let shown = match s.origin {
            Origin::Bootstrap(n) => &kept.bootstraps[n].text,
            Origin::Response(i) => &run.exchanges[i].text,
            Origin::Nowhere => continue,
        };
        assert!(
            shown.contains(&s.forms[0]),
            "{} is shown where it is made",
            s.label
        );
    }
}

/// `hay` around the first `form` in it, for the report.
fn context(hay: &str, form: &str) -> String {
    let at = hay.find(form).unwrap();
    let mut from = at.saturating_sub(150);
    while !hay.is_char_boundary(from) {
        from -= 1;
    }
    let mut to = (at + form.len() + 150).min(hay.len());
    while !hay.is_char_boundary(to) {
        to += 1;
    }
    hay[from..to].replace('\n', "⏎")
}

/// Each secret, in each of its forms, is only where it was made.
fn scan(run: &Run, kept: &Kept, leaks: &mut Vec<String>) {
    let mut places: Vec<(String, &str, Option<Origin>)> = Vec::new();
    for (n, b) in kept.bootstraps.iter().enumerate() {
        places.push((b.name.clone(), &b.text, Some(Origin::Bootstrap(n))));
    }
    for (i, e) in run.exchanges.iter().enumerate() {
        let name = format!("the response ({}) to {}", e.status, e.request);
        places.push((name, &e.text, Some(Origin::Response(i))));
    }
    for o in &kept.outputs {
        places.push((o.name.clone(), &o.text, None));
    }
    for s in &run.secrets {
        for (name, hay, origin) in &places {
            if *origin == Some(s.origin) {
                continue;
            }
            if let Some(form) = s.forms.iter().find(|f| hay.contains(f.as_str())) {
                let around = context(hay, form);
                leaks.push(format!("- {} ({form}) in {name}:\n    …{around}…", s.label));
            }
        }
    }
}

/// Whether `needle` occurs in `hay`.
fn contains_bytes(hay: &[u8], needle: &[u8]) -> bool {
    let Some((&first, rest)) = needle.split_first() else {
        return true;
    };
    let mut at = 0;
    while let Some(p) = hay[at..].iter().position(|&b| b == first) {
        let start = at + p + 1;
        if hay[start..].starts_with(rest) {
            return true;
        }
        at = start;
    }
    false
}

/// The texts packed in `lossy` (`store::packed`: `~1` or `~2`, then
/// base64), unpacked, as a reader of the store sees them. A packed text is
/// followed by its row's next column, whose bytes may read as more base64:
/// a run that does not unpack is tried again a character shorter, a few
/// times.
fn unpacked_texts(lossy: &str) -> Vec<String> {
    let bytes = lossy.as_bytes();
    let base64 = |b: &u8| b.is_ascii_alphanumeric() || *b == b'+' || *b == b'/';
    let mut found = Vec::new();
    let mut at = 0;
    while let Some(p) = lossy[at..].find('~') {
        let start = at + p;
        at = start + 1;
        if !matches!(bytes.get(start + 1), Some(b'1' | b'2')) {
            continue;
        }
        let run = bytes[start + 2..].iter().take_while(|b| base64(b)).count();
        let end = start + 2 + run;
        let unpacked = (0..=8.min(run)).find_map(|cut| {
            let packed = &lossy[start..end - cut];
            match store::packed::unpack(packed) {
                std::borrow::Cow::Owned(text) => Some(text),
                std::borrow::Cow::Borrowed(_) => None,
            }
        });
        if let Some(text) = unpacked {
            found.push(text);
            at = end;
        }
    }
    found
}

/// The store's files (the database, its WAL) hold no plaintext secret:
/// credentials are digested, signing secrets encrypted, and the key is
/// nowhere but in its own file; nor do the texts the store keeps packed
/// (event copies), once unpacked.
fn scan_store(dir: &Path, secrets: &[Secret], leaks: &mut Vec<String>) {
    let data = dir.join("data");
    let mut scanned = 0;
    let mut unpacked = 0;
    for entry in std::fs::read_dir(&data).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.starts_with("billing.db") {
            continue;
        }
        let bytes = std::fs::read(&path).unwrap();
        // Every form is ASCII, so the lossy text holds it exactly where the
        // bytes do.
        let lossy = String::from_utf8_lossy(&bytes);
        let texts = unpacked_texts(&lossy);
        scanned += 1;
        unpacked += texts.len();
        for s in secrets {
            if let Some(form) = s.forms.iter().find(|f| lossy.contains(f.as_str())) {
                leaks.push(format!("- {} ({form}) in the store file {name}", s.label));
            }
            for text in &texts {
                if let Some(form) = s.forms.iter().find(|f| text.contains(f.as_str())) {
                    leaks.push(format!(
                        "- {} ({form}) packed in the store file {name}: {text}",
                        s.label
                    ));
                }
            }
            if s.raw_key().is_some_and(|raw| contains_bytes(&bytes, &raw)) {
                leaks.push(format!(
                    "- {} (raw bytes) in the store file {name}",
                    s.label
                ));
            }
        }
    }
    assert!(scanned > 0, "the store's files are in {}", data.display());
    // The run's events' copies are stored packed: a scan that
    // unpacked none would prove nothing of them.
    assert!(unpacked > 0, "packed texts found in the store's files");
}

/// The request logs hold no header, body or query string: no bearer
/// credential, no field named like one, no `?` in a path.
fn check_request_logs(run: &Run, leaks: &mut Vec<String>) {
    let mut checked = 0;
    let lists = run
        .exchanges
        .iter()
        .filter(|e| e.status == 200 && e.request.contains("/api/v1/request_logs"));
    for e in lists {
        for item in e.body["data"]["items"].as_array().unwrap() {
            checked += 1;
            let text = item.to_string();
            if text.to_lowercase().contains("bearer") {
                leaks.push(format!("- a request log shows a bearer credential: {text}"));
            }
            let named = |k: &String| {
                let k = k.to_lowercase();
                ["header", "auth", "body", "query", "secret"]
                    .iter()
                    .any(|w| k.contains(w))
            };
            if let Some(key) = item.as_object().unwrap().keys().find(|k| named(k)) {
                leaks.push(format!("- a request log has the field {key}: {text}"));
            }
            if item["path"].as_str().is_some_and(|p| p.contains('?')) {
                leaks.push(format!("- a request log keeps a query string: {text}"));
            }
        }
    }
    assert!(checked > 100, "request logs were read ({checked})");
}

// ---------------------------------------------------------------------------

/// Text logs at trace level for the service's crates (debug for the
/// others), the key in `BILLING_SECRETS__KEY`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_leaks_with_trace_text_logs_and_a_configured_key() {
    let mut key = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut key);
    leak_run(Setup {
        name: "text, trace",
        log_format: "text",
        log_level:
            "debug,billing=trace,control_api=trace,dispatcher=trace,store=trace,domain=trace",
        key: Some(key),
    })
    .await;
}

/// JSON logs at debug level, the key generated into `data/secret.key`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_leaks_with_debug_json_logs_and_a_key_file() {
    leak_run(Setup {
        name: "json, debug",
        log_format: "json",
        log_level: "debug",
        key: None,
    })
    .await;
}
