//! Subscriptions (one per recurring line item of a paid session) and their
//! changes (`started` first). A subscription moves only through the writes
//! here, each conditional on the version it was read at, so two units of
//! work that read the same version cannot both move it (`Conflict`).

use super::{at, opt_reference, reference, state};
use crate::db::codec::opt_ts;
use crate::db::tx::{int, single, Columns, WriteTx};
use crate::resource::Resource;
use crate::StoreError;
use domain::checkout::states::{CancelReason, ChangeKind, SubscriptionStatus};
use domain::{Prefix, Ref, Timestamp};

#[derive(Debug, Clone)]
pub struct SubscriptionRecord {
    pub subscription_ref: Ref,
    pub environment_ref: Ref,
    pub buyer_ref: Option<Ref>,
    pub price_ref: Ref,
    pub product_ref: Ref,
    pub checkout_session_ref: Ref,
    pub status: SubscriptionStatus,
    pub current_period_start: Option<Timestamp>,
    pub current_period_end: Option<Timestamp>,
    pub stored_payment_method_ref: Option<Ref>,
    pub started_at: Option<Timestamp>,
    pub canceled_at: Option<Timestamp>,
    pub cancel_at_period_end: bool,
    pub cancel_reason: Option<CancelReason>,
    pub test_clock_ref: Option<Ref>,
    /// When its trial ends; `None` without a trial (contract 14.3).
    pub trial_end: Option<Timestamp>,
    /// Where a change to another interval restarted its periods (contract
    /// 14.2); `None` when none did (see `periods_from`).
    pub period_anchor: Option<Timestamp>,
    /// A `next_invoice` price change's lines, waiting for the next
    /// renewal's invoice (contract 14.2); empty when none wait.
    pub pending_invoice_lines: Vec<domain::checkout::lines::InvoiceLine>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub version: i64,
}

impl Resource for SubscriptionRecord {
    const TABLE: &'static str = "subscriptions";
    const REF_COLUMN: &'static str = "subscription_ref";
    const FILTERS: &'static [(&'static str, &'static str)] = &[
        ("status", "status"),
        ("product_ref", "product_ref"),
        ("buyer_ref", "buyer_ref"),
    ];

    fn decode(row: &dyn Columns) -> Result<Self, StoreError> {
        Ok(SubscriptionRecord {
            subscription_ref: reference(row, "subscription_ref")?,
            environment_ref: reference(row, "environment_ref")?,
            buyer_ref: opt_reference(row, "buyer_ref")?,
            price_ref: reference(row, "price_ref")?,
            product_ref: reference(row, "product_ref")?,
            checkout_session_ref: reference(row, "checkout_session_ref")?,
            status: state(row, "status", SubscriptionStatus::parse)?,
            current_period_start: opt_ts(row, "current_period_start")?,
            current_period_end: opt_ts(row, "current_period_end")?,
            stored_payment_method_ref: opt_reference(row, "stored_payment_method_ref")?,
            started_at: opt_ts(row, "started_at")?,
            canceled_at: opt_ts(row, "canceled_at")?,
            cancel_at_period_end: int(row, "cancel_at_period_end")? != 0,
            cancel_reason: match row.text("cancel_reason")? {
                None => None,
                Some(r) => Some(CancelReason::parse(&r).ok_or_else(|| {
                    StoreError::Corrupt(format!("subscription cancel_reason {r}"))
                })?),
            },
            test_clock_ref: opt_reference(row, "test_clock_ref")?,
            trial_end: opt_ts(row, "trial_end")?,
            period_anchor: opt_ts(row, "period_anchor")?,
            pending_invoice_lines: super::price_changes::pending_of(row)?,
            created_at: at(row, "created_at")?,
            updated_at: at(row, "updated_at")?,
            version: int(row, "version")?,
        })
    }
}

impl SubscriptionRecord {
    /// Where its periods are counted from: each ends a whole number of
    /// intervals after it (the day clamped to the month's last), so a
    /// period that ended on a short month's last day does not move the
    /// next ones earlier. A change to another interval restarts the count
    /// at the change; otherwise a trial's end, or else the start.
    pub fn periods_from(&self) -> Option<Timestamp> {
        self.period_anchor.or(self.trial_end).or(self.started_at)
    }
}

/// What a subscription starts with: `Active` with its first period, or
/// `Incomplete` (waiting for authentication) without one.
pub struct NewSubscription<'a> {
    pub checkout_session_ref: &'a Ref,
    pub buyer_ref: Option<&'a Ref>,
    pub price_ref: &'a str,
    pub product_ref: &'a str,
    pub stored_payment_method_ref: Option<&'a Ref>,
    pub period: Option<(Timestamp, Timestamp)>,
    pub test_clock_ref: Option<&'a Ref>,
    pub now: Timestamp,
}

pub async fn create(
    tx: &mut WriteTx,
    environment_ref: &Ref,
    new: NewSubscription<'_>,
) -> Result<SubscriptionRecord, StoreError> {
    let now = new.now.millis();
    let status = match new.period {
        Some(_) => SubscriptionStatus::Active,
        None => SubscriptionStatus::Incomplete,
    };
    let rows = tx
        .fetch(
            "INSERT INTO subscriptions (subscription_ref, environment_ref, buyer_ref, price_ref, \
             product_ref, checkout_session_ref, status, current_period_start, \
             current_period_end, stored_payment_method_ref, started_at, created_at, updated_at, \
             test_clock_ref) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $8, $11, $11, $12) \
             RETURNING *",
            &[
                Ref::generate(Prefix::Subscription).as_str().into(),
                environment_ref.as_str().into(),
                new.buyer_ref.map(Ref::as_str).into(),
                new.price_ref.into(),
                new.product_ref.into(),
                new.checkout_session_ref.as_str().into(),
                status.as_str().into(),
                new.period.map(|p| p.0.millis()).into(),
                new.period.map(|p| p.1.millis()).into(),
                new.stored_payment_method_ref.map(Ref::as_str).into(),
                now.into(),
                new.test_clock_ref.map(Ref::as_str).into(),
            ],
        )
        .await?;
    SubscriptionRecord::decode(single(&rows)?)
}

/// The first subscription a session started (in any state), if any: the
/// ordering key of the session's events (contract 13.1).
pub async fn first_of_session(
    tx: &mut WriteTx,
    checkout_session_ref: &Ref,
) -> Result<Option<Ref>, StoreError> {
    let rows = tx
        .fetch(
            "SELECT subscription_ref FROM subscriptions WHERE checkout_session_ref = $1 \
             ORDER BY created_at, subscription_ref LIMIT 1",
            &[checkout_session_ref.as_str().into()],
        )
        .await?;
    rows.first()
        .map(|r| {
            Ok(Ref::from_trusted(crate::db::tx::text(
                r,
                "subscription_ref",
            )?))
        })
        .transpose()
}

/// The incomplete subscriptions a session's payment left waiting.
pub async fn incomplete_of_session(
    tx: &mut WriteTx,
    checkout_session_ref: &Ref,
) -> Result<Vec<SubscriptionRecord>, StoreError> {
    let rows = tx
        .fetch(
            "SELECT * FROM subscriptions WHERE checkout_session_ref = $1 AND status = $2 \
             ORDER BY created_at, subscription_ref",
            &[
                checkout_session_ref.as_str().into(),
                SubscriptionStatus::Incomplete.as_str().into(),
            ],
        )
        .await?;
    rows.iter().map(|r| SubscriptionRecord::decode(r)).collect()
}

/// Activates an incomplete subscription for its buyer, with its first period.
pub async fn activate(
    tx: &mut WriteTx,
    current: &SubscriptionRecord,
    buyer_ref: &Ref,
    stored_payment_method_ref: &Ref,
    period: (Timestamp, Timestamp),
    now: Timestamp,
) -> Result<SubscriptionRecord, StoreError> {
    let rows = tx
        .fetch(
            "UPDATE subscriptions SET status = $1, buyer_ref = $2, stored_payment_method_ref = $3, \
             current_period_start = $4, current_period_end = $5, started_at = $4, \
             updated_at = $6, version = version + 1 \
             WHERE subscription_ref = $7 AND version = $8 RETURNING *",
            &[
                SubscriptionStatus::Active.as_str().into(),
                buyer_ref.as_str().into(),
                stored_payment_method_ref.as_str().into(),
                period.0.millis().into(),
                period.1.millis().into(),
                now.millis().into(),
                current.subscription_ref.as_str().into(),
                current.version.into(),
            ],
        )
        .await?;
    SubscriptionRecord::decode(rows.first().ok_or(StoreError::Conflict)?)
}

#[derive(Debug, Clone)]
pub struct ChangeRecord {
    pub subscription_change_ref: Ref,
    pub environment_ref: Ref,
    pub subscription_ref: Ref,
    pub kind: ChangeKind,
    pub from_price_ref: Option<Ref>,
    pub to_price_ref: Option<Ref>,
    /// A `price_change`'s proration mode (contract 14.2); `None` for
    /// other kinds.
    pub proration: Option<domain::checkout::proration::ProrationMode>,
    pub effective_at: Timestamp,
    pub created_at: Timestamp,
    pub version: i64,
}

impl Resource for ChangeRecord {
    const TABLE: &'static str = "subscription_changes";
    const REF_COLUMN: &'static str = "subscription_change_ref";
    const FILTERS: &'static [(&'static str, &'static str)] =
        &[("subscription_ref", "subscription_ref")];

    fn decode(row: &dyn Columns) -> Result<Self, StoreError> {
        Ok(ChangeRecord {
            subscription_change_ref: reference(row, "subscription_change_ref")?,
            environment_ref: reference(row, "environment_ref")?,
            subscription_ref: reference(row, "subscription_ref")?,
            kind: state(row, "kind", ChangeKind::parse)?,
            from_price_ref: opt_reference(row, "from_price_ref")?,
            to_price_ref: opt_reference(row, "to_price_ref")?,
            proration: match row.text("proration")? {
                None => None,
                Some(p) => Some(
                    domain::checkout::proration::ProrationMode::parse(&p).ok_or_else(|| {
                        StoreError::Corrupt(format!("subscription change proration {p}"))
                    })?,
                ),
            },
            effective_at: at(row, "effective_at")?,
            created_at: at(row, "created_at")?,
            version: int(row, "version")?,
        })
    }
}

/// The `started` change of a subscription that just became active.
pub async fn started(
    tx: &mut WriteTx,
    subscription: &SubscriptionRecord,
    effective_at: Timestamp,
) -> Result<ChangeRecord, StoreError> {
    change(tx, subscription, ChangeKind::Started, effective_at).await
}

/// A change of `kind` to a subscription, effective at `effective_at`: the
/// price stays the one it started on.
pub async fn change(
    tx: &mut WriteTx,
    subscription: &SubscriptionRecord,
    kind: ChangeKind,
    effective_at: Timestamp,
) -> Result<ChangeRecord, StoreError> {
    let rows = tx
        .fetch(
            "INSERT INTO subscription_changes (subscription_change_ref, environment_ref, \
             subscription_ref, kind, to_price_ref, effective_at, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $6) RETURNING *",
            &[
                Ref::generate(Prefix::SubscriptionChange).as_str().into(),
                subscription.environment_ref.as_str().into(),
                subscription.subscription_ref.as_str().into(),
                kind.as_str().into(),
                subscription.price_ref.as_str().into(),
                effective_at.millis().into(),
            ],
        )
        .await?;
    ChangeRecord::decode(single(&rows)?)
}

/// A subscription read inside a unit of work that will move it.
pub async fn lock(
    tx: &mut WriteTx,
    subscription_ref: &Ref,
) -> Result<SubscriptionRecord, StoreError> {
    let rows = tx
        .fetch(
            "SELECT * FROM subscriptions WHERE subscription_ref = $1",
            &[subscription_ref.as_str().into()],
        )
        .await?;
    SubscriptionRecord::decode(rows.first().ok_or(StoreError::NotFound)?)
}

/// How a write moves a subscription; fields left `None` keep their value.
#[derive(Default)]
pub struct Move {
    pub status: Option<SubscriptionStatus>,
    pub period: Option<(Timestamp, Timestamp)>,
    pub cancel_at_period_end: Option<bool>,
    pub canceled: Option<CancelReason>,
}

/// Moves a subscription still at its read version, at `now`; `Conflict`
/// when another unit of work moved it meanwhile.
pub async fn update(
    tx: &mut WriteTx,
    current: &SubscriptionRecord,
    to: Move,
    now: Timestamp,
) -> Result<SubscriptionRecord, StoreError> {
    let status = to.status.unwrap_or(current.status);
    let (start, end) = match to.period {
        Some((s, e)) => (Some(s), Some(e)),
        None => (current.current_period_start, current.current_period_end),
    };
    let cancel_at_period_end = to
        .cancel_at_period_end
        .unwrap_or(current.cancel_at_period_end);
    let (reason, canceled_at) = match to.canceled {
        Some(r) => (Some(r), Some(now)),
        None => (current.cancel_reason, current.canceled_at),
    };
    let rows = tx
        .fetch(
            "UPDATE subscriptions SET status = $1, current_period_start = $2, \
             current_period_end = $3, cancel_at_period_end = $4, cancel_reason = $5, \
             canceled_at = $6, updated_at = $7, version = version + 1 \
             WHERE subscription_ref = $8 AND version = $9 RETURNING *",
            &[
                status.as_str().into(),
                start.map(Timestamp::millis).into(),
                end.map(Timestamp::millis).into(),
                i64::from(cancel_at_period_end).into(),
                reason.map(CancelReason::as_str).into(),
                canceled_at.map(Timestamp::millis).into(),
                now.millis().into(),
                current.subscription_ref.as_str().into(),
                current.version.into(),
            ],
        )
        .await?;
    SubscriptionRecord::decode(rows.first().ok_or(StoreError::Conflict)?)
}
