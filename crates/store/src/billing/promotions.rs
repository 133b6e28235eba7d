//! Promotions and the offers they cover. A promotion never changes once
//! applied; its status is computed from the clock (`Window::status_at`).
//! One row per covered offer (`promotion_offers`) carries the window, for
//! the overlap rule and for an offer's promotional amount.

use super::{minor, money, Source};
use crate::db::codec::{json_col, to_json};
use crate::db::tx::{int, single, text, Arg, Columns, WriteTx};
use crate::StoreError;
use domain::catalogue::promotion::{Discount, Percent, Window};
use domain::{Prefix, Ref, Timestamp};

#[derive(Debug, Clone)]
pub struct PromotionRecord {
    pub promotion_ref: Ref,
    pub environment_ref: Ref,
    /// In the order the body gave them.
    pub offer_refs: Vec<String>,
    pub discount: Discount,
    pub window: Window,
    pub created_at: Timestamp,
    pub version: i64,
}

fn from_row(row: &dyn Columns) -> Result<PromotionRecord, StoreError> {
    let discount = match row.int("percent_off")? {
        Some(p) => Discount::PercentOff(
            u64::try_from(p)
                .ok()
                .and_then(|p| Percent::new(p).ok())
                .ok_or_else(|| StoreError::Corrupt(format!("percent_off {p}")))?,
        ),
        None => Discount::AmountOff(money(row, "amount_off_currency", "amount_off_minor")?),
    };
    let starts_at = Timestamp::from_millis(int(row, "starts_at")?);
    let ends_at = row.int("ends_at")?.map(Timestamp::from_millis);
    Ok(PromotionRecord {
        promotion_ref: Ref::from_trusted(text(row, "promotion_ref")?),
        environment_ref: Ref::from_trusted(text(row, "environment_ref")?),
        offer_refs: json_col(row, "offer_refs")?,
        discount,
        window: Window::new(starts_at, ends_at)
            .map_err(|e| StoreError::Corrupt(format!("promotion window: {e}")))?,
        created_at: Timestamp::from_millis(int(row, "created_at")?),
        version: int(row, "version")?,
    })
}

/// Records a promotion over `offer_refs`. The caller has locked the offers
/// (`offers::lock`) and checked the overlap rule under those locks.
pub async fn create(
    tx: &mut WriteTx,
    environment_ref: &Ref,
    offer_refs: &[String],
    discount: Discount,
    window: Window,
) -> Result<PromotionRecord, StoreError> {
    let promotion_ref = Ref::generate(Prefix::Promotion);
    let (percent, off) = match discount {
        Discount::PercentOff(p) => (Some(i64::from(p.get())), None),
        Discount::AmountOff(m) => (None, Some(m)),
    };
    let off_currency = off.map(|m| m.currency());
    let starts_at = window.starts_at().millis();
    let ends_at = window.ends_at().map(Timestamp::millis);
    let rows = tx
        .fetch(
            "INSERT INTO promotions (promotion_ref, environment_ref, offer_refs, percent_off, \
             amount_off_currency, amount_off_minor, starts_at, ends_at, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING *",
            &[
                promotion_ref.as_str().into(),
                environment_ref.as_str().into(),
                to_json(&offer_refs).as_str().into(),
                percent.into(),
                off_currency.as_ref().map(|c| c.as_str()).into(),
                off.map(minor).into(),
                starts_at.into(),
                ends_at.into(),
                Timestamp::now().millis().into(),
            ],
        )
        .await?;
    let record = from_row(single(&rows)?)?;
    for offer_ref in offer_refs {
        tx.execute(
            "INSERT INTO promotion_offers (offer_ref, promotion_ref, starts_at, ends_at) \
             VALUES ($1, $2, $3, $4)",
            &[
                offer_ref.as_str().into(),
                promotion_ref.as_str().into(),
                starts_at.into(),
                ends_at.into(),
            ],
        )
        .await?;
    }
    Ok(record)
}

/// The promotions of each of `offer_refs` that have not ended at `now`
/// (scheduled or active), as `(offer_ref, promotion)` pairs.
pub(crate) async fn live_for_offers(
    source: &mut Source<'_>,
    offer_refs: &[&str],
    now: Timestamp,
) -> Result<Vec<(String, PromotionRecord)>, StoreError> {
    if offer_refs.is_empty() {
        return Ok(Vec::new());
    }
    let mut marks = source.marks();
    let sql = format!(
        "SELECT po.offer_ref AS covered_offer_ref, p.* FROM promotion_offers po \
         JOIN promotions p ON p.promotion_ref = po.promotion_ref \
         WHERE (po.ends_at IS NULL OR po.ends_at > {}) AND po.offer_ref IN ({}) \
         ORDER BY p.starts_at, p.promotion_ref",
        marks.next(),
        marks.list(offer_refs.len())
    );
    let mut args: Vec<Arg> = vec![now.millis().into()];
    args.extend(offer_refs.iter().map(|r| Arg::from(*r)));
    source
        .all(&sql, &args, |row| {
            Ok((text(row, "covered_offer_ref")?, from_row(row)?))
        })
        .await
}
