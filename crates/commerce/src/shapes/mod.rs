//! The resource shapes of billing records: each record as the API shows it
//! (its DTO, tag and position in a list), which is also the data of the
//! events its changes emit (contract 10.1, "Events are the resource").
//!
//! `control-api` serves these shapes (generic list and retrieve over
//! `Served`) and describes them in the OpenAPI document; the use cases of
//! this crate emit them. Shapes never read the store: a DTO is built from a
//! record alone, at a given time.

pub mod catalogue;
pub mod checkout;
pub mod outside;
pub mod refunds;

use crate::CommerceError;
use domain::{Money, MoneyError, Prefix, Ref, Timestamp};
use serde::{Deserialize, Serialize};
use store::resource::Resource;
use utoipa::ToSchema;

/// Timestamps on the wire: RFC 3339, UTC, milliseconds.
pub fn ts(t: Timestamp) -> String {
    t.to_rfc3339()
}

pub fn opt_ts(t: Option<Timestamp>) -> Option<String> {
    t.map(ts)
}

pub(crate) fn opt_ref(r: &Option<Ref>) -> Option<String> {
    r.as_ref().map(Ref::to_string)
}

/// `(created_at_ms, ref)`: a record's position in a list.
pub(crate) fn position(created_at: Timestamp, r: &Ref) -> (i64, String) {
    (created_at.millis(), r.to_string())
}

/// The values of a record's status.
pub struct StatusFilter {
    pub names: fn() -> Vec<&'static str>,
}

/// The `Served::STATUS` of a record whose status is the state type `$t`
/// (a `wire_enum` with `ALL` and `as_str`).
macro_rules! status_of {
    ($t:ty) => {
        Some($crate::shapes::StatusFilter {
            names: || <$t>::ALL.iter().map(|s| s.as_str()).collect(),
        })
    };
}
pub(crate) use status_of;

/// A billing record as the API serves it and its events carry it.
pub trait Served: Resource + Send + Sync + 'static {
    type Dto: Serialize;
    const PREFIX: Prefix;
    /// For "no such …".
    const WHAT: &'static str;
    /// The path parameter of its retrieve.
    const PATH_PARAM: &'static str;
    /// Its `status` filter, when it has a status.
    const STATUS: Option<StatusFilter>;
    /// Its reference filters besides `status` (names of `Resource::FILTERS`).
    const REF_FILTERS: &'static [(&'static str, Prefix)];
    fn dto(&self, now: Timestamp) -> Self::Dto;
    fn etag(&self, _now: Timestamp) -> String;
    /// `(created_at_ms, ref)`: its position in a list.
    fn position(&self) -> (i64, String);
}

/// Money on the wire (contract 8).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MoneyDto {
    /// ISO 4217 code, upper case.
    pub currency: String,
    /// Always `minor`.
    pub unit: String,
    /// 1 to 18 decimal digits, no sign, no leading zeros.
    pub value: String,
}

impl From<Money> for MoneyDto {
    fn from(m: Money) -> MoneyDto {
        let w = m.to_wire();
        MoneyDto {
            currency: w.currency,
            unit: w.unit,
            value: w.value,
        }
    }
}

impl MoneyDto {
    /// The amount at `field`; a malformed one is invalid at the part that
    /// is wrong.
    pub fn parse(&self, field: &str) -> Result<Money, CommerceError> {
        let wire = domain::money::MoneyWire {
            currency: self.currency.clone(),
            unit: self.unit.clone(),
            value: self.value.clone(),
        };
        Money::from_wire(&wire).map_err(|e| {
            let part = match e {
                MoneyError::BadCurrency => "currency",
                MoneyError::BadUnit => "unit",
                _ => "value",
            };
            CommerceError::invalid(format!("{field}.{part}"), e.to_string())
        })
    }
}
