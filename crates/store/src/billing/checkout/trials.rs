//! Trials (contract 14.3): a paid session whose config offers one starts
//! its subscriptions `trialing`, with no payment, order or invoice; its
//! session is completed without a payment. One trial per buyer and
//! product: `had_subscription` tells whether the buyer ever had one.

use super::sessions::SessionRecord;
use super::subscriptions::SubscriptionRecord;
use crate::db::tx::{single, WriteTx};
use crate::resource::Resource;
use crate::StoreError;
use domain::checkout::states::{SessionStatus, SubscriptionStatus};
use domain::{Prefix, Ref, Timestamp};

/// Whether `buyer_ref` ever had a subscription (in any state) to
/// `product_ref`.
pub async fn had_subscription(
    tx: &mut WriteTx,
    buyer_ref: &Ref,
    product_ref: &str,
) -> Result<bool, StoreError> {
    let rows = tx
        .fetch(
            "SELECT subscription_ref FROM subscriptions WHERE buyer_ref = $1 \
             AND product_ref = $2 LIMIT 1",
            &[buyer_ref.as_str().into(), product_ref.into()],
        )
        .await?;
    Ok(!rows.is_empty())
}

/// A subscription that starts with a trial.
pub struct NewTrial<'a> {
    pub checkout_session_ref: &'a Ref,
    pub buyer_ref: &'a Ref,
    pub price_ref: &'a str,
    pub product_ref: &'a str,
    pub stored_payment_method_ref: &'a Ref,
    /// Its current period is the trial: from `now` to `trial_end`.
    pub trial_end: Timestamp,
    pub test_clock_ref: Option<&'a Ref>,
    pub now: Timestamp,
}

/// A `trialing` subscription, started at `now`.
pub async fn start(
    tx: &mut WriteTx,
    environment_ref: &Ref,
    new: NewTrial<'_>,
) -> Result<SubscriptionRecord, StoreError> {
    let rows = tx
        .fetch(
            "INSERT INTO subscriptions (subscription_ref, environment_ref, buyer_ref, price_ref, \
             product_ref, checkout_session_ref, status, current_period_start, \
             current_period_end, stored_payment_method_ref, started_at, created_at, updated_at, \
             test_clock_ref, trial_end) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $8, \
             $8, $8, $11, $9) RETURNING *",
            &[
                Ref::generate(Prefix::Subscription).as_str().into(),
                environment_ref.as_str().into(),
                new.buyer_ref.as_str().into(),
                new.price_ref.into(),
                new.product_ref.into(),
                new.checkout_session_ref.as_str().into(),
                SubscriptionStatus::Trialing.as_str().into(),
                new.now.millis().into(),
                new.trial_end.millis().into(),
                new.stored_payment_method_ref.as_str().into(),
                new.test_clock_ref.map(Ref::as_str).into(),
            ],
        )
        .await?;
    SubscriptionRecord::decode(single(&rows)?)
}

/// Completes a claimed session whose pay started a trial: no payment.
/// `Conflict` when another pay changed it meanwhile.
pub async fn complete_session(
    tx: &mut WriteTx,
    current: &SessionRecord,
    buyer_ref: &Ref,
    subscription_ref: Option<&Ref>,
    now: Timestamp,
) -> Result<SessionRecord, StoreError> {
    let rows = tx
        .fetch(
            "UPDATE checkout_sessions SET status = $1, buyer_ref = $2, subscription_ref = $3, \
             completed_at = $4, updated_at = $4, version = version + 1 \
             WHERE checkout_session_ref = $5 AND version = $6 AND status = $7 RETURNING *",
            &[
                SessionStatus::Complete.as_str().into(),
                buyer_ref.as_str().into(),
                subscription_ref.map(Ref::as_str).into(),
                now.millis().into(),
                current.checkout_session_ref.as_str().into(),
                current.version.into(),
                SessionStatus::Open.as_str().into(),
            ],
        )
        .await?;
    SessionRecord::decode(rows.first().ok_or(StoreError::Conflict)?)
}
