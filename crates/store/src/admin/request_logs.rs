//! Request logs: one row per API request, written after its response is
//! decided. Bodies, secrets and query strings are never recorded.

use super::Admin;
use crate::db::page::{fetch_page, Page, PageRequest};
use crate::db::tx::{int, text, Arg, Columns};
use crate::db::write;
use crate::StoreError;
use domain::{Ref, Timestamp};

#[derive(Debug, Clone)]
pub struct RequestLogRecord {
    pub request_log_ref: Ref,
    pub environment_ref: Option<Ref>,
    pub operation_id: Option<String>,
    pub method: String,
    pub path: String,
    pub status: u16,
    pub error_code: Option<String>,
    pub principal_ref: Option<Ref>,
    pub credential_ref: Option<Ref>,
    pub idempotency_key: Option<String>,
    pub duration_ms: i64,
    pub created_at: Timestamp,
}

#[derive(Debug, Clone, Default)]
pub struct RequestLogFilter {
    pub operation_id: Option<String>,
    pub status: Option<u16>,
}

fn from_row(row: &dyn Columns) -> Result<RequestLogRecord, StoreError> {
    let opt_ref = |col: &str| -> Result<Option<Ref>, StoreError> {
        Ok(row.text(col)?.map(Ref::from_trusted))
    };
    Ok(RequestLogRecord {
        request_log_ref: Ref::from_trusted(text(row, "request_log_ref")?),
        environment_ref: opt_ref("environment_ref")?,
        operation_id: row.text("operation_id")?,
        method: text(row, "method")?,
        path: text(row, "path")?,
        status: int(row, "status")? as u16,
        error_code: row.text("error_code")?,
        principal_ref: opt_ref("principal_ref")?,
        credential_ref: opt_ref("credential_ref")?,
        idempotency_key: row.text("idempotency_key")?,
        duration_ms: int(row, "duration_ms")?,
        created_at: Timestamp::from_millis(int(row, "created_at")?),
    })
}

impl Admin<'_> {
    /// Records a request, on the writer: called once the request's
    /// response is decided and its transaction has ended (never while
    /// holding a `WriteTx` of this store: with SQLite it would wait for that
    /// transaction's connection).
    pub async fn insert_request_log(&self, log: &RequestLogRecord) -> Result<(), StoreError> {
        write::autocommit(
            self.writer(),
            "INSERT INTO request_logs (request_log_ref, environment_ref, operation_id, method, path, \
             status, error_code, principal_ref, credential_ref, idempotency_key, duration_ms, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
            &[
                log.request_log_ref.as_str().into(),
                log.environment_ref.as_ref().map(Ref::as_str).into(),
                log.operation_id.as_deref().into(),
                (&log.method).into(),
                (&log.path).into(),
                i64::from(log.status).into(),
                log.error_code.as_deref().into(),
                log.principal_ref.as_ref().map(Ref::as_str).into(),
                log.credential_ref.as_ref().map(Ref::as_str).into(),
                log.idempotency_key.as_deref().into(),
                log.duration_ms.into(),
                log.created_at.millis().into(),
            ],
        )
        .await?;
        Ok(())
    }

    pub async fn list_request_logs(
        &self,
        environment_ref: &Ref,
        filter: &RequestLogFilter,
        page: &PageRequest,
    ) -> Result<Page<RequestLogRecord>, StoreError> {
        let args: [Arg; 3] = [
            environment_ref.as_str().into(),
            filter.operation_id.as_deref().unwrap_or_default().into(),
            filter.status.map(i64::from).unwrap_or(-1).into(),
        ];
        let sql_filter =
            "environment_ref = $1 AND ($2 = '' OR operation_id = $2) AND ($3 < 0 OR status = $3)";
        fetch_page(
            self.pool(),
            "request_logs",
            "request_log_ref",
            sql_filter,
            &args,
            page,
            from_row,
        )
        .await
    }
}
