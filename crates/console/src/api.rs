//! The signed-in caller (`Signed`, read afresh on every request) and how
//! the console runs API operations as that caller (`Api`): through the
//! API's own pipeline (`control_api::pipeline::run_as`), so that a page
//! or an action is the operation itself, with its permission check,
//! idempotency key, precondition and request log; the console never
//! repeats an operation's work.

use crate::error::{Failure, PageError};
use crate::session::{cookies, Session, COOKIE};
use crate::Console;
use axum::body::Body;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{header, Method, Request};
use control_api::auth::{caller_of_credential, Caller};
use control_api::operations::{self, Operation};
use domain::Timestamp;
use serde_json::Value;

/// The caller of a request with a valid session whose credential is
/// still usable; otherwise the request is `PageError::SignedOut`.
pub struct Signed {
    pub caller: Caller,
    pub session: Session,
    /// The CSRF token of this session's forms.
    pub csrf: String,
}

impl FromRequestParts<Console> for Signed {
    type Rejection = PageError;

    async fn from_request_parts(parts: &mut Parts, state: &Console) -> Result<Signed, PageError> {
        let now = Timestamp::now();
        let session = cookies(&parts.headers, COOKIE)
            .into_iter()
            .find_map(|v| Session::decode(v, &state.settings.key, now))
            .ok_or(PageError::SignedOut)?;
        // Read afresh: a revoked or expired credential, or an account no
        // longer active, ends the session here.
        let caller = caller_of_credential(
            &state.app,
            &session.environment_ref,
            &session.credential_ref,
        )
        .await?;
        let csrf = session.csrf_token(&state.settings.key);
        Ok(Signed {
            caller,
            session,
            csrf,
        })
    }
}

impl Signed {
    pub fn holds(&self, permission: &str) -> bool {
        self.caller.holds(permission)
    }

    /// Refuses a state change whose form does not carry this session's
    /// CSRF token.
    pub fn check_csrf(&self, console: &Console, presented: Option<&str>) -> Result<(), PageError> {
        match presented {
            Some(token) if self.session.check_csrf(&console.settings.key, token) => Ok(()),
            _ => Err(PageError::Csrf),
        }
    }

    /// Operations run as this caller.
    pub fn api<'a>(&'a self, console: &'a Console) -> Api<'a> {
        Api {
            console,
            caller: &self.caller,
        }
    }
}

/// A successful answer of an operation: its `data`.
pub struct Answer {
    pub data: Value,
}

/// Runs operations as one caller.
pub struct Api<'a> {
    console: &'a Console,
    caller: &'a Caller,
}

/// The largest answer the console reads (a page of 100 items with their
/// bodies fits well within it).
const MAX_ANSWER: usize = 64 << 20;

impl Api<'_> {
    /// The `data` of a read operation `id` with path parameters `params`
    /// and query `query` (empty values are left out).
    pub async fn read(
        &self,
        id: &'static str,
        params: &[(&str, &str)],
        query: &[(&str, &str)],
    ) -> Result<Value, PageError> {
        let answer = self.call(id, params, query, None, &[]).await?;
        Ok(answer.data)
    }

    /// Runs the write operation `id` with `body`, under the idempotency
    /// key `key` (the form's; a fresh one when it has none) and, when
    /// given, `If-Match: if_match` (an operation that needs one and gets
    /// none answers 428).
    pub async fn write(
        &self,
        id: &'static str,
        params: &[(&str, &str)],
        body: Value,
        if_match: Option<&str>,
        key: Option<&str>,
    ) -> Result<Answer, PageError> {
        let fresh = format!("console-{}", crate::session::nonce());
        let mut headers = vec![("idempotency-key", key.unwrap_or(&fresh))];
        if let Some(tag) = if_match {
            headers.push(("if-match", tag));
        }
        self.call(id, params, &[], Some(body), &headers).await
    }

    async fn call(
        &self,
        id: &'static str,
        params: &[(&str, &str)],
        query: &[(&str, &str)],
        body: Option<Value>,
        headers: &[(&str, &str)],
    ) -> Result<Answer, PageError> {
        let op = operations::by_id(id)
            .ok_or_else(|| PageError::Internal(format!("no operation {id}")))?;
        let uri = uri_of(op, params, query);
        let method = match op.method {
            operations::Method::Get => Method::GET,
            operations::Method::Post => Method::POST,
            operations::Method::Patch => Method::PATCH,
        };
        let mut builder = Request::builder().method(method).uri(uri);
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        let request = match body {
            Some(body) => builder
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(body.to_string())),
            None => builder.body(Body::empty()),
        }
        .map_err(|_| PageError::BadInput("a form field holds characters it cannot".into()))?;
        let response = control_api::pipeline::run_as(
            op,
            self.console.app.clone(),
            self.caller.clone(),
            request,
        )
        .await;
        let status = response.status().as_u16();
        let request_id = response
            .headers()
            .get("request-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let bytes = axum::body::to_bytes(response.into_body(), MAX_ANSWER)
            .await
            .map_err(|e| PageError::Internal(format!("reading an answer of {id}: {e}")))?;
        let json: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        if (200..300).contains(&status) {
            return Ok(Answer {
                data: json["data"].clone(),
            });
        }
        match status {
            401 => return Err(PageError::SignedOut),
            503 => return Err(PageError::Unavailable),
            // The pipeline has logged it with its request id.
            500..=599 => return Err(PageError::Internal(format!("{id} answered {status}"))),
            _ => {}
        }
        let error = &json["error"];
        let details = error["details"]
            .as_array()
            .map(|d| {
                d.iter()
                    .map(|x| (text(&x["field"]), text(&x["issue"])))
                    .collect()
            })
            .unwrap_or_default();
        Err(PageError::Api(Failure {
            status,
            code: text(&error["code"]),
            message: text(&error["message"]),
            details,
            request_id,
        }))
    }
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_owned()
}

/// The concrete path of `op` with `params` in its braced segments (each
/// percent-encoded), and the non-empty values of `query`.
fn uri_of(op: &Operation, params: &[(&str, &str)], query: &[(&str, &str)]) -> String {
    let mut path = op.path.to_owned();
    for (name, value) in params {
        path = path.replace(&format!("{{{name}}}"), &encode_segment(value));
    }
    let query: Vec<(&str, &str)> = query
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .copied()
        .collect();
    if query.is_empty() {
        return path;
    }
    let encoded = serde_urlencoded::to_string(&query).unwrap_or_default();
    format!("{path}?{encoded}")
}

/// `value` as one path segment: unreserved characters as they are, any
/// other byte percent-encoded.
pub fn encode_segment(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_fill_the_template_and_cannot_leave_their_segment() {
        let op = operations::by_id("retrieveWebhookDelivery").unwrap();
        assert_eq!(
            uri_of(op, &[("delivery_ref", "whd_abc")], &[]),
            "/api/v1/webhook_deliveries/whd_abc"
        );
        assert_eq!(
            uri_of(op, &[("delivery_ref", "../x?y")], &[]),
            "/api/v1/webhook_deliveries/..%2Fx%3Fy"
        );
        let list = operations::by_id("listDeadLetters").unwrap();
        assert_eq!(
            uri_of(list, &[], &[("reason", "a b&c"), ("cursor", "")]),
            "/api/v1/dead_letters?reason=a+b%26c"
        );
    }
}
