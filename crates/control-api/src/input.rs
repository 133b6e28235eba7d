//! What a handler receives: path parameters, query, parsed body and the
//! precondition, with parsers that turn bad input into `validation_failed`
//! naming the offending field.

use crate::error::{ApiError, Detail};
use domain::etag::IfMatch;
use domain::{Cursor, Prefix, Ref};
use serde::de::DeserializeOwned;
use store::PageRequest;

pub const DEFAULT_LIMIT: u32 = 20;
pub const MAX_LIMIT: u32 = 100;

#[derive(Debug, Clone)]
pub struct Input {
    pub path: Vec<(String, String)>,
    pub query: Vec<(String, String)>,
    pub body: serde_json::Value,
    pub if_match: Option<IfMatch>,
}

impl Input {
    /// The path parameter `name` as a reference of kind `prefix`.
    pub fn path_ref(&self, name: &str, prefix: Prefix) -> Result<Ref, ApiError> {
        Ref::parse(prefix, self.path_str(name))
            .map_err(|e| ApiError::validation(name, e.to_string()))
    }

    pub fn path_str(&self, name: &str) -> &str {
        self.path
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .unwrap_or("")
    }

    /// The body as `T`; `T` should deny unknown fields. Every problem is
    /// reported with its dotted path.
    pub fn body<T: DeserializeOwned>(&self) -> Result<T, ApiError> {
        serde_path_to_error::deserialize(&self.body).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner().to_string();
            // serde names the missing or unknown field in its message only.
            // serde_path_to_error's path already ends with an unknown field,
            // but stops at the parent of a missing one.
            let missing = inner.starts_with("missing field");
            let field = match (path.as_str(), field_in_message(&inner)) {
                (".", Some(f)) => f,
                (".", None) => "body".to_owned(),
                (p, Some(f)) if missing => format!("{p}.{f}"),
                (p, _) => p.to_owned(),
            };
            ApiError::Validation(vec![Detail::new(field, clean_message(&inner))])
        })
    }

    /// The query parameters, refusing any not in `allowed` and repeats.
    pub fn query_params(&self, allowed: &[&str]) -> Result<Vec<(String, String)>, ApiError> {
        let mut details = Vec::new();
        for (i, (k, _)) in self.query.iter().enumerate() {
            if !allowed.contains(&k.as_str()) {
                details.push(Detail::new(k.clone(), "unknown query parameter"));
            } else if self.query[..i].iter().any(|(p, _)| p == k) {
                details.push(Detail::new(k.clone(), "given more than once"));
            }
        }
        if details.is_empty() {
            Ok(self.query.clone())
        } else {
            Err(ApiError::Validation(details))
        }
    }

    pub fn query_value(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// `limit` and `cursor` of a paged list whose scope is `scope`.
    pub fn page(&self, scope: &str) -> Result<PageRequest, ApiError> {
        let limit = match self.query_value("limit") {
            None => DEFAULT_LIMIT,
            Some(v) => v
                .parse::<u32>()
                .ok()
                .filter(|l| (1..=MAX_LIMIT).contains(l))
                .ok_or_else(|| ApiError::validation("limit", "must be an integer from 1 to 100"))?,
        };
        let after = match self.query_value("cursor") {
            None => None,
            Some(c) => {
                let c = Cursor::decode(c, scope)
                    .map_err(|e| ApiError::validation("cursor", e.to_string()))?;
                Some((c.created_at_ms, c.last_ref))
            }
        };
        Ok(PageRequest { limit, after })
    }

    /// Checks the precondition against the resource's current ETag.
    pub fn check_etag(&self, current: &str) -> Result<(), ApiError> {
        match &self.if_match {
            Some(m) if m.matches(current) => Ok(()),
            Some(_) => Err(ApiError::PreconditionFailed),
            None => Err(ApiError::PreconditionRequired),
        }
    }
}

fn field_in_message(msg: &str) -> Option<String> {
    let start = msg.find('`')? + 1;
    let len = msg[start..].find('`')?;
    let is_field_msg = msg.starts_with("missing field") || msg.starts_with("unknown field");
    is_field_msg.then(|| msg[start..start + len].to_owned())
}

fn clean_message(msg: &str) -> String {
    // Drop serde's list of expected fields: it is long and names internals.
    if msg.starts_with("unknown field") {
        if let Some(i) = msg.find(", expected one of") {
            return msg[..i].to_owned();
        }
        return msg.to_owned();
    }
    // Never echo a refused value: serde quotes it (`invalid type: string
    // "sk_test_…", expected i64`, ``unknown variant `…` ``), and a caller
    // may have put a secret there.
    let mut out = msg.to_owned();
    for (open, close) in [(" \"", "\", expected "), (" `", "`, expected ")] {
        if let (Some(o), Some(c)) = (out.find(open), out.rfind(close)) {
            if o < c {
                out = format!(
                    "{}{}",
                    &out[..o],
                    &out[c + close.len() - ", expected ".len()..]
                );
                break;
            }
        }
    }
    // `expected struct MoneyDto` would name an internal type.
    if let Some(i) = out.find("expected struct ") {
        out.truncate(i);
        out.push_str("expected an object");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[test]
    fn refused_values_are_never_echoed() {
        for (msg, want) in [
            (
                "invalid type: string \"sk_test_abc\", expected i64",
                "invalid type: string, expected i64",
            ),
            (
                "invalid value: string \"a\", expected \", expected x\", expected a date",
                "invalid value: string, expected a date",
            ),
            (
                "unknown variant `sk_test_abc`, expected one of `a`, `b`",
                "unknown variant, expected one of `a`, `b`",
            ),
            (
                "invalid type: string \"whsec_x\", expected struct MoneyDto",
                "invalid type: string, expected an object",
            ),
            (
                "unknown field `x`, expected one of `a`, `b`",
                "unknown field `x`",
            ),
            ("missing field `name`", "missing field `name`"),
        ] {
            assert_eq!(clean_message(msg), want, "{msg}");
        }
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Inner {
        value: String,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Outer {
        name: String,
        amount: Option<Inner>,
    }

    fn input(body: serde_json::Value) -> Input {
        Input {
            path: vec![],
            query: vec![],
            body,
            if_match: None,
        }
    }

    fn field_of(body: serde_json::Value) -> String {
        match input(body).body::<Outer>() {
            Err(ApiError::Validation(d)) => d[0].field.clone(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn details_name_dotted_fields() {
        assert_eq!(field_of(serde_json::json!({})), "name");
        assert_eq!(field_of(serde_json::json!({"name": 1})), "name");
        assert_eq!(field_of(serde_json::json!({"name": "a", "x": 1})), "x");
        assert_eq!(
            field_of(serde_json::json!({"name": "a", "amount": {"value": 1}})),
            "amount.value"
        );
        assert_eq!(
            field_of(serde_json::json!({"name": "a", "amount": {}})),
            "amount.value"
        );
    }
}
