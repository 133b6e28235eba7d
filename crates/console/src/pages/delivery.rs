//! One delivery: its fields, its body view (`retrieveWebhookDeliveryBody`),
//! every attempt (`listWebhookDeliveryAttempts`: status, response status
//! and excerpt, duration, error) and, for a caller who may, redrive
//! (`redriveWebhookDelivery`, conditional on the ETag the page showed).

use super::{notice, Fields};
use crate::api::Signed;
use crate::error::PageError;
use crate::html::{
    self, badge, csrf, idempotency_key, items, next_page, pretty, s, text, when, Nav,
};
use crate::Console;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::response::{Html, Redirect};
use maud::html;

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
    let r = s(&d["delivery_ref"]);
    let page = html! {
        h1 { "Delivery " code { (r) } }
        dl.facts {
            dt { "Status" } dd #status { (badge(s(&d["status"]))) }
            dt { "Endpoint" } dd { a href={ "/console/endpoints/" (s(&d["endpoint_ref"])) } { code { (s(&d["endpoint_ref"])) } } }
            dt { "Event" } dd { a href={ "/console/deliveries?q=" (s(&d["event_ref"])) } { code { (s(&d["event_ref"])) } } }
            dt { "Event type" } dd { (s(&d["public_event_type"])) " (version " (text(&d["dto_version"])) ")" }
            dt { "Generation" } dd #generation { (text(&d["generation"])) }
            dt { "Attempts (this generation)" } dd { (text(&d["attempt_count"])) }
            dt { "Diagnostic" } dd { (text(&d["diagnostic"])) }
            dt { "Created" } dd { (when(&d["created_at"])) }
            dt { "Last attempt" } dd { (when(&d["last_attempt_at"])) }
            dt { "Next attempt" } dd { (when(&d["next_attempt_at"])) }
        }
        @if signed.holds("webhooks:redrive_unit") {
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

pub async fn redrive(
    State(console): State<Console>,
    signed: Signed,
    Path(delivery_ref): Path<String>,
    body: Bytes,
) -> Result<Redirect, PageError> {
    let form = Fields::parse(&body)?;
    signed.check_csrf(&console, form.get("csrf"))?;
    let answer = signed
        .api(&console)
        .write(
            "redriveWebhookDelivery",
            &[("delivery_ref", &delivery_ref)],
            serde_json::json!({ "reason": form.value("reason") }),
            form.get("etag"),
            form.get("idempotency_key"),
        )
        .await?;
    let outcome = s(&answer.data["outcome"]);
    Ok(Redirect::to(&format!(
        "/console/deliveries/{}?notice={}",
        crate::api::encode_segment(&delivery_ref),
        crate::api::encode_segment(outcome)
    )))
}
