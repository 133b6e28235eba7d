//! Products: create and publish (`draft → published`); list and retrieve
//! are the generic reads of `Served` records.

use super::{found, product_by_ref, refused};
use crate::error::ApiError;
use crate::handlers::admin::service_accounts::check_text;
use crate::handlers::admin::{opt_ts, ts};
use crate::handlers::reads::{one, status_of, Served, StatusFilter};
use crate::handlers::webhooks::endpoints::EmptyBody;
use crate::handlers::Ctx;
use crate::input::Input;
use crate::reply::Reply;
use domain::catalogue::ProductStatus;
use domain::etag::etag;
use domain::{Prefix, Timestamp};
use serde::{Deserialize, Serialize};
use store::billing::products::{self, ProductRecord};
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

    fn dto(&self, _now: Timestamp) -> ProductDto {
        ProductDto {
            product_ref: self.product_ref.to_string(),
            name: self.name.clone(),
            description: self.description.clone(),
            status: self.status.as_str().to_owned(),
            created_at: ts(self.created_at),
            updated_at: ts(self.updated_at),
            published_at: opt_ts(self.published_at),
            etag: Served::etag(self),
        }
    }

    fn etag(&self) -> String {
        etag(self.product_ref.as_str(), self.version)
    }

    fn position(&self) -> (i64, String) {
        (self.created_at.millis(), self.product_ref.to_string())
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateProduct {
    /// 1 to 200 characters.
    pub name: String,
    /// At most 1,000 characters.
    pub description: Option<String>,
}

pub async fn create(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let body: CreateProduct = input.body()?;
    check_text("name", &body.name, 1, 200)?;
    if let Some(d) = &body.description {
        check_text("description", d, 0, 1000)?;
    }
    let env = ctx.env().clone();
    let row = products::create(
        ctx.tx().await?,
        &env,
        &body.name,
        body.description.as_deref(),
    )
    .await?;
    Ok(one(ctx, &row))
}

pub async fn publish(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let _: EmptyBody = input.body()?;
    let product_ref = input.path_ref("product_ref", Prefix::Product)?;
    let current = product_by_ref(ctx, &product_ref).await?;
    let next = current.status.publish().map_err(refused)?;
    let row = found(
        products::set_status(ctx.tx().await?, &current, next).await,
        "product",
    )?;
    Ok(one(ctx, &row))
}
