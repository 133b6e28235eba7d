//! Subscriptions (contract 14): the list (`listSubscriptions`), and a
//! subscription's page (`retrieveSubscription`) with its pending invoice
//! lines, its latest invoice's lines (`listInvoices` of its buyer) and its
//! buyer's credit balance (`retrieveBuyer`). Each part is read only when
//! the credential holds its operation's permission; otherwise the page
//! says so.

use super::{select, Fields};
use crate::api::{Api, Signed};
use crate::error::PageError;
use crate::html::{self, badge, items, next_page, s, text, when, Nav};
use crate::Console;
use axum::extract::{Path, RawQuery, State};
use axum::response::Html;
use maud::{html, Markup};
use serde_json::Value;

const STATUSES: &[&str] = &["incomplete", "trialing", "active", "past_due", "canceled"];

/// The most pages of the buyer's invoices read to find the latest one of
/// a subscription.
const INVOICE_PAGES: usize = 10;

pub async fn list(
    State(console): State<Console>,
    signed: Signed,
    RawQuery(query): RawQuery,
) -> Result<Html<String>, PageError> {
    let q = Fields::query(query)?;
    let data = signed
        .api(&console)
        .read(
            "listSubscriptions",
            &[],
            &[
                ("limit", "50"),
                ("status", q.value("status")),
                ("buyer_ref", q.value("buyer_ref")),
                ("cursor", q.value("cursor")),
            ],
        )
        .await?;
    let subs = items(&data);
    let body = html! {
        h1 { "Subscriptions" }
        form.filters method="get" action="/console/subscriptions" {
            div.field { label for="status" { "Status" } (select("status", STATUSES, q.value("status"), Some("any"))) }
            div.field.wide { label for="buyer_ref" { "Buyer" } input type="text" id="buyer_ref" name="buyer_ref" value=(q.value("buyer_ref")); }
            div.field { button type="submit" { "Filter" } }
        }
        @if subs.is_empty() {
            p.hint { "No subscription." }
        } @else {
            table.subscriptions {
                thead { tr { th { "Subscription" } th { "Status" } th { "Price" } th { "Buyer" } th { "Period end" } th { "Pending lines" } } }
                tbody {
                    @for sub in &subs {
                        @let r = s(&sub["subscription_ref"]);
                        tr {
                            td { a href={ "/console/subscriptions/" (r) } { code { (r) } } }
                            td { (badge(s(&sub["status"]))) }
                            td { code { (s(&sub["price_ref"])) } }
                            td { code { (text(&sub["buyer_ref"])) } }
                            td { (when(&sub["current_period_end"])) }
                            td { (sub["pending_invoice_lines"].as_array().map_or(0, Vec::len)) }
                        }
                    }
                }
            }
            (next_page(
                "/console/subscriptions",
                &[("status", q.value("status")), ("buyer_ref", q.value("buyer_ref"))],
                &data,
            ))
        }
    };
    Ok(html::page(
        "Subscriptions",
        &signed,
        Nav::Subscriptions,
        None,
        body,
    ))
}

pub async fn show(
    State(console): State<Console>,
    signed: Signed,
    Path(subscription_ref): Path<String>,
) -> Result<Html<String>, PageError> {
    let api = signed.api(&console);
    let sub = api
        .read(
            "retrieveSubscription",
            &[("subscription_ref", &subscription_ref)],
            &[],
        )
        .await?;
    let r = s(&sub["subscription_ref"]).to_owned();
    let buyer_ref = s(&sub["buyer_ref"]).to_owned();
    let buyer = if buyer_ref.is_empty() || !signed.holds("buyers:read_retrieve") {
        None
    } else {
        Some(
            api.read("retrieveBuyer", &[("buyer_ref", &buyer_ref)], &[])
                .await?,
        )
    };
    let invoice = if buyer_ref.is_empty() || !signed.holds("invoices:read_list") {
        None
    } else {
        latest_invoice(&api, &buyer_ref, &r).await?
    };
    let pending = sub["pending_invoice_lines"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let body = html! {
        h1 { "Subscription " code { (r) } }
        dl.facts {
            dt { "Status" } dd #subscription-status data-status=(s(&sub["status"])) { (badge(s(&sub["status"]))) }
            dt { "Price" } dd #price { code { (s(&sub["price_ref"])) } }
            dt { "Product" } dd { code { (s(&sub["product_ref"])) } }
            dt { "Buyer" } dd #buyer { code { (text(&sub["buyer_ref"])) } }
            dt { "Current period" } dd { (when(&sub["current_period_start"])) " → " (when(&sub["current_period_end"])) }
            dt { "Trial end" } dd { (when(&sub["trial_end"])) }
            dt { "Cancels at period end" } dd { (text(&sub["cancel_at_period_end"])) }
            dt { "Canceled" } dd { (when(&sub["canceled_at"])) }
            dt { "Test clock" } dd { (text(&sub["test_clock_ref"])) }
            dt { "Credit balance" }
            dd #credit-balance {
                @match &buyer {
                    Some(b) => (money(&b["credit_balance"])),
                    None if buyer_ref.is_empty() => "—",
                    None => span.hint { "needs buyers:read_retrieve" },
                }
            }
        }
        section.pending-lines {
            h2 { "Pending invoice lines" }
            @if pending.is_empty() {
                p.hint { "None: no price change waits for the next renewal's invoice." }
            } @else {
                p.hint { "A " code { "next_invoice" } " price change's lines, joining the next renewal's invoice." }
                (lines(&pending, "pending-lines"))
            }
        }
        section.latest-invoice {
            h2 { "Latest invoice" }
            @if !signed.holds("invoices:read_list") {
                p.hint { "Reading invoices needs invoices:read_list." }
            } @else if let Some(i) = &invoice {
                dl.facts {
                    dt { "Invoice" } dd #invoice-ref { code { (s(&i["invoice_ref"])) } }
                    dt { "Number" } dd #invoice-number { (s(&i["number"])) }
                    dt { "Status" } dd #invoice-status { (badge(s(&i["status"]))) }
                    dt { "Issued" } dd { (when(&i["issued_at"])) }
                    dt { "Total" } dd #invoice-total { (money(&i["amount_total"])) }
                    dt { "Payment" } dd { (text(&i["payment_intent_ref"])) }
                }
                (lines(i["lines"].as_array().map_or(&[][..], Vec::as_slice), "invoice-lines"))
            } @else {
                p.hint { "No invoice yet." }
            }
        }
        p { a href={ "/console/subscriptions?buyer_ref=" (buyer_ref) } { "The buyer's subscriptions →" } }
    };
    Ok(html::page(
        &format!("Subscription {r}"),
        &signed,
        Nav::Subscriptions,
        None,
        body,
    ))
}

/// The latest invoice (by issue time, then number) of subscription `r`
/// among its buyer's, reading at most `INVOICE_PAGES` pages.
async fn latest_invoice(api: &Api<'_>, buyer: &str, r: &str) -> Result<Option<Value>, PageError> {
    let mut latest: Option<Value> = None;
    let mut cursor = String::new();
    for _ in 0..INVOICE_PAGES {
        let data = api
            .read(
                "listInvoices",
                &[],
                &[("buyer_ref", buyer), ("limit", "100"), ("cursor", &cursor)],
            )
            .await?;
        for i in items(&data) {
            if s(&i["subscription_ref"]) != r {
                continue;
            }
            let key = |v: &Value| (s(&v["issued_at"]).to_owned(), s(&v["number"]).to_owned());
            if latest.as_ref().is_none_or(|l| key(&i) > key(l)) {
                latest = Some(i);
            }
        }
        match data["next_cursor"].as_str() {
            Some(next) => cursor = next.to_owned(),
            None => break,
        }
    }
    Ok(latest)
}

/// Invoice lines as a table.
fn lines(lines: &[Value], class: &str) -> Markup {
    html! {
        table class=(class) {
            thead { tr { th { "Kind" } th { "Amount" } th { "Price" } th { "Period" } th { "Description" } } }
            tbody {
                @for l in lines {
                    tr.line data-kind=(s(&l["kind"])) {
                        td { code { (s(&l["kind"])) } }
                        td.amount { (money(&l["amount"])) }
                        td { (text(&l["price_ref"])) }
                        td {
                            @if l["period_start"].is_null() { "—" }
                            @else { (when(&l["period_start"])) " → " (when(&l["period_end"])) }
                        }
                        td { (s(&l["description"])) }
                    }
                }
            }
        }
    }
}

/// A Money (`{currency, value}` in minor units) as "EUR 678" ("—" when
/// null).
fn money(m: &Value) -> String {
    if m.is_null() {
        return "—".to_owned();
    }
    format!("{} {}", s(&m["currency"]), text(&m["value"]))
}
