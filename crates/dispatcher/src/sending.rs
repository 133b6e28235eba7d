//! Outbound HTTP: one client with connection reuse, no redirects, a
//! per-attempt time-out, a response excerpt of at most 1 KiB (the rest of a
//! body is never read), and the destination check at connect time: every
//! resolved address is checked, so DNS rebinding cannot reach a private
//! network.

use domain::webhook::retry::retry_after;
use domain::webhook::url::{forbidden_ip, EndpointUrl, UrlError};
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

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

/// Resolves names and drops forbidden addresses (unless allowed).
struct GuardedResolver {
    allow_private: bool,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let allow_private = self.allow_private;
        Box::pin(async move {
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((name.as_str(), 0)).await?.collect();
            let allowed: Vec<SocketAddr> = found
                .into_iter()
                .filter(|a| allow_private || !forbidden_ip(a.ip()))
                .collect();
            if allowed.is_empty() {
                return Err(Box::new(DestinationError::ForbiddenAddresses) as _);
            }
            Ok(Box::new(allowed.into_iter()) as Addrs)
        })
    }
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
    /// connect time, so DNS rebinding cannot reach a private network).
    #[error("the destination resolves only to forbidden addresses")]
    ForbiddenAddresses,
}

#[derive(Clone)]
pub struct Sender {
    client: reqwest::Client,
    allow_private: bool,
}

impl Sender {
    pub fn new(allow_private: bool) -> Sender {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .dns_resolver(Arc::new(GuardedResolver { allow_private }))
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
            allow_private,
        }
    }

    /// The destination of `url`, or why requests to it are refused.
    pub fn destination(&self, url: &str) -> Destination {
        // An address literal never reaches the resolver: check it here.
        Destination(
            EndpointUrl::parse(url, true, self.allow_private)
                .map_err(DestinationError::from)
                .and_then(|_| reqwest::Url::parse(url).map_err(DestinationError::Unparsable)),
        )
    }

    /// POSTs `body` to `to` with `headers`, within `timeout`.
    pub async fn post(
        &self,
        to: &Destination,
        headers: &[(&'static str, String)],
        body: String,
        timeout: Duration,
    ) -> Response {
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
            Err(e) => return failure(describe(&e)),
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
            match tokio::time::timeout(timeout, response.chunk()).await {
                Ok(Ok(Some(chunk))) => excerpt
                    .extend_from_slice(&chunk[..chunk.len().min(EXCERPT_BYTES - excerpt.len())]),
                Ok(Ok(None)) => break,
                Ok(Err(e)) => {
                    error = Some(describe(&e));
                    break;
                }
                Err(_) => break,
            }
        }
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
}

fn failure(error: String) -> Response {
    Response {
        status: None,
        excerpt: None,
        error: Some(error),
        retry_after: None,
    }
}

fn describe(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        "timed out".to_owned()
    } else if e.is_connect() {
        let mut source: Option<&dyn std::error::Error> = std::error::Error::source(e);
        let mut detail = String::new();
        while let Some(s) = source {
            detail = s.to_string();
            source = s.source();
        }
        format!("connection failed: {detail}")
    } else {
        format!("request failed: {e}")
    }
}
