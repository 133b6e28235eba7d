//! Endpoints: the list with each one's health, and one endpoint with its
//! ordering, limits and the rate they leave it now (contract 13.2), secret
//! versions (hints only), subscriptions, health, success rate and latency
//! over the last hour and day (`charts`), its blocked keys (contract 13.1:
//! each one's failed head, to redrive or skip), and its actions: pause,
//! resume, limits (`updateWebhookEndpoint`), secret rotate, confirm and
//! revoke, test send. A rotated secret is shown once, on the page that
//! answers the rotate, and never again.

use super::{event_types, notice, select, Fields};
use crate::api::Signed;
use crate::charts::{self, Window};
use crate::error::PageError;
use crate::html::{self, badge, csrf, idempotency_key, items, next_page, s, text, when, Nav};
use crate::Console;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::response::{Html, IntoResponse, Redirect, Response};
use domain::{Prefix, Ref, Timestamp};
use maud::{html, Markup};
use serde_json::{json, Value};
use store::DeliveryRecord;

const HEALTH: &str = "webhooks:read_health";
/// The permission of the list the blocked keys' heads belong to.
const DELIVERIES: &str = "webhooks:read_list_deliveries";
/// The permission of redrive and skip.
const REDRIVE: &str = "webhooks:redrive_unit";
/// The most blocked keys the page lists.
const BLOCKED_SHOWN: usize = 50;
/// The permission of the limits form (`updateWebhookEndpoint`).
const UPDATE: &str = "webhooks:manage_update_endpoint";
/// The fields of the limits form, as `updateWebhookEndpoint` names them.
const LIMITS: [&str; 2] = ["rate_limit", "max_in_flight"];

pub async fn list(
    State(console): State<Console>,
    signed: Signed,
    RawQuery(query): RawQuery,
) -> Result<Html<String>, PageError> {
    let q = Fields::query(query)?;
    let api = signed.api(&console);
    let data = api
        .read(
            "listWebhookEndpoints",
            &[],
            &[
                ("limit", "20"),
                ("status", q.value("status")),
                ("cursor", q.value("cursor")),
            ],
        )
        .await?;
    let endpoints = items(&data);
    let mut health = Vec::with_capacity(endpoints.len());
    for e in &endpoints {
        health.push(if signed.holds(HEALTH) {
            let h = api
                .read(
                    "retrieveWebhookEndpointHealth",
                    &[("endpoint_ref", s(&e["endpoint_ref"]))],
                    &[],
                )
                .await?;
            Some(h)
        } else {
            None
        });
    }
    let body = html! {
        h1 { "Endpoints" }
        form.filters method="get" action="/console/endpoints" {
            div.field { label for="status" { "Status" } (select("status", &["active", "paused", "disabled"], q.value("status"), Some("any"))) }
            div.field { button type="submit" { "Filter" } }
        }
        @if endpoints.is_empty() {
            p.hint { "No endpoint." }
        } @else {
            table.endpoints {
                thead { tr { th { "Endpoint" } th { "URL" } th { "Status" } th { "Health" } th { "Last delivery" } th { "Created" } } }
                tbody {
                    @for (e, h) in endpoints.iter().zip(&health) {
                        @let r = s(&e["endpoint_ref"]);
                        tr {
                            td { a href={ "/console/endpoints/" (r) } { code { (r) } } }
                            td { (s(&e["url"])) }
                            td { (badge(s(&e["status"]))) }
                            td { @if let Some(h) = h { (badge(s(&h["health"]))) } @else { "—" } }
                            td { @if let Some(h) = h { (text(&h["last_delivery_status"])) } @else { "—" } }
                            td { (when(&e["created_at"])) }
                        }
                    }
                }
            }
            (next_page("/console/endpoints", &[("status", q.value("status"))], &data))
        }
    };
    Ok(html::page("Endpoints", &signed, Nav::Endpoints, None, body))
}

/// The buckets of the two windows: an hour in 12 of 5 minutes, a day in
/// 24 of an hour.
const WINDOWS: &[(&str, i64, usize)] = &[("hour", 300_000, 12), ("day", 3_600_000, 24)];

pub async fn show(
    State(console): State<Console>,
    signed: Signed,
    Path(endpoint_ref): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Html<String>, PageError> {
    let q = Fields::query(query)?;
    let api = signed.api(&console);
    let params = [("endpoint_ref", endpoint_ref.as_str())];
    let e = api.read("retrieveWebhookEndpoint", &params, &[]).await?;
    let health = if signed.holds(HEALTH) {
        Some(
            api.read("retrieveWebhookEndpointHealth", &params, &[])
                .await?,
        )
    } else {
        None
    };
    let subscriptions = if signed.holds("webhooks:read_list_subscriptions") {
        Some(items(
            &api.read("listWebhookSubscriptions", &params, &[]).await?,
        ))
    } else {
        None
    };
    let endpoint = Ref::parse(Prefix::WebhookEndpoint, s(&e["endpoint_ref"]))
        .map_err(|e| PageError::Internal(e.to_string()))?;
    // The failed heads of blocked keys, which no operation lists: in the
    // caller's environment, behind the permission of the list of
    // deliveries they belong to.
    let blocked = if signed.holds(DELIVERIES) {
        console
            .app
            .store
            .webhooks()
            .blocked_heads(&signed.caller.environment_ref, &endpoint, BLOCKED_SHOWN)
            .await?
    } else {
        Vec::new()
    };
    // The charts read attempts no operation lists: in the caller's
    // environment, behind the health operation's permission.
    let mut windows = Vec::new();
    if signed.holds(HEALTH) {
        let now = Timestamp::now().millis();
        for (name, bucket_ms, count) in WINDOWS {
            // Buckets end at the next bucket boundary after now.
            let end = (now / bucket_ms + 1) * bucket_ms;
            let since = Timestamp::from_millis(end - bucket_ms * *count as i64);
            let buckets = console
                .app
                .store
                .webhooks()
                .attempt_activity(
                    &signed.caller.environment_ref,
                    &endpoint,
                    since,
                    *bucket_ms,
                    *count,
                )
                .await?;
            windows.push(Window {
                name,
                since,
                bucket_ms: *bucket_ms,
                buckets,
            });
        }
    }
    let r = s(&e["endpoint_ref"]);
    let status = s(&e["status"]);
    let versions = e["secret_versions"].as_array().cloned().unwrap_or_default();
    let pending = versions.iter().any(|v| s(&v["status"]) == "pending");
    let etag = s(&e["etag"]);
    let action = |name: &str| format!("/console/endpoints/{r}/{name}");
    // The limits as the form shows them: empty for no rate limit.
    let rate_limit = e["rate_limit"]
        .as_i64()
        .map(|n| n.to_string())
        .unwrap_or_default();
    let max_in_flight = e["max_in_flight"]
        .as_i64()
        .map(|n| n.to_string())
        .unwrap_or_default();
    let body = html! {
        h1 { "Endpoint " code { (r) } }
        dl.facts {
            dt { "URL" } dd { (s(&e["url"])) }
            dt { "Description" } dd { (text(&e["description"])) }
            dt { "Status" } dd #endpoint-status data-status=(status) { (badge(status)) }
            dt { "Ordering" } dd #ordering { (s(&e["ordering"])) }
            dt { "Rate limit" } dd #rate-limit { (per_second(&e["rate_limit"], "none")) }
            dt { "Max in flight" } dd #max-in-flight { (text(&e["max_in_flight"])) }
            @if let Some(h) = &health {
                dt { "Health" } dd #health { (badge(s(&h["health"]))) }
                dt { "Last delivery" } dd { (text(&h["last_delivery_status"])) }
                dt { "Blocked keys" } dd #blocked-key-count { (text(&h["blocked_keys"])) }
                dt { "Effective rate" } dd #effective-rate { (per_second(&h["effective_rate"], "unlimited")) }
                dt { "Throttled until" } dd #throttled-until { (when(&h["throttled_until"])) }
            }
            dt { "Created" } dd { (when(&e["created_at"])) }
            dt { "Updated" } dd { (when(&e["updated_at"])) }
        }
        p { a href={ "/console/deliveries?endpoint_ref=" (r) } { "Deliveries of this endpoint →" } }
        @if !windows.is_empty() {
            section.health { h2 { "Traffic" } @for w in &windows { (charts::window(w)) } }
        }
        section {
            h2 { "Actions" }
            div.actions {
                @if status == "active" && signed.holds("webhooks:manage_pause_endpoint") {
                    form method="post" action=(action("pause")) {
                        (csrf(&signed)) (idempotency_key())
                        input type="hidden" name="etag" value=(etag);
                        button type="submit" #pause { "Pause" }
                    }
                }
                @if status != "active" && signed.holds("webhooks:manage_resume_endpoint") {
                    form method="post" action=(action("resume")) {
                        (csrf(&signed)) (idempotency_key())
                        input type="hidden" name="etag" value=(etag);
                        button type="submit" #resume { "Resume" }
                    }
                }
                @if signed.holds(UPDATE) {
                    // Only the fields changed from what the page showed
                    // are sent (`shown_*`): an untouched default stays the
                    // deployment's.
                    form #limits method="post" action=(action("limits")) {
                        (csrf(&signed)) (idempotency_key())
                        input type="hidden" name="etag" value=(etag);
                        input type="hidden" name="shown_rate_limit" value=(rate_limit);
                        input type="hidden" name="shown_max_in_flight" value=(max_in_flight);
                        label for="rate_limit" { "Rate limit /s" }
                        input type="number" id="rate_limit" name="rate_limit" min="1" max="10000" step="1" value=(rate_limit) placeholder="no limit";
                        label for="max_in_flight" { "Max in flight" }
                        input type="number" id="max_in_flight" name="max_in_flight" min="1" max="1000" step="1" value=(max_in_flight) placeholder="default";
                        button type="submit" #save-limits { "Save limits" }
                    }
                }
                @if signed.holds("webhooks:manage_test_send") {
                    form method="post" action=(action("test-send")) {
                        (csrf(&signed)) (idempotency_key())
                        label for="public_event_type" { "Test send" }
                        (select("public_event_type", &event_types(), "webhook.test", None))
                        button type="submit" #test-send { "Send a test" }
                    }
                }
            }
        }
        @if !blocked.is_empty() {
            (blocked_keys(&signed, &blocked, health.as_ref().and_then(|h| h["blocked_keys"].as_i64())))
        }
        section {
            h2 { "Signing secrets" }
            table.secrets {
                thead { tr { th { "Version" } th { "Status" } th { "Hint" } th { "Created" } th { "Expires" } } }
                tbody {
                    @for v in &versions {
                        tr data-status=(s(&v["status"])) {
                            td.num { (text(&v["version"])) }
                            td { (badge(s(&v["status"]))) }
                            td { code { "…" (s(&v["secret_hint"])) } }
                            td { (when(&v["created_at"])) }
                            td { (when(&v["expires_at"])) }
                        }
                    }
                }
            }
            div.actions {
                @for (name, permission, label, shown) in [
                    ("rotate", "webhooks:rotate_secret", "Rotate", !pending),
                    ("confirm", "webhooks:rotate_confirm", "Confirm the pending secret", pending),
                    ("revoke", "webhooks:rotate_revoke", "Revoke pending or retiring", true),
                ] {
                    @if shown && signed.holds(permission) {
                        form method="post" action=(action(name)) {
                            (csrf(&signed)) (idempotency_key())
                            input type="hidden" name="etag" value=(etag);
                            input type="text" name="reason" required maxlength="500" placeholder="reason" aria-label={ (label) " reason" };
                            button type="submit" id={ "secret-" (name) } { (label) }
                        }
                    }
                }
            }
        }
        @if let Some(subs) = &subscriptions {
            section {
                h2 { "Subscriptions" }
                @if subs.is_empty() { p.hint { "None." } } @else {
                    table {
                        thead { tr { th { "Event type" } th { "Scope" } th { "Version" } th { "Created" } } }
                        tbody { @for sub in subs { tr {
                            td { (s(&sub["public_event_type"])) }
                            td { (s(&sub["scope_type"])) " " code { (s(&sub["scope_ref"])) } }
                            td.num { (text(&sub["dto_version"])) }
                            td { (when(&sub["created_at"])) }
                        } } }
                    }
                }
            }
        }
    };
    Ok(html::page(
        &format!("Endpoint {r}"),
        &signed,
        Nav::Endpoints,
        notice(q.get("notice")),
        body,
    ))
}

/// The blocked keys of a `per_key` endpoint: each one's failed head, and
/// for a caller who may, redrive and skip, run by the delivery's own
/// actions (`delivery::redrive`, `delivery::skip`) with the ETag of the
/// head as read here. `total` is the count health gives, when readable.
fn blocked_keys(signed: &Signed, heads: &[DeliveryRecord], total: Option<i64>) -> Markup {
    let act = signed.holds(REDRIVE);
    html! {
        section #blocked-keys {
            h2 { "Blocked keys" }
            p.hint { "Each key's failed delivery keeps the key's later deliveries waiting. "
                "Redrive it to send it again first, or skip it (it stays failed) to release the rest." }
            @if let Some(n) = total.filter(|n| *n > heads.len() as i64) {
                p.hint { "The first " (heads.len()) " of " (n) " blocked keys, by key." }
            }
            table.blocked {
                thead { tr {
                    th { "Key" } th { "Sequence" } th { "Delivery" } th { "Event type" } th { "Failed" }
                    @if act { th { "Actions" } }
                } }
                tbody {
                    @for d in heads {
                        @let r = d.delivery_ref.as_str();
                        @let key = d.order.as_ref().map(|o| o.key.to_string()).unwrap_or_default();
                        @let failed = d.last_attempt_at.unwrap_or(d.updated_at);
                        @let etag = domain::etag::etag(r, d.version);
                        tr.blocked-key data-ref=(r) {
                            td { code { (key) } }
                            td.num { (text(&json!(d.order.as_ref().and_then(|o| o.sequence)))) }
                            td { a href={ "/console/deliveries/" (r) } { code { (r) } } }
                            td { (d.public_event_type) }
                            td { (when(&json!(failed.to_rfc3339()))) }
                            @if act {
                                td { div.actions {
                                    @for (name, label, hint) in [
                                        ("redrive", "Redrive", "why it is sent again"),
                                        ("skip", "Skip", "why its key goes on without it"),
                                    ] {
                                        form method="post" action={ "/console/deliveries/" (r) "/" (name) } {
                                            (csrf(signed)) (idempotency_key())
                                            input type="hidden" name="etag" value=(etag);
                                            input type="text" name="reason" required maxlength="500" placeholder=(hint) aria-label={ (label) " reason" };
                                            button type="submit" id={ (name) "-" (r) } { (label) }
                                        }
                                    }
                                } }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// A rate in attempts a second (`12/s`, `2.5/s`), or `none` for null.
fn per_second(v: &Value, none: &str) -> String {
    match v.as_f64() {
        Some(n) if n.fract() == 0.0 => format!("{}/s", n as i64),
        Some(n) => format!("{n}/s"),
        None => none.to_owned(),
    }
}

/// The `updateWebhookEndpoint` body of the limits form: each limit whose
/// field differs from what the page showed, empty as null (no rate limit;
/// the deployment's `max_in_flight`). A value that is no integer is sent
/// as the text it is, for the operation to refuse naming its field.
fn limits_body(form: &Fields) -> Value {
    let mut body = serde_json::Map::new();
    for field in LIMITS {
        let given = form.get(field);
        if given == form.get(&format!("shown_{field}")) {
            continue;
        }
        let value = match given {
            None => Value::Null,
            Some(t) => t
                .parse::<i64>()
                .map_or_else(|_| Value::from(t), Value::from),
        };
        body.insert(field.to_owned(), value);
    }
    Value::Object(body)
}

/// The endpoint actions: the operation each runs and whether it is
/// conditional on the endpoint's ETag.
fn operation_of(action: &str) -> Option<(&'static str, bool)> {
    Some(match action {
        "pause" => ("pauseWebhookEndpoint", true),
        "resume" => ("resumeWebhookEndpoint", true),
        "limits" => ("updateWebhookEndpoint", true),
        "rotate" => ("rotateWebhookSecret", true),
        "confirm" => ("confirmWebhookSecret", true),
        "revoke" => ("revokeWebhookSecret", true),
        "test-send" => ("sendWebhookTest", false),
        _ => return None,
    })
}

pub async fn act(
    State(console): State<Console>,
    signed: Signed,
    Path((endpoint_ref, action)): Path<(String, String)>,
    body: Bytes,
) -> Result<Response, PageError> {
    let (operation, conditional) = operation_of(&action)
        .ok_or_else(|| PageError::NotFound("There is no such endpoint action.".into()))?;
    let form = Fields::parse(&body)?;
    signed.check_csrf(&console, form.get("csrf"))?;
    let request = match action.as_str() {
        "pause" | "resume" => json!({}),
        "limits" => limits_body(&form),
        "test-send" => json!({ "public_event_type": form.value("public_event_type") }),
        _ => json!({ "reason": form.value("reason") }),
    };
    let answer = signed
        .api(&console)
        .write(
            operation,
            &[("endpoint_ref", &endpoint_ref)],
            request,
            if conditional { form.get("etag") } else { None },
            form.get("idempotency_key"),
        )
        .await?;
    let back = format!(
        "/console/endpoints/{}",
        crate::api::encode_segment(&endpoint_ref)
    );
    Ok(match action.as_str() {
        "rotate" => rotated(&signed, &back, &answer.data).into_response(),
        "test-send" => Redirect::to(&format!(
            "/console/deliveries/{}?notice=test_sent",
            crate::api::encode_segment(s(&answer.data["delivery_ref"]))
        ))
        .into_response(),
        "pause" => Redirect::to(&format!("{back}?notice=paused")).into_response(),
        "resume" => Redirect::to(&format!("{back}?notice=resumed")).into_response(),
        "limits" => Redirect::to(&format!("{back}?notice=limits_saved")).into_response(),
        "confirm" => Redirect::to(&format!("{back}?notice=confirmed")).into_response(),
        _ => Redirect::to(&format!("{back}?notice=revoked")).into_response(),
    })
}

/// The answer of a rotate: the new version's secret, shown this once (a
/// replay of the same form answers without it).
fn rotated(signed: &Signed, back: &str, endpoint: &Value) -> Html<String> {
    let versions = endpoint["secret_versions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let new = versions.iter().find(|v| v["secret"].is_string());
    let body = html! {
        h1 { "Secret rotated" }
        @match new {
            Some(v) => {
                p { "Version " (text(&v["version"])) " is " (badge(s(&v["status"]))) ": every attempt is signed with it too from now on. "
                    "Give it to the receiver, then confirm it on the endpoint's page." }
                p.secret-once { strong { "Copy it now: it is shown only this once." } }
                pre #new-secret.secret { (s(&v["secret"])) }
            }
            None => {
                p { "This form was sent before: the secret was shown the first time only." }
            }
        }
        p { a href=(back) { "← Back to the endpoint" } }
    };
    html::page("Secret rotated", signed, Nav::Endpoints, None, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(fields: &str) -> Value {
        limits_body(&Fields::parse(fields.as_bytes()).unwrap())
    }

    #[test]
    fn the_limits_form_sends_only_what_changed() {
        let shown = "shown_rate_limit=&shown_max_in_flight=100";
        assert_eq!(
            body(&format!("{shown}&rate_limit=&max_in_flight=100")),
            json!({})
        );
        assert_eq!(
            body(&format!("{shown}&rate_limit=25&max_in_flight=100")),
            json!({"rate_limit": 25})
        );
        assert_eq!(
            body(&format!("{shown}&rate_limit=&max_in_flight=")),
            json!({"max_in_flight": null})
        );
        assert_eq!(
            body("shown_rate_limit=25&shown_max_in_flight=100&rate_limit=+&max_in_flight=7"),
            json!({"rate_limit": null, "max_in_flight": 7})
        );
        assert_eq!(
            body(&format!("{shown}&rate_limit=1.5")),
            json!({"rate_limit": "1.5", "max_in_flight": null})
        );
    }

    #[test]
    fn rates_read_per_second() {
        assert_eq!(per_second(&json!(12.0), "none"), "12/s");
        assert_eq!(per_second(&json!(2.5), "none"), "2.5/s");
        assert_eq!(per_second(&Value::Null, "unlimited"), "unlimited");
    }
}
