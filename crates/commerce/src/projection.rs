//! The projection of other systems' events onto disputes, payouts and
//! participations (contract 10.1, "Events from other systems"): the
//! `store::projection::Projector` this process's intake asks.
//!
//! Each event is applied once (remembered by its `event_ref`) in a unit of
//! work of its own: the resource is created or updated unless it holds a
//! newer event, an opened dispute cancels its payment's scheduled refunds,
//! and subscribers receive the resource as projected (a dispute's raw
//! reason never leaves: only `reason_safe`). Data that does not fit is
//! refused with the field and the issue, and dead-lettered by the intake.

use crate::jobs::cancel_scheduled_refunds;
use crate::shapes::outside::{dispute_body, with_etag};
use crate::shapes::MoneyDto;
use domain::outside::data::{DisputeData, FieldIssue, ParticipationData, PayoutData};
use domain::outside::states::{DisputeStatus, ParticipationStatus, PayoutStatus};
use domain::webhook::catalogue;
use domain::{Ref, Timestamp};
use serde_json::{json, Value};
use std::sync::Arc;
use store::billing::checkout::payments::PaymentRecord;
use store::billing::outside::{self, DisputeRecord, Projected, Projection as Write};
use store::projection::{self, Projection, ProjectionFuture, Projector};
use store::resource::Resource;
use store::{EventData, EventRecord, Store, StoreError, WriteTx};

/// The projector of this store.
pub fn projector(store: Store) -> Arc<dyn Projector> {
    Arc::new(StoreProjector { store })
}

struct StoreProjector {
    store: Store,
}

impl Projector for StoreProjector {
    fn project<'a>(&'a self, event: &'a EventRecord) -> ProjectionFuture<'a> {
        Box::pin(self.apply(event))
    }
}

fn refuse(issue: FieldIssue) -> Projection {
    Projection::Refuse(format!("data.{}: {}", issue.field, issue.issue))
}

fn ts(t: Option<Timestamp>) -> Value {
    t.map_or(Value::Null, |t| Value::String(t.to_rfc3339()))
}

fn payout_body(p: &PayoutData) -> Value {
    json!({
        "payout_ref": p.payout_ref.as_str(),
        "beneficiary_business_ref": p.beneficiary_business_ref.as_ref().map(Ref::as_str),
        "status": p.status.as_str(),
        "amount": MoneyDto::from(p.amount),
        "fee": MoneyDto::from(p.fee),
        "net": MoneyDto::from(p.net()),
        "method_key": p.method_key,
        "destination_label": p.destination_label,
        "destination_last4": p.destination_last4,
        "requested_at": ts(p.requested_at),
        "completed_at": ts(p.completed_at.or(p.paid_at)),
    })
}

fn participation_body(p: &ParticipationData) -> Value {
    json!({
        "participation_ref": p.participation_ref.as_str(),
        "beneficiary_business_ref": p.beneficiary_business_ref.as_str(),
        "status": p.status.as_str(),
        "invited_at": ts(p.invited_at),
        "accepted_at": ts(p.accepted_at),
        "terms_version": p.terms_version,
        "terms_digest": p.terms_digest,
    })
}

/// Writes a projection and answers what subscribers receive: the resource
/// after it, or this event's own projection when a newer one was applied.
async fn write<S>(tx: &mut WriteTx, w: Write<'_>) -> Result<(Value, bool), StoreError>
where
    Projected<S>: Resource,
{
    let body = w.body.clone();
    let (record, changed) = outside::project::<S>(tx, w).await?;
    // The resource as it is now, with its tag; an older event is delivered
    // as it described the resource then, without the current tag.
    let sent = if changed { with_etag(&record) } else { body };
    Ok((sent, changed))
}

impl StoreProjector {
    async fn apply(&self, event: &EventRecord) -> Result<Projection, StoreError> {
        let kind = event.public_event_type.as_str();
        if !catalogue::is_projected(kind) {
            return Ok(Projection::Skip);
        }
        let data: Value = serde_json::from_str(event.data.as_str())
            .map_err(|e| StoreError::Corrupt(format!("event data: {e}")))?;
        let mut tx = self.store.begin().await?;
        if let Some((data, scope)) = projection::remembered(&mut tx, event).await? {
            tx.rollback().await?;
            return Ok(Projection::Apply { data, scope });
        }
        let env = &event.environment_ref;
        let mut scope = event.scope.clone();
        let sent: Result<Value, StoreError> = match kind {
            "dispute.opened" | "dispute.closed" => {
                let d = match DisputeData::parse(&data) {
                    Ok(d) => d,
                    Err(issue) => return Ok(refuse(issue)),
                };
                let payment: PaymentRecord = match self.store.get(env, &d.payment_intent_ref).await
                {
                    Ok(p) => p,
                    Err(StoreError::NotFound) => {
                        return Ok(Projection::Refuse("unknown payment".to_owned()))
                    }
                    Err(e) => return Err(e),
                };
                if scope.buyer_ref.is_none() {
                    scope.buyer_ref = payment.buyer_ref.as_ref().map(Ref::to_string);
                }
                // A close that does not repeat the opening keeps it.
                let known = match self.store.get::<DisputeRecord>(env, &d.dispute_ref).await {
                    Ok(known) => Timestamp::parse(known.body["opened_at"].as_str().unwrap_or("")),
                    Err(StoreError::NotFound) => None,
                    Err(e) => return Err(e),
                };
                let opened_at = d.opened_at.or(known).unwrap_or(event.occurred_at);
                let body = dispute_body(
                    &d.dispute_ref,
                    &d.payment_intent_ref,
                    d.amount,
                    d.kind.as_str(),
                    d.status,
                    d.reason.as_deref(),
                    opened_at,
                    d.resolved_at,
                );
                let w = Write {
                    environment_ref: env,
                    reference: &d.dispute_ref,
                    status: d.status.as_str(),
                    body: &body,
                    occurred_at: event.occurred_at,
                    payment_intent_ref: Some(&d.payment_intent_ref),
                };
                match write::<DisputeStatus>(&mut tx, w).await {
                    Ok((sent, changed)) => {
                        if changed && d.status.is_open() {
                            cancel_scheduled_refunds(&mut tx, env, &payment, Timestamp::now())
                                .await
                                .map_err(|e| match e {
                                    crate::CommerceError::Store(e) => e,
                                    e => StoreError::Corrupt(format!("canceling refunds: {e}")),
                                })?;
                        }
                        Ok(sent)
                    }
                    Err(e) => Err(e),
                }
            }
            "payout.paid" | "payout.failed" => {
                let p = match PayoutData::parse(&data) {
                    Ok(p) => p,
                    Err(issue) => return Ok(refuse(issue)),
                };
                let body = payout_body(&p);
                let w = Write {
                    environment_ref: env,
                    reference: &p.payout_ref,
                    status: p.status.as_str(),
                    body: &body,
                    occurred_at: event.occurred_at,
                    payment_intent_ref: None,
                };
                write::<PayoutStatus>(&mut tx, w)
                    .await
                    .map(|(sent, _)| sent)
            }
            _ => {
                let p = match ParticipationData::parse(&data) {
                    Ok(p) => p,
                    Err(issue) => return Ok(refuse(issue)),
                };
                let body = participation_body(&p);
                let w = Write {
                    environment_ref: env,
                    reference: &p.participation_ref,
                    status: p.status.as_str(),
                    body: &body,
                    occurred_at: event.occurred_at,
                    payment_intent_ref: None,
                };
                write::<ParticipationStatus>(&mut tx, w)
                    .await
                    .map(|(sent, _)| sent)
            }
        };
        let sent = match sent {
            Ok(sent) => sent,
            Err(StoreError::Duplicate) => {
                return Ok(Projection::Refuse(
                    "the reference names a resource of another environment".to_owned(),
                ))
            }
            Err(e) => return Err(e),
        };
        let data = EventData::parse(sent.to_string()).map_err(StoreError::Corrupt)?;
        projection::remember(&mut tx, event, &data, &scope).await?;
        tx.commit().await?;
        Ok(Projection::Apply { data, scope })
    }
}
