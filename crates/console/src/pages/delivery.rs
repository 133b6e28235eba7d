//! One delivery: its fields (with its order per key, contract 13.1: the
//! event's `ordering_key` and `sequence`, the delivery it waits for, and
//! when and why it was skipped), its body view
//! (`retrieveWebhookDeliveryBody`), every attempt
//! (`listWebhookDeliveryAttempts`: status, response status and excerpt,
//! duration, error) and, for a caller who may, redrive
//! (`redriveWebhookDelivery`) and, on a failed ordered delivery not yet
//! skipped, skip (`skipWebhookDelivery`), each conditional on the ETag the
//! page showed.

use super::{notice, Fields};
use crate::api::{Api, Signed};
use crate::error::PageError;
use crate::html::{
    self, badge, csrf, idempotency_key, items, next_page, pretty, s, text, when, Nav,
};
use crate::Console;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::response::{Html, Redirect};
use maud::html;
use serde_json::{json, Value};

/// The permission of redrive and skip.
const ACT: &str = "webhooks:redrive_unit";

pub async fn show(
    State(console): State<Console>,
    signed: Signed,
    Path(delivery_ref): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Html<String>, PageError> {
    let q = Fields::query(query)?;
    let api = signed.api(&console);
    let params = [("delivery_ref", delivery_ref.as_str())];
    let d = api.read("retrieveWebhookDelivery", &params, &[]).await?;
    let body = if signed.holds("webhooks:read_delivery_body") {
        Some(
            api.read("retrieveWebhookDeliveryBody", &params, &[])
                .await?,
        )
    } else {
        None
    };
    let attempts = if signed.holds("webhooks:read_list_attempts") {
        Some(
            api.read(
                "listWebhookDeliveryAttempts",
                &params,
                &[("limit", "100"), ("cursor", q.value("cursor"))],
            )
            .await?,
        )
    } else {
        None
    };
    let skippable = skippable(&api, &signed, &d).await?;
    let r = s(&d["delivery_ref"]);
    let page = html! {
        h1 { "Delivery " code { (r) } }
        dl.facts {
            dt { "Status" } dd #status { (badge(s(&d["status"]))) }
            dt { "Endpoint" } dd { a href={ "/console/endpoints/" (s(&d["endpoint_ref"])) } { code { (s(&d["endpoint_ref"])) } } }
            dt { "Event" } dd { a href={ "/console/deliveries?q=" (s(&d["event_ref"])) } { code { (s(&d["event_ref"])) } } }
            dt { "Event type" } dd { (s(&d["public_event_type"])) " (version " (text(&d["dto_version"])) ")" }
            @if let Some(key) = d["ordering_key"].as_str() {
                dt { "Ordering key" } dd #ordering-key { code { (key) } }
                dt { "Sequence" } dd #sequence { (text(&d["sequence"])) }
            }
            @if let Some(w) = d["waiting_for"].as_str() {
                dt { "Waiting for" } dd #waiting-for { a href={ "/console/deliveries/" (w) } { code { (w) } } }
            }
            @if !d["skipped_at"].is_null() {
                dt { "Skipped" } dd #skipped-at { (when(&d["skipped_at"])) }
                dt { "Skip reason" } dd #skip-reason { (text(&d["skip_reason"])) }
            }
            dt { "Generation" } dd #generation { (text(&d["generation"])) }
            dt { "Attempts (this generation)" } dd { (text(&d["attempt_count"])) }
            dt { "Diagnostic" } dd { (text(&d["diagnostic"])) }
            dt { "Created" } dd { (when(&d["created_at"])) }
            dt { "Last attempt" } dd { (when(&d["last_attempt_at"])) }
            dt { "Next attempt" } dd { (when(&d["next_attempt_at"])) }
        }
        @if signed.holds(ACT) {
            section.actions {
                h2 { "Redrive" }
                p.hint { "A succeeded or failed delivery starts a new generation; a pending or held one is left as it is." }
                form method="post" action={ "/console/deliveries/" (r) "/redrive" } {
                    (csrf(&signed))
                    (idempotency_key())
                    input type="hidden" name="etag" value=(s(&d["etag"]));
                    label for="reason" { "Reason" }
                    input type="text" id="reason" name="reason" required maxlength="500" placeholder="why it is sent again";
                    button type="submit" #redrive { "Redrive" }
                }
            }
        }
        @if skippable {
            section.actions {
                h2 { "Skip" }
                p.hint { "Its key's later deliveries wait for it. Skipping releases them: this delivery stays failed, marked skipped, and is not sent again." }
                form method="post" action={ "/console/deliveries/" (r) "/skip" } {
                    (csrf(&signed))
                    (idempotency_key())
                    input type="hidden" name="etag" value=(s(&d["etag"]));
                    label for="skip-reason" { "Reason" }
                    input type="text" id="skip-reason" name="reason" required maxlength="500" placeholder="why its key goes on without it";
                    button type="submit" #skip { "Skip" }
                }
            }
        }
        @if let Some(attempts) = &attempts {
            section {
                h2 { "Attempts" }
                @let list = items(attempts);
                @if list.is_empty() {
                    p.hint { "No attempt yet." }
                } @else {
                    table.attempts {
                        thead { tr {
                            th { "Generation" } th { "Attempt" } th { "Status" } th { "Response" }
                            th { "Duration" } th { "Started" } th { "Error" } th { "Response excerpt" }
                        } }
                        tbody {
                            @for a in &list {
                                tr.attempt data-generation=(text(&a["generation"])) data-status=(s(&a["status"])) {
                                    td.num { (text(&a["generation"])) }
                                    td.num { (text(&a["attempt_number"])) }
                                    td { (badge(s(&a["status"]))) }
                                    td.num { (text(&a["response_status"])) }
                                    td.num { (text(&a["duration_ms"])) " ms" }
                                    td { (when(&a["started_at"])) }
                                    td { (s(&a["error"])) }
                                    td { @if let Some(x) = a["response_body_excerpt"].as_str().filter(|x| !x.is_empty()) { pre.excerpt { (x) } } }
                                }
                            }
                        }
                    }
                    (next_page(&format!("/console/deliveries/{r}"), &[], attempts))
                }
            }
        }
        @if let Some(b) = &body {
            section {
                h2 { "Body" }
                p { "Body " (badge(s(&b["body_status"]))) }
                h3 { "Why it was sent" }
                pre.json { (pretty(&b["match_reasons"])) }
                h3 { "Payload" }
                @if b["payload"].is_null() {
                    p.hint { "No payload to show (redacted or expired)." }
                } @else {
                    pre.json { (pretty(&b["payload"])) }
                }
            }
        }
    };
    Ok(html::page(
        &format!("Delivery {r}"),
        &signed,
        Nav::Deliveries,
        notice(q.get("notice")),
        page,
    ))
}

/// Whether the page offers skip: to a caller who may, on a failed
/// delivery not yet skipped whose event has a key, on a `per_key`
/// endpoint (an endpoint's ordering is set once, when it is created). A
/// caller who may not read the endpoint is offered it on the key alone:
/// the operation decides.
async fn skippable(api: &Api<'_>, signed: &Signed, d: &Value) -> Result<bool, PageError> {
    let candidate = signed.holds(ACT)
        && s(&d["status"]) == "failed"
        && d["skipped_at"].is_null()
        && d["ordering_key"].is_string();
    if !candidate || !signed.holds("webhooks:read_retrieve_endpoint") {
        return Ok(candidate);
    }
    let e = api
        .read(
            "retrieveWebhookEndpoint",
            &[("endpoint_ref", s(&d["endpoint_ref"]))],
            &[],
        )
        .await?;
    Ok(s(&e["ordering"]) == "per_key")
}

pub async fn redrive(
    State(console): State<Console>,
    signed: Signed,
    Path(delivery_ref): Path<String>,
    body: Bytes,
) -> Result<Redirect, PageError> {
    let answer = act(
        &console,
        &signed,
        "redriveWebhookDelivery",
        &delivery_ref,
        &body,
    )
    .await?;
    Ok(back(&delivery_ref, s(&answer["outcome"])))
}

/// Releases the delivery's key past it (`skipWebhookDelivery`); the
/// delivery stays failed, with `skipped_at`.
pub async fn skip(
    State(console): State<Console>,
    signed: Signed,
    Path(delivery_ref): Path<String>,
    body: Bytes,
) -> Result<Redirect, PageError> {
    act(
        &console,
        &signed,
        "skipWebhookDelivery",
        &delivery_ref,
        &body,
    )
    .await?;
    Ok(back(&delivery_ref, "skipped"))
}

/// Runs the form's operation `id` on the delivery, with its reason, as
/// the signed-in caller: the form's CSRF token checked first, its ETag as
/// `If-Match` and its idempotency key. Answers the operation's `data`.
async fn act(
    console: &Console,
    signed: &Signed,
    id: &'static str,
    delivery_ref: &str,
    body: &[u8],
) -> Result<Value, PageError> {
    let form = Fields::parse(body)?;
    signed.check_csrf(console, form.get("csrf"))?;
    let answer = signed
        .api(console)
        .write(
            id,
            &[("delivery_ref", delivery_ref)],
            json!({ "reason": form.value("reason") }),
            form.get("etag"),
            form.get("idempotency_key"),
        )
        .await?;
    Ok(answer.data)
}

/// Back to the delivery's page, with the notice `code`.
fn back(delivery_ref: &str, code: &str) -> Redirect {
    Redirect::to(&format!(
        "/console/deliveries/{}?notice={}",
        crate::api::encode_segment(delivery_ref),
        crate::api::encode_segment(code)
    ))
}
