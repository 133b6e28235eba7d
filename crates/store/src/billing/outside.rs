//! Disputes, payouts and participations: resources other systems own,
//! projected from their events. Each row keeps the resource as the API
//! shows it (`body`, JSON made by the projection) with the columns its list
//! filters on, and the `occurred_at` of the last event applied: an older
//! event changes nothing.

use super::checkout::{at, reference, state};
use crate::db::codec::to_json;
use crate::db::tx::{int, single, text, Columns, WriteTx};
use crate::resource::Resource;
use crate::StoreError;
use domain::outside::states::{DisputeStatus, ParticipationStatus, PayoutStatus};
use domain::{Ref, Timestamp};

/// A projected resource as stored.
#[derive(Debug, Clone)]
pub struct Projected<S> {
    pub reference: Ref,
    pub environment_ref: Ref,
    pub status: S,
    /// The resource's wire form.
    pub body: serde_json::Value,
    /// When the event last applied happened.
    pub applied_at: Timestamp,
    pub created_at: Timestamp,
    pub version: i64,
}

pub type DisputeRecord = Projected<DisputeStatus>;
pub type PayoutRecord = Projected<PayoutStatus>;
pub type ParticipationRecord = Projected<ParticipationStatus>;

fn decode<S>(
    row: &dyn Columns,
    ref_column: &str,
    parse: fn(&str) -> Option<S>,
) -> Result<Projected<S>, StoreError> {
    let body = text(row, "body")?;
    Ok(Projected {
        reference: reference(row, ref_column)?,
        environment_ref: reference(row, "environment_ref")?,
        status: state(row, "status", parse)?,
        body: serde_json::from_str(&body).map_err(|e| StoreError::Corrupt(format!("body: {e}")))?,
        applied_at: at(row, "applied_at")?,
        created_at: at(row, "created_at")?,
        version: int(row, "version")?,
    })
}

impl Resource for DisputeRecord {
    const TABLE: &'static str = "disputes";
    const REF_COLUMN: &'static str = "dispute_ref";
    const FILTERS: &'static [(&'static str, &'static str)] = &[
        ("status", "status"),
        ("payment_intent_ref", "payment_intent_ref"),
    ];

    fn decode(row: &dyn Columns) -> Result<Self, StoreError> {
        decode(row, "dispute_ref", DisputeStatus::parse)
    }
}

impl Resource for PayoutRecord {
    const TABLE: &'static str = "payouts";
    const REF_COLUMN: &'static str = "payout_ref";
    const FILTERS: &'static [(&'static str, &'static str)] = &[("status", "status")];

    fn decode(row: &dyn Columns) -> Result<Self, StoreError> {
        decode(row, "payout_ref", PayoutStatus::parse)
    }
}

impl Resource for ParticipationRecord {
    const TABLE: &'static str = "participations";
    const REF_COLUMN: &'static str = "participation_ref";
    const FILTERS: &'static [(&'static str, &'static str)] = &[("status", "status")];

    fn decode(row: &dyn Columns) -> Result<Self, StoreError> {
        decode(row, "participation_ref", ParticipationStatus::parse)
    }
}

/// What a projection writes.
pub struct Projection<'a> {
    pub environment_ref: &'a Ref,
    pub reference: &'a Ref,
    pub status: &'a str,
    pub body: &'a serde_json::Value,
    pub occurred_at: Timestamp,
    /// Only for disputes: the payment disputed.
    pub payment_intent_ref: Option<&'a Ref>,
}

/// Where a resource of `T` is kept.
fn table<T: Resource>() -> (&'static str, &'static str) {
    (T::TABLE, T::REF_COLUMN)
}

/// Applies a projection unless the resource already holds a newer event;
/// returns the record as it is after, and whether it changed. `Duplicate`
/// when the reference names a resource of another environment.
pub async fn project<S>(
    tx: &mut WriteTx,
    p: Projection<'_>,
) -> Result<(Projected<S>, bool), StoreError>
where
    Projected<S>: Resource,
{
    let (table, ref_column) = table::<Projected<S>>();
    let now = Timestamp::now().millis();
    let (extra_col, extra_val, extra_set) = match p.payment_intent_ref {
        Some(r) => (
            ", payment_intent_ref",
            Some(r.as_str()),
            ", payment_intent_ref = excluded.payment_intent_ref",
        ),
        None => ("", None, ""),
    };
    let body = to_json(p.body);
    let mut args: Vec<crate::db::tx::Arg> = vec![
        p.reference.as_str().into(),
        p.environment_ref.as_str().into(),
        p.status.into(),
        body.as_str().into(),
        p.occurred_at.millis().into(),
        now.into(),
    ];
    let extra_mark = match extra_val {
        Some(v) => {
            args.push(v.into());
            ", $7"
        }
        None => "",
    };
    // Insert, or update only when this event is not older than the last
    // one applied.
    let sql = format!(
        "INSERT INTO {table} ({ref_column}, environment_ref, status, body, applied_at, \
         created_at{extra_col}) VALUES ($1, $2, $3, $4, $5, $6{extra_mark}) \
         ON CONFLICT ({ref_column}) DO UPDATE SET status = excluded.status, \
         body = excluded.body, applied_at = excluded.applied_at{extra_set}, \
         version = {table}.version + 1 \
         WHERE {table}.applied_at <= excluded.applied_at \
         AND {table}.environment_ref = excluded.environment_ref RETURNING *"
    );
    let rows = tx.fetch(&sql, &args).await?;
    if let Some(row) = rows.first() {
        return Ok((Projected::<S>::decode(row)?, true));
    }
    let rows = tx
        .fetch(
            &format!("SELECT * FROM {table} WHERE {ref_column} = $1"),
            &[p.reference.as_str().into()],
        )
        .await?;
    let current = Projected::<S>::decode(single(&rows)?)?;
    if &current.environment_ref != p.environment_ref {
        return Err(StoreError::Duplicate);
    }
    Ok((current, false))
}

/// The payment's open disputes (`needs_response`, `under_review`).
pub async fn open_disputes_of(
    tx: &mut WriteTx,
    payment_intent_ref: &Ref,
) -> Result<usize, StoreError> {
    let rows = tx
        .fetch(
            "SELECT dispute_ref FROM disputes WHERE payment_intent_ref = $1 \
             AND status IN ($2, $3)",
            &[
                payment_intent_ref.as_str().into(),
                DisputeStatus::NeedsResponse.as_str().into(),
                DisputeStatus::UnderReview.as_str().into(),
            ],
        )
        .await?;
    Ok(rows.len())
}
