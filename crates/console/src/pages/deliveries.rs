//! Deliveries: the newest deliveries of every endpoint of the caller's
//! environment at once (contract 12.3), the endpoint being one more
//! filter beside those of contract 12.2; a search by `delivery_ref` (that
//! delivery's page) or by `event_ref` (the event's deliveries).
//!
//! With an endpoint chosen the page is `listWebhookDeliveries` itself.
//! Without one, no operation lists them: the page reads the store
//! (`Webhooks::environment_deliveries`) in the caller's environment,
//! behind that operation's permission, with its filters checked as it
//! checks them and a cursor bound to them in the same way. An event's
//! deliveries are read from the store likewise.

use super::{delivery_statuses, event_types, moment, response_classes, select, Fields};
use crate::api::Signed;
use crate::error::PageError;
use crate::html::{self, badge, items, next_page, s, text, when, Nav};
use crate::Console;
use axum::extract::{RawQuery, State};
use axum::response::{IntoResponse, Redirect, Response};
use domain::cursor::{scope, Cursor};
use domain::webhook::{DeliveryStatus, ResponseClass};
use domain::{Prefix, Ref, Timestamp};
use maud::{html, Markup};
use serde_json::{json, Value};
use store::{DeliveryFilter, DeliveryRecord, PageRequest};

const LIST_PERMISSION: &str = "webhooks:read_list_deliveries";

/// Deliveries a page lists.
const PAGE: u32 = 50;

/// The list the cursors of the page across endpoints belong to (their
/// scope also covers every filter, as an operation's do).
const ACROSS: &str = "console.deliveries";

pub async fn list(
    State(console): State<Console>,
    signed: Signed,
    RawQuery(query): RawQuery,
) -> Result<Response, PageError> {
    let q = Fields::query(query)?;
    if let Some(search) = q.get("q") {
        return search_for(&console, &signed, search).await;
    }
    let endpoints = endpoint_choices(&console, &signed).await?;
    let endpoint = q.value("endpoint_ref");
    let created_after = moment(q.value("created_after"));
    let created_before = moment(q.value("created_before"));
    let filters: Vec<(&str, &str)> = vec![
        ("status", q.value("status")),
        ("public_event_type", q.value("public_event_type")),
        ("created_after", &created_after),
        ("created_before", &created_before),
        ("last_response_class", q.value("last_response_class")),
    ];
    let data = if endpoint.is_empty() {
        across_endpoints(&console, &signed, &filters, q.value("cursor")).await?
    } else {
        let mut query = filters.clone();
        let limit = PAGE.to_string();
        query.push(("limit", &limit));
        query.push(("cursor", q.value("cursor")));
        signed
            .api(&console)
            .read(
                "listWebhookDeliveries",
                &[("endpoint_ref", endpoint)],
                &query,
            )
            .await?
    };
    let mut params = filters.clone();
    params.push(("endpoint_ref", endpoint));
    let redrivable = matches!(q.value("status"), "succeeded" | "failed")
        && signed.holds("webhooks:redrive_by_filter");
    let body = html! {
        h1 { "Deliveries" }
        (search_form(""))
        (filter_form(&q, &endpoints))
        @if endpoint.is_empty() {
            p.hint { "Newest first, across every endpoint; choose an endpoint to see only its deliveries." }
        }
        (table(&items(&data), &endpoints))
        (next_page("/console/deliveries", &params, &data))
        @if redrivable {
            p { a.button href={ "/console/redrive-jobs?" (query_of(&params)) } {
                "Redrive every delivery matching these filters…" } }
        }
    };
    Ok(html::page("Deliveries", &signed, Nav::Deliveries, None, body).into_response())
}

/// A page of the newest deliveries of every endpoint of the caller's
/// environment that meet `filters`, after `cursor` (empty for the first),
/// shaped as a list operation's `data` (`items`, `next_cursor`).
async fn across_endpoints(
    console: &Console,
    signed: &Signed,
    filters: &[(&str, &str)],
    cursor: &str,
) -> Result<Value, PageError> {
    if !signed.holds(LIST_PERMISSION) {
        return Err(PageError::Forbidden(LIST_PERMISSION));
    }
    let filter = delivery_filter(filters)?;
    let values: Vec<(&str, Option<&str>)> = filters
        .iter()
        .map(|(k, v)| (*k, Some(*v).filter(|v| !v.is_empty())))
        .collect();
    let list = scope(ACROSS, &values);
    let after = match cursor {
        "" => None,
        c => {
            let c = Cursor::decode(c, &list)
                .map_err(|e| PageError::BadInput(format!("This page's cursor is refused: {e}.")))?;
            Some((c.created_at_ms, c.last_ref))
        }
    };
    let page = console
        .app
        .store
        .webhooks()
        .environment_deliveries(
            &signed.caller.environment_ref,
            &filter,
            &PageRequest { limit: PAGE, after },
        )
        .await?;
    let next_cursor = page.items.last().filter(|_| page.has_more).map(|d| {
        Cursor {
            created_at_ms: d.created_at.millis(),
            last_ref: d.delivery_ref.to_string(),
        }
        .encode(&list)
    });
    Ok(json!({
        "items": page.items.iter().map(row).collect::<Vec<_>>(),
        "next_cursor": next_cursor,
    }))
}

/// The delivery filter of the page's `filters` (times already RFC 3339),
/// each value checked as `listWebhookDeliveries` checks it.
fn delivery_filter(filters: &[(&str, &str)]) -> Result<DeliveryFilter, PageError> {
    let mut filter = DeliveryFilter::default();
    for (name, value) in filters.iter().filter(|(_, v)| !v.is_empty()) {
        let refused = |expected: String| {
            PageError::BadInput(format!(
                "The filter {name} must be {expected}, not `{value}`."
            ))
        };
        let one_of = |values: Vec<&str>| refused(format!("one of {}", values.join(", ")));
        match *name {
            "status" => {
                filter.status =
                    Some(DeliveryStatus::parse(value).ok_or_else(|| one_of(delivery_statuses()))?);
            }
            "public_event_type" => {
                if !event_types().contains(value) {
                    return Err(one_of(event_types()));
                }
                filter.public_event_type = Some((*value).to_owned());
            }
            "created_after" | "created_before" => {
                let at = Timestamp::parse(value)
                    .ok_or_else(|| refused("an RFC 3339 moment".to_owned()))?;
                if *name == "created_after" {
                    filter.created_after = Some(at);
                } else {
                    filter.created_before = Some(at);
                }
            }
            "last_response_class" => {
                let class = ResponseClass::parse(value)
                    .filter(|c| ResponseClass::FAILURES.contains(c))
                    .ok_or_else(|| one_of(response_classes()))?;
                filter.last_response_class = Some(class);
            }
            _ => {}
        }
    }
    Ok(filter)
}

/// A delivery as the table reads it (the fields of the API's delivery).
fn row(d: &DeliveryRecord) -> Value {
    json!({
        "delivery_ref": d.delivery_ref.as_str(),
        "endpoint_ref": d.endpoint_ref.as_str(),
        "public_event_type": d.public_event_type,
        "status": d.status.as_str(),
        "generation": d.generation,
        "attempt_count": d.attempt_count,
        "created_at": d.created_at.to_rfc3339(),
        "last_attempt_at": d.last_attempt_at.map(|t| t.to_rfc3339()),
        "next_attempt_at": d.next_attempt_at.map(|t| t.to_rfc3339()),
    })
}

/// The endpoints the filter offers (the caller's first 100), or none when
/// it may not list them (the field is then typed).
pub async fn endpoint_choices(console: &Console, signed: &Signed) -> Result<Vec<Value>, PageError> {
    if !signed.holds("webhooks:read_list_endpoints") {
        return Ok(Vec::new());
    }
    let data = signed
        .api(console)
        .read("listWebhookEndpoints", &[], &[("limit", "100")])
        .await?;
    Ok(items(&data))
}

pub fn query_of(params: &[(&str, &str)]) -> String {
    let kept: Vec<(&str, &str)> = params
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .copied()
        .collect();
    serde_urlencoded::to_string(kept).unwrap_or_default()
}

async fn search_for(
    console: &Console,
    signed: &Signed,
    search: &str,
) -> Result<Response, PageError> {
    if search.starts_with("whd_") {
        Ref::parse(Prefix::WebhookDelivery, search).map_err(|e| {
            PageError::BadInput(format!("`{search}` is not a delivery reference: {e}"))
        })?;
        return Ok(Redirect::to(&format!("/console/deliveries/{search}")).into_response());
    }
    if !search.starts_with("evt_") {
        return Err(PageError::BadInput(
            "Search takes a delivery reference (whd_…) or an event reference (evt_…).".into(),
        ));
    }
    let event = Ref::parse(Prefix::Event, search)
        .map_err(|e| PageError::BadInput(format!("`{search}` is not an event reference: {e}")))?;
    // No operation lists an event's deliveries: read them in the caller's
    // environment, behind the permission of the list they belong to.
    if !signed.holds(LIST_PERMISSION) {
        return Err(PageError::Forbidden(LIST_PERMISSION));
    }
    let found = console
        .app
        .store
        .webhooks()
        .deliveries_of_event(&signed.caller.environment_ref, &event, 100)
        .await?;
    let rows: Vec<Value> = found.iter().map(row).collect();
    let body = html! {
        h1 { "Deliveries of " code { (event.as_str()) } }
        (search_form(search))
        @if rows.is_empty() {
            p.hint { "No delivery of this event in this environment." }
        } @else {
            (table(&rows, &[]))
        }
        p { a href="/console/deliveries" { "← All deliveries" } }
    };
    Ok(html::page("Deliveries", signed, Nav::Deliveries, None, body).into_response())
}

fn search_form(current: &str) -> Markup {
    html! {
        form.search method="get" action="/console/deliveries" {
            label for="q" { "Search" }
            input type="search" id="q" name="q" value=(current) placeholder="whd_… or evt_…";
            button type="submit" { "Find" }
        }
    }
}

fn filter_form(q: &Fields, endpoints: &[Value]) -> Markup {
    let current = q.value("endpoint_ref");
    let known = endpoints.iter().any(|e| s(&e["endpoint_ref"]) == current);
    html! {
        form.filters method="get" action="/console/deliveries" {
            div.field {
                label for="endpoint_ref" { "Endpoint" }
                @if endpoints.is_empty() {
                    input type="text" id="endpoint_ref" name="endpoint_ref" value=(current) placeholder="whep_…";
                } @else {
                    select id="endpoint_ref" name="endpoint_ref" {
                        option value="" selected[current.is_empty()] { "every endpoint" }
                        @if !known && !current.is_empty() {
                            option value=(current) selected { (current) }
                        }
                        @for e in endpoints {
                            @let r = s(&e["endpoint_ref"]);
                            option value=(r) selected[r == current] { (r) " · " (s(&e["url"])) }
                        }
                    }
                }
            }
            div.field { label for="status" { "Status" } (select("status", &delivery_statuses(), q.value("status"), Some("any"))) }
            div.field { label for="public_event_type" { "Event type" } (select("public_event_type", &event_types(), q.value("public_event_type"), Some("any"))) }
            div.field { label for="created_after" { "Created after (UTC)" }
                input type="datetime-local" step="1" id="created_after" name="created_after" value=(local(q.value("created_after"))); }
            div.field { label for="created_before" { "Created before (UTC)" }
                input type="datetime-local" step="1" id="created_before" name="created_before" value=(local(q.value("created_before"))); }
            div.field { label for="last_response_class" { "Last response" } (select("last_response_class", &response_classes(), q.value("last_response_class"), Some("any"))) }
            div.field { button type="submit" { "Filter" } }
        }
    }
}

/// A time filter's value as a `datetime-local` field shows it.
fn local(value: &str) -> String {
    let v = value.trim_end_matches('Z');
    match v.split_once('.') {
        Some((head, _)) => head.to_owned(),
        None => v.to_owned(),
    }
}

/// Deliveries as a table; each links to its page and to its endpoint's,
/// named by its url when `endpoints` (the filter's choices) holds it.
pub fn table(rows: &[Value], endpoints: &[Value]) -> Markup {
    let url_of = |endpoint: &str| {
        endpoints
            .iter()
            .find(|e| s(&e["endpoint_ref"]) == endpoint)
            .map(|e| s(&e["url"]).to_owned())
    };
    html! {
        @if rows.is_empty() {
            p.hint { "No delivery matches." }
        } @else {
            table.deliveries {
                thead { tr {
                    th { "Delivery" } th { "Endpoint" } th { "Event type" } th { "Status" }
                    th { "Generation" } th { "Attempts" } th { "Created" } th { "Last attempt" } th { "Next attempt" }
                } }
                tbody {
                    @for d in rows {
                        @let r = s(&d["delivery_ref"]);
                        tr.delivery data-ref=(r) data-status=(s(&d["status"])) {
                            td { a href={ "/console/deliveries/" (r) } { code { (r) } } }
                            @let e = s(&d["endpoint_ref"]);
                            td.endpoint {
                                a href={ "/console/endpoints/" (e) } { code { (e) } }
                                @if let Some(url) = url_of(e) { br; span.meta { (url) } }
                            }
                            td { (s(&d["public_event_type"])) }
                            td { (badge(s(&d["status"]))) }
                            td.num { (text(&d["generation"])) }
                            td.num { (text(&d["attempt_count"])) }
                            td { (when(&d["created_at"])) }
                            td { (when(&d["last_attempt_at"])) }
                            td { (when(&d["next_attempt_at"])) }
                        }
                    }
                }
            }
        }
    }
}
