//! Invoice numbers: `<year>-<6 digits>`, e.g. `2026-000123`, per environment
//! and year, strictly increasing and gapless (contract 10.1).
//!
//! This module owns the number's shape and its order; it never allocates
//! one. Allocation (the next number of an environment and year) happens in
//! the pay transaction, which is the only place that can make it gapless.
//! The fixed widths are what make the strings sort like the numbers, so a
//! number outside them is refused rather than widened.

use crate::time::Timestamp;
use chrono::{DateTime, Datelike, Utc};
use std::fmt;

/// Bounds that keep the string exactly `\d{4}-\d{6}`.
const YEARS: std::ops::RangeInclusive<i32> = 1000..=9999;
const SEQS: std::ops::RangeInclusive<u32> = 1..=999_999;

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum InvoiceNumberError {
    #[error("invoice year {0} is outside 1000 to 9999")]
    YearOutOfRange(i32),
    #[error("invoice sequence {0} is outside 1 to 999999")]
    SeqOutOfRange(u32),
    /// The year's numbers are used up; the caller cannot continue the year.
    #[error("invoice numbers of {0} are exhausted")]
    Exhausted(i32),
}

/// An invoice number. Ordered by year, then sequence, which is also the
/// order of its strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct InvoiceNumber {
    year: i32,
    seq: u32,
}

impl InvoiceNumber {
    pub fn new(year: i32, seq: u32) -> Result<InvoiceNumber, InvoiceNumberError> {
        if !YEARS.contains(&year) {
            return Err(InvoiceNumberError::YearOutOfRange(year));
        }
        if !SEQS.contains(&seq) {
            return Err(InvoiceNumberError::SeqOutOfRange(seq));
        }
        Ok(InvoiceNumber { year, seq })
    }

    /// The first number of `year`: sequences count from 1.
    pub fn first(year: i32) -> Result<InvoiceNumber, InvoiceNumberError> {
        InvoiceNumber::new(year, 1)
    }

    /// The number after this one in the same year (gapless: seq + 1).
    pub fn next(self) -> Result<InvoiceNumber, InvoiceNumberError> {
        match self.seq.checked_add(1) {
            Some(seq) if SEQS.contains(&seq) => Ok(InvoiceNumber { seq, ..self }),
            _ => Err(InvoiceNumberError::Exhausted(self.year)),
        }
    }

    pub fn year(self) -> i32 {
        self.year
    }

    pub fn seq(self) -> u32 {
        self.seq
    }

    /// Parses exactly the form [`Display`](fmt::Display) writes: four
    /// digits, `-`, six digits, within the bounds of [`InvoiceNumber::new`].
    pub fn parse(s: &str) -> Option<InvoiceNumber> {
        let (year, seq) = s.split_once('-')?;
        let digits = |p: &str, n: usize| p.len() == n && p.bytes().all(|b| b.is_ascii_digit());
        if !digits(year, 4) || !digits(seq, 6) {
            return None;
        }
        InvoiceNumber::new(year.parse().ok()?, seq.parse().ok()?).ok()
    }
}

impl fmt::Display for InvoiceNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04}-{:06}", self.year, self.seq)
    }
}

/// The UTC year of `t`: invoice numbers restart each calendar year in UTC,
/// whatever the environment's or buyer's time zone. A timestamp outside
/// chrono's range reads as the epoch, as `Timestamp::to_rfc3339` does.
pub fn year_of(t: Timestamp) -> i32 {
    DateTime::<Utc>::from_timestamp_millis(t.millis())
        .unwrap_or_default()
        .year()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn examples() {
        let n = InvoiceNumber::new(2026, 123).unwrap();
        assert_eq!(n.to_string(), "2026-000123");
        assert_eq!((n.year(), n.seq()), (2026, 123));
        assert_eq!(InvoiceNumber::parse("2026-000123"), Some(n));
        assert_eq!(
            InvoiceNumber::new(9999, 999_999).unwrap().to_string(),
            "9999-999999"
        );
        assert_eq!(
            InvoiceNumber::first(2027).unwrap().to_string(),
            "2027-000001"
        );
        assert_eq!(n.next().unwrap().to_string(), "2026-000124");
    }

    #[test]
    fn bounds() {
        use InvoiceNumberError::*;
        assert_eq!(InvoiceNumber::new(999, 1), Err(YearOutOfRange(999)));
        assert_eq!(InvoiceNumber::new(10_000, 1), Err(YearOutOfRange(10_000)));
        assert_eq!(InvoiceNumber::new(2026, 0), Err(SeqOutOfRange(0)));
        assert_eq!(
            InvoiceNumber::new(2026, 1_000_000),
            Err(SeqOutOfRange(1_000_000))
        );
        assert_eq!(
            InvoiceNumber::new(2026, 999_999).unwrap().next(),
            Err(Exhausted(2026))
        );
    }

    #[test]
    fn parse_refuses_other_shapes() {
        for s in [
            "",
            "2026-123",
            "2026-0001234",
            "26-000123",
            "2026000123",
            "2026-000000",
            "0999-000001",
            "+026-000123",
            "2026-+00123",
            "2026_000123",
            " 2026-000123",
            "2026-000123\n",
            "２０２６-000123",
        ] {
            assert_eq!(InvoiceNumber::parse(s), None, "{s:?}");
        }
    }

    #[test]
    fn year_is_utc() {
        let t = Timestamp::parse("2026-12-31T23:30:00-01:00").unwrap();
        assert_eq!(year_of(t), 2027);
        assert_eq!(
            year_of(Timestamp::parse("2026-01-01T00:00:00Z").unwrap()),
            2026
        );
        assert_eq!(year_of(Timestamp::from_millis(-1)), 1969);
    }

    fn number() -> impl Strategy<Value = InvoiceNumber> {
        (YEARS, SEQS).prop_map(|(y, s)| InvoiceNumber::new(y, s).unwrap())
    }

    proptest! {
        #[test]
        fn display_parse_round_trip(n in number()) {
            prop_assert_eq!(InvoiceNumber::parse(&n.to_string()), Some(n));
        }

        #[test]
        fn shape_is_fixed(n in number()) {
            let s = n.to_string();
            let b = s.as_bytes();
            prop_assert_eq!(b.len(), 11);
            prop_assert_eq!(b[4], b'-');
            prop_assert!(b[..4].iter().chain(&b[5..]).all(u8::is_ascii_digit));
        }

        /// For a fixed year the numbers sort like their strings (and across
        /// years too, since years have four digits).
        #[test]
        fn order_matches_strings(year in YEARS, a in SEQS, b in SEQS, other_year in YEARS) {
            let (x, y) = (InvoiceNumber::new(year, a).unwrap(), InvoiceNumber::new(year, b).unwrap());
            prop_assert_eq!(x.cmp(&y), x.to_string().cmp(&y.to_string()));
            let z = InvoiceNumber::new(other_year, b).unwrap();
            prop_assert_eq!(x.cmp(&z), x.to_string().cmp(&z.to_string()));
        }

        #[test]
        fn consecutive_seqs_increase(year in YEARS, seq in 1u32..999_999) {
            let n = InvoiceNumber::new(year, seq).unwrap();
            let m = n.next().unwrap();
            prop_assert_eq!(m.seq(), seq + 1);
            prop_assert!(n.to_string() < m.to_string());
            prop_assert!(n < m);
        }

        #[test]
        fn parse_never_panics(s in "\\PC{0,16}") {
            if let Some(n) = InvoiceNumber::parse(&s) {
                prop_assert_eq!(n.to_string(), s);
            }
        }
    }
}
