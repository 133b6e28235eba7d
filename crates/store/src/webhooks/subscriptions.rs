//! Subscriptions: which event types, in which scope and payload version,
//! an endpoint receives.

use super::Webhooks;
use crate::db::codec::{json_col, state, to_json};
use crate::db::tx::{int, text, Arg, Columns, WriteTx};
use crate::dispatch::fanout::EventRow;
use crate::resource::{Resource, Scope};
use crate::{Backend, StoreError};
use domain::webhook::ordering::EndpointOrdering;
use domain::webhook::shaping::GrantView;
use domain::webhook::{DataClass, EndpointStatus, ScopeType};
use domain::{Ref, Timestamp};

#[derive(Debug, Clone)]
pub struct SubscriptionRecord {
    pub endpoint_ref: Ref,
    pub public_event_type: String,
    pub scope_type: ScopeType,
    pub scope_ref: String,
    pub dto_version: u32,
    pub custom_field_refs: Vec<String>,
    /// Its filter (contract 13.3) as JSON text, checked when it was made.
    pub filter: Option<String>,
    pub created_at: Timestamp,
}

#[derive(Debug, Clone)]
pub struct NewSubscription<'a> {
    pub public_event_type: &'a str,
    pub scope_type: ScopeType,
    pub scope_ref: &'a str,
    pub dto_version: u32,
    pub custom_field_refs: &'a [String],
    /// A filter already parsed by `domain::webhook::filter`, as JSON text.
    pub filter: Option<&'a str>,
}

fn from_row(row: &dyn Columns) -> Result<SubscriptionRecord, StoreError> {
    Ok(SubscriptionRecord {
        endpoint_ref: Ref::from_trusted(text(row, "endpoint_ref")?),
        public_event_type: text(row, "public_event_type")?,
        scope_type: state(row, "scope_type", ScopeType::parse)?,
        scope_ref: text(row, "scope_ref")?,
        dto_version: int(row, "dto_version")? as u32,
        custom_field_refs: json_col(row, "custom_field_refs")?,
        filter: row.text("filter")?,
        created_at: Timestamp::from_millis(int(row, "created_at")?),
    })
}

impl Resource for SubscriptionRecord {
    const TABLE: &'static str = "webhook_subscriptions";
    const REF_COLUMN: &'static str = "subscription_id";
    const PARENT_COLUMN: Option<&'static str> = Some("endpoint_ref");

    fn decode(row: &dyn Columns) -> Result<Self, StoreError> {
        from_row(row)
    }
}

/// A subscription as the fan-out reads it: its environment, the record,
/// and its endpoint as it stands (`None` when the endpoint is gone).
pub(crate) struct SubscriptionRow {
    pub environment_ref: String,
    pub subscription: SubscriptionRecord,
    pub endpoint: Option<EndpointNow>,
}

/// What the fan-out needs of a subscription's endpoint.
pub(crate) struct EndpointNow {
    pub version: i64,
    pub status: EndpointStatus,
    /// Its url is fixed already (`url_immutable` never goes back).
    pub url_fixed: bool,
    pub ordering: EndpointOrdering,
    /// Its limits and back-pressure (contract 13.2).
    pub protection: domain::webhook::limits::Protection,
    /// For a subscription with a filter: the data classes of the
    /// endpoint's active grant, which its filter may see (contract 13.3).
    pub granted: Option<GrantView>,
}

/// The statement and its values that read the subscriptions to any of
/// `types` in any of `environments`, each with its endpoint, in one read:
/// a fan-out batch asks for all its (environment, type) pairs at once and
/// picks them out of the result. `None` when there is nothing to ask.
fn subscribed_query<'a>(
    backend: Backend,
    environments: &[&'a str],
    types: &[&'a str],
) -> Option<(String, Vec<Arg<'a>>)> {
    if environments.is_empty() || types.is_empty() {
        return None;
    }
    let mut marks = crate::db::marks::Marks::new(backend);
    let sql = format!(
        "SELECT s.*, e.version AS endpoint_version, e.status AS endpoint_status, \
         e.url_immutable AS endpoint_url_immutable, e.ordering AS endpoint_ordering, \
         e.rate_limit, e.max_in_flight, e.pressure_base, e.pressure_rate, e.pressure_at, \
         e.throttled_until, \
         CASE WHEN s.filter IS NULL THEN NULL ELSE (SELECT g.data_classes \
         FROM webhook_data_profile_grants g WHERE g.endpoint_ref = s.endpoint_ref \
         AND g.status = 'active') END AS granted_classes \
         FROM webhook_subscriptions s LEFT JOIN webhook_endpoints e \
         ON e.endpoint_ref = s.endpoint_ref \
         WHERE s.environment_ref IN ({}) AND s.public_event_type IN ({}) \
         ORDER BY s.endpoint_ref, s.created_at",
        marks.list(environments.len()),
        marks.list(types.len())
    );
    let args = environments
        .iter()
        .chain(types)
        .map(|v| (*v).into())
        .collect();
    Some((sql, args))
}

/// The grant a filter sees: its data classes. Its custom fields are not
/// resolved here, so a filter never sees a custom field's value (it may
/// see fewer fields than the endpoint receives, never more).
fn granted(row: &dyn Columns) -> Result<Option<GrantView>, StoreError> {
    let Some(classes) = row.text("granted_classes")? else {
        return Ok(None);
    };
    let classes: Vec<String> = serde_json::from_str(&classes)
        .map_err(|e| StoreError::Corrupt(format!("a grant's data classes: {e}")))?;
    Ok(Some(GrantView {
        data_classes: classes.iter().filter_map(|c| DataClass::parse(c)).collect(),
        custom_field_refs: Vec::new(),
        custom_fields: Vec::new(),
    }))
}

fn subscribed_row(row: &dyn Columns) -> Result<SubscriptionRow, StoreError> {
    let endpoint = match row.int("endpoint_version")? {
        Some(version) => Some(EndpointNow {
            version,
            status: state(row, "endpoint_status", EndpointStatus::parse)?,
            url_fixed: int(row, "endpoint_url_immutable")? != 0,
            ordering: state(row, "endpoint_ordering", EndpointOrdering::parse)?,
            protection: crate::webhooks::endpoints::protection_from_row(row)?,
            granted: granted(row)?,
        }),
        None => None,
    };
    Ok(SubscriptionRow {
        environment_ref: text(row, "environment_ref")?,
        subscription: from_row(row)?,
        endpoint,
    })
}

/// The subscriptions to any of `types` in any of `environments`, with
/// their endpoints, read inside `tx`: the transaction that writes their
/// deliveries (on SQLite, the write lane's, whose statements wait on no
/// other thread).
pub(crate) async fn subscribed_in(
    tx: &mut WriteTx,
    environments: &[&str],
    types: &[&str],
) -> Result<Vec<SubscriptionRow>, StoreError> {
    let Some((sql, args)) = subscribed_query(tx.backend(), environments, types) else {
        return Ok(Vec::new());
    };
    tx.fetch(&sql, &args)
        .await?
        .iter()
        .map(|row| subscribed_row(row))
        .collect()
}

/// `subscribed_in`, read on its own through `pool` (PostgreSQL's intake
/// reads before its one-statement write: `crate::dispatch::intake`).
pub(crate) async fn subscribed(
    pool: &sqlx::AnyPool,
    backend: Backend,
    environments: &[&str],
    types: &[&str],
) -> Result<Vec<SubscriptionRow>, StoreError> {
    let Some((sql, args)) = subscribed_query(backend, environments, types) else {
        return Ok(Vec::new());
    };
    crate::db::read::all(pool, &sql, &args, subscribed_row).await
}

/// Subscribes an endpoint; `Duplicate` when it already has this type and
/// scope (the transaction stays usable).
pub async fn create(
    tx: &mut WriteTx,
    environment_ref: &Ref,
    endpoint_ref: &Ref,
    new: NewSubscription<'_>,
) -> Result<SubscriptionRecord, StoreError> {
    let subscription_id = Ref::generate(domain::Prefix::WebhookEndpoint)
        .as_str()
        .replacen("whep_", "whsub_", 1);
    let custom_field_refs = to_json(&new.custom_field_refs);
    let rows = tx
        .fetch(
            "INSERT INTO webhook_subscriptions (subscription_id, endpoint_ref, environment_ref, \
             public_event_type, scope_type, scope_ref, dto_version, custom_field_refs, created_at, \
             filter) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT DO NOTHING \
             RETURNING *",
            &[
                (&subscription_id).into(),
                endpoint_ref.as_str().into(),
                environment_ref.as_str().into(),
                new.public_event_type.into(),
                new.scope_type.as_str().into(),
                new.scope_ref.into(),
                i64::from(new.dto_version).into(),
                (&custom_field_refs).into(),
                Timestamp::now().millis().into(),
                new.filter.into(),
            ],
        )
        .await?;
    match rows.first() {
        Some(row) => from_row(row),
        None => Err(StoreError::Duplicate),
    }
}

impl Webhooks<'_> {
    /// The endpoint's subscriptions, newest first (not paged).
    pub async fn list_subscriptions(
        &self,
        environment_ref: &Ref,
        endpoint_ref: &Ref,
    ) -> Result<Vec<SubscriptionRecord>, StoreError> {
        self.0
            .list_all(Scope::under(environment_ref, endpoint_ref), &[])
            .await
    }
}

impl Webhooks<'_> {
    /// Up to `limit` of the environment's newest kept events of
    /// `event_type` whose data a delivery still holds, newest first, each
    /// with the dto version of that data (a filter preview's sample,
    /// contract 13.3). Walks the events by acceptance time, newest first,
    /// and stops at `limit`.
    pub async fn kept_events(
        &self,
        environment_ref: &Ref,
        event_type: &str,
        limit: u32,
    ) -> Result<Vec<(EventRow, u32)>, StoreError> {
        let events = crate::db::read::all(
            self.pool(),
            &format!(
                "SELECT event_ref, environment_ref, public_event_type, occurred_at, scope, \
                 ordering_key, sequence FROM events WHERE status = 'processed' \
                 AND environment_ref = $1 AND public_event_type = $2 \
                 ORDER BY received_at DESC LIMIT {limit}"
            ),
            &[environment_ref.as_str().into(), event_type.into()],
            |row| {
                let scope: String = text(row, "scope")?;
                Ok(EventRow {
                    event_ref: Ref::from_trusted(text(row, "event_ref")?),
                    environment_ref: Ref::from_trusted(text(row, "environment_ref")?),
                    public_event_type: text(row, "public_event_type")?,
                    occurred_at: Timestamp::from_millis(int(row, "occurred_at")?),
                    scope: serde_json::from_str(&scope)
                        .map_err(|e| StoreError::Corrupt(format!("an event's scope: {e}")))?,
                    scope_json: scope,
                    data_json: String::new(),
                    data_packed: None,
                    order: crate::dispatch::order_from_row(row)?,
                })
            },
        )
        .await?;
        let mut data: std::collections::HashMap<String, (String, u32)> =
            std::collections::HashMap::new();
        let refs: Vec<&str> = events.iter().map(|e| e.event_ref.as_str()).collect();
        for chunk in refs.chunks(500) {
            let sql = format!(
                "SELECT event_ref, dto_version, {} AS event_data FROM webhook_deliveries \
                 WHERE event_ref IN ({}) AND diagnostic = 0",
                crate::dispatch::EVENT_DATA_OF_ROW,
                crate::db::marks::Marks::new(self.0.backend()).list(chunk.len())
            );
            let args: Vec<Arg> = chunk.iter().map(|r| Arg::from(*r)).collect();
            let rows = crate::db::read::all(self.pool(), &sql, &args, |row| {
                Ok((
                    text(row, "event_ref")?,
                    int(row, "dto_version")? as u32,
                    crate::packed::unpack_owned(text(row, "event_data")?),
                ))
            })
            .await?;
            for (event_ref, version, event_data) in rows {
                data.entry(event_ref).or_insert((event_data, version));
            }
        }
        Ok(events
            .into_iter()
            .filter_map(|mut e| {
                let (json, version) = data.remove(e.event_ref.as_str())?;
                e.data_json = json;
                Some((e, version))
            })
            .collect())
    }
}
