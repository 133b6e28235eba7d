//! Products: create, list, retrieve and publish (`draft → published`).

use super::{found, product_by_ref, refused};
use crate::error::ApiError;
use crate::handlers::admin::service_accounts::check_text;
use crate::handlers::admin::{opt_ts, ts};
use crate::handlers::lists::ListQuery;
use crate::handlers::webhooks::endpoints::EmptyBody;
use crate::handlers::Ctx;
use crate::input::Input;
use crate::reply::Reply;
use domain::catalogue::ProductStatus;
use domain::etag::etag;
use domain::Prefix;
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

fn product_etag(p: &ProductRecord) -> String {
    etag(p.product_ref.as_str(), p.version)
}

pub(crate) fn dto(p: &ProductRecord) -> ProductDto {
    ProductDto {
        product_ref: p.product_ref.to_string(),
        name: p.name.clone(),
        description: p.description.clone(),
        status: p.status.as_str().to_owned(),
        created_at: ts(p.created_at),
        updated_at: ts(p.updated_at),
        published_at: opt_ts(p.published_at),
        etag: product_etag(p),
    }
}

fn reply(p: &ProductRecord) -> Reply {
    Reply::one(dto(p), Some(product_etag(p)))
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
    Ok(reply(&row))
}

pub async fn list(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let query = ListQuery::parse(ctx.op.id, &input, Some("status"), &[])?;
    let status = query.status(ProductStatus::parse, "draft, published or archived")?;
    let page = ctx
        .store()
        .billing()
        .list_products(ctx.env(), status, &query.page)
        .await?;
    Ok(Reply::page(
        page,
        &query.scope,
        |p| (p.created_at.millis(), p.product_ref.to_string()),
        dto,
    ))
}

pub async fn retrieve(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    input.query_params(&[])?;
    let product_ref = input.path_ref("product_ref", Prefix::Product)?;
    Ok(reply(&product_by_ref(ctx, &product_ref).await?))
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
    Ok(reply(&row))
}
