//! Column codecs every repository shares: JSON held in a text column
//! (`to_json`, `json_col`), an optional moment held as milliseconds
//! (`opt_ts`), and a closed set's state (`state`). The marks of a
//! statement built at run time are `marks::Marks`.
//!
//! They know the shape of a value, never the column or table it is in.

use crate::tx::{text, Columns};
use crate::StoreError;
use domain::Timestamp;

/// The value of the JSON text column `col`; `Corrupt` when it does not
/// parse as a `T`.
pub fn json_col<T: serde::de::DeserializeOwned>(
    row: &(impl Columns + ?Sized),
    col: &str,
) -> Result<T, StoreError> {
    let text = text(row, col)?;
    serde_json::from_str(&text).map_err(|e| StoreError::Corrupt(format!("{col}: {e}")))
}

/// `v` as JSON text for a column (`null` if it cannot be written as JSON).
pub fn to_json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "null".to_owned())
}

/// The moment in the milliseconds column `col`, if it is not null.
pub fn opt_ts(row: &(impl Columns + ?Sized), col: &str) -> Result<Option<Timestamp>, StoreError> {
    Ok(row.int(col)?.map(Timestamp::from_millis))
}

/// A closed set's value read back from `col` by its domain type's
/// `parse`: a value the type does not know is `Corrupt`, never quietly
/// taken for another state.
pub fn state<T>(
    row: &dyn Columns,
    col: &str,
    parse: fn(&str) -> Option<T>,
) -> Result<T, StoreError> {
    let value = text(row, col)?;
    parse(&value).ok_or_else(|| StoreError::Corrupt(format!("{col} {value}")))
}
