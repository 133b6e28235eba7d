//! Fan-out: an accepted event becomes one delivery per (endpoint,
//! dto_version) among the subscriptions it matches, with every matching
//! subscription listed as a match reason. Its data is converted to each
//! delivery's dto version here; fields are shaped per attempt.
//!
//! The matching rule is the domain's (`domain::webhook::fanout`); `plan`
//! adds the endpoints' statuses and each delivery's data, and
//! `plan_fan_out` does the two reads it needs for a whole batch, inside the
//! transaction that writes the deliveries. Two
//! writers use it: the intake, which fans events out in the same
//! transaction that accepts them, and
//! `Dispatch::fan_out_pending` for events an older version left pending
//! (its embedded relay queued events before fanning them out).

use super::Dispatch;
use crate::db::codec::to_json;
use crate::db::tx::WriteTx;
use crate::dispatch::EventRecord;
use crate::webhooks::endpoints::{endpoint_versions_in, EndpointVersions};
use crate::webhooks::subscriptions::subscriptions_for_types;
use crate::{Backend, NewDelivery, StoreError, SubscriptionRecord};
use domain::webhook::fanout::{self, Subscribed};
use domain::webhook::shaping::{convert, converts, Scope};
use domain::webhook::{catalogue, DeliveryStatus, EndpointStatus};
use domain::{Ref, Timestamp};
use std::collections::{BTreeSet, HashMap, HashSet};

/// The deliveries of each event, in the order of the events given.
pub type Plan = Vec<(Ref, Vec<NewDelivery>)>;

/// An event as the fan-out reads it: its JSON columns as text, serialised
/// once (by whoever accepts it, before the write lane: `From<&EventRecord>`)
/// or read as stored, so that its data is neither parsed nor copied as a
/// tree for each delivery.
pub struct EventRow {
    pub event_ref: Ref,
    pub environment_ref: Ref,
    pub public_event_type: String,
    pub occurred_at: Timestamp,
    pub scope: Scope,
    pub scope_json: String,
    pub data_json: String,
}

impl From<&EventRecord> for EventRow {
    fn from(e: &EventRecord) -> EventRow {
        EventRow {
            event_ref: e.event_ref.clone(),
            environment_ref: e.environment_ref.clone(),
            public_event_type: e.public_event_type.clone(),
            occurred_at: e.occurred_at,
            scope: e.scope.clone(),
            scope_json: to_json(&e.scope),
            data_json: e.data.as_str().to_owned(),
        }
    }
}

impl EventRow {
    /// Its data in the shape of `to` (from the shape of `from`), as JSON
    /// text: the text itself unless the two shapes differ.
    fn data_as(&self, from: u32, to: u32) -> String {
        if !converts(&self.public_event_type, from, to) {
            return self.data_json.clone();
        }
        match serde_json::from_str(&self.data_json) {
            Ok(data) => to_json(&convert(&self.public_event_type, from, to, &data)),
            // Kept as it is: the attempt reports data it cannot read.
            Err(_) => self.data_json.clone(),
        }
    }
}

impl Dispatch<'_> {
    /// Fans out up to `limit` pending events; returns how many deliveries
    /// were created.
    pub async fn fan_out_pending(&self, limit: u32) -> Result<usize, StoreError> {
        let events: Vec<EventRow> = self
            .pending_events(limit)
            .await?
            .iter()
            .map(EventRow::from)
            .collect();
        if events.is_empty() {
            return Ok(0);
        }
        let store = self.0.clone();
        self.on_lane(async move {
            let mut tx = store.begin_write().await?;
            let (plan, _, _) = plan_fan_out(&mut tx, store.backend(), &events).await?;
            let created = store.dispatch().fan_out_in(&mut tx, &plan).await?;
            tx.commit().await?;
            Ok(created)
        })
        .await
    }
}

/// Reads the subscriptions and endpoint statuses `events` need (one query
/// each for the whole batch) inside `tx`, the transaction that will write
/// their deliveries, and plans them; also returns the endpoint versions
/// read and the endpoints whose url is already fixed. On SQLite this runs on the write lane's connection: no statement
/// waits for another thread.
pub(crate) async fn plan_fan_out(
    tx: &mut WriteTx,
    backend: Backend,
    events: &[EventRow],
) -> Result<(Plan, EndpointVersions, HashSet<String>), StoreError> {
    let environments: BTreeSet<&str> = events.iter().map(|e| e.environment_ref.as_str()).collect();
    let types: BTreeSet<&str> = events
        .iter()
        .map(|e| e.public_event_type.as_str())
        .collect();
    let environments: Vec<&str> = environments.into_iter().collect();
    let types: Vec<&str> = types.into_iter().collect();
    let mut subscriptions: HashMap<(String, String), Vec<SubscriptionRecord>> = HashMap::new();
    for (environment_ref, s) in subscriptions_for_types(tx, backend, &environments, &types).await? {
        subscriptions
            .entry((environment_ref, s.public_event_type.clone()))
            .or_default()
            .push(s);
    }
    let endpoint_refs: Vec<&Ref> = subscriptions
        .values()
        .flatten()
        .map(|s| &s.endpoint_ref)
        .collect();
    let (statuses, url_fixed) = endpoint_versions_in(tx, &endpoint_refs).await?;
    let plan = events
        .iter()
        .map(|e| {
            let key = (e.environment_ref.to_string(), e.public_event_type.clone());
            let subs = subscriptions
                .get(&key)
                .map(Vec::as_slice)
                .unwrap_or_default();
            (e.event_ref.clone(), plan(e, subs, &statuses))
        })
        .collect();
    Ok((plan, statuses, url_fixed))
}

/// The deliveries of `event` among `subscriptions` (those of its
/// environment and type), as `domain::webhook::fanout::plan` matches them;
/// `statuses` maps endpoint references to their version and status (a
/// paused or disabled endpoint's delivery is held). Each delivery carries
/// the event's data in its own dto version.
fn plan(
    event: &EventRow,
    subscriptions: &[SubscriptionRecord],
    statuses: &EndpointVersions,
) -> Vec<NewDelivery> {
    let subscribed = subscriptions.iter().map(|s| Subscribed {
        endpoint_ref: &s.endpoint_ref,
        public_event_type: &s.public_event_type,
        scope_type: s.scope_type,
        scope_ref: &s.scope_ref,
        dto_version: s.dto_version,
    });
    let newest = catalogue::find(&event.public_event_type)
        .and_then(|e| e.dto_versions.iter().copied().max())
        .unwrap_or(1);
    fanout::plan(&event.scope, event.environment_ref.as_str(), subscribed)
        .into_iter()
        .map(|p| {
            let status = statuses
                .get(p.endpoint_ref.as_str())
                .map(|(_, s)| *s)
                .unwrap_or(EndpointStatus::Active);
            NewDelivery {
                environment_ref: event.environment_ref.clone(),
                endpoint_ref: p.endpoint_ref.clone(),
                event_ref: event.event_ref.clone(),
                public_event_type: event.public_event_type.clone(),
                dto_version: p.dto_version,
                status: DeliveryStatus::initial(status),
                diagnostic: false,
                occurred_at: event.occurred_at,
                event_data: event.data_as(newest, p.dto_version),
                match_reasons: p.match_reasons,
                payload: String::new(),
            }
        })
        .collect()
}
