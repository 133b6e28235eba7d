//! The console's session cookie and CSRF tokens, kept by no process: a
//! session is `credential_ref`, `environment_ref`, an expiry and a random
//! nonce, MACed (HMAC-SHA256) with a key derived from the service's
//! secrets key, so that every API process of a fleet accepts the sessions
//! of the others and nothing about them is stored. The credential's
//! secret is never in it: a session names a credential, and every request
//! reads that credential again (`control_api::auth::caller_of_credential`),
//! so revoking it ends its sessions at once.
//!
//! A state change carries a CSRF token, the MAC of its session's nonce;
//! the sign-in form, before any session, the MAC of a nonce kept in a
//! short-lived cookie of its own.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use domain::{Prefix, Ref, Timestamp};
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// The session cookie's name.
pub const COOKIE: &str = "billing_console";
/// The sign-in form's cookie (its CSRF nonce).
pub const SIGN_IN_COOKIE: &str = "billing_console_sign_in";
/// How long a session lasts (contract 12.3: 12 h).
pub const LIFETIME_SECS: i64 = 12 * 3600;
/// How long a sign-in form may be used.
pub const SIGN_IN_SECS: i64 = 3600;

/// The key that MACs sessions and CSRF tokens.
#[derive(Clone)]
pub struct SessionKey([u8; 32]);

impl SessionKey {
    /// The console's key, derived from the service's secrets key (the one
    /// that encrypts signing secrets): never that key itself.
    pub fn derive(secrets_key: &[u8; 32]) -> SessionKey {
        SessionKey(mac(secrets_key, &[b"billing console session key v1"]))
    }

    fn mac(&self, parts: &[&[u8]]) -> [u8; 32] {
        mac(&self.0, parts)
    }

    /// A token for `purpose` and `nonce`.
    fn token(&self, purpose: &str, nonce: &str) -> String {
        URL_SAFE_NO_PAD.encode(self.mac(&[purpose.as_bytes(), nonce.as_bytes()]))
    }

    /// Whether `presented` is the token of `purpose` and `nonce`, compared
    /// in constant time.
    fn check(&self, purpose: &str, nonce: &str, presented: &str) -> bool {
        let expected = self.token(purpose, nonce);
        expected.as_bytes().ct_eq(presented.as_bytes()).into()
    }

    /// The sign-in form's CSRF token for the nonce of its cookie.
    pub fn sign_in_token(&self, nonce: &str) -> String {
        self.token("sign-in", nonce)
    }

    pub fn check_sign_in_token(&self, nonce: &str, presented: &str) -> bool {
        self.check("sign-in", nonce, presented)
    }
}

/// HMAC-SHA256 of `parts`, each prefixed with its length so that no two
/// lists of parts give the same input.
fn mac(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes a key of any size");
    for p in parts {
        m.update(&(p.len() as u64).to_be_bytes());
        m.update(p);
    }
    m.finalize().into_bytes().into()
}

/// A fresh random nonce (16 bytes, base64url).
pub fn nonce() -> String {
    let mut bytes = [0u8; 16];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
}

/// A signed-in session.
#[derive(Debug, Clone)]
pub struct Session {
    pub credential_ref: Ref,
    pub environment_ref: Ref,
    pub expires_at: Timestamp,
    nonce: String,
}

impl Session {
    /// A new session of a credential, from `now` for `LIFETIME_SECS`.
    pub fn new(credential_ref: Ref, environment_ref: Ref, now: Timestamp) -> Session {
        Session {
            credential_ref,
            environment_ref,
            expires_at: now.plus_seconds(LIFETIME_SECS),
            nonce: nonce(),
        }
    }

    fn signed_part(&self) -> String {
        format!(
            "v1.{}.{}.{}.{}",
            self.credential_ref.as_str(),
            self.environment_ref.as_str(),
            self.expires_at.millis(),
            self.nonce
        )
    }

    /// The cookie's value: the session and its MAC.
    pub fn encode(&self, key: &SessionKey) -> String {
        let signed = self.signed_part();
        let tag = URL_SAFE_NO_PAD.encode(key.mac(&[b"session", signed.as_bytes()]));
        format!("{signed}.{tag}")
    }

    /// The session of a cookie's value, if its MAC holds and it has not
    /// expired by `now`.
    pub fn decode(value: &str, key: &SessionKey, now: Timestamp) -> Option<Session> {
        let (signed, tag) = value.rsplit_once('.')?;
        let expected = URL_SAFE_NO_PAD.encode(key.mac(&[b"session", signed.as_bytes()]));
        if !bool::from(expected.as_bytes().ct_eq(tag.as_bytes())) {
            return None;
        }
        let mut parts = signed.split('.');
        if parts.next()? != "v1" {
            return None;
        }
        let credential_ref = Ref::parse(Prefix::Credential, parts.next()?).ok()?;
        let environment_ref = Ref::parse(Prefix::Environment, parts.next()?).ok()?;
        let expires_at = Timestamp::from_millis(parts.next()?.parse().ok()?);
        let nonce = parts.next()?.to_owned();
        if parts.next().is_some() || expires_at.millis() <= now.millis() {
            return None;
        }
        Some(Session {
            credential_ref,
            environment_ref,
            expires_at,
            nonce,
        })
    }

    /// The CSRF token every state change of this session carries.
    pub fn csrf_token(&self, key: &SessionKey) -> String {
        key.token("csrf", &self.nonce)
    }

    pub fn check_csrf(&self, key: &SessionKey, presented: &str) -> bool {
        key.check("csrf", &self.nonce, presented)
    }
}

/// A `Set-Cookie` value; `secure` adds `Secure` (every listener but a
/// loopback one).
pub fn set_cookie(name: &str, value: &str, max_age_secs: i64, secure: bool) -> String {
    format!(
        "{name}={value}; Path=/console; HttpOnly; SameSite=Strict; Max-Age={max_age_secs}{}",
        if secure { "; Secure" } else { "" }
    )
}

/// The values of the cookies named `name` a request carries.
pub fn cookies<'a>(headers: &'a axum::http::HeaderMap, name: &'a str) -> Vec<&'a str> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .filter(|(k, _)| *k == name)
        .map(|(_, v)| v)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> SessionKey {
        SessionKey::derive(&[7u8; 32])
    }

    fn session(now: Timestamp) -> Session {
        Session::new(
            Ref::generate(Prefix::Credential),
            Ref::generate(Prefix::Environment),
            now,
        )
    }

    #[test]
    fn a_session_survives_its_cookie() {
        let now = Timestamp::now();
        let s = session(now);
        let back = Session::decode(&s.encode(&key()), &key(), now).expect("valid");
        assert_eq!(back.credential_ref, s.credential_ref);
        assert_eq!(back.environment_ref, s.environment_ref);
        assert!(back.check_csrf(&key(), &s.csrf_token(&key())));
    }

    #[test]
    fn a_tampered_expired_or_foreign_cookie_is_refused() {
        let now = Timestamp::now();
        let s = session(now);
        let value = s.encode(&key());
        let other = SessionKey::derive(&[8u8; 32]);
        assert!(
            Session::decode(&value, &other, now).is_none(),
            "another key"
        );
        let later = now.plus_seconds(LIFETIME_SECS + 1);
        assert!(Session::decode(&value, &key(), later).is_none(), "expired");
        let forged = value.replacen(
            s.credential_ref.as_str(),
            Ref::generate(Prefix::Credential).as_str(),
            1,
        );
        assert!(Session::decode(&forged, &key(), now).is_none(), "edited");
        assert!(Session::decode("v1.x", &key(), now).is_none());
        assert!(Session::decode("", &key(), now).is_none());
    }

    #[test]
    fn csrf_tokens_are_per_session() {
        let now = Timestamp::now();
        let (a, b) = (session(now), session(now));
        assert!(!a.check_csrf(&key(), &b.csrf_token(&key())));
        assert!(!a.check_csrf(&key(), ""));
    }

    #[test]
    fn cookies_are_found_by_name() {
        let mut h = axum::http::HeaderMap::new();
        h.insert("cookie", "a=1; billing_console=xyz; b=2".parse().unwrap());
        assert_eq!(cookies(&h, COOKIE), vec!["xyz"]);
    }
}
