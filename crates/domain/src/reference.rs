//! References: `<prefix>_` + 12 characters of `[A-Za-z0-9]` from a CSPRNG.
//!
//! A `Ref` can only be built by generating one or by parsing a string whose
//! prefix and shape are right, so a value of this type is always well-formed.

use rand::{distributions::Alphanumeric, Rng};
use std::fmt;

/// Length of the random part of every reference.
pub const BODY_LEN: usize = 12;

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
    /// A fresh reference from the thread's CSPRNG (ChaCha, seeded and
    /// periodically reseeded from the operating system). Sampling straight
    /// from `OsRng` made one `getrandom` system call per character, a
    /// visible share of the dispatcher's profile.
    pub fn generate(prefix: Prefix) -> Ref {
        let body: String = rand::thread_rng()
            .sample_iter(&Alphanumeric)
            .take(BODY_LEN)
            .map(char::from)
            .collect();
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
