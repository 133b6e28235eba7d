//! The page chrome and the small pieces every page uses: navigation (only
//! the pages the caller may read), hidden form fields (the CSRF token and
//! a fresh idempotency key), time stamps, status badges and JSON.

use crate::api::Signed;
use axum::response::Html;
use maud::{html, Markup, DOCTYPE};
use serde_json::Value;

/// The console's pages, for the navigation: path, label and the
/// permission of the operation that lists them.
const NAV: &[(Nav, &str, &str, &str)] = &[
    (
        Nav::Deliveries,
        "/console/deliveries",
        "Deliveries",
        "webhooks:read_list_deliveries",
    ),
    (
        Nav::Jobs,
        "/console/redrive-jobs",
        "Redrive jobs",
        "webhooks:read_redrive_jobs",
    ),
    (
        Nav::Endpoints,
        "/console/endpoints",
        "Endpoints",
        "webhooks:read_list_endpoints",
    ),
    (
        Nav::Catalogue,
        "/console/event-types",
        "Event types",
        "webhooks:read_event_catalog",
    ),
    (
        Nav::DeadLetters,
        "/console/dead-letters",
        "Dead letters",
        "events:read_dead_letters",
    ),
    (
        Nav::Logs,
        "/console/request-logs",
        "Request logs",
        "request_logs:read_list",
    ),
    (
        Nav::Subscriptions,
        "/console/subscriptions",
        "Subscriptions",
        "subscriptions:read_list",
    ),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nav {
    Deliveries,
    Jobs,
    Endpoints,
    Catalogue,
    DeadLetters,
    Logs,
    Subscriptions,
}

fn head(title: &str, extra: Markup) -> Markup {
    html! {
        head {
            meta charset="utf-8";
            meta name="viewport" content="width=device-width, initial-scale=1";
            title { (title) " · billing console" }
            link rel="stylesheet" href="/console/console.css";
            (extra)
        }
    }
}

/// A page of a signed-in caller: header, navigation, an optional notice
/// and `body`.
pub fn page(
    title: &str,
    signed: &Signed,
    active: Nav,
    notice: Option<&str>,
    body: Markup,
) -> Html<String> {
    page_with(title, signed, active, notice, html! {}, body)
}

/// `page` with more in its head (a refresh while a job runs).
pub fn page_with(
    title: &str,
    signed: &Signed,
    active: Nav,
    notice: Option<&str>,
    extra_head: Markup,
    body: Markup,
) -> Html<String> {
    let caller = &signed.caller;
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            (head(title, extra_head))
            body {
                header.top {
                    a.brand href="/console" { "billing console" }
                    span.env.(caller.mode.as_str()) { (caller.mode.as_str()) }
                    span.who { "signed in as " code { (caller.credential_ref.as_str()) } }
                    form.sign-out method="post" action="/console/sign-out" {
                        (csrf(signed))
                        button type="submit" { "Sign out" }
                    }
                }
                nav {
                    @for (item, href, label, permission) in NAV {
                        @if caller.holds(permission) {
                            a href=(href) class=[(*item == active).then_some("active")] { (label) }
                        }
                    }
                }
                main {
                    @if let Some(n) = notice {
                        p.notice role="status" { (n) }
                    }
                    (body)
                }
            }
        }
    };
    Html(markup.into_string())
}

/// A page without a session: sign-in and errors.
pub fn bare(title: &str, body: Markup) -> Html<String> {
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            (head(title, html! {}))
            body {
                header.top { a.brand href="/console" { "billing console" } }
                main { (body) }
            }
        }
    };
    Html(markup.into_string())
}

/// The session's CSRF token, for every form that changes state.
pub fn csrf(signed: &Signed) -> Markup {
    html! { input type="hidden" name="csrf" value=(signed.csrf); }
}

/// A fresh idempotency key: the form's resubmission replays its first
/// answer instead of acting twice.
pub fn idempotency_key() -> Markup {
    let key = format!("console-{}", crate::session::nonce());
    html! { input type="hidden" name="idempotency_key" value=(key); }
}

/// A string field of an API answer ("" when absent or not a string).
pub fn s(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

/// A number, a string or nothing, as text.
pub fn text(v: &Value) -> String {
    match v {
        Value::Null => "—".to_owned(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// An RFC 3339 time stamp of an answer, shortened for reading.
pub fn when(v: &Value) -> String {
    match v.as_str() {
        None => "—".to_owned(),
        Some(t) => {
            let t = t.replacen('T', " ", 1);
            match t.split_once('.') {
                Some((head, _)) => format!("{head}Z"),
                None => t,
            }
        }
    }
}

/// A status as a coloured badge.
pub fn badge(status: &str) -> Markup {
    html! { span class={ "badge " (status) } { (status) } }
}

/// JSON, indented, for a `pre`.
pub fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

/// The items of a list answer.
pub fn items(data: &Value) -> Vec<Value> {
    data["items"].as_array().cloned().unwrap_or_default()
}

/// A link to the next page of a list: `base` with `params` and the
/// answer's `next_cursor`, when it has one.
pub fn next_page(base: &str, params: &[(&str, &str)], data: &Value) -> Markup {
    let Some(cursor) = data["next_cursor"].as_str() else {
        return html! {};
    };
    let mut all: Vec<(&str, &str)> = params
        .iter()
        .filter(|(k, v)| !v.is_empty() && *k != "cursor")
        .copied()
        .collect();
    all.push(("cursor", cursor));
    let query = serde_urlencoded::to_string(&all).unwrap_or_default();
    html! { p.more { a href={ (base) "?" (query) } { "Next page →" } } }
}
