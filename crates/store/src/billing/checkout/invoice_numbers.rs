//! Invoice numbers, taken last. An invoice is written with a pending number
//! (`pending`: unique, as it holds the invoice's reference, and never of a
//! number's shape), and its unit of work takes the environment's next
//! number for the year right before the commit (`number_at_commit`,
//! through `WriteTx::at_commit`): the invoice gets it, then the unit's
//! events are made from it by the caller's function, as typed values, and
//! inserted into the outbox. The store never reads or rewrites event data.
//!
//! Why last: the counter row (`invoice_counters`) is one per environment
//! and year, so every pay and renewal of an environment goes through it,
//! and it stays locked until its unit of work ends. Taken early, it was
//! held over the rest of the unit of work (entitlements, journey, events,
//! idempotency record), and on PostgreSQL concurrent pays queued on it for
//! all of that; taken last, it is held for the events' insert and the
//! commit alone.
//!
//! Still gapless and unique: the counter moves in the unit of work that
//! uses the number, so a rolled-back one gives its number back, and
//! concurrent ones take consecutive numbers in the order they commit. No
//! one sees a pending number: it exists only inside its open transaction.
//! Numbering is part of the invoice's creation, so it keeps the invoice's
//! `version` (the events carry that version's ETag).
//!
//! On PostgreSQL the counter and the invoice are one statement
//! (data-modifying `WITH`), so the lock is taken by the statement that
//! precedes the events' insert and `COMMIT`. SQLite has no data-modifying
//! `WITH`, and needs none: its one writer holds the whole database from
//! `BEGIN IMMEDIATE`, so no row lock is waited on; there it is two
//! statements. Either way the number is checked against
//! `domain::checkout::invoice::InvoiceNumber` before the commit.

use super::orders::InvoiceRecord;
use crate::db::marks::Marks;
use crate::db::tx::{int, single, text, Arg, WriteTx};
use crate::dispatch::outbox;
use crate::{Backend, EventRecord, StoreError};
use domain::checkout::invoice::{year_of, InvoiceNumber};
use domain::Ref;

/// The transaction as `at_commit` hands it over, at its commit.
type RunningTx = store_db::WriteTx;

/// The number an invoice holds until its unit of work commits.
pub(super) fn pending(invoice_ref: &Ref) -> String {
    format!("pending:{invoice_ref}")
}

/// The events of a unit of work that carries a new invoice, made once the
/// invoice has its number (in the order they are to be relayed), or why
/// they cannot be.
pub type EventsOf =
    Box<dyn FnOnce(&InvoiceNumber) -> Result<Vec<EventRecord>, String> + Send + Sync>;

/// What `number_at_commit` needs, owned: it runs at the commit.
struct Pending {
    environment_ref: String,
    year: i32,
    invoice_ref: String,
    pending: String,
}

/// Gives `invoice`, written by this unit of work with its pending number,
/// the environment's next number for its year right before the commit,
/// then inserts into the outbox the events `events` makes of that number.
/// Every writer of an invoice calls it in the same unit of work, with the
/// unit's events; until the commit the record's `number` is the pending
/// one.
pub fn number_at_commit(tx: &mut WriteTx, invoice: &InvoiceRecord, events: EventsOf) {
    let numbering = Pending {
        environment_ref: invoice.environment_ref.to_string(),
        year: year_of(invoice.issued_at),
        invoice_ref: invoice.invoice_ref.to_string(),
        pending: pending(&invoice.invoice_ref),
    };
    tx.at_commit(move |tx| {
        Box::pin(async move {
            let number = number(tx, numbering).await?;
            let events = events(&number)
                .map_err(|e| StoreError::Corrupt(format!("the events of invoice {number}: {e}")))?;
            outbox::insert(tx, &events).await
        })
    });
}

async fn number(tx: &mut RunningTx, p: Pending) -> Result<InvoiceNumber, StoreError> {
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

/// PostgreSQL: the counter and the invoice in one statement. The number
/// is formatted in SQL, then checked against the domain's.
async fn number_in_one(tx: &mut RunningTx, p: &Pending) -> Result<InvoiceNumber, StoreError> {
    let mut marks = Marks::new(tx.backend());
    let counter = COUNTER
        .replacen("{m}", &marks.next(), 1)
        .replacen("{m}", &marks.next(), 1);
    let year = p.year.to_string();
    let (year_mark, invoice_mark, pending_mark) = (marks.next(), marks.next(), marks.next());
    let sql = format!(
        "WITH counter AS ({counter}), \
         numbered AS (SELECT last_number, \
         CAST({year_mark} AS TEXT) || '-' || lpad(CAST(last_number AS TEXT), 6, '0') AS number \
         FROM counter), \
         invoice AS (UPDATE invoices SET number = numbered.number FROM numbered \
         WHERE invoices.invoice_ref = {invoice_mark} AND invoices.number = {pending_mark} \
         RETURNING 1) \
         SELECT last_number, number, (SELECT COUNT(*) FROM invoice) AS invoices FROM numbered"
    );
    let args: Vec<Arg<'_>> = vec![
        p.environment_ref.as_str().into(),
        i64::from(p.year).into(),
        year.as_str().into(),
        p.invoice_ref.as_str().into(),
        p.pending.as_str().into(),
    ];
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
    Ok(number)
}

/// SQLite: the counter, then the invoice.
async fn number_in_steps(tx: &mut RunningTx, p: &Pending) -> Result<InvoiceNumber, StoreError> {
    let counter = COUNTER.replace("{m}", "?");
    let rows = tx
        .fetch(
            &counter,
            &[p.environment_ref.as_str().into(), i64::from(p.year).into()],
        )
        .await?;
    let number = checked(p.year, int(single(&rows)?, "last_number")?)?;
    let written = number.to_string();
    let numbered = tx
        .execute(
            "UPDATE invoices SET number = $1 WHERE invoice_ref = $2 AND number = $3",
            &[
                written.as_str().into(),
                p.invoice_ref.as_str().into(),
                p.pending.as_str().into(),
            ],
        )
        .await?;
    wrote("invoices", numbered as i64, 1)?;
    Ok(number)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pending_number_is_never_a_number() {
        let invoice_ref = Ref::generate(domain::Prefix::Invoice);
        assert!(InvoiceNumber::parse(&pending(&invoice_ref)).is_none());
    }
}
