//! The shapes of the catalogue's records: products and prices.

use super::{opt_ts, status_of, ts, MoneyDto, Served, StatusFilter};
use domain::catalogue::{PriceStatus, ProductStatus};
use domain::etag::etag;
use domain::{Prefix, Timestamp};
use serde::Serialize;
use store::billing::prices::PriceRecord;
use store::billing::products::ProductRecord;
use utoipa::ToSchema;

#[derive(Debug, Serialize, ToSchema)]
pub struct ProductDto {
    pub product_ref: String,
    pub name: String,
    pub description: Option<String>,
    /// `draft`, `published` or `archived` (reserved).
    pub status: String,
    pub created_at: String,
    pub updated_at: String,
    pub published_at: Option<String>,
    pub etag: String,
}

impl Served for ProductRecord {
    type Dto = ProductDto;
    const PREFIX: Prefix = Prefix::Product;
    const WHAT: &'static str = "product";
    const PATH_PARAM: &'static str = "product_ref";
    const STATUS: Option<StatusFilter> = status_of!(ProductStatus);
    const REF_FILTERS: &'static [(&'static str, Prefix)] = &[];

    fn dto(&self, now: Timestamp) -> ProductDto {
        ProductDto {
            product_ref: self.product_ref.to_string(),
            name: self.name.clone(),
            description: self.description.clone(),
            status: self.status.as_str().to_owned(),
            created_at: ts(self.created_at),
            updated_at: ts(self.updated_at),
            published_at: opt_ts(self.published_at),
            etag: Served::etag(self, now),
        }
    }

    fn etag(&self, _now: Timestamp) -> String {
        etag(self.product_ref.as_str(), self.version)
    }

    fn position(&self) -> (i64, String) {
        (self.created_at.millis(), self.product_ref.to_string())
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PriceDto {
    pub price_ref: String,
    pub product_ref: String,
    pub amount: MoneyDto,
    /// `one_time` or `recurring`.
    #[serde(rename = "type")]
    pub price_type: String,
    /// `month` or `year` for recurring prices, else null.
    pub interval: Option<String>,
    /// `draft`, `published` or `superseded`.
    pub status: String,
    pub created_at: String,
    pub published_at: Option<String>,
    pub superseded_at: Option<String>,
    pub etag: String,
}

impl Served for PriceRecord {
    type Dto = PriceDto;
    const PREFIX: Prefix = Prefix::Price;
    const WHAT: &'static str = "price";
    const PATH_PARAM: &'static str = "price_ref";
    const STATUS: Option<StatusFilter> = status_of!(PriceStatus);
    const REF_FILTERS: &'static [(&'static str, Prefix)] = &[("product_ref", Prefix::Product)];

    fn dto(&self, now: Timestamp) -> PriceDto {
        PriceDto {
            price_ref: self.price_ref.to_string(),
            product_ref: self.product_ref.to_string(),
            amount: self.amount.into(),
            price_type: self.recurrence.price_type().as_str().to_owned(),
            interval: self.recurrence.interval().map(|i| i.as_str().to_owned()),
            status: self.status.as_str().to_owned(),
            created_at: ts(self.created_at),
            published_at: opt_ts(self.published_at),
            superseded_at: opt_ts(self.superseded_at),
            etag: Served::etag(self, now),
        }
    }

    fn etag(&self, _now: Timestamp) -> String {
        etag(self.price_ref.as_str(), self.version)
    }

    fn position(&self) -> (i64, String) {
        (self.created_at.millis(), self.price_ref.to_string())
    }
}
