//! API load that keeps every answer: checkout sessions opened and paid
//! under `Idempotency-Key`s, and reads.

use super::{text, Answer, Api, Shop};
use crate::common::poll::Poll;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One answer the load got.
#[derive(Debug, Clone)]
pub struct Seen {
    /// When its request was sent.
    pub at: Instant,
    pub what: &'static str,
    pub answer: Answer,
}

/// A checkout session the load opened and paid.
#[derive(Debug, Clone)]
pub struct Paid {
    pub key: String,
    pub session_ref: String,
    pub payment_ref: String,
}

/// API load: `writers` tasks each opening a checkout session and paying it
/// (each under its own `Idempotency-Key`), one after the other; an answer
/// that is not a success is retried with the same key after a short pause
/// (a 5xx keeps nothing, contract section 4); and a reader of the product,
/// the last paid session and the session list. Every answer is kept.
pub struct Load {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Vec<Seen>>>,
    writers: Vec<tokio::task::JoinHandle<Vec<Paid>>>,
    reader: tokio::task::JoinHandle<()>,
    paid: Arc<Mutex<Vec<Paid>>>,
}

/// The pause before a write that was not a success is sent again (a
/// client's back-off against the real server, through its outage).
const RETRY_PAUSE: Duration = Duration::from_millis(200);
/// The pause between two jobs of a writer, and between two reads: the
/// load's pace against the real server, which the outage windows are
/// measured in.
const PACE: Duration = Duration::from_millis(30);

impl Load {
    pub fn start(api: &Api, shop: &Shop, run: &str, writers: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let paid = Arc::new(Mutex::new(Vec::new()));
        let writers = (0..writers)
            .map(|w| {
                let (api, shop, run) = (api.clone(), shop.clone(), run.to_owned());
                let (stop, seen, paid) = (stop.clone(), seen.clone(), paid.clone());
                tokio::spawn(async move {
                    let mut mine = Vec::new();
                    let mut n = 0;
                    while !stop.load(Ordering::Relaxed) {
                        let key = format!("{run}-w{w}-{n:04}");
                        n += 1;
                        let p = pay_one(&api, &shop, &key, &seen).await;
                        paid.lock().unwrap().push(p.clone());
                        mine.push(p);
                        tokio::time::sleep(PACE).await;
                    }
                    mine
                })
            })
            .collect();
        let reader = {
            let (api, shop) = (api.clone(), shop.clone());
            let (stop, seen, paid) = (stop.clone(), seen.clone(), paid.clone());
            tokio::spawn(async move {
                let mut turn = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    turn += 1;
                    let last = paid.lock().unwrap().last().cloned();
                    let path = match (turn % 3, last) {
                        (0, Some(p)) => format!("/api/v1/checkout-sessions/{}", p.session_ref),
                        (1, _) => "/api/v1/checkout-sessions?limit=5".to_owned(),
                        _ => format!("/api/v1/products/{}", shop.product_ref),
                    };
                    let at = Instant::now();
                    let answer = api.get(&path).await;
                    seen.lock().unwrap().push(Seen {
                        at,
                        what: "read",
                        answer,
                    });
                    tokio::time::sleep(PACE).await;
                }
            })
        };
        Load {
            stop,
            seen,
            writers,
            reader,
            paid,
        }
    }

    /// How many sessions were paid so far.
    pub fn paid_count(&self) -> usize {
        self.paid.lock().unwrap().len()
    }

    /// The answers so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// Waits until `n` more sessions are paid than now (within `within`).
    pub async fn wait_paid(&self, n: usize, within: Duration, context: impl Fn() -> String) {
        let target = self.paid_count() + n;
        let poll = Poll::within(within).every(Duration::from_millis(50));
        while self.paid_count() < target {
            poll.tick(|| {
                format!(
                    "the load paid {} of {target} sessions\n{}",
                    self.paid_count(),
                    context()
                )
            })
            .await;
        }
    }

    /// Stops the load, letting each writer finish its job (retrying until
    /// it succeeds) within `within`: every session paid, and every answer.
    pub async fn finish(
        self,
        within: Duration,
        context: impl Fn() -> String,
    ) -> (Vec<Paid>, Vec<Seen>) {
        self.stop.store(true, Ordering::Relaxed);
        let mut paid = Vec::new();
        let deadline = tokio::time::Instant::now() + within;
        for w in self.writers {
            match tokio::time::timeout_at(deadline, w).await {
                Ok(done) => paid.extend(done.expect("a writer of the load panicked")),
                Err(_) => panic!(
                    "the load's writers did not finish within {} s after the outage\n{}",
                    within.as_secs(),
                    context()
                ),
            }
        }
        let _ = tokio::time::timeout_at(deadline, self.reader).await;
        let seen = self.seen.lock().unwrap().clone();
        (paid, seen)
    }
}

/// Opens a session and pays it, each step retried under its key until it
/// succeeds.
async fn pay_one(api: &Api, shop: &Shop, key: &str, seen: &Mutex<Vec<Seen>>) -> Paid {
    let session_body = serde_json::json!({
        "config_ref": shop.config_ref,
        "buyer": {"email": format!("{key}@example.com"), "name": "Outage buyer"},
    });
    let session = until_ok(
        api,
        "create session",
        "/api/v1/checkout-sessions",
        &format!("{key}-session"),
        &session_body,
        seen,
    )
    .await;
    let session_ref = text(session.data(), "checkout_session_ref");
    let pay_body = serde_json::json!({"payment_method": "pm_card_visa"});
    let paid = until_ok(
        api,
        "pay",
        &format!("/api/v1/checkout-sessions/{session_ref}/pay"),
        &format!("{key}-pay"),
        &pay_body,
        seen,
    )
    .await;
    assert_eq!(
        paid.data()["payment"]["status"],
        "succeeded",
        "{}",
        paid.short()
    );
    Paid {
        key: key.to_owned(),
        session_ref,
        payment_ref: text(&paid.data()["payment"], "payment_intent_ref"),
    }
}

async fn until_ok(
    api: &Api,
    what: &'static str,
    path: &str,
    key: &str,
    body: &serde_json::Value,
    seen: &Mutex<Vec<Seen>>,
) -> Answer {
    loop {
        let at = Instant::now();
        let answer = api.post(path, key, body).await;
        seen.lock().unwrap().push(Seen {
            at,
            what,
            answer: answer.clone(),
        });
        if answer.ok() {
            return answer;
        }
        tokio::time::sleep(RETRY_PAUSE).await;
    }
}
