//! Receiver protection at the start of an attempt (contract 13.2): an
//! endpoint's `rate_limit` and `max_in_flight`, its back-pressure's
//! effective rate and its `Retry-After` hold-off, across every process of
//! a fleet.
//!
//! Only endpoints that something governs (`Protection::governs`: limits of
//! their own, a pressure not yet recovered, a hold-off) come here; the
//! store never hands such an endpoint's fresh delivery over at birth
//! (`NewDelivery::limited`), so every attempt to one starts from the claim
//! loop, after `Governor::admit`. Other endpoints keep only this process's
//! per-endpoint slots.
//!
//! The rate is kept as a window: at most `rate` attempts start in any
//! second, so a burst is never more than one second's worth and no second
//! sees more than the limit (stricter than a token bucket of one second's
//! worth, which allows two seconds' worth across a second's boundary).
//! Embedded, the windows and in-flight counts are this process's. In a
//! fleet they are Redis's (`ADMIT`): a sorted set of the last second's
//! starts, and one of open attempts, each expiring with its lease, so a
//! killed dispatcher's attempts stop counting when their leases would
//! have. No room in flight, or no start left in the window, means wait;
//! waiting is not an attempt.
//!
//! Also here: each endpoint's recent rate (`Recent`), the base a `429` or
//! `503` halves when the endpoint has no `rate_limit`.
//!
//! This module must never write the store: waiting deliveries go back
//! through the claim loop's give-back.

use crate::error::DispatchError;
use crate::redis_schedule::RedisSchedule;
use domain::webhook::limits::{Protection, MILLI};
use domain::Timestamp;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The window a rate counts starts over: a second, and a margin for the
/// moments between an admission and the request reaching the receiver
/// (a view to load, a connection to open), so that the receiver sees at
/// most `rate` in any second of its own.
const WINDOW_MS: i64 = 1050;

/// The spacing of a backlog's slots against the rate's window: 5 % wider,
/// so a delivery claimed a moment after its slot still finds room.
const SLOT_SLACK: (i64, i64) = (105, 100);

/// How long a delivery waits when its endpoint has no room in flight.
pub const BUSY_WAIT: Duration = Duration::from_millis(100);

/// What `admit` decided.
#[derive(Debug, PartialEq, Eq)]
pub enum Admission {
    /// Start now; the room is freed when the attempt is done with it
    /// (`Admitted` dropped).
    Go,
    /// No attempt before this long.
    Wait(Duration),
}

/// Room an admitted attempt holds in flight: freed when this is dropped,
/// however the attempt ends (sent, or given back before it started).
pub struct Admitted {
    governor: Arc<Governor>,
    endpoint: String,
    delivery: String,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.governor.free(&self.endpoint, &self.delivery);
    }
}

/// The limits an attempt to one endpoint is admitted under, at a moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Terms {
    /// Attempts in any second, whole (a fractional effective rate is
    /// taken down: never above what the endpoint allows).
    pub rate: Option<u32>,
    pub max_in_flight: u32,
    pub throttled_until: Option<Timestamp>,
}

impl Terms {
    /// The terms of an endpoint with `protection` at `now`;
    /// `default_in_flight` stands for a `max_in_flight` it did not set.
    pub fn of(protection: &Protection, default_in_flight: u32, now: Timestamp) -> Terms {
        Terms {
            rate: protection
                .effective_rate_milli(now)
                .map(|m| (m / MILLI).max(1).min(u64::from(u32::MAX)) as u32),
            max_in_flight: protection
                .limits
                .max_in_flight
                .map_or(default_in_flight, |m| m.get()),
            throttled_until: protection.throttled(now),
        }
    }
}

/// Admission of governed endpoints' attempts.
pub struct Governor {
    place: Place,
    /// Each endpoint's next free start in this process's give-backs, so
    /// the deliveries one claim could not start come back spread at the
    /// endpoint's rate rather than all at once (Unix microseconds).
    horizon: Mutex<HashMap<String, i64>>,
}

enum Place {
    Local(Mutex<HashMap<String, Local>>),
    Redis(Arc<RedisSchedule>),
}

/// An endpoint's recent starts and open attempts in this process.
#[derive(Default)]
struct Local {
    /// Unix milliseconds of the starts of the last second, oldest first.
    starts: std::collections::VecDeque<i64>,
    open: u32,
}

impl Governor {
    pub fn local() -> Governor {
        Governor {
            place: Place::Local(Mutex::default()),
            horizon: Mutex::default(),
        }
    }

    pub fn redis(schedule: Arc<RedisSchedule>) -> Governor {
        Governor {
            place: Place::Redis(schedule),
            horizon: Mutex::default(),
        }
    }

    /// Room for one attempt of `delivery` to `endpoint` under `terms` at
    /// `now`: a free place in flight and, when rated, a token. `lease` is
    /// how long the open attempt counts at most (its lease).
    pub async fn admit(
        &self,
        endpoint: &str,
        delivery: &str,
        terms: &Terms,
        now: Timestamp,
        lease: Duration,
    ) -> Result<Admission, DispatchError> {
        if let Some(until) = terms.throttled_until {
            let wait = until.millis().saturating_sub(now.millis()).max(1) as u64;
            return Ok(Admission::Wait(Duration::from_millis(wait)));
        }
        match &self.place {
            Place::Local(map) => {
                let mut map = map.lock().unwrap_or_else(|p| p.into_inner());
                let local = map.entry(endpoint.to_owned()).or_default();
                if local.open >= terms.max_in_flight {
                    return Ok(Admission::Wait(BUSY_WAIT));
                }
                let now = now.millis();
                while local.starts.front().is_some_and(|t| *t <= now - WINDOW_MS) {
                    local.starts.pop_front();
                }
                if let Some(rate) = terms.rate {
                    if local.starts.len() >= rate as usize {
                        let oldest = local.starts.front().copied().unwrap_or(now);
                        let wait = (oldest + WINDOW_MS - now).max(1) as u64;
                        return Ok(Admission::Wait(Duration::from_millis(wait)));
                    }
                    local.starts.push_back(now);
                }
                local.open += 1;
                Ok(Admission::Go)
            }
            Place::Redis(r) => r.admit(endpoint, delivery, terms, lease).await,
        }
    }

    /// `admit`, holding the room it gives in an `Admitted`.
    pub async fn admit_held(
        self: &Arc<Self>,
        endpoint: &str,
        delivery: &str,
        terms: &Terms,
        now: Timestamp,
        lease: Duration,
    ) -> Result<Result<Admitted, Duration>, DispatchError> {
        Ok(
            match self.admit(endpoint, delivery, terms, now, lease).await? {
                Admission::Go => Ok(Admitted {
                    governor: self.clone(),
                    endpoint: endpoint.to_owned(),
                    delivery: delivery.to_owned(),
                }),
                Admission::Wait(wait) => Err(wait),
            },
        )
    }

    /// The attempt of `delivery` to `endpoint` is done with its room. In
    /// a fleet the room is freed in the background; lost, it counts until
    /// the lease it was given expires.
    fn free(&self, endpoint: &str, delivery: &str) {
        match &self.place {
            Place::Local(map) => {
                let mut map = map.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(local) = map.get_mut(endpoint) {
                    local.open = local.open.saturating_sub(1);
                }
            }
            Place::Redis(r) => {
                let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                    return;
                };
                let (r, endpoint, delivery) = (r.clone(), endpoint.to_owned(), delivery.to_owned());
                runtime.spawn(async move {
                    if let Err(e) = r.release_in_flight(&endpoint, &delivery).await {
                        tracing::warn!(error = %e, "freeing an endpoint's room in flight failed");
                    }
                });
            }
        }
    }

    /// When a delivery that must wait `wait` comes back.
    ///
    /// One that was due since it was written (`fresh`: a backlog seen for
    /// the first time) takes the endpoint's next free slot after the wait:
    /// slots are spaced a little wider than the rate's window allows
    /// (`SLOT_SLACK`), so that a backlog is written back once, spread at the
    /// endpoint's pace, and each comes due when it can start. One that
    /// already had a due time of its own (a slot given here, a retry) and
    /// still found no room (it came a moment early) comes back after the
    /// wait alone, ahead of the slots: it is never sent to the back of the
    /// line. Waits for room in flight alone spread over a tenth of a
    /// second.
    pub fn come_back_in(
        &self,
        endpoint: &str,
        terms: &Terms,
        wait: Duration,
        now: Timestamp,
        fresh: bool,
    ) -> Duration {
        let Some(rate) = terms.rate else {
            return wait + Duration::from_micros(1000 + rand::random::<u64>() % 100_000);
        };
        if !fresh {
            return wait + Duration::from_millis(rand::random::<u64>() % 10);
        }
        let step_us = WINDOW_MS * 1000 * SLOT_SLACK.0 / SLOT_SLACK.1 / i64::from(rate.max(1));
        let now_us = now.millis() * 1000;
        let earliest = now_us + wait.as_micros() as i64;
        let mut horizon = self.horizon.lock().unwrap_or_else(|p| p.into_inner());
        if horizon.len() > 10_000 {
            horizon.retain(|_, t| *t > now_us);
        }
        let slot = horizon.entry(endpoint.to_owned()).or_insert(earliest);
        let at = (*slot).max(earliest);
        *slot = at + step_us.max(1);
        Duration::from_micros((at - now_us).max(0) as u64)
    }
}

/// KEYS[1] the endpoint's starts of the last second (a sorted set scored
/// by the start's Unix ms), KEYS[2] its open attempts (delivery references
/// scored by when each stops counting). ARGV: the rate (0 for none), the
/// most open attempts, the delivery, its lease in ms, the window in ms.
/// Returns 0 when admitted, -1 when no room is free in flight, else the ms
/// until the oldest start of the window leaves it.
const ADMIT: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[2]) then
  return -1
end
local rate = tonumber(ARGV[1])
if rate > 0 then
  local window = tonumber(ARGV[5])
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
  if redis.call('ZCARD', KEYS[1]) >= rate then
    local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
    local wait = tonumber(oldest[2]) + window - now
    if wait < 1 then wait = 1 end
    return wait
  end
  redis.call('ZADD', KEYS[1], now, ARGV[3] .. ':' .. t[1] .. t[2])
  redis.call('PEXPIRE', KEYS[1], window + 1000)
end
local lease = tonumber(ARGV[4])
redis.call('ZADD', KEYS[2], now + lease, ARGV[3])
redis.call('PEXPIRE', KEYS[2], lease + 1000)
return 0
";

impl RedisSchedule {
    fn endpoint_keys(&self, endpoint: &str) -> (String, String) {
        let prefix = self.key_prefix();
        (
            format!("{prefix}:ep:{endpoint}:starts"),
            format!("{prefix}:ep:{endpoint}:open"),
        )
    }

    async fn admit(
        &self,
        endpoint: &str,
        delivery: &str,
        terms: &Terms,
        lease: Duration,
    ) -> Result<Admission, DispatchError> {
        static SCRIPT: std::sync::OnceLock<redis::Script> = std::sync::OnceLock::new();
        let script = SCRIPT.get_or_init(|| redis::Script::new(ADMIT));
        let (starts, open) = self.endpoint_keys(endpoint);
        let answer: i64 = script
            .key(starts)
            .key(open)
            .arg(terms.rate.unwrap_or(0))
            .arg(terms.max_in_flight)
            .arg(delivery)
            .arg(lease.as_millis() as u64)
            .arg(WINDOW_MS)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(match answer {
            0 => Admission::Go,
            w if w < 0 => Admission::Wait(BUSY_WAIT),
            w => Admission::Wait(Duration::from_millis(w as u64)),
        })
    }

    async fn release_in_flight(&self, endpoint: &str, delivery: &str) -> Result<(), DispatchError> {
        let (_, open) = self.endpoint_keys(endpoint);
        let _: i64 = redis::cmd("ZREM")
            .arg(open)
            .arg(delivery)
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(())
    }
}

/// Attempts started to each endpoint over the last ten seconds, in
/// one-second buckets: the rate a `429` or `503` halves when the endpoint
/// has no `rate_limit` of its own (in a fleet, this process's share of it,
/// so the halved rate errs low).
#[derive(Default)]
pub struct Recent {
    started: Mutex<HashMap<String, [(i64, u32); 10]>>,
}

impl Recent {
    /// An attempt to `endpoint` started at `now`.
    pub fn started(&self, endpoint: &str, now: Timestamp) {
        let second = now.millis().div_euclid(1000);
        let mut map = self.started.lock().unwrap_or_else(|p| p.into_inner());
        let slots = match map.get_mut(endpoint) {
            Some(s) => s,
            None => map.entry(endpoint.to_owned()).or_insert([(0, 0); 10]),
        };
        let slot = &mut slots[second.rem_euclid(10) as usize];
        if slot.0 != second {
            *slot = (second, 0);
        }
        slot.1 += 1;
    }

    /// Thousandths of an attempt a second to `endpoint` over the ten
    /// seconds before `now`.
    pub fn rate_milli(&self, endpoint: &str, now: Timestamp) -> u64 {
        let second = now.millis().div_euclid(1000);
        let map = self.started.lock().unwrap_or_else(|p| p.into_inner());
        let Some(slots) = map.get(endpoint) else {
            return 0;
        };
        let count: u64 = slots
            .iter()
            .filter(|(s, _)| second - *s < 10 && *s <= second)
            .map(|(_, n)| u64::from(*n))
            .sum();
        count * MILLI / 10
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::webhook::limits::{EndpointLimits, MaxInFlight, RateLimit};

    fn terms(rate: Option<u32>, max_in_flight: u32) -> Terms {
        Terms {
            rate,
            max_in_flight,
            throttled_until: None,
        }
    }

    const LEASE: Duration = Duration::from_secs(30);

    #[tokio::test]
    async fn a_rated_endpoint_starts_at_most_its_rate_in_any_second() {
        let g = Governor::local();
        let now = Timestamp::from_millis(1_000_000);
        let terms = terms(Some(5), 100);
        for i in 0..5 {
            let at = now.plus_millis(i * 100);
            let d = format!("d{i}");
            assert_eq!(
                g.admit("e", &d, &terms, at, LEASE).await.unwrap(),
                Admission::Go
            );
        }
        // The sixth waits until the first start has left the window.
        let at = now.plus_millis(450);
        assert_eq!(
            g.admit("e", "d5", &terms, at, LEASE).await.unwrap(),
            Admission::Wait(Duration::from_millis(600))
        );
        let later = now.plus_millis(1050);
        assert_eq!(
            g.admit("e", "d5", &terms, later, LEASE).await.unwrap(),
            Admission::Go
        );
        assert_eq!(
            g.admit("e", "d6", &terms, later, LEASE).await.unwrap(),
            Admission::Wait(Duration::from_millis(100))
        );
    }

    #[tokio::test]
    async fn open_attempts_never_exceed_max_in_flight() {
        let g = Governor::local();
        let now = Timestamp::from_millis(0);
        let terms = terms(None, 2);
        assert_eq!(
            g.admit("e", "a", &terms, now, LEASE).await.unwrap(),
            Admission::Go
        );
        assert_eq!(
            g.admit("e", "b", &terms, now, LEASE).await.unwrap(),
            Admission::Go
        );
        assert_eq!(
            g.admit("e", "c", &terms, now, LEASE).await.unwrap(),
            Admission::Wait(BUSY_WAIT)
        );
        assert_eq!(
            g.admit("other", "c", &terms, now, LEASE).await.unwrap(),
            Admission::Go,
            "another endpoint's room"
        );
        g.free("e", "a");
        assert_eq!(
            g.admit("e", "c", &terms, now, LEASE).await.unwrap(),
            Admission::Go
        );
    }

    #[tokio::test]
    async fn a_hold_off_admits_nothing_before_it_ends() {
        let g = Governor::local();
        let now = Timestamp::from_millis(10_000);
        let mut terms = terms(None, 10);
        terms.throttled_until = Some(now.plus_millis(30_000));
        assert_eq!(
            g.admit("e", "a", &terms, now, LEASE).await.unwrap(),
            Admission::Wait(Duration::from_secs(30))
        );
    }

    #[test]
    fn the_gate_takes_the_lower_rate_and_the_default_in_flight() {
        let now = Timestamp::from_millis(0);
        let mut p = Protection {
            limits: EndpointLimits {
                rate_limit: RateLimit::parse(3).ok(),
                max_in_flight: None,
            },
            ..Protection::default()
        };
        assert_eq!(Terms::of(&p, 100, now), terms(Some(3), 100));
        let push = domain::webhook::limits::Pushback {
            base_milli: 3_000,
            started_at: now,
            retry_after: None,
        };
        p.pressure = Some(push.press(None, now));
        p.limits.max_in_flight = MaxInFlight::parse(7).ok();
        // 1.5 a second, taken down to 1.
        assert_eq!(Terms::of(&p, 100, now), terms(Some(1), 7));
    }

    #[test]
    fn give_backs_come_back_spread_at_the_rate_and_never_to_the_back() {
        let g = Governor::local();
        let now = Timestamp::from_millis(0);
        let terms = terms(Some(100), 100);
        let first = g.come_back_in("e", &terms, Duration::from_millis(50), now, true);
        let second = g.come_back_in("e", &terms, Duration::from_millis(50), now, true);
        let third = g.come_back_in("e", &terms, Duration::ZERO, now, true);
        // 1,050 ms window, 5 % wider slots: 11.025 ms apart at 100 a second.
        assert_eq!(first, Duration::from_millis(50));
        assert_eq!(second, Duration::from_micros(61_025));
        assert_eq!(third, Duration::from_micros(72_050));
        // One that had its slot and came a moment early waits alone.
        let again = g.come_back_in("e", &terms, Duration::from_millis(3), now, false);
        assert!(again >= Duration::from_millis(3) && again < Duration::from_millis(13));
    }

    #[test]
    fn the_recent_rate_counts_the_last_ten_seconds() {
        let r = Recent::default();
        for ms in (0..20_000).step_by(100) {
            r.started("e", Timestamp::from_millis(ms));
        }
        // Ten a second.
        assert_eq!(r.rate_milli("e", Timestamp::from_millis(19_999)), 10_000);
        assert_eq!(r.rate_milli("e", Timestamp::from_millis(40_000)), 0);
        assert_eq!(r.rate_milli("other", Timestamp::from_millis(0)), 0);
    }

    proptest::proptest! {
        /// Whatever the moments attempts ask at, and whenever open ones
        /// end, the admitted never exceed the rate in any window nor
        /// `max_in_flight` open at once, and a refusal always names a wait.
        #[test]
        fn admissions_keep_the_rate_and_the_open_limit(
            rate in 1u32..8,
            max in 1u32..6,
            asks in proptest::collection::vec((0i64..400, proptest::bool::ANY), 1..80),
        ) {
            let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
            rt.block_on(async {
                let g = Governor::local();
                let terms = terms(Some(rate), max);
                let (mut now, mut starts, mut open) = (0i64, Vec::new(), 0u32);
                for (i, (gap, end_one)) in asks.into_iter().enumerate() {
                    now += gap;
                    if end_one && open > 0 {
                        g.free("e", "x");
                        open -= 1;
                    }
                    let at = Timestamp::from_millis(now);
                    match g.admit("e", &format!("d{i}"), &terms, at, LEASE).await.unwrap() {
                        Admission::Go => {
                            starts.push(now);
                            open += 1;
                        }
                        Admission::Wait(w) => proptest::prop_assert!(w > Duration::ZERO),
                    }
                    proptest::prop_assert!(open <= max);
                    let recent = starts.iter().filter(|t| **t > now - WINDOW_MS).count();
                    proptest::prop_assert!(recent <= rate as usize);
                }
                Ok(())
            })?;
        }
    }
}
