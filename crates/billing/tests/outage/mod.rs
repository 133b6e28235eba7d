//! What the outage tests (`outage_*.rs`, issue 19) share: a shop to pay
//! in through the API, a receiver of its `payment.succeeded` events, API
//! load (checkout sessions and pays under `Idempotency-Key`s, and reads)
//! that records every answer, `/readyz` polling, and the checks made after
//! an outage: every answer was a success or `503 dependency_unavailable`
//! with `Retry-After`, in time; every write that answered 2xx exists; every
//! event of a paid payment reached the receiver exactly once. `Service`
//! starts `billing serve` under that load and ends it with those checks.
//!
//! Each test file includes it with `mod common; mod outage;`.
#![allow(dead_code)]

mod api;
mod checks;
mod load;
mod service;
mod shop;

pub use api::{Answer, Api};
pub use checks::{check_answers, check_committed, check_events};
pub use load::{Load, Paid, Seen};
pub use service::Service;
pub use shop::{open_shop, Hooks, Shop};

/// The last `n` lines of the file at `path`, for failure messages.
pub fn tail(path: &std::path::Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    format!(
        "--- {} (last lines):\n{}",
        path.display(),
        lines[lines.len().saturating_sub(n)..].join("\n")
    )
}

pub use crate::common::text;
