//! Dead letters (`listDeadLetters`): the messages the intake refused, with
//! their reasons, filtered by reason.

use super::Fields;
use crate::api::Signed;
use crate::error::PageError;
use crate::html::{self, items, next_page, s, when, Nav};
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
    let reason = q.value("reason");
    let data = signed
        .api(&console)
        .read(
            "listDeadLetters",
            &[],
            &[
                ("limit", "50"),
                ("reason", reason),
                ("cursor", q.value("cursor")),
            ],
        )
        .await?;
    let letters = items(&data);
    let body = html! {
        h1 { "Dead letters" }
        form.filters method="get" action="/console/dead-letters" {
            div.field.wide { label for="reason" { "Reason (exact)" } input type="text" id="reason" name="reason" value=(reason); }
            div.field { button type="submit" { "Filter" } }
        }
        @if letters.is_empty() {
            p.hint { "No dead letter." }
        } @else {
            table.dead-letters {
                thead { tr { th { "Dead letter" } th { "Reason" } th { "Received" } th { "Message as received" } } }
                tbody {
                    @for l in &letters {
                        tr {
                            td { code { (s(&l["dead_letter_ref"])) } }
                            td { (s(&l["reason"])) }
                            td { (when(&l["received_at"])) }
                            td { details { summary { "show" } pre.json { (s(&l["envelope"])) } } }
                        }
                    }
                }
            }
            (next_page("/console/dead-letters", &[("reason", reason)], &data))
        }
    };
    Ok(html::page(
        "Dead letters",
        &signed,
        Nav::DeadLetters,
        None,
        body,
    ))
}
