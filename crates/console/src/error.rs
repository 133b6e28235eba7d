//! `PageError`: every way a console request can fail, each answered as a
//! page with its own status (never a bare 500 for bad input), or, for a
//! session that ended, a redirect to the sign-in page.

use crate::html;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use control_api::error::ApiError;
use maud::html;

/// An API operation's error answer (contract section 2).
#[derive(Debug, Clone)]
pub struct Failure {
    pub status: u16,
    pub code: String,
    pub message: String,
    /// `(field, issue)` of each offending field.
    pub details: Vec<(String, String)>,
    pub request_id: Option<String>,
}

#[derive(Debug)]
pub enum PageError {
    /// No session, or one that ended (expired, or its credential revoked,
    /// expired or its account no longer active): back to sign-in.
    SignedOut,
    /// 403: a state change without its session's CSRF token.
    Csrf,
    /// 404: no such page or resource.
    NotFound(String),
    /// 400: input the console itself refuses.
    BadInput(String),
    /// 403: the credential lacks the permission a console-only read asks.
    Forbidden(&'static str),
    /// The API operation answered an error.
    Api(Failure),
    /// 503: the store is unreachable.
    Unavailable,
    /// 500: a defect, logged; the page says nothing more.
    Internal(String),
}

impl From<ApiError> for PageError {
    fn from(e: ApiError) -> PageError {
        match e {
            ApiError::AuthenticationFailed => PageError::SignedOut,
            ApiError::DependencyUnavailable => PageError::Unavailable,
            ApiError::Internal(source) => PageError::Internal(source.to_string()),
            e => PageError::Api(Failure {
                status: e.status().as_u16(),
                code: e.code().to_owned(),
                message: e.to_string(),
                details: Vec::new(),
                request_id: None,
            }),
        }
    }
}

impl From<store::StoreError> for PageError {
    fn from(e: store::StoreError) -> PageError {
        ApiError::from(e).into()
    }
}

impl PageError {
    fn status(&self) -> StatusCode {
        match self {
            PageError::SignedOut => StatusCode::SEE_OTHER,
            PageError::Csrf | PageError::Forbidden(_) => StatusCode::FORBIDDEN,
            PageError::NotFound(_) => StatusCode::NOT_FOUND,
            PageError::BadInput(_) => StatusCode::BAD_REQUEST,
            PageError::Api(f) => {
                StatusCode::from_u16(f.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
            }
            PageError::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            PageError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        if let PageError::SignedOut = self {
            return (
                StatusCode::SEE_OTHER,
                [(header::LOCATION, "/console/sign-in?ended=1")],
            )
                .into_response();
        }
        let status = self.status();
        let Shown {
            title,
            message,
            details,
            code,
            request_id,
        } = self.shown();
        let body = html! {
            section.error {
                h1 { (status.as_u16()) " " (title) }
                p.message { (message) }
                @if !details.is_empty() {
                    ul.details {
                        @for (field, issue) in &details {
                            li { code { (field) } ": " (issue) }
                        }
                    }
                }
                @if let Some(code) = &code {
                    p.meta { "code " code { (code) } }
                }
                @if let Some(id) = &request_id {
                    p.meta { "request " code { (id) } }
                }
                p { a href="/console" { "Back to the console" } }
            }
        };
        (status, html::bare(title, body)).into_response()
    }
}

/// What an error page says.
struct Shown {
    title: &'static str,
    message: String,
    details: Vec<(String, String)>,
    code: Option<String>,
    request_id: Option<String>,
}

impl PageError {
    fn shown(&self) -> Shown {
        let plain = |title, message: String, code: Option<&str>| Shown {
            title,
            message,
            details: Vec::new(),
            code: code.map(str::to_owned),
            request_id: None,
        };
        match self {
            PageError::SignedOut => plain("Signed out", String::new(), None),
            PageError::Csrf => plain(
                "Refused",
                "This form has no valid CSRF token: reload the page and try again.".into(),
                Some("csrf_failed"),
            ),
            PageError::Forbidden(permission) => plain(
                "Forbidden",
                format!("Your credential lacks the permission `{permission}`."),
                Some("forbidden"),
            ),
            PageError::NotFound(what) => plain("Not found", what.clone(), None),
            PageError::BadInput(what) => plain("Invalid input", what.clone(), None),
            PageError::Api(f) => Shown {
                title: title_of(f.status),
                message: f.message.clone(),
                details: f.details.clone(),
                code: Some(f.code.clone()),
                request_id: f.request_id.clone(),
            },
            PageError::Unavailable => plain(
                "Unavailable",
                "A backing service is unreachable; try again shortly.".into(),
                Some("dependency_unavailable"),
            ),
            PageError::Internal(source) => {
                tracing::error!(error = %source, "console page failed");
                plain(
                    "Internal error",
                    "Something went wrong on our side.".into(),
                    Some("internal_error"),
                )
            }
        }
    }
}

fn title_of(status: u16) -> &'static str {
    match status {
        400 | 413 => "Invalid input",
        401 => "Signed out",
        403 => "Forbidden",
        404 => "Not found",
        409 => "Conflict",
        412 => "Changed meanwhile",
        422 => "Not allowed now",
        428 => "Precondition required",
        429 => "Too many requests",
        503 => "Unavailable",
        _ => "Error",
    }
}

/// The page of a handler that panicked: a defect, answered without
/// details.
pub fn panic_page(_: Box<dyn std::any::Any + Send + 'static>) -> Response {
    PageError::Internal("a console handler panicked".into()).into_response()
}
