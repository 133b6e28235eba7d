//! Checkout sessions and the records a payment makes: buyers, payments
//! and captures, orders and invoices, entitlements, stored payment methods,
//! subscriptions and their changes, journeys (contract 10.1).
//!
//! Writes are functions of the pay (or session create) unit of work; what a
//! payment makes is decided by the caller (`control_api`'s pay), which
//! calls these in one transaction. Every record is a `Resource`, read and
//! listed through `Store::get` and `Store::list` (`crate::resource`).

pub mod buyers;
pub mod credit;
pub mod entitlements;
pub mod invoice_numbers;
pub mod journeys;
pub mod methods;
pub mod orders;
pub mod payments;
pub mod price_changes;
pub mod sessions;
pub mod subscriptions;
pub mod trials;

use crate::db::tx::{int, text, Columns};
use crate::StoreError;
use domain::catalogue::Recurrence;
use domain::{Ref, Timestamp};
use serde::{Deserialize, Serialize};

/// A line item priced when its session was made; sessions and orders keep
/// them (amounts in minor units of the record's currency).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PricedItem {
    pub offer_ref: String,
    pub price_ref: String,
    pub product_ref: String,
    pub quantity: u32,
    pub unit_amount: u64,
    pub amount: u64,
    pub price_type: String,
    pub interval: Option<String>,
}

impl PricedItem {
    pub fn recurrence(&self) -> Result<Recurrence, StoreError> {
        Recurrence::parse(&self.price_type, self.interval.as_deref())
            .map_err(|e| StoreError::Corrupt(format!("line item {}: {e}", self.price_ref)))
    }
}

pub(crate) fn reference(row: &dyn Columns, col: &str) -> Result<Ref, StoreError> {
    Ok(Ref::from_trusted(text(row, col)?))
}

pub(crate) fn opt_reference(row: &dyn Columns, col: &str) -> Result<Option<Ref>, StoreError> {
    Ok(row.text(col)?.map(Ref::from_trusted))
}

pub(crate) fn at(row: &dyn Columns, col: &str) -> Result<Timestamp, StoreError> {
    Ok(Timestamp::from_millis(int(row, col)?))
}

pub(crate) use crate::db::codec::state;
