//! References: `<prefix>_` + 12 characters of `[A-Za-z0-9]`.
//!
//! A `Ref` can only be built by generating one or by parsing a string whose
//! prefix and shape are right, so a value of this type is always well-formed.
//!
//! A generated body is 5 characters of the creation time, then 7 drawn from
//! a cryptographic random source (contract 7: about 41 bits that no other
//! reference tells; no counter). The time part is the count of 100 µs ticks
//! (`TICK_MICROS`) modulo 62^5 (it wraps about every 25 hours) in base 62,
//! digits before capitals before small letters, so that references made
//! one after another are neighbours in byte order: a reference is the key
//! of its row, and keys made moments apart share B-tree pages instead of
//! dirtying one page each per insert, and land at the index's right edge,
//! where PostgreSQL leaves a split page full. Byte order is not time order
//! across a wrap, and nothing may rely on it: lists order by creation time
//! first.
//!
//! The tick is fine enough that two requests made one after the other get
//! references in that order, and coarse enough that a wrap is rare: after
//! one, new keys land left of the kept ones, in the middle of the index,
//! where PostgreSQL splits a page in half and fills only one half, so an
//! index keyed by references grows by about half again of what it holds
//! until every key older than the wrap is gone (`docs/performance.md`).
//! Two references repeat only with the same tick and the same 7 random
//! characters (one chance in 3.5 * 10^12), and a store refuses a repeat as
//! a duplicate key, never overwrites. References are identifiers, not
//! secrets: nothing is authorised by knowing one (the contract answers
//! `not_found` across environments).

use rand::Rng;
use std::fmt;

/// Length of the body of every reference.
pub const BODY_LEN: usize = 12;
/// Characters of the body that hold the creation time.
const TIME_LEN: usize = 5;
/// Microseconds in one tick of the time part.
const TICK_MICROS: u64 = 100;
/// Ticks of the time part in one millisecond.
const TICKS_PER_MILLI: u64 = 1_000 / TICK_MICROS;
/// Microseconds between two wraps of a generated reference's time part
/// (62^5 ticks, about 25.4 hours).
const WRAP_MICROS: i128 = TICK_MICROS as i128 * 62i128.pow(TIME_LEN as u32);

/// The instants (Unix milliseconds, rounded down) in `from_millis..=to_millis`
/// at which a generated reference's time part wraps to zero: keys made after
/// one sort before those made just before it (see the module's
/// documentation). For a measurement to say that it met one.
pub fn time_part_wraps(from_millis: i64, to_millis: i64) -> Vec<i64> {
    let from = i128::from(from_millis) * 1_000;
    let to = i128::from(to_millis) * 1_000;
    let first = (from + WRAP_MICROS - 1).div_euclid(WRAP_MICROS) * WRAP_MICROS;
    std::iter::successors(Some(first), |at| Some(at + WRAP_MICROS))
        .take_while(|at| *at <= to)
        .map(|at| at.div_euclid(1_000) as i64)
        .collect()
}

/// Base-62 digits in ASCII order.
const DIGITS: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

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
    DeadLetter => "dlq", RedriveJob => "rdj", TestClock => "clk",
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
    /// A fresh reference: creation time, then random characters (see the
    /// module's documentation).
    pub fn generate(prefix: Prefix) -> Ref {
        let ticks = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| (d.as_micros() / u128::from(TICK_MICROS)) as u64);
        let mut body = [0u8; BODY_LEN];
        base62(ticks, &mut body[..TIME_LEN]);
        // `thread_rng` is a cryptographically secure generator, seeded
        // from the operating system and reseeded periodically.
        let mut rng = rand::thread_rng();
        for slot in &mut body[TIME_LEN..] {
            *slot = DIGITS[rng.gen_range(0..DIGITS.len())];
        }
        let body = std::str::from_utf8(&body).expect("base-62 digits are ASCII");
        Ref(format!("{}_{}", prefix.as_str(), body))
    }

    /// The reference `seed` always yields, shaped like a generated one:
    /// the time part from `at` (Unix milliseconds), the rest from the
    /// SHA-256 of `seed`. For a record kept inside another's row, whose
    /// reference is derived from that row rather than stored (a delivery's
    /// kept success, `store::webhooks::attempts`); two seeds share one
    /// only as two generated references would.
    pub fn derived(prefix: Prefix, at_millis: i64, seed: &str) -> Ref {
        use sha2::{Digest, Sha256};
        let mut body = [0u8; BODY_LEN];
        base62(
            (at_millis.max(0) as u64).saturating_mul(TICKS_PER_MILLI),
            &mut body[..TIME_LEN],
        );
        let digest = Sha256::digest(seed.as_bytes());
        let mut bits = u64::from_be_bytes(digest[..8].try_into().expect("8 bytes"));
        for slot in &mut body[TIME_LEN..] {
            *slot = DIGITS[(bits % 62) as usize];
            bits /= 62;
        }
        let body = std::str::from_utf8(&body).expect("base-62 digits are ASCII");
        Ref(format!("{}_{}", prefix.as_str(), body))
    }

    /// The reference that `seed` yields under `key`, a secret, shaped
    /// like a generated one made at `at_millis` (its sub-millisecond ticks
    /// drawn from the seed too): the same seed and key always yield it,
    /// and without the key it cannot be told from a generated one (the
    /// body is HMAC-SHA256 of the seed, a keyed pseudo-random function, so
    /// contract 7's rule that no reference is guessed from another holds).
    /// For a record that must keep its reference when it is made again
    /// after a crash: a delivery attempted before it was written
    /// (`store::Prepared`), whose `webhook-id` a receiver has seen.
    pub fn keyed(prefix: Prefix, at_millis: i64, key: &[u8; 32], seed: &str) -> Ref {
        use hmac::{Hmac, Mac};
        let mut mac =
            <Hmac<sha2::Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key length");
        mac.update(seed.as_bytes());
        let digest = mac.finalize().into_bytes();
        let mut bits = u64::from_be_bytes(digest[..8].try_into().expect("8 bytes"));
        let ticks = (at_millis.max(0) as u64)
            .saturating_mul(TICKS_PER_MILLI)
            .saturating_add(u64::from(digest[8]) % TICKS_PER_MILLI);
        let mut body = [0u8; BODY_LEN];
        base62(ticks, &mut body[..TIME_LEN]);
        for slot in &mut body[TIME_LEN..] {
            *slot = DIGITS[(bits % 62) as usize];
            bits /= 62;
        }
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
    fn the_time_part_wraps_where_a_generated_reference_sorts_first() {
        // 2026-12-02T00:07:10.4192Z, a multiple of 62^5 ticks of 100 µs.
        let wrap = 1_796_170_030_419;
        assert_eq!(time_part_wraps(wrap - 60_000, wrap + 60_000), vec![wrap]);
        assert!(time_part_wraps(wrap + 1, wrap + 90_000_000).is_empty());
        assert_eq!(time_part_wraps(wrap - 1, wrap + 91_613_284).len(), 2);
        // A derived reference's time part is a generated one's, at `at`.
        let time_part =
            |at| Ref::derived(Prefix::Event, at, "seed").as_str()[4..4 + TIME_LEN].to_owned();
        let (before, after) = (time_part(wrap - 1), time_part(wrap + 1));
        assert!(before.starts_with("zzzz"), "{before}");
        assert_eq!(after, "00008");
        assert!(
            after < before,
            "a reference made after the wrap sorts first"
        );
    }

    #[test]
    fn generated_refs_parse_back() {
        for p in Prefix::ALL {
            let r = Ref::generate(*p);
            assert_eq!(Ref::parse(*p, r.as_str()).unwrap(), r);
        }
    }

    #[test]
    fn derived_refs_parse_back_and_follow_their_seed() {
        let at = 1_796_000_000_000;
        let a = Ref::derived(Prefix::DeliveryAttempt, at, "whd_0000000000001/1");
        assert_eq!(Ref::parse(Prefix::DeliveryAttempt, a.as_str()).unwrap(), a);
        assert_eq!(
            a,
            Ref::derived(Prefix::DeliveryAttempt, at, "whd_0000000000001/1")
        );
        assert_ne!(
            a,
            Ref::derived(Prefix::DeliveryAttempt, at, "whd_0000000000001/2")
        );
        // Its time part is a generated reference's at the same moment.
        assert_eq!(
            &a.as_str()[4..4 + TIME_LEN],
            &Ref::derived(Prefix::DeliveryAttempt, at, "other").as_str()[4..4 + TIME_LEN]
        );
    }

    #[test]
    fn keyed_refs_follow_seed_and_key_and_parse_back() {
        let at = 1_796_000_000_000;
        let key = [3u8; 32];
        let seed = "evt_000000000001/whep_00000000001/2";
        let a = Ref::keyed(Prefix::WebhookDelivery, at, &key, seed);
        assert_eq!(Ref::parse(Prefix::WebhookDelivery, a.as_str()).unwrap(), a);
        assert_eq!(a, Ref::keyed(Prefix::WebhookDelivery, at, &key, seed));
        assert_ne!(a, Ref::keyed(Prefix::WebhookDelivery, at, &[4u8; 32], seed));
        assert_ne!(a, Ref::keyed(Prefix::WebhookDelivery, at, &key, "other"));
        // Its time part is within the millisecond of `at`.
        let generated_at = |millis: i64| Ref::derived(Prefix::WebhookDelivery, millis, "");
        let time = |r: &Ref| r.as_str()[4..4 + TIME_LEN].to_owned();
        assert!(time(&generated_at(at)) <= time(&a));
        assert!(time(&a) < time(&generated_at(at + 1)));
    }

    proptest! {
        #[test]
        fn keyed_refs_of_distinct_seeds_differ(a in "[a-z0-9/]{1,40}", b in "[a-z0-9/]{1,40}") {
            prop_assume!(a != b);
            let key = [9u8; 32];
            let at = 1_796_000_000_000;
            prop_assert_ne!(
                Ref::keyed(Prefix::WebhookDelivery, at, &key, &a),
                Ref::keyed(Prefix::WebhookDelivery, at, &key, &b)
            );
        }
    }

    #[test]
    fn generated_refs_are_distinct_and_neighbours() {
        let refs: Vec<Ref> = (0..10_000).map(|_| Ref::generate(Prefix::Event)).collect();
        let unique: std::collections::HashSet<&Ref> = refs.iter().collect();
        assert_eq!(unique.len(), refs.len());
        // The time part never goes back, but where it wrapped (at most once here).
        let time = |r: &Ref| r.as_str()[4..4 + TIME_LEN].to_owned();
        let descents = refs
            .windows(2)
            .filter(|w| time(&w[0]) > time(&w[1]))
            .count();
        assert!(descents <= 1, "{descents} time parts out of order");
    }

    #[test]
    fn the_time_part_wraps_no_sooner_than_a_day() {
        const {
            assert!(
                WRAP_MICROS >= 24 * 3_600 * 1_000_000,
                "the time part wraps within a day"
            )
        };
    }

    #[test]
    fn references_made_ticks_apart_are_in_order() {
        let time = |r: &Ref| r.as_str()[4..4 + TIME_LEN].to_owned();
        for _ in 0..20 {
            let a = Ref::generate(Prefix::Product);
            std::thread::sleep(std::time::Duration::from_micros(2 * TICK_MICROS));
            let b = Ref::generate(Prefix::Product);
            // Unless the time part wrapped in between (once a day).
            assert!(
                time(&a) < time(&b) || time(&b).as_str() < "00005",
                "{a} then {b}"
            );
        }
    }

    #[test]
    fn the_random_part_is_not_a_counter() {
        // Seven characters per reference are random: across many
        // references made within one tick, every position takes many values.
        let refs: Vec<String> = (0..2_000)
            .map(|_| Ref::generate(Prefix::Event).into_string())
            .collect();
        for position in 4 + TIME_LEN..4 + BODY_LEN {
            let seen: std::collections::HashSet<u8> =
                refs.iter().map(|r| r.as_bytes()[position]).collect();
            assert!(
                seen.len() > 50,
                "position {position}: {} values",
                seen.len()
            );
        }
        // Two consecutive references share no random suffix.
        for w in refs.windows(2) {
            assert_ne!(w[0][4 + TIME_LEN..], w[1][4 + TIME_LEN..]);
        }
    }

    #[test]
    fn base62_keeps_numeric_order_in_byte_order() {
        let encode = |v: u64| {
            let mut out = [0u8; TIME_LEN];
            base62(v, &mut out);
            out
        };
        assert_eq!(&encode(0), b"00000");
        assert_eq!(&encode(61), b"0000z");
        assert_eq!(&encode(62), b"00010");
        for (a, b) in [(1u64, 2u64), (61, 62), (900_000_000, 900_000_001)] {
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
        fn base62_is_monotonic(a in 0u64..62u64.pow(5), b in 0u64..62u64.pow(5)) {
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
