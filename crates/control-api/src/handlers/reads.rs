//! The generic reads of billing records: a record that is `Served` (its
//! wire form, tag, status and reference filters) is listed and retrieved by
//! `list::<T>` and `retrieve::<T>`, bound in the operation table, so that
//! no resource carries list and retrieve handlers of its own.

use crate::error::ApiError;
use crate::handlers::catalogue::found;
use crate::handlers::lists::{Filter, ListQuery};
use crate::handlers::Ctx;
use crate::input::Input;
use crate::reply::Reply;
use domain::{Prefix, Timestamp};
use serde::Serialize;
use store::resource::{Resource, Scope, Value};

/// The values of a record's status.
pub struct StatusFilter {
    pub names: fn() -> Vec<&'static str>,
}

/// The `Served::STATUS` of a record whose status is the state type `$t`
/// (a `wire_enum` with `ALL` and `as_str`).
macro_rules! status_of {
    ($t:ty) => {
        Some($crate::handlers::reads::StatusFilter {
            names: || <$t>::ALL.iter().map(|s| s.as_str()).collect(),
        })
    };
}
pub(crate) use status_of;

/// A billing record as the API serves it.
pub trait Served: Resource + Send + Sync + 'static {
    type Dto: Serialize;
    const PREFIX: Prefix;
    /// For "no such …".
    const WHAT: &'static str;
    /// The path parameter of its retrieve.
    const PATH_PARAM: &'static str;
    /// Its `status` filter, when it has a status.
    const STATUS: Option<StatusFilter>;
    /// Its reference filters besides `status` (names of `Resource::FILTERS`).
    const REF_FILTERS: &'static [(&'static str, Prefix)];
    fn dto(&self, now: Timestamp) -> Self::Dto;
    fn etag(&self) -> String;
    /// `(created_at_ms, ref)`: its position in a list.
    fn position(&self) -> (i64, String);
}

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
    Reply::one(record.dto(ctx.now()), Some(record.etag()))
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
    let query = ListQuery::parse(ctx.op, &input)?;
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
