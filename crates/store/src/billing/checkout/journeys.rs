//! Journeys: a session's path from creation to conversion, one step per
//! thing that happened (JSON, appended by each pay).

use super::{at, opt_reference, reference, state};
use crate::db::codec::{json_col, to_json};
use crate::db::tx::{int, single, Columns, WriteTx};
use crate::resource::{Expiry, Resource};
use crate::StoreError;
use domain::checkout::states::JourneyStatus;
use domain::{Prefix, Ref, Timestamp};
use serde::{Deserialize, Serialize};

/// One step, as the wire shows it (`kind` is a `StepKind` wire name).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    pub kind: String,
    pub at: String,
    pub payment_intent_ref: Option<String>,
}

#[derive(Debug, Clone)]
pub struct JourneyRecord {
    pub journey_ref: Ref,
    pub environment_ref: Ref,
    pub checkout_session_ref: Ref,
    pub buyer_ref: Option<Ref>,
    pub status: JourneyStatus,
    pub steps: Vec<Step>,
    /// Its session's expiry (`journeys_read`).
    pub expires_at: Timestamp,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub version: i64,
}

impl Resource for JourneyRecord {
    const TABLE: &'static str = "journeys_read";
    const REF_COLUMN: &'static str = "journey_ref";
    const FILTERS: &'static [(&'static str, &'static str)] =
        &[("status", "status"), ("buyer_ref", "buyer_ref")];
    const EXPIRY: Option<Expiry> = Some(Expiry {
        column: "expires_at",
        stored: JourneyStatus::Open.as_str(),
        reads_as: JourneyStatus::Abandoned.as_str(),
    });

    fn decode(row: &dyn Columns) -> Result<Self, StoreError> {
        Ok(JourneyRecord {
            journey_ref: reference(row, "journey_ref")?,
            environment_ref: reference(row, "environment_ref")?,
            checkout_session_ref: reference(row, "checkout_session_ref")?,
            buyer_ref: opt_reference(row, "buyer_ref")?,
            status: state(row, "status", JourneyStatus::parse)?,
            steps: json_col(row, "steps")?,
            expires_at: at(row, "expires_at")?,
            created_at: at(row, "created_at")?,
            updated_at: at(row, "updated_at")?,
            version: int(row, "version")?,
        })
    }
}

pub async fn start(
    tx: &mut WriteTx,
    environment_ref: &Ref,
    journey_ref: &Ref,
    checkout_session_ref: &Ref,
    first: Step,
    now: Timestamp,
) -> Result<(), StoreError> {
    tx.execute(
        "INSERT INTO journeys (journey_ref, environment_ref, checkout_session_ref, status, \
             steps, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $6)",
        &[
            journey_ref.as_str().into(),
            environment_ref.as_str().into(),
            checkout_session_ref.as_str().into(),
            JourneyStatus::Open.as_str().into(),
            to_json(&vec![first]).as_str().into(),
            now.millis().into(),
        ],
    )
    .await?;
    Ok(())
}

/// Appends steps; `converted_by` marks the journey converted for that buyer.
pub async fn add_steps(
    tx: &mut WriteTx,
    journey_ref: &Ref,
    steps: &[Step],
    converted_by: Option<&Ref>,
) -> Result<(), StoreError> {
    let rows = tx
        .fetch(
            "SELECT * FROM journeys_read WHERE journey_ref = $1",
            &[journey_ref.as_str().into()],
        )
        .await?;
    let mut journey = JourneyRecord::decode(single(&rows)?)?;
    journey.steps.extend_from_slice(steps);
    let status = match converted_by {
        Some(_) => JourneyStatus::Converted,
        None => journey.status,
    };
    tx.execute(
        "UPDATE journeys SET steps = $1, status = $2, buyer_ref = COALESCE($3, buyer_ref), \
         updated_at = $4, version = version + 1 WHERE journey_ref = $5",
        &[
            to_json(&journey.steps).as_str().into(),
            status.as_str().into(),
            converted_by.map(Ref::as_str).into(),
            Timestamp::now().millis().into(),
            journey_ref.as_str().into(),
        ],
    )
    .await?;
    Ok(())
}

/// A new journey's reference, for the session that starts it.
pub fn new_ref() -> Ref {
    Ref::generate(Prefix::Journey)
}
