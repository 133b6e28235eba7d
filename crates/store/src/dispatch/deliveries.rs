//! The embedded queue's events and their fan-out into deliveries: the
//! rows a delivery is born as (`DeliveryRow`), written once per (event,
//! endpoint, dto version).

use super::*;
use crate::db::codec::{json_col, to_json};
use crate::db::marks::Marks;
use crate::db::read;
use crate::db::tx::{int, text, Arg, Columns, WriteTx};
use crate::packed;
use crate::webhooks::deliveries::{mark_url_immutable, NewDelivery};
use crate::{Backend, StoreError};
use domain::webhook::event::EventOrder;
use domain::webhook::ordering::OrderingKey;
use domain::webhook::{DeliveryStatus, ResponseClass};
use domain::{Prefix, Ref, Timestamp};
use std::borrow::Cow;

/// An event from a row of `events` or `outbox` (the same columns).
pub(crate) fn event_from_row(row: &dyn Columns) -> Result<EventRecord, StoreError> {
    Ok(EventRecord {
        event_ref: Ref::from_trusted(text(row, "event_ref")?),
        environment_ref: Ref::from_trusted(text(row, "environment_ref")?),
        public_event_type: text(row, "public_event_type")?,
        occurred_at: Timestamp::from_millis(int(row, "occurred_at")?),
        scope: json_col(row, "scope")?,
        data: EventData::parse(text(row, "data")?).map_err(StoreError::Corrupt)?,
        order: order_from_row(row)?,
    })
}

/// An event's or a delivery's key and sequence, from its `ordering_key`
/// and `sequence` columns.
pub(crate) fn order_from_row(row: &dyn Columns) -> Result<Option<EventOrder>, StoreError> {
    let Some(key) = row.text("ordering_key")? else {
        return Ok(None);
    };
    let key = OrderingKey::parse(&key)
        .map_err(|e| StoreError::Corrupt(format!("ordering key {key:?}: {e}")))?;
    Ok(Some(EventOrder {
        key,
        sequence: row.int("sequence")?,
    }))
}

impl Dispatch<'_> {
    /// The oldest events not fanned out yet.
    pub async fn pending_events(&self, limit: u32) -> Result<Vec<EventRecord>, StoreError> {
        read::all(
            self.pool(),
            &format!(
                "SELECT * FROM events WHERE status = 'pending' ORDER BY received_at, event_ref LIMIT {limit}"
            ),
            &[],
            |row| event_from_row(row),
        )
        .await
    }

    /// Records events' deliveries and marks the events processed (which
    /// drops their data: the deliveries carry it), inside `tx`
    /// (`fan_out_pending`). A delivery that exists already (same event,
    /// endpoint and dto version) is left as it is, so fanning out twice is
    /// harmless.
    pub(crate) async fn fan_out_in(
        &self,
        tx: &mut WriteTx,
        events: &[(Ref, Vec<NewDelivery>)],
    ) -> Result<usize, StoreError> {
        let now = Timestamp::now().millis();
        let rows: Vec<DeliveryRow> = events
            .iter()
            .flat_map(|(_, d)| d.iter().map(DeliveryRow::unleased))
            .collect();
        // The events' rows exist already (the embedded queue's): their
        // copies are kept apart.
        let copies = shared_event_data(&rows);
        let rows: Vec<&DeliveryRow> = rows.iter().collect();
        let created = insert_deliveries(
            tx,
            self.backend(),
            &rows,
            &copies,
            (now, now),
            &Default::default(),
        )
        .await?
        .len();
        for chunk in events.chunks(DELIVERY_ROWS * 10) {
            let mut marks = Marks::new(self.backend());
            let sql = format!(
                "UPDATE events SET status = 'processed', processed_at = {}, data = NULL \
                 WHERE event_ref IN ({})",
                marks.next(),
                marks.list(chunk.len())
            );
            let mut args: Vec<Arg> = vec![now.into()];
            args.extend(chunk.iter().map(|(r, _)| Arg::from(r.as_str())));
            tx.execute(&sql, &args).await?;
        }
        Ok(created)
    }
}

/// A delivery to insert: its reference (chosen by the caller, which may
/// build its record) and the lease it is born with, if any (owner, until).
/// Its JSON columns are serialised when the row is built, before the
/// write transaction begins.
///
/// A settled row (`settled`: its first attempt, made before the write,
/// succeeded) is born in the state that attempt's record would have left
/// it in (`attempts::next_state`): settled, its success kept on it, no
/// lease.
pub(crate) struct DeliveryRow<'a> {
    pub new: &'a NewDelivery,
    pub delivery_ref: Ref,
    pub lease: Option<(&'a str, i64)>,
    pub match_reasons: String,
    pub settled: Option<&'a AttemptResult>,
}

/// Where a column of a new delivery comes from.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Source {
    /// The next of `DeliveryRow::values`, of this SQL type (PostgreSQL
    /// types a `VALUES` column by its cast).
    Bound(&'static str),
    /// This SQL literal, the same for every new delivery.
    Fixed(&'static str),
}

/// The columns a new delivery is written with, in order: the one layout
/// that `insert_deliveries` and the intake's one statement both write.
pub(crate) const NEW_DELIVERY: [(&str, Source); 28] = [
    ("delivery_ref", Source::Bound("TEXT")),
    ("environment_ref", Source::Bound("TEXT")),
    ("endpoint_ref", Source::Bound("TEXT")),
    ("event_ref", Source::Bound("TEXT")),
    ("public_event_type", Source::Bound("TEXT")),
    ("dto_version", Source::Bound("BIGINT")),
    ("status", Source::Bound("TEXT")),
    ("diagnostic", Source::Bound("BIGINT")),
    ("next_attempt_at", Source::Bound("BIGINT")),
    ("occurred_at", Source::Bound("BIGINT")),
    ("generation", Source::Fixed("1")),
    ("attempt_count", Source::Bound("BIGINT")),
    ("last_attempt_at", Source::Bound("BIGINT")),
    // `SHARED_EVENT_DATA`: the event's copy in `webhook_event_data` (a unit
    // test holds them equal).
    ("event_data", Source::Fixed("''")),
    ("match_reasons", Source::Bound("TEXT")),
    // `BodyStatus::Available` (a unit test holds them equal).
    ("body_status", Source::Fixed("'available'")),
    ("payload", Source::Bound("TEXT")),
    ("last_response_class", Source::Bound("TEXT")),
    ("success_status", Source::Bound("BIGINT")),
    ("success_duration_ms", Source::Bound("BIGINT")),
    ("success_excerpt", Source::Bound("TEXT")),
    ("created_at", Source::Bound("BIGINT")),
    ("updated_at", Source::Bound("BIGINT")),
    ("lease_owner", Source::Bound("TEXT")),
    ("lease_until", Source::Bound("BIGINT")),
    ("ordering_key", Source::Bound("TEXT")),
    ("sequence", Source::Bound("BIGINT")),
    ("ordered_key", Source::Bound("TEXT")),
];

/// Values bound per new delivery: the `Bound` columns of `NEW_DELIVERY`.
pub(crate) const DELIVERY_VALUES: usize = 25;

/// A delivery's `event_data` when its event's data in its dto version is
/// the one copy in `webhook_event_data` (written with the delivery, by
/// `insert_event_data` or the intake's one statement), rather than its own.
pub const SHARED_EVENT_DATA: &str = "";

/// A `webhook_deliveries` row's event data as an SQL expression: its own
/// copy, or its event's (`SHARED_EVENT_DATA`: on the event's row, or in
/// `webhook_event_data`, migration 0037), for a read that needs the data
/// of rows it selects. The event's copy is stored packed: a reader
/// passes what this selects through `packed::unpack`, which leaves a
/// delivery's own copy as it is.
pub const EVENT_DATA_OF_ROW: &str = "CASE WHEN webhook_deliveries.event_data = '' \
     THEN COALESCE((SELECT e.copy_data FROM events e \
     WHERE e.event_ref = webhook_deliveries.event_ref \
     AND e.copy_dto_version = webhook_deliveries.dto_version), \
     (SELECT c.data FROM webhook_event_data c \
     WHERE c.event_ref = webhook_deliveries.event_ref \
     AND c.dto_version = webhook_deliveries.dto_version)) \
     ELSE webhook_deliveries.event_data END";

/// One copy of an event's data as stored (`packed::pack`, unless
/// packed before): `(event_ref, dto_version, data)`.
pub(crate) type EventCopy<'r> = (&'r str, i64, Cow<'r, str>);

/// The copies of event data a write's deliveries share, by where they are
/// kept (migration 0037): on the event's own row, when the write inserts
/// it (one per event: its lowest dto version), and in
/// `webhook_event_data` (`apart`).
pub(crate) struct EventCopies<'r> {
    pub on_event: std::collections::HashMap<&'r str, (i64, Cow<'r, str>)>,
    pub apart: Vec<EventCopy<'r>>,
}

impl<'r> EventCopies<'r> {
    /// For a write that inserts the rows' events with them: each event's
    /// lowest dto version on its row, any other apart.
    pub(crate) fn with_events(rows: &[DeliveryRow<'r>]) -> EventCopies<'r> {
        let mut copies = EventCopies {
            on_event: Default::default(),
            apart: Vec::new(),
        };
        // In order of event, then dto version: an event's first is its lowest.
        for (event_ref, version, data) in shared_event_data(rows) {
            if copies.on_event.contains_key(event_ref) {
                copies.apart.push((event_ref, version, data));
            } else {
                copies.on_event.insert(event_ref, (version, data));
            }
        }
        copies
    }

    /// The copy the event's row keeps, if any.
    pub(crate) fn of_event(&self, event_ref: &str) -> Option<(i64, &str)> {
        self.on_event
            .get(event_ref)
            .map(|(version, data)| (*version, data.as_ref()))
    }
}

/// The event data that `rows` share, once per event and dto version, in
/// order of event, then dto version: all of it apart, for a write whose
/// events exist already.
fn shared_event_data<'a>(rows: &[DeliveryRow<'a>]) -> Vec<EventCopy<'a>> {
    let once: std::collections::BTreeMap<(&str, i64), &NewDelivery> = rows
        .iter()
        .map(|r| ((r.new.event_ref.as_str(), r.new.dto_version as i64), r.new))
        .collect();
    once.into_iter()
        .map(|((e, v), d)| {
            let stored = match &d.event_copy {
                Some(copy) => Cow::Borrowed(copy.as_str()),
                None => packed::pack(&d.event_data),
            };
            (e, v, stored)
        })
        .collect()
}

/// `VALUES` rows of `n` copies of event data, cast for PostgreSQL.
pub(crate) fn event_data_values(marks: &mut Marks, n: usize) -> String {
    let rows: Vec<String> = (0..n)
        .map(|_| {
            let [e, v, d] = std::array::from_fn(|_| marks.next());
            format!("(CAST({e} AS TEXT), CAST({v} AS BIGINT), CAST({d} AS TEXT))")
        })
        .collect();
    rows.join(", ")
}

/// The conflict clause of an insert into `webhook_event_data`: an event
/// fanned out again (a crash between its deliveries' chunks, a retried
/// intake) finds its copy there already.
pub(crate) const EVENT_DATA_CONFLICT: &str = "ON CONFLICT (event_ref, dto_version) DO NOTHING";

/// Writes `copies` of event data into `webhook_event_data` inside `tx`.
async fn insert_event_data(
    tx: &mut WriteTx,
    backend: Backend,
    copies: &[EventCopy<'_>],
) -> Result<(), StoreError> {
    for chunk in copies.chunks(DELIVERY_ROWS) {
        let mut marks = Marks::new(backend);
        let sql = format!(
            "INSERT INTO webhook_event_data (event_ref, dto_version, data) VALUES {} {EVENT_DATA_CONFLICT}",
            event_data_values(&mut marks, chunk.len())
        );
        let mut args: Vec<Arg> = Vec::with_capacity(chunk.len() * 3);
        for (event_ref, version, data) in chunk {
            args.push((*event_ref).into());
            args.push((*version).into());
            args.push(data.as_ref().into());
        }
        tx.execute(&sql, &args).await?;
    }
    Ok(())
}

/// The names of `NEW_DELIVERY`'s columns, joined for an `INSERT`.
pub(crate) fn delivery_columns() -> String {
    let names: Vec<&str> = NEW_DELIVERY.iter().map(|(name, _)| *name).collect();
    names.join(", ")
}

impl<'a> DeliveryRow<'a> {
    pub(crate) fn unleased(new: &'a NewDelivery) -> DeliveryRow<'a> {
        DeliveryRow {
            new,
            delivery_ref: Ref::generate(Prefix::WebhookDelivery),
            lease: None,
            match_reasons: to_json(&new.match_reasons),
            settled: None,
        }
    }

    /// The values the row binds, created at `at` and written at `now` (a
    /// pending delivery is due then, unless it is ordered: it waits for
    /// its key's release, `ordering::release`; a settled one is due
    /// never): one per `Bound` column of `NEW_DELIVERY`, in its order.
    pub(crate) fn values(&self, (at, now): (i64, i64)) -> [Arg<'_>; DELIVERY_VALUES] {
        let d = self.new;
        let s = self.settled;
        let status = s.map_or(d.status, |r| r.delivery_status);
        let due = (status == DeliveryStatus::Pending && !d.ordered).then_some(now);
        let order = d.order.as_ref();
        [
            self.delivery_ref.as_str().into(),
            d.environment_ref.as_str().into(),
            d.endpoint_ref.as_str().into(),
            d.event_ref.as_str().into(),
            d.public_event_type.as_str().into(),
            (d.dto_version as i64).into(),
            status.as_str().into(),
            (d.diagnostic as i64).into(),
            due.into(),
            d.occurred_at.millis().into(),
            s.map_or(0, |r| r.attempt_number as i64).into(),
            s.map(|r| r.started_at.millis()).into(),
            self.match_reasons.as_str().into(),
            s.and_then(|r| r.payload.stored()).into(),
            s.map(|r| ResponseClass::of(r.response_status).as_str())
                .into(),
            s.and_then(|r| r.response_status).map(i64::from).into(),
            s.map(|r| r.duration_ms).into(),
            s.and_then(|r| r.response_body_excerpt.as_deref()).into(),
            at.into(),
            now.into(),
            self.lease.map(|(owner, _)| owner).into(),
            self.lease.map(|(_, until)| until).into(),
            order.map(|o| o.key.as_str()).into(),
            order.and_then(|o| o.sequence).into(),
            order.filter(|_| d.ordered).map(|o| o.key.as_str()).into(),
        ]
    }
}

/// Inserts deliveries (one per event, endpoint and dto version: an
/// existing one is left as it is) with the copies of their events' data
/// that are kept apart (`copies`; the caller writes those on event rows,
/// `EventCopies::on_event`), and marks their endpoints' URLs immutable,
/// inside `tx`, unless `tx` read them fixed already (`url_fixed`); returns
/// the references of those created. They are created at `at`, and
/// pending ones are due at `now` (`DeliveryRow::values`).
pub(crate) async fn insert_deliveries(
    tx: &mut WriteTx,
    backend: Backend,
    rows: &[&DeliveryRow<'_>],
    copies: &[EventCopy<'_>],
    (at, now): (i64, i64),
    url_fixed: &std::collections::HashSet<String>,
) -> Result<std::collections::HashSet<String>, StoreError> {
    let mut created = std::collections::HashSet::new();
    let mut endpoints = std::collections::HashSet::new();
    insert_event_data(tx, backend, copies).await?;
    // One statement per chunk of deliveries, never one per delivery: each
    // statement is a round trip to the database.
    for chunk in rows.chunks(DELIVERY_ROWS) {
        let mut marks = Marks::new(backend);
        let values: Vec<String> = (0..chunk.len())
            .map(|_| {
                let row: Vec<String> = NEW_DELIVERY
                    .iter()
                    .map(|(_, source)| match source {
                        Source::Bound(_) => marks.next(),
                        Source::Fixed(literal) => (*literal).to_owned(),
                    })
                    .collect();
                format!("({})", row.join(", "))
            })
            .collect();
        let sql = format!(
            "INSERT INTO webhook_deliveries ({}) VALUES {} \
             ON CONFLICT (event_ref, endpoint_ref, dto_version) DO NOTHING \
             RETURNING delivery_ref, endpoint_ref",
            delivery_columns(),
            values.join(", ")
        );
        let mut args: Vec<Arg> = Vec::with_capacity(chunk.len() * DELIVERY_VALUES);
        for row in chunk {
            args.extend(row.values((at, now)));
        }
        for r in tx.fetch(&sql, &args).await? {
            created.insert(text(&r, "delivery_ref")?);
            endpoints.insert(text(&r, "endpoint_ref")?);
        }
    }
    let endpoints: Vec<&str> = endpoints
        .iter()
        .filter(|e| !url_fixed.contains(*e))
        .map(String::as_str)
        .collect();
    mark_url_immutable(tx, backend, &endpoints, now).await?;
    Ok(created)
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::webhook::BodyStatus;

    /// The layout's literals and counts agree with the types they stand for.
    #[test]
    fn the_new_delivery_layout_matches_its_values() {
        let bound = NEW_DELIVERY
            .iter()
            .filter(|(_, s)| matches!(s, Source::Bound(_)))
            .count();
        assert_eq!(bound, DELIVERY_VALUES);
        let body = NEW_DELIVERY
            .iter()
            .find(|(name, _)| *name == "body_status")
            .map(|(_, s)| *s);
        let available = format!("'{}'", BodyStatus::Available.as_str());
        assert!(matches!(body, Some(Source::Fixed(l)) if l == available));
        // The sentinel of a shared copy is spelled once in Rust and twice
        // in SQL: the new row's literal and the read's test of it.
        let shared = format!("'{SHARED_EVENT_DATA}'");
        let data = NEW_DELIVERY
            .iter()
            .find(|(name, _)| *name == "event_data")
            .map(|(_, s)| *s);
        assert!(matches!(data, Some(Source::Fixed(l)) if l == shared));
        assert!(
            EVENT_DATA_OF_ROW.contains(&format!("event_data = {shared}")),
            "{EVENT_DATA_OF_ROW}"
        );
    }
}
