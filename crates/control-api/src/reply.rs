//! What a handler returns on success: the `data` of the envelope and, for a
//! single resource, its ETag. The status comes from the operation table.

use serde::Serialize;
use serde_json::Value;

#[derive(Debug, Clone)]
pub struct Reply {
    pub data: Value,
    pub etag: Option<String>,
    /// What an idempotent replay answers instead of `data`, when `data`
    /// reveals a secret: a secret is shown once, never stored for replays.
    pub replay_data: Option<Value>,
}

impl Reply {
    /// A single resource whose `data` reveals a secret; `without_secret` is
    /// the same resource as replays and stored results see it.
    pub fn revealing(
        data: impl Serialize,
        without_secret: impl Serialize,
        etag: Option<String>,
    ) -> Reply {
        Reply {
            data: to_value(data),
            etag,
            replay_data: Some(to_value(without_secret)),
        }
    }

    /// A single resource with its ETag.
    pub fn one(data: impl Serialize, etag: Option<String>) -> Reply {
        Reply {
            data: to_value(data),
            etag,
            replay_data: None,
        }
    }

    /// A page of a list: `{items, next_cursor, has_more}`.
    pub fn list<T: Serialize>(items: Vec<T>, next_cursor: Option<String>, has_more: bool) -> Reply {
        Reply {
            data: serde_json::json!({
                "items": items.into_iter().map(to_value).collect::<Vec<_>>(),
                "next_cursor": next_cursor,
                "has_more": has_more,
            }),
            etag: None,
            replay_data: None,
        }
    }

    /// A keyset page; `position` gives an item's `(created_at_ms, ref)`,
    /// from which the next page's cursor is minted for `scope`.
    pub fn page<T, D: Serialize>(
        page: store::Page<T>,
        scope: &str,
        position: impl Fn(&T) -> (i64, String),
        dto: impl Fn(&T) -> D,
    ) -> Reply {
        let next_cursor = page
            .has_more
            .then(|| page.items.last())
            .flatten()
            .map(|last| {
                let (created_at_ms, last_ref) = position(last);
                domain::Cursor {
                    created_at_ms,
                    last_ref,
                }
                .encode(scope)
            });
        Reply::list(
            page.items.iter().map(dto).collect(),
            next_cursor,
            page.has_more,
        )
    }

    /// A whole list in one page.
    pub fn all<T: Serialize>(items: Vec<T>) -> Reply {
        Reply::list(items, None, false)
    }
}

fn to_value(v: impl Serialize) -> Value {
    // Our DTOs serialize infallibly (string keys, no non-finite floats).
    serde_json::to_value(v).unwrap_or(Value::Null)
}
