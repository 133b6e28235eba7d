//! Outbound HTTP: one client with connection reuse, no redirects, no
//! proxy, a per-attempt time-out, a response excerpt of at most 1 KiB (the
//! rest of a body is never read), and the destination check at connect
//! time: every new connection resolves its name again and checks every
//! address (`resolve`), so DNS rebinding cannot reach a private network.
//!
//! The time-out bounds the whole attempt: name resolution, TCP connect, TLS
//! handshake, the request, the status line and headers, and the excerpt.
//! The connection must be ready within nine tenths of it
//! ([`connect_within`]), so a receiver that accepts TCP and stalls the TLS
//! handshake is recorded as such rather than as a silent time-out.
//!
//! The status decides the attempt (contract: a 2xx answer succeeds); the
//! body only gives the excerpt. A body that is still arriving when the
//! time-out comes (a receiver trickling it byte by byte) ends the read: the
//! attempt keeps its status and the excerpt that arrived, with a note in
//! its `error`. A body is never read past [`EXCERPT_BYTES`], whatever its
//! length or speed, so a receiver cannot make the dispatcher hold more.

pub mod resolve;

use crate::settings::DispatchSettings;
use domain::webhook::retry::retry_after;
use domain::webhook::url::{EndpointUrl, UrlError};
use resolve::{AddressPolicy, GuardedResolver};
use std::sync::Arc;
use std::time::Duration;

pub use resolve::{Lookup, SystemLookup};

/// Bytes of a response body kept in the attempt record.
pub const EXCERPT_BYTES: usize = 1024;

/// What came back from one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: Option<u16>,
    pub excerpt: Option<String>,
    pub error: Option<String>,
    pub retry_after: Option<Duration>,
}

/// How long a connection (name resolution, TCP connect and TLS handshake)
/// may take within an attempt of `timeout`: nine tenths of it, so that a
/// stalled connection ends before the attempt does and says so, and the
/// rest is left to send the request.
pub fn connect_within(timeout: Duration) -> Duration {
    timeout - timeout / 10
}

/// Where an endpoint's attempts go: its url parsed and checked once per
/// endpoint version (`crate::endpoints`), not once per attempt.
#[derive(Debug, Clone)]
pub struct Destination(Result<reqwest::Url, DestinationError>);

/// Why requests to an endpoint's url are refused. Not returned: an
/// attempt to such a destination fails with this as its recorded error.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DestinationError {
    /// The url breaks the endpoint url rules (scheme, host, address).
    #[error("destination refused: {0}")]
    Url(#[from] UrlError),
    /// The HTTP client cannot parse the url.
    #[error("destination refused: {0}")]
    Unparsable(#[source] <reqwest::Url as std::str::FromStr>::Err),
    /// Every address the host resolves to is forbidden (checked at
    /// connect time, so DNS rebinding cannot reach a private network). The
    /// addresses are not named: the attempt record is the customer's to
    /// read, and the service's resolver may know its own network's names.
    #[error("the destination resolves only to forbidden addresses")]
    ForbiddenAddresses,
    /// The host name did not resolve.
    #[error("the destination's host name did not resolve: {0}")]
    Unresolved(String),
}

#[derive(Clone)]
pub struct Sender {
    client: reqwest::Client,
    policy: AddressPolicy,
    connect_within: Duration,
}

impl Sender {
    /// The sender of a dispatcher: its address policy
    /// (`allow_private_networks`, `admitted_addresses`), its name lookup,
    /// and the connection time limit of its attempts' time-out.
    pub fn new(settings: &DispatchSettings) -> Sender {
        let policy = AddressPolicy {
            allow_private: settings.allow_private_networks,
            admitted: settings.admitted_addresses.clone(),
        };
        let resolver = GuardedResolver::new(settings.lookup.clone(), policy.clone());
        let connect_within = connect_within(settings.timeout);
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            // A proxy would resolve the destination itself, past the guard.
            .no_proxy()
            .dns_resolver(Arc::new(resolver))
            .connect_timeout(connect_within)
            .pool_max_idle_per_host(64)
            .tcp_nodelay(true)
            .user_agent(concat!("billing-webhooks/", env!("CARGO_PKG_VERSION")))
            .build()
            // Only a TLS backend that cannot start fails here. A default
            // client instead would follow redirects and skip the address
            // guard, so the process stops rather than send without them.
            .expect("the webhook HTTP client could not be built (TLS backend)");
        Sender {
            client,
            policy,
            connect_within,
        }
    }

    /// The destination of `url`, or why requests to it are refused.
    pub fn destination(&self, url: &str) -> Destination {
        Destination(self.check(url))
    }

    /// An address literal never reaches the resolver: it is checked here,
    /// by the same policy.
    fn check(&self, url: &str) -> Result<reqwest::Url, DestinationError> {
        match EndpointUrl::parse(url, true, self.policy.allow_private) {
            Ok(_) => {}
            Err(UrlError::ForbiddenAddress) => {
                let literal = EndpointUrl::parse(url, true, true)
                    .ok()
                    .and_then(|u| u.ip());
                if !literal.is_some_and(|ip| self.policy.admits(ip)) {
                    return Err(UrlError::ForbiddenAddress.into());
                }
            }
            Err(e) => return Err(e.into()),
        }
        reqwest::Url::parse(url).map_err(DestinationError::Unparsable)
    }

    /// POSTs `body` to `to` with `headers`; the whole exchange, excerpt
    /// included, ends within `timeout`.
    pub async fn post(
        &self,
        to: &Destination,
        headers: &[(&'static str, String)],
        body: String,
        timeout: Duration,
    ) -> Response {
        let deadline = tokio::time::Instant::now() + timeout;
        let url = match &to.0 {
            Ok(url) => url.clone(),
            Err(refused) => return failure(refused.to_string()),
        };
        let mut request = self
            .client
            .post(url)
            .timeout(timeout)
            .header("content-type", "application/json")
            .body(body);
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        let mut response = match request.send().await {
            Ok(r) => r,
            Err(e) => return failure(self.describe(&e, timeout)),
        };
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(retry_after);
        let mut excerpt = Vec::new();
        let mut error = None;
        while excerpt.len() < EXCERPT_BYTES {
            // The client's time-out covers the body too; this deadline only
            // makes the bound independent of it.
            match tokio::time::timeout_at(deadline, response.chunk()).await {
                Ok(Ok(Some(chunk))) => excerpt
                    .extend_from_slice(&chunk[..chunk.len().min(EXCERPT_BYTES - excerpt.len())]),
                Ok(Ok(None)) => break,
                Ok(Err(e)) if !e.is_timeout() => {
                    error = Some(format!("the response body broke off: {}", innermost(&e)));
                    break;
                }
                Ok(Err(_)) | Err(_) => {
                    error = Some(format!(
                        "the response body did not end within the time-out ({} ms); \
                         the excerpt is what arrived",
                        timeout.as_millis()
                    ));
                    break;
                }
            }
        }
        // Dropping an unfinished response closes its connection: the rest
        // of the body is never read.
        drop(response);
        let excerpt = String::from_utf8_lossy(&excerpt).into_owned();
        if (300..400).contains(&status) {
            error = Some("redirects are not followed".to_owned());
        }
        Response {
            status: Some(status),
            excerpt: Some(excerpt),
            error,
            retry_after,
        }
    }

    /// Why a request got no answer, in words for the attempt record.
    fn describe(&self, e: &reqwest::Error, timeout: Duration) -> String {
        if e.is_connect() && e.is_timeout() {
            format!(
                "connection timed out: not ready within {} ms (name resolution, TCP connect or TLS handshake unfinished)",
                self.connect_within.as_millis()
            )
        } else if e.is_timeout() {
            format!("timed out: no response within {} ms", timeout.as_millis())
        } else if e.is_connect() {
            format!("connection failed: {}", innermost(e))
        } else {
            format!("request failed: {e}")
        }
    }
}

fn failure(error: String) -> Response {
    Response {
        status: None,
        excerpt: None,
        error: Some(error),
        retry_after: None,
    }
}

/// The innermost cause of `e`: the one that says what happened (a refused
/// connection, a forbidden address, a TLS alert).
fn innermost(e: &reqwest::Error) -> String {
    let mut source: Option<&dyn std::error::Error> = std::error::Error::source(e);
    let mut detail = e.to_string();
    while let Some(s) = source {
        detail = s.to_string();
        source = s.source();
    }
    detail
}
