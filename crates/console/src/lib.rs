//! The operator console (contract 12.3): a web console at `/console`,
//! served on the API listener beside `/api/v1` (`billing serve` and
//! `billing api` merge `console::router` into the API's router when
//! `[console] enabled`).
//!
//! It owns the console's pages, rendered on the server as HTML (`maud`,
//! which escapes every value it interpolates) with charts drawn as inline
//! SVG; its sign-in, session cookie and CSRF tokens (`session`); the
//! security headers of its responses (`secure_headers`: a
//! Content-Security-Policy without any script); and its one stylesheet.
//!
//! What it must never do:
//! - act other than as the signed-in credential: every page and action
//!   runs as it (`Signed`, loaded afresh on every request), so it has that
//!   credential's permissions and environment, and a revoked or expired
//!   credential ends its sessions at once;
//! - implement an operation: every action and nearly every read is the API
//!   operation itself, run through the API's pipeline as that caller
//!   (`api::Api`, `control_api::pipeline::run_as`), with its permission
//!   check, idempotency, preconditions and request log. Only what no
//!   operation answers is read from the store directly, in the caller's
//!   environment and behind the permission of the nearest operation: an
//!   endpoint's attempts per time bucket (its charts), the failed heads of
//!   its blocked keys (contract 13.1) and an event's deliveries (search by
//!   `event_ref`);
//! - show a secret (a credential's, a signing secret, the encryption key)
//!   except in the page that shows the API answer creating it (a rotated
//!   signing secret, once);
//! - change state on a GET, or on a POST without its session's CSRF token;
//! - run script: no JavaScript at all, so the policy forbids it;
//! - answer a 500 for bad input: every failure is a page with its status.

mod api;
mod charts;
mod error;
mod html;
mod pages;
pub mod session;

pub use session::SessionKey;

use axum::extract::Request;
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use control_api::AppState;
use std::sync::Arc;

/// How the console is served.
#[derive(Clone)]
pub struct ConsoleSettings {
    /// MACs sessions and CSRF tokens (`SessionKey::derive`).
    pub key: SessionKey,
    /// Whether cookies carry `Secure`: on every listener but a loopback
    /// one, where browsers reach the console over plain `http`.
    pub secure_cookies: bool,
}

impl ConsoleSettings {
    /// Settings for a listener on `listen`, with sessions keyed from the
    /// service's secrets key.
    pub fn new(secrets_key: &[u8; 32], listen: std::net::SocketAddr) -> ConsoleSettings {
        ConsoleSettings {
            key: SessionKey::derive(secrets_key),
            secure_cookies: !listen.ip().is_loopback(),
        }
    }
}

/// What every console handler has.
#[derive(Clone)]
pub(crate) struct Console {
    pub app: AppState,
    pub settings: Arc<ConsoleSettings>,
}

/// The console's routes, under `/console`, for merging into the API's
/// router (they add no fallback of their own).
pub fn router(app: AppState, settings: ConsoleSettings) -> Router {
    use pages::{
        catalogue, dead_letters, deliveries, delivery, endpoints, jobs, logs, sign_in,
        subscriptions,
    };
    let state = Console {
        app,
        settings: Arc::new(settings),
    };
    Router::new()
        .route("/console", get(pages::index))
        .route("/console/", get(pages::index))
        .route("/console/console.css", get(pages::stylesheet))
        .route("/console/sign-in", get(sign_in::form).post(sign_in::submit))
        .route("/console/sign-out", post(sign_in::sign_out))
        .route("/console/deliveries", get(deliveries::list))
        .route("/console/deliveries/{delivery_ref}", get(delivery::show))
        .route(
            "/console/deliveries/{delivery_ref}/redrive",
            post(delivery::redrive),
        )
        .route(
            "/console/deliveries/{delivery_ref}/skip",
            post(delivery::skip),
        )
        .route("/console/redrive-jobs", get(jobs::list).post(jobs::create))
        .route("/console/redrive-jobs/{redrive_job_ref}", get(jobs::show))
        .route(
            "/console/redrive-jobs/{redrive_job_ref}/cancel",
            post(jobs::cancel),
        )
        .route("/console/endpoints", get(endpoints::list))
        .route("/console/endpoints/{endpoint_ref}", get(endpoints::show))
        .route(
            "/console/endpoints/{endpoint_ref}/{action}",
            post(endpoints::act),
        )
        .route("/console/event-types", get(catalogue::list))
        .route("/console/dead-letters", get(dead_letters::list))
        .route("/console/request-logs", get(logs::list))
        .route("/console/subscriptions", get(subscriptions::list))
        .route(
            "/console/subscriptions/{subscription_ref}",
            get(subscriptions::show),
        )
        .route("/console/{*rest}", axum::routing::any(pages::not_found))
        .layer(axum::middleware::from_fn(secure_headers))
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(
            error::panic_page,
        ))
        .with_state(state)
}

/// The policy of every console response: nothing but this origin's
/// stylesheet and forms, inline SVG and `data:` images; no script at all,
/// no framing, no plugins.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; style-src 'self'; \
     img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// Adds the security headers to every console response.
async fn secure_headers(req: Request, next: Next) -> Response {
    let mut response = next.run(req).await;
    let headers = response.headers_mut();
    let fixed = [
        (
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY),
        ),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
        (
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        ),
        (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
        (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
    ];
    for (name, value) in fixed {
        headers.insert(name, value);
    }
    response
}
