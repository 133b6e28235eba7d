//! Webhook signing secrets and signatures, per Standard Webhooks v1: a
//! secret is `whsec_` + standard base64 of 32 random bytes, and a signature
//! is `v1,` + base64 of HMAC-SHA256 over `"{msg_id}.{timestamp}.{body}"`.
//! A request carries one signature per signing secret version, separated by
//! spaces, so receivers keep verifying across a rotation.

use base64::{engine::general_purpose::STANDARD, Engine};
use hmac::{Hmac, Mac};
use rand::{rngs::OsRng, RngCore};
use sha2::Sha256;
use std::fmt;
use subtle::ConstantTimeEq;

const PREFIX: &str = "whsec_";
const SCHEME: &str = "v1,";

/// A webhook signing key. `Debug` never prints it.
#[derive(Clone)]
pub struct SigningSecret([u8; 32]);

impl SigningSecret {
    /// A fresh secret from the operating system's random source.
    pub fn generate() -> Self {
        let mut key = [0u8; 32];
        OsRng.fill_bytes(&mut key);
        SigningSecret(key)
    }

    pub fn from_bytes(b: [u8; 32]) -> Self {
        SigningSecret(b)
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Parses `whsec_` + standard base64 of exactly 32 bytes.
    pub fn parse(wire: &str) -> Option<Self> {
        let decoded = STANDARD.decode(wire.strip_prefix(PREFIX)?).ok()?;
        Some(SigningSecret(decoded.try_into().ok()?))
    }

    /// The secret as shown once to its owner: `whsec_...`.
    pub fn to_wire(&self) -> String {
        format!("{PREFIX}{}", STANDARD.encode(self.0))
    }

    /// The last four characters of [`Self::to_wire`], safe to show.
    pub fn hint(&self) -> String {
        let wire = self.to_wire();
        wire[wire.len() - 4..].to_owned()
    }
}

impl PartialEq for SigningSecret {
    fn eq(&self, other: &Self) -> bool {
        self.0.ct_eq(&other.0).into()
    }
}

impl Eq for SigningSecret {}

impl fmt::Debug for SigningSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SigningSecret(***)")
    }
}

fn mac(key: &[u8], msg_id: &str, timestamp: i64, body: &[u8]) -> [u8; 32] {
    let mut m =
        <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC-SHA256 accepts keys of any length");
    m.update(msg_id.as_bytes());
    m.update(b".");
    m.update(timestamp.to_string().as_bytes());
    m.update(b".");
    m.update(body);
    m.finalize().into_bytes().into()
}

fn sign_with_key(key: &[u8], msg_id: &str, timestamp: i64, body: &[u8]) -> String {
    format!(
        "{SCHEME}{}",
        STANDARD.encode(mac(key, msg_id, timestamp, body))
    )
}

/// `v1,` + base64(HMAC-SHA256(key, `"{msg_id}.{timestamp}.{body}"`)), with
/// `timestamp` in Unix seconds.
pub fn sign(secret: &SigningSecret, msg_id: &str, timestamp: i64, body: &[u8]) -> String {
    sign_with_key(&secret.0, msg_id, timestamp, body)
}

/// The `webhook-signature` header value: one signature per secret,
/// space-separated, in the order given.
pub fn signature_header(
    secrets: &[SigningSecret],
    msg_id: &str,
    timestamp: i64,
    body: &[u8],
) -> String {
    secrets
        .iter()
        .map(|s| sign(s, msg_id, timestamp, body))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether any `v1` signature of `header` is valid for `secret`, compared in
/// constant time; other schemes are ignored. For tests and tools: it does
/// not check the timestamp's age.
pub fn verify(
    secret: &SigningSecret,
    msg_id: &str,
    timestamp: i64,
    body: &[u8],
    header: &str,
) -> bool {
    let expected = mac(&secret.0, msg_id, timestamp, body);
    header
        .split_whitespace()
        .filter_map(|sig| sig.strip_prefix(SCHEME))
        .filter_map(|b64| STANDARD.decode(b64).ok())
        .fold(false, |found, got| found | bool::from(got.ct_eq(&expected)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The Standard Webhooks reference vector (its secret is 24 bytes).
    #[test]
    fn standard_webhooks_reference_vector() {
        let key = STANDARD.decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let sig = sign_with_key(
            &key,
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    /// Computed with the official Python `standardwebhooks` 1.1.0 library:
    /// `Webhook(secret).sign("whd_AbCdEfGhIjKl", 1700000000, body)`.
    #[test]
    fn matches_the_python_library() {
        let secret =
            SigningSecret::parse("whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=").unwrap();
        let mut bytes = [0u8; 32];
        bytes.iter_mut().enumerate().for_each(|(i, b)| *b = i as u8);
        assert_eq!(secret, SigningSecret::from_bytes(bytes));
        let body = br#"{"event_ref":"evt_AbCdEfGhIjKl","data":{}}"#;
        let sig = sign(&secret, "whd_AbCdEfGhIjKl", 1_700_000_000, body);
        assert_eq!(sig, "v1,8H1bx+zSUL5XBWj11BQpPGjgUxv50JuhlsBpkybgTck=");
        assert!(verify(
            &secret,
            "whd_AbCdEfGhIjKl",
            1_700_000_000,
            body,
            &sig
        ));
        assert!(!verify(
            &secret,
            "whd_AbCdEfGhIjKl",
            1_700_000_001,
            body,
            &sig
        ));
    }

    #[test]
    fn secrets_round_trip_and_hide() {
        let s = SigningSecret::generate();
        let wire = s.to_wire();
        assert!(wire.starts_with("whsec_") && wire.len() == 6 + 44);
        assert_eq!(SigningSecret::parse(&wire), Some(s.clone()));
        assert_eq!(s.hint(), &wire[wire.len() - 4..]);
        assert_eq!(format!("{s:?}"), "SigningSecret(***)");
        for bad in [
            "",
            "whsec_",
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            &wire[6..],
            &format!("whsec_{}!", &wire[6..]),
        ] {
            assert!(SigningSecret::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn header_carries_one_signature_per_secret() {
        let (a, b) = (SigningSecret::generate(), SigningSecret::generate());
        let h = signature_header(&[a.clone(), b.clone()], "whd_x", 5, b"{}");
        assert_eq!(h.split(' ').count(), 2);
        assert!(verify(&a, "whd_x", 5, b"{}", &h) && verify(&b, "whd_x", 5, b"{}", &h));
        let c = SigningSecret::generate();
        assert!(!verify(&c, "whd_x", 5, b"{}", &h));
        assert!(!verify(&a, "whd_x", 5, b"{}", "v2,abc v1,!!"));
        assert_eq!(signature_header(&[], "whd_x", 5, b"{}"), "");
    }

    proptest! {
        #[test]
        fn any_change_breaks_the_signature(key in any::<[u8; 32]>(), body in any::<Vec<u8>>(), ts in any::<i64>(), flip in any::<usize>()) {
            let s = SigningSecret::from_bytes(key);
            let sig = sign(&s, "whd_AbCdEfGhIjKl", ts, &body);
            prop_assert!(verify(&s, "whd_AbCdEfGhIjKl", ts, &body, &sig));
            if !body.is_empty() {
                let mut other = body.clone();
                other[flip % body.len()] ^= 1;
                prop_assert!(!verify(&s, "whd_AbCdEfGhIjKl", ts, &other, &sig));
            }
            prop_assert!(!verify(&s, "whd_AbCdEfGhIjKm", ts, &body, &sig));
        }
    }
}
