//! Redrive jobs (contract 12.2): create one by filter (202: it runs in the
//! background, `dispatcher::redrive_jobs`), list, retrieve and cancel.
//! A job's progress (`matched`, `redriven`, `skipped`) is read from its row
//! as the runner writes it.

use super::{check_reason, endpoint_by_ref};
use crate::error::ApiError;
use crate::handlers::lists::ListQuery;
use crate::handlers::Ctx;
use crate::input::Input;
use crate::reply::Reply;
use crate::wire::{opt_ts, ts};
use domain::webhook::{catalogue, DeliveryStatus, ResponseClass};
use domain::{Prefix, Ref, Timestamp};
use serde::{Deserialize, Serialize};
use store::webhooks::redrive_jobs::{self, JobFilter, RedriveJobRecord};
use store::StoreError;
use utoipa::ToSchema;

/// Which deliveries a job redrives.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FilterBody {
    /// `succeeded` or `failed`.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_ref: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_event_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_after: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_before: Option<String>,
    /// `4xx`, `5xx` or `none`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_response_class: Option<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateRedriveJob {
    /// 1 to 500 characters.
    pub reason: String,
    pub filter: FilterBody,
    /// Only count the deliveries the filter selects.
    #[serde(default)]
    pub dry_run: bool,
}

/// The empty body of a cancel.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelRedriveJob {}

#[derive(Debug, Serialize, ToSchema)]
pub struct RedriveJobDto {
    pub redrive_job_ref: String,
    /// `counting`, `running`, `succeeded` or `canceled`.
    pub status: String,
    pub filter: FilterBody,
    pub reason: String,
    pub dry_run: bool,
    pub matched: i64,
    pub redriven: i64,
    pub skipped: i64,
    pub created_at: String,
    pub finished_at: Option<String>,
}

fn dto(j: &RedriveJobRecord) -> RedriveJobDto {
    let f = &j.filter;
    RedriveJobDto {
        redrive_job_ref: j.redrive_job_ref.to_string(),
        status: j.status.as_str().to_owned(),
        filter: FilterBody {
            status: f.status.clone(),
            endpoint_ref: f.endpoint_ref.clone(),
            public_event_type: f.public_event_type.clone(),
            created_after: f.created_after.map(|t| ts(Timestamp::from_millis(t))),
            created_before: f.created_before.map(|t| ts(Timestamp::from_millis(t))),
            last_response_class: f.last_response_class.clone(),
        },
        reason: j.reason.clone(),
        dry_run: j.dry_run,
        matched: j.matched,
        redriven: j.redriven,
        skipped: j.skipped,
        created_at: ts(j.created_at),
        finished_at: opt_ts(j.finished_at),
    }
}

/// The body's filter, checked field by field (`filter.<name>`).
async fn job_filter(ctx: &Ctx, body: &FilterBody) -> Result<JobFilter, ApiError> {
    let invalid = |field: &str, issue: &str| ApiError::validation(format!("filter.{field}"), issue);
    let status = DeliveryStatus::parse(&body.status)
        .filter(|s| matches!(s, DeliveryStatus::Succeeded | DeliveryStatus::Failed))
        .ok_or_else(|| invalid("status", "must be succeeded or failed"))?;
    if let Some(t) = &body.public_event_type {
        catalogue::find(t)
            .ok_or_else(|| invalid("public_event_type", "not an event type of the catalogue"))?;
    }
    if let Some(c) = &body.last_response_class {
        ResponseClass::parse(c)
            .filter(|c| ResponseClass::FAILURES.contains(c))
            .ok_or_else(|| invalid("last_response_class", "must be 4xx, 5xx or none"))?;
    }
    let moment = |field: &str, value: &Option<String>| {
        value
            .as_deref()
            .map(|v| {
                Timestamp::parse(v)
                    .map(Timestamp::millis)
                    .ok_or_else(|| invalid(field, "must be an RFC 3339 timestamp"))
            })
            .transpose()
    };
    let created_after = moment("created_after", &body.created_after)?;
    let created_before = moment("created_before", &body.created_before)?;
    let endpoint_ref = match &body.endpoint_ref {
        Some(e) => {
            let r = Ref::parse(Prefix::WebhookEndpoint, e)
                .map_err(|err| invalid("endpoint_ref", &err.to_string()))?;
            endpoint_by_ref(ctx, &r).await?;
            Some(r.into_string())
        }
        None => None,
    };
    Ok(JobFilter {
        status: status.as_str().to_owned(),
        endpoint_ref,
        public_event_type: body.public_event_type.clone(),
        created_after,
        created_before,
        last_response_class: body.last_response_class.clone(),
    })
}

pub async fn create(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let body: CreateRedriveJob = input.body()?;
    check_reason(&body.reason)?;
    let filter = job_filter(ctx, &body.filter).await?;
    let env = ctx.env().clone();
    let now = ctx.now();
    let job = redrive_jobs::create(
        ctx.tx().await?,
        &env,
        &filter,
        &body.reason,
        body.dry_run,
        now,
    )
    .await?;
    Ok(Reply::one(dto(&job), None))
}

async fn load(ctx: &Ctx, input: &Input) -> Result<RedriveJobRecord, ApiError> {
    let r = input.path_ref("redrive_job_ref", Prefix::RedriveJob)?;
    match ctx.store().webhooks().redrive_job(ctx.env(), &r).await {
        Err(StoreError::NotFound) => Err(ApiError::not_found("redrive job")),
        other => Ok(other?),
    }
}

pub async fn retrieve(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    input.query_params(&[])?;
    Ok(Reply::one(dto(&load(ctx, &input).await?), None))
}

pub async fn list(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let query = ListQuery::parse(ctx, &input)?;
    let page = ctx
        .store()
        .webhooks()
        .list_redrive_jobs(ctx.env(), &query.page)
        .await?;
    Ok(Reply::page(
        page,
        &query.scope,
        |j| (j.created_at.millis(), j.redrive_job_ref.to_string()),
        dto,
    ))
}

pub async fn cancel(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let _: CancelRedriveJob = input.body()?;
    let job = load(ctx, &input).await?;
    let next = job
        .status
        .cancel()
        .map_err(|e| ApiError::semantic(e.to_string()))?;
    let now = ctx.now();
    match redrive_jobs::cancel(ctx.tx().await?, &job, next, now).await {
        Ok(canceled) => Ok(Reply::one(dto(&canceled), None)),
        // It ended between the read and the write.
        Err(StoreError::Conflict) => {
            let ended = load(ctx, &input).await?;
            Err(ApiError::semantic(format!(
                "cannot cancel a redrive job that is {}",
                ended.status.as_str()
            )))
        }
        Err(e) => Err(e.into()),
    }
}
