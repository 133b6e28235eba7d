//! Fan-out: an accepted event becomes one delivery per (endpoint,
//! dto_version) among the subscriptions it matches, with every matching
//! subscription listed as a match reason. Its data is converted to each
//! delivery's dto version here; fields are shaped per attempt.
//!
//! The matching rule is the domain's (`domain::webhook::fanout`); `plan`
//! adds the endpoints' statuses and each delivery's data, and
//! `plan_fan_out` reads what it needs for a whole batch with one statement,
//! inside the transaction that writes the deliveries (on PostgreSQL the
//! intake may read it just before: `plan_fan_out_apart`). Two
//! writers use it: the intake, which fans events out in the same
//! transaction that accepts them, and
//! `Dispatch::fan_out_pending` for events an older version left pending
//! (its embedded relay queued events before fanning them out).

use super::Dispatch;
use crate::db::codec::to_json;
use crate::db::tx::WriteTx;
use crate::dispatch::EventRecord;
use crate::packed;
use crate::webhooks::endpoints::EndpointVersions;
use crate::webhooks::subscriptions::{subscribed, subscribed_in, SubscriptionRow};
use crate::{NewDelivery, StoreError, SubscriptionRecord};
use domain::webhook::body::DeliveredBody;
use domain::webhook::event::EventOrder;
use domain::webhook::fanout::{self, Subscribed};
use domain::webhook::filter::Filter;
use domain::webhook::ordering::EndpointOrdering;
use domain::webhook::shaping::{convert, converts, scope_holds, shape_owned, GrantView, Scope};
use domain::webhook::{catalogue, DeliveryStatus, EndpointStatus};
use domain::{Ref, Timestamp};
use std::collections::{BTreeSet, HashMap, HashSet};

/// How an event's scope is stored (`events.scope`): only the fields that
/// name something. A field left out reads back empty (each of `Scope`'s
/// fields defaults), so most events, which concern no product, buyer or
/// business in particular, store `{}`.
fn stored_scope(scope: &Scope) -> String {
    let mut value = serde_json::to_value(scope).unwrap_or_default();
    if let serde_json::Value::Object(fields) = &mut value {
        fields.retain(|_, v| !(v.is_null() || v.as_array().is_some_and(Vec::is_empty)));
    }
    value.to_string()
}

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
    /// `data_json` as its event's copy stores it (`packed::pack`):
    /// packed once, by whoever accepts the event, before the write lane;
    /// `None` when it was not, and the write packs it then.
    pub data_packed: Option<String>,
    /// Its key and, once numbered, its sequence.
    pub order: Option<EventOrder>,
}

impl From<&EventRecord> for EventRow {
    fn from(e: &EventRecord) -> EventRow {
        EventRow {
            event_ref: e.event_ref.clone(),
            environment_ref: e.environment_ref.clone(),
            public_event_type: e.public_event_type.clone(),
            occurred_at: e.occurred_at,
            scope: e.scope.clone(),
            scope_json: stored_scope(&e.scope),
            data_json: e.data.as_str().to_owned(),
            data_packed: Some(packed::pack(e.data.as_str()).into_owned()),
            order: e.order.clone(),
        }
    }
}

impl EventRow {
    /// Its data in the shape of `to` (from the shape of `from`) as its
    /// event's copy stores it, when it was packed before (`data_packed`)
    /// and the two shapes are the same.
    pub fn packed_as(&self, from: u32, to: u32) -> Option<String> {
        let same = !converts(&self.public_event_type, from, to);
        self.data_packed.clone().filter(|_| same)
    }

    /// Its data in the shape of `to` (from the shape of `from`), as JSON
    /// text: the text itself unless the two shapes differ.
    pub fn data_as(&self, from: u32, to: u32) -> String {
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
            let (plan, _, _) = plan_fan_out(&mut tx, &events).await?;
            let created = store.dispatch().fan_out_in(&mut tx, &plan).await?;
            tx.commit().await?;
            Ok(created)
        })
        .await
    }
}

/// A batch's deliveries planned, with the endpoint versions read and the
/// endpoints whose url is already fixed.
pub(crate) type Planned = (Plan, EndpointVersions, HashSet<String>);

/// Reads the subscriptions `events` need, with their endpoints (one
/// statement for the whole batch), inside `tx`, the transaction that will
/// write their deliveries, and plans them. On SQLite this runs on the
/// write lane's connection: no statement waits for another thread.
pub(crate) async fn plan_fan_out(
    tx: &mut WriteTx,
    events: &[EventRow],
) -> Result<Planned, StoreError> {
    let (environments, types) = asked(events);
    let subscribed = subscribed_in(tx, &environments, &types).await?;
    Ok(plan_all(events, subscribed))
}

/// `plan_fan_out` read through the pool, before the write (PostgreSQL's
/// one-statement intake). A read committed transaction reads each
/// statement at its own snapshot, so this plans from what the same read
/// inside the write's transaction would have seen a moment later.
pub(crate) async fn plan_fan_out_apart(
    store: &crate::Store,
    events: &[EventRow],
) -> Result<Planned, StoreError> {
    let (environments, types) = asked(events);
    let subscribed = subscribed(store.pool(), store.backend(), &environments, &types).await?;
    Ok(plan_all(events, subscribed))
}

/// The environments and event types of a batch, each once.
fn asked(events: &[EventRow]) -> (Vec<&str>, Vec<&str>) {
    let environments: BTreeSet<&str> = events.iter().map(|e| e.environment_ref.as_str()).collect();
    let types: BTreeSet<&str> = events
        .iter()
        .map(|e| e.public_event_type.as_str())
        .collect();
    (
        environments.into_iter().collect(),
        types.into_iter().collect(),
    )
}

/// Plans each event of the batch among the subscriptions read for it.
fn plan_all(events: &[EventRow], read: Vec<SubscriptionRow>) -> Planned {
    let mut statuses = EndpointVersions::new();
    let mut url_fixed = HashSet::new();
    let mut ordered = HashSet::new();
    let mut limited = HashSet::new();
    let now = Timestamp::now();
    let mut subscriptions: HashMap<(String, String), Vec<Candidate>> = HashMap::new();
    for SubscriptionRow {
        environment_ref,
        subscription,
        endpoint,
    } in read
    {
        let mut granted = None;
        if let Some(e) = endpoint {
            granted = e.granted;
            let endpoint_ref = subscription.endpoint_ref.to_string();
            if e.url_fixed {
                url_fixed.insert(endpoint_ref.clone());
            }
            if e.ordering == EndpointOrdering::PerKey {
                ordered.insert(endpoint_ref.clone());
            }
            if e.protection.governs(now) {
                limited.insert(endpoint_ref.clone());
            }
            statuses.insert(endpoint_ref, (e.version, e.status));
        }
        let filter = subscription.filter.as_deref().map(parse_filter);
        subscriptions
            .entry((environment_ref, subscription.public_event_type.clone()))
            .or_default()
            .push(Candidate {
                subscription,
                filter,
                granted,
            });
    }
    let plan = events
        .iter()
        .map(|e| {
            let key = (e.environment_ref.to_string(), e.public_event_type.clone());
            let subs = subscriptions
                .get(&key)
                .map(Vec::as_slice)
                .unwrap_or_default();
            let endpoints = Endpoints {
                statuses: &statuses,
                ordered: &ordered,
                limited: &limited,
            };
            (e.event_ref.clone(), plan(e, subs, endpoints))
        })
        .collect();
    (plan, statuses, url_fixed)
}

/// The deliveries of `event` among `subscriptions` (those of its
/// environment and type), as `domain::webhook::fanout::plan` matches them;
/// `endpoints` tells each endpoint's version and status (a paused or
/// disabled endpoint's delivery is held). Each delivery carries the
/// event's data in its own dto version, and its key; on an endpoint of
/// `ordered` (`per_key`), a delivery of an event with a key is ordered.
fn plan(event: &EventRow, subscriptions: &[Candidate], endpoints: Endpoints) -> Vec<NewDelivery> {
    let Endpoints {
        statuses,
        ordered,
        limited,
    } = endpoints;
    let newest = catalogue::find(&event.public_event_type)
        .and_then(|e| e.dto_versions.iter().copied().max())
        .unwrap_or(1);
    // An operational event is never delivered to the endpoint it is about
    // (contract 13.4).
    let about = about_endpoint(event);
    let mut bodies = Bodies::new();
    let admitted: Vec<&Candidate> = subscriptions
        .iter()
        .filter(|c| about.as_deref() != Some(c.subscription.endpoint_ref.as_str()))
        .filter(|c| admits(event, newest, c, &mut bodies))
        .collect();
    let subscribed = admitted
        .into_iter()
        .map(|c| &c.subscription)
        .map(|s| Subscribed {
            endpoint_ref: &s.endpoint_ref,
            public_event_type: &s.public_event_type,
            scope_type: s.scope_type,
            scope_ref: &s.scope_ref,
            dto_version: s.dto_version,
        });
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
                event_copy: event.packed_as(newest, p.dto_version),
                match_reasons: if p
                    .only_environment(&event.public_event_type, event.environment_ref.as_str())
                {
                    serde_json::Value::Null
                } else {
                    p.match_reasons
                },
                payload: String::new(),
                ordered: event.order.is_some() && ordered.contains(p.endpoint_ref.as_str()),
                limited: limited.contains(p.endpoint_ref.as_str()),
                order: event.order.clone(),
            }
        })
        .collect()
}

/// What the plan knows of the batch's endpoints: version and status,
/// those that order per key, those whose limits govern them now.
#[derive(Clone, Copy)]
struct Endpoints<'a> {
    statuses: &'a EndpointVersions,
    ordered: &'a HashSet<String>,
    limited: &'a HashSet<String>,
}

/// The endpoint an operational event is about (`data.endpoint_ref`).
fn about_endpoint(event: &EventRow) -> Option<String> {
    if !catalogue::is_operational(&event.public_event_type) {
        return None;
    }
    let data: serde_json::Value = serde_json::from_str(&event.data_json).ok()?;
    data.get("endpoint_ref")?.as_str().map(str::to_owned)
}

/// A subscription as the plan weighs it: its filter parsed once per batch
/// (`None` when it has none), and what its endpoint's grant lets the
/// filter see.
struct Candidate {
    subscription: SubscriptionRecord,
    filter: Option<Option<Filter>>,
    granted: Option<GrantView>,
}

/// A stored filter, checked when it was made; one that no longer parses
/// (damaged at rest) admits nothing, rather than everything.
fn parse_filter(text: &str) -> Option<Filter> {
    let parsed = serde_json::from_str(text)
        .ok()
        .and_then(|v| Filter::parse(&v).ok());
    if parsed.is_none() {
        tracing::error!("a stored subscription filter does not parse; it matches nothing");
    }
    parsed
}

/// Whether `c` admits `event` (contract 13.3): no filter, or one that
/// holds on the body its endpoint would receive, in its dto version and
/// redacted by its grant. Its scope is checked first, so a body is built
/// only for a subscription that would match without its filter.
fn admits(event: &EventRow, newest: u32, c: &Candidate, bodies: &mut Bodies) -> bool {
    let Some(filter) = &c.filter else {
        return true;
    };
    let Some(filter) = filter else {
        return false;
    };
    let s = &c.subscription;
    if !scope_holds(
        &event.scope,
        event.environment_ref.as_str(),
        s.scope_type,
        &s.scope_ref,
    ) {
        return false;
    }
    let grant = c.granted.as_ref();
    let seen_as = (s.dto_version, grant.map(|g| g.data_classes.clone()));
    let body = bodies
        .entry(seen_as)
        .or_insert_with(|| filter_body(event, newest, s.dto_version, grant));
    filter.holds(body)
}

/// An event's bodies as filters see them, built once per dto version and
/// grant (its data classes), whatever the number of subscriptions.
type Bodies = HashMap<(u32, Option<Vec<domain::webhook::DataClass>>), serde_json::Value>;

/// The body a delivery of `event` in `dto_version` would carry, redacted by
/// `grant`, as a tree for a filter (contract 13.3).
pub fn filter_body(
    event: &EventRow,
    newest: u32,
    dto_version: u32,
    grant: Option<&GrantView>,
) -> serde_json::Value {
    let data = serde_json::from_str(&event.data_as(newest, dto_version))
        .unwrap_or(serde_json::Value::Null);
    let data = shape_owned(&event.public_event_type, dto_version, data, grant);
    let order = event.order.as_ref();
    let body = DeliveredBody::new(
        event.event_ref.as_str(),
        &event.public_event_type,
        dto_version,
        event.occurred_at,
        event.environment_ref.as_str(),
        &data,
    )
    .ordered(
        order.map(|o| o.key.as_str()),
        order.and_then(|o| o.sequence),
    );
    serde_json::to_value(&body).unwrap_or(serde_json::Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scope_stores_what_it_names_and_reads_back_the_same() {
        let scopes = [
            Scope::default(),
            Scope {
                product_refs: vec!["prd_N5xP3cV8bT1m".into()],
                buyer_ref: Some("buy_7Rk2Wd9Lq4Zs".into()),
                beneficiary_business_ref: Some("biz_B8nM1qW4eR7t".into()),
            },
            Scope {
                buyer_ref: Some("buy_7Rk2Wd9Lq4Zs".into()),
                ..Scope::default()
            },
        ];
        assert_eq!(stored_scope(&scopes[0]), "{}");
        assert_eq!(
            stored_scope(&scopes[2]),
            r#"{"buyer_ref":"buy_7Rk2Wd9Lq4Zs"}"#
        );
        for scope in scopes {
            let read: Scope = serde_json::from_str(&stored_scope(&scope)).unwrap();
            assert_eq!(read, scope);
        }
    }
}
