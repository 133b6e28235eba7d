//! The catalogue (contract 10 and 10.1, `docs/catalogue.md`): products,
//! prices, offers with reprice, promotions (plan and apply) and checkout
//! configs with their versions.
//!
//! Handlers here check input and state through `domain::catalogue`, write
//! through the request's unit of work (`store::billing`) and shape the
//! wire form. They never compute a discount or decide a transition
//! themselves.

pub mod checkout_configs;
pub mod offers;
pub mod prices;
pub mod products;
pub mod promotions;

use crate::error::ApiError;
use crate::handlers::Ctx;
use domain::catalogue::StateError;
use domain::{Money, MoneyError, Ref};
use serde::{Deserialize, Serialize};
use store::billing::products::ProductRecord;
use store::StoreError;
use utoipa::ToSchema;

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
    /// The amount at `field`; a malformed one is `validation_failed` on the
    /// part that is wrong.
    pub(crate) fn parse(&self, field: &str) -> Result<Money, ApiError> {
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
            ApiError::validation(format!("{field}.{part}"), e.to_string())
        })
    }
}

/// A refused transition: `422`, naming the state.
pub(crate) fn refused(e: StateError) -> ApiError {
    ApiError::semantic(e.to_string())
}

/// Amounts of two currencies met: `422`.
pub(crate) fn money_error(e: MoneyError) -> ApiError {
    ApiError::semantic(e.to_string())
}

/// `StoreError::NotFound` as the contract's 404 for `what`.
pub(crate) fn found<T>(r: Result<T, StoreError>, what: &str) -> Result<T, ApiError> {
    match r {
        Err(StoreError::NotFound) => Err(ApiError::not_found(what)),
        other => Ok(other?),
    }
}

pub(crate) async fn product_by_ref(
    ctx: &Ctx,
    product_ref: &Ref,
) -> Result<ProductRecord, ApiError> {
    found(
        ctx.store()
            .get::<ProductRecord>(ctx.env(), product_ref)
            .await,
        "product",
    )
}
