//! `listDeadLetters` (contract 12.3): the messages the intake refused, with
//! why, newest first, in the caller's environment (and those that name no
//! environment), filtered by `reason`.

use crate::error::ApiError;
use crate::handlers::lists::{Filter, FilterKind, ListQuery};
use crate::handlers::Ctx;
use crate::input::Input;
use crate::reply::Reply;
use crate::wire::ts;
use serde::Serialize;
use store::DeadLetterRecord;
use utoipa::ToSchema;

#[derive(Debug, Serialize, ToSchema)]
pub struct DeadLetterDto {
    pub dead_letter_ref: String,
    pub reason: String,
    pub received_at: String,
    /// The message as received, cut at 64 KiB.
    pub envelope: String,
}

impl From<&DeadLetterRecord> for DeadLetterDto {
    fn from(d: &DeadLetterRecord) -> Self {
        DeadLetterDto {
            dead_letter_ref: d.dead_letter_ref.to_string(),
            reason: d.reason.clone(),
            received_at: ts(d.received_at),
            envelope: d.envelope.clone(),
        }
    }
}

/// The filters of `listDeadLetters`.
pub fn filters() -> Vec<Filter> {
    vec![Filter::of("reason", FilterKind::Text)]
}

pub async fn list(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let query = ListQuery::parse(ctx, &input)?;
    let reason = query.value("reason");
    let page = ctx
        .store()
        .list_dead_letters(ctx.env(), reason, &query.page)
        .await?;
    Ok(Reply::page(
        page,
        &query.scope,
        |d| (d.received_at.millis(), d.dead_letter_ref.to_string()),
        |d| DeadLetterDto::from(d),
    ))
}
