//! The events billing writes emit (contract 10.1, "Events are the
//! resource"): an event's data is the resource as the API shows it, and it
//! is written into the outbox in the unit of work that makes its change,
//! always through a `Batch`.

use crate::shapes::Served;
use crate::CommerceError;
use domain::webhook::event::EventOrder;
use domain::webhook::ordering::OrderingKey;
use domain::webhook::shaping::Scope;
use domain::{Prefix, Ref, Timestamp};
use serde::Serialize;
use store::billing::checkout::invoice_numbers::{self, Slot, UnitEvent};
use store::billing::checkout::orders::InvoiceRecord;
use store::billing::checkout::subscriptions;
use store::dispatch::outbox::Emit;
use store::{EventData, EventRecord, WriteTx};

/// A new event of `event_type` carrying `data` (a wire DTO), with `key`.
fn event(
    environment_ref: &Ref,
    event_type: &str,
    scope: &Scope,
    data: &impl Serialize,
    occurred_at: Timestamp,
    key: Option<&OrderingKey>,
) -> Result<EventRecord, CommerceError> {
    let text = serde_json::to_string(data)
        .map_err(|e| CommerceError::broken(format!("an event's data: {e}")))?;
    let data = EventData::parse(text)
        .map_err(|e| CommerceError::broken(format!("an event's data: {e}")))?;
    Ok(EventRecord {
        event_ref: Ref::generate(Prefix::Event),
        environment_ref: environment_ref.clone(),
        public_event_type: event_type.to_owned(),
        occurred_at,
        scope: scope.clone(),
        data,
        order: key.cloned().map(EventOrder::key),
    })
}

/// The ordering key of a checkout's events and of everything that later
/// happens to its payments (contract 13.1): the first subscription it
/// started, read in the unit of work (which may have just made it), or the
/// session itself.
pub async fn checkout_key(
    tx: &mut WriteTx,
    checkout_session_ref: &Ref,
) -> Result<Ref, CommerceError> {
    Ok(subscriptions::first_of_session(tx, checkout_session_ref)
        .await?
        .unwrap_or_else(|| checkout_session_ref.clone()))
}

/// The events of one unit of work, at its time, written together. When
/// the unit created an invoice, the batch goes into the outbox with the
/// invoice's number, at the commit (`invoice_numbers::number_at_commit`);
/// each event that carries the invoice tells where its number goes (its
/// `Slot`, found as the shape is serialised).
pub struct Batch {
    env: Ref,
    scope: Scope,
    now: Timestamp,
    events: Vec<UnitEvent>,
    /// The invoice this unit created, numbered at the commit.
    numbered: Option<InvoiceRecord>,
    /// The ordering key of every event of the unit (contract 13.1).
    key: Option<OrderingKey>,
}

impl Batch {
    pub fn new(env: &Ref, scope: Scope, now: Timestamp) -> Batch {
        Batch {
            env: env.clone(),
            scope,
            now,
            events: Vec::new(),
            numbered: None,
            key: None,
        }
    }

    /// The batch with `key` (a subscription or checkout session reference)
    /// as its events' ordering key.
    pub fn keyed(mut self, key: &Ref) -> Batch {
        self.set_key(key);
        self
    }

    /// Gives the batch's events `key` as their ordering key, those added
    /// already too.
    pub fn set_key(&mut self, key: &Ref) {
        // A reference is always a valid key: short, printable.
        let key = OrderingKey::parse(key.as_str()).ok();
        for e in &mut self.events {
            let (UnitEvent::Whole(e) | UnitEvent::Carrying(e, _)) = e;
            e.order = key.clone().map(EventOrder::key);
        }
        self.key = key;
    }

    /// The time of the unit of work.
    pub fn now(&self) -> Timestamp {
        self.now
    }

    /// Adds an event of `event_type` carrying `data` (a resource's shape).
    pub fn add(&mut self, event_type: &str, data: &impl Serialize) -> Result<(), CommerceError> {
        let event = event(
            &self.env,
            event_type,
            &self.scope,
            data,
            self.now,
            self.key.as_ref(),
        )?;
        self.events.push(UnitEvent::Whole(event));
        Ok(())
    }

    /// Adds an event carrying `invoice`, which this unit of work created
    /// with a pending number: it carries the number taken at the commit.
    pub fn add_new_invoice(
        &mut self,
        event_type: &str,
        invoice: &InvoiceRecord,
    ) -> Result<(), CommerceError> {
        if let Some(other) = &self.numbered {
            if other.invoice_ref != invoice.invoice_ref {
                return Err(CommerceError::broken(
                    "one unit of work's events carry two new invoices",
                ));
            }
        }
        let dto = invoice.dto(self.now);
        let event = event(
            &self.env,
            event_type,
            &self.scope,
            &dto,
            self.now,
            self.key.as_ref(),
        )?;
        let slot = slot_of(event.data.as_str(), &invoice.number)?;
        self.numbered = Some(invoice.clone());
        self.events.push(UnitEvent::Carrying(event, slot));
        Ok(())
    }

    /// Writes the batch into the unit of work's outbox: now, or with the
    /// invoice's number at the commit.
    pub async fn flush(self, tx: &mut WriteTx) -> Result<(), CommerceError> {
        match &self.numbered {
            Some(invoice) => invoice_numbers::number_at_commit(tx, invoice, self.events),
            None => {
                let made: Vec<EventRecord> = self
                    .events
                    .into_iter()
                    .map(|e| match e {
                        UnitEvent::Whole(event) | UnitEvent::Carrying(event, _) => event,
                    })
                    .collect();
                tx.emit_all(&made).await?;
            }
        }
        Ok(())
    }
}

/// Where `data`, a shape just serialised, holds `pending` (an invoice's
/// pending number, unique to it) as a JSON string: exactly once.
fn slot_of(data: &str, pending: &str) -> Result<Slot, CommerceError> {
    let quoted = serde_json::to_string(pending)
        .map_err(|e| CommerceError::broken(format!("a pending number: {e}")))?;
    let mut found = data.match_indices(&quoted);
    match (found.next(), found.next()) {
        (Some((at, _)), None) => Ok(Slot {
            at,
            len: quoted.len(),
        }),
        _ => Err(CommerceError::broken(
            "an invoice's event must hold its pending number once",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slot_is_the_pending_numbers_one_place() {
        let data = r#"{"invoice_ref":"inv_1","number":"pending:inv_1"}"#;
        let slot = slot_of(data, "pending:inv_1").unwrap();
        assert_eq!(&data[slot.at..slot.at + slot.len], r#""pending:inv_1""#);
        let twice = r#"{"a":"pending:inv_1","number":"pending:inv_1"}"#;
        assert!(slot_of(twice, "pending:inv_1").is_err());
        assert!(slot_of("{}", "pending:inv_1").is_err());
    }
}
