//! Subscriptions: which event types, in which scope and payload version,
//! an endpoint receives.

use super::Webhooks;
use crate::db::codec::{json_col, state, to_json};
use crate::db::tx::{int, text, Arg, Columns, WriteTx};
use crate::resource::{Resource, Scope};
use crate::{Backend, StoreError};
use domain::webhook::ordering::EndpointOrdering;
use domain::webhook::{EndpointStatus, ScopeType};
use domain::{Ref, Timestamp};

#[derive(Debug, Clone)]
pub struct SubscriptionRecord {
    pub endpoint_ref: Ref,
    pub public_event_type: String,
    pub scope_type: ScopeType,
    pub scope_ref: String,
    pub dto_version: u32,
    pub custom_field_refs: Vec<String>,
    pub created_at: Timestamp,
}

#[derive(Debug, Clone)]
pub struct NewSubscription<'a> {
    pub public_event_type: &'a str,
    pub scope_type: ScopeType,
    pub scope_ref: &'a str,
    pub dto_version: u32,
    pub custom_field_refs: &'a [String],
}

fn from_row(row: &dyn Columns) -> Result<SubscriptionRecord, StoreError> {
    Ok(SubscriptionRecord {
        endpoint_ref: Ref::from_trusted(text(row, "endpoint_ref")?),
        public_event_type: text(row, "public_event_type")?,
        scope_type: state(row, "scope_type", ScopeType::parse)?,
        scope_ref: text(row, "scope_ref")?,
        dto_version: int(row, "dto_version")? as u32,
        custom_field_refs: json_col(row, "custom_field_refs")?,
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
         e.url_immutable AS endpoint_url_immutable, e.ordering AS endpoint_ordering \
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

fn subscribed_row(row: &dyn Columns) -> Result<SubscriptionRow, StoreError> {
    let endpoint = match row.int("endpoint_version")? {
        Some(version) => Some(EndpointNow {
            version,
            status: state(row, "endpoint_status", EndpointStatus::parse)?,
            url_fixed: int(row, "endpoint_url_immutable")? != 0,
            ordering: state(row, "endpoint_ordering", EndpointOrdering::parse)?,
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
             public_event_type, scope_type, scope_ref, dto_version, custom_field_refs, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT DO NOTHING RETURNING *",
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
