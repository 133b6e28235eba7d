//! Fan-out: an accepted event becomes one delivery per (endpoint,
//! dto_version) among the subscriptions it matches, with every matching
//! subscription listed as a match reason. Its data is converted to each
//! delivery's dto version here; fields are shaped per attempt.
//!
//! Events are fanned out in batches: one subscription read, one
//! endpoint-status read and one transaction per batch.

use domain::webhook::shaping::{convert, scope_holds};
use domain::webhook::{catalogue, DeliveryStatus, EndpointStatus};
use domain::Ref;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use store::{EventRecord, NewDelivery, Store, StoreError, SubscriptionRecord};

/// Fans out up to `limit` pending events; returns how many deliveries were created.
pub async fn fan_out_pending(store: &Store, limit: u32) -> Result<usize, StoreError> {
    let events = store.pending_events(limit).await?;
    if events.is_empty() {
        return Ok(0);
    }
    let environments: BTreeSet<&str> = events.iter().map(|e| e.environment_ref.as_str()).collect();
    let types: BTreeSet<&str> = events
        .iter()
        .map(|e| e.public_event_type.as_str())
        .collect();
    let environments: Vec<&str> = environments.into_iter().collect();
    let types: Vec<&str> = types.into_iter().collect();
    let mut subscriptions: HashMap<(String, String), Vec<SubscriptionRecord>> = HashMap::new();
    for (environment_ref, s) in store.subscriptions_for_types(&environments, &types).await? {
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
    let statuses = store.endpoint_versions(&endpoint_refs).await?;
    let batch: Vec<(Ref, Vec<NewDelivery>)> = events
        .iter()
        .map(|e| {
            let key = (e.environment_ref.to_string(), e.public_event_type.clone());
            let subs = subscriptions
                .get(&key)
                .map(Vec::as_slice)
                .unwrap_or_default();
            (e.event_ref.clone(), deliveries_for(e, subs, &statuses))
        })
        .collect();
    store.fan_out(&batch).await
}

fn deliveries_for(
    event: &EventRecord,
    subscriptions: &[SubscriptionRecord],
    statuses: &HashMap<String, (i64, EndpointStatus)>,
) -> Vec<NewDelivery> {
    let mut groups: BTreeMap<(String, u32), Vec<serde_json::Value>> = BTreeMap::new();
    for s in subscriptions {
        if scope_holds(
            &event.scope,
            event.environment_ref.as_str(),
            s.scope_type,
            &s.scope_ref,
        ) {
            groups
                .entry((s.endpoint_ref.to_string(), s.dto_version))
                .or_default()
                .push(serde_json::json!({
                    "kind": "subscription",
                    "public_event_type": s.public_event_type,
                    "scope_type": s.scope_type.as_str(),
                    "scope_ref": s.scope_ref,
                    "dto_version": s.dto_version,
                }));
        }
    }
    let newest = catalogue::find(&event.public_event_type)
        .and_then(|e| e.dto_versions.iter().copied().max())
        .unwrap_or(1);
    groups
        .into_iter()
        .map(|((endpoint_ref, dto_version), reasons)| {
            let status = statuses
                .get(&endpoint_ref)
                .map(|(_, s)| *s)
                .unwrap_or(EndpointStatus::Active);
            NewDelivery {
                environment_ref: event.environment_ref.clone(),
                endpoint_ref: Ref::from_trusted(endpoint_ref),
                event_ref: event.event_ref.clone(),
                public_event_type: event.public_event_type.clone(),
                dto_version,
                status: DeliveryStatus::initial(status),
                diagnostic: false,
                occurred_at: event.occurred_at,
                event_data: convert(&event.public_event_type, newest, dto_version, &event.data),
                match_reasons: serde_json::Value::Array(reasons),
                payload: String::new(),
            }
        })
        .collect()
}
