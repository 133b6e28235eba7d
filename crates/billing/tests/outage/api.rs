//! The API of a `billing` process as the outage tests see it: every
//! answer with its status, error code, `Retry-After` and how long it took,
//! and `/readyz` polling.

use crate::common::poll::Poll;
use std::time::{Duration, Instant};

/// How long a client waits for any answer: far past every bound the tests
/// check, so that a hang shows as a slow answer, not as a lost one.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(60);

/// The API of a `billing` process and its sandbox credential.
#[derive(Clone)]
pub struct Api {
    pub base: String,
    pub secret: String,
    client: reqwest::Client,
}

/// One answer of the API (status 0: no answer, `detail` says why).
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    /// The error code of an error answer.
    pub code: String,
    pub retry_after: Option<String>,
    pub took: Duration,
    pub body: serde_json::Value,
    pub detail: String,
}

impl Answer {
    pub fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }

    pub fn data(&self) -> &serde_json::Value {
        &self.body["data"]
    }

    /// A `503 dependency_unavailable` with a `Retry-After`, as the contract
    /// wants it.
    pub fn unavailable(&self) -> bool {
        self.status == 503 && self.code == "dependency_unavailable" && self.retry_after.is_some()
    }

    /// The answer in one line, for failure messages.
    pub fn short(&self) -> String {
        let mut detail = self.detail.clone();
        detail.truncate(300);
        format!(
            "{} {} retry-after={:?} after {} ms: {detail}",
            self.status,
            self.code,
            self.retry_after,
            self.took.as_millis()
        )
    }
}

impl Api {
    pub fn new(base: String, secret: String) -> Api {
        let client = reqwest::Client::builder()
            .timeout(CLIENT_TIMEOUT)
            .connect_timeout(Duration::from_secs(5))
            .pool_max_idle_per_host(16)
            .build()
            .unwrap();
        Api {
            base,
            secret,
            client,
        }
    }

    async fn send(&self, req: reqwest::RequestBuilder) -> Answer {
        let started = Instant::now();
        let r = match req.bearer_auth(&self.secret).send().await {
            Ok(r) => r,
            Err(e) => {
                return Answer {
                    status: 0,
                    code: String::new(),
                    retry_after: None,
                    took: started.elapsed(),
                    body: serde_json::Value::Null,
                    detail: format!("no answer: {e:?}"),
                }
            }
        };
        let status = r.status().as_u16();
        let retry_after = r
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let text = r.text().await.unwrap_or_default();
        let body: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        Answer {
            status,
            code: body["error"]["code"].as_str().unwrap_or("").to_owned(),
            retry_after,
            took: started.elapsed(),
            body,
            detail: text,
        }
    }

    pub async fn post(&self, path: &str, key: &str, body: &serde_json::Value) -> Answer {
        let req = self
            .client
            .post(format!("{}{path}", self.base))
            .header("Idempotency-Key", key)
            .json(body);
        self.send(req).await
    }

    pub async fn post_if_match(
        &self,
        path: &str,
        key: &str,
        etag: &str,
        body: &serde_json::Value,
    ) -> Answer {
        let req = self
            .client
            .post(format!("{}{path}", self.base))
            .header("Idempotency-Key", key)
            .header("If-Match", etag)
            .json(body);
        self.send(req).await
    }

    pub async fn get(&self, path: &str) -> Answer {
        self.send(self.client.get(format!("{}{path}", self.base)))
            .await
    }

    /// A setup write, which must answer `expect`: its `data`.
    pub async fn setup(&self, path: &str, key: &str, body: serde_json::Value) -> serde_json::Value {
        let a = self.post(path, key, &body).await;
        assert!(a.ok(), "POST {path} {body}: {}", a.short());
        a.data().clone()
    }

    /// `/readyz`: its status (0 without an answer), body and how long it
    /// took.
    pub async fn readyz(&self) -> (u16, serde_json::Value, Duration) {
        let started = Instant::now();
        match self
            .client
            .get(format!("{}/readyz", self.base))
            .timeout(Duration::from_secs(20))
            .send()
            .await
        {
            Ok(r) => {
                let status = r.status().as_u16();
                let body = r.json().await.unwrap_or_default();
                (status, body, started.elapsed())
            }
            Err(e) => (
                0,
                serde_json::json!({"error": e.to_string()}),
                started.elapsed(),
            ),
        }
    }

    /// Polls `/readyz` until it answers 503 with `service` not `ok`
    /// (within `within`); that body. Every answer must come within
    /// `answer_within`.
    pub async fn wait_unready(
        &self,
        service: &str,
        within: Duration,
        answer_within: Duration,
        context: impl Fn() -> String,
    ) -> serde_json::Value {
        let poll = Poll::within(within).every(Duration::from_millis(100));
        loop {
            let (status, body, took) = self.readyz().await;
            assert!(
                took <= answer_within,
                "/readyz took {} ms (at most {} ms): {status} {body}\n{}",
                took.as_millis(),
                answer_within.as_millis(),
                context()
            );
            if status == 503
                && body["checks"][service].is_string()
                && body["checks"][service] != "ok"
            {
                return body;
            }
            poll.tick(|| {
                format!(
                    "/readyz did not name `{service}` as missing; last: {status} {body}\n{}",
                    context()
                )
            })
            .await;
        }
    }

    /// The outage of `service`, which went down at `down`: waits until
    /// `/readyz` names it as missing (within 8 s, each answer within 4 s),
    /// says what it answered, and returns once `outage` has passed since
    /// `down`.
    pub async fn through_outage(
        &self,
        service: &str,
        down: Instant,
        outage: Duration,
        context: impl Fn() -> String,
    ) {
        let readyz = self
            .wait_unready(
                service,
                Duration::from_secs(8),
                Duration::from_secs(4),
                context,
            )
            .await;
        crate::common::say(&format!("/readyz during the outage: {readyz}"));
        // The outage itself: the real service stays down this long while
        // the load goes on against the server.
        tokio::time::sleep(outage.saturating_sub(down.elapsed())).await;
    }

    /// Polls `/readyz` until it answers 200 (within `within`).
    pub async fn wait_ready(&self, within: Duration, context: impl Fn() -> String) {
        let poll = Poll::within(within).every(Duration::from_millis(100));
        loop {
            let (status, body, _) = self.readyz().await;
            if status == 200 {
                return;
            }
            poll.tick(|| {
                format!(
                    "/readyz was not 200 after the outage; last: {status} {body}\n{}",
                    context()
                )
            })
            .await;
        }
    }
}
