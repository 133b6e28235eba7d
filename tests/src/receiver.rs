//! `TestReceiver`: a local HTTP receiver of webhooks that records every
//! request and can be told how to answer: succeed, fail, hang, redirect,
//! ask to retry later, say it is gone, send a huge body, or fail a fraction
//! of requests at random.

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
