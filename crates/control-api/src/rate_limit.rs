//! The rate limit of each credential (contract 2, `rate_limited`): checked
//! right after authentication, so that a request that failed it costs its
//! sender nothing.
//!
//! Buckets live in this process, or, when the fleet has a Redis scheduler,
//! in Redis (`SharedBuckets`), so that the limit holds across API
//! processes. While Redis cannot be reached the process falls back to its
//! own buckets: an outage of the limiter's store must not refuse traffic
//! the store and queue could serve. The arithmetic is
//! `domain::rate_limit`'s; this module only keeps buckets and answers.

use crate::error::ApiError;
use domain::rate_limit::{retry_after_secs, Bucket, Rate};
use domain::{Ref, Timestamp};
use futures::future::BoxFuture;
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

/// Takes a token from a credential's bucket kept elsewhere: `Ok(None)`
/// passes, `Ok(Some(ms))` must wait, `Err` says why it could not ask.
pub type SharedBuckets =
    Arc<dyn Fn(String, Rate) -> BoxFuture<'static, Result<Option<u64>, String>> + Send + Sync>;

/// Buckets this process forgets about once they are full again, checked
/// when the map grows past this many.
const PRUNE_AT: usize = 10_000;

/// How often a failing shared store is logged.
const WARN_EVERY_MS: i64 = 10_000;

pub struct RateLimiter {
    rate: Option<Rate>,
    local: Mutex<HashMap<String, Bucket>>,
    shared: Option<SharedBuckets>,
    last_warning_ms: AtomicI64,
}

impl RateLimiter {
    /// `requests_per_second` per credential, bursts of twice as many; 0
    /// turns the limit off.
    pub fn new(requests_per_second: u32) -> RateLimiter {
        RateLimiter {
            rate: Rate::per_second(requests_per_second),
            local: Mutex::new(HashMap::new()),
            shared: None,
            last_warning_ms: AtomicI64::new(i64::MIN),
        }
    }

    /// Keeps the buckets in `shared` (a fleet's Redis).
    pub fn with_shared(mut self, shared: SharedBuckets) -> RateLimiter {
        self.shared = Some(shared);
        self
    }

    /// Takes one request from `credential`'s bucket at `now` (the API's
    /// clock; a fleet's shared buckets keep their own), or answers
    /// `rate_limited` with the seconds until it would pass.
    pub async fn check(&self, credential: &Ref, now: Timestamp) -> Result<(), ApiError> {
        let Some(rate) = self.rate else {
            return Ok(());
        };
        let outcome = match &self.shared {
            Some(shared) => match shared(credential.as_str().to_owned(), rate).await {
                Ok(wait) => wait,
                Err(e) => {
                    self.warn(&e);
                    self.take_local(credential, rate, now)
                }
            },
            None => self.take_local(credential, rate, now),
        };
        match outcome {
            None => Ok(()),
            Some(wait_ms) => Err(ApiError::RateLimited {
                retry_after_secs: retry_after_secs(wait_ms),
            }),
        }
    }

    fn take_local(&self, credential: &Ref, rate: Rate, now: Timestamp) -> Option<u64> {
        let now = now.millis();
        let mut buckets = self.local.lock().unwrap_or_else(|e| e.into_inner());
        if buckets.len() >= PRUNE_AT {
            buckets.retain(|_, b| !b.is_full_at(rate, now));
        }
        buckets
            .entry(credential.as_str().to_owned())
            .or_insert_with(|| Bucket::full(rate, now))
            .take(rate, now)
            .err()
    }

    fn warn(&self, error: &str) {
        let now = Timestamp::now().millis();
        let last = self.last_warning_ms.load(Ordering::Relaxed);
        if now.saturating_sub(last) >= WARN_EVERY_MS
            && self
                .last_warning_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            tracing::warn!(error, "rate limit store unreachable; limiting per process");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::Prefix;

    /// A moment `ms` after a fixed one.
    fn at(ms: i64) -> Timestamp {
        Timestamp::from_millis(1_800_000_000_000 + ms)
    }

    #[tokio::test]
    async fn the_burst_passes_then_the_credential_waits() {
        let limiter = RateLimiter::new(5);
        let (a, b) = (
            Ref::generate(Prefix::Credential),
            Ref::generate(Prefix::Credential),
        );
        for _ in 0..10 {
            limiter.check(&a, at(0)).await.unwrap();
        }
        let refused = limiter.check(&a, at(0)).await.unwrap_err();
        assert!(matches!(
            refused,
            ApiError::RateLimited {
                retry_after_secs: 1
            }
        ));
        // Another credential has a bucket of its own.
        limiter.check(&b, at(0)).await.unwrap();
    }

    #[tokio::test]
    async fn the_bucket_refills_as_the_clock_moves() {
        let limiter = RateLimiter::new(5);
        let a = Ref::generate(Prefix::Credential);
        for _ in 0..10 {
            limiter.check(&a, at(0)).await.unwrap();
        }
        assert!(limiter.check(&a, at(0)).await.is_err());
        assert!(limiter.check(&a, at(199)).await.is_err());
        limiter.check(&a, at(200)).await.unwrap();
    }

    #[tokio::test]
    async fn zero_is_off() {
        let limiter = RateLimiter::new(0);
        let a = Ref::generate(Prefix::Credential);
        for _ in 0..10_000 {
            limiter.check(&a, at(0)).await.unwrap();
        }
    }

    #[tokio::test]
    async fn an_unreachable_shared_store_falls_back_to_this_process() {
        let shared: SharedBuckets =
            Arc::new(|_, _| Box::pin(async { Err("connection refused".to_owned()) }));
        let limiter = RateLimiter::new(1).with_shared(shared);
        let a = Ref::generate(Prefix::Credential);
        limiter.check(&a, at(0)).await.unwrap();
        limiter.check(&a, at(0)).await.unwrap();
        assert!(limiter.check(&a, at(0)).await.is_err());
    }

    #[tokio::test]
    async fn the_shared_answer_decides() {
        let shared: SharedBuckets = Arc::new(|_, _| Box::pin(async { Ok(Some(2_500)) }));
        let limiter = RateLimiter::new(1000).with_shared(shared);
        let refused = limiter
            .check(&Ref::generate(Prefix::Credential), at(0))
            .await
            .unwrap_err();
        assert!(matches!(
            refused,
            ApiError::RateLimited {
                retry_after_secs: 3
            }
        ));
    }
}
