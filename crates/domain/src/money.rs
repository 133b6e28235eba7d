//! Money: an ISO 4217 currency and an amount in minor units, on the wire as
//! `{"currency": "EUR", "unit": "minor", "value": "1999"}`.
//!
//! Arithmetic is exact `u64` arithmetic with overflow checks; amounts of
//! different currencies never mix. Values are limited to 18 digits so that
//! every valid amount fits and sums of two never wrap silently.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Largest value the wire format allows: 18 decimal digits.
pub const MAX_VALUE: u64 = 999_999_999_999_999_999;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MoneyError {
    #[error("currency must be a three-letter upper-case ISO 4217 code")]
    BadCurrency,
    #[error("unit must be `minor`")]
    BadUnit,
    #[error("value must be 1 to 18 decimal digits without sign or leading zeros")]
    BadValue,
    #[error("amounts of different currencies cannot be combined")]
    CurrencyMismatch,
    #[error("the result is out of range")]
    Overflow,
}

/// A three-letter upper-case currency code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Currency([u8; 3]);

impl Currency {
    pub fn parse(s: &str) -> Result<Currency, MoneyError> {
        let b = s.as_bytes();
        if b.len() == 3 && b.iter().all(u8::is_ascii_uppercase) {
            Ok(Currency([b[0], b[1], b[2]]))
        } else {
            Err(MoneyError::BadCurrency)
        }
    }

    pub fn as_str(&self) -> &str {
        // Only ASCII upper-case letters are ever stored.
        std::str::from_utf8(&self.0).unwrap_or("XXX")
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Money {
    currency: Currency,
    minor: u64,
}

/// The wire shape, before validation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MoneyWire {
    pub currency: String,
    pub unit: String,
    pub value: String,
}

impl Money {
    pub fn new(currency: Currency, minor: u64) -> Result<Money, MoneyError> {
        if minor > MAX_VALUE {
            return Err(MoneyError::Overflow);
        }
        Ok(Money { currency, minor })
    }

    pub fn zero(currency: Currency) -> Money {
        Money { currency, minor: 0 }
    }

    pub fn currency(&self) -> Currency {
        self.currency
    }

    pub fn minor(&self) -> u64 {
        self.minor
    }

    /// Parses the `value` string of the wire form.
    pub fn parse_value(s: &str) -> Result<u64, MoneyError> {
        let b = s.as_bytes();
        let well_formed = !b.is_empty()
            && b.len() <= 18
            && b.iter().all(u8::is_ascii_digit)
            && (b[0] != b'0' || b.len() == 1);
        if !well_formed {
            return Err(MoneyError::BadValue);
        }
        s.parse().map_err(|_| MoneyError::BadValue)
    }

    pub fn from_wire(w: &MoneyWire) -> Result<Money, MoneyError> {
        let currency = Currency::parse(&w.currency)?;
        if w.unit != "minor" {
            return Err(MoneyError::BadUnit);
        }
        Money::new(currency, Money::parse_value(&w.value)?)
    }

    pub fn to_wire(&self) -> MoneyWire {
        MoneyWire {
            currency: self.currency.as_str().to_owned(),
            unit: "minor".to_owned(),
            value: self.minor.to_string(),
        }
    }

    pub fn checked_add(self, other: Money) -> Result<Money, MoneyError> {
        self.same_currency(other)?;
        let sum = self
            .minor
            .checked_add(other.minor)
            .ok_or(MoneyError::Overflow)?;
        Money::new(self.currency, sum)
    }

    pub fn checked_sub(self, other: Money) -> Result<Money, MoneyError> {
        self.same_currency(other)?;
        let diff = self
            .minor
            .checked_sub(other.minor)
            .ok_or(MoneyError::Overflow)?;
        Money::new(self.currency, diff)
    }

    pub fn checked_mul(self, factor: u64) -> Result<Money, MoneyError> {
        let product = self.minor.checked_mul(factor).ok_or(MoneyError::Overflow)?;
        Money::new(self.currency, product)
    }

    fn same_currency(self, other: Money) -> Result<(), MoneyError> {
        if self.currency == other.currency {
            Ok(())
        } else {
            Err(MoneyError::CurrencyMismatch)
        }
    }
}

impl fmt::Display for Money {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.minor, self.currency.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn eur(v: u64) -> Money {
        Money::new(Currency::parse("EUR").unwrap(), v).unwrap()
    }

    #[test]
    fn wire_values() {
        for ok in ["0", "1", "1999", "999999999999999999"] {
            assert!(Money::parse_value(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "01",
            "-1",
            "+1",
            "1.5",
            " 1",
            "1e3",
            "1000000000000000000",
            "１",
        ] {
            assert!(Money::parse_value(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn currencies_never_mix() {
        let usd = Money::new(Currency::parse("USD").unwrap(), 1).unwrap();
        assert_eq!(eur(1).checked_add(usd), Err(MoneyError::CurrencyMismatch));
    }

    #[test]
    fn wire_round_trip_and_bad_fields() {
        let w = MoneyWire {
            currency: "EUR".into(),
            unit: "minor".into(),
            value: "1999".into(),
        };
        assert_eq!(Money::from_wire(&w).unwrap().to_wire(), w);
        let bad_unit = MoneyWire {
            unit: "major".into(),
            ..w.clone()
        };
        assert_eq!(Money::from_wire(&bad_unit), Err(MoneyError::BadUnit));
        let bad_cur = MoneyWire {
            currency: "eur".into(),
            ..w
        };
        assert_eq!(Money::from_wire(&bad_cur), Err(MoneyError::BadCurrency));
    }

    proptest! {
        #[test]
        fn value_round_trips(v in 0u64..=MAX_VALUE) {
            prop_assert_eq!(Money::parse_value(&v.to_string()), Ok(v));
        }

        #[test]
        fn parse_accepts_only_canonical_digits(s in "[0-9+\\- .]{0,20}") {
            let parsed = Money::parse_value(&s);
            match parsed {
                Ok(v) => prop_assert_eq!(v.to_string(), s),
                Err(_) => prop_assert!(s.parse::<u64>().map(|v| v.to_string() != s || v > MAX_VALUE).unwrap_or(true)),
            }
        }

        #[test]
        fn add_then_sub_is_identity(a in 0u64..=MAX_VALUE, b in 0u64..=MAX_VALUE) {
            match eur(a).checked_add(eur(b)) {
                Ok(sum) => {
                    prop_assert_eq!(sum.minor() as u128, a as u128 + b as u128);
                    prop_assert_eq!(sum.checked_sub(eur(b)).unwrap(), eur(a));
                }
                Err(e) => {
                    prop_assert_eq!(e, MoneyError::Overflow);
                    prop_assert!(a as u128 + b as u128 > MAX_VALUE as u128);
                }
            }
        }

        #[test]
        fn sub_never_goes_negative(a in 0u64..=MAX_VALUE, b in 0u64..=MAX_VALUE) {
            let r = eur(a).checked_sub(eur(b));
            prop_assert_eq!(r.is_ok(), a >= b);
        }

        #[test]
        fn mul_is_exact_or_overflows(a in 0u64..=MAX_VALUE, k in 0u64..1000) {
            let exact = a as u128 * k as u128;
            match eur(a).checked_mul(k) {
                Ok(m) => prop_assert_eq!(m.minor() as u128, exact),
                Err(_) => prop_assert!(exact > MAX_VALUE as u128),
            }
        }
    }
}
