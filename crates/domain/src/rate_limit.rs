//! The token bucket behind the API's rate limit (contract 2,
//! `rate_limited`): exact integer arithmetic, in thousandths of a token, so
//! that a bucket kept in this process and one kept in Redis (the same rule
//! in a script) agree to the request.
//!
//! A bucket holds at most `burst` tokens, gains `per_second` tokens a
//! second, and a request takes one. This module owns the rule only; where
//! buckets live (a map of this process, Redis for a fleet) is the API's.

/// Thousandths of a token a request takes.
pub const COST: u64 = 1000;

/// A credential's allowance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    per_second: u32,
    burst: u32,
}

impl Rate {
    /// `per_second` requests a second with bursts of twice as many (the
    /// contract's rule); `None` for 0, which turns the limit off.
    pub fn per_second(per_second: u32) -> Option<Rate> {
        (per_second > 0).then(|| Rate {
            per_second,
            burst: per_second.saturating_mul(2),
        })
    }

    pub fn requests_per_second(self) -> u32 {
        self.per_second
    }

    pub fn burst(self) -> u32 {
        self.burst
    }

    /// The most thousandths of a token a bucket holds.
    pub fn capacity(self) -> u64 {
        u64::from(self.burst) * COST
    }
}

/// One credential's bucket: its level when last touched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bucket {
    /// Thousandths of a token, at most `Rate::capacity`.
    level: u64,
    /// Unix milliseconds of the last refill.
    at_ms: i64,
}

impl Bucket {
    /// A full bucket, as a credential's first request finds it.
    pub fn full(rate: Rate, now_ms: i64) -> Bucket {
        Bucket {
            level: rate.capacity(),
            at_ms: now_ms,
        }
    }

    /// Refills for the time since the last call (a clock that went back
    /// refills nothing), then takes one request's token. `Err` carries the
    /// milliseconds until one token will be there.
    pub fn take(&mut self, rate: Rate, now_ms: i64) -> Result<(), u64> {
        let elapsed = u64::try_from(now_ms.saturating_sub(self.at_ms)).unwrap_or(0);
        // `per_second` tokens a second are `per_second` thousandths a ms.
        let gained = elapsed.saturating_mul(u64::from(rate.per_second));
        self.level = self.level.saturating_add(gained).min(rate.capacity());
        self.at_ms = self.at_ms.max(now_ms);
        if self.level >= COST {
            self.level -= COST;
            Ok(())
        } else {
            Err((COST - self.level).div_ceil(u64::from(rate.per_second)))
        }
    }

    /// True when the bucket has refilled completely by `now_ms`, so that
    /// forgetting it changes nothing.
    pub fn is_full_at(&self, rate: Rate, now_ms: i64) -> bool {
        let elapsed = u64::try_from(now_ms.saturating_sub(self.at_ms)).unwrap_or(0);
        self.level
            .saturating_add(elapsed.saturating_mul(u64::from(rate.per_second)))
            >= rate.capacity()
    }
}

/// Whole seconds a client should wait, from milliseconds (`Retry-After`
/// has second resolution; never 0).
pub fn retry_after_secs(wait_ms: u64) -> u64 {
    wait_ms.div_ceil(1000).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn zero_turns_the_limit_off() {
        assert_eq!(Rate::per_second(0), None);
        let r = Rate::per_second(1000).unwrap();
        assert_eq!((r.requests_per_second(), r.burst()), (1000, 2000));
    }

    #[test]
    fn a_full_bucket_passes_a_burst_then_refuses() {
        let rate = Rate::per_second(10).unwrap();
        let mut b = Bucket::full(rate, 0);
        for _ in 0..20 {
            b.take(rate, 0).unwrap();
        }
        // One token takes 100 ms at 10 a second.
        assert_eq!(b.take(rate, 0), Err(100));
        assert_eq!(b.take(rate, 60), Err(40));
        assert_eq!(b.take(rate, 100), Ok(()));
    }

    #[test]
    fn a_clock_going_back_refills_nothing() {
        let rate = Rate::per_second(1).unwrap();
        let mut b = Bucket::full(rate, 10_000);
        b.take(rate, 10_000).unwrap();
        b.take(rate, 10_000).unwrap();
        assert!(b.take(rate, 5_000).is_err());
        assert!(b.take(rate, 10_999).is_err());
        assert!(b.take(rate, 11_000).is_ok());
    }

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        assert_eq!(retry_after_secs(0), 1);
        assert_eq!(retry_after_secs(1), 1);
        assert_eq!(retry_after_secs(1000), 1);
        assert_eq!(retry_after_secs(1001), 2);
    }

    proptest! {
        /// Over any schedule of requests, no more pass than the burst plus
        /// what the elapsed time refilled, and a refused request is told a
        /// wait after which it passes.
        #[test]
        fn never_more_than_burst_plus_refill(
            per_second in 1u32..5_000,
            gaps in proptest::collection::vec(0i64..50, 1..400),
        ) {
            let rate = Rate::per_second(per_second).unwrap();
            let mut b = Bucket::full(rate, 0);
            let (mut now, mut passed) = (0i64, 0u64);
            for gap in gaps {
                now += gap;
                match b.take(rate, now) {
                    Ok(()) => passed += 1,
                    Err(wait) => {
                        prop_assert!(wait >= 1);
                        let mut probe = b;
                        prop_assert!(probe.take(rate, now + wait as i64).is_ok());
                    }
                }
                let allowed = u64::from(rate.burst()) + (now as u64 * u64::from(per_second)) / 1000;
                prop_assert!(passed <= allowed, "{passed} > {allowed}");
                prop_assert!(b.level <= rate.capacity());
            }
        }

        #[test]
        fn an_idle_bucket_is_full_again(per_second in 1u32..5_000, idle in 0i64..5_000) {
            let rate = Rate::per_second(per_second).unwrap();
            let mut b = Bucket::full(rate, 0);
            while b.take(rate, 0).is_ok() {}
            let mut probe = b;
            let full = b.is_full_at(rate, idle);
            for _ in 0..rate.burst() {
                if probe.take(rate, idle).is_err() {
                    prop_assert!(!full);
                    return Ok(());
                }
            }
            prop_assert!(full);
        }
    }
}
