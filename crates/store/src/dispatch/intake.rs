//! The event queue's write: events not accepted before and their
//! deliveries (the fan-out, `crate::fanout`), in one unit of work (a
//! transaction, or one statement: `one_statement`), so an accepted event
//! is never left waiting for a second transaction to fan it out.
//!
//! A plain data operation: which callers share a transaction (group
//! commit) and which fresh deliveries go straight to a dispatcher
//! (hand-off) are the dispatcher's policy (`dispatcher::queue`). The store
//! only asks, through `Leasing`, which deliveries to insert already leased,
//! and returns their records after the commit.
//!
//! Invariant: the records of leased deliveries are returned only after the
//! transaction that created them and their leases committed, so the lease
//! fences them exactly as a claim's; if the process dies, the lease
//! expires and a claim takes them again.

use super::Dispatch;
use crate::db::marks::Marks;
use crate::db::tx::Arg;
use crate::dispatch::deliveries::EventCopies;
use crate::dispatch::fanout::{plan_fan_out, EventRow, Plan};
use crate::dispatch::ordering;
use crate::dispatch::signals::signal_due;
use crate::dispatch::{insert_deliveries, DeliveryRow};
use crate::webhooks::endpoints::EndpointVersions;
use crate::DeliveryRecord;
use crate::StoreError;
use domain::webhook::{BodyStatus, DeliveryStatus};
use domain::{Ref, Timestamp};
use std::collections::HashSet;
use std::time::Duration;

mod one_statement;
use one_statement::Tried;

/// Event rows per INSERT statement (11 values each).
const EVENT_ROWS: usize = 100;

/// Which fresh deliveries are born leased, and to whom: `room` is asked
/// once per pending delivery, in the transaction, and what it returns (a
/// dispatcher's reserved room) comes back with the delivery's record.
pub struct Leasing<T> {
    pub owner: String,
    pub lease: Duration,
    pub room: Room<T>,
}

/// Asked for each pending delivery's endpoint: room to attempt it now, if
/// there is some.
pub type Room<T> = Box<dyn FnMut(&Ref) -> Option<T> + Send>;

/// A delivery created leased: its record as a claim would have read it,
/// the endpoint version it was planned against, and its room.
pub struct Leased<T> {
    pub delivery: DeliveryRecord,
    pub endpoint_version: i64,
    pub room: T,
}

/// What `write_events` committed.
pub struct EventsWritten<T> {
    /// The references of the events that were new.
    pub new: HashSet<String>,
    /// The deliveries created leased (`Leasing`).
    pub leased: Vec<Leased<T>>,
    /// The deliveries created due now without a lease, for a claim.
    pub left_due: Vec<(Ref, Timestamp)>,
}

impl Dispatch<'_> {
    /// Inserts the events not accepted before and their deliveries, in one
    /// unit of work. On SQLite it is a turn of the write lane, and
    /// subscriptions are read for the whole batch inside it, never through
    /// the pool before it: the write waits on no other thread for what it
    /// plans with. On PostgreSQL, with a dispatcher leasing here, they are
    /// read just before, and a small batch is one statement
    /// (`one_statement`).
    ///
    /// Without `leasing` (no dispatcher in this process), deliveries left
    /// due are signalled to other processes in the transaction; with it,
    /// they are returned for the caller to hand on (`left_due`).
    pub async fn write_events<T: Send + 'static>(
        &self,
        mut events: Vec<EventRow>,
        leasing: Option<Leasing<T>>,
    ) -> Result<EventsWritten<T>, StoreError> {
        let store = self.0.clone();
        self.on_lane(async move { store.dispatch().insert_events(&mut events, leasing).await })
            .await
    }

    async fn insert_events<T>(
        &self,
        events: &mut [EventRow],
        mut leasing: Option<Leasing<T>>,
    ) -> Result<EventsWritten<T>, StoreError> {
        let mut planned = None;
        if let Some(leasing) = leasing.as_mut() {
            match one_statement::insert(self.0, events, leasing).await? {
                Tried::Written(written) => return Ok(written),
                Tried::Declined(read) => planned = read,
            }
        }
        let owner = leasing.as_ref().map(|l| l.owner.clone());
        let mut tx = self.begin_write().await?;
        // Numbered first: the fan-out copies each event's sequence.
        let numbered = ordering::accept(tx.inner(), events).await?;
        let events = &*events;
        let (plan, versions, url_fixed) = match planned {
            Some(read) => read,
            None => plan_fan_out(&mut tx, events).await?,
        };
        let now = Timestamp::now();
        let mut new = HashSet::new();
        let mut rows = candidates(&plan);
        let mut copies = EventCopies::with_events(&rows);
        for chunk in in_ref_order(events).chunks(EVENT_ROWS) {
            let sql = events_insert(&mut Marks::new(self.backend()), chunk.len());
            let args: Vec<Arg> = chunk
                .iter()
                .flat_map(|e| event_values(e, now, copies.of_event(e.event_ref.as_str())))
                .collect();
            new.extend(tx.fetch_texts(&sql, &args, "event_ref").await?);
        }
        // Only new events fan out: a duplicate's deliveries were made when
        // it was first accepted (and its copies kept then).
        copies
            .apart
            .retain(|(event_ref, _, _)| new.contains(*event_ref));
        rows.retain(|row| new.contains(row.new.event_ref.as_str()));
        let rooms = match (leasing.as_mut(), owner.as_deref()) {
            (Some(l), Some(owner)) => {
                let until = l.until(now);
                lease_rows(&mut l.room, owner, until, &mut rows)
            }
            _ => Vec::new(),
        };
        let created = insert_deliveries(
            &mut tx,
            self.backend(),
            &rows,
            &copies.apart,
            now.millis(),
            &url_fixed,
        )
        .await?;
        let mut written = written(&rows, rooms, &created, new, &versions, now);
        if !numbered.keys.is_empty() {
            ordering::advance(tx.inner(), &numbered.to_walk).await?;
            let keys = numbered.keys.into_iter().collect();
            let released = ordering::release(tx.inner(), &keys, now).await?;
            written
                .left_due
                .extend(released.into_iter().map(|r| (r, now)));
        }
        // With no dispatcher here to take them, other processes' are told.
        if !written.left_due.is_empty() && leasing.is_none() {
            signal_due(&mut tx).await?;
        }
        tx.commit().await?;
        Ok(written)
    }
}

/// `INSERT INTO events` of `n` events (`event_values` each, marks taken
/// from `marks`), processed at once and so without their data as
/// published (the deliveries carry it, migration 0010), but with the copy
/// of it that their deliveries share, if any (migration 0037); a reference
/// accepted before is left as it is. Returns the references of the events
/// that were new.
pub(super) fn events_insert(marks: &mut Marks, n: usize) -> String {
    let rows: Vec<String> = (0..n)
        .map(|_| {
            let columns = marks.list(5);
            let (received, processed) = (marks.next(), marks.next());
            let (key, sequence) = (marks.next(), marks.next());
            let (version, copy) = (marks.next(), marks.next());
            format!(
                "({columns}, 'processed', {received}, {processed}, {key}, {sequence}, \
                 {version}, {copy})"
            )
        })
        .collect();
    format!(
        "INSERT INTO events (event_ref, environment_ref, public_event_type, occurred_at, scope, \
         status, received_at, processed_at, ordering_key, sequence, copy_dto_version, \
         copy_data) VALUES {} \
         ON CONFLICT (event_ref) DO NOTHING RETURNING event_ref",
        rows.join(", ")
    )
}

/// `events` in the order `events_insert` takes them: by reference. On
/// PostgreSQL an insert holds each new event's key until it commits, so
/// two batches that share events in opposite orders would each wait on
/// the other, a deadlock; in one order, the second waits for the first
/// and then finds its events accepted. Only the insert is in this order:
/// a key's events are numbered in the order they came (`ordering::accept`).
pub(super) fn in_ref_order(events: &[EventRow]) -> Vec<&EventRow> {
    let mut sorted: Vec<&EventRow> = events.iter().collect();
    sorted.sort_by(|a, b| a.event_ref.as_str().cmp(b.event_ref.as_str()));
    sorted
}

/// What `events_insert` binds for `e`, accepted at `now`, with the copy
/// of its data its row keeps (`EventCopies::of_event`).
pub(super) fn event_values<'a>(
    e: &'a EventRow,
    now: Timestamp,
    copy: Option<(i64, &'a str)>,
) -> [Arg<'a>; 11] {
    [
        e.event_ref.as_str().into(),
        e.environment_ref.as_str().into(),
        e.public_event_type.as_str().into(),
        e.occurred_at.millis().into(),
        e.scope_json.as_str().into(),
        now.millis().into(),
        now.millis().into(),
        e.order.as_ref().map(|o| o.key.as_str()).into(),
        e.order.as_ref().and_then(|o| o.sequence).into(),
        copy.map(|(version, _)| version).into(),
        copy.map(|(_, data)| data).into(),
    ]
}

/// The deliveries planned for the batch, each event's once even if the
/// batch repeats it.
pub(super) fn candidates(plan: &Plan) -> Vec<DeliveryRow<'_>> {
    let mut planned = HashSet::new();
    plan.iter()
        .filter(|(event_ref, _)| planned.insert(event_ref.as_str()))
        .flat_map(|(_, deliveries)| deliveries.iter().map(DeliveryRow::unleased))
        .collect()
}

/// Asks `room` for room for each pending row, in order, and leases those
/// that get some to `owner` until `until`; returns each room with its
/// row's index.
pub(super) fn lease_rows<'a, T>(
    room: &mut Room<T>,
    owner: &'a str,
    until: i64,
    rows: &mut [DeliveryRow<'a>],
) -> Vec<(usize, T)> {
    let mut rooms = Vec::new();
    for (i, row) in rows.iter_mut().enumerate() {
        // An ordered delivery waits for its key's release; a limited one
        // starts where its limits are kept.
        if row.new.status != DeliveryStatus::Pending || row.new.ordered || row.new.limited {
            continue;
        }
        if let Some(got) = room(&row.new.endpoint_ref) {
            row.lease = Some((owner, until));
            rooms.push((i, got));
        }
    }
    rooms
}

impl<T> Leasing<T> {
    /// When a lease taken at `now` ends (Unix milliseconds).
    pub(super) fn until(&self, now: Timestamp) -> i64 {
        now.plus_millis(self.lease.as_millis() as i64).millis()
    }
}

/// What a committed write of `rows` (of which `created` were inserted)
/// returns: the leased ones with their rooms (a room whose row was not
/// inserted is dropped, which gives it back) and the unleased pending
/// ones left due.
pub(super) fn written<T>(
    rows: &[DeliveryRow<'_>],
    rooms: Vec<(usize, T)>,
    created: &HashSet<String>,
    new: HashSet<String>,
    versions: &EndpointVersions,
    now: Timestamp,
) -> EventsWritten<T> {
    let left_due = rows
        .iter()
        .filter(|r| {
            r.lease.is_none()
                && r.new.status == DeliveryStatus::Pending
                && !r.new.ordered
                && created.contains(r.delivery_ref.as_str())
        })
        .map(|r| (r.delivery_ref.clone(), now))
        .collect();
    let leased = rooms
        .into_iter()
        .filter(|(i, _)| created.contains(rows[*i].delivery_ref.as_str()))
        .map(|(i, room)| {
            let row = &rows[i];
            Leased {
                delivery: leased_record(row, now),
                endpoint_version: versions
                    .get(row.new.endpoint_ref.as_str())
                    .map_or(0, |(v, _)| *v),
                room,
            }
        })
        .collect();
    EventsWritten {
        new,
        leased,
        left_due,
    }
}

/// The record of a delivery just inserted from `row` at `now`, as a claim
/// would have read it back.
fn leased_record(row: &DeliveryRow, now: Timestamp) -> DeliveryRecord {
    let d = row.new;
    DeliveryRecord {
        delivery_ref: row.delivery_ref.clone(),
        environment_ref: d.environment_ref.clone(),
        endpoint_ref: d.endpoint_ref.clone(),
        event_ref: d.event_ref.clone(),
        public_event_type: d.public_event_type.clone(),
        dto_version: d.dto_version,
        status: d.status,
        diagnostic: d.diagnostic,
        generation: 1,
        attempt_count: 0,
        next_attempt_at: Some(now),
        last_attempt_at: None,
        occurred_at: d.occurred_at,
        event_data: d.event_data.clone(),
        match_reasons: row.match_reasons.clone(),
        body_status: BodyStatus::Available,
        payload: crate::webhooks::payload::Payload::Absent,
        created_at: now,
        updated_at: now,
        version: 1,
        order: d.order.clone(),
        ordered: d.ordered,
        skipped_at: None,
        skip_reason: None,
        kept_success: None,
    }
}
