//! The tests that judge latency: a delivery's p99 against a bound
//! (`partial_failure`), or against the same endpoint's p99 measured alone
//! (`isolation`). They are a test binary of their own, and each takes its
//! turn (`alone`): cargo runs test binaries one after another, so none of
//! them shares the CPU with the suite's other tests, which run several at
//! once, nor with each other.
//!
//! Run them with `cargo test -p billing-tests --test timing`.

mod isolation;
mod partial_failure;

use std::sync::{Mutex, MutexGuard};

/// One test of this binary at a time, whatever the test threads: each test
/// holds the guard for its whole run (its own thread, blocked before its
/// work starts). A test that panicked leaves the turn to the next one.
fn alone() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}
