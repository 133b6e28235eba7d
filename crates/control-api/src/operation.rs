//! What a row of the operation table is (`Operation`, its `Binding` to a
//! handler, `bind!`), apart from the rows themselves (`operations`), so that
//! a handler can name its row's type without importing the file that
//! imports every handler.

use crate::error::ApiError;
use crate::handlers::lists::Filter;
use crate::handlers::Ctx;
use crate::input::Input;
use crate::reply::Reply;
use futures::future::BoxFuture;

/// HTTP method of an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Get,
    Post,
    /// Changes some fields of a resource (`updateWebhookEndpoint`).
    Patch,
}

impl Method {
    /// Whether a request of this method carries a JSON body.
    pub fn has_body(self) -> bool {
        self != Method::Get
    }

    /// The method's name in lower case, as OpenAPI keys it.
    pub fn lower(self) -> &'static str {
        match self {
            Method::Get => "get",
            Method::Post => "post",
            Method::Patch => "patch",
        }
    }
}

/// The error sets of `interface.md`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorSet {
    E1,
    E2,
    E3,
    E4,
    E5,
    /// Writes that start background work and take no key: E5 and
    /// `version_conflict` (contract 12.4's `advanceTestClock`).
    E6,
}

impl ErrorSet {
    /// The error codes an operation of this set may answer.
    pub fn codes(self) -> &'static [&'static str] {
        const E1: &[&str] = &[
            "authentication_failed",
            "forbidden",
            "not_found",
            "validation_failed",
        ];
        const E2: &[&str] = &[
            "authentication_failed",
            "forbidden",
            "not_found",
            "validation_failed",
            "dependency_unavailable",
        ];
        const E3: &[&str] = &[
            "authentication_failed",
            "dependency_unavailable",
            "forbidden",
            "idempotency_key_required",
            "idempotency_mismatch",
            "not_found",
            "precondition_failed",
            "precondition_required",
            "semantic_error",
            "validation_failed",
            "version_conflict",
        ];
        const E4: &[&str] = &[
            "authentication_failed",
            "dependency_unavailable",
            "forbidden",
            "idempotency_mismatch",
            "not_found",
            "precondition_failed",
            "precondition_required",
            "semantic_error",
            "validation_failed",
            "version_conflict",
        ];
        const E5: &[&str] = &[
            "authentication_failed",
            "dependency_unavailable",
            "forbidden",
            "not_found",
            "semantic_error",
            "validation_failed",
        ];
        const E6: &[&str] = &[
            "authentication_failed",
            "dependency_unavailable",
            "forbidden",
            "not_found",
            "semantic_error",
            "validation_failed",
            "version_conflict",
        ];
        match self {
            ErrorSet::E1 => E1,
            ErrorSet::E2 => E2,
            ErrorSet::E3 => E3,
            ErrorSet::E4 => E4,
            ErrorSet::E5 => E5,
            ErrorSet::E6 => E6,
        }
    }
}

/// One row of the operation table.
#[derive(Debug, Clone, Copy)]
pub struct Operation {
    pub method: Method,
    pub path: &'static str,
    pub id: &'static str,
    pub permission: &'static str,
    /// Needs an `Idempotency-Key`.
    pub idempotent: bool,
    /// Needs an `If-Match`.
    pub if_match: bool,
    /// Pages with `limit` and `cursor`.
    pub cursor: bool,
    pub errors: ErrorSet,
    /// The HTTP status of a success: 201 for operations that create.
    pub success_status: u16,
    /// The handler and wire schemas; `None` for operations not built yet.
    pub binding: Option<Binding>,
}

pub type HandlerFn = for<'a> fn(&'a mut Ctx, Input) -> BoxFuture<'a, Result<Reply, ApiError>>;

/// A schema for the OpenAPI document: its name and the component schemas
/// it needs (itself included).
pub type SchemaFn = fn() -> (
    String,
    Vec<(
        String,
        utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>,
    )>,
);

/// How an operation is served and described: the handler of a row of
/// `OPERATIONS` and its wire schemas (built with `bind!`).
#[derive(Debug, Clone, Copy)]
pub struct Binding {
    pub handler: HandlerFn,
    /// Request body schema, for operations that take one.
    pub request: Option<SchemaFn>,
    /// Schema of `data`, or of one item for lists.
    pub response: SchemaFn,
    /// A list's query filters besides `limit` and `cursor`: what
    /// `ListQuery::parse` accepts and checks, and what the OpenAPI document
    /// lists.
    pub filters: fn() -> Vec<Filter>,
}

/// The schema function of a `ToSchema` type.
pub fn schema<T: utoipa::ToSchema>() -> (
    String,
    Vec<(
        String,
        utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>,
    )>,
) {
    let mut all = Vec::new();
    <T as utoipa::ToSchema>::schemas(&mut all);
    let name = <T as utoipa::ToSchema>::name().into_owned();
    all.push((name.clone(), <T as utoipa::PartialSchema>::schema()));
    (name, all)
}

/// The `Binding` of a handler `async fn(&mut Ctx, Input) -> Result<Reply,
/// ApiError>`, with its request body type (if it takes one) and the type
/// of its `data` (of one item, for lists). Used in the rows of
/// `OPERATIONS`.
macro_rules! bind {
    ($f:path, req: $req:ty, resp: $resp:ty) => {
        $crate::operation::Binding {
            handler: |ctx, input| ::std::boxed::Box::pin($f(ctx, input)),
            request: Some($crate::operation::schema::<$req>),
            response: $crate::operation::schema::<$resp>,
            filters: ::std::vec::Vec::new,
        }
    };
    ($f:path, resp: $resp:ty) => {
        $crate::operation::Binding {
            handler: |ctx, input| ::std::boxed::Box::pin($f(ctx, input)),
            request: None,
            response: $crate::operation::schema::<$resp>,
            filters: ::std::vec::Vec::new,
        }
    };
    ($f:path, resp: $resp:ty, filters: $filters:expr) => {
        $crate::operation::Binding {
            handler: |ctx, input| ::std::boxed::Box::pin($f(ctx, input)),
            request: None,
            response: $crate::operation::schema::<$resp>,
            filters: $filters,
        }
    };
}
pub(crate) use bind;

/// The row of `table` named `id`.
pub fn find(table: &'static [Operation], id: &str) -> Option<&'static Operation> {
    table.iter().find(|o| o.id == id)
}

/// Every permission name of `table`, sorted and unique.
pub fn permissions_of(table: &[Operation]) -> Vec<&'static str> {
    let mut p: Vec<&str> = table.iter().map(|o| o.permission).collect();
    p.sort_unstable();
    p.dedup();
    p
}
