//! Webhook persistence: endpoints and their secret versions, subscriptions,
//! data profile grants, deliveries and attempts.
//!
//! Secrets arrive here already encrypted; the store never sees a plaintext
//! signing secret. JSON columns (`event_data`, `match_reasons`, lists of
//! references) are stored as text and parsed at this boundary.

pub mod data_profiles;
pub mod deliveries;
pub mod endpoints;
pub mod subscriptions;

use crate::StoreError;

pub(crate) fn json_col<T: serde::de::DeserializeOwned>(
    row: &impl crate::db::tx::Columns,
    col: &str,
) -> Result<T, StoreError> {
    let text = crate::db::tx::text(row, col)?;
    serde_json::from_str(&text).map_err(|e| StoreError::Corrupt(format!("{col}: {e}")))
}

pub(crate) fn to_json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "null".to_owned())
}

/// `$first, $first+1, …` for `n` bound values.
pub(crate) fn placeholders(first: usize, n: usize) -> String {
    (first..first + n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}
