//! The shape of a refund, and what a refund's events concern.

use super::{opt_ts, status_of, ts, MoneyDto, Served, StatusFilter};
use domain::etag::etag;
use domain::refunds::states::RefundStatus;
use domain::webhook::shaping::Scope;
use domain::{Prefix, Ref, Timestamp};
use serde::Serialize;
use store::billing::checkout::payments::PaymentRecord;
use store::billing::refunds::RefundRecord;
use utoipa::ToSchema;

#[derive(Debug, Serialize, ToSchema)]
pub struct RefundDto {
    pub refund_ref: String,
    pub payment_intent_ref: String,
    pub capture_ref: String,
    /// `scheduled`, `pending`, `succeeded`, `failed` or `canceled`.
    pub status: String,
    /// `full` or `partial`.
    pub scope: String,
    pub amount: MoneyDto,
    pub reason: String,
    /// `revoke` or `retain`.
    pub access_effect: String,
    /// True while scheduled.
    pub cancelable: bool,
    pub requested_at: String,
    pub scheduled_at: Option<String>,
    pub executed_at: Option<String>,
    pub canceled_at: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    pub etag: String,
}

impl Served for RefundRecord {
    type Dto = RefundDto;
    const PREFIX: Prefix = Prefix::Refund;
    const WHAT: &'static str = "refund";
    const PATH_PARAM: &'static str = "refund_ref";
    const STATUS: Option<StatusFilter> = status_of!(RefundStatus);
    const REF_FILTERS: &'static [(&'static str, Prefix)] =
        &[("payment_intent_ref", Prefix::Payment)];

    fn dto(&self, now: Timestamp) -> RefundDto {
        RefundDto {
            refund_ref: self.refund_ref.to_string(),
            payment_intent_ref: self.payment_intent_ref.to_string(),
            capture_ref: self.capture_ref.to_string(),
            status: self.status.as_str().to_owned(),
            scope: self.scope.as_str().to_owned(),
            amount: self.amount.into(),
            reason: self.reason.as_str().to_owned(),
            access_effect: self.access_effect.as_str().to_owned(),
            cancelable: self.status.cancelable(),
            requested_at: ts(self.requested_at),
            scheduled_at: opt_ts(self.scheduled_at),
            executed_at: opt_ts(self.executed_at),
            canceled_at: opt_ts(self.canceled_at),
            created_at: ts(self.created_at),
            updated_at: ts(self.updated_at),
            etag: Served::etag(self, now),
        }
    }

    fn etag(&self, _now: Timestamp) -> String {
        etag(self.refund_ref.as_str(), self.version)
    }

    fn position(&self) -> (i64, String) {
        (self.created_at.millis(), self.refund_ref.to_string())
    }
}

/// What a refund's events concern: its payment's products and buyer.
pub fn payment_scope(payment: &PaymentRecord) -> Scope {
    Scope {
        product_refs: payment.product_refs.clone(),
        buyer_ref: payment.buyer_ref.as_ref().map(Ref::to_string),
        beneficiary_business_ref: None,
    }
}
