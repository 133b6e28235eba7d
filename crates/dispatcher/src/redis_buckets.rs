//! The fleet's rate-limit buckets in Redis: one hash per credential under
//! the deployment's key prefix, refilled and taken by one script, so that
//! every API process of a fleet draws on the same bucket.
//!
//! The rule is `domain::rate_limit::Bucket`'s, in the same integer
//! thousandths, on Redis's clock (one clock for the whole fleet). This
//! module must never decide what a refusal means to a client (that is the
//! API's) and keeps nothing but buckets.

use crate::error::DispatchError;
use crate::redis_schedule::RedisSchedule;
use domain::rate_limit::{Rate, COST};

/// KEYS[1] the bucket; ARGV: tokens a second, capacity and cost in
/// thousandths. Returns 0 when the request may pass, else the milliseconds
/// until it would. An idle bucket expires once it would be full again.
const TAKE: &str = r"
local rate = tonumber(ARGV[1])
local cap = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local b = redis.call('HMGET', KEYS[1], 'l', 't')
local level = tonumber(b[1]) or cap
local at = tonumber(b[2]) or now
local elapsed = now - at
if elapsed < 0 then elapsed = 0 end
level = math.min(cap, level + elapsed * rate)
if at < now then at = now end
local wait = 0
if level >= cost then
  level = level - cost
else
  wait = math.ceil((cost - level) / rate)
end
redis.call('HSET', KEYS[1], 'l', level, 't', at)
redis.call('PEXPIRE', KEYS[1], math.ceil((cap - level) / rate) + 1000)
return wait
";

impl RedisSchedule {
    /// Takes one request's token from `credential`'s bucket: `Ok(None)`
    /// when it passes, `Ok(Some(ms))` when it must wait that long.
    pub async fn take_token(
        &self,
        credential: &str,
        rate: Rate,
    ) -> Result<Option<u64>, DispatchError> {
        static SCRIPT: std::sync::OnceLock<redis::Script> = std::sync::OnceLock::new();
        let script = SCRIPT.get_or_init(|| redis::Script::new(TAKE));
        let wait: u64 = script
            .key(format!("{}:rate:{credential}", self.key_prefix()))
            .arg(rate.requests_per_second())
            .arg(rate.capacity())
            .arg(COST)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok((wait > 0).then_some(wait))
    }
}
