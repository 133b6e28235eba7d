//! Waiting on what a test can observe, with a deadline: the one place the
//! tests pause between two looks. A test that waits for something (a
//! delivery to arrive, a process to answer, a row to appear) polls it with
//! [`wait_until`], or with a [`Poll`] where its loop keeps its own state.
//! A test that needs time to pass for a rule (a due time, an expiry, a
//! lease) drives the clock instead (`TestApp::advance`, `dispatch_due`,
//! `jobs::run_due` at a `now`).
//!
//! `crates/billing/tests/common` uses this same file (`#[path]`), so that
//! the process tests wait the same way; it depends on tokio alone.

use std::future::Future;
use std::time::{Duration, Instant};

/// How often a [`Poll`] looks again unless told otherwise.
pub const EVERY: Duration = Duration::from_millis(25);

/// A deadline and a pace for looking again.
#[derive(Debug, Clone, Copy)]
pub struct Poll {
    started: Instant,
    within: Duration,
    every: Duration,
}

impl Poll {
    /// Looks every [`EVERY`] for at most `within`.
    pub fn within(within: Duration) -> Poll {
        Poll {
            started: Instant::now(),
            within,
            every: EVERY,
        }
    }

    /// Looks every `every` instead.
    pub fn every(self, every: Duration) -> Poll {
        Poll { every, ..self }
    }

    /// How long since the poll began.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Whether the deadline has passed.
    pub fn expired(&self) -> bool {
        self.elapsed() >= self.within
    }

    /// Waits one interval before the next look; `false` (at once) when the
    /// deadline has passed.
    pub async fn next(&self) -> bool {
        if self.expired() {
            return false;
        }
        // The only pause of the tests' polling: what is polled (a process,
        // a socket, a store another task writes) moves on its own.
        tokio::time::sleep(self.every).await;
        true
    }

    /// Waits one interval before the next look; fails with `what()` when
    /// the deadline has passed.
    pub async fn tick(&self, what: impl FnOnce() -> String) {
        if !self.next().await {
            panic!("not within {:?}: {}", self.within, what());
        }
    }

    /// Looks at `check` until it gives `Some`: that value. Fails with
    /// `what()` when the deadline passes first.
    pub async fn until<T, F, Fut>(&self, what: impl Fn() -> String, mut check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Option<T>>,
    {
        loop {
            if let Some(v) = check().await {
                return v;
            }
            self.tick(&what).await;
        }
    }
}

/// Looks at `check` every [`EVERY`] until it gives `Some`, for at most
/// `within`: that value. Fails with `what()` when the deadline passes first.
pub async fn wait_until<T, F, Fut>(within: Duration, what: impl Fn() -> String, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    Poll::within(within).until(what, check).await
}

/// Waits until the wall clock (`Timestamp::now`, in whole milliseconds)
/// has moved past the millisecond of the call: a creation time taken after
/// this is later than every one taken before it. (Creation times are the
/// wall clock's, not the app's `Clock`.)
pub async fn next_millisecond() {
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis())
    };
    let called = now();
    Poll::within(Duration::from_secs(1))
        .every(Duration::from_millis(1))
        .until(
            || "the wall clock did not move".to_owned(),
            || async { (now() > called).then_some(()) },
        )
        .await
}
