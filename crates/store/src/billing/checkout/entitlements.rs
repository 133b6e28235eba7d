//! Entitlements: one per product of a paid order.

use super::{at, reference, state};
use crate::db::codec::opt_ts;
use crate::db::tx::{int, single, Columns, WriteTx};
use crate::resource::Resource;
use crate::StoreError;
use domain::checkout::states::EntitlementStatus;
use domain::{Prefix, Ref, Timestamp};

#[derive(Debug, Clone)]
pub struct EntitlementRecord {
    pub entitlement_ref: Ref,
    pub environment_ref: Ref,
    pub buyer_ref: Ref,
    pub product_ref: Ref,
    pub order_ref: Ref,
    pub status: EntitlementStatus,
    pub granted_at: Timestamp,
    pub revoked_at: Option<Timestamp>,
    pub created_at: Timestamp,
    pub version: i64,
}

impl Resource for EntitlementRecord {
    const TABLE: &'static str = "entitlements";
    const REF_COLUMN: &'static str = "entitlement_ref";
    const FILTERS: &'static [(&'static str, &'static str)] = &[
        ("status", "status"),
        ("product_ref", "product_ref"),
        ("buyer_ref", "buyer_ref"),
    ];

    fn decode(row: &dyn Columns) -> Result<Self, StoreError> {
        Ok(EntitlementRecord {
            entitlement_ref: reference(row, "entitlement_ref")?,
            environment_ref: reference(row, "environment_ref")?,
            buyer_ref: reference(row, "buyer_ref")?,
            product_ref: reference(row, "product_ref")?,
            order_ref: reference(row, "order_ref")?,
            status: state(row, "status", EntitlementStatus::parse)?,
            granted_at: at(row, "granted_at")?,
            revoked_at: opt_ts(row, "revoked_at")?,
            created_at: at(row, "created_at")?,
            version: int(row, "version")?,
        })
    }
}

pub async fn grant(
    tx: &mut WriteTx,
    environment_ref: &Ref,
    buyer_ref: &Ref,
    product_ref: &str,
    order_ref: &Ref,
    granted_at: Timestamp,
) -> Result<EntitlementRecord, StoreError> {
    let rows = tx
        .fetch(
            "INSERT INTO entitlements (entitlement_ref, environment_ref, buyer_ref, product_ref, \
             order_ref, status, granted_at, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $7) \
             RETURNING *",
            &[
                Ref::generate(Prefix::Entitlement).as_str().into(),
                environment_ref.as_str().into(),
                buyer_ref.as_str().into(),
                product_ref.into(),
                order_ref.as_str().into(),
                EntitlementStatus::Active.as_str().into(),
                granted_at.millis().into(),
            ],
        )
        .await?;
    EntitlementRecord::decode(single(&rows)?)
}

/// Revokes at `now` the active entitlements a subscription's order granted
/// for its product; returns them as revoked.
pub async fn revoke_of_subscription(
    tx: &mut WriteTx,
    order_ref: &Ref,
    product_ref: &Ref,
    now: Timestamp,
) -> Result<Vec<EntitlementRecord>, StoreError> {
    let rows = tx
        .fetch(
            "UPDATE entitlements SET status = $1, revoked_at = $2, version = version + 1 \
             WHERE order_ref = $3 AND product_ref = $4 AND status = $5 RETURNING *",
            &[
                EntitlementStatus::Revoked.as_str().into(),
                now.millis().into(),
                order_ref.as_str().into(),
                product_ref.as_str().into(),
                EntitlementStatus::Active.as_str().into(),
            ],
        )
        .await?;
    rows.iter().map(|r| EntitlementRecord::decode(r)).collect()
}
