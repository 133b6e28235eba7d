//! The assertion kit the black-box tests share: reading the envelope
//! (`text`, `items`, `refs`), asserting the contract's shapes (`is_ref`,
//! `is_ts`, `has_fields`, `etag_matches`) and errors (`invalid`,
//! `invalid_under`, `refused`), and building bodies (`money`, `eur`,
//! `later`, `at`). One copy here; a test file that needs a variant names it
//! differently.

use crate::Resp;
use domain::Timestamp;
use serde_json::{json, Value};

/// `{base}/{reference}{tail}`.
pub fn at(base: &str, reference: &str, tail: &str) -> String {
    format!("{base}/{reference}{tail}")
}

pub fn text(v: &Value) -> String {
    v.as_str()
        .unwrap_or_else(|| panic!("a string, not {v}"))
        .to_owned()
}

pub fn items(r: &Resp) -> Vec<Value> {
    r.expect(200);
    r.data()["items"].as_array().expect("items").clone()
}

pub fn refs(list: &[Value], field: &str) -> Vec<String> {
    list.iter().map(|i| text(&i[field])).collect()
}

/// Asserts `validation_failed` with a detail on `field`.
#[track_caller]
pub fn invalid(r: &Resp, field: &str) {
    r.expect_error(400, "validation_failed");
    assert!(
        r.fields().iter().any(|f| f == field),
        "expected a detail on `{field}`: {}",
        r.text
    );
}

/// Asserts `validation_failed` with a detail on `field` or inside it
/// (`amount`, `amount.value`, `line_items.0.quantity`, …).
#[track_caller]
pub fn invalid_under(r: &Resp, field: &str) {
    r.expect_error(400, "validation_failed");
    assert!(
        r.fields().iter().any(|f| f == field
            || f.starts_with(&format!("{field}."))
            || f.starts_with(&format!("{field}["))),
        "expected a detail on `{field}` or inside it: {}",
        r.text
    );
}

/// Asserts `422 semantic_error` whose message names `word` (a state).
#[track_caller]
pub fn refused(r: &Resp, word: &str) {
    r.expect_error(422, "semantic_error");
    let message = r.json["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(word),
        "the message should name `{word}`: {}",
        r.text
    );
}

/// Asserts a reference of `prefix` and the contract's shape.
#[track_caller]
pub fn is_ref(v: &Value, prefix: &str) {
    let s = text(v);
    let rest = s.strip_prefix(prefix).unwrap_or_else(|| panic!("{s}"));
    assert!(
        rest.len() == 12 && rest.chars().all(|c| c.is_ascii_alphanumeric()),
        "{s}"
    );
}

#[track_caller]
pub fn is_ts(v: &Value) {
    let s = text(v);
    assert!(
        s.ends_with('Z') && Timestamp::parse(&s).is_some(),
        "timestamp {s}"
    );
}

#[track_caller]
pub fn ts_of(v: &Value) -> Timestamp {
    is_ts(v);
    Timestamp::parse(&text(v)).expect("timestamp")
}

/// Every listed field is present (`null` fields too: never omitted).
#[track_caller]
pub fn has_fields(v: &Value, fields: &[&str]) {
    let obj = v
        .as_object()
        .unwrap_or_else(|| panic!("an object, not {v}"));
    for f in fields {
        assert!(obj.contains_key(*f), "field `{f}` missing: {v}");
    }
}

/// The single-resource ETag header equals the body's `etag` field.
#[track_caller]
pub fn etag_matches(r: &Resp) -> String {
    let tag = r.etag();
    assert!(tag.starts_with('"') && tag.ends_with('"'), "strong: {tag}");
    assert_eq!(r.data()["etag"], tag.as_str(), "{}", r.text);
    tag
}

pub fn money(value: &str, currency: &str) -> Value {
    json!({"currency": currency, "unit": "minor", "value": value})
}

pub fn eur(value: &str) -> Value {
    money(value, "EUR")
}

/// RFC 3339 for `secs` seconds from now.
pub fn later(secs: i64) -> String {
    Timestamp::now().plus_seconds(secs).to_rfc3339()
}
