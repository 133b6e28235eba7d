//! Strong entity tags: an opaque digest of a resource's reference and version.
//!
//! Every write bumps a row's version, so the tag changes whenever the
//! resource does. Clients must treat the value as opaque.

use sha2::{Digest, Sha256};

/// The quoted strong ETag of `reference` at `version`.
pub fn etag(reference: &str, version: i64) -> String {
    let digest = Sha256::digest(format!("{reference}:{version}").as_bytes());
    format!("\"{}\"", &hex::encode(digest)[..24])
}

/// What an `If-Match` header asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IfMatch {
    Any,
    Tags(Vec<String>),
}

impl IfMatch {
    /// Parses the RFC 9110 list syntax (`*`, or a comma-separated list of
    /// quoted tags; weak tags never match a strong comparison).
    pub fn parse(header: &str) -> Option<IfMatch> {
        let h = header.trim();
        if h == "*" {
            return Some(IfMatch::Any);
        }
        let mut tags = Vec::new();
        for part in h.split(',') {
            let t = part.trim();
            if t.is_empty() {
                continue;
            }
            let inner = t.strip_prefix("W/").unwrap_or(t);
            let ok = inner.len() >= 2
                && inner.starts_with('"')
                && inner.ends_with('"')
                && !inner[1..inner.len() - 1].contains('"');
            if !ok {
                return None;
            }
            if !t.starts_with("W/") {
                tags.push(t.to_owned());
            }
        }
        if tags.is_empty() && !h.contains("W/") {
            return None;
        }
        Some(IfMatch::Tags(tags))
    }

    pub fn matches(&self, current: &str) -> bool {
        match self {
            IfMatch::Any => true,
            IfMatch::Tags(tags) => tags.iter().any(|t| t == current),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etag_changes_with_version() {
        assert_ne!(etag("sa_x", 1), etag("sa_x", 2));
        assert_eq!(etag("sa_x", 1), etag("sa_x", 1));
    }

    #[test]
    fn if_match_lists() {
        let a = etag("a", 1);
        let b = etag("b", 1);
        let h = IfMatch::parse(&format!("{a}, {b}")).unwrap();
        assert!(h.matches(&a) && h.matches(&b) && !h.matches(&etag("c", 1)));
        assert!(IfMatch::parse("*").unwrap().matches(&a));
        assert!(!IfMatch::parse(&format!("W/{a}")).unwrap().matches(&a));
        assert_eq!(IfMatch::parse("abc"), None);
        assert_eq!(IfMatch::parse(""), None);
    }
}
