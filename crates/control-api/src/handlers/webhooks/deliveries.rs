//! Deliveries and attempts: retrieve, the stored body, attempts with a
//! cursor, and an endpoint's deliveries with a cursor.

use super::{load_delivery, load_endpoint};
use crate::error::ApiError;
use crate::handlers::lists::{Filter, FilterKind, ListQuery};
use crate::handlers::Ctx;
use crate::input::Input;
use crate::reply::Reply;
use crate::wire::{opt_ts, ts};
use domain::cursor::scope;
use domain::webhook::{catalogue, fanout, BodyStatus, DeliveryStatus, ResponseClass};
use serde::Serialize;
use std::collections::HashMap;
use store::{AttemptRecord, DeliveryFilter, DeliveryRecord, Payload};
use utoipa::ToSchema;
pub use webhook_shapes::delivery::{delivery_etag, dto, DeliveryDto};

pub(crate) async fn reply(ctx: &Ctx, d: &DeliveryRecord) -> Result<Reply, ApiError> {
    let waiting_for = ctx.store().webhooks().waiting_for(d).await?;
    Ok(Reply::one(
        dto(d, waiting_for.as_ref()),
        Some(delivery_etag(d)),
    ))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveryBodyDto {
    pub delivery_ref: String,
    /// `available`, `redacted` or `expired`.
    pub body_status: String,
    /// Every subscription that matched, or `{"kind": "test_send"}`.
    pub match_reasons: serde_json::Value,
    /// The JSON body exactly as last delivered (or as it will be), or null.
    pub payload: Option<serde_json::Value>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AttemptDto {
    pub attempt_ref: String,
    pub delivery_ref: String,
    pub generation: u32,
    pub attempt_number: u32,
    /// `succeeded` or `failed`.
    pub status: String,
    pub response_status: Option<u16>,
    pub error: Option<String>,
    /// The first 1 KiB of the response body.
    pub response_body_excerpt: Option<String>,
    pub duration_ms: i64,
    pub started_at: String,
    pub next_attempt_at: Option<String>,
}

impl From<&AttemptRecord> for AttemptDto {
    fn from(a: &AttemptRecord) -> Self {
        AttemptDto {
            attempt_ref: a.attempt_ref.to_string(),
            delivery_ref: a.delivery_ref.to_string(),
            generation: a.generation,
            attempt_number: a.attempt_number,
            status: a.status.as_str().to_owned(),
            response_status: a.response_status,
            error: a.error.clone(),
            response_body_excerpt: a.response_body_excerpt.clone(),
            duration_ms: a.duration_ms,
            started_at: ts(a.started_at),
            next_attempt_at: opt_ts(a.next_attempt_at),
        }
    }
}

pub async fn retrieve(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    input.query_params(&[])?;
    let d = load_delivery(ctx, &input).await?;
    reply(ctx, &d).await
}

pub async fn body(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    input.query_params(&[])?;
    let d = load_delivery(ctx, &input).await?;
    let match_reasons = match serde_json::from_str(&d.match_reasons)
        .map_err(|e| store::StoreError::Corrupt(format!("match_reasons: {e}")))?
    {
        serde_json::Value::Null => fanout::environment_reasons(
            &d.public_event_type,
            d.environment_ref.as_str(),
            d.dto_version,
        ),
        reasons => reasons,
    };
    let retention = ctx.state.settings.webhooks.body_retention.as_millis() as i64;
    let expired = d.created_at.millis() < ctx.now().millis() - retention;
    let (body_status, payload) = match (d.body_status, expired) {
        (BodyStatus::Available, true) => (BodyStatus::Expired, None),
        (BodyStatus::Available, false) => match &d.payload {
            Payload::Absent => (BodyStatus::Available, None),
            Payload::Verbatim(p) => (BodyStatus::Available, serde_json::from_str(p).ok()),
            Payload::Rebuilt => rebuilt(ctx, &d).await?,
        },
        (other, _) => (other, None),
    };
    Ok(Reply::one(
        DeliveryBodyDto {
            delivery_ref: d.delivery_ref.to_string(),
            body_status: body_status.as_str().to_owned(),
            match_reasons,
            payload,
        },
        None,
    ))
}

/// A body the store did not keep (`Payload::Rebuilt`), built again as the
/// attempt built it: from the event's data, shaped for no grant. With its
/// event's copy gone, it is no longer available; data that is not JSON
/// (damaged at rest) shows no body, as an attempt that sent none.
async fn rebuilt(
    ctx: &Ctx,
    d: &DeliveryRecord,
) -> Result<(BodyStatus, Option<serde_json::Value>), ApiError> {
    let Some(data) = ctx.store().webhooks().event_data_of(d).await? else {
        return Ok((BodyStatus::Expired, None));
    };
    let body = serde_json::from_str(&data)
        .ok()
        .map(|data| webhook_shapes::body::delivered(d, data, None))
        .and_then(|body| serde_json::from_str(&body).ok());
    Ok((BodyStatus::Available, body))
}

pub async fn attempts(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    input.query_params(&["limit", "cursor"])?;
    let d = load_delivery(ctx, &input).await?;
    let list_scope = scope(
        ctx.op.id,
        &[("delivery_ref", Some(d.delivery_ref.as_str()))],
    );
    let page = input.page(&list_scope)?;
    let page = ctx
        .store()
        .webhooks()
        .list_attempts(ctx.env(), &d, &page)
        .await?;
    Ok(Reply::page(
        page,
        &list_scope,
        |a| (a.created_at.millis(), a.attempt_ref.to_string()),
        |a| AttemptDto::from(a),
    ))
}

/// The filters of `listWebhookDeliveries` (contract 12.2).
pub fn filters() -> Vec<Filter> {
    vec![
        Filter::one_of("status", || {
            DeliveryStatus::ALL.iter().map(|s| s.as_str()).collect()
        }),
        Filter::one_of("public_event_type", || {
            catalogue::all().iter().map(|t| t.name).collect()
        }),
        Filter::of("created_after", FilterKind::Timestamp),
        Filter::of("created_before", FilterKind::Timestamp),
        Filter::one_of("last_response_class", || {
            ResponseClass::FAILURES.iter().map(|c| c.as_str()).collect()
        }),
    ]
}

/// The delivery filter of a list query checked by `filters`.
pub(crate) fn delivery_filter(query: &ListQuery<'_>) -> DeliveryFilter {
    DeliveryFilter {
        status: query.value("status").and_then(DeliveryStatus::parse),
        public_event_type: query.value("public_event_type").map(str::to_owned),
        created_after: query.timestamp("created_after"),
        created_before: query.timestamp("created_before"),
        last_response_class: query
            .value("last_response_class")
            .and_then(ResponseClass::parse),
    }
}

pub async fn list(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let query = ListQuery::parse_within(
        ctx,
        &input,
        &[("endpoint_ref", Some(input.path_str("endpoint_ref")))],
    )?;
    let endpoint = load_endpoint(ctx, &input).await?;
    let filter = delivery_filter(&query);
    let page = ctx
        .store()
        .webhooks()
        .list_deliveries(ctx.env(), &endpoint.endpoint_ref, &filter, &query.page)
        .await?;
    let mut waiting = HashMap::new();
    for d in &page.items {
        if let Some(w) = ctx.store().webhooks().waiting_for(d).await? {
            waiting.insert(d.delivery_ref.clone(), w);
        }
    }
    Ok(Reply::page(
        page,
        &query.scope,
        |d| (d.created_at.millis(), d.delivery_ref.to_string()),
        |d| dto(d, waiting.get(&d.delivery_ref)),
    ))
}
