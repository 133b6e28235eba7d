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

use tokio::sync::{Mutex, MutexGuard};

/// One test of this binary at a time, whatever the test threads: each test
/// holds its turn for its whole run. The lock is tokio's, which works
/// across the tests' runtimes and is never poisoned: a test that panicked
/// leaves the turn to the next one.
async fn alone() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::const_new(());
    TURN.lock().await
}
