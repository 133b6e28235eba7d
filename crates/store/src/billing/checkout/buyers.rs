//! Buyers, one per e-mail per environment, matched case-insensitively
//! (`buyers_by_email` on the lower-cased key).

use super::{at, reference};
use crate::billing::Source;
use crate::db::tx::{int, text, Columns, WriteTx};
use crate::resource::Resource;
use crate::StoreError;
use domain::checkout::buyer::Email;
use domain::{Prefix, Ref, Timestamp};

#[derive(Debug, Clone)]
pub struct BuyerRecord {
    pub buyer_ref: Ref,
    pub environment_ref: Ref,
    pub email: String,
    pub name: Option<String>,
    /// The test clock the buyer lives on (contract 12.4).
    pub test_clock_ref: Option<Ref>,
    /// The buyer's credit balance in its currency (contract 14.2; the
    /// mirror `credit::add` and `credit::take` keep); `None` while the
    /// buyer has no currency yet (no order, no credit).
    pub credit_balance: Option<domain::Money>,
    pub created_at: Timestamp,
    pub version: i64,
}

impl Resource for BuyerRecord {
    const TABLE: &'static str = "buyers";
    const REF_COLUMN: &'static str = "buyer_ref";
    const FILTERS: &'static [(&'static str, &'static str)] = &[];

    fn decode(row: &dyn Columns) -> Result<Self, StoreError> {
        Ok(BuyerRecord {
            buyer_ref: reference(row, "buyer_ref")?,
            environment_ref: reference(row, "environment_ref")?,
            email: text(row, "email")?,
            name: row.text("name")?,
            test_clock_ref: super::opt_reference(row, "test_clock_ref")?,
            credit_balance: match row.text("credit_currency")? {
                None => None,
                Some(_) => Some(crate::billing::money(
                    row,
                    "credit_currency",
                    "credit_minor",
                )?),
            },
            created_at: at(row, "created_at")?,
            version: int(row, "version")?,
        })
    }
}

/// The buyer of `email` in the environment, if any.
pub async fn find(
    tx: &mut WriteTx,
    environment_ref: &Ref,
    email: &Email,
) -> Result<Option<BuyerRecord>, StoreError> {
    let found = Source::Tx(tx)
        .all(
            "SELECT * FROM buyers WHERE environment_ref = $1 AND email_key = $2",
            &[
                environment_ref.as_str().into(),
                email.match_key().as_str().into(),
            ],
            BuyerRecord::decode,
        )
        .await?;
    Ok(found.into_iter().next())
}

/// Who a pay finds or makes as its buyer.
pub struct BuyerOf<'a> {
    pub email: &'a Email,
    pub name: Option<&'a str>,
    /// The session's test clock: a buyer found or made through it lives on
    /// it from then on.
    pub test_clock_ref: Option<&'a Ref>,
    pub now: Timestamp,
}

/// The buyer of `email`, created with `name` if there is none. A buyer
/// created concurrently by another unit of work is found, not duplicated
/// (the update returns the existing row and waits for its creator).
pub async fn find_or_create(
    tx: &mut WriteTx,
    environment_ref: &Ref,
    of: BuyerOf<'_>,
) -> Result<BuyerRecord, StoreError> {
    let rows = tx
        .fetch(
            "INSERT INTO buyers (buyer_ref, environment_ref, email, email_key, name, \
             test_clock_ref, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7) \
             ON CONFLICT (environment_ref, email_key) DO UPDATE SET email_key = excluded.email_key, \
             test_clock_ref = COALESCE(excluded.test_clock_ref, buyers.test_clock_ref) RETURNING *",
            &[
                Ref::generate(Prefix::Buyer).as_str().into(),
                environment_ref.as_str().into(),
                of.email.as_str().into(),
                of.email.match_key().as_str().into(),
                of.name.into(),
                of.test_clock_ref.map(Ref::as_str).into(),
                of.now.millis().into(),
            ],
        )
        .await?;
    BuyerRecord::decode(crate::db::tx::single(&rows)?)
}
