//! Products: `draft → published` (contract 10.1).

use crate::db::codec::{opt_ts, state};
use crate::db::tx::{int, single, text, Columns, WriteTx};
use crate::resource::Resource;
use crate::StoreError;
use domain::catalogue::ProductStatus;
use domain::{Prefix, Ref, Timestamp};

#[derive(Debug, Clone)]
pub struct ProductRecord {
    pub product_ref: Ref,
    pub environment_ref: Ref,
    pub name: String,
    pub description: Option<String>,
    pub status: ProductStatus,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub published_at: Option<Timestamp>,
    pub version: i64,
}

fn from_row(row: &dyn Columns) -> Result<ProductRecord, StoreError> {
    Ok(ProductRecord {
        product_ref: Ref::from_trusted(text(row, "product_ref")?),
        environment_ref: Ref::from_trusted(text(row, "environment_ref")?),
        name: text(row, "name")?,
        description: row.text("description")?,
        status: state(row, "status", ProductStatus::parse)?,
        created_at: Timestamp::from_millis(int(row, "created_at")?),
        updated_at: Timestamp::from_millis(int(row, "updated_at")?),
        published_at: opt_ts(row, "published_at")?,
        version: int(row, "version")?,
    })
}

pub async fn create(
    tx: &mut WriteTx,
    environment_ref: &Ref,
    name: &str,
    description: Option<&str>,
) -> Result<ProductRecord, StoreError> {
    let rows = tx
        .fetch(
            "INSERT INTO products (product_ref, environment_ref, name, description, status, \
             created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $6) RETURNING *",
            &[
                Ref::generate(Prefix::Product).as_str().into(),
                environment_ref.as_str().into(),
                name.into(),
                description.into(),
                ProductStatus::Draft.as_str().into(),
                Timestamp::now().millis().into(),
            ],
        )
        .await?;
    from_row(single(&rows)?)
}

/// Moves a product to `status` if it is still at its read version.
pub async fn set_status(
    tx: &mut WriteTx,
    current: &ProductRecord,
    status: ProductStatus,
) -> Result<ProductRecord, StoreError> {
    let now = Timestamp::now().millis();
    let published_at = match status {
        ProductStatus::Published => Some(now),
        _ => current.published_at.map(Timestamp::millis),
    };
    let rows = tx
        .fetch(
            "UPDATE products SET status = $1, published_at = $2, updated_at = $3, \
             version = version + 1 WHERE product_ref = $4 AND version = $5 RETURNING *",
            &[
                status.as_str().into(),
                published_at.into(),
                now.into(),
                current.product_ref.as_str().into(),
                current.version.into(),
            ],
        )
        .await?;
    from_row(rows.first().ok_or(StoreError::Conflict)?)
}

/// Takes the product's row lock for the rest of the unit of work and
/// returns the product as committed now. The writes that move a product's
/// offer take it first, so that they run one after the other per product
/// (on PostgreSQL; SQLite has one writer anyway). It changes nothing.
pub async fn lock(
    tx: &mut WriteTx,
    environment_ref: &Ref,
    product_ref: &Ref,
) -> Result<ProductRecord, StoreError> {
    let rows = tx
        .fetch(
            "UPDATE products SET version = version WHERE product_ref = $1 \
             AND environment_ref = $2 RETURNING *",
            &[product_ref.as_str().into(), environment_ref.as_str().into()],
        )
        .await?;
    from_row(rows.first().ok_or(StoreError::NotFound)?)
}

impl Resource for ProductRecord {
    const TABLE: &'static str = "products";
    const REF_COLUMN: &'static str = "product_ref";
    const FILTERS: &'static [(&'static str, &'static str)] = &[("status", "status")];

    fn decode(row: &dyn Columns) -> Result<Self, StoreError> {
        from_row(row)
    }
}
