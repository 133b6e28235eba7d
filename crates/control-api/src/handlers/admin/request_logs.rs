//! `listPublicRequestLogs`: the caller's environment's request logs, newest
//! first, filtered by `operation_id` and `status`.

use crate::error::ApiError;
use crate::handlers::lists::{Filter, FilterKind, ListQuery};
use crate::handlers::Ctx;
use crate::input::Input;
use crate::reply::Reply;
use crate::wire::ts;
use serde::Serialize;
use store::{RequestLogFilter, RequestLogRecord};
use utoipa::ToSchema;

#[derive(Debug, Serialize, ToSchema)]
pub struct RequestLogDto {
    pub request_log_ref: String,
    pub operation_id: Option<String>,
    pub method: String,
    /// The concrete path, without the query.
    pub path: String,
    pub status: u16,
    pub error_code: Option<String>,
    pub principal_ref: Option<String>,
    pub credential_ref: Option<String>,
    pub idempotency_key: Option<String>,
    pub duration_ms: i64,
    pub created_at: String,
}

impl From<&RequestLogRecord> for RequestLogDto {
    fn from(r: &RequestLogRecord) -> Self {
        RequestLogDto {
            request_log_ref: r.request_log_ref.to_string(),
            operation_id: r.operation_id.clone(),
            method: r.method.clone(),
            path: r.path.clone(),
            status: r.status,
            error_code: r.error_code.clone(),
            principal_ref: r.principal_ref.as_ref().map(|p| p.to_string()),
            credential_ref: r.credential_ref.as_ref().map(|p| p.to_string()),
            idempotency_key: r.idempotency_key.clone(),
            duration_ms: r.duration_ms,
            created_at: ts(r.created_at),
        }
    }
}

/// The filters of `listPublicRequestLogs`.
pub fn filters() -> Vec<Filter> {
    vec![
        Filter {
            name: "operation_id",
            kind: FilterKind::OperationId,
        },
        Filter {
            name: "status",
            kind: FilterKind::HttpStatus,
        },
    ]
}

pub async fn list(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let query = ListQuery::parse(ctx, &input)?;
    let (list_scope, page_request) = (query.scope, query.page);
    let operation_id = input.query_value("operation_id");
    // Checked by the query: an HTTP status.
    let status = input
        .query_value("status")
        .and_then(|s| s.parse::<u16>().ok());
    let filter = RequestLogFilter {
        operation_id: operation_id.map(str::to_owned),
        status,
    };
    let page = ctx
        .store()
        .admin()
        .list_request_logs(ctx.env(), &filter, &page_request)
        .await?;
    Ok(Reply::page(
        page,
        &list_scope,
        |l| (l.created_at.millis(), l.request_log_ref.to_string()),
        |l| RequestLogDto::from(l),
    ))
}
