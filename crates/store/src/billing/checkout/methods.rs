//! Stored payment methods: a buyer's card, kept when a payment asks for it
//! (and always for subscriptions).

use super::{at, reference, state};
use crate::db::tx::{int, single, text, Columns, WriteTx};
use crate::resource::Resource;
use crate::StoreError;
use domain::checkout::sandbox::Card;
use domain::checkout::states::StoredMethodStatus;
use domain::{Prefix, Ref, Timestamp};

#[derive(Debug, Clone)]
pub struct StoredMethodRecord {
    pub stored_payment_method_ref: Ref,
    pub environment_ref: Ref,
    pub buyer_ref: Ref,
    /// The sandbox card it was made from (`pm_card_…`): it decides the
    /// outcome of payments made with it.
    pub method: String,
    pub card: Card,
    pub status: StoredMethodStatus,
    pub created_at: Timestamp,
    pub version: i64,
}

impl Resource for StoredMethodRecord {
    const TABLE: &'static str = "stored_payment_methods";
    const REF_COLUMN: &'static str = "stored_payment_method_ref";
    const FILTERS: &'static [(&'static str, &'static str)] =
        &[("status", "status"), ("buyer_ref", "buyer_ref")];

    fn decode(row: &dyn Columns) -> Result<Self, StoreError> {
        let number = |col: &str| {
            let v = int(row, col)?;
            u32::try_from(v).map_err(|_| StoreError::Corrupt(format!("{col} {v}")))
        };
        Ok(StoredMethodRecord {
            stored_payment_method_ref: reference(row, "stored_payment_method_ref")?,
            environment_ref: reference(row, "environment_ref")?,
            buyer_ref: reference(row, "buyer_ref")?,
            method: text(row, "method")?,
            card: Card {
                brand: text(row, "brand")?,
                last4: text(row, "last4")?,
                exp_month: number("exp_month")?,
                exp_year: number("exp_year")?,
            },
            status: state(row, "status", StoredMethodStatus::parse)?,
            created_at: at(row, "created_at")?,
            version: int(row, "version")?,
        })
    }
}

pub async fn store(
    tx: &mut WriteTx,
    environment_ref: &Ref,
    buyer_ref: &Ref,
    method: &str,
    card: &Card,
    now: Timestamp,
) -> Result<StoredMethodRecord, StoreError> {
    let rows = tx
        .fetch(
            "INSERT INTO stored_payment_methods (stored_payment_method_ref, environment_ref, \
             buyer_ref, method, brand, last4, exp_month, exp_year, status, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING *",
            &[
                Ref::generate(Prefix::StoredPaymentMethod).as_str().into(),
                environment_ref.as_str().into(),
                buyer_ref.as_str().into(),
                method.into(),
                card.brand.as_str().into(),
                card.last4.as_str().into(),
                i64::from(card.exp_month).into(),
                i64::from(card.exp_year).into(),
                StoredMethodStatus::Active.as_str().into(),
                now.millis().into(),
            ],
        )
        .await?;
    StoredMethodRecord::decode(single(&rows)?)
}
