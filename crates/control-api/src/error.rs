//! `ApiError`: every failure an operation can answer, mapped to the
//! contract's codes and statuses (contract section 2) in this one place.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use commerce::CommerceError;
use serde::Serialize;
use store::StoreError;

/// One offending field of a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Detail {
    /// Dotted body path, query or path parameter name, or header name.
    pub field: String,
    pub issue: String,
}

impl Detail {
    pub fn new(field: impl Into<String>, issue: impl Into<String>) -> Detail {
        Detail {
            field: field.into(),
            issue: issue.into(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 401: no, malformed, unknown, revoked or expired credential; suspended
    /// or retired principal. One message for all of them.
    #[error("authentication failed")]
    AuthenticationFailed,
    /// 403: the principal lacks the operation's permission.
    #[error("the credential lacks the permission `{0}`")]
    Forbidden(&'static str),
    /// 404: unknown reference, one of another environment, or unknown route.
    #[error("{0}")]
    NotFound(String),
    /// 400: malformed body, query, path reference or header.
    #[error("the request is invalid")]
    Validation(Vec<Detail>),
    /// 413 with code `validation_failed`.
    #[error("the request body is larger than 1 MiB")]
    BodyTooLarge,
    /// 408 with code `validation_failed`: the body's next piece did not
    /// arrive within the read time-out (`serve`).
    #[error("the request body arrived too slowly")]
    BodyTimeout { waited_ms: u64 },
    /// 400: an E3 operation without `Idempotency-Key`.
    #[error("this operation requires an Idempotency-Key header")]
    IdempotencyKeyRequired,
    /// 422: the key was used with a different request.
    #[error("this Idempotency-Key was used with a different request")]
    IdempotencyMismatch,
    /// 422: well-formed but not allowed now.
    #[error("{0}")]
    Semantic(String),
    /// 422 `semantic_error` with the detail `payment_declined`: a charge a
    /// change asked for was declined. Unlike every other decided error,
    /// what the operation wrote (the failed payment) commits with it.
    #[error("the charge was declined")]
    PaymentDeclined,
    /// 428: an IfM operation without `If-Match`.
    #[error("this operation requires an If-Match header")]
    PreconditionRequired,
    /// 412: `If-Match` does not match the current ETag.
    #[error("the resource has changed: If-Match does not match its current ETag")]
    PreconditionFailed,
    /// 409: lost a race, or the same key is still executing.
    #[error("{0}")]
    VersionConflict(&'static str),
    /// 503: a backing service is unreachable.
    #[error("a backing service is unavailable; retry later")]
    DependencyUnavailable,
    /// 429: the credential is over its rate limit; the value is the whole
    /// seconds until a request would pass.
    #[error("this credential sent more requests than its rate limit allows; retry later")]
    RateLimited { retry_after_secs: u64 },
    /// 500: a defect. The source is logged, never sent.
    #[error("internal error")]
    Internal(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl ApiError {
    pub fn validation(field: impl Into<String>, issue: impl Into<String>) -> ApiError {
        ApiError::Validation(vec![Detail::new(field, issue)])
    }

    pub fn not_found(what: &str) -> ApiError {
        ApiError::NotFound(format!("no such {what}"))
    }

    /// The request's idempotency key is claimed by a request still
    /// executing (contract section 4).
    pub fn key_in_flight() -> ApiError {
        ApiError::VersionConflict("a request with this Idempotency-Key is still executing; retry")
    }

    pub fn semantic(msg: impl Into<String>) -> ApiError {
        ApiError::Semantic(msg.into())
    }

    pub fn code(&self) -> &'static str {
        match self {
            ApiError::AuthenticationFailed => "authentication_failed",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::NotFound(_) => "not_found",
            ApiError::Validation(_) | ApiError::BodyTooLarge | ApiError::BodyTimeout { .. } => {
                "validation_failed"
            }
            ApiError::IdempotencyKeyRequired => "idempotency_key_required",
            ApiError::IdempotencyMismatch => "idempotency_mismatch",
            ApiError::Semantic(_) | ApiError::PaymentDeclined => "semantic_error",
            ApiError::PreconditionRequired => "precondition_required",
            ApiError::PreconditionFailed => "precondition_failed",
            ApiError::VersionConflict(_) => "version_conflict",
            ApiError::DependencyUnavailable => "dependency_unavailable",
            ApiError::RateLimited { .. } => "rate_limited",
            ApiError::Internal(_) => "internal_error",
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::AuthenticationFailed => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Validation(_) | ApiError::IdempotencyKeyRequired => StatusCode::BAD_REQUEST,
            ApiError::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::BodyTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            ApiError::IdempotencyMismatch | ApiError::Semantic(_) | ApiError::PaymentDeclined => {
                StatusCode::UNPROCESSABLE_ENTITY
            }
            ApiError::PreconditionRequired => StatusCode::PRECONDITION_REQUIRED,
            ApiError::PreconditionFailed => StatusCode::PRECONDITION_FAILED,
            ApiError::VersionConflict(_) => StatusCode::CONFLICT,
            ApiError::DependencyUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The error body of a request, as JSON text.
    pub fn body_json(&self, request_id: &str) -> String {
        let details = match self {
            ApiError::Validation(d) => d.clone(),
            ApiError::BodyTooLarge => vec![Detail::new("body", "larger than 1048576 bytes")],
            ApiError::BodyTimeout { waited_ms } => vec![Detail::new(
                "body",
                format!("no data arrived for {waited_ms} ms"),
            )],
            ApiError::PaymentDeclined => {
                vec![Detail::new("stored_payment_method_ref", "payment_declined")]
            }
            _ => Vec::new(),
        };
        let body = ErrorBody {
            error: ErrorObject {
                code: self.code(),
                message: self.to_string(),
                request_id: request_id.to_owned(),
                details,
            },
        };
        serde_json::to_string(&body).unwrap_or_default()
    }

    /// The error body and headers for a request.
    pub fn into_response_for(self, request_id: &str) -> Response {
        if let ApiError::Internal(source) = &self {
            tracing::error!(
                request.id = request_id,
                error = %chain(source.as_ref()),
                "internal error"
            );
        }
        let mut response = (
            self.status(),
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            self.body_json(request_id),
        )
            .into_response();
        let headers = response.headers_mut();
        match self {
            ApiError::AuthenticationFailed => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            ApiError::VersionConflict(_) => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            ApiError::DependencyUnavailable => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
            }
            ApiError::RateLimited { retry_after_secs } => {
                headers.insert(
                    header::RETRY_AFTER,
                    HeaderValue::from(retry_after_secs.max(1)),
                );
            }
            _ => {}
        }
        response
    }
}

/// An error and its sources, `outer: inner: …`, for the log (a source an
/// outer message already ends with is not repeated): a defect is logged
/// once, so that line must say what happened.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let next = s.to_string();
        if !text.ends_with(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = s.source();
    }
    text
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    pub error: ErrorObject,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorObject {
    /// One of the contract's error codes; clients branch on it.
    pub code: &'static str,
    /// For humans.
    pub message: String,
    pub request_id: String,
    pub details: Vec<Detail>,
}

/// By variant, never by text: a missing row is 404, a lost race 409, and
/// only an unreachable or busy database (`StoreError::is_unavailable`,
/// which for a shared write asks its cause) is 503 `dependency_unavailable`.
/// Anything else (a refused or malformed statement, a corrupt row, a
/// uniqueness rule the handler did not map, a defect of the store) is a
/// 500 `internal_error`, whose source `into_response_for` logs once with
/// the request id.
impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        match e {
            StoreError::NotFound => ApiError::NotFound("no such resource".into()),
            StoreError::Conflict => {
                ApiError::VersionConflict("the resource was changed by a concurrent request; retry")
            }
            e if e.is_unavailable() => ApiError::DependencyUnavailable,
            e => ApiError::Internal(Box::new(e)),
        }
    }
}

/// A use case's refusal, by variant: what the caller gave is malformed
/// (400) or refused by the rules (422), a record is missing (404), the
/// processor is out of reach (503); a store error maps as above; a defect is
/// a 500.
impl From<CommerceError> for ApiError {
    fn from(e: CommerceError) -> ApiError {
        match e {
            CommerceError::NotFound(what) => ApiError::not_found(what),
            CommerceError::Invalid { field, issue } => ApiError::validation(field, issue),
            CommerceError::Refused(why) => ApiError::Semantic(why),
            CommerceError::PaymentDeclined => ApiError::PaymentDeclined,
            CommerceError::ProcessorUnavailable => ApiError::DependencyUnavailable,
            CommerceError::Store(e) => e.into(),
            e @ CommerceError::Broken(_) => ApiError::Internal(Box::new(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapped(e: StoreError) -> (StatusCode, &'static str) {
        let e = ApiError::from(e);
        (e.status(), e.code())
    }

    #[test]
    fn store_errors_that_are_not_outages_are_internal_errors() {
        let internal = (StatusCode::INTERNAL_SERVER_ERROR, "internal_error");
        assert_eq!(mapped(StoreError::Duplicate), internal);
        assert_eq!(mapped(StoreError::Corrupt("status".into())), internal);
        let bug = StoreError::from(sqlx::Error::ColumnNotFound("status".into()));
        assert_eq!(mapped(bug), internal);
        assert_eq!(
            mapped(StoreError::NotFound),
            (StatusCode::NOT_FOUND, "not_found")
        );
        assert_eq!(
            mapped(StoreError::Conflict),
            (StatusCode::CONFLICT, "version_conflict")
        );
    }

    #[test]
    fn an_unavailable_dependency_is_503_with_retry_after() {
        // Which store errors are outages is `StoreError::is_unavailable`'s
        // to say (its tests: lost connections, full disks, busy databases).
        let response = ApiError::DependencyUnavailable.into_response_for("req_AAAAAAAAAAAA");
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[header::RETRY_AFTER], "5");
        assert_eq!(
            ApiError::DependencyUnavailable.code(),
            "dependency_unavailable"
        );
    }

    #[test]
    fn an_internal_error_is_logged_with_its_causes() {
        let io = std::io::Error::other("no status");
        let e = StoreError::from(sqlx::Error::Io(io));
        let text = chain(&e);
        assert!(text.contains("database error"), "{text}");
        assert_eq!(text.matches("no status").count(), 1, "{text}");
    }
}
