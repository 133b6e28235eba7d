//! The typed `data` of the six event types other systems publish
//! (`dispute.opened`, `dispute.closed`, `payout.paid`, `payout.failed`,
//! `participation.invited`, `participation.accepted`), parsed and checked
//! before anything is projected.
//!
//! An event's `data` is the resource's fields (`interface.md`), so each
//! parser reads those field names. A few other spellings are accepted as
//! aliases because the contract or the event catalogue's examples use them
//! for the same value: `payment_ref` for `payment_intent_ref` (contract
//! section 7), `closed_at` for a dispute's `resolved_at`, `created_at`,
//! `arrived_at` and `failure_code` for a payout's `requested_at`,
//! `completed_at` and `failure_reason`. The resource's own name wins when
//! both are present. Unknown extra fields are ignored: other systems grow
//! their shapes the way Stripe's do, and a new field must not dead-letter
//! every event.
//!
//! Data that does not fit is refused with a [`FieldIssue`] naming the
//! (dotted) field, which the intake writes into the dead letter's reason.
//! Fields the service derives itself (`reason_safe`, `evidence_due_at`,
//! `net`) are derived here too, never trusted from upstream; a `net` that is
//! sent must agree with `amount` − `fee`.

use super::sanitize::reason_safe;
use super::states::{
    evidence_due_at, DisputeKind, DisputeStatus, ParticipationStatus, PayoutStatus,
};
use crate::money::{Money, MoneyError, MoneyWire};
use crate::reference::{Prefix, Ref};
use crate::time::Timestamp;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// What was wrong with an event's data, and where: `field` is a dotted path
/// within `data` (`amount.value`), or `data` for the whole object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {issue}")]
pub struct FieldIssue {
    pub field: String,
    pub issue: String,
}

impl FieldIssue {
    pub fn new(field: impl Into<String>, issue: impl Into<String>) -> FieldIssue {
        FieldIssue {
            field: field.into(),
            issue: issue.into(),
        }
    }

    /// The same issue one level down: `email` under `invitee` is
    /// `invitee.email`.
    fn under(self, prefix: &str) -> FieldIssue {
        FieldIssue::new(format!("{prefix}.{}", self.field), self.issue)
    }
}

/// A dispute as its payment processor reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DisputeData {
    pub dispute_ref: Ref,
    pub payment_intent_ref: Ref,
    pub amount: Money,
    pub kind: DisputeKind,
    pub status: DisputeStatus,
    /// The raw upstream reason: store or show only [`DisputeData::reason_safe`].
    pub reason: Option<String>,
    pub opened_at: Option<Timestamp>,
    pub resolved_at: Option<Timestamp>,
}

/// A payout as the payout engine reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PayoutData {
    pub payout_ref: Ref,
    /// Usually carried in the envelope's `scope` instead.
    pub beneficiary_business_ref: Option<Ref>,
    pub status: PayoutStatus,
    pub amount: Money,
    /// Same currency as `amount`, never more than it.
    pub fee: Money,
    pub method_key: Option<String>,
    pub destination_label: Option<String>,
    /// Exactly four ASCII digits.
    pub destination_last4: Option<String>,
    pub failure_reason: Option<String>,
    pub requested_at: Option<Timestamp>,
    pub completed_at: Option<Timestamp>,
    pub paid_at: Option<Timestamp>,
}

/// A beneficiary business's participation as the partner system reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParticipationData {
    pub participation_ref: Ref,
    pub beneficiary_business_ref: Ref,
    pub status: ParticipationStatus,
    pub invited_at: Option<Timestamp>,
    pub accepted_at: Option<Timestamp>,
    /// From 1.
    pub terms_version: Option<u32>,
    /// SHA-256 of the accepted terms text, 64 lower-case hex digits.
    pub terms_digest: Option<String>,
    /// The invitee's contact (data class `contact`), as the catalogue's
    /// examples carry it in `invitee`.
    pub invitee_email: Option<String>,
    pub invitee_name: Option<String>,
}

impl DisputeData {
    pub fn parse(data: &Value) -> Result<DisputeData, FieldIssue> {
        let o = Obj::new(data)?;
        let dispute_ref = o.reference("dispute_ref", Prefix::Dispute)?;
        let (intent_field, intent) = o.required_any(&["payment_intent_ref", "payment_ref"])?;
        let payment_intent_ref = reference(intent_field, intent, Prefix::Payment)?;
        // Both spellings name one value (contract section 7): two different
        // values mean the sender is confused about which payment it is.
        if let (Some(_), Some(alias)) = (o.get("payment_intent_ref"), o.get("payment_ref")) {
            if reference("payment_ref", alias, Prefix::Payment)? != payment_intent_ref {
                return Err(FieldIssue::new(
                    "payment_ref",
                    "must equal payment_intent_ref",
                ));
            }
        }
        Ok(DisputeData {
            dispute_ref,
            payment_intent_ref,
            amount: o.money("amount")?,
            kind: o.wire(
                "kind",
                DisputeKind::parse,
                DisputeKind::ALL,
                DisputeKind::as_str,
            )?,
            status: o.wire(
                "status",
                DisputeStatus::parse,
                DisputeStatus::ALL,
                DisputeStatus::as_str,
            )?,
            reason: o.opt_string(&["reason"])?,
            opened_at: o.opt_timestamp(&["opened_at"])?,
            resolved_at: o.opt_timestamp(&["resolved_at", "closed_at"])?,
        })
    }

    /// The reason as subscribers and API callers see it.
    pub fn reason_safe(&self) -> Option<String> {
        self.reason.as_deref().map(reason_safe)
    }

    /// Opened + 7 days, when the opening is known.
    pub fn evidence_due_at(&self) -> Option<Timestamp> {
        self.opened_at.map(evidence_due_at)
    }
}

impl PayoutData {
    pub fn parse(data: &Value) -> Result<PayoutData, FieldIssue> {
        let o = Obj::new(data)?;
        let payout_ref = o.reference("payout_ref", Prefix::Payout)?;
        let amount = o.money("amount")?;
        let fee = o.money("fee")?;
        if fee.currency() != amount.currency() {
            return Err(FieldIssue::new("fee", "must be in the currency of amount"));
        }
        if fee.minor() > amount.minor() {
            return Err(FieldIssue::new("fee", "must not exceed amount"));
        }
        // `net` is derived; a sender that states it must agree.
        if o.get("net").is_some() && Some(o.money("net")?) != amount.checked_sub(fee).ok() {
            return Err(FieldIssue::new("net", "must equal amount minus fee"));
        }
        let destination_last4 = o.opt_string(&["destination_last4"])?;
        if let Some(d) = &destination_last4 {
            if d.len() != 4 || !d.bytes().all(|b| b.is_ascii_digit()) {
                return Err(FieldIssue::new(
                    "destination_last4",
                    "must be exactly 4 digits",
                ));
            }
        }
        Ok(PayoutData {
            payout_ref,
            beneficiary_business_ref: o
                .get("beneficiary_business_ref")
                .map(|v| reference("beneficiary_business_ref", v, Prefix::BeneficiaryBusiness))
                .transpose()?,
            status: o.wire(
                "status",
                PayoutStatus::parse,
                PayoutStatus::ALL,
                PayoutStatus::as_str,
            )?,
            amount,
            fee,
            method_key: o.opt_string(&["method_key"])?,
            destination_label: o.opt_string(&["destination_label"])?,
            destination_last4,
            failure_reason: o.opt_string(&["failure_reason", "failure_code"])?,
            requested_at: o.opt_timestamp(&["requested_at", "created_at"])?,
            completed_at: o.opt_timestamp(&["completed_at", "arrived_at"])?,
            paid_at: o.opt_timestamp(&["paid_at"])?,
        })
    }

    /// What reaches the destination: `amount` − `fee`. Parsing checked the
    /// currency and that the fee fits, so this cannot fail.
    pub fn net(&self) -> Money {
        self.amount
            .checked_sub(self.fee)
            .unwrap_or_else(|_| Money::zero(self.amount.currency()))
    }
}

impl ParticipationData {
    pub fn parse(data: &Value) -> Result<ParticipationData, FieldIssue> {
        let o = Obj::new(data)?;
        let participation_ref = o.reference("participation_ref", Prefix::Participation)?;
        let beneficiary_business_ref =
            o.reference("beneficiary_business_ref", Prefix::BeneficiaryBusiness)?;
        let status = o.wire(
            "status",
            ParticipationStatus::parse,
            ParticipationStatus::ALL,
            ParticipationStatus::as_str,
        )?;
        let terms_version = match o.get("terms_version") {
            None => None,
            Some(v) => Some(
                v.as_u64()
                    .filter(|n| *n >= 1)
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| {
                        FieldIssue::new("terms_version", "must be an integer from 1 to 4294967295")
                    })?,
            ),
        };
        let stated = o.opt_string(&["terms_digest"])?;
        if let Some(d) = &stated {
            if !is_sha256_hex(d) {
                return Err(FieldIssue::new(
                    "terms_digest",
                    "must be 64 lower-case hexadecimal digits (SHA-256)",
                ));
            }
        }
        // The text itself is never kept: only its digest identifies what was
        // accepted. When both come, they must describe the same terms.
        let computed = o.opt_string(&["terms_text"])?.map(|t| terms_digest(&t));
        let terms_digest = match (stated, computed) {
            (Some(s), Some(c)) if s != c => {
                return Err(FieldIssue::new(
                    "terms_digest",
                    "must be the SHA-256 of terms_text",
                ))
            }
            (s, c) => s.or(c),
        };
        let (invitee_email, invitee_name) = match o.get("invitee") {
            None => (None, None),
            Some(Value::Object(m)) => {
                let inv = Obj(m);
                (
                    inv.opt_string(&["email"]).map_err(|e| e.under("invitee"))?,
                    inv.opt_string(&["name"]).map_err(|e| e.under("invitee"))?,
                )
            }
            Some(_) => return Err(FieldIssue::new("invitee", "must be an object")),
        };
        Ok(ParticipationData {
            participation_ref,
            beneficiary_business_ref,
            status,
            invited_at: o.opt_timestamp(&["invited_at"])?,
            accepted_at: o.opt_timestamp(&["accepted_at"])?,
            terms_version,
            terms_digest,
            invitee_email,
            invitee_name,
        })
    }
}

/// The `terms_digest` of a terms text: SHA-256 of its UTF-8 bytes, as 64
/// lower-case hex digits.
pub fn terms_digest(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn reference(field: &str, v: &Value, prefix: Prefix) -> Result<Ref, FieldIssue> {
    let s = v.as_str().ok_or_else(|| {
        FieldIssue::new(
            field,
            format!("must be a string reference `{}_…`", prefix.as_str()),
        )
    })?;
    Ref::parse(prefix, s).map_err(|e| FieldIssue::new(field, e.to_string()))
}

/// The data object, read field by field. A `null` field is treated as an
/// absent one: upstream systems write both for "not set".
struct Obj<'a>(&'a Map<String, Value>);

impl<'a> Obj<'a> {
    fn new(data: &'a Value) -> Result<Obj<'a>, FieldIssue> {
        data.as_object()
            .map(Obj)
            .ok_or_else(|| FieldIssue::new("data", "must be an object"))
    }

    fn get(&self, field: &str) -> Option<&'a Value> {
        self.0.get(field).filter(|v| !v.is_null())
    }

    /// The first present of `names` (the resource's name, then aliases).
    fn any(&self, names: &[&'static str]) -> Option<(&'static str, &'a Value)> {
        names.iter().find_map(|n| self.get(n).map(|v| (*n, v)))
    }

    fn required_any(
        &self,
        names: &[&'static str],
    ) -> Result<(&'static str, &'a Value), FieldIssue> {
        self.any(names)
            .ok_or_else(|| FieldIssue::new(names[0], "is required"))
    }

    fn required(&self, field: &'static str) -> Result<&'a Value, FieldIssue> {
        self.required_any(&[field]).map(|(_, v)| v)
    }

    fn reference(&self, field: &'static str, prefix: Prefix) -> Result<Ref, FieldIssue> {
        reference(field, self.required(field)?, prefix)
    }

    fn wire<T>(
        &self,
        field: &'static str,
        parse: fn(&str) -> Option<T>,
        all: &[T],
        as_str: fn(T) -> &'static str,
    ) -> Result<T, FieldIssue>
    where
        T: Copy,
    {
        let v = self.required(field)?;
        v.as_str().and_then(parse).ok_or_else(|| {
            let names: Vec<_> = all.iter().map(|t| as_str(*t)).collect();
            FieldIssue::new(field, format!("must be one of {}", names.join(", ")))
        })
    }

    /// A Money object, its parts checked where they are: a bad `value`
    /// is an issue on `amount.value`, as the API's own bodies report it.
    fn money(&self, field: &'static str) -> Result<Money, FieldIssue> {
        let shape = || FieldIssue::new(field, "must be a Money object {currency, unit, value}");
        let m = self.required(field)?.as_object().ok_or_else(shape)?;
        if m.keys()
            .any(|k| !matches!(k.as_str(), "currency" | "unit" | "value"))
        {
            return Err(shape());
        }
        let part = |name: &str| -> Result<String, FieldIssue> {
            m.get(name)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| FieldIssue::new(format!("{field}.{name}"), "must be a string"))
        };
        let wire = MoneyWire {
            currency: part("currency")?,
            unit: part("unit")?,
            value: part("value")?,
        };
        Money::from_wire(&wire).map_err(|e| {
            let part = match e {
                MoneyError::BadCurrency => "currency",
                MoneyError::BadUnit => "unit",
                _ => "value",
            };
            FieldIssue::new(format!("{field}.{part}"), e.to_string())
        })
    }

    fn opt_string(&self, names: &[&'static str]) -> Result<Option<String>, FieldIssue> {
        match self.any(names) {
            None => Ok(None),
            Some((field, v)) => v
                .as_str()
                .map(|s| Some(s.to_owned()))
                .ok_or_else(|| FieldIssue::new(field, "must be a string")),
        }
    }

    fn opt_timestamp(&self, names: &[&'static str]) -> Result<Option<Timestamp>, FieldIssue> {
        match self.any(names) {
            None => Ok(None),
            Some((field, v)) => v
                .as_str()
                .and_then(Timestamp::parse)
                .map(Some)
                .ok_or_else(|| FieldIssue::new(field, "must be an RFC 3339 timestamp")),
        }
    }
}

#[cfg(test)]
mod tests;
