//! Deliveries: an endpoint's deliveries under every filter of contract
//! 12.2 (`listWebhookDeliveries`), and a search by `delivery_ref` (that
//! delivery's page) or by `event_ref` (the event's deliveries, read from
//! the store behind the list's permission, since no operation lists them).

use super::{delivery_statuses, event_types, moment, response_classes, select, Fields};
use crate::api::Signed;
use crate::error::PageError;
use crate::html::{self, badge, items, next_page, s, text, when, Nav};
use crate::Console;
use axum::extract::{RawQuery, State};
use axum::response::{IntoResponse, Redirect, Response};
use domain::{Prefix, Ref};
use maud::{html, Markup};
use serde_json::Value;

const LIST_PERMISSION: &str = "webhooks:read_list_deliveries";

pub async fn list(
    State(console): State<Console>,
    signed: Signed,
    RawQuery(query): RawQuery,
) -> Result<Response, PageError> {
    let q = Fields::query(query)?;
    if let Some(search) = q.get("q") {
        return search_for(&console, &signed, search).await;
    }
    let api = signed.api(&console);
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
    let listed = if endpoint.is_empty() {
        None
    } else {
        let mut query = filters.clone();
        query.push(("limit", "50"));
        query.push(("cursor", q.value("cursor")));
        Some(
            api.read(
                "listWebhookDeliveries",
                &[("endpoint_ref", endpoint)],
                &query,
            )
            .await?,
        )
    };
    let mut params = filters.clone();
    params.push(("endpoint_ref", endpoint));
    let redrivable = matches!(q.value("status"), "succeeded" | "failed")
        && signed.holds("webhooks:redrive_by_filter");
    let body = html! {
        h1 { "Deliveries" }
        (search_form(""))
        (filter_form(&q, &endpoints))
        @match &listed {
            None => {
                p.hint { "Choose an endpoint to list its deliveries, or search by "
                    code { "delivery_ref" } " or " code { "event_ref" } "." }
            }
            Some(data) => {
                (table(&items(data)))
                (next_page("/console/deliveries", &params, data))
                @if redrivable {
                    p { a.button href={ "/console/redrive-jobs?" (query_of(&params)) } {
                        "Redrive every delivery matching these filters…" } }
                }
            }
        }
    };
    Ok(html::page("Deliveries", &signed, Nav::Deliveries, None, body).into_response())
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
    let rows: Vec<Value> = found
        .iter()
        .map(|d| {
            serde_json::json!({
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
        })
        .collect();
    let body = html! {
        h1 { "Deliveries of " code { (event.as_str()) } }
        (search_form(search))
        @if rows.is_empty() {
            p.hint { "No delivery of this event in this environment." }
        } @else {
            (table(&rows))
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
                        option value="" selected[current.is_empty()] { "— choose —" }
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

/// Deliveries as a table; each links to its page.
pub fn table(rows: &[Value]) -> Markup {
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
                            td { a href={ "/console/endpoints/" (s(&d["endpoint_ref"])) } { code { (s(&d["endpoint_ref"])) } } }
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
