//! The catalogue (contract 10 and 10.1, `docs/catalogue.md`): products,
//! prices, offers with reprice, promotions (plan and apply) and checkout
//! configs with their versions.
//!
//! Handlers here check input and state through `domain::catalogue`, write
//! through the request's unit of work (`store::billing`) and shape the
//! wire form. They never compute a discount or decide a transition
//! themselves.

pub mod checkout_configs;
pub mod offers;
pub mod prices;
pub mod products;
pub mod promotions;

use crate::error::ApiError;
use crate::handlers::Ctx;
use crate::wire::found;
use domain::Ref;
use store::billing::products::ProductRecord;

pub(crate) async fn product_by_ref(
    ctx: &Ctx,
    product_ref: &Ref,
) -> Result<ProductRecord, ApiError> {
    found(
        ctx.store()
            .get::<ProductRecord>(ctx.env(), product_ref)
            .await,
        "product",
    )
}
