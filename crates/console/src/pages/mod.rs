//! The console's pages, one module each, and what they share: parsed
//! forms and queries (`Fields`), notices after an action, the filters'
//! choices, the stylesheet, the index and the 404 page.

pub mod catalogue;
pub mod dead_letters;
pub mod deliveries;
pub mod delivery;
pub mod endpoints;
pub mod jobs;
pub mod logs;
pub mod sign_in;
pub mod subscriptions;

use crate::api::Signed;
use crate::error::PageError;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use domain::webhook::{catalogue as types, DeliveryStatus, ResponseClass};

/// The stylesheet, the console's only asset.
const CSS: &str = include_str!("../../assets/console.css");

pub async fn stylesheet() -> Response {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], CSS).into_response()
}

/// `/console`: the first page the caller may read, or the sign-in page.
pub async fn index(signed: Result<Signed, PageError>) -> Redirect {
    match signed {
        Ok(signed) => {
            let first = [
                ("webhooks:read_list_deliveries", "/console/deliveries"),
                ("webhooks:read_list_endpoints", "/console/endpoints"),
                ("webhooks:read_redrive_jobs", "/console/redrive-jobs"),
                ("webhooks:read_event_catalog", "/console/event-types"),
                ("events:read_dead_letters", "/console/dead-letters"),
                ("request_logs:read_list", "/console/request-logs"),
                ("subscriptions:read_list", "/console/subscriptions"),
            ]
            .into_iter()
            .find(|(p, _)| signed.holds(p))
            .map_or("/console/deliveries", |(_, path)| path);
            Redirect::to(first)
        }
        Err(_) => Redirect::to("/console/sign-in"),
    }
}

/// Any other path under `/console`.
pub async fn not_found() -> Response {
    let e = PageError::NotFound("There is no such page in the console.".into());
    let mut r = e.into_response();
    *r.status_mut() = StatusCode::NOT_FOUND;
    r
}

/// The fields of a form body or of a query string.
#[derive(Debug, Default)]
pub struct Fields(Vec<(String, String)>);

impl Fields {
    /// `application/x-www-form-urlencoded` fields; a repeated name keeps
    /// its first value.
    pub fn parse(bytes: &[u8]) -> Result<Fields, PageError> {
        serde_urlencoded::from_bytes::<Vec<(String, String)>>(bytes)
            .map(Fields)
            .map_err(|_| PageError::BadInput("The form or query could not be read.".into()))
    }

    pub fn query(raw: Option<String>) -> Result<Fields, PageError> {
        Fields::parse(raw.unwrap_or_default().as_bytes())
    }

    /// The value of `name`, trimmed, if present and not empty.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.trim())
            .filter(|v| !v.is_empty())
    }

    /// The value of `name`, or "".
    pub fn value(&self, name: &str) -> &str {
        self.get(name).unwrap_or_default()
    }
}

/// The text of a notice a redirect after an action names (`?notice=`):
/// only these, never text from the request.
pub fn notice(code: Option<&str>) -> Option<&'static str> {
    Some(match code? {
        "queued" => "Redrive started: a new generation is due now.",
        "held" => "Redrive started: the new generation is held while the endpoint is paused.",
        "already_pending" => "Nothing to redrive: the delivery is still pending or held.",
        "skipped" => {
            "Skipped: the delivery stays failed, and its key's next deliveries are released."
        }
        "paused" => "The endpoint is paused; its new deliveries are held.",
        "resumed" => "The endpoint is active again; its held deliveries are released.",
        "limits_saved" => "The endpoint's limits are saved; they apply from its next attempt on.",
        "confirmed" => "The pending secret is active; the old one retires after the grace period.",
        "revoked" => "Secret version revoked: it signs no more attempts.",
        "canceled" => "The redrive job is canceled; what it redrove stays redriven.",
        "test_sent" => "Test delivery created.",
        _ => return None,
    })
}

/// The delivery statuses a filter offers.
pub fn delivery_statuses() -> Vec<&'static str> {
    DeliveryStatus::ALL.iter().map(|s| s.as_str()).collect()
}

/// The response classes a filter offers (`4xx`, `5xx`, `none`).
pub fn response_classes() -> Vec<&'static str> {
    ResponseClass::FAILURES.iter().map(|c| c.as_str()).collect()
}

/// The event types of the catalogue.
pub fn event_types() -> Vec<&'static str> {
    types::all().iter().map(|t| t.name).collect()
}

/// A time a filter takes: RFC 3339, or what a `datetime-local` field sends
/// (`2026-11-22T10:04`, read as UTC).
pub fn moment(value: &str) -> String {
    let v = value.trim();
    if v.is_empty() || v.ends_with('Z') || v.contains('+') {
        return v.to_owned();
    }
    match v.len() {
        16 => format!("{v}:00Z"),
        19 => format!("{v}Z"),
        _ => v.to_owned(),
    }
}

/// A `select` of `options`, with an "any" choice first unless `required`.
pub fn select(name: &str, options: &[&str], current: &str, any: Option<&str>) -> maud::Markup {
    maud::html! {
        select name=(name) id=(name) {
            @if let Some(label) = any {
                option value="" selected[current.is_empty()] { (label) }
            }
            @for o in options {
                option value=(o) selected[*o == current] { (o) }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datetime_local_values_become_rfc3339() {
        assert_eq!(moment("2026-11-22T10:04"), "2026-11-22T10:04:00Z");
        assert_eq!(moment("2026-11-22T10:04:05"), "2026-11-22T10:04:05Z");
        assert_eq!(moment("2026-11-22T10:04:05Z"), "2026-11-22T10:04:05Z");
        assert_eq!(moment(""), "");
        assert_eq!(moment("garbage"), "garbage");
    }

    #[test]
    fn a_notice_is_never_request_text() {
        assert!(notice(Some("<script>")).is_none());
        assert!(notice(Some("paused")).is_some());
    }
}
