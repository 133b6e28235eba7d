//! Buyers' e-mail addresses and names as a checkout session's `buyer` gives
//! them (contract 10.1, `docs/checkout.md`).
//!
//! An e-mail is kept exactly as first given and matched case-insensitively:
//! the buyer of a payment is found by [`Email::match_key`], and a stored
//! payment method belongs to a session's buyer when their keys are equal.
//! The check is deliberately shallow (one `@`, a dotted domain): the service
//! never sends mail, so it only refuses what cannot be an address. Both are
//! `contact` data; nothing here logs or stores them.

use std::fmt;

/// Bounds of an e-mail address, in characters.
const EMAIL_CHARS: std::ops::RangeInclusive<usize> = 3..=254;
/// Bounds of a buyer's name, in characters.
const NAME_CHARS: std::ops::RangeInclusive<usize> = 1..=200;

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("must be an e-mail address (local@domain.tld), 3 to 254 characters")]
pub struct EmailError;

/// An e-mail address, as given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Email(String);

impl Email {
    /// 3–254 characters, no whitespace or control characters, exactly one
    /// `@` with a non-empty local part before it, and a domain part that
    /// contains a `.` and neither starts nor ends with one.
    pub fn parse(s: &str) -> Result<Email, EmailError> {
        if !EMAIL_CHARS.contains(&s.chars().count())
            || s.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(EmailError);
        }
        let (local, domain) = s.split_once('@').ok_or(EmailError)?;
        if local.is_empty()
            || domain.contains('@')
            || !domain.contains('.')
            || domain.starts_with('.')
            || domain.ends_with('.')
        {
            return Err(EmailError);
        }
        Ok(Email(s.to_owned()))
    }

    /// The address exactly as given (what the buyer resource shows).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The key two addresses are compared by: lower-cased. It upper-cases
    /// first so that characters whose case mapping is not one-to-one still
    /// meet (`ß` and `SS` both give `ss`); for ASCII it is plain lower case.
    /// Compare keys computed here (stored beside the address), never a
    /// database's own `lower()`, whose Unicode rules differ.
    pub fn match_key(&self) -> String {
        self.0.to_uppercase().to_lowercase()
    }

    /// Whether two addresses name the same buyer.
    pub fn matches(&self, other: &Email) -> bool {
        self.match_key() == other.match_key()
    }
}

impl fmt::Display for Email {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("must be 1 to 200 characters")]
pub struct BuyerNameError;

/// A buyer's name (optional in a session's `buyer`), as given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuyerName(String);

impl BuyerName {
    pub fn parse(s: &str) -> Result<BuyerName, BuyerNameError> {
        if NAME_CHARS.contains(&s.chars().count()) {
            Ok(BuyerName(s.to_owned()))
        } else {
            Err(BuyerNameError)
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for BuyerName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn accepts() {
        for s in [
            "a@b.c",
            "Ada.Lovelace+billing@Example.COM",
            "x@sub.domain.example",
            "über@bücher.de",
            "o'brien@example.ie",
        ] {
            assert_eq!(Email::parse(s).unwrap().as_str(), s);
        }
        let longest = format!("{}@example.com", "a".repeat(254 - 12));
        assert_eq!(longest.chars().count(), 254);
        assert!(Email::parse(&longest).is_ok());
    }

    #[test]
    fn refuses() {
        let too_long = format!("{}@example.com", "a".repeat(254 - 11));
        for s in [
            "",
            "a@",
            "@b.c",
            "ab.c",
            "a@b",
            "a@.bc",
            "a@bc.",
            "a@b@c.d",
            "a b@c.d",
            "a@c.d ",
            " a@c.d",
            "a\t@c.d",
            "a@c.\u{7f}d",
            "a@c.\u{0}d",
            "a@c.d\n",
            "a\u{a0}b@c.d",
            too_long.as_str(),
        ] {
            assert_eq!(Email::parse(s), Err(EmailError), "{s:?}");
        }
        assert_eq!(
            EmailError.to_string(),
            "must be an e-mail address (local@domain.tld), 3 to 254 characters"
        );
    }

    #[test]
    fn length_counts_characters_not_bytes() {
        // 254 characters, more than 254 bytes.
        let s = format!("{}@b.de", "é".repeat(249));
        assert_eq!(s.chars().count(), 254);
        assert!(s.len() > 254);
        assert!(Email::parse(&s).is_ok());
    }

    #[test]
    fn match_key_is_case_insensitive() {
        let a = Email::parse("Ada@Example.COM").unwrap();
        let b = Email::parse("ada@example.com").unwrap();
        assert_eq!(a.match_key(), "ada@example.com");
        assert!(a.matches(&b));
        assert_ne!(a, b, "kept as given");
        assert_eq!(a.to_string(), "Ada@Example.COM");
        let c = Email::parse("straße@example.de").unwrap();
        let d = Email::parse("STRASSE@EXAMPLE.DE").unwrap();
        assert!(c.matches(&d));
        assert!(!a.matches(&c));
    }

    #[test]
    fn names() {
        assert_eq!(BuyerName::parse("Ada").unwrap().as_str(), "Ada");
        assert!(BuyerName::parse(&"é".repeat(200)).is_ok());
        assert_eq!(BuyerName::parse(""), Err(BuyerNameError));
        assert_eq!(BuyerName::parse(&"a".repeat(201)), Err(BuyerNameError));
        assert_eq!(BuyerNameError.to_string(), "must be 1 to 200 characters");
    }

    fn email_like() -> impl Strategy<Value = String> {
        "[a-zA-Z0-9._%+ßéÉıİΣσς-]{1,20}@[a-zA-Z0-9ßéÉ-]{1,10}\\.[a-zA-Z]{2,6}"
    }

    proptest! {
        #[test]
        fn match_key_ignores_case(s in email_like()) {
            let e = Email::parse(&s).unwrap();
            for other in [s.to_uppercase(), s.to_lowercase()] {
                if let Ok(o) = Email::parse(&other) {
                    prop_assert_eq!(o.match_key(), e.match_key());
                }
            }
            prop_assert_eq!(e.as_str(), s.as_str());
        }

        #[test]
        fn match_key_of_any_string_is_stable_under_upper_case(s in "\\PC{3,40}") {
            if let (Ok(e), Ok(u)) = (Email::parse(&s), Email::parse(&s.to_uppercase())) {
                prop_assert_eq!(e.match_key(), u.match_key());
            }
        }

        /// Whatever parses has the documented shape.
        #[test]
        fn parsed_addresses_have_the_shape(s in "[a@. \\t.x\u{0}-]{0,12}") {
            if let Ok(e) = Email::parse(&s) {
                let (local, domain) = e.as_str().split_once('@').unwrap();
                prop_assert!(!local.is_empty());
                prop_assert!(!domain.contains('@'));
                prop_assert!(domain.contains('.'));
                prop_assert!(!domain.starts_with('.') && !domain.ends_with('.'));
                prop_assert!(!e.as_str().chars().any(|c| c.is_whitespace() || c.is_control()));
            }
        }
    }
}
