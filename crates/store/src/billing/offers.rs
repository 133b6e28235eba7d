//! Offers: the one sellable price of a product (`UNIQUE (product_ref)`),
//! made by the product's first price publish and moved by every later one.
//! An offer is read with its current price and its promotions that have not
//! ended, from which its amount now is computed by the caller.

use super::prices::{self, PriceRecord};
use super::promotions::{self, PromotionRecord};
use super::{Billing, Source};
use crate::db::codec::state;
use crate::db::page::{Page, PageRequest};
use crate::db::tx::{int, single, text, Arg, Columns, WriteTx};
use crate::resource::{Resource, Scope};
use crate::StoreError;
use domain::catalogue::OfferStatus;
use domain::{Prefix, Ref, Timestamp};

/// An offer row.
#[derive(Debug, Clone)]
pub struct OfferRow {
    pub offer_ref: Ref,
    pub environment_ref: Ref,
    pub product_ref: Ref,
    pub price_ref: Ref,
    pub status: OfferStatus,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub version: i64,
}

/// An offer with what its wire form is computed from.
#[derive(Debug, Clone)]
pub struct OfferRecord {
    pub offer: OfferRow,
    pub price: PriceRecord,
    /// Scheduled and active promotions (not ended when read), oldest start
    /// first.
    pub promotions: Vec<PromotionRecord>,
}

/// The row alone; an `OfferRecord` is the row completed with its price
/// and promotions (`complete`), after the generic read.
impl Resource for OfferRow {
    const TABLE: &'static str = "offers";
    const REF_COLUMN: &'static str = "offer_ref";
    const FILTERS: &'static [(&'static str, &'static str)] =
        &[("status", "status"), ("product_ref", "product_ref")];

    fn decode(row: &dyn Columns) -> Result<Self, StoreError> {
        from_row(row)
    }
}

fn from_row(row: &dyn Columns) -> Result<OfferRow, StoreError> {
    Ok(OfferRow {
        offer_ref: Ref::from_trusted(text(row, "offer_ref")?),
        environment_ref: Ref::from_trusted(text(row, "environment_ref")?),
        product_ref: Ref::from_trusted(text(row, "product_ref")?),
        price_ref: Ref::from_trusted(text(row, "price_ref")?),
        status: state(row, "status", OfferStatus::parse)?,
        created_at: Timestamp::from_millis(int(row, "created_at")?),
        updated_at: Timestamp::from_millis(int(row, "updated_at")?),
        version: int(row, "version")?,
    })
}

/// Makes the product's offer sell `price_ref`, or creates it. Run under the
/// product's lock (`products::lock`).
pub async fn point_at(
    tx: &mut WriteTx,
    environment_ref: &Ref,
    product_ref: &Ref,
    price_ref: &Ref,
) -> Result<OfferRecord, StoreError> {
    let rows = tx
        .fetch(
            "INSERT INTO offers (offer_ref, environment_ref, product_ref, price_ref, status, \
             created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $6) \
             ON CONFLICT (product_ref) DO UPDATE SET price_ref = excluded.price_ref, \
             updated_at = excluded.updated_at, version = offers.version + 1 RETURNING *",
            &[
                Ref::generate(Prefix::Offer).as_str().into(),
                environment_ref.as_str().into(),
                product_ref.as_str().into(),
                price_ref.as_str().into(),
                OfferStatus::Active.as_str().into(),
                Timestamp::now().millis().into(),
            ],
        )
        .await?;
    let row = from_row(single(&rows)?)?;
    let mut done = complete(&mut Source::Tx(tx), vec![row]).await?;
    done.pop()
        .ok_or_else(|| StoreError::Corrupt("an offer without its price".into()))
}

/// Takes the row locks of `offer_refs` of the environment (in reference
/// order, so that two units of work never wait for each other in a
/// circle) and returns them as committed now, with their prices and live
/// promotions. It changes nothing. A missing offer is `NotFound`.
pub async fn lock(
    tx: &mut WriteTx,
    environment_ref: &Ref,
    offer_refs: &[String],
) -> Result<Vec<OfferRecord>, StoreError> {
    let mut rows = Vec::with_capacity(offer_refs.len());
    for offer_ref in sorted(offer_refs) {
        let found = tx
            .fetch(
                "UPDATE offers SET version = version \
                 WHERE offer_ref = $1 AND environment_ref = $2 RETURNING *",
                &[offer_ref.into(), environment_ref.as_str().into()],
            )
            .await?;
        rows.push(from_row(found.first().ok_or(StoreError::NotFound)?)?);
    }
    complete(&mut Source::Tx(tx), rows).await
}

/// Records that the offers changed (a promotion now covers them): their
/// versions, and so their ETags, move.
pub async fn touch(tx: &mut WriteTx, offer_refs: &[String]) -> Result<(), StoreError> {
    let now = Timestamp::now().millis();
    for offer_ref in sorted(offer_refs) {
        tx.execute(
            "UPDATE offers SET version = version + 1, updated_at = $1 WHERE offer_ref = $2",
            &[now.into(), offer_ref.into()],
        )
        .await?;
    }
    Ok(())
}

fn sorted(refs: &[String]) -> Vec<&str> {
    let mut sorted: Vec<&str> = refs.iter().map(String::as_str).collect();
    sorted.sort_unstable();
    sorted.dedup();
    sorted
}

async fn by_refs(
    source: &mut Source<'_>,
    environment_ref: &Ref,
    offer_refs: &[String],
) -> Result<Vec<OfferRecord>, StoreError> {
    if offer_refs.is_empty() {
        return Ok(Vec::new());
    }
    let mut marks = source.marks();
    let sql = format!(
        "SELECT * FROM offers WHERE environment_ref = {} AND offer_ref IN ({})",
        marks.next(),
        marks.list(offer_refs.len())
    );
    let mut args: Vec<Arg> = vec![environment_ref.as_str().into()];
    args.extend(offer_refs.iter().map(|r| Arg::from(r.as_str())));
    let rows = source.all(&sql, &args, from_row).await?;
    complete(source, rows).await
}

/// Attaches each offer's price and live promotions.
async fn complete(
    source: &mut Source<'_>,
    rows: Vec<OfferRow>,
) -> Result<Vec<OfferRecord>, StoreError> {
    let price_refs: Vec<&str> = rows.iter().map(|o| o.price_ref.as_str()).collect();
    let mut prices = prices::by_refs(source, &price_refs).await?;
    let offer_refs: Vec<&str> = rows.iter().map(|o| o.offer_ref.as_str()).collect();
    let mut live = promotions::live_for_offers(source, &offer_refs, Timestamp::now()).await?;
    rows.into_iter()
        .map(|offer| {
            let at = prices
                .iter()
                .position(|p| p.price_ref == offer.price_ref)
                .ok_or_else(|| {
                    StoreError::Corrupt(format!("offer {}: no price", offer.offer_ref))
                })?;
            let price = prices.swap_remove(at);
            let mut promotions = Vec::new();
            live.retain(|(covered, p)| {
                let mine = covered == offer.offer_ref.as_str();
                if mine {
                    promotions.push(p.clone());
                }
                !mine
            });
            Ok(OfferRecord {
                offer,
                price,
                promotions,
            })
        })
        .collect()
}

impl Billing<'_> {
    pub async fn offer(
        &self,
        environment_ref: &Ref,
        offer_ref: &Ref,
    ) -> Result<OfferRecord, StoreError> {
        by_refs(
            &mut self.source(),
            environment_ref,
            &[offer_ref.as_str().to_owned()],
        )
        .await?
        .pop()
        .ok_or(StoreError::NotFound)
    }

    /// Offers by reference in the environment; references not found are
    /// left out.
    pub async fn offers(
        &self,
        environment_ref: &Ref,
        offer_refs: &[String],
    ) -> Result<Vec<OfferRecord>, StoreError> {
        by_refs(&mut self.source(), environment_ref, offer_refs).await
    }

    pub async fn list_offers(
        &self,
        environment_ref: &Ref,
        status: Option<OfferStatus>,
        product_ref: Option<&Ref>,
        page: &PageRequest,
    ) -> Result<Page<OfferRecord>, StoreError> {
        let rows = self
            .0
            .list::<OfferRow>(
                Scope::environment(environment_ref),
                &[
                    ("status", status.map(|s| s.as_str().into())),
                    ("product_ref", product_ref.map(|r| r.as_str().into())),
                ],
                page,
            )
            .await?;
        Ok(Page {
            items: complete(&mut self.source(), rows.items).await?,
            has_more: rows.has_more,
        })
    }
}
