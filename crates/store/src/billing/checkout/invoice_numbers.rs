//! Invoice numbers, taken last. An invoice is written with a pending number
//! (`pending`: unique, as it holds the invoice's reference, and never of a
//! number's shape), and its unit of work takes the environment's next
//! number for the year as its last statement before the commit
//! (`number_at_commit`, through `WriteTx::at_commit`): the invoice gets it,
//! and the unit's events go into the outbox with it. An event that carries
//! the invoice comes with its slot (`Slot`: where in its data, as its
//! caller serialised it, the number's JSON string goes); the store fills
//! the slot and never reads or searches event data.
//!
//! Why last: the counter row (`invoice_counters`) is one per environment
//! and year, so every pay and renewal of an environment goes through it,
//! and it stays locked until its unit of work ends. Taken early, it was
//! held over the rest of the unit of work (entitlements, journey, events,
//! idempotency record), and on PostgreSQL concurrent pays queued on it for
//! all of that; taken last, it is held for the commit alone.
//!
//! Still gapless and unique: the counter moves in the unit of work that
//! uses the number, so a rolled-back one gives its number back, and
//! concurrent ones take consecutive numbers in the order they commit. No
//! one sees a pending number: it exists only inside its open transaction.
//! Numbering is part of the invoice's creation, so it keeps the invoice's
//! `version` (the events carry that version's ETag).
//!
//! On PostgreSQL it is one statement (data-modifying `WITH`: the counter,
//! the invoice and the events' insert), so the lock is taken by the
//! statement that precedes `COMMIT`. SQLite has no data-modifying `WITH`,
//! and needs none: its one writer holds the whole database from `BEGIN
//! IMMEDIATE`, so no row lock is waited on; there it is three statements.
//! Either way the number is checked against
//! `domain::checkout::invoice::InvoiceNumber` before the commit.

use super::orders::InvoiceRecord;
use crate::db::codec::to_json;
use crate::db::marks::Marks;
use crate::db::tx::{int, single, text, Arg, WriteTx};
use crate::dispatch::outbox;
use crate::{Backend, EventData, EventRecord, StoreError};
use domain::checkout::invoice::{year_of, InvoiceNumber};
use domain::{Ref, Timestamp};

/// The transaction as `at_commit` hands it over, at its commit.
type RunningTx = store_db::WriteTx;

/// The number an invoice holds until its unit of work commits.
pub(super) fn pending(invoice_ref: &Ref) -> String {
    format!("pending:{invoice_ref}")
}

/// Where an event's data holds the pending number as a JSON string: its
/// bytes `at..at + len`, which take the number's JSON string at the commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    pub at: usize,
    pub len: usize,
}

/// An event of a unit of work that numbers an invoice.
pub enum UnitEvent {
    /// Written as made.
    Whole(EventRecord),
    /// It carries the invoice: its data's `Slot` takes the number.
    Carrying(EventRecord, Slot),
}

impl UnitEvent {
    fn record(&self) -> &EventRecord {
        match self {
            UnitEvent::Whole(e) | UnitEvent::Carrying(e, _) => e,
        }
    }

    fn record_mut(&mut self) -> &mut EventRecord {
        match self {
            UnitEvent::Whole(e) | UnitEvent::Carrying(e, _) => e,
        }
    }

    /// The data's text around its slot, if it has one: before, after.
    fn parts(&self) -> Result<(&str, Option<&str>), StoreError> {
        match self {
            UnitEvent::Whole(e) => Ok((e.data.as_str(), None)),
            UnitEvent::Carrying(e, slot) => {
                let data = e.data.as_str();
                let end = slot.at.checked_add(slot.len);
                match end.and_then(|end| Some((data.get(..slot.at)?, data.get(end..)?))) {
                    Some((head, tail)) => Ok((head, Some(tail))),
                    None => Err(StoreError::Corrupt(format!(
                        "event {}: its number's slot is outside its data",
                        e.event_ref
                    ))),
                }
            }
        }
    }

    /// The record with `number` in its slot.
    fn filled(&self, number: &str) -> Result<EventRecord, StoreError> {
        let (head, tail) = self.parts()?;
        let mut event = self.record().clone();
        if let Some(tail) = tail {
            event.data = EventData::parse(format!("{head}\"{number}\"{tail}"))
                .map_err(|e| StoreError::Corrupt(format!("event {}: {e}", event.event_ref)))?;
        }
        Ok(event)
    }
}

/// What `number_at_commit` needs, owned: it runs at the commit.
struct Pending {
    environment_ref: String,
    year: i32,
    invoice_ref: String,
    pending: String,
    events: Vec<UnitEvent>,
}

/// Gives `invoice`, written by this unit of work with its pending number,
/// the environment's next number for its year as the last statement before
/// the commit, and writes the unit's `events` into the outbox with it (each
/// that carries the invoice with the number in its slot). Every writer of
/// an invoice calls it in the same unit of work, with the unit's events;
/// until the commit the record's `number` is the pending one.
pub fn number_at_commit(tx: &mut WriteTx, invoice: &InvoiceRecord, events: Vec<UnitEvent>) {
    let numbering = Pending {
        environment_ref: invoice.environment_ref.to_string(),
        year: year_of(invoice.issued_at),
        invoice_ref: invoice.invoice_ref.to_string(),
        pending: pending(&invoice.invoice_ref),
        events,
    };
    tx.at_commit(move |tx| Box::pin(number(tx, numbering)));
}

async fn number(tx: &mut RunningTx, mut p: Pending) -> Result<(), StoreError> {
    // The events' keys are numbered at the commit too: held for it alone.
    let mut records: Vec<EventRecord> = p.events.iter().map(|e| e.record().clone()).collect();
    crate::dispatch::ordering::number(tx, &mut records).await?;
    for (event, record) in p.events.iter_mut().zip(records) {
        event.record_mut().order = record.order;
    }
    match tx.backend() {
        Backend::Postgres => number_in_one(tx, &p).await,
        Backend::Sqlite => number_in_steps(tx, &p).await,
    }
}

/// The number of sequence `seq`, or why there is none.
fn checked(year: i32, seq: i64) -> Result<InvoiceNumber, StoreError> {
    u32::try_from(seq)
        .ok()
        .and_then(|seq| InvoiceNumber::new(year, seq).ok())
        .ok_or_else(|| StoreError::Corrupt(format!("invoice number {year}-{seq}")))
}

fn wrote(what: &str, rows: i64, expected: usize) -> Result<(), StoreError> {
    if usize::try_from(rows).ok() == Some(expected) {
        Ok(())
    } else {
        Err(StoreError::Corrupt(format!(
            "numbering an invoice wrote {rows} {what}, not {expected}"
        )))
    }
}

const COUNTER: &str = "INSERT INTO invoice_counters (environment_ref, year, last_number) \
     VALUES ({m}, {m}, 1) ON CONFLICT (environment_ref, year) DO UPDATE \
     SET last_number = invoice_counters.last_number + 1 RETURNING last_number";

/// PostgreSQL: the counter, the invoice and the events in one statement.
/// The number is formatted in SQL, then checked against the domain's.
async fn number_in_one(tx: &mut RunningTx, p: &Pending) -> Result<(), StoreError> {
    let mut marks = Marks::new(tx.backend());
    let counter = COUNTER
        .replacen("{m}", &marks.next(), 1)
        .replacen("{m}", &marks.next(), 1);
    let year = p.year.to_string();
    let (year_mark, invoice_mark, pending_mark) = (marks.next(), marks.next(), marks.next());
    let rows: Vec<String> = (0..p.events.len())
        .map(|_| {
            format!(
                "(CAST({} AS TEXT), CAST({} AS TEXT), CAST({} AS TEXT), CAST({} AS BIGINT), \
                 CAST({} AS TEXT), CAST({} AS TEXT), CAST({} AS TEXT), CAST({} AS TEXT), \
                 CAST({} AS BIGINT))",
                marks.next(),
                marks.next(),
                marks.next(),
                marks.next(),
                marks.next(),
                marks.next(),
                marks.next(),
                marks.next(),
                marks.next()
            )
        })
        .collect();
    let created = marks.next();
    let events = if rows.is_empty() {
        String::new()
    } else {
        format!(
            ", events AS (INSERT INTO outbox ({}) \
             SELECT v.r, v.e, v.t, v.o, v.s, \
             CASE WHEN v.tail IS NULL THEN v.head \
             ELSE v.head || '\"' || numbered.number || '\"' || v.tail END, CAST({created} AS BIGINT), \
             v.k, v.q \
             FROM (VALUES {}) AS v (r, e, t, o, s, head, tail, k, q) CROSS JOIN numbered \
             RETURNING 1)",
            outbox::COLUMNS,
            rows.join(", ")
        )
    };
    let counted_events = if rows.is_empty() {
        "0"
    } else {
        "(SELECT COUNT(*) FROM events)"
    };
    let sql = format!(
        "WITH counter AS ({counter}), \
         numbered AS (SELECT last_number, \
         CAST({year_mark} AS TEXT) || '-' || lpad(CAST(last_number AS TEXT), 6, '0') AS number \
         FROM counter), \
         invoice AS (UPDATE invoices SET number = numbered.number FROM numbered \
         WHERE invoices.invoice_ref = {invoice_mark} AND invoices.number = {pending_mark} \
         RETURNING 1){events} \
         SELECT last_number, number, (SELECT COUNT(*) FROM invoice) AS invoices, \
         CAST({counted_events} AS BIGINT) AS events FROM numbered"
    );
    let scopes: Vec<String> = p
        .events
        .iter()
        .map(|e| to_json(&e.record().scope))
        .collect();
    let mut args: Vec<Arg<'_>> = vec![
        p.environment_ref.as_str().into(),
        i64::from(p.year).into(),
        year.as_str().into(),
        p.invoice_ref.as_str().into(),
        p.pending.as_str().into(),
    ];
    for (event, scope) in p.events.iter().zip(&scopes) {
        let (head, tail) = event.parts()?;
        args.extend(outbox::leading_args(event.record(), scope));
        args.extend::<[Arg<'_>; 2]>([head.into(), tail.into()]);
        args.extend(outbox::order_args(event.record()));
    }
    args.push(Timestamp::now().millis().into());
    let rows = tx.fetch(&sql, &args).await?;
    let row = single(&rows)?;
    let number = checked(p.year, int(row, "last_number")?)?;
    let written = text(row, "number")?;
    if written != number.to_string() {
        return Err(StoreError::Corrupt(format!(
            "invoice number written as {written}, not {number}"
        )));
    }
    wrote("invoices", int(row, "invoices")?, 1)?;
    wrote("events", int(row, "events")?, p.events.len())?;
    if !p.events.is_empty() {
        outbox::wake_relay_on_commit(tx);
    }
    Ok(())
}

/// SQLite: the counter, the invoice, then the events with the number in
/// their slots.
async fn number_in_steps(tx: &mut RunningTx, p: &Pending) -> Result<(), StoreError> {
    let counter = COUNTER.replace("{m}", "?");
    let rows = tx
        .fetch(
            &counter,
            &[p.environment_ref.as_str().into(), i64::from(p.year).into()],
        )
        .await?;
    let number = checked(p.year, int(single(&rows)?, "last_number")?)?.to_string();
    let numbered = tx
        .execute(
            "UPDATE invoices SET number = $1 WHERE invoice_ref = $2 AND number = $3",
            &[
                number.as_str().into(),
                p.invoice_ref.as_str().into(),
                p.pending.as_str().into(),
            ],
        )
        .await?;
    wrote("invoices", numbered as i64, 1)?;
    let events = p
        .events
        .iter()
        .map(|e| e.filled(&number))
        .collect::<Result<Vec<_>, _>>()?;
    outbox::insert(tx, &events).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::webhook::shaping::Scope;
    use domain::Prefix;

    fn event(data: &str) -> EventRecord {
        EventRecord {
            event_ref: Ref::generate(Prefix::Event),
            environment_ref: Ref::generate(Prefix::Environment),
            public_event_type: "invoice.paid".into(),
            occurred_at: Timestamp::from_millis(0),
            scope: Scope::default(),
            data: EventData::parse(data.to_owned()).unwrap(),
            order: None,
        }
    }

    #[test]
    fn a_slot_takes_the_number_and_nothing_else_changes() {
        let data = r#"{"invoice_ref":"inv_1","number":"pending:inv_1","note":"pending:inv_1"}"#;
        let at = data.find(r#""pending:inv_1""#).unwrap();
        let slot = Slot {
            at,
            len: r#""pending:inv_1""#.len(),
        };
        let filled = UnitEvent::Carrying(event(data), slot)
            .filled("2026-000001")
            .unwrap();
        assert_eq!(
            filled.data.as_str(),
            r#"{"invoice_ref":"inv_1","number":"2026-000001","note":"pending:inv_1"}"#
        );
        let whole = UnitEvent::Whole(event(data)).filled("2026-000001").unwrap();
        assert_eq!(whole.data.as_str(), data);
    }

    #[test]
    fn a_slot_outside_the_data_is_refused() {
        let slot = Slot { at: 5, len: 100 };
        assert!(UnitEvent::Carrying(event("{}"), slot)
            .filled("2026-000001")
            .is_err());
    }

    #[test]
    fn a_pending_number_is_never_a_number() {
        let invoice_ref = Ref::generate(domain::Prefix::Invoice);
        assert!(InvoiceNumber::parse(&pending(&invoice_ref)).is_none());
    }
}
