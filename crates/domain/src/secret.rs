//! Credential secrets: `sk_test_` (sandbox) or `sk_live_` (live) followed by
//! 32 base62 characters. Only their SHA-256 digest is ever stored; a secret
//! is high-entropy random, so a fast digest is enough to make the stored
//! value useless to a reader of the database.

use crate::principal::Mode;
use rand::{distributions::Alphanumeric, rngs::OsRng, Rng};
use sha2::{Digest, Sha256};
use std::fmt;
use subtle::ConstantTimeEq;

const BODY_LEN: usize = 32;

/// A plaintext credential secret. `Debug` never prints it.
#[derive(Clone, PartialEq, Eq)]
pub struct CredentialSecret(String);

impl CredentialSecret {
    pub fn generate(mode: Mode) -> CredentialSecret {
        let body: String = OsRng
            .sample_iter(&Alphanumeric)
            .take(BODY_LEN)
            .map(char::from)
            .collect();
        CredentialSecret(format!("{}{}", prefix(mode), body))
    }

    /// Parses a presented secret; `None` if it has the wrong shape.
    pub fn parse(s: &str) -> Option<CredentialSecret> {
        let body = s
            .strip_prefix(prefix(Mode::Sandbox))
            .or_else(|| s.strip_prefix(prefix(Mode::Live)))?;
        (body.len() == BODY_LEN && body.bytes().all(|b| b.is_ascii_alphanumeric()))
            .then(|| CredentialSecret(s.to_owned()))
    }

    pub fn mode(&self) -> Mode {
        if self.0.starts_with(prefix(Mode::Live)) {
            Mode::Live
        } else {
            Mode::Sandbox
        }
    }

    /// The digest stored in place of the secret.
    pub fn digest(&self) -> String {
        hex::encode(Sha256::digest(self.0.as_bytes()))
    }

    /// Last four characters, safe to show.
    pub fn hint(&self) -> String {
        self.0[self.0.len() - 4..].to_owned()
    }

    /// The plaintext, for the one response that issues it.
    pub fn reveal(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for CredentialSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CredentialSecret(***)")
    }
}

fn prefix(mode: Mode) -> &'static str {
    match mode {
        Mode::Sandbox => "sk_test_",
        Mode::Live => "sk_live_",
    }
}

/// Constant-time comparison of two stored digests.
pub fn digests_equal(a: &str, b: &str) -> bool {
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_secrets_parse_and_hide() {
        let s = CredentialSecret::generate(Mode::Live);
        assert!(s.reveal().starts_with("sk_live_") && s.reveal().len() == 40);
        assert_eq!(CredentialSecret::parse(s.reveal()).unwrap(), s);
        assert_eq!(s.mode(), Mode::Live);
        assert!(!format!("{s:?}").contains(&s.reveal()[8..]));
        assert!(digests_equal(&s.digest(), &s.digest()));
    }

    #[test]
    fn bad_shapes() {
        for bad in [
            "",
            "sk_test_",
            "sk_prod_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            "sk_test_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!",
        ] {
            assert!(CredentialSecret::parse(bad).is_none(), "{bad}");
        }
    }
}
