//! The identity of a store: made once, when the store is first migrated,
//! and kept in it for good (`store_identity`). A fleet names what it keeps
//! outside its store after it: its Redis keys and its RabbitMQ queue by
//! default, and the marker that says Redis holds its schedule. Two stores
//! sharing one Redis or one virtual host therefore never take each other's
//! work unless an operator names the same keys for both.
//!
//! 16 characters of `[a-z0-9]` (about 82 bits from a cryptographic random
//! source): safe in a Redis key and a RabbitMQ queue name as it is.

use rand::Rng;
use std::fmt;

/// Characters of an identity.
pub const LEN: usize = 16;
const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";

/// A well-formed store identity.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct StoreId(String);

impl StoreId {
    /// A fresh identity.
    pub fn generate() -> StoreId {
        // `thread_rng` is a cryptographically secure generator.
        let mut rng = rand::thread_rng();
        let id = (0..LEN)
            .map(|_| char::from(DIGITS[rng.gen_range(0..DIGITS.len())]))
            .collect();
        StoreId(id)
    }

    /// `s` as an identity, if it has the shape of one.
    pub fn parse(s: &str) -> Option<StoreId> {
        (s.len() == LEN
            && s.bytes()
                .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase()))
        .then(|| StoreId(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for StoreId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for StoreId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StoreId({})", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_identity_parses_back() {
        let a = StoreId::generate();
        assert_eq!(StoreId::parse(a.as_str()), Some(a.clone()));
        assert_ne!(a, StoreId::generate());
    }

    #[test]
    fn only_the_shape_parses() {
        for bad in [
            "",
            "abc",
            "ABCDEFGHIJKLMNOP",
            "abcdefghijklmno:",
            "abcdefghijklmnopq",
        ] {
            assert_eq!(StoreId::parse(bad), None, "{bad}");
        }
        assert!(StoreId::parse("0123456789abcdef").is_some());
    }
}
