//! Prices: `draft → published → superseded` (contract 10.1). A product has
//! at most one published price (`prices_one_published`): the one its offer
//! sells.

use super::{minor, money, Source};
use crate::db::codec::{opt_ts, state};
use crate::db::tx::{int, single, text, Arg, Columns, WriteTx};
use crate::resource::Resource;
use crate::StoreError;
use domain::catalogue::{PriceStatus, Recurrence};
use domain::{Money, Prefix, Ref, Timestamp};

#[derive(Debug, Clone)]
pub struct PriceRecord {
    pub price_ref: Ref,
    pub environment_ref: Ref,
    pub product_ref: Ref,
    pub amount: Money,
    pub recurrence: Recurrence,
    pub status: PriceStatus,
    pub created_at: Timestamp,
    pub published_at: Option<Timestamp>,
    pub superseded_at: Option<Timestamp>,
    pub version: i64,
}

pub(crate) fn from_row(row: &dyn Columns) -> Result<PriceRecord, StoreError> {
    let price_type = text(row, "price_type")?;
    let interval = row.text("billing_interval")?;
    Ok(PriceRecord {
        price_ref: Ref::from_trusted(text(row, "price_ref")?),
        environment_ref: Ref::from_trusted(text(row, "environment_ref")?),
        product_ref: Ref::from_trusted(text(row, "product_ref")?),
        amount: money(row, "currency", "amount_minor")?,
        recurrence: Recurrence::parse(&price_type, interval.as_deref())
            .map_err(|e| StoreError::Corrupt(format!("price_type {price_type}: {e}")))?,
        status: state(row, "status", PriceStatus::parse)?,
        created_at: Timestamp::from_millis(int(row, "created_at")?),
        published_at: opt_ts(row, "published_at")?,
        superseded_at: opt_ts(row, "superseded_at")?,
        version: int(row, "version")?,
    })
}

/// A price to create: `Draft`, or `Published` at once (a reprice).
pub struct NewPrice<'a> {
    pub product_ref: &'a Ref,
    pub amount: Money,
    pub recurrence: Recurrence,
    pub status: PriceStatus,
    /// Why a reprice made it.
    pub reason: Option<&'a str>,
}

pub async fn create(
    tx: &mut WriteTx,
    environment_ref: &Ref,
    new: NewPrice<'_>,
) -> Result<PriceRecord, StoreError> {
    let now = Timestamp::now().millis();
    let published_at = (new.status == PriceStatus::Published).then_some(now);
    let rows = tx
        .fetch(
            "INSERT INTO prices (price_ref, environment_ref, product_ref, currency, amount_minor, \
             price_type, billing_interval, status, reprice_reason, created_at, published_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING *",
            &[
                Ref::generate(Prefix::Price).as_str().into(),
                environment_ref.as_str().into(),
                new.product_ref.as_str().into(),
                new.amount.currency().as_str().into(),
                minor(new.amount).into(),
                new.recurrence.price_type().as_str().into(),
                new.recurrence.interval().map(|i| i.as_str()).into(),
                new.status.as_str().into(),
                new.reason.into(),
                now.into(),
                published_at.into(),
            ],
        )
        .await?;
    from_row(single(&rows)?)
}

/// Publishes a draft price if it is still at its read version.
pub async fn publish(tx: &mut WriteTx, current: &PriceRecord) -> Result<PriceRecord, StoreError> {
    let rows = tx
        .fetch(
            "UPDATE prices SET status = $1, published_at = $2, version = version + 1 \
             WHERE price_ref = $3 AND version = $4 RETURNING *",
            &[
                PriceStatus::Published.as_str().into(),
                Timestamp::now().millis().into(),
                current.price_ref.as_str().into(),
                current.version.into(),
            ],
        )
        .await?;
    from_row(rows.first().ok_or(StoreError::Conflict)?)
}

/// Supersedes the product's published price, if it has one. Run under the
/// product's lock (`products::lock`).
pub async fn supersede_published(
    tx: &mut WriteTx,
    product_ref: &Ref,
) -> Result<Option<PriceRecord>, StoreError> {
    let rows = tx
        .fetch(
            "UPDATE prices SET status = $1, superseded_at = $2, version = version + 1 \
             WHERE product_ref = $3 AND status = $4 RETURNING *",
            &[
                PriceStatus::Superseded.as_str().into(),
                Timestamp::now().millis().into(),
                product_ref.as_str().into(),
                PriceStatus::Published.as_str().into(),
            ],
        )
        .await?;
    rows.first().map(|r| from_row(r)).transpose()
}

/// Prices by reference (any environment: the caller passes references it
/// read from rows of its own).
pub(crate) async fn by_refs(
    source: &mut Source<'_>,
    refs: &[&str],
) -> Result<Vec<PriceRecord>, StoreError> {
    if refs.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "SELECT * FROM prices WHERE price_ref IN ({})",
        source.marks().list(refs.len())
    );
    let args: Vec<Arg> = refs.iter().map(|r| Arg::from(*r)).collect();
    source.all(&sql, &args, from_row).await
}

impl Resource for PriceRecord {
    const TABLE: &'static str = "prices";
    const REF_COLUMN: &'static str = "price_ref";
    const FILTERS: &'static [(&'static str, &'static str)] =
        &[("status", "status"), ("product_ref", "product_ref")];

    fn decode(row: &dyn Columns) -> Result<Self, StoreError> {
        from_row(row)
    }
}
