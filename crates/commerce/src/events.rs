//! The events billing writes emit (contract 10.1, "Events are the
//! resource"): an event's data is the resource as the API shows it, and it
//! is written into the outbox in the unit of work that makes its change,
//! always through a `Batch`.

use crate::shapes::checkout::InvoiceDto;
use crate::shapes::Served;
use crate::CommerceError;
use domain::checkout::invoice::InvoiceNumber;
use domain::webhook::shaping::Scope;
use domain::{Prefix, Ref, Timestamp};
use serde::Serialize;
use store::billing::checkout::invoice_numbers;
use store::billing::checkout::orders::InvoiceRecord;
use store::dispatch::outbox::Emit;
use store::{EventData, EventRecord, WriteTx};

/// A new event of `event_type` carrying `data` (a wire DTO).
fn event(
    environment_ref: &Ref,
    event_type: &str,
    scope: &Scope,
    data: &impl Serialize,
    occurred_at: Timestamp,
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
    })
}

/// The events of one unit of work, at its time, relayed in the order they
/// were added. An event that carries an invoice this unit created is made at
/// the commit, from its typed shape, once the invoice has its number
/// (`invoice_numbers::number_at_commit`); the whole batch then goes into the
/// outbox there, so that its order holds.
pub struct Batch {
    env: Ref,
    scope: Scope,
    now: Timestamp,
    entries: Vec<Entry>,
    /// The invoice this unit created, numbered at the commit.
    numbered: Option<InvoiceRecord>,
}

enum Entry {
    Made(EventRecord),
    /// An event carrying the new invoice, whose shape waits for its number.
    Invoice {
        event_type: String,
        dto: InvoiceDto,
    },
}

impl Batch {
    pub fn new(env: &Ref, scope: Scope, now: Timestamp) -> Batch {
        Batch {
            env: env.clone(),
            scope,
            now,
            entries: Vec::new(),
            numbered: None,
        }
    }

    /// The time of the unit of work.
    pub fn now(&self) -> Timestamp {
        self.now
    }

    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// Adds an event of `event_type` carrying `data` (a resource's shape).
    pub fn add(&mut self, event_type: &str, data: &impl Serialize) -> Result<(), CommerceError> {
        let event = event(&self.env, event_type, &self.scope, data, self.now)?;
        self.entries.push(Entry::Made(event));
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
        self.numbered = Some(invoice.clone());
        self.entries.push(Entry::Invoice {
            event_type: event_type.to_owned(),
            dto: invoice.dto(self.now),
        });
        Ok(())
    }

    /// Writes the batch into the unit of work's outbox: now, or at the
    /// commit when it carries a new invoice.
    pub async fn flush(self, tx: &mut WriteTx) -> Result<(), CommerceError> {
        let Batch {
            env,
            scope,
            now,
            entries,
            numbered,
        } = self;
        let Some(invoice) = numbered else {
            let made: Vec<EventRecord> = entries
                .into_iter()
                .filter_map(|e| match e {
                    Entry::Made(event) => Some(event),
                    Entry::Invoice { .. } => None,
                })
                .collect();
            tx.emit_all(&made).await?;
            return Ok(());
        };
        let make = move |number: &InvoiceNumber| {
            entries
                .into_iter()
                .map(|e| match e {
                    Entry::Made(event) => Ok(event),
                    Entry::Invoice {
                        event_type,
                        mut dto,
                    } => {
                        dto.number = number.to_string();
                        event(&env, &event_type, &scope, &dto, now).map_err(|e| e.to_string())
                    }
                })
                .collect()
        };
        invoice_numbers::number_at_commit(tx, &invoice, Box::new(make));
        Ok(())
    }
}
