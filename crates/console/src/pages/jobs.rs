//! Redrive jobs (contract 12.2): the list, a form that creates one by
//! filter (a dry run first counts, then the same filter runs), one job's
//! progress (the page refreshes itself while the job counts or runs) and
//! its cancel. Each action is the job operation itself.

use super::deliveries::endpoint_choices;
use super::{event_types, moment, notice, response_classes, select, Fields};
use crate::api::Signed;
use crate::error::PageError;
use crate::html::{self, badge, csrf, idempotency_key, items, next_page, s, text, when, Nav};
use crate::Console;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::response::{Html, Redirect};
use maud::{html, Markup};
use serde_json::{json, Map, Value};

const MANAGE: &str = "webhooks:redrive_by_filter";

/// The filter fields of a job, as the form and the API name them.
const FILTER: &[&str] = &[
    "status",
    "endpoint_ref",
    "public_event_type",
    "created_after",
    "created_before",
    "last_response_class",
];

pub async fn list(
    State(console): State<Console>,
    signed: Signed,
    RawQuery(query): RawQuery,
) -> Result<Html<String>, PageError> {
    let q = Fields::query(query)?;
    let data = signed
        .api(&console)
        .read(
            "listWebhookRedriveJobs",
            &[],
            &[("limit", "20"), ("cursor", q.value("cursor"))],
        )
        .await?;
    let endpoints = if signed.holds(MANAGE) {
        endpoint_choices(&console, &signed).await?
    } else {
        Vec::new()
    };
    let jobs = items(&data);
    let body = html! {
        h1 { "Redrive jobs" }
        @if signed.holds(MANAGE) {
            (create_form(&signed, &q, &endpoints))
        }
        h2 { "Jobs" }
        @if jobs.is_empty() {
            p.hint { "No redrive job yet." }
        } @else {
            table.jobs {
                thead { tr {
                    th { "Job" } th { "Status" } th { "Dry run" } th { "Matched" } th { "Redriven" }
                    th { "Skipped" } th { "Reason" } th { "Created" } th { "Finished" }
                } }
                tbody {
                    @for j in &jobs {
                        @let r = s(&j["redrive_job_ref"]);
                        tr {
                            td { a href={ "/console/redrive-jobs/" (r) } { code { (r) } } }
                            td { (badge(s(&j["status"]))) }
                            td { (text(&j["dry_run"])) }
                            td.num { (text(&j["matched"])) }
                            td.num { (text(&j["redriven"])) }
                            td.num { (text(&j["skipped"])) }
                            td { (s(&j["reason"])) }
                            td { (when(&j["created_at"])) }
                            td { (when(&j["finished_at"])) }
                        }
                    }
                }
            }
            (next_page("/console/redrive-jobs", &[], &data))
        }
    };
    Ok(html::page(
        "Redrive jobs",
        &signed,
        Nav::Jobs,
        notice(q.get("notice")),
        body,
    ))
}

/// The form that creates a job, filled from `q` (the deliveries page links
/// here with its filters).
fn create_form(signed: &Signed, q: &Fields, endpoints: &[Value]) -> Markup {
    let endpoint = q.value("endpoint_ref");
    let known = endpoints.iter().any(|e| s(&e["endpoint_ref"]) == endpoint);
    html! {
        section.create {
            h2 { "Redrive by filter" }
            p.hint { "A job selects the deliveries that match when it starts and redrives each once, in the background. "
                "Count them first with a dry run." }
            form.filters method="post" action="/console/redrive-jobs" {
                (csrf(signed))
                (idempotency_key())
                div.field { label for="status" { "Status" } (select("status", &["failed", "succeeded"], q.value("status"), None)) }
                div.field {
                    label for="endpoint_ref" { "Endpoint" }
                    @if endpoints.is_empty() {
                        input type="text" id="endpoint_ref" name="endpoint_ref" value=(endpoint) placeholder="any (whep_…)";
                    } @else {
                        select id="endpoint_ref" name="endpoint_ref" {
                            option value="" selected[endpoint.is_empty()] { "any" }
                            @if !known && !endpoint.is_empty() { option value=(endpoint) selected { (endpoint) } }
                            @for e in endpoints {
                                @let r = s(&e["endpoint_ref"]);
                                option value=(r) selected[r == endpoint] { (r) " · " (s(&e["url"])) }
                            }
                        }
                    }
                }
                div.field { label for="public_event_type" { "Event type" } (select("public_event_type", &event_types(), q.value("public_event_type"), Some("any"))) }
                div.field { label for="created_after" { "Created after (UTC)" }
                    input type="datetime-local" step="1" id="created_after" name="created_after" value=(q.value("created_after").trim_end_matches('Z')); }
                div.field { label for="created_before" { "Created before (UTC)" }
                    input type="datetime-local" step="1" id="created_before" name="created_before" value=(q.value("created_before").trim_end_matches('Z')); }
                div.field { label for="last_response_class" { "Last response" } (select("last_response_class", &response_classes(), q.value("last_response_class"), Some("any"))) }
                div.field.wide { label for="reason" { "Reason" }
                    input type="text" id="reason" name="reason" required maxlength="500" value=(q.value("reason")) placeholder="why they are sent again"; }
                div.field.buttons {
                    button type="submit" name="dry_run" value="true" #dry-run { "Count (dry run)" }
                    button.danger type="submit" name="dry_run" value="false" #run { "Redrive" }
                }
            }
        }
    }
}

pub async fn create(
    State(console): State<Console>,
    signed: Signed,
    body: Bytes,
) -> Result<Redirect, PageError> {
    let form = Fields::parse(&body)?;
    signed.check_csrf(&console, form.get("csrf"))?;
    let mut filter = Map::new();
    for name in FILTER {
        if let Some(v) = form.get(name) {
            let v = if name.starts_with("created_") {
                moment(v)
            } else {
                v.to_owned()
            };
            filter.insert((*name).to_owned(), Value::String(v));
        }
    }
    let dry_run = form.get("dry_run") == Some("true");
    let answer = signed
        .api(&console)
        .write(
            "createWebhookRedriveJob",
            &[],
            json!({ "reason": form.value("reason"), "filter": filter, "dry_run": dry_run }),
            None,
            form.get("idempotency_key"),
        )
        .await?;
    Ok(Redirect::to(&format!(
        "/console/redrive-jobs/{}",
        crate::api::encode_segment(s(&answer.data["redrive_job_ref"]))
    )))
}

pub async fn show(
    State(console): State<Console>,
    signed: Signed,
    Path(job_ref): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Html<String>, PageError> {
    let q = Fields::query(query)?;
    let j = signed
        .api(&console)
        .read(
            "retrieveWebhookRedriveJob",
            &[("redrive_job_ref", &job_ref)],
            &[],
        )
        .await?;
    let r = s(&j["redrive_job_ref"]);
    let status = s(&j["status"]);
    let open = matches!(status, "counting" | "running");
    let matched = j["matched"].as_u64().unwrap_or(0);
    let done = j["redriven"].as_u64().unwrap_or(0) + j["skipped"].as_u64().unwrap_or(0);
    let dry = j["dry_run"].as_bool().unwrap_or(false);
    let filter = j["filter"].as_object().cloned().unwrap_or_default();
    let body = html! {
        h1 { "Redrive job " code { (r) } }
        dl.facts {
            dt { "Status" } dd #job-status data-status=(status) { (badge(status)) @if open { " (this page refreshes itself)" } }
            dt { "Dry run" } dd { (text(&j["dry_run"])) }
            dt { "Matched" } dd #matched { (text(&j["matched"])) }
            dt { "Redriven" } dd #redriven { (text(&j["redriven"])) }
            dt { "Skipped" } dd #skipped { (text(&j["skipped"])) }
            dt { "Reason" } dd { (s(&j["reason"])) }
            dt { "Created" } dd { (when(&j["created_at"])) }
            dt { "Finished" } dd { (when(&j["finished_at"])) }
            dt { "Filter" } dd {
                ul.filter { @for (k, v) in &filter { li { code { (k) } " = " (text(v)) } } }
            }
        }
        @if !dry {
            p { "Progress " progress max=(matched.max(1)) value=(done) { (done) " of " (matched) } " " (done) " of " (matched) }
        }
        @if signed.holds(MANAGE) {
            @if open {
                form method="post" action={ "/console/redrive-jobs/" (r) "/cancel" } {
                    (csrf(&signed))
                    button.danger type="submit" #cancel { "Cancel job" }
                }
            }
            @if dry && status == "succeeded" {
                section.actions {
                    h2 { "Run it" }
                    p { "The dry run matched " strong { (matched) } " deliveries. Redrive every delivery that matches this filter now:" }
                    form method="post" action="/console/redrive-jobs" {
                        (csrf(&signed))
                        (idempotency_key())
                        @for (k, v) in &filter {
                            input type="hidden" name=(k) value=(text(v));
                        }
                        input type="hidden" name="dry_run" value="false";
                        label for="reason" { "Reason" }
                        input type="text" id="reason" name="reason" required maxlength="500" value=(s(&j["reason"]));
                        button.danger type="submit" #run { "Redrive " (matched) " deliveries" }
                    }
                }
            }
        }
        p { a href="/console/redrive-jobs" { "← All jobs" } }
    };
    let refresh = if open {
        html! { meta http-equiv="refresh" content="1"; }
    } else {
        html! {}
    };
    Ok(html::page_with(
        &format!("Redrive job {r}"),
        &signed,
        Nav::Jobs,
        notice(q.get("notice")),
        refresh,
        body,
    ))
}

pub async fn cancel(
    State(console): State<Console>,
    signed: Signed,
    Path(job_ref): Path<String>,
    body: Bytes,
) -> Result<Redirect, PageError> {
    let form = Fields::parse(&body)?;
    signed.check_csrf(&console, form.get("csrf"))?;
    signed
        .api(&console)
        .write(
            "cancelWebhookRedriveJob",
            &[("redrive_job_ref", &job_ref)],
            json!({}),
            None,
            None,
        )
        .await?;
    Ok(Redirect::to(&format!(
        "/console/redrive-jobs/{}?notice=canceled",
        crate::api::encode_segment(&job_ref)
    )))
}
