//! The assertion kit the black-box tests share: reading the envelope
//! (`text`, `items`, `refs`), asserting the contract's shapes (`is_ref`,
//! `is_ts`, `has_fields`, `etag_matches`) and errors (`invalid`,
//! `invalid_under`, `refused`), and building bodies (`money`, `eur`,
//! `later`, `at`). One copy here; a test file that needs a variant names it
//! differently.

use crate::{Resp, TestApp};
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

/// `GET path` as the sandbox admin, which must answer 200.
pub async fn get(app: &TestApp, path: &str) -> Resp {
    let r = app.get(path).send().await;
    r.expect(200);
    r
}

/// Every item of the paged list at `path`, `limit` per page, checking the
/// paging rules on the way: full pages while `has_more`, a `next_cursor`
/// exactly then, and an end.
pub async fn walk(app: &TestApp, path: &str, limit: u32) -> Vec<Value> {
    walk_from(app, path, limit, None).await
}

/// Like `walk`, from the page after `cursor`.
pub async fn walk_from(
    app: &TestApp,
    path: &str,
    limit: u32,
    cursor: Option<String>,
) -> Vec<Value> {
    walk_pages(app, path, limit, cursor).await.0
}

/// Like `walk_from`, with the number of pages it read.
pub async fn walk_pages(
    app: &TestApp,
    path: &str,
    limit: u32,
    cursor: Option<String>,
) -> (Vec<Value>, usize) {
    let sep = if path.contains('?') { '&' } else { '?' };
    let mut all = Vec::new();
    let mut cursor = cursor.map(|c| format!("&cursor={c}")).unwrap_or_default();
    let mut pages = 0;
    loop {
        let r = get(app, &format!("{path}{sep}limit={limit}{cursor}")).await;
        let page = items(&r);
        pages += 1;
        assert!(pages < 100, "the walk does not end");
        let has_more = r.data()["has_more"].as_bool().expect("has_more");
        assert!(page.len() <= limit as usize);
        all.extend(page.iter().cloned());
        match r.data()["next_cursor"].as_str() {
            Some(c) => {
                assert!(has_more && page.len() == limit as usize, "{}", r.text);
                cursor = format!("&cursor={c}");
            }
            None => {
                assert!(!has_more, "{}", r.text);
                return (all, pages);
            }
        }
    }
}

/// Newest first: `created_at` descending, then the reference descending.
#[track_caller]
pub fn newest_first(list: &[Value], ref_field: &str) {
    let keys: Vec<(Timestamp, String)> = list
        .iter()
        .map(|i| (ts_of(&i["created_at"]), text(&i[ref_field])))
        .collect();
    let mut sorted = keys.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(keys, sorted);
}
