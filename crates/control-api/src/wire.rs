//! Wire helpers that every handler may use: the forms of time and money
//! (`commerce::shapes`), the common refusals as `ApiError`s, and checks of
//! request text. This module imports no handler.

use crate::error::ApiError;
pub use commerce::shapes::{opt_ts, ts, MoneyDto};
use commerce::CommerceError;
use domain::catalogue::StateError;
use domain::MoneyError;
use serde::Deserialize;
use store::StoreError;
use utoipa::ToSchema;

/// Empty body of pause and resume.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EmptyBody {}

/// `value`, at `field`, is `min` to `max` characters, none of them a
/// control character.
pub fn check_text(field: &str, value: &str, min: usize, max: usize) -> Result<(), ApiError> {
    let n = value.chars().count();
    if n < min || n > max {
        return Err(ApiError::validation(
            field,
            format!("must be {min} to {max} characters"),
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(ApiError::validation(
            field,
            "must not contain control characters",
        ));
    }
    Ok(())
}

/// A refused transition: `422`, naming the state (as `commerce` maps it).
pub fn refused(e: StateError) -> ApiError {
    CommerceError::from(e).into()
}

/// Amounts of two currencies met: `422` (as `commerce` maps it).
pub fn money_error(e: MoneyError) -> ApiError {
    CommerceError::from(e).into()
}

/// `StoreError::NotFound` as the contract's 404 for `what`.
pub fn found<T>(r: Result<T, StoreError>, what: &'static str) -> Result<T, ApiError> {
    Ok(commerce::error::found(r, what)?)
}
