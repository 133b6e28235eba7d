//! Data profile grants: which data classes and custom fields an endpoint may
//! receive. At most one is active per endpoint; the history is kept.
//! Revoking (or superseding) a grant redacts the endpoint's stored bodies
//! that hold data the endpoint is no longer covered for, in the same
//! transaction: `create` and `revoke` take the caller's `WriteTx`.

use super::endpoints::EndpointRecord;
use super::payload::REBUILT_PAYLOAD;
use super::Webhooks;
use crate::db::codec::opt_ts;
use crate::db::codec::{json_col, state, to_json};
use crate::db::read;
use crate::db::tx::{int, text, Columns, WriteTx};
use crate::resource::{Resource, Scope};
use crate::StoreError;
use domain::webhook::{BodyStatus, DataClass, DataProfileGrantStatus, Purpose};
use domain::{Ref, Timestamp};

#[derive(Debug, Clone)]
pub struct DataProfileGrantRecord {
    pub endpoint_ref: Ref,
    pub purpose: Purpose,
    pub reason: String,
    pub data_classes: Vec<DataClass>,
    pub custom_field_refs: Vec<String>,
    pub status: DataProfileGrantStatus,
    pub created_at: Timestamp,
    pub revoked_at: Option<Timestamp>,
}

#[derive(Debug, Clone)]
pub struct NewDataProfileGrant {
    pub purpose: Purpose,
    pub reason: String,
    pub data_classes: Vec<DataClass>,
    pub custom_field_refs: Vec<String>,
}

/// A stored body, shown to the caller's redaction rule.
pub struct StoredBody<'a> {
    pub public_event_type: &'a str,
    pub dto_version: u32,
    pub payload: &'a str,
}

fn from_row(row: &dyn Columns) -> Result<DataProfileGrantRecord, StoreError> {
    let classes: Vec<String> = json_col(row, "data_classes")?;
    Ok(DataProfileGrantRecord {
        endpoint_ref: Ref::from_trusted(text(row, "endpoint_ref")?),
        purpose: state(row, "purpose", Purpose::parse)?,
        reason: text(row, "reason")?,
        data_classes: classes.iter().filter_map(|c| DataClass::parse(c)).collect(),
        custom_field_refs: json_col(row, "custom_field_refs")?,
        status: state(row, "status", DataProfileGrantStatus::parse)?,
        created_at: Timestamp::from_millis(int(row, "created_at")?),
        revoked_at: opt_ts(row, "revoked_at")?,
    })
}

/// Creates the endpoint's active grant, revoking the previous one.
/// `redact` says which stored bodies the new grant no longer covers.
/// `Duplicate` when another grant became active concurrently.
pub async fn create(
    tx: &mut WriteTx,
    endpoint: &EndpointRecord,
    new: NewDataProfileGrant,
    redact: impl Fn(&StoredBody<'_>) -> bool,
) -> Result<DataProfileGrantRecord, StoreError> {
    let now = Timestamp::now().millis();
    // The grant changes what the endpoint receives: its version moves,
    // so cached views of it (the dispatcher's) are refreshed.
    tx.execute(
        "UPDATE webhook_endpoints SET updated_at = $1, version = version + 1 \
         WHERE endpoint_ref = $2",
        &[now.into(), endpoint.endpoint_ref.as_str().into()],
    )
    .await?;
    let superseded =
        revoke_active(tx, &endpoint.endpoint_ref, now, "superseded by a new grant").await?;
    let grant_id = Ref::generate(domain::Prefix::WebhookEndpoint)
        .as_str()
        .replacen("whep_", "dpg_", 1);
    let classes: Vec<&str> = new.data_classes.iter().map(|c| c.as_str()).collect();
    let classes = to_json(&classes);
    let custom_field_refs = to_json(&new.custom_field_refs);
    let rows = tx
        .fetch(
            "INSERT INTO webhook_data_profile_grants (grant_id, endpoint_ref, environment_ref, \
             purpose, reason, data_classes, custom_field_refs, status, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT DO NOTHING RETURNING *",
            &[
                (&grant_id).into(),
                endpoint.endpoint_ref.as_str().into(),
                endpoint.environment_ref.as_str().into(),
                new.purpose.as_str().into(),
                (&new.reason).into(),
                (&classes).into(),
                (&custom_field_refs).into(),
                DataProfileGrantStatus::Active.as_str().into(),
                now.into(),
            ],
        )
        .await?;
    let grant = from_row(rows.first().ok_or(StoreError::Duplicate)?)?;
    if superseded.is_some() {
        redact_bodies(tx, &endpoint.endpoint_ref, &redact).await?;
    }
    Ok(grant)
}

/// Revokes the endpoint's active grant if the endpoint is still at its
/// read version, redacting the stored bodies no longer covered; `NotFound`
/// when none is active.
pub async fn revoke(
    tx: &mut WriteTx,
    endpoint: &EndpointRecord,
    reason: &str,
    redact: impl Fn(&StoredBody<'_>) -> bool,
) -> Result<DataProfileGrantRecord, StoreError> {
    let now = Timestamp::now().millis();
    let bumped = tx
        .execute(
            "UPDATE webhook_endpoints SET updated_at = $1, version = version + 1 \
             WHERE endpoint_ref = $2 AND version = $3",
            &[
                now.into(),
                endpoint.endpoint_ref.as_str().into(),
                endpoint.version.into(),
            ],
        )
        .await?;
    if bumped != 1 {
        return Err(StoreError::Conflict);
    }
    let revoked = revoke_active(tx, &endpoint.endpoint_ref, now, reason)
        .await?
        .ok_or(StoreError::NotFound)?;
    redact_bodies(tx, &endpoint.endpoint_ref, &redact).await?;
    Ok(revoked)
}

impl Resource for DataProfileGrantRecord {
    const TABLE: &'static str = "webhook_data_profile_grants";
    const REF_COLUMN: &'static str = "grant_id";
    const PARENT_COLUMN: Option<&'static str> = Some("endpoint_ref");

    fn decode(row: &dyn Columns) -> Result<Self, StoreError> {
        from_row(row)
    }
}

impl Webhooks<'_> {
    /// The endpoint's grants, newest first, revoked ones included (not
    /// paged).
    pub async fn list_data_profile_grants(
        &self,
        environment_ref: &Ref,
        endpoint_ref: &Ref,
    ) -> Result<Vec<DataProfileGrantRecord>, StoreError> {
        self.0
            .list_all(Scope::under(environment_ref, endpoint_ref), &[])
            .await
    }

    pub async fn active_data_profile_grant(
        &self,
        endpoint_ref: &Ref,
    ) -> Result<Option<DataProfileGrantRecord>, StoreError> {
        read::optional(
            self.pool(),
            "SELECT * FROM webhook_data_profile_grants WHERE endpoint_ref = $1 AND status = $2",
            &[
                endpoint_ref.as_str().into(),
                DataProfileGrantStatus::Active.as_str().into(),
            ],
            from_row,
        )
        .await
    }
}

async fn revoke_active(
    tx: &mut WriteTx,
    endpoint_ref: &Ref,
    now: i64,
    reason: &str,
) -> Result<Option<DataProfileGrantRecord>, StoreError> {
    let rows = tx
        .fetch(
            "UPDATE webhook_data_profile_grants SET status = $1, revoked_at = $2, \
             revoke_reason = $3 WHERE endpoint_ref = $4 AND status = $5 RETURNING *",
            &[
                DataProfileGrantStatus::Revoked.as_str().into(),
                now.into(),
                reason.into(),
                endpoint_ref.as_str().into(),
                DataProfileGrantStatus::Active.as_str().into(),
            ],
        )
        .await?;
    rows.first().map(|row| from_row(row)).transpose()
}

async fn redact_bodies(
    tx: &mut WriteTx,
    endpoint_ref: &Ref,
    redact: &impl Fn(&StoredBody<'_>) -> bool,
) -> Result<u64, StoreError> {
    let rows = tx
        .fetch(
            "SELECT delivery_ref, public_event_type, dto_version, payload FROM webhook_deliveries \
             WHERE endpoint_ref = $1 AND body_status = $2 AND payload IS NOT NULL \
             AND payload <> $3",
            &[
                endpoint_ref.as_str().into(),
                BodyStatus::Available.as_str().into(),
                // A rebuilt body was shaped for no grant: it holds no
                // classified data, so every grant covers it.
                REBUILT_PAYLOAD.into(),
            ],
        )
        .await?;
    let mut redacted = 0;
    for row in &rows {
        let payload = text(row, "payload")?;
        let event_type = text(row, "public_event_type")?;
        let body = StoredBody {
            public_event_type: &event_type,
            dto_version: int(row, "dto_version")? as u32,
            payload: &payload,
        };
        if redact(&body) {
            let delivery_ref = text(row, "delivery_ref")?;
            tx.execute(
                "UPDATE webhook_deliveries SET body_status = $1, payload = NULL \
                 WHERE delivery_ref = $2",
                &[BodyStatus::Redacted.as_str().into(), (&delivery_ref).into()],
            )
            .await?;
            redacted += 1;
        }
    }
    Ok(redacted)
}
