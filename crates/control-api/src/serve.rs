//! The API listener: accepts TCP connections and serves HTTP/1.1 (with
//! keep-alive) on them through the router, within `ServeLimits`, so that
//! hostile or broken clients cannot exhaust the process.
//!
//! It owns, per process and per connection:
//! - the connection limit: a permit of `max_connections` is taken before
//!   `accept`, and held until the connection ends; beyond the limit,
//!   clients wait in the kernel's backlog and the first connections keep
//!   being served;
//! - the head limits: hyper's header read time-out (`read_timeout`, also
//!   the longest a keep-alive connection may sit idle) and head size
//!   (`max_header_bytes`, answered 431 by hyper);
//! - the body time-out: a request whose body's next piece takes longer than
//!   `read_timeout` is answered 408 (`validation_failed`) and its
//!   connection closed;
//! - the smuggling refusal: a request whose head carried both
//!   `Content-Length` and `Transfer-Encoding` (`transport::Framing`) is
//!   answered 400 (`validation_failed`, field `Transfer-Encoding`) on every
//!   route, without reaching the router, and its connection closed;
//! - graceful shutdown: when the shutdown token is cancelled it stops
//!   accepting, closes idle connections and waits for in-flight requests.
//!
//! It must never interpret a request itself beyond these refusals (routes,
//! authentication and the contract are the router's), never accept a
//! connection without a permit, and never let a refusal answer without the
//! contract's error body, a `Request-Id` and a request log.
//!
//! The 408 drops the routed request where its body stalled. That is safe
//! only while the pipeline reads a request's body before it opens a unit
//! of work (`pipeline::execute` parses the body before the idempotency
//! claim); a handler that read its body inside a transaction would break
//! this rule.

use crate::error::ApiError;
use crate::pipeline;
use crate::state::AppState;
use crate::transport::{Framing, TimedBody, Watched};
use axum::http::{header, HeaderValue, Method, Uri};
use axum::response::Response;
use axum::Router;
use domain::{Prefix, Ref, Timestamp};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};
use store::RequestLogRecord;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;

/// The smallest read buffer hyper allows (`http1::Builder::max_buf_size`).
const MIN_BUF_SIZE: usize = 8192;

/// The listener's limits (`[api]` of the configuration).
#[derive(Debug, Clone)]
pub struct ServeLimits {
    /// Connections served at once; more wait, unaccepted.
    pub max_connections: usize,
    /// Time a client has to send a request head (or, between requests, to
    /// start the next one), and between two pieces of a request body.
    pub read_timeout: Duration,
    /// Largest request head (request line and headers), in bytes; at
    /// least 8192.
    pub max_header_bytes: usize,
}

impl Default for ServeLimits {
    fn default() -> ServeLimits {
        ServeLimits {
            max_connections: 1024,
            read_timeout: Duration::from_secs(10),
            max_header_bytes: 16 * 1024,
        }
    }
}

/// Serves the API on `listener` within `limits` until `shutdown` is
/// cancelled, then stops accepting and finishes in-flight requests.
pub async fn run_with(
    state: AppState,
    listener: TcpListener,
    limits: ServeLimits,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let router = crate::router(state.clone());
    run_router(router, state, listener, limits, shutdown).await
}

/// `run_with` serving `router`: the API's (`crate::router`) merged with
/// other routes of the same listener, such as the operator console's.
pub async fn run_router(
    router: Router,
    state: AppState,
    listener: TcpListener,
    limits: ServeLimits,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let head_bytes = limits.max_header_bytes.max(MIN_BUF_SIZE);
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .keep_alive(true)
        .header_read_timeout(limits.read_timeout)
        .max_header_size(head_bytes)
        .max_buf_size(head_bytes);
    let graceful = GracefulShutdown::new();
    loop {
        let permit = tokio::select! {
            permit = permits.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            () = shutdown.cancelled() => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    if !pause_after_accept_error(e, &shutdown).await {
                        break;
                    }
                    continue;
                }
            },
            () = shutdown.cancelled() => break,
        };
        let connection = Arc::new(Connection {
            router: router.clone(),
            state: state.clone(),
            framing: Framing::new(),
            read_timeout: limits.read_timeout,
        });
        let served = graceful.watch(http.serve_connection(
            watched(stream, head_bytes, connection.framing.clone()),
            hyper::service::service_fn(move |req| Arc::clone(&connection).serve(req)),
        ));
        tokio::spawn(async move {
            if let Err(e) = served.await {
                // Clients that time out, send garbage or hang up are routine.
                tracing::debug!(error = %e, "connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

fn watched(
    stream: TcpStream,
    head_bytes: usize,
    framing: Arc<Framing>,
) -> TokioIo<Watched<TcpStream>> {
    if let Err(e) = stream.set_nodelay(true) {
        tracing::debug!(error = %e, "could not set TCP_NODELAY");
    }
    TokioIo::new(Watched::new(stream, head_bytes, framing))
}

/// After a failed `accept`: a connection that failed on its own is
/// skipped at once; anything else (such as running out of file
/// descriptors) is logged and retried after a second. Returns `false` when
/// shutdown came first.
async fn pause_after_accept_error(e: std::io::Error, shutdown: &CancellationToken) -> bool {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        e.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    ) {
        return true;
    }
    tracing::error!(error = %e, "accepting a connection failed; retrying in 1 s");
    tokio::select! {
        () = tokio::time::sleep(Duration::from_secs(1)) => true,
        () = shutdown.cancelled() => false,
    }
}

/// What every request of one connection needs.
struct Connection {
    router: Router,
    state: AppState,
    framing: Arc<Framing>,
    read_timeout: Duration,
}

impl Connection {
    async fn serve(self: Arc<Self>, req: hyper::Request<Incoming>) -> Result<Response, Infallible> {
        let started = Instant::now();
        if self.framing.next_is_smuggled() {
            return Ok(self.refuse_smuggling(&req, started).await);
        }
        let (method, uri) = (req.method().clone(), req.uri().clone());
        let stalled = Arc::new(Notify::new());
        let req = req.map(|body| TimedBody::new(body, self.read_timeout, stalled.clone()));
        let routed = tower::ServiceExt::oneshot(self.router.clone(), req);
        // A stalled body keeps its request pending for good; the request
        // is dropped here, before it opened any unit of work (bodies are
        // read before the idempotency claim), and answered 408.
        Ok(tokio::select! {
            routed = routed => routed.unwrap_or_else(|never| match never {}),
            () = stalled.notified() => self.body_too_slow(&method, &uri, started).await,
        })
    }

    async fn refuse_smuggling(&self, req: &hyper::Request<Incoming>, started: Instant) -> Response {
        let error = ApiError::validation(
            "Transfer-Encoding",
            "a request must not carry both Content-Length and Transfer-Encoding",
        );
        self.refuse(req.method(), req.uri(), error, started).await
    }

    async fn body_too_slow(&self, method: &Method, uri: &Uri, started: Instant) -> Response {
        let error = ApiError::BodyTimeout {
            waited_ms: self.read_timeout.as_millis() as u64,
        };
        self.refuse(method, uri, error, started).await
    }

    /// Answers `error` to a request refused before routing, closing the
    /// connection, and logs it.
    async fn refuse(
        &self,
        method: &Method,
        uri: &Uri,
        error: ApiError,
        started: Instant,
    ) -> Response {
        let request_id = Ref::generate(Prefix::RequestLog);
        let log = refusal_log(&request_id, method, uri, &error, started);
        let mut response = error.into_response_for(request_id.as_str());
        close(&mut response);
        pipeline::finish(
            &self.state,
            response,
            pipeline::Log::Write(log),
            pipeline::REFUSED,
        )
        .await
    }
}

/// Makes hyper close the connection once `response` is written.
fn close(response: &mut Response) {
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
}

/// The request log of a request refused before routing.
fn refusal_log(
    request_id: &Ref,
    method: &Method,
    uri: &Uri,
    error: &ApiError,
    started: Instant,
) -> RequestLogRecord {
    RequestLogRecord {
        request_log_ref: request_id.clone(),
        environment_ref: None,
        operation_id: None,
        method: method.to_string(),
        path: uri.path().to_owned(),
        status: error.status().as_u16(),
        error_code: Some(error.code().to_owned()),
        principal_ref: None,
        credential_ref: None,
        idempotency_key: None,
        duration_ms: started.elapsed().as_millis() as i64,
        created_at: Timestamp::now(),
    }
}
