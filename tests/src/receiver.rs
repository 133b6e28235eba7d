//! `TestReceiver`: a local HTTP receiver of webhooks that records every
//! request and can be told how to answer: succeed, fail, hang, redirect,
//! ask to retry later, say it is gone, or send a huge body.

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
}

#[derive(Debug, Clone)]
pub struct Received {
    pub headers: HeaderMap,
    pub body: Bytes,
    pub at: Instant,
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
    shared.received.lock().expect("lock").push(Received {
        headers,
        body,
        at: Instant::now(),
    });
    let behaviour = shared.behaviour.lock().expect("lock").clone();
    match behaviour {
        Behaviour::Status(s) => StatusCode::from_u16(s)
            .unwrap_or(StatusCode::OK)
            .into_response(),
        Behaviour::Hang(d) => {
            tokio::time::sleep(d).await;
            StatusCode::OK.into_response()
        }
        Behaviour::Redirect => (
            StatusCode::FOUND,
            [("location", "http://127.0.0.1:1/elsewhere")],
        )
            .into_response(),
        Behaviour::RetryAfter(s, secs) => (
            StatusCode::from_u16(s).unwrap_or(StatusCode::TOO_MANY_REQUESTS),
            [("retry-after", secs.to_string())],
        )
            .into_response(),
        Behaviour::HugeBody(n) => {
            let chunk = Bytes::from(vec![b'x'; 64 * 1024]);
            let chunks = n / chunk.len();
            let stream = futures::stream::iter(
                (0..chunks).map(move |_| Ok::<_, std::io::Error>(chunk.clone())),
            );
            (StatusCode::INTERNAL_SERVER_ERROR, Body::from_stream(stream)).into_response()
        }
    }
}
