//! `changeSubscription` and `previewSubscriptionChange` (contract 14.2):
//! transport only. Both parse the same body and compute through
//! `commerce::changes::plan`, so the change made at the same (clock) time
//! yields exactly the lines its preview answered; the change writes in the
//! request's one unit of work (`commerce::changes::change`).

use super::test_clocks::time_of;
use crate::error::ApiError;
use crate::handlers::reads::{self, load, Served};
use crate::handlers::Ctx;
use crate::input::Input;
use crate::reply::Reply;
use commerce::changes::{self, ChangeAsk};
use commerce::shapes::checkout::InvoiceLineDto;
use commerce::shapes::MoneyDto;
use domain::checkout::proration::ProrationMode;
use domain::{Prefix, Ref};
use serde::{Deserialize, Serialize};
use store::billing::checkout::subscriptions::SubscriptionRecord;
use utoipa::ToSchema;

/// Longest `reason`.
const MAX_REASON: usize = 500;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChangeSubscription {
    /// The price to move to: published, recurring, in the subscription's
    /// currency, not its current one.
    pub price_ref: String,
    /// `charge_now` (the default), `next_invoice` or `none`.
    pub proration: Option<String>,
    /// Why, in the caller's words (at most 500 characters).
    pub reason: Option<String>,
}

impl ChangeSubscription {
    fn ask(&self) -> Result<ChangeAsk, ApiError> {
        let price_ref = Ref::parse(Prefix::Price, &self.price_ref)
            .map_err(|e| ApiError::validation("price_ref", e.to_string()))?;
        let proration = match self.proration.as_deref() {
            None => ProrationMode::DEFAULT,
            Some(p) => ProrationMode::parse(p).ok_or_else(|| {
                ApiError::validation("proration", "must be charge_now, next_invoice or none")
            })?,
        };
        if self
            .reason
            .as_deref()
            .is_some_and(|r| r.chars().count() > MAX_REASON)
        {
            return Err(ApiError::validation(
                "reason",
                format!("must be at most {MAX_REASON} characters"),
            ));
        }
        Ok(ChangeAsk {
            price_ref,
            proration,
        })
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct NextRenewalDto {
    /// The end of the period after the change.
    pub at: String,
    /// What it will charge, the credit balance applied.
    pub amount: MoneyDto,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ChangePreviewDto {
    /// The lines the change makes (its invoice's, `charge_now`) or leaves
    /// for the next renewal (`next_invoice`; with `charge_now` when the
    /// credit covers the debit, the two proration lines); empty for `none`.
    pub lines: Vec<InvoiceLineDto>,
    /// What is charged at once.
    pub amount_total: MoneyDto,
    /// The buyer's credit balance after the change.
    pub credit_balance_after: MoneyDto,
    pub next_renewal: NextRenewalDto,
}

pub async fn change(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let body: ChangeSubscription = input.body()?;
    let ask = body.ask()?;
    let sub = load::<SubscriptionRecord>(ctx, &input).await?;
    input.check_etag(&Served::etag(&sub, ctx.now()))?;
    let now = time_of(ctx, sub.test_clock_ref.as_ref()).await?;
    let store = ctx.store().clone();
    let tx = ctx.tx().await?;
    let changed = changes::change(&store, tx, &sub, &ask, now).await?;
    Ok(reads::one(ctx, &changed))
}

pub async fn preview(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let body: ChangeSubscription = input.body()?;
    let ask = body.ask()?;
    let sub = load::<SubscriptionRecord>(ctx, &input).await?;
    let now = time_of(ctx, sub.test_clock_ref.as_ref()).await?;
    let store = ctx.store();
    let loaded = changes::load(store, &sub, &ask).await?;
    let balance = match &sub.buyer_ref {
        Some(buyer) => {
            store
                .billing()
                .credit_balance(buyer, loaded.currency)
                .await?
        }
        None => domain::Money::zero(loaded.currency),
    };
    let plan = changes::plan(&sub, &loaded, ask.proration, balance, now)?;
    let (at, amount) = plan.next_renewal()?;
    let dto = ChangePreviewDto {
        lines: plan.lines().iter().map(InvoiceLineDto::from).collect(),
        amount_total: plan.amount_total().into(),
        credit_balance_after: plan.credit_balance_after().into(),
        next_renewal: NextRenewalDto {
            at: commerce::shapes::ts(at),
            amount: amount.into(),
        },
    };
    Ok(Reply::one(dto, None))
}
