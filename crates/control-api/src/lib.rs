//! The control API: the HTTP surface of the service under `/api/v1`.
//!
//! This is the only crate that knows HTTP status codes and wire DTOs. It
//! owns the operation table (`operations`), the request pipeline that
//! applies the cross-cutting contract to every operation once (`pipeline`),
//! the mapping of every failure to the contract's codes (`error`) and the
//! handlers. It must never write SQL (that is `store`) nor hold business
//! rules that belong in `domain`.

pub mod auth;
pub mod error;
pub mod handlers;
pub mod input;
pub mod openapi;
pub mod operation;
pub mod operations;
pub mod pipeline;
pub mod rate_limit;
pub mod reply;
pub mod router;
pub mod serve;
pub mod state;
mod transport;
pub mod wire;

pub use router::router;
pub use serve::{run_router, run_with, ServeLimits};
pub use state::{ApiSettings, AppState};

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Serves the API on `listener` with the default `ServeLimits` until
/// `shutdown` is cancelled, then finishes in-flight requests.
pub async fn run(
    state: AppState,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    run_with(state, listener, ServeLimits::default(), shutdown).await
}
