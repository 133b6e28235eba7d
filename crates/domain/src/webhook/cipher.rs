//! Encryption at rest of webhook signing secrets: ChaCha20-Poly1305 with a
//! fresh random 96-bit nonce per message. The stored text is standard
//! base64 of `nonce || ciphertext || tag`, so it fits any text column.

use base64::{engine::general_purpose::STANDARD, Engine};
use chacha20poly1305::aead::{Aead, KeyInit};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use rand::{rngs::OsRng, RngCore};
use std::fmt;

const NONCE_LEN: usize = 12;

/// Authenticated encryption under one 256-bit key, and a second key
/// derived from it for references that must repeat (`reference_key`).
/// `Debug` never prints either.
#[derive(Clone)]
pub struct SecretCipher(ChaCha20Poly1305, [u8; 32]);

impl SecretCipher {
    pub fn new(key: [u8; 32]) -> Self {
        use hmac::{Hmac, Mac};
        let mut mac =
            <Hmac<sha2::Sha256> as Mac>::new_from_slice(&key).expect("HMAC takes any key length");
        mac.update(b"billing: keyed references");
        let refs = mac.finalize().into_bytes().into();
        SecretCipher(ChaCha20Poly1305::new(Key::from_slice(&key)), refs)
    }

    /// The key of `Ref::keyed` references: every process that shares the
    /// secret key derives the same one, and it reveals nothing of the
    /// encryption key.
    pub fn reference_key(&self) -> &[u8; 32] {
        &self.1
    }

    /// Parses a key as written in configuration: standard base64 of 32
    /// bytes, or 64 hexadecimal digits.
    pub fn parse_key(text: &str) -> Option<[u8; 32]> {
        let text = text.trim();
        let bytes = match hex::decode(text) {
            Ok(b) => b,
            Err(_) => STANDARD.decode(text).ok()?,
        };
        bytes.try_into().ok()
    }

    /// Encrypts under a random nonce; the same plaintext never encrypts to
    /// the same text twice.
    pub fn encrypt(&self, plaintext: &[u8]) -> String {
        let mut nonce = [0u8; NONCE_LEN];
        OsRng.fill_bytes(&mut nonce);
        let sealed = self
            .0
            .encrypt(Nonce::from_slice(&nonce), plaintext)
            .expect("ChaCha20-Poly1305 refuses only plaintexts of over 256 GiB");
        let mut out = nonce.to_vec();
        out.extend_from_slice(&sealed);
        STANDARD.encode(out)
    }

    /// The plaintext, or `None` if `text` is malformed, was encrypted under
    /// another key or was tampered with.
    pub fn decrypt(&self, text: &str) -> Option<Vec<u8>> {
        let raw = STANDARD.decode(text.trim()).ok()?;
        if raw.len() < NONCE_LEN {
            return None;
        }
        let (nonce, sealed) = raw.split_at(NONCE_LEN);
        self.0.decrypt(Nonce::from_slice(nonce), sealed).ok()
    }
}

impl fmt::Debug for SecretCipher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretCipher(***)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trip_fresh_nonces_and_tamper() {
        let c = SecretCipher::new([7; 32]);
        let a = c.encrypt(b"whsec_secret");
        let b = c.encrypt(b"whsec_secret");
        assert_ne!(a, b);
        assert_eq!(c.decrypt(&a).as_deref(), Some(&b"whsec_secret"[..]));
        assert_eq!(SecretCipher::new([8; 32]).decrypt(&a), None);
        let mut raw = STANDARD.decode(&a).unwrap();
        *raw.last_mut().unwrap() ^= 1;
        assert_eq!(c.decrypt(&STANDARD.encode(raw)), None);
        for bad in ["", "!!", "AAAA"] {
            assert_eq!(c.decrypt(bad), None);
        }
        assert_eq!(format!("{c:?}"), "SecretCipher(***)");
    }

    #[test]
    fn keys_from_configuration() {
        assert_eq!(SecretCipher::parse_key(&"ab".repeat(32)), Some([0xab; 32]));
        assert_eq!(
            SecretCipher::parse_key(&STANDARD.encode([3u8; 32])),
            Some([3; 32])
        );
        assert_eq!(SecretCipher::parse_key("abcd"), None);
        assert_eq!(SecretCipher::parse_key(&STANDARD.encode([3u8; 31])), None);
    }

    proptest! {
        #[test]
        fn decrypts_what_it_encrypts(key in any::<[u8; 32]>(), msg in any::<Vec<u8>>()) {
            let c = SecretCipher::new(key);
            prop_assert_eq!(c.decrypt(&c.encrypt(&msg)), Some(msg));
        }
    }
}
