//! The event catalogue (`listWebhookEventTypes`): each type with its
//! versions, scopes, data classes and example payload.

use crate::api::Signed;
use crate::error::PageError;
use crate::html::{self, items, pretty, s, Nav};
use crate::Console;
use axum::extract::State;
use axum::response::Html;
use maud::html;
use serde_json::Value;

fn joined(v: &Value) -> String {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|x| x.as_str().map_or_else(|| x.to_string(), str::to_owned))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}

pub async fn list(
    State(console): State<Console>,
    signed: Signed,
) -> Result<Html<String>, PageError> {
    let data = signed
        .api(&console)
        .read("listWebhookEventTypes", &[], &[])
        .await?;
    let types = items(&data);
    let body = html! {
        h1 { "Event types" }
        p.hint { (types.len()) " types. Each example is the payload's " code { "data" } " as an endpoint receives it." }
        @for t in &types {
            section.event-type id=(s(&t["public_event_type"])) {
                h2 { code { (s(&t["public_event_type"])) } @if t["diagnostic"] == true { " " span.badge.diagnostic { "diagnostic" } } }
                p { (s(&t["description"])) }
                dl.facts {
                    dt { "Versions" } dd { (joined(&t["dto_versions"])) }
                    dt { "Scopes" } dd { (joined(&t["scope_types"])) }
                    dt { "Data classes" } dd { (joined(&t["data_classes"])) }
                }
                details {
                    summary { "Example payload" }
                    pre.json { (pretty(&t["example"])) }
                }
            }
        }
    };
    Ok(html::page(
        "Event types",
        &signed,
        Nav::Catalogue,
        None,
        body,
    ))
}
