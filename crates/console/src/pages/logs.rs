//! Request logs (`listPublicRequestLogs`), filtered by operation and
//! status. The console's own actions appear here as the operations they
//! ran, under the signed-in credential.

use super::Fields;
use crate::api::Signed;
use crate::error::PageError;
use crate::html::{self, items, next_page, s, text, when, Nav};
use crate::Console;
use axum::extract::{RawQuery, State};
use axum::response::Html;
use maud::html;

pub async fn list(
    State(console): State<Console>,
    signed: Signed,
    RawQuery(query): RawQuery,
) -> Result<Html<String>, PageError> {
    let q = Fields::query(query)?;
    let (operation, status) = (q.value("operation_id"), q.value("status"));
    let data = signed
        .api(&console)
        .read(
            "listPublicRequestLogs",
            &[],
            &[
                ("limit", "50"),
                ("operation_id", operation),
                ("status", status),
                ("cursor", q.value("cursor")),
            ],
        )
        .await?;
    let logs = items(&data);
    let operations: Vec<&str> = control_api::operations::OPERATIONS
        .iter()
        .map(|o| o.id)
        .collect();
    let body = html! {
        h1 { "Request logs" }
        form.filters method="get" action="/console/request-logs" {
            div.field { label for="operation_id" { "Operation" } (super::select("operation_id", &operations, operation, Some("any"))) }
            div.field { label for="status" { "Status" } input type="number" id="status" name="status" min="100" max="599" value=(status); }
            div.field { button type="submit" { "Filter" } }
        }
        @if logs.is_empty() {
            p.hint { "No request matches." }
        } @else {
            table.logs {
                thead { tr {
                    th { "Request" } th { "Operation" } th { "Method" } th { "Path" } th { "Status" }
                    th { "Error" } th { "Credential" } th { "Duration" } th { "At" }
                } }
                tbody {
                    @for l in &logs {
                        tr {
                            td { code { (s(&l["request_log_ref"])) } }
                            td { (text(&l["operation_id"])) }
                            td { (s(&l["method"])) }
                            td { code { (s(&l["path"])) } }
                            td.num { (text(&l["status"])) }
                            td { (text(&l["error_code"])) }
                            td { code { (text(&l["credential_ref"])) } }
                            td.num { (text(&l["duration_ms"])) " ms" }
                            td { (when(&l["created_at"])) }
                        }
                    }
                }
            }
            (next_page("/console/request-logs", &[("operation_id", operation), ("status", status)], &data))
        }
    };
    Ok(html::page("Request logs", &signed, Nav::Logs, None, body))
}
