//! The generic reads of billing records: a record that is `Served`
//! (`commerce::shapes`: its wire form, tag, status and reference filters)
//! is listed and retrieved by `list::<T>` and `retrieve::<T>`, bound in the
//! operation table, so that no resource carries list and retrieve handlers
//! of its own.

use crate::error::ApiError;
use crate::handlers::lists::{Filter, ListQuery};
use crate::handlers::Ctx;
use crate::input::Input;
use crate::reply::Reply;
use crate::wire::found;
pub use commerce::shapes::Served;
use store::resource::{Scope, Value};

/// The record named by the path parameter, in the caller's environment.
pub(crate) async fn load<T: Served>(ctx: &Ctx, input: &Input) -> Result<T, ApiError> {
    let reference = input.path_ref(T::PATH_PARAM, T::PREFIX)?;
    load_by_ref(ctx, &reference).await
}

/// The record `reference` of the caller's environment; 404 otherwise.
pub(crate) async fn load_by_ref<T: Served>(
    ctx: &Ctx,
    reference: &domain::Ref,
) -> Result<T, ApiError> {
    found(ctx.store().get::<T>(ctx.env(), reference).await, T::WHAT)
}

pub(crate) fn one<T: Served>(ctx: &Ctx, record: &T) -> Reply {
    let now = ctx.now();
    Reply::one(record.dto(now), Some(record.etag(now)))
}

pub async fn retrieve<T: Served>(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    input.query_params(&[])?;
    Ok(one(ctx, &load::<T>(ctx, &input).await?))
}

/// The filters of `list::<T>`: its `status` (when it has one), then its
/// reference filters.
pub fn filters<T: Served>() -> Vec<Filter> {
    let status = T::STATUS.map(|s| Filter::one_of("status", s.names));
    status
        .into_iter()
        .chain(
            T::REF_FILTERS
                .iter()
                .map(|(name, prefix)| Filter::reference(name, *prefix)),
        )
        .collect()
}

pub async fn list<T: Served>(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let query = ListQuery::parse(ctx, &input)?;
    let filters: Vec<(&str, Option<Value>)> = filters::<T>()
        .iter()
        .map(|f| (f.name, input.query_value(f.name).map(Value::from)))
        .collect();
    let page = ctx
        .store()
        .list::<T>(Scope::environment(ctx.env()), &filters, &query.page)
        .await?;
    let now = ctx.now();
    Ok(Reply::page(page, &query.scope, T::position, |r| r.dto(now)))
}
