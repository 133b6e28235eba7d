//! References: `<prefix>_` + 12 characters of `[A-Za-z0-9]`.
//!
//! A `Ref` can only be built by generating one or by parsing a string whose
//! prefix and shape are right, so a value of this type is always well-formed.
//!
//! A generated body is 7 characters of the creation time (Unix
//! milliseconds in base 62, digits before capitals before small letters, so
//! that byte order is time order) then 5 of a sequence that starts at a
//! random point in each process. Why not 12 random characters: a
//! reference is the key of its row, and random keys land on a different
//! B-tree page each, so every inserted delivery and attempt dirtied a page
//! of each of its key indexes, written out whole at each commit (a third of
//! the SQLite writer's time under load). Keys made moments apart now share
//! pages. Within a process two references never repeat (the sequence
//! would have to pass 916 million values in one millisecond); across
//! processes a repeat needs the same millisecond and overlapping
//! sequences, and a store refuses it as a duplicate key, never overwrites.
//! References are identifiers, not secrets: nothing is authorised by
//! knowing one (the contract answers `not_found` across environments).

use rand::Rng;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// Length of the body of every reference.
pub const BODY_LEN: usize = 12;
/// Characters of the body that hold the creation time.
const TIME_LEN: usize = 7;
/// Base-62 digits in ASCII order.
const DIGITS: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// The process's sequence, from a random start.
fn sequence() -> u64 {
    static NEXT: OnceLock<AtomicU64> = OnceLock::new();
    NEXT.get_or_init(|| AtomicU64::new(rand::thread_rng().gen()))
        .fetch_add(1, Ordering::Relaxed)
}

/// Writes `value` as `out.len()` base-62 digits, most significant first
/// (higher digits beyond the width are dropped).
fn base62(mut value: u64, out: &mut [u8]) {
    for slot in out.iter_mut().rev() {
        *slot = DIGITS[(value % 62) as usize];
        value /= 62;
    }
}

macro_rules! prefixes {
    ($($variant:ident => $p:literal),* $(,)?) => {
        /// Every kind of resource that has a reference, with its wire prefix.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Prefix { $($variant),* }

        impl Prefix {
            pub const ALL: &'static [Prefix] = &[$(Prefix::$variant),*];
            /// The prefix without its underscore (`sa`, `cred`, ...).
            pub fn as_str(self) -> &'static str {
                match self { $(Prefix::$variant => $p),* }
            }
        }
    };
}

prefixes! {
    Buyer => "buy", Capture => "cap", CheckoutConfig => "cco", CheckoutSession => "cs",
    Credential => "cred", CustomField => "cf", Dispute => "dsp", Entitlement => "ent",
    Environment => "env", Event => "evt", BeneficiaryBusiness => "biz", Invoice => "inv",
    Journey => "jrn", Offer => "ofr", Order => "ord", Participation => "ptc",
    Payment => "pay", Payout => "wd", Price => "pri", Product => "prd",
    Promotion => "prm", Refund => "ref", RequestLog => "req", ServiceAccount => "sa",
    StoredPaymentMethod => "spm", Subscription => "sub", SubscriptionChange => "sch",
    WebhookEndpoint => "whep", DeliveryAttempt => "wha", WebhookDelivery => "whd",
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RefError {
    #[error("must start with `{expected}_`")]
    WrongPrefix { expected: &'static str },
    #[error("must be `{expected}_` followed by 12 letters or digits")]
    BadShape { expected: &'static str },
}

/// A well-formed reference of a known kind.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ref(String);

impl Ref {
    /// A fresh reference: creation time, then the process's sequence (see
    /// the module's documentation).
    pub fn generate(prefix: Prefix) -> Ref {
        let millis = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let mut body = [0u8; BODY_LEN];
        base62(millis, &mut body[..TIME_LEN]);
        base62(sequence(), &mut body[TIME_LEN..]);
        let body = std::str::from_utf8(&body).expect("base-62 digits are ASCII");
        Ref(format!("{}_{}", prefix.as_str(), body))
    }

    /// Parses `s` as a reference of kind `prefix`.
    pub fn parse(prefix: Prefix, s: &str) -> Result<Ref, RefError> {
        let expected = prefix.as_str();
        let rest = s
            .strip_prefix(expected)
            .and_then(|r| r.strip_prefix('_'))
            .ok_or(RefError::WrongPrefix { expected })?;
        if rest.len() == BODY_LEN && rest.bytes().all(|b| b.is_ascii_alphanumeric()) {
            Ok(Ref(s.to_owned()))
        } else {
            Err(RefError::BadShape { expected })
        }
    }

    /// Trusts a value read back from our own store.
    pub fn from_trusted(s: String) -> Ref {
        Ref(s)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

impl fmt::Display for Ref {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Ref {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Ref({})", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn generated_refs_parse_back() {
        for p in Prefix::ALL {
            let r = Ref::generate(*p);
            assert_eq!(Ref::parse(*p, r.as_str()).unwrap(), r);
        }
    }

    #[test]
    fn generated_refs_are_distinct_and_in_creation_order() {
        let refs: Vec<Ref> = (0..10_000).map(|_| Ref::generate(Prefix::Event)).collect();
        let unique: std::collections::HashSet<&Ref> = refs.iter().collect();
        assert_eq!(unique.len(), refs.len());
        // In order but where the sequence wrapped (at most once here).
        let descents = refs.windows(2).filter(|w| w[0] >= w[1]).count();
        assert!(descents <= 1, "{descents} references out of order");
    }

    #[test]
    fn base62_keeps_numeric_order_in_byte_order() {
        let encode = |v: u64| {
            let mut out = [0u8; TIME_LEN];
            base62(v, &mut out);
            out
        };
        assert_eq!(&encode(0), b"0000000");
        assert_eq!(&encode(61), b"000000z");
        assert_eq!(&encode(62), b"0000010");
        for (a, b) in [
            (1u64, 2u64),
            (61, 62),
            (1_700_000_000_000, 1_700_000_000_001),
        ] {
            assert!(encode(a) < encode(b));
        }
    }

    #[test]
    fn wrong_prefix_is_refused() {
        let r = Ref::generate(Prefix::ServiceAccount);
        assert!(matches!(
            Ref::parse(Prefix::Credential, r.as_str()),
            Err(RefError::WrongPrefix { .. })
        ));
        // `ref_` and `req_` share no prefix confusion with `re`.
        assert!(Ref::parse(Prefix::Refund, "req_abcdefabcdef").is_err());
    }

    proptest! {
        #[test]
        fn base62_is_monotonic(a in 0u64..62u64.pow(7), b in 0u64..62u64.pow(7)) {
            let (mut x, mut y) = ([0u8; TIME_LEN], [0u8; TIME_LEN]);
            base62(a, &mut x);
            base62(b, &mut y);
            prop_assert_eq!(a.cmp(&b), x.cmp(&y));
        }

        #[test]
        fn parse_accepts_exactly_the_shape(body in "[A-Za-z0-9_\\-é]{0,16}") {
            let s = format!("sa_{body}");
            let ok = body.len() == 12 && body.bytes().all(|b| b.is_ascii_alphanumeric());
            prop_assert_eq!(Ref::parse(Prefix::ServiceAccount, &s).is_ok(), ok);
        }

        #[test]
        fn parse_never_accepts_other_prefixes(s in "\\PC{0,20}") {
            if let Ok(r) = Ref::parse(Prefix::Credential, &s) {
                prop_assert!(r.as_str().starts_with("cred_"));
                prop_assert_eq!(r.as_str().len(), 17);
            }
        }
    }
}
