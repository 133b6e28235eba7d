//! The event queue's write: events not accepted before and their
//! deliveries (the fan-out, `crate::fanout`), in one unit of work (a
//! transaction, or one statement: `one_statement`), so an accepted event
//! is never left waiting for a second transaction to fan it out.
//!
//! A plain data operation: which callers share a transaction (group
//! commit), which fresh deliveries go straight to a dispatcher (hand-off)
//! and which are attempted before they are written are the dispatcher's
//! policy (`dispatcher::queue`). The store only asks, through `Leasing`,
//! which deliveries to lease, and writes what it is told.
//!
//! With a dispatcher, the write is in two steps: `prepare_events` reads
//! the plan and the events accepted before, and leases the new events'
//! deliveries that get room (`Prepared`); the dispatcher may attempt some
//! of them at once (`Prepared::take_leased`); `write_prepared` then
//! writes the batch, and a delivery whose first attempt succeeded is born
//! settled: its one row is inserted as the record of that attempt would
//! have left it, never inserted leased and rewritten. Its reference is
//! keyed (`Leasing::reference_key`, `Ref::keyed`): a batch written again
//! after a crash (its events were never acknowledged) gives each delivery
//! the reference its receiver saw as `webhook-id`. A keyed reference that
//! meets another delivery's (one chance in about 10^14 for two deliveries
//! of events of the same millisecond) fails the write as a duplicate key:
//! the batch is then written with generated references, unleased.
//!
//! Invariant: the records of leased deliveries are returned only after the
//! transaction that created them and their leases committed, so the lease
//! fences them exactly as a claim's; if the process dies, the lease
//! expires and a claim takes them again. Those taken before the write
//! (`take_leased`) are attempted before it, but their outcome is recorded
//! only once the write has committed, by the write itself (born settled)
//! or under the lease it wrote.

use super::Dispatch;
use crate::db::codec::to_json;
use crate::db::marks::Marks;
use crate::db::read;
use crate::db::tx::{text, Arg};
use crate::dispatch::deliveries::EventCopies;
use crate::dispatch::fanout::{plan_fan_out, plan_fan_out_apart, EventRow, Plan, Planned};
use crate::dispatch::ordering;
use crate::dispatch::signals::signal_due;
use crate::dispatch::{insert_deliveries, AttemptResult, DeliveryRow};
use crate::webhooks::deliveries::NewDelivery;
use crate::webhooks::endpoints::EndpointVersions;
use crate::DeliveryRecord;
use crate::StoreError;
use domain::webhook::{BodyStatus, DeliveryStatus};
use domain::{Prefix, Ref, Timestamp};
use std::collections::{HashMap, HashSet};
use std::time::Duration;

mod one_statement;

/// Event rows per INSERT statement (11 values each).
const EVENT_ROWS: usize = 100;

/// Which fresh deliveries are born leased, and to whom: `room` is asked
/// once per pending delivery of a new event, before the write, and what it
/// returns (a dispatcher's reserved room) comes back with the delivery's
/// record.
pub struct Leasing<T> {
    pub owner: String,
    pub lease: Duration,
    pub room: Room<T>,
    /// The key of the deliveries' references (`Ref::keyed`), for a
    /// dispatcher that attempts deliveries before they are written: the
    /// same batch written again gives each delivery the same reference.
    /// Without one, references are generated.
    pub reference_key: Option<[u8; 32]>,
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

/// What a write of events committed.
pub struct EventsWritten<T> {
    /// The references of the events that were new.
    pub new: HashSet<String>,
    /// The deliveries created leased whose room was not taken before the
    /// write (`Prepared::take_leased`), for the caller to start.
    pub leased: Vec<Leased<T>>,
    /// The deliveries created due now without a lease, for a claim.
    pub left_due: Vec<(Ref, Timestamp)>,
    /// The references of every delivery created.
    pub created: HashSet<String>,
    /// Those of them created settled by their first attempt
    /// (`Dispatch::write_prepared`).
    pub settled: HashSet<String>,
}

/// A batch planned and leased but not written (module docs).
pub struct Prepared<T> {
    events: Vec<EventRow>,
    planned: Planned,
    decided: Decided,
    /// The leased deliveries' rooms, by index, until taken.
    rooms: Vec<(usize, Option<T>)>,
}

/// A prepared batch as its write takes it: the plan, the decisions, the
/// rooms not taken, and the first attempts that settle their deliveries
/// (by reference).
type Parts<'p, T> = (
    &'p Planned,
    &'p Decided,
    &'p mut [(usize, Option<T>)],
    &'p HashMap<String, AttemptResult>,
);

/// A prepared delivery that got no room (`Prepared::roomless`).
pub struct Roomless {
    index: usize,
    pub endpoint_ref: Ref,
    pub delivery_ref: Ref,
}

/// What the preparation decided for each planned delivery (in the order
/// of `planned_deliveries`).
struct Decided {
    /// Where each is in the plan: its event's entry, and its place there.
    positions: Vec<(usize, usize)>,
    refs: Vec<Ref>,
    match_reasons: Vec<String>,
    /// The leased ones, by index.
    leased: HashSet<usize>,
    /// Those that could be leased but got no room, by index.
    roomless: Vec<usize>,
    owner: String,
    until: i64,
    /// When the batch was planned: its deliveries' creation time.
    at: Timestamp,
}

impl<T> Prepared<T> {
    /// The records of the leased deliveries whose endpoint `pick` picks,
    /// each with its room, for attempts before the write. Each stays leased
    /// in the write, unless its result says it is settled
    /// (`write_prepared`).
    pub fn take_leased(&mut self, mut pick: impl FnMut(&Ref) -> bool) -> Vec<Leased<T>> {
        let (planned, d) = (&self.planned, &self.decided);
        let mut taken = Vec::new();
        for (i, room) in self.rooms.iter_mut() {
            if room.is_none() || !pick(&d.new_at(planned, *i).endpoint_ref) {
                continue;
            }
            let room = room.take().expect("checked above");
            taken.push(d.leased_before_write(planned, *i, room));
        }
        taken
    }

    /// Every planned delivery's reference.
    pub fn delivery_refs(&self) -> &[Ref] {
        &self.decided.refs
    }

    /// The deliveries that could have been leased (pending, of a new
    /// event, neither ordered nor limited) but got no room, whose endpoint
    /// `pick` picks: room may come for them before the write (`lease`).
    pub fn roomless(&self, mut pick: impl FnMut(&Ref) -> bool) -> Vec<Roomless> {
        let d = &self.decided;
        d.roomless
            .iter()
            .map(|i| (*i, d.new_at(&self.planned, *i)))
            .filter(|(_, new)| pick(&new.endpoint_ref))
            .map(|(i, new)| Roomless {
                index: i,
                endpoint_ref: new.endpoint_ref.clone(),
                delivery_ref: d.refs[i].clone(),
            })
            .collect()
    }

    /// Leases a delivery that got its room late, with `room`; its record,
    /// for an attempt before the write (as `take_leased`'s).
    pub fn lease(&mut self, roomless: Roomless, room: T) -> Leased<T> {
        let i = roomless.index;
        let d = &mut self.decided;
        d.leased.insert(i);
        d.roomless.retain(|r| *r != i);
        d.leased_before_write(&self.planned, i, room)
    }

    /// Every delivery's reference generated again, and none leased: after
    /// a keyed reference met another delivery's (module docs).
    fn redraw(&mut self) {
        let d = &mut self.decided;
        for r in d.refs.iter_mut() {
            *r = Ref::generate(Prefix::WebhookDelivery);
        }
        d.leased.clear();
        d.roomless.clear();
        self.rooms.clear();
    }
}

impl Dispatch<'_> {
    /// Inserts the events not accepted before and their deliveries, in one
    /// unit of work. Without `leasing` (no dispatcher in this process) it
    /// is one transaction, which on SQLite is a turn of the write lane and
    /// reads the subscriptions inside it, never through the pool before
    /// it; deliveries left due are signalled to other processes in it.
    /// With `leasing`, it is `prepare_events` and `write_prepared` with no
    /// delivery attempted in between.
    pub async fn write_events<T: Send + 'static>(
        &self,
        events: Vec<EventRow>,
        leasing: Option<Leasing<T>>,
    ) -> Result<EventsWritten<T>, StoreError> {
        match leasing {
            Some(leasing) => {
                let prepared = self.prepare_events(events, leasing).await?;
                self.write_prepared(prepared, Vec::new()).await
            }
            None => {
                let store = self.0.clone();
                let mut events = events;
                self.on_lane(
                    async move { store.dispatch().insert_in_tx::<T>(&mut events, None).await },
                )
                .await
            }
        }
    }

    /// Plans `events` through the pool, and leases to `leasing`'s owner the
    /// pending deliveries of those not accepted before that get room (an
    /// ordered or limited delivery never does). Writes nothing: a batch
    /// dropped unwritten gives its rooms back.
    pub async fn prepare_events<T>(
        &self,
        events: Vec<EventRow>,
        mut leasing: Leasing<T>,
    ) -> Result<Prepared<T>, StoreError> {
        let planned = plan_fan_out_apart(self.0, &events).await?;
        let before = self.accepted_before(&events).await?;
        let at = Timestamp::now();
        let until = leasing.until(at);
        let (mut refs, mut match_reasons, mut rooms) = (Vec::new(), Vec::new(), Vec::new());
        let mut roomless = Vec::new();
        let positions: Vec<(usize, usize)> = planned_positions(&planned.0).collect();
        for (i, new) in planned_deliveries(&planned.0).enumerate() {
            refs.push(match &leasing.reference_key {
                Some(key) => keyed_ref(key, new),
                None => Ref::generate(Prefix::WebhookDelivery),
            });
            match_reasons.push(to_json(&new.match_reasons));
            let leasable = new.status == DeliveryStatus::Pending && !new.ordered && !new.limited;
            if !leasable || before.contains(new.event_ref.as_str()) {
                continue;
            }
            match (leasing.room)(&new.endpoint_ref) {
                Some(room) => rooms.push((i, Some(room))),
                None => roomless.push(i),
            }
        }
        Ok(Prepared {
            events,
            planned,
            decided: Decided {
                positions,
                refs,
                match_reasons,
                leased: rooms.iter().map(|(i, _)| *i).collect(),
                roomless,
                owner: leasing.owner,
                until,
                at,
            },
            rooms,
        })
    }

    /// Writes a prepared batch in one unit of work. A delivery whose
    /// first attempt is among `attempted` and succeeded without an error
    /// (`AttemptResult::settles_at_birth`) is inserted settled; the other
    /// leased ones are inserted leased. Deliveries of events accepted
    /// meanwhile (by another process) are not written: `created` says
    /// which were.
    pub async fn write_prepared<T: Send + 'static>(
        &self,
        prepared: Prepared<T>,
        attempted: Vec<AttemptResult>,
    ) -> Result<EventsWritten<T>, StoreError> {
        let store = self.0.clone();
        self.on_lane(async move {
            let mut prepared = prepared;
            let settled: HashMap<String, AttemptResult> = attempted
                .into_iter()
                .filter(AttemptResult::settles_at_birth)
                .map(|r| (r.delivery_ref.to_string(), r))
                .collect();
            let dispatch = store.dispatch();
            match dispatch.insert_prepared(&mut prepared, &settled).await {
                Err(StoreError::Duplicate) => {
                    tracing::warn!(
                        "a keyed delivery reference met another delivery's; written with generated ones"
                    );
                    prepared.redraw();
                    dispatch.insert_prepared(&mut prepared, &HashMap::new()).await
                }
                written => written,
            }
        })
        .await
    }

    async fn insert_prepared<T>(
        &self,
        prepared: &mut Prepared<T>,
        settled: &HashMap<String, AttemptResult>,
    ) -> Result<EventsWritten<T>, StoreError> {
        let Prepared {
            events,
            planned,
            decided,
            rooms,
        } = prepared;
        let prepared = (&*planned, &*decided, rooms.as_mut_slice(), settled);
        if let Some(written) = one_statement::insert(self.0, events, prepared).await? {
            return Ok(written);
        }
        let prepared = (&*planned, &*decided, rooms.as_mut_slice(), settled);
        self.insert_in_tx(events, Some(prepared)).await
    }

    /// The references among `events`' of events accepted before.
    async fn accepted_before(&self, events: &[EventRow]) -> Result<HashSet<String>, StoreError> {
        let mut before = HashSet::new();
        for chunk in events.chunks(EVENT_ROWS) {
            let sql = format!(
                "SELECT event_ref FROM events WHERE event_ref IN ({})",
                Marks::new(self.backend()).list(chunk.len())
            );
            let args: Vec<Arg> = chunk.iter().map(|e| e.event_ref.as_str().into()).collect();
            before.extend(read::all(self.pool(), &sql, &args, |row| text(row, "event_ref")).await?);
        }
        Ok(before)
    }

    /// The transaction that writes a batch: planned in it, unless it was
    /// prepared (then with the deliveries as decided, `Parts`).
    async fn insert_in_tx<T>(
        &self,
        events: &mut [EventRow],
        prepared: Option<Parts<'_, T>>,
    ) -> Result<EventsWritten<T>, StoreError> {
        let mut tx = self.begin_write().await?;
        // Numbered first: the fan-out copies each event's sequence.
        let numbered = ordering::accept(tx.inner(), events).await?;
        let events = &*events;
        let planned_here;
        let (planned, decided, rooms) = match prepared {
            Some((planned, decided, rooms, settled)) => {
                (planned, Some((decided, settled)), take_rooms(rooms))
            }
            None => {
                planned_here = plan_fan_out(&mut tx, events).await?;
                (&planned_here, None, Vec::new())
            }
        };
        let (plan, versions, url_fixed) = planned;
        let now = Timestamp::now();
        let at = decided.map_or(now, |(d, _)| d.at);
        let rows = match decided {
            Some((d, settled)) => decided_rows(plan, d, settled),
            None => planned_deliveries(plan)
                .map(DeliveryRow::unleased)
                .collect(),
        };
        let mut new = HashSet::new();
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
        let inserted: Vec<&DeliveryRow> = rows
            .iter()
            .filter(|row| new.contains(row.new.event_ref.as_str()))
            .collect();
        let created = insert_deliveries(
            &mut tx,
            self.backend(),
            &inserted,
            &copies.apart,
            (at.millis(), now.millis()),
            url_fixed,
        )
        .await?;
        let mut written = written(&rows, rooms, created, new, versions, at);
        if !numbered.keys.is_empty() {
            ordering::advance(tx.inner(), &numbered.to_walk).await?;
            let keys = numbered.keys.into_iter().collect();
            let released = ordering::release(tx.inner(), &keys, now).await?;
            written
                .left_due
                .extend(released.into_iter().map(|r| (r, now)));
        }
        // With no dispatcher here to take them, other processes' are told.
        if !written.left_due.is_empty() && decided.is_none() {
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
pub(super) fn planned_deliveries(plan: &Plan) -> impl Iterator<Item = &NewDelivery> {
    planned_positions(plan).map(|(e, k)| &plan[e].1[k])
}

/// Where `planned_deliveries` takes each from: its event's entry in the
/// plan, and its place there.
fn planned_positions(plan: &Plan) -> impl Iterator<Item = (usize, usize)> + '_ {
    let mut planned = HashSet::new();
    plan.iter()
        .enumerate()
        .filter(move |(_, (event_ref, _))| planned.insert(event_ref.as_str()))
        .flat_map(|(e, (_, deliveries))| (0..deliveries.len()).map(move |k| (e, k)))
}

impl Decided {
    /// The `i`th planned delivery.
    fn new_at<'p>(&self, planned: &'p Planned, i: usize) -> &'p NewDelivery {
        let (e, k) = self.positions[i];
        &planned.0[e].1[k]
    }

    /// The record of the `i`th delivery, leased with `room` to be attempted
    /// before the write, as the write will create it.
    fn leased_before_write<T>(&self, planned: &Planned, i: usize, room: T) -> Leased<T> {
        let new = self.new_at(planned, i);
        let row = DeliveryRow {
            new,
            delivery_ref: self.refs[i].clone(),
            lease: None,
            match_reasons: self.match_reasons[i].clone(),
            settled: None,
        };
        Leased {
            delivery: leased_record(&row, self.at),
            endpoint_version: endpoint_version(&planned.1, new),
            room,
        }
    }
}

/// A delivery's keyed reference: the same for the same event, endpoint
/// and dto version, its time part the event's.
fn keyed_ref(key: &[u8; 32], d: &NewDelivery) -> Ref {
    let seed = format!("{}/{}/{}", d.event_ref, d.endpoint_ref, d.dto_version);
    Ref::keyed(Prefix::WebhookDelivery, d.occurred_at.millis(), key, &seed)
}

/// The rows of a prepared batch: its references, leases as decided, and
/// the settled ones (by reference in `settled`) with their attempt and
/// no lease.
fn decided_rows<'a>(
    plan: &'a Plan,
    d: &'a Decided,
    settled: &'a HashMap<String, AttemptResult>,
) -> Vec<DeliveryRow<'a>> {
    planned_deliveries(plan)
        .enumerate()
        .map(|(i, new)| {
            let delivery_ref = d.refs[i].clone();
            let settled = settled.get(delivery_ref.as_str());
            let leased = settled.is_none() && d.leased.contains(&i);
            DeliveryRow {
                new,
                lease: leased.then_some((d.owner.as_str(), d.until)),
                delivery_ref,
                match_reasons: d.match_reasons[i].clone(),
                settled,
            }
        })
        .collect()
}

/// The rooms not taken before the write, by their row's index.
fn take_rooms<T>(rooms: &mut [(usize, Option<T>)]) -> Vec<(usize, T)> {
    rooms
        .iter_mut()
        .filter_map(|(i, room)| Some((*i, room.take()?)))
        .collect()
}

impl<T> Leasing<T> {
    /// When a lease taken at `now` ends (Unix milliseconds).
    pub(super) fn until(&self, now: Timestamp) -> i64 {
        now.plus_millis(self.lease.as_millis() as i64).millis()
    }
}

/// The endpoint version `d` was planned against.
fn endpoint_version(versions: &EndpointVersions, d: &NewDelivery) -> i64 {
    versions.get(d.endpoint_ref.as_str()).map_or(0, |(v, _)| *v)
}

/// What a committed write of `rows` (of which `created` were inserted)
/// returns: the leased ones with their rooms (a room whose row was not
/// inserted, or was inserted settled, is dropped, which gives it back) and
/// the unleased pending ones left due.
pub(super) fn written<T>(
    rows: &[DeliveryRow<'_>],
    rooms: Vec<(usize, T)>,
    created: HashSet<String>,
    new: HashSet<String>,
    versions: &EndpointVersions,
    at: Timestamp,
) -> EventsWritten<T> {
    let left_due = rows
        .iter()
        .filter(|r| {
            r.lease.is_none()
                && r.settled.is_none()
                && r.new.status == DeliveryStatus::Pending
                && !r.new.ordered
                && created.contains(r.delivery_ref.as_str())
        })
        .map(|r| (r.delivery_ref.clone(), at))
        .collect();
    let leased = rooms
        .into_iter()
        .filter(|(i, _)| rows[*i].settled.is_none())
        .filter(|(i, _)| created.contains(rows[*i].delivery_ref.as_str()))
        .map(|(i, room)| {
            let row = &rows[i];
            Leased {
                delivery: leased_record(row, at),
                endpoint_version: endpoint_version(versions, row.new),
                room,
            }
        })
        .collect();
    let settled = rows
        .iter()
        .filter(|r| r.settled.is_some() && created.contains(r.delivery_ref.as_str()))
        .map(|r| r.delivery_ref.to_string())
        .collect();
    EventsWritten {
        new,
        leased,
        left_due,
        created,
        settled,
    }
}

/// The record of a delivery created leased from `row`, planned at `at`,
/// as a claim would have read it back.
fn leased_record(row: &DeliveryRow, at: Timestamp) -> DeliveryRecord {
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
        next_attempt_at: Some(at),
        last_attempt_at: None,
        occurred_at: d.occurred_at,
        event_data: d.event_data.clone(),
        match_reasons: row.match_reasons.clone(),
        body_status: BodyStatus::Available,
        payload: crate::webhooks::payload::Payload::Absent,
        created_at: at,
        updated_at: at,
        version: 1,
        order: d.order.clone(),
        ordered: d.ordered,
        skipped_at: None,
        skip_reason: None,
        kept_success: None,
    }
}
