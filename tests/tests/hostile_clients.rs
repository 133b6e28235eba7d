//! Hostile clients (issue 19), black-box over real sockets: slow heads and
//! bodies, too many connections, oversized heads, request smuggling,
//! deeply nested JSON and oversized bodies. The API must refuse each with
//! the contract's answer (or close the connection) and keep serving
//! everyone else.
//!
//! Raw `TcpStream`s speak HTTP/1.1 where a well-behaved client (reqwest)
//! cannot misbehave. Checks that touch the store (request logs, accounts
//! that must not exist) run on every backend; transport-only checks run on
//! SQLite.

use billing_tests::{backend_tests, unique_key, Backend, TestApp};
use control_api::state::WebhookSettings;
use control_api::{ApiSettings, AppState, ServeLimits};
use serde_json::Value;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

// ---- harness --------------------------------------------------------------

/// A new listener, its address, and a state over `app`'s store (the
/// default settings, loopback destinations allowed) to serve on it.
async fn own_server(app: &TestApp) -> (TcpListener, std::net::SocketAddr, AppState) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let webhooks = WebhookSettings {
        allow_private_networks: true,
        ..WebhookSettings::with_cipher(app.cipher.clone())
    };
    let state = AppState::new(app.store.clone(), ApiSettings::new(webhooks));
    (listener, addr, state)
}

/// Serves `app`'s store on a new listener within `limits` and points the
/// app's requests (`app.base`) at it.
async fn serving(mut app: TestApp, limits: ServeLimits) -> TestApp {
    let (listener, addr, state) = own_server(&app).await;
    tokio::spawn(control_api::run_with(
        state,
        listener,
        limits,
        tokio_util::sync::CancellationToken::new(),
    ));
    app.addr = addr;
    app.base = format!("http://{addr}");
    app
}

fn limits(read_timeout_ms: u64, max_connections: usize) -> ServeLimits {
    ServeLimits {
        max_connections,
        read_timeout: Duration::from_millis(read_timeout_ms),
        ..ServeLimits::default()
    }
}

/// A response read off a raw connection.
#[derive(Debug)]
struct RawResponse {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl RawResponse {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }

    /// Asserts the contract's error body with `code`, its `request_id`
    /// equal to the `Request-Id` header.
    #[track_caller]
    fn expect_error(&self, status: u16, code: &str) -> Value {
        assert_eq!(self.status, status, "body: {}", self.body);
        let json = self.json();
        assert_eq!(json["error"]["code"], code, "body: {}", self.body);
        assert!(json["error"]["message"].is_string(), "{}", self.body);
        assert!(json["error"]["details"].is_array(), "{}", self.body);
        let id = self.header("request-id").expect("a Request-Id header");
        assert!(id.starts_with("req_"), "{id}");
        assert_eq!(json["error"]["request_id"], id);
        json
    }
}

/// What a raw connection yields.
#[derive(Debug)]
enum Outcome {
    Response(RawResponse),
    /// The server closed (or reset) the connection; the bytes it sent
    /// first, if any.
    Closed(Vec<u8>),
    /// Nothing complete arrived in time.
    Pending,
}

/// A raw HTTP/1.1 connection.
struct Raw {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Raw {
    async fn connect(addr: SocketAddr) -> Raw {
        Raw {
            stream: TcpStream::connect(addr).await.expect("connect"),
            buf: Vec::new(),
        }
    }

    /// Writes `bytes`; a server that already hung up is not an error here.
    async fn send(&mut self, bytes: &[u8]) {
        let _ = self.stream.write_all(bytes).await;
    }

    /// The next response, if it arrives within `within`.
    async fn response(&mut self, within: Duration) -> Outcome {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(r) = take_response(&mut self.buf) {
                return Outcome::Response(r);
            }
            let mut chunk = [0u8; 16 * 1024];
            match tokio::time::timeout_at(deadline, self.stream.read(&mut chunk)).await {
                Err(_) => return Outcome::Pending,
                Ok(Ok(0)) | Ok(Err(_)) => return Outcome::Closed(std::mem::take(&mut self.buf)),
                Ok(Ok(n)) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    async fn expect_response(&mut self, within: Duration) -> RawResponse {
        match self.response(within).await {
            Outcome::Response(r) => r,
            other => panic!("expected a response, got {other:?}"),
        }
    }

    /// Asserts that the server closes the connection within `within`
    /// without sending anything more.
    async fn expect_closed(&mut self, within: Duration) {
        match self.response(within).await {
            Outcome::Closed(rest) => assert!(
                rest.is_empty(),
                "sent more before closing: {}",
                String::from_utf8_lossy(&rest)
            ),
            other => panic!("expected the connection closed, got {other:?}"),
        }
    }
}

/// Splits one complete response (head and `Content-Length` body) off `buf`.
fn take_response(buf: &mut Vec<u8>) -> Option<RawResponse> {
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let length = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse::<usize>().ok())
        .unwrap_or(0);
    if buf.len() < end + length {
        return None;
    }
    let body = String::from_utf8_lossy(&buf[end..end + length]).into_owned();
    buf.drain(..end + length);
    Some(RawResponse {
        status,
        headers,
        body,
    })
}

/// A request head with `headers` (each `Name: value`).
fn head(method: &str, path: &str, headers: &[String]) -> String {
    let mut h = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n");
    for line in headers {
        h.push_str(line);
        h.push_str("\r\n");
    }
    h.push_str("\r\n");
    h
}

/// The headers of an authenticated, keyed create as the sandbox admin.
fn create_headers(app: &TestApp) -> Vec<String> {
    vec![
        format!("Authorization: Bearer {}", app.sandbox.secret),
        format!("Idempotency-Key: {}", unique_key()),
        "Content-Type: application/json".to_owned(),
    ]
}

/// Names of the sandbox's service accounts.
async fn account_names(app: &TestApp) -> Vec<String> {
    let r = app.get("/api/v1/service_accounts").send().await;
    r.expect(200);
    r.data()["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|a| a["name"].as_str().map(str::to_owned))
        .collect()
}

const SECOND: Duration = Duration::from_secs(1);

// ---- slow clients ---------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_head_is_cut_off_while_other_clients_are_served() {
    let app = serving(TestApp::spawn(Backend::Sqlite).await, limits(1000, 64)).await;
    let started = Instant::now();
    // Slowloris: a head that never ends, one header line every 200 ms.
    let stream = TcpStream::connect(app.addr).await.expect("connect");
    let (mut reader, mut writer) = stream.into_split();
    let (trickling, mut has_trickled) = tokio::sync::watch::channel(0);
    let trickle = tokio::spawn(async move {
        let _ = writer
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            .await;
        for i in 0..50 {
            // The slow client's pace on its socket.
            tokio::time::sleep(Duration::from_millis(200)).await;
            if writer
                .write_all(format!("X-{i}: y\r\n").as_bytes())
                .await
                .is_err()
            {
                break;
            }
            trickling.send_replace(i + 1);
        }
    });
    // A client that connects and sends nothing at all.
    let mut silent = Raw::connect(app.addr).await;

    // Once the slow head is under way (a header line past the first), the
    // others are served.
    has_trickled
        .wait_for(|lines| *lines >= 1)
        .await
        .expect("the slow head is sent");
    app.anon("GET", "/healthz").send().await.expect(200);
    app.get("/api/v1/environments").send().await.expect(200);

    let mut sent = Vec::new();
    let read = tokio::time::timeout(8 * SECOND, reader.read_to_end(&mut sent)).await;
    let elapsed = started.elapsed();
    assert!(read.is_ok(), "the slow head was not cut off within 8 s");
    assert!(
        elapsed >= Duration::from_millis(900),
        "cut off too early: {elapsed:?}"
    );
    // hyper closes without an answer; a 408 would be acceptable too.
    assert!(
        sent.is_empty() || sent.starts_with(b"HTTP/1.1 408"),
        "{}",
        String::from_utf8_lossy(&sent)
    );
    trickle.abort();
    silent.expect_closed(8 * SECOND).await;
    app.anon("GET", "/healthz").send().await.expect(200);
}

async fn a_stalled_body_is_answered_408_and_closed(app: TestApp) {
    let app = serving(app, limits(1000, 64)).await;
    let body = br#"{"name": "slow body"}"#;
    let mut raw = Raw::connect(app.addr).await;
    let mut headers = create_headers(&app);
    headers.push(format!("Content-Length: {}", body.len()));
    raw.send(head("POST", "/api/v1/service_accounts", &headers).as_bytes())
        .await;
    raw.send(&body[..8]).await;
    let started = Instant::now();
    let r = raw.expect_response(8 * SECOND).await;
    let waited = started.elapsed();
    let json = r.expect_error(408, "validation_failed");
    assert!(
        json["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("too slowly")),
        "{}",
        r.body
    );
    assert_eq!(json["error"]["details"][0]["field"], "body");
    assert_eq!(r.header("connection"), Some("close"));
    assert!(
        waited >= Duration::from_millis(800),
        "answered too early: {waited:?}"
    );
    raw.expect_closed(5 * SECOND).await;

    // A body that is slow but steady (a piece every 300 ms) is served.
    let body = br#"{"name": "steady body"}"#;
    let mut raw = Raw::connect(app.addr).await;
    let mut headers = create_headers(&app);
    headers.push(format!("Content-Length: {}", body.len()));
    raw.send(head("POST", "/api/v1/service_accounts", &headers).as_bytes())
        .await;
    for piece in body.chunks(8) {
        // The slow client's pace on its socket.
        tokio::time::sleep(Duration::from_millis(300)).await;
        raw.send(piece).await;
    }
    let r = raw.expect_response(8 * SECOND).await;
    assert_eq!(r.status, 201, "{}", r.body);

    let names = account_names(&app).await;
    assert!(names.iter().any(|n| n == "steady body"), "{names:?}");
    assert!(!names.iter().any(|n| n == "slow body"), "{names:?}");
}

// ---- connections ----------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_limit_wait_until_one_closes() {
    let app = serving(TestApp::spawn(Backend::Sqlite).await, limits(10_000, 4)).await;
    let health = head("GET", "/healthz", &[]);
    let mut open = Vec::new();
    for _ in 0..4 {
        let mut raw = Raw::connect(app.addr).await;
        raw.send(health.as_bytes()).await;
        assert_eq!(raw.expect_response(5 * SECOND).await.status, 200);
        open.push(raw);
    }
    // The fifth connects (the kernel's backlog) but is not served.
    let mut fifth = Raw::connect(app.addr).await;
    fifth.send(health.as_bytes()).await;
    assert!(matches!(
        fifth.response(Duration::from_millis(1500)).await,
        Outcome::Pending
    ));
    // The first four keep being served meanwhile.
    for raw in open.iter_mut() {
        raw.send(health.as_bytes()).await;
        assert_eq!(raw.expect_response(5 * SECOND).await.status, 200);
    }
    // One closes: the fifth is accepted and answered.
    drop(open.remove(0));
    let r = fifth.expect_response(5 * SECOND).await;
    assert_eq!(r.status, 200, "{}", r.body);
}

// ---- oversized heads --------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_head_is_431_and_the_process_keeps_serving() {
    // The default limits (`control_api::run`): heads up to 16 KiB.
    let app = TestApp::spawn(Backend::Sqlite).await;
    let fits = head(
        "GET",
        "/healthz",
        &[format!("X-Big: {}", "a".repeat(12_000))],
    );
    let mut raw = Raw::connect(app.addr).await;
    raw.send(fits.as_bytes()).await;
    assert_eq!(raw.expect_response(5 * SECOND).await.status, 200);

    for _ in 0..3 {
        let big = head(
            "GET",
            "/healthz",
            &[format!("X-Big: {}", "a".repeat(20_000))],
        );
        let mut raw = Raw::connect(app.addr).await;
        raw.send(big.as_bytes()).await;
        match raw.response(5 * SECOND).await {
            Outcome::Response(r) => {
                assert_eq!(r.status, 431, "{r:?}");
                raw.expect_closed(5 * SECOND).await;
            }
            // A reset can overtake hyper's 431 (the rest of the head is
            // still unread when it closes); either way, no 500.
            Outcome::Closed(rest) => assert!(rest.is_empty(), "{rest:?}"),
            Outcome::Pending => panic!("no answer to an oversized head"),
        }
    }
    // Many small headers adding up beyond the limit are the same.
    let many: Vec<String> = (0..90)
        .map(|i| format!("X-{i}: {}", "b".repeat(200)))
        .collect();
    let mut raw = Raw::connect(app.addr).await;
    raw.send(head("GET", "/healthz", &many).as_bytes()).await;
    match raw.response(5 * SECOND).await {
        Outcome::Response(r) => assert_eq!(r.status, 431, "{r:?}"),
        Outcome::Closed(rest) => assert!(rest.is_empty(), "{rest:?}"),
        Outcome::Pending => panic!("no answer to an oversized head"),
    }
    app.anon("GET", "/healthz").send().await.expect(200);
    app.get("/api/v1/environments").send().await.expect(200);
}

// ---- request smuggling ------------------------------------------------------

/// A head with both length headers (in `te_first` order or not), whose
/// chunked body ends at once and is followed by a smuggled create of the
/// account `smuggled`; `Content-Length` covers both, as a front end that
/// trusts it would see them.
fn smuggling(app: &TestApp, method: &str, path: &str, te_first: bool) -> String {
    let mut smuggled_headers = create_headers(app);
    let smuggled_body = r#"{"name": "smuggled"}"#;
    smuggled_headers.push(format!("Content-Length: {}", smuggled_body.len()));
    let smuggled = head("POST", "/api/v1/service_accounts", &smuggled_headers) + smuggled_body;
    let body = format!("0\r\n\r\n{smuggled}");
    let mut headers = create_headers(app);
    let te = "Transfer-Encoding: chunked".to_owned();
    let cl = format!("Content-Length: {}", body.len());
    if te_first {
        headers.extend([te, cl]);
    } else {
        headers.extend([cl, te]);
    }
    head(method, path, &headers) + &body
}

async fn length_with_chunked_is_refused_on_every_route(app: TestApp) {
    let routes = [
        ("POST", "/api/v1/service_accounts"),
        ("GET", "/healthz"),
        ("POST", "/api/v1/nowhere"),
        ("GET", "/api/v1/environments"),
    ];
    for (method, path) in routes {
        for te_first in [false, true] {
            let mut raw = Raw::connect(app.addr).await;
            raw.send(smuggling(&app, method, path, te_first).as_bytes())
                .await;
            let r = raw.expect_response(5 * SECOND).await;
            let json = r.expect_error(400, "validation_failed");
            assert_eq!(
                json["error"]["details"][0]["field"], "Transfer-Encoding",
                "{method} {path}"
            );
            assert_eq!(r.header("connection"), Some("close"), "{method} {path}");
            // No second answer: the smuggled request never runs.
            raw.expect_closed(5 * SECOND).await;
        }
    }

    // An honest request before it on the same connection is served.
    let mut raw = Raw::connect(app.addr).await;
    let honest = head("GET", "/healthz", &[]);
    let attack = smuggling(&app, "POST", "/api/v1/service_accounts", false);
    raw.send(format!("{honest}{attack}").as_bytes()).await;
    assert_eq!(raw.expect_response(5 * SECOND).await.status, 200);
    raw.expect_response(5 * SECOND)
        .await
        .expect_error(400, "validation_failed");
    raw.expect_closed(5 * SECOND).await;

    let names = account_names(&app).await;
    assert!(!names.iter().any(|n| n == "smuggled"), "{names:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transfer_encoding_other_than_chunked_is_refused_by_hyper() {
    let app = TestApp::spawn(Backend::Sqlite).await;
    for te in ["gzip", "chunked, gzip", "identity"] {
        let headers = [
            format!("Transfer-Encoding: {te}"),
            "Content-Type: application/json".to_owned(),
        ];
        let mut raw = Raw::connect(app.addr).await;
        raw.send(head("POST", "/api/v1/service_accounts", &headers).as_bytes())
            .await;
        raw.send(b"2\r\n{}\r\n0\r\n\r\n").await;
        // hyper's own refusal: a bare 400, then the connection closes.
        let r = raw.expect_response(5 * SECOND).await;
        assert_eq!(r.status, 400, "{te}: {r:?}");
        raw.expect_closed(5 * SECOND).await;
    }
    app.anon("GET", "/healthz").send().await.expect(200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn honest_chunked_and_pipelined_requests_are_served() {
    let app = TestApp::spawn(Backend::Sqlite).await;
    let mut headers = create_headers(&app);
    headers.push("Transfer-Encoding: chunked".to_owned());
    let body = r#"{"name": "chunked"}"#;
    let chunked = format!(
        "{}{:x};ext=1\r\n{}\r\n0\r\nX-Trailer: t\r\n\r\n",
        head("POST", "/api/v1/service_accounts", &headers),
        body.len(),
        body
    );
    let mut with_length = create_headers(&app);
    let body = r#"{"name": "with length"}"#;
    with_length.push(format!("Content-Length: {}", body.len()));
    let sized = head("POST", "/api/v1/service_accounts", &with_length) + body;
    let list = head(
        "GET",
        "/api/v1/service_accounts",
        &[format!("Authorization: Bearer {}", app.sandbox.secret)],
    );
    let mut raw = Raw::connect(app.addr).await;
    raw.send(format!("{chunked}{sized}{list}").as_bytes()).await;
    for status in [201, 201, 200] {
        let r = raw.expect_response(5 * SECOND).await;
        assert_eq!(r.status, status, "{}", r.body);
    }
    let names = account_names(&app).await;
    assert!(names.iter().any(|n| n == "chunked"), "{names:?}");
    assert!(names.iter().any(|n| n == "with length"), "{names:?}");
}

// ---- hostile bodies -----------------------------------------------------------

async fn json_nested_ten_thousand_deep_is_refused_quickly(app: TestApp) {
    let depth = 10_000;
    let arrays = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    let objects = format!("{}1{}", r#"{"a":"#.repeat(depth), "}".repeat(depth));
    let inside = format!(r#"{{"name": {arrays}}}"#);
    for body in [arrays, objects, inside] {
        let started = Instant::now();
        let r = app
            .req("POST", "/api/v1/service_accounts")
            .idem(&unique_key())
            .raw(body)
            .send()
            .await;
        let took = started.elapsed();
        r.expect_error(400, "validation_failed");
        assert_eq!(r.fields(), vec!["body"], "{}", r.text);
        assert_eq!(
            r.json["error"]["request_id"],
            r.header("request-id").expect("Request-Id")
        );
        assert!(took < 2 * SECOND, "took {took:?}");
    }
    app.get("/api/v1/environments").send().await.expect(200);
}

async fn a_body_of_one_mib_and_one_byte_is_413(app: TestApp) {
    let limit = 1 << 20;
    let frame = r#"{"name": ""}"#;
    let body = format!(r#"{{"name": "{}"}}"#, "x".repeat(limit + 1 - frame.len()));
    assert_eq!(body.len(), limit + 1);
    let r = app
        .req("POST", "/api/v1/service_accounts")
        .idem(&unique_key())
        .raw(body.clone())
        .send()
        .await;
    r.expect_error(413, "validation_failed");

    // The same body without a length (chunked) is counted as it arrives.
    let pieces: Vec<Result<String, std::io::Error>> = body
        .as_bytes()
        .chunks(64 * 1024)
        .map(|c| Ok(String::from_utf8_lossy(c).into_owned()))
        .collect();
    let stream = reqwest::Body::wrap_stream(futures::stream::iter(pieces));
    let r = app
        .req("POST", "/api/v1/service_accounts")
        .idem(&unique_key())
        .raw(stream)
        .send()
        .await;
    r.expect_error(413, "validation_failed");

    // One byte less is within the limit (and then just a long name).
    let fits = format!(r#"{{"name": "{}"}}"#, "x".repeat(limit - frame.len()));
    let r = app
        .req("POST", "/api/v1/service_accounts")
        .idem(&unique_key())
        .raw(fits)
        .send()
        .await;
    assert_ne!(r.status, 413, "{}", r.text);
    assert!(r.status < 500, "{}", r.text);
}

// ---- shutdown -------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_stops_accepting_and_finishes_requests_in_flight() {
    let app = TestApp::spawn(Backend::Sqlite).await;
    let (listener, addr, state) = own_server(&app).await;
    let stop = tokio_util::sync::CancellationToken::new();
    let server = tokio::spawn(control_api::run_with(
        state,
        listener,
        limits(5000, 16),
        stop.clone(),
    ));
    // An idle keep-alive connection, and a request whose body is late.
    let mut idle = Raw::connect(addr).await;
    idle.send(head("GET", "/healthz", &[]).as_bytes()).await;
    assert_eq!(idle.expect_response(5 * SECOND).await.status, 200);
    let body = br#"{"name": "in flight"}"#;
    let mut busy = Raw::connect(addr).await;
    let mut headers = create_headers(&app);
    headers.push(format!("Content-Length: {}", body.len()));
    busy.send(head("POST", "/api/v1/service_accounts", &headers).as_bytes())
        .await;
    // The server must read that head off the socket before the stop, so
    // that the request is in flight: nothing tells the client when it has.
    tokio::time::sleep(Duration::from_millis(300)).await;

    stop.cancel();
    idle.expect_closed(5 * SECOND).await;
    busy.send(body).await;
    let r = busy.expect_response(5 * SECOND).await;
    assert_eq!(r.status, 201, "{}", r.body);
    tokio::time::timeout(5 * SECOND, server)
        .await
        .expect("the server stops once its requests are done")
        .expect("task")
        .expect("served");
    assert!(TcpStream::connect(addr).await.is_err(), "still accepting");
}

backend_tests!(
    a_stalled_body_is_answered_408_and_closed,
    length_with_chunked_is_refused_on_every_route,
    json_nested_ten_thousand_deep_is_refused_quickly,
    a_body_of_one_mib_and_one_byte_is_413,
);
