//! Timestamps: milliseconds since the Unix epoch, written as RFC 3339 UTC
//! with millisecond precision and a trailing `Z`.

use chrono::{DateTime, SecondsFormat, Utc};
use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(i64);

impl Timestamp {
    pub fn now() -> Timestamp {
        Timestamp(Utc::now().timestamp_millis())
    }

    pub fn from_millis(ms: i64) -> Timestamp {
        Timestamp(ms)
    }

    pub fn millis(self) -> i64 {
        self.0
    }

    pub fn plus_seconds(self, seconds: i64) -> Timestamp {
        Timestamp(self.0.saturating_add(seconds.saturating_mul(1000)))
    }

    pub fn plus_millis(self, ms: i64) -> Timestamp {
        Timestamp(self.0.saturating_add(ms))
    }

    /// Parses an RFC 3339 timestamp with any offset.
    pub fn parse(s: &str) -> Option<Timestamp> {
        DateTime::parse_from_rfc3339(s)
            .ok()
            .map(|t| Timestamp(t.timestamp_millis()))
    }

    pub fn to_rfc3339(self) -> String {
        DateTime::<Utc>::from_timestamp_millis(self.0)
            .unwrap_or_default()
            .to_rfc3339_opts(SecondsFormat::Millis, true)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_rfc3339())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_with_millis_and_z() {
        let t = Timestamp::parse("2026-11-22T10:04:05.123+00:00").unwrap();
        assert_eq!(t.to_rfc3339(), "2026-11-22T10:04:05.123Z");
        let t = Timestamp::parse("2026-11-22T11:04:05+01:00").unwrap();
        assert_eq!(t.to_rfc3339(), "2026-11-22T10:04:05.000Z");
    }
}
