//! The request pipeline every operation runs through, written once:
//! request id, authentication, rate limit, permission, header checks, body
//! parsing, idempotency, the handler, the envelope, ETag and the request
//! log.
//!
//! Check order (contract section 2): authentication, rate limit,
//! permission, header presence and format (idempotency key, then
//! precondition), body validation, then the handler (existence,
//! precondition match, semantics).

use crate::auth::{authenticate, Caller};
use crate::error::ApiError;
use crate::handlers::{self, Ctx, Unit};
use crate::input::Input;
use crate::operations::{ErrorSet, Method, Operation};
use crate::state::AppState;
use axum::body::Body;
use axum::extract::{FromRequestParts, RawPathParams};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use domain::etag::IfMatch;
use domain::{Prefix, Ref, Timestamp};
use futures::{FutureExt, StreamExt};
use std::panic::AssertUnwindSafe;
use std::time::Instant;
use store::{Claim, IdempotencyScope, RequestLogRecord, StoredResponse};
use sync_wrapper::SyncWrapper;

/// Requests by operation id (bounded: the table's ids) and status.
pub const HTTP_REQUESTS: &str = "billing_http_requests_total";

/// A decided response, before headers.
struct Served {
    status: StatusCode,
    body: String,
    etag: Option<String>,
    replayed: bool,
    /// Set when the response is a kept error (or the replay of one).
    error_code: Option<String>,
}

/// What the request log learns along the way.
struct Trace {
    request_id: Ref,
    method: String,
    path: String,
    started: Instant,
    caller: Option<Caller>,
    idempotency_key: Option<String>,
    /// The line was written in the request's unit of work (`log_in`).
    logged: bool,
}

impl Trace {
    /// The request's log line, its response decided now.
    fn line(
        &self,
        op: &Operation,
        status: StatusCode,
        error_code: Option<String>,
    ) -> RequestLogRecord {
        RequestLogRecord {
            request_log_ref: self.request_id.clone(),
            environment_ref: self.caller.as_ref().map(|c| c.environment_ref.clone()),
            operation_id: Some(op.id.to_owned()),
            method: self.method.clone(),
            path: self.path.clone(),
            status: status.as_u16(),
            error_code,
            principal_ref: self.caller.as_ref().map(|c| c.principal_ref.clone()),
            credential_ref: self.caller.as_ref().map(|c| c.credential_ref.clone()),
            idempotency_key: self.idempotency_key.clone(),
            duration_ms: self.started.elapsed().as_millis() as i64,
            created_at: Timestamp::now(),
        }
    }
}

/// Writes the request's log line into `tx`, its unit of work about to
/// commit, so that one commit holds both (its duration then runs up to
/// that commit).
async fn log_in(
    tx: &mut store::WriteTx,
    trace: &Trace,
    op: &Operation,
    decided: &Served,
) -> Result<(), ApiError> {
    let line = trace.line(op, decided.status, decided.error_code.clone());
    store::admin::request_logs::insert(tx, &line).await?;
    Ok(())
}

/// Who a request runs as.
enum Auth {
    /// Its `Authorization: Bearer` secret says (every API request).
    Bearer,
    /// A caller authenticated by other means (`run_as`).
    As(Caller),
}

pub async fn run(op: &'static Operation, state: AppState, req: axum::extract::Request) -> Response {
    serve(op, state, req, Auth::Bearer).await
}

/// Runs `op` as `caller`, who was authenticated by other means (the
/// operator console's session, `caller_of_credential`): the request's
/// `Authorization` header is not read, and every other step is `run`'s:
/// rate limit, permission, headers, body, idempotency, the handler, the
/// envelope and the request log. `req`'s path is the operation's concrete
/// path (`/api/v1/webhook_endpoints/whep_…/pause`); its parameters are
/// read from it by the row's template.
pub async fn run_as(
    op: &'static Operation,
    state: AppState,
    caller: Caller,
    req: axum::extract::Request,
) -> Response {
    serve(op, state, req, Auth::As(caller)).await
}

async fn serve(
    op: &'static Operation,
    state: AppState,
    req: axum::extract::Request,
    auth: Auth,
) -> Response {
    let request_id = Ref::generate(Prefix::RequestLog);
    let mut trace = Trace {
        request_id: request_id.clone(),
        method: req.method().to_string(),
        path: req.uri().path().to_owned(),
        started: Instant::now(),
        caller: None,
        idempotency_key: None,
        logged: false,
    };
    let outcome = execute(op, &state, req, auth, &mut trace).await;
    let (response, status, error_code) = match outcome {
        Ok(served) => {
            let (status, code) = (served.status, served.error_code.clone());
            (render(served), status, code)
        }
        Err(e) => {
            let (status, code) = (e.status(), e.code());
            (
                e.into_response_for(request_id.as_str()),
                status,
                Some(code.to_owned()),
            )
        }
    };
    let line = trace.line(op, status, error_code);
    let log = if trace.logged {
        Log::Written(line)
    } else {
        Log::Write(line)
    };
    finish(&state, response, log, op.id).await
}

/// A request's log line, as `finish` gets it.
pub enum Log {
    /// To be written now, in a unit of work of its own.
    Write(RequestLogRecord),
    /// Already committed with the request's unit of work: only counted
    /// and traced.
    Written(RequestLogRecord),
}

/// The `operation` label of a request no route matched.
pub const UNKNOWN_ROUTE: &str = "unknown_route";
/// The `operation` label of a request refused before routing (its body
/// too slow, its framing ambiguous).
pub const REFUSED: &str = "refused_before_routing";

/// Adds `Request-Id`, counts the request under `operation` (an operation
/// id, `UNKNOWN_ROUTE` or `REFUSED`: a bounded label) and writes the
/// request log unless it was written already.
pub async fn finish(
    state: &AppState,
    mut response: Response,
    log: Log,
    operation: &'static str,
) -> Response {
    let (log, write) = match log {
        Log::Write(log) => (log, true),
        Log::Written(log) => (log, false),
    };
    if let Ok(v) = HeaderValue::from_str(log.request_log_ref.as_str()) {
        response.headers_mut().insert("request-id", v);
    }
    metrics::counter!(
        HTTP_REQUESTS,
        "operation" => operation,
        "status" => log.status.to_string()
    )
    .increment(1);
    tracing::info!(
        request.id = log.request_log_ref.as_str(),
        operation = log.operation_id.as_deref().unwrap_or("-"),
        status = log.status,
        duration_ms = log.duration_ms,
        "request"
    );
    if !write {
        return response;
    }
    if let Err(e) = state.store.admin().insert_request_log(&log).await {
        tracing::warn!(error = %e, request.id = log.request_log_ref.as_str(), "could not write request log");
    }
    response
}

fn render(served: Served) -> Response {
    let mut response = (served.status, served.body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(tag) = served
        .etag
        .as_deref()
        .and_then(|t| HeaderValue::from_str(t).ok())
    {
        headers.insert(header::ETAG, tag);
    }
    if served.replayed {
        headers.insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    response
}

async fn execute(
    op: &'static Operation,
    state: &AppState,
    req: axum::extract::Request,
    auth: Auth,
    trace: &mut Trace,
) -> Result<Served, ApiError> {
    let (mut parts, body) = req.into_parts();
    let caller = match auth {
        Auth::Bearer => authenticate(state, &parts.headers).await?,
        Auth::As(caller) => caller,
    };
    trace.caller = Some(caller.clone());
    state
        .limiter
        .check(&caller.credential_ref, state.settings.clock.now())
        .await?;
    if !caller.holds(op.permission) {
        return Err(ApiError::Forbidden(op.permission));
    }
    let key = idempotency_key(op, &parts.headers)?;
    trace.idempotency_key = key.clone();
    let if_match = precondition(op, &parts.headers)?;
    let body = match op.method {
        Method::Post | Method::Patch => {
            parse_body(body, &parts.headers, state.settings.max_body_bytes).await?
        }
        Method::Get => serde_json::Value::Null,
    };
    let path = RawPathParams::from_request_parts(&mut parts, &())
        .await
        .map(|p| {
            p.iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect()
        })
        // Not routed (`run_as`): the row's template names them.
        .unwrap_or_else(|_| template_params(op.path, parts.uri.path()));
    let query = parse_query(parts.uri.query())?;
    let fingerprint =
        domain::idempotency::fingerprint(parts.method.as_str(), parts.uri.path(), &body);
    let input = Input {
        path,
        query,
        body,
        if_match,
    };
    let mut ctx = Ctx {
        state: state.clone(),
        caller: caller.clone(),
        op,
        table: crate::operations::OPERATIONS,
        unit: match op.method {
            Method::Get => Unit::Read,
            Method::Post | Method::Patch => Unit::Plain,
        },
        tx: None,
    };

    let Some(key) = key else {
        let result = call(&mut ctx, input).await;
        let opened = ctx.tx.take().map(SyncWrapper::into_inner);
        return match (result, opened) {
            (Ok(reply), Some(mut tx)) => {
                let served = served(op, reply);
                log_in(&mut tx, trace, op, &served).await?;
                tx.commit().await?;
                trace.logged = true;
                Ok(served)
            }
            (Ok(reply), None) => Ok(served(op, reply)),
            (Err(e), opened) => {
                abandon(opened).await;
                Err(e)
            }
        };
    };
    let scope = IdempotencyScope {
        environment_ref: caller.environment_ref.to_string(),
        principal_ref: caller.principal_ref.to_string(),
        operation_id: op.id.to_owned(),
        key,
    };
    let retention = state.settings.idempotency_retention.as_millis() as i64;
    let claim = state
        .store
        .claim_idempotency_key(&scope, &fingerprint, Timestamp::now(), retention)
        .await?;
    match claim {
        Claim::Owned(claim) => ctx.unit = Unit::Keyed(Box::new(claim)),
        Claim::Mismatch => return Err(ApiError::IdempotencyMismatch),
        Claim::InFlight => return Err(ApiError::key_in_flight()),
        Claim::Replay(stored) => {
            let error_code = serde_json::from_str::<serde_json::Value>(&stored.body)
                .ok()
                .and_then(|v| v["error"]["code"].as_str().map(str::to_owned));
            return Ok(Served {
                status: StatusCode::from_u16(stored.status).unwrap_or(StatusCode::OK),
                body: stored.body,
                etag: stored.etag,
                replayed: true,
                error_code,
            });
        }
    }
    // The operation's writes, its events and its result are one unit of
    // work: they commit together, or the transaction is dropped and
    // nothing of the request remains.
    let result = call(&mut ctx, input).await;
    let opened = ctx.tx.take().map(SyncWrapper::into_inner);
    let (decided, kept_body, opened) = match result {
        Ok(reply) => {
            // A reply that reveals a secret is kept without it.
            let kept = reply
                .replay_data
                .as_ref()
                .map(|d| serde_json::json!({ "data": d }).to_string());
            let s = served(op, reply);
            let kept = kept.unwrap_or_else(|| s.body.clone());
            (s, kept, opened)
        }
        Err(e) if keeps_result(&e) => {
            let s = Served {
                status: e.status(),
                body: e.body_json(trace.request_id.as_str()),
                etag: None,
                replayed: false,
                error_code: Some(e.code().to_owned()),
            };
            let kept = s.body.clone();
            // The decided error stands; whatever the operation wrote
            // before deciding it does not, but for a declined charge's
            // failed payment (contract 14.2), which is recorded.
            let opened = match opened {
                Some(tx) if matches!(e, ApiError::PaymentDeclined) => Some(tx),
                Some(tx) => {
                    tx.rollback().await?;
                    None
                }
                None => None,
            };
            (s, kept, opened)
        }
        Err(e) => {
            abandon(opened).await;
            return Err(e);
        }
    };
    let Unit::Keyed(claim) = &ctx.unit else {
        return Err(ApiError::Internal("the idempotency claim was lost".into()));
    };
    let mut tx = match opened {
        Some(tx) => tx,
        None => handlers::open_keyed(claim).await?,
    };
    let stored = StoredResponse {
        status: decided.status.as_u16(),
        body: kept_body,
        etag: decided.etag.clone(),
    };
    claim.keep(&mut tx, &stored).await?;
    log_in(&mut tx, trace, op, &decided).await?;
    tx.commit().await?;
    trace.logged = true;
    // A kept error is served exactly as it will be replayed.
    Ok(decided)
}

/// Rolls back a unit of work that keeps nothing, at once, so that its
/// locks are free for the client's retry (`store::WriteTx::rollback`).
async fn abandon(opened: Option<store::WriteTx>) {
    if let Some(tx) = opened {
        if let Err(e) = tx.rollback().await {
            tracing::warn!(error = %e, "rolling back a request's transaction failed");
        }
    }
}

/// Runs the operation's handler; a panic becomes an opaque 500.
async fn call(ctx: &mut Ctx, input: Input) -> Result<crate::reply::Reply, ApiError> {
    let op = ctx.op;
    let Some(crate::operation::Binding { handler, .. }) = op.binding else {
        return Err(ApiError::NotFound(format!(
            "operation `{}` is not available in this version of the service",
            op.id
        )));
    };
    AssertUnwindSafe(handler(ctx, input))
        .catch_unwind()
        .await
        .unwrap_or_else(|_| Err(ApiError::Internal("handler panicked".into())))
}

fn served(op: &Operation, reply: crate::reply::Reply) -> Served {
    let envelope = serde_json::json!({ "data": reply.data });
    Served {
        status: StatusCode::from_u16(op.success_status).unwrap_or(StatusCode::OK),
        body: envelope.to_string(),
        etag: reply.etag,
        replayed: false,
        error_code: None,
    }
}

/// The errors an executed request keeps under its key (contract section 4).
fn keeps_result(e: &ApiError) -> bool {
    matches!(
        e,
        ApiError::NotFound(_)
            | ApiError::PreconditionFailed
            | ApiError::Semantic(_)
            | ApiError::PaymentDeclined
    )
}

fn idempotency_key(op: &Operation, headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    if !op.idempotent {
        return Ok(None);
    }
    match headers.get("idempotency-key") {
        None => Err(match op.errors {
            ErrorSet::E3 => ApiError::IdempotencyKeyRequired,
            _ => ApiError::validation("Idempotency-Key", "this operation requires the header"),
        }),
        Some(v) => v
            .to_str()
            .ok()
            .filter(|k| domain::idempotency::valid_key(k))
            .map(|k| Some(k.to_owned()))
            .ok_or_else(|| {
                ApiError::validation(
                    "Idempotency-Key",
                    "must be 1 to 255 printable ASCII characters",
                )
            }),
    }
}

fn precondition(op: &Operation, headers: &HeaderMap) -> Result<Option<IfMatch>, ApiError> {
    if !op.if_match {
        return Ok(None);
    }
    let value = headers
        .get(header::IF_MATCH)
        .ok_or(ApiError::PreconditionRequired)?;
    value
        .to_str()
        .ok()
        .and_then(IfMatch::parse)
        .map(Some)
        .ok_or_else(|| ApiError::validation("If-Match", "must be `*` or a list of quoted ETags"))
}

async fn parse_body(
    body: Body,
    headers: &HeaderMap,
    limit: usize,
) -> Result<serde_json::Value, ApiError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        drain(body).await;
        return Err(ApiError::BodyTooLarge);
    }
    let mut stream = body.into_data_stream();
    let mut bytes = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|_| ApiError::validation("body", "could not be read"))?;
        if bytes.len() + chunk.len() > limit {
            drain(Body::from_stream(stream)).await;
            return Err(ApiError::BodyTooLarge);
        }
        bytes.extend_from_slice(&chunk);
    }
    let value: serde_json::Value = serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::validation("body", format!("not valid JSON: {e}")))?;
    if !value.is_object() {
        return Err(ApiError::validation("body", "must be a JSON object"));
    }
    Ok(value)
}

/// Reads and discards what a client is still sending (up to a bound), so
/// that it receives our 413 instead of a reset connection.
async fn drain(body: Body) {
    const DRAIN_LIMIT: usize = 16 << 20;
    let mut stream = body.into_data_stream();
    let mut seen = 0;
    while let Some(Ok(chunk)) = stream.next().await {
        seen += chunk.len();
        if seen > DRAIN_LIMIT {
            break;
        }
    }
}

/// The parameters of `path` named by the braced segments of `template`
/// (`/api/v1/webhook_deliveries/{delivery_ref}`), as they stand.
fn template_params(template: &str, path: &str) -> Vec<(String, String)> {
    template
        .split('/')
        .zip(path.split('/'))
        .filter_map(|(t, p)| {
            let name = t.strip_prefix('{')?.strip_suffix('}')?;
            Some((name.to_owned(), p.to_owned()))
        })
        .collect()
}

fn parse_query(query: Option<&str>) -> Result<Vec<(String, String)>, ApiError> {
    let Some(q) = query.filter(|q| !q.is_empty()) else {
        return Ok(Vec::new());
    };
    let params = serde_urlencoded::from_str::<Vec<(String, String)>>(q)
        .map_err(|_| ApiError::validation("query", "malformed query string"))?;
    // No store keeps a NUL in text (PostgreSQL refuses it outright), so no
    // parameter may carry one, whatever the operation does with it.
    match params
        .iter()
        .find(|(k, v)| k.contains('\0') || v.contains('\0'))
    {
        Some((k, _)) if !k.contains('\0') => {
            Err(ApiError::validation(k, "must not contain a NUL character"))
        }
        Some(_) => Err(ApiError::validation(
            "query",
            "must not contain a NUL character",
        )),
        None => Ok(params),
    }
}

#[cfg(test)]
mod tests {
    use super::template_params;

    #[test]
    fn a_template_names_the_parameters_of_a_concrete_path() {
        assert_eq!(
            template_params(
                "/api/v1/webhook_endpoints/{endpoint_ref}/secret/rotate",
                "/api/v1/webhook_endpoints/whep_abc/secret/rotate"
            ),
            vec![("endpoint_ref".to_owned(), "whep_abc".to_owned())]
        );
        assert!(template_params("/api/v1/dead_letters", "/api/v1/dead_letters").is_empty());
    }
}
