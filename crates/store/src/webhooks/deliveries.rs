//! Deliveries (one notification to one endpoint, in generations); their
//! attempts are read in `attempts`. The API's writes (`create` for a test
//! send, `start_generation` for a redrive) take the caller's `WriteTx`;
//! the dispatcher's writes are in `crate::dispatch`, which shares
//! `mark_url_immutable` and `delivery_from_row` with them.

use super::attempts::{kept_from_row, write_out_kept, KeptSuccess};
pub use super::payload::Payload;
use super::Webhooks;
use crate::db::codec::to_json;
use crate::db::codec::{opt_ts, state};
use crate::db::page::{fetch_page_in_index_order, Order, Page, PageRequest};
use crate::db::read;
use crate::db::tx::{int, text, Arg, CellRow, Columns, WriteTx};
use crate::dispatch::signals::signal_due;
use crate::StoreError;
use domain::webhook::event::EventOrder;
use domain::webhook::{BodyStatus, DeliveryStatus, ResponseClass};
use domain::{Prefix, Ref, Timestamp};

/// The predicate of the retention sweep's index of settled deliveries
/// (`webhook_deliveries_settled`, migration 0017), word for word.
pub const SETTLED: &str = "status IN ('succeeded', 'failed')";

/// Which deliveries a list or a redrive job takes (contract 12.2); each
/// condition is optional.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeliveryFilter {
    pub status: Option<DeliveryStatus>,
    pub public_event_type: Option<String>,
    /// Created strictly after this moment.
    pub created_after: Option<Timestamp>,
    /// Created strictly before this moment.
    pub created_before: Option<Timestamp>,
    pub last_response_class: Option<ResponseClass>,
}

impl DeliveryFilter {
    /// Its conditions, each ` AND …` with the next numbered mark, their
    /// values appended to `args`. The status is written into the text, not
    /// bound: a planner uses a partial index only for a statement whose
    /// text implies its predicate, and the filter indexes hold failed
    /// deliveries only (migration 0034), whose predicate `status =
    /// 'failed'` is then in the text word for word.
    pub(crate) fn conditions<'a>(&'a self, args: &mut Vec<Arg<'a>>) -> String {
        let mut sql = String::new();
        if let Some(status) = self.status {
            sql.push_str(&format!(" AND status = '{}'", status.as_str()));
        }
        let mut add = |column: &str, op: &str, value: Arg<'a>| {
            args.push(value);
            sql.push_str(&format!(" AND {column} {op} ${}", args.len()));
        };
        if let Some(t) = &self.public_event_type {
            add("public_event_type", "=", t.as_str().into());
        }
        if let Some(at) = self.created_after {
            add("created_at", ">", at.millis().into());
        }
        if let Some(at) = self.created_before {
            add("created_at", "<", at.millis().into());
        }
        if let Some(class) = self.last_response_class {
            add("last_response_class", "=", class.as_str().into());
        }
        sql
    }
}

#[derive(Debug, Clone)]
pub struct DeliveryRecord {
    pub delivery_ref: Ref,
    pub environment_ref: Ref,
    pub endpoint_ref: Ref,
    pub event_ref: Ref,
    pub public_event_type: String,
    pub dto_version: u32,
    pub status: DeliveryStatus,
    pub diagnostic: bool,
    pub generation: u32,
    /// Attempts made in the current generation.
    pub attempt_count: u32,
    pub next_attempt_at: Option<Timestamp>,
    pub last_attempt_at: Option<Timestamp>,
    pub occurred_at: Timestamp,
    /// The event's `data` as published, before shaping, as JSON text: only
    /// an attempt reads it, and it parses it on its own task rather than
    /// the claim loop parsing a whole batch. Empty
    /// (`dispatch::SHARED_EVENT_DATA`) when the delivery reads its event's
    /// one copy and this read did not fetch it: a claim does.
    pub event_data: String,
    /// Every subscription that matched, as JSON text (an array): only the
    /// API's body view reads it, so a claim does not parse it. `null` when
    /// they are `fanout::environment_reasons` of the delivery's own type,
    /// environment and version, which are not stored (`NewDelivery`).
    pub match_reasons: String,
    pub body_status: BodyStatus,
    /// The body as last delivered (or as it will be delivered).
    pub payload: Payload,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub version: i64,
    /// The event's key and sequence (contract 13.1).
    pub order: Option<EventOrder>,
    /// Written for a `per_key` endpoint: it starts only after its key's
    /// earlier deliveries settled (`store::dispatch::ordering`).
    pub ordered: bool,
    /// A failed delivery skipped past, releasing its key.
    pub skipped_at: Option<Timestamp>,
    pub skip_reason: Option<String>,
    /// The current generation's success, kept on the delivery's row
    /// (`attempts::KeptSuccess`); `None` while it has none, or when it was
    /// recorded as a row.
    pub kept_success: Option<KeptSuccess>,
}

#[derive(Debug, Clone)]
pub struct NewDelivery {
    pub environment_ref: Ref,
    pub endpoint_ref: Ref,
    pub event_ref: Ref,
    pub public_event_type: String,
    pub dto_version: u32,
    pub status: DeliveryStatus,
    pub diagnostic: bool,
    pub occurred_at: Timestamp,
    /// The event's data in the delivery's dto version, as JSON text.
    pub event_data: String,
    /// `event_data` as its event's copy stores it, when it was packed
    /// before the write (`dispatch::fanout::EventRow::packed_as`); the
    /// write packs `event_data` otherwise.
    pub event_copy: Option<String>,
    /// Every subscription that matched (an array), or `null` for
    /// `domain::webhook::fanout::environment_reasons` of this delivery:
    /// most deliveries have just those, and a fan-out does not store them.
    pub match_reasons: serde_json::Value,
    pub payload: String,
    /// The event's key and sequence.
    pub order: Option<EventOrder>,
    /// On a `per_key` endpoint: it waits for its key's earlier deliveries.
    pub ordered: bool,
    /// Its endpoint's limits or back-pressure govern it (contract 13.2):
    /// it is never born leased, so its attempt starts where the limits are
    /// kept (the dispatcher's claim loop).
    pub limited: bool,
}

pub(crate) fn delivery_from_row(row: &dyn Columns) -> Result<DeliveryRecord, StoreError> {
    Ok(DeliveryRecord {
        delivery_ref: Ref::from_trusted(text(row, "delivery_ref")?),
        environment_ref: Ref::from_trusted(text(row, "environment_ref")?),
        endpoint_ref: Ref::from_trusted(text(row, "endpoint_ref")?),
        event_ref: Ref::from_trusted(text(row, "event_ref")?),
        public_event_type: text(row, "public_event_type")?,
        dto_version: int(row, "dto_version")? as u32,
        status: state(row, "status", DeliveryStatus::parse)?,
        diagnostic: int(row, "diagnostic")? != 0,
        generation: int(row, "generation")? as u32,
        attempt_count: int(row, "attempt_count")? as u32,
        next_attempt_at: opt_ts(row, "next_attempt_at")?,
        last_attempt_at: opt_ts(row, "last_attempt_at")?,
        occurred_at: Timestamp::from_millis(int(row, "occurred_at")?),
        event_data: text(row, "event_data")?,
        match_reasons: text(row, "match_reasons")?,
        body_status: state(row, "body_status", BodyStatus::parse)?,
        payload: Payload::from_column(row.text("payload")?),
        created_at: Timestamp::from_millis(int(row, "created_at")?),
        updated_at: Timestamp::from_millis(int(row, "updated_at")?),
        version: int(row, "version")?,
        order: crate::dispatch::order_from_row(row)?,
        ordered: row.text("ordered_key")?.is_some(),
        skipped_at: opt_ts(row, "skipped_at")?,
        skip_reason: row.text("skip_reason")?,
        kept_success: kept_from_row(row)?,
    })
}

/// Records a new delivery (generation 1, due now unless held) and marks
/// its endpoint's url immutable. `Duplicate` when the (event, endpoint,
/// dto_version) delivery exists already.
pub async fn create(tx: &mut WriteTx, new: NewDelivery) -> Result<DeliveryRecord, StoreError> {
    let now = Timestamp::now().millis();
    let row = insert_delivery(tx, &new, Some(&new.payload), now)
        .await?
        .ok_or(StoreError::Duplicate)?;
    let backend = tx.backend();
    mark_url_immutable(tx, backend, &[new.endpoint_ref.as_str()], now).await?;
    if new.status == DeliveryStatus::Pending {
        signal_due(tx).await?;
    }
    delivery_from_row(&row)
}

/// Starts the next generation of a delivery in `status` (pending or
/// held), if the delivery is still at its read version.
pub async fn start_generation(
    tx: &mut WriteTx,
    current: &DeliveryRecord,
    status: DeliveryStatus,
) -> Result<DeliveryRecord, StoreError> {
    let now = Timestamp::now().millis();
    // An ordered delivery waits for its key's release, below.
    let due = (status == DeliveryStatus::Pending && !current.ordered).then_some(now);
    let rows = tx
        .fetch(
            "UPDATE webhook_deliveries SET generation = generation + 1, attempt_count = 0, \
             status = $1, next_attempt_at = $2, updated_at = $3, version = version + 1, \
             success_status = NULL, success_duration_ms = NULL, success_excerpt = NULL \
             WHERE delivery_ref = $4 AND version = $5 RETURNING *",
            &[
                status.as_str().into(),
                due.into(),
                now.into(),
                current.delivery_ref.as_str().into(),
                current.version.into(),
            ],
        )
        .await?;
    let record = delivery_from_row(rows.first().ok_or(StoreError::Conflict)?)?;
    // The success the last generation kept on the row is one of its
    // attempts still: it becomes a row as the row lets go of it.
    write_out_kept(tx, current).await?;
    if due.is_some() {
        signal_due(tx).await?;
    }
    match (&record.order, record.ordered, status) {
        (Some(order), true, DeliveryStatus::Pending) => {
            requeue_ordered(tx, &record, order, Timestamp::from_millis(now)).await
        }
        _ => Ok(record),
    }
}

/// A redriven ordered delivery: the later ones of its key that have not
/// started wait behind it again, and it starts now unless an earlier one
/// of its key blocks it (contract 13.1). Returns it as it now stands.
async fn requeue_ordered(
    tx: &mut WriteTx,
    record: &DeliveryRecord,
    order: &EventOrder,
    now: Timestamp,
) -> Result<DeliveryRecord, StoreError> {
    use crate::dispatch::ordering;
    let Some(sequence) = order.sequence else {
        return Ok(record.clone());
    };
    let keys = [ordering::key_of(&record.environment_ref, order)].into();
    ordering::lock_keys(tx.inner(), &keys).await?;
    ordering::wait_behind(
        tx.inner(),
        &record.endpoint_ref,
        order.key.as_str(),
        sequence,
        now,
    )
    .await?;
    let released = ordering::release(tx.inner(), &keys, now).await?;
    if released.is_empty() {
        return Ok(record.clone());
    }
    signal_due(tx).await?;
    let rows = tx
        .fetch(
            "SELECT * FROM webhook_deliveries WHERE delivery_ref = $1",
            &[record.delivery_ref.as_str().into()],
        )
        .await?;
    delivery_from_row(rows.first().ok_or(StoreError::Conflict)?)
}

/// Skips a failed delivery (contract 13.1): it stays failed, with
/// `skipped_at` and the reason, and its key's next deliveries are released.
/// `Conflict` if the delivery is no longer at its read version.
pub async fn skip(
    tx: &mut WriteTx,
    current: &DeliveryRecord,
    reason: &str,
    now: Timestamp,
) -> Result<DeliveryRecord, StoreError> {
    use crate::dispatch::ordering;
    let rows = tx
        .fetch(
            "UPDATE webhook_deliveries SET skipped_at = $1, skip_reason = $2, updated_at = $1, \
             version = version + 1 WHERE delivery_ref = $3 AND version = $4 RETURNING *",
            &[
                now.millis().into(),
                reason.into(),
                current.delivery_ref.as_str().into(),
                current.version.into(),
            ],
        )
        .await?;
    let record = delivery_from_row(rows.first().ok_or(StoreError::Conflict)?)?;
    if let (Some(order), true) = (&record.order, record.ordered) {
        let keys = [ordering::key_of(&record.environment_ref, order)].into();
        ordering::lock_keys(tx.inner(), &keys).await?;
        if !ordering::release(tx.inner(), &keys, now).await?.is_empty() {
            signal_due(tx).await?;
        }
    }
    Ok(record)
}

impl Webhooks<'_> {
    /// `d`'s event data in its dto version, as JSON text: its own copy, or
    /// its event's one copy (`dispatch::EVENT_DATA_OF_ROW`, unpacked);
    /// `None` when that copy is gone.
    pub async fn event_data_of(&self, d: &DeliveryRecord) -> Result<Option<String>, StoreError> {
        let sql = format!(
            "SELECT {} AS data FROM webhook_deliveries WHERE delivery_ref = $1",
            crate::dispatch::EVENT_DATA_OF_ROW
        );
        let data = read::all(
            self.pool(),
            &sql,
            &[d.delivery_ref.as_str().into()],
            |row| row.text("data"),
        )
        .await?;
        Ok(data
            .into_iter()
            .flatten()
            .next()
            .map(crate::packed::unpack_owned))
    }

    pub async fn delivery(
        &self,
        environment_ref: &Ref,
        delivery_ref: &Ref,
    ) -> Result<DeliveryRecord, StoreError> {
        read::one(
            self.pool(),
            "SELECT * FROM webhook_deliveries WHERE environment_ref = $1 AND delivery_ref = $2",
            &[
                environment_ref.as_str().into(),
                delivery_ref.as_str().into(),
            ],
            delivery_from_row,
        )
        .await
    }

    /// A page of an endpoint's deliveries that meet `filter`, newest first
    /// (`list_deliveries_sql` is its statement).
    ///
    /// The one list not read through `crate::resource`, whose filters are
    /// bound equalities: here the status is written into the statement's
    /// text, so that a planner may use the partial indexes of failed
    /// deliveries (`DeliveryFilter::conditions`),
    /// and `created_after`/`created_before` are ranges. Its order and
    /// paging are still `db::page`'s, as every list's. Every filter has an
    /// index in the list's order that starts with the endpoint, so the
    /// page is read in it whatever the statistics say
    /// (`fetch_page_in_index_order`).
    pub async fn list_deliveries(
        &self,
        environment_ref: &Ref,
        endpoint_ref: &Ref,
        filter: &DeliveryFilter,
        page: &PageRequest,
    ) -> Result<Page<DeliveryRecord>, StoreError> {
        let mut args: Vec<Arg> = vec![
            environment_ref.as_str().into(),
            endpoint_ref.as_str().into(),
        ];
        let conditions = filter.conditions(&mut args);
        fetch_page_in_index_order(
            self.pool(),
            self.0.backend(),
            "webhook_deliveries",
            DELIVERY_ORDER,
            &endpoint_deliveries(&conditions),
            &args,
            page,
            delivery_from_row,
        )
        .await
    }

    /// The status of the endpoint's newest delivery.
    pub async fn latest_delivery_status(
        &self,
        endpoint_ref: &Ref,
    ) -> Result<Option<DeliveryStatus>, StoreError> {
        read::optional(
            self.pool(),
            "SELECT status FROM webhook_deliveries WHERE endpoint_ref = $1 \
             ORDER BY created_at DESC, delivery_ref DESC LIMIT 1",
            &[endpoint_ref.as_str().into()],
            |r| state(r, "status", DeliveryStatus::parse),
        )
        .await
    }
}

/// Inserts a delivery unless its (event, endpoint, dto_version) exists; the
/// new row, or `None` if it existed. The caller marks the endpoint's url
/// immutable (`mark_url_immutable`) in the same transaction.
pub(crate) async fn insert_delivery(
    tx: &mut WriteTx,
    new: &NewDelivery,
    payload: Option<&str>,
    now: i64,
) -> Result<Option<CellRow>, StoreError> {
    let due = (new.status == DeliveryStatus::Pending).then_some(now);
    let delivery_ref = Ref::generate(Prefix::WebhookDelivery);
    let match_reasons = to_json(&new.match_reasons);
    let rows = tx
        .fetch(
            "INSERT INTO webhook_deliveries (delivery_ref, environment_ref, endpoint_ref, \
             event_ref, public_event_type, dto_version, status, diagnostic, generation, \
             attempt_count, next_attempt_at, occurred_at, event_data, match_reasons, body_status, \
             payload, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 1, 0, $9, \
             $10, $11, $12, $13, $14, $15, $15) \
             ON CONFLICT (event_ref, endpoint_ref, dto_version) DO NOTHING RETURNING *",
            &[
                delivery_ref.as_str().into(),
                new.environment_ref.as_str().into(),
                new.endpoint_ref.as_str().into(),
                new.event_ref.as_str().into(),
                (&new.public_event_type).into(),
                i64::from(new.dto_version).into(),
                new.status.as_str().into(),
                i64::from(new.diagnostic).into(),
                due.into(),
                new.occurred_at.millis().into(),
                (&new.event_data).into(),
                (&match_reasons).into(),
                BodyStatus::Available.as_str().into(),
                payload.into(),
                now.into(),
            ],
        )
        .await?;
    Ok(rows.into_iter().next())
}

/// Fixes endpoints' urls once they have a delivery (`url_immutable`), in
/// one statement for all the endpoints a write touched.
pub(crate) async fn mark_url_immutable(
    tx: &mut WriteTx,
    backend: crate::Backend,
    endpoint_refs: &[&str],
    now: i64,
) -> Result<(), StoreError> {
    if endpoint_refs.is_empty() {
        return Ok(());
    }
    let mut marks = crate::db::marks::Marks::new(backend);
    let sql = format!(
        "UPDATE webhook_endpoints SET url_immutable = 1, version = version + 1, updated_at = {} \
         WHERE url_immutable = 0 AND endpoint_ref IN ({})",
        marks.next(),
        marks.list(endpoint_refs.len())
    );
    let mut args: Vec<Arg> = vec![now.into()];
    args.extend(endpoint_refs.iter().map(|r| Arg::from(*r)));
    tx.execute(&sql, &args).await?;
    Ok(())
}

/// The deliveries of endpoint `$2` of environment `$1` that meet
/// `conditions`. The environment is checked on the endpoint, once, not
/// on each delivery: a condition on the deliveries' `environment_ref` would
/// let a planner read the environment's index (`webhook_deliveries_by_env`)
/// and pass over every other endpoint's deliveries to fill a page.
fn endpoint_deliveries(conditions: &str) -> String {
    format!(
        "endpoint_ref = (SELECT endpoint_ref FROM webhook_endpoints \
         WHERE environment_ref = $1 AND endpoint_ref = $2){conditions}"
    )
}

/// The newest-first order of an endpoint's deliveries.
const DELIVERY_ORDER: Order<'static> = Order {
    at: "created_at",
    key: "delivery_ref",
};

/// The statement `Webhooks::list_deliveries` runs for `filter` and `page`,
/// with the values its marks bind (the environment, the endpoint, the
/// filter's values, then the cursor's), as text: for a check of its plan.
pub fn list_deliveries_sql(
    environment_ref: &str,
    endpoint_ref: &str,
    filter: &DeliveryFilter,
    page: &crate::db::page::PageRequest,
) -> (String, Vec<String>) {
    let mut args: Vec<Arg> = vec![environment_ref.into(), endpoint_ref.into()];
    let conditions = filter.conditions(&mut args);
    let sql = crate::db::page::page_sql(
        "webhook_deliveries",
        DELIVERY_ORDER,
        &endpoint_deliveries(&conditions),
        args.len(),
        page,
    );
    let mut values: Vec<String> = args.iter().map(Arg::literal).collect();
    if let Some((ms, r)) = &page.after {
        values.extend([ms.to_string(), format!("'{r}'")]);
    }
    (sql, values)
}
