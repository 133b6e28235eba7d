//! Disputes, payouts and participations as the API serves them: the
//! resource their projection made (`store::billing::outside`), with its tag.
//! The `…Dto` types describe them for the OpenAPI document.

use super::{status_of, MoneyDto, Served, StatusFilter};
use domain::etag::etag;
use domain::outside::sanitize::reason_safe;
use domain::outside::states::evidence_due_at;
use domain::outside::states::{DisputeStatus, ParticipationStatus, PayoutStatus};
use domain::{Money, Prefix, Ref, Timestamp};
use serde::Serialize;
use serde_json::json;
use serde_json::Value;
use store::billing::outside::{DisputeRecord, ParticipationRecord, PayoutRecord, Projected};
use utoipa::ToSchema;

#[derive(Debug, Serialize, ToSchema)]
pub struct DisputeDto {
    pub dispute_ref: String,
    pub payment_intent_ref: String,
    pub amount: MoneyDto,
    /// `chargeback` or `inquiry`.
    pub kind: String,
    /// `needs_response`, `under_review`, `won` or `lost`.
    pub status: String,
    /// The upstream reason without markup or control characters, at most
    /// 200 characters.
    pub reason_safe: Option<String>,
    pub opened_at: String,
    pub evidence_due_at: String,
    pub resolved_at: Option<String>,
    pub etag: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PayoutDto {
    pub payout_ref: String,
    pub beneficiary_business_ref: Option<String>,
    /// `pending`, `in_transit`, `paid`, `failed` or `canceled`.
    pub status: String,
    pub amount: MoneyDto,
    pub fee: MoneyDto,
    /// `amount` − `fee`.
    pub net: MoneyDto,
    pub method_key: Option<String>,
    pub destination_label: Option<String>,
    pub destination_last4: Option<String>,
    pub requested_at: Option<String>,
    pub completed_at: Option<String>,
    pub etag: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ParticipationDto {
    pub participation_ref: String,
    pub beneficiary_business_ref: String,
    /// `invited`, `accepted`, `declined` or `revoked`.
    pub status: String,
    pub invited_at: Option<String>,
    pub accepted_at: Option<String>,
    pub terms_version: Option<u32>,
    /// SHA-256 (hex) of the accepted terms.
    pub terms_digest: Option<String>,
    pub etag: String,
}

/// The projected body with its tag.
pub fn with_etag<S>(record: &Projected<S>) -> Value {
    let mut body = record.body.clone();
    if let Value::Object(map) = &mut body {
        map.insert(
            "etag".to_owned(),
            Value::String(etag(record.reference.as_str(), record.version)),
        );
    }
    body
}

macro_rules! served {
    ($record:ty, $status:ty, $prefix:expr, $what:literal, $param:literal, $filters:expr) => {
        impl Served for $record {
            type Dto = Value;
            const PREFIX: Prefix = $prefix;
            const WHAT: &'static str = $what;
            const PATH_PARAM: &'static str = $param;
            const STATUS: Option<StatusFilter> = status_of!($status);
            const REF_FILTERS: &'static [(&'static str, Prefix)] = $filters;

            fn dto(&self, _now: Timestamp) -> Value {
                with_etag(self)
            }

            fn etag(&self, _now: Timestamp) -> String {
                etag(self.reference.as_str(), self.version)
            }

            fn position(&self) -> (i64, String) {
                (self.created_at.millis(), self.reference.to_string())
            }
        }
    };
}

served!(
    DisputeRecord,
    DisputeStatus,
    Prefix::Dispute,
    "dispute",
    "dispute_ref",
    &[("payment_intent_ref", Prefix::Payment)]
);
served!(
    PayoutRecord,
    PayoutStatus,
    Prefix::Payout,
    "payout",
    "payout_ref",
    &[]
);
served!(
    ParticipationRecord,
    ParticipationStatus,
    Prefix::Participation,
    "participation",
    "participation_ref",
    &[]
);

/// A dispute's wire form: the projection of its upstream state, with the
/// upstream reason made safe and the evidence deadline derived.
#[allow(clippy::too_many_arguments)]
pub fn dispute_body(
    dispute_ref: &Ref,
    payment_intent_ref: &Ref,
    amount: Money,
    kind: &str,
    status: DisputeStatus,
    reason: Option<&str>,
    opened_at: Timestamp,
    resolved_at: Option<Timestamp>,
) -> Value {
    json!({
        "dispute_ref": dispute_ref.as_str(),
        "payment_intent_ref": payment_intent_ref.as_str(),
        "amount": MoneyDto::from(amount),
        "kind": kind,
        "status": status.as_str(),
        "reason_safe": reason.map(reason_safe),
        "opened_at": opened_at.to_rfc3339(),
        "evidence_due_at": evidence_due_at(opened_at).to_rfc3339(),
        "resolved_at": resolved_at.map(Timestamp::to_rfc3339),
    })
}
