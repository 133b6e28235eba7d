//! Keyset cursors for newest-first lists.
//!
//! A cursor names the last item of a page by `(created_at, ref)` and carries
//! the list's scope: the list's name and a digest of its filters. A cursor
//! presented to another list or with other filters is refused, so a client
//! can never page one list with another's position.

use base64::{engine::general_purpose::URL_SAFE_NO_PAD, Engine};
use sha2::{Digest, Sha256};

const VERSION: &str = "c1";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CursorError {
    #[error("the cursor is malformed")]
    Malformed,
    #[error("the cursor belongs to another list or filter")]
    WrongScope,
}

/// The position after which the next page starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    pub created_at_ms: i64,
    pub last_ref: String,
}

/// Identifies one list with one set of filters.
pub fn scope(list: &str, filters: &[(&str, Option<&str>)]) -> String {
    let mut h = Sha256::new();
    for (k, v) in filters {
        h.update(k.as_bytes());
        h.update([0]);
        match v {
            Some(v) => {
                h.update([1]);
                h.update(v.as_bytes());
            }
            None => h.update([0]),
        }
        h.update([0xff]);
    }
    format!("{list}.{}", &hex::encode(h.finalize())[..16])
}

impl Cursor {
    pub fn encode(&self, scope: &str) -> String {
        let raw = format!("{VERSION}|{scope}|{}|{}", self.created_at_ms, self.last_ref);
        URL_SAFE_NO_PAD.encode(raw)
    }

    pub fn decode(s: &str, scope: &str) -> Result<Cursor, CursorError> {
        if s.is_empty() || s.len() > 512 {
            return Err(CursorError::Malformed);
        }
        let raw = URL_SAFE_NO_PAD
            .decode(s)
            .map_err(|_| CursorError::Malformed)?;
        let raw = String::from_utf8(raw).map_err(|_| CursorError::Malformed)?;
        let mut parts = raw.splitn(4, '|');
        let (Some(v), Some(sc), Some(ms), Some(r)) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(CursorError::Malformed);
        };
        if v != VERSION {
            return Err(CursorError::Malformed);
        }
        let created_at_ms: i64 = ms.parse().map_err(|_| CursorError::Malformed)?;
        let ref_ok = !r.is_empty()
            && r.len() <= 64
            && r.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !ref_ok {
            return Err(CursorError::Malformed);
        }
        if sc != scope {
            return Err(CursorError::WrongScope);
        }
        Ok(Cursor {
            created_at_ms,
            last_ref: r.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn scope_depends_on_list_and_filters() {
        let a = scope("listRequestLogs", &[("status", Some("200"))]);
        let b = scope("listRequestLogs", &[("status", Some("201"))]);
        let c = scope("listRequestLogs", &[("status", None)]);
        let d = scope("listOther", &[("status", Some("200"))]);
        assert!(a != b && a != c && b != c && a != d);
    }

    proptest! {
        #[test]
        fn round_trips(ms in any::<i64>(), r in "[a-z]{2,4}_[A-Za-z0-9]{12}", list in "[a-zA-Z]{1,20}") {
            let sc = scope(&list, &[]);
            let c = Cursor { created_at_ms: ms, last_ref: r };
            prop_assert_eq!(Cursor::decode(&c.encode(&sc), &sc), Ok(c));
        }

        #[test]
        fn other_scope_is_refused(ms in any::<i64>(), r in "[a-z]{2,4}_[A-Za-z0-9]{12}") {
            let c = Cursor { created_at_ms: ms, last_ref: r };
            let s = c.encode(&scope("a", &[]));
            prop_assert_eq!(Cursor::decode(&s, &scope("b", &[])), Err(CursorError::WrongScope));
        }

        #[test]
        fn garbage_never_panics(s in "\\PC{0,80}") {
            let _ = Cursor::decode(&s, "x");
        }
    }
}
