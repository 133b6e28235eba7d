//! `TestReceiver`: a local HTTP receiver of webhooks that records every
//! request and can be told how to answer: succeed, fail, hang, redirect,
//! ask to retry later, say it is gone, send a huge body, or fail a fraction
//! of requests at random. `ScriptedReceiver`: a raw TCP receiver for what
//! an HTTP framework would not let a receiver do (a body that never ends,
//! a TLS handshake never answered, a connection closed after each answer).

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(Debug, Clone)]
pub enum Behaviour {
    Status(u16),
    Hang(Duration),
    Redirect,
    RetryAfter(u16, u64),
    HugeBody(usize),
    /// Answers 500 to this fraction (0 to 1) of requests, drawn at random
    /// for each request independently, and 204 to the others.
    FailRandomly(f64),
}

#[derive(Debug, Clone)]
pub struct Received {
    pub headers: HeaderMap,
    pub body: Bytes,
    /// When the request arrived (before any answer was sent).
    pub at: Instant,
    /// The status the receiver answered (or, for `Hang`, will answer once
    /// it stops hanging; the sender may have given up by then).
    pub status: u16,
}

impl Received {
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
    /// Whether the receiver answered 2xx.
    pub fn succeeded(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

#[derive(Clone)]
struct Shared {
    behaviour: Arc<Mutex<Behaviour>>,
    received: Arc<Mutex<Vec<Received>>>,
}

pub struct TestReceiver {
    pub addr: SocketAddr,
    shared: Shared,
}

impl TestReceiver {
    pub async fn start(behaviour: Behaviour) -> TestReceiver {
        let shared = Shared {
            behaviour: Arc::new(Mutex::new(behaviour)),
            received: Arc::default(),
        };
        let app = axum::Router::new()
            .fallback(answer)
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        TestReceiver { addr, shared }
    }

    pub fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    pub fn set(&self, behaviour: Behaviour) {
        *self.shared.behaviour.lock().expect("lock") = behaviour;
    }

    pub fn received(&self) -> Vec<Received> {
        self.shared.received.lock().expect("lock").clone()
    }

    pub fn count(&self) -> usize {
        self.shared.received.lock().expect("lock").len()
    }

    /// The `webhook-id` of every request received, in order: a delivery
    /// attempted twice is there twice.
    pub fn webhook_ids(&self) -> Vec<String> {
        self.received()
            .iter()
            .map(|r| r.header("webhook-id").to_owned())
            .collect()
    }

    /// The one request received: that of `delivery`, signed with `secret`
    /// so that the official verifier accepts it.
    #[track_caller]
    pub fn the_one_signed(&self, delivery: &serde_json::Value, secret: &str) -> Received {
        let got = self.received();
        assert_eq!(got.len(), 1);
        let req = got[0].clone();
        assert_eq!(req.header("webhook-id"), delivery["delivery_ref"]);
        assert!(crate::verifier::verifies_request(secret, &req));
        req
    }

    /// How many distinct deliveries (`webhook-id`s) arrived.
    pub fn distinct_deliveries(&self) -> usize {
        let ids = self.webhook_ids();
        ids.iter().collect::<std::collections::HashSet<_>>().len()
    }
}

async fn answer(State(shared): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let at = Instant::now();
    let behaviour = shared.behaviour.lock().expect("lock").clone();
    // The answer is decided first, so that the record says what was answered.
    let status = match behaviour {
        Behaviour::Status(s) => StatusCode::from_u16(s).unwrap_or(StatusCode::OK),
        Behaviour::Hang(_) => StatusCode::OK,
        Behaviour::Redirect => StatusCode::FOUND,
        Behaviour::RetryAfter(s, _) => {
            StatusCode::from_u16(s).unwrap_or(StatusCode::TOO_MANY_REQUESTS)
        }
        Behaviour::HugeBody(_) => StatusCode::INTERNAL_SERVER_ERROR,
        Behaviour::FailRandomly(fraction) => {
            let p = if fraction.is_nan() {
                0.0
            } else {
                fraction.clamp(0.0, 1.0)
            };
            if rand::Rng::gen_bool(&mut rand::thread_rng(), p) {
                StatusCode::INTERNAL_SERVER_ERROR
            } else {
                StatusCode::NO_CONTENT
            }
        }
    };
    shared.received.lock().expect("lock").push(Received {
        headers,
        body,
        at,
        status: status.as_u16(),
    });
    match behaviour {
        Behaviour::Status(_) | Behaviour::FailRandomly(_) => status.into_response(),
        Behaviour::Hang(d) => {
            // A receiver that keeps the dispatcher's socket waiting: the
            // time is the behaviour under test.
            tokio::time::sleep(d).await;
            status.into_response()
        }
        Behaviour::Redirect => {
            (status, [("location", "http://127.0.0.1:1/elsewhere")]).into_response()
        }
        Behaviour::RetryAfter(_, secs) => {
            (status, [("retry-after", secs.to_string())]).into_response()
        }
        Behaviour::HugeBody(n) => {
            let chunk = Bytes::from(vec![b'x'; 64 * 1024]);
            let chunks = n / chunk.len();
            let stream = futures::stream::iter(
                (0..chunks).map(move |_| Ok::<_, std::io::Error>(chunk.clone())),
            );
            (status, Body::from_stream(stream)).into_response()
        }
    }
}

/// What a [`ScriptedReceiver`] does with each connection, written at the
/// level of bytes on the socket: the misbehaviour an HTTP framework would
/// not let a receiver show.
#[derive(Debug, Clone, Copy)]
pub enum Script {
    /// Reads the request, answers this status with an empty body and
    /// `Connection: close`, and closes: the next request needs a new
    /// connection.
    AnswerAndClose(u16),
    /// Reads the request, sends this status line and headers at once
    /// (`Transfer-Encoding: chunked`), then one byte of body a second,
    /// never ending it.
    TrickleBody(u16),
    /// Reads the request, sends this status and then a body of 64 KiB
    /// chunks as fast as the peer takes them, never ending it.
    EndlessBody(u16),
    /// Accepts the connection, reads whatever comes (a TLS ClientHello, a
    /// request) and never sends a byte.
    Silent,
}

/// A raw TCP receiver playing a [`Script`] on every connection it accepts.
/// It counts connections, requests read and body bytes written, and the
/// connections that ended (the peer closed them or a write failed).
pub struct ScriptedReceiver {
    pub addr: SocketAddr,
    counts: Arc<ScriptCounts>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct ScriptCounts {
    connections: std::sync::atomic::AtomicUsize,
    requests: std::sync::atomic::AtomicUsize,
    body_bytes: std::sync::atomic::AtomicU64,
    ended: std::sync::atomic::AtomicUsize,
}

impl ScriptedReceiver {
    /// On a random port of 127.0.0.1.
    pub async fn start(script: Script) -> ScriptedReceiver {
        ScriptedReceiver::start_at(SocketAddr::from(([127, 0, 0, 1], 0)), script)
            .await
            .expect("bind")
    }

    /// On `addr` (any 127.0.0.x; port 0 for a random one). Fails when the
    /// address is taken.
    pub async fn start_at(addr: SocketAddr, script: Script) -> std::io::Result<ScriptedReceiver> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let counts = Arc::new(ScriptCounts::default());
        let shared = counts.clone();
        let task = tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                shared.connections.fetch_add(1, Ordering::SeqCst);
                let counts = shared.clone();
                tokio::spawn(async move {
                    let _ = play(socket, script, &counts).await;
                    counts.ended.fetch_add(1, Ordering::SeqCst);
                });
            }
        });
        Ok(ScriptedReceiver { addr, counts, task })
    }

    /// `http://{addr}/hook`.
    pub fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    /// Connections accepted.
    pub fn connections(&self) -> usize {
        self.counts.connections.load(Ordering::SeqCst)
    }

    /// Requests read in full (head and body).
    pub fn requests(&self) -> usize {
        self.counts.requests.load(Ordering::SeqCst)
    }

    /// Body bytes the peer accepted (written to the socket).
    pub fn body_bytes(&self) -> u64 {
        self.counts.body_bytes.load(Ordering::SeqCst)
    }

    /// Connections that ended.
    pub fn ended(&self) -> usize {
        self.counts.ended.load(Ordering::SeqCst)
    }
}

impl Drop for ScriptedReceiver {
    fn drop(&mut self) {
        // Stops accepting; connections in play end when their peer goes.
        self.task.abort();
    }
}

async fn play(
    mut socket: tokio::net::TcpStream,
    script: Script,
    counts: &ScriptCounts,
) -> std::io::Result<()> {
    socket.set_nodelay(true)?;
    if let Script::Silent = script {
        // Read until the peer closes; answer nothing.
        let mut sink = [0u8; 4096];
        while socket.read(&mut sink).await? > 0 {}
        return Ok(());
    }
    read_request(&mut socket).await?;
    counts.requests.fetch_add(1, Ordering::SeqCst);
    match script {
        Script::AnswerAndClose(status) => {
            let head = format!(
                "HTTP/1.1 {status} Scripted\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            );
            socket.write_all(head.as_bytes()).await?;
            socket.shutdown().await
        }
        Script::TrickleBody(status) => {
            let head = format!("HTTP/1.1 {status} Scripted\r\ntransfer-encoding: chunked\r\n\r\n");
            socket.write_all(head.as_bytes()).await?;
            loop {
                socket.write_all(b"1\r\nx\r\n").await?;
                counts.body_bytes.fetch_add(1, Ordering::SeqCst);
                // A body trickled on the socket, a byte a second.
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
        Script::EndlessBody(status) => {
            let head = format!("HTTP/1.1 {status} Scripted\r\ntransfer-encoding: chunked\r\n\r\n");
            socket.write_all(head.as_bytes()).await?;
            let chunk = {
                let mut c = format!("{:x}\r\n", 64 * 1024).into_bytes();
                c.extend(std::iter::repeat_n(b'x', 64 * 1024));
                c.extend_from_slice(b"\r\n");
                c
            };
            loop {
                socket.write_all(&chunk).await?;
                counts.body_bytes.fetch_add(64 * 1024, Ordering::SeqCst);
            }
        }
        Script::Silent => Ok(()),
    }
}

/// Reads one request: its head, then `content-length` bytes of body.
async fn read_request(socket: &mut tokio::net::TcpStream) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = socket.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let mut have = buf.len() - head_end;
    while have < length {
        let n = socket.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        have += n;
    }
    Ok(())
}
