//! Request logs: one row per API request, written once its response is
//! decided: in the request's unit of work when it commits one (`insert`),
//! else on its own (`Admin::insert_request_log`). Bodies, secrets and
//! query strings are never recorded.

use super::Admin;
use crate::db::page::{Page, PageRequest};
use crate::db::tx::{int, text, Arg, Columns, WriteTx};
use crate::resource::{Resource, Scope, Value};
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

impl Resource for RequestLogRecord {
    const TABLE: &'static str = "request_logs";
    const REF_COLUMN: &'static str = "request_log_ref";
    const FILTERS: &'static [(&'static str, &'static str)] =
        &[("operation_id", "operation_id"), ("status", "status")];

    fn decode(row: &dyn Columns) -> Result<Self, StoreError> {
        from_row(row)
    }
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

const INSERT: &str = "INSERT INTO request_logs (request_log_ref, environment_ref, operation_id, \
     method, path, status, error_code, principal_ref, credential_ref, idempotency_key, duration_ms, \
     created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)";

fn insert_args(log: &RequestLogRecord) -> [Arg<'_>; 12] {
    [
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
    ]
}

/// Records a request in the request's own unit of work, so that the line
/// commits with what the request wrote (and costs no commit of its own).
pub async fn insert(tx: &mut WriteTx, log: &RequestLogRecord) -> Result<(), StoreError> {
    tx.execute(INSERT, &insert_args(log)).await?;
    Ok(())
}

impl Admin<'_> {
    /// Records a request in a unit of work of its own: for a request that
    /// wrote nothing, or whose unit of work has ended (never while
    /// holding a `WriteTx` of this store: with SQLite it would wait for
    /// that transaction's turn).
    pub async fn insert_request_log(&self, log: &RequestLogRecord) -> Result<(), StoreError> {
        self.0.write_alone(INSERT, &insert_args(log)).await?;
        Ok(())
    }

    /// A page of the environment's request logs that meet `filter`,
    /// newest first.
    pub async fn list_request_logs(
        &self,
        environment_ref: &Ref,
        filter: &RequestLogFilter,
        page: &PageRequest,
    ) -> Result<Page<RequestLogRecord>, StoreError> {
        // An empty operation id filters nothing, as it always has.
        let operation_id = filter.operation_id.as_deref().filter(|o| !o.is_empty());
        self.0
            .list(
                Scope::environment(environment_ref),
                &[
                    ("operation_id", operation_id.map(Value::from)),
                    ("status", filter.status.map(|s| i64::from(s).into())),
                ],
                page,
            )
            .await
    }
}
