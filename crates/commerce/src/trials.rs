//! Trials (contract 14.3). Paying a session whose config offers a trial
//! keeps the payment method and charges nothing: no payment, order or
//! invoice; each recurring line item starts a `trialing` subscription whose
//! current period is the trial (start to `trial_end`), and the session is
//! completed. Events `checkout_session.completed`, `subscription.started`.
//!
//! One trial per buyer and product: a buyer who ever had a subscription to
//! one of the session's products gets none, and `pay` charges at once
//! (`start` answers `None`). A trial makes no order, so it grants no
//! entitlement: the first paid period does (`crate::renewals`).
//!
//! Timed work, on the subscription's clock: `subscription.trial_will_end`
//! 3 days before `trial_end` (`WILL_END`; emitted in the pay's own unit
//! when the trial is shorter), and at `trial_end` the period end
//! (`timed::RENEW`, run by `crate::renewals`), which charges the first period through the renewal
//! path: `active` when paid, dunning (`past_due`) when declined.

use crate::events::{checkout_key, Batch};
use crate::pay::Paid;
use crate::shapes::checkout::step;
use crate::shapes::Served;
use crate::timed::schedule_period_end;
pub use crate::timed::WILL_END;
use crate::CommerceError;
use domain::checkout::buyer::Email;
use domain::checkout::sandbox::Card;
use domain::checkout::states::{PayResult, StepKind, SubscriptionStatus};
use domain::webhook::shaping::Scope;
use domain::{Ref, Timestamp};
use store::billing::checkout::buyers::{self, BuyerOf};
use store::billing::checkout::entitlements;
use store::billing::checkout::journeys;
use store::billing::checkout::methods;
use store::billing::checkout::orders::{self, NewOrder, OrderRecord};
use store::billing::checkout::payments::PaymentRecord;
use store::billing::checkout::sessions::SessionRecord;
use store::billing::checkout::subscriptions::{self, SubscriptionRecord};
use store::billing::checkout::trials::{self, NewTrial};
use store::billing::jobs::{self, Job};
use store::{StoreError, WriteTx};

/// How long before `trial_end` it fires.
pub const WARN_BEFORE_SECONDS: i64 = 3 * 86_400;

/// The card a trial keeps: a sandbox card, or a stored method of the buyer.
pub struct TrialMethod<'a> {
    pub method: &'a str,
    pub card: &'a Card,
    pub stored: Option<&'a Ref>,
}

/// When a trial of `days` started at `start` ends.
pub fn trial_end(start: Timestamp, days: u32) -> Timestamp {
    start.plus_seconds(i64::from(days) * 86_400)
}

/// Starts the trial of a claimed `session` whose config offers one, at
/// `now`, in `tx`; `None` when its buyer had a subscription to one of its
/// products before (no trial: the caller charges at once).
pub async fn start(
    tx: &mut WriteTx,
    env: &Ref,
    session: &SessionRecord,
    email: &Email,
    method: TrialMethod<'_>,
    now: Timestamp,
) -> Result<Option<Paid>, CommerceError> {
    let buyer = buyers::find_or_create(
        tx,
        env,
        BuyerOf {
            email,
            name: session.buyer_name.as_deref(),
            test_clock_ref: session.test_clock_ref.as_ref(),
            now,
        },
    )
    .await?;
    let buyer_ref = &buyer.buyer_ref;
    for product_ref in session.product_refs() {
        if trials::had_subscription(tx, buyer_ref, &product_ref).await? {
            return Ok(None);
        }
    }
    let spm = match method.stored {
        Some(r) => r.clone(),
        None => {
            methods::store(tx, env, buyer_ref, method.method, method.card, now)
                .await?
                .stored_payment_method_ref
        }
    };
    let end = trial_end(now, session.trial_period_days);
    let mut started = Vec::new();
    for item in &session.line_items {
        if item.recurrence()?.interval().is_none() {
            continue;
        }
        let new = NewTrial {
            checkout_session_ref: &session.checkout_session_ref,
            buyer_ref,
            price_ref: &item.price_ref,
            product_ref: &item.product_ref,
            stored_payment_method_ref: &spm,
            trial_end: end,
            test_clock_ref: session.test_clock_ref.as_ref(),
            now,
        };
        let s = trials::start(tx, env, new).await?;
        subscriptions::started(tx, &s, now).await?;
        schedule_period_end(tx, &s).await?;
        started.push(s);
    }
    let first = started.first().map(|s| &s.subscription_ref);
    let completed = trials::complete_session(tx, session, buyer_ref, first, now).await?;
    let steps: Vec<_> = started
        .iter()
        .map(|_| step(StepKind::SubscriptionStarted, now, None))
        .collect();
    journeys::add_steps(tx, &completed.journey_ref, &steps, Some(buyer_ref)).await?;
    let scope = Scope {
        product_refs: session.product_refs(),
        buyer_ref: Some(buyer_ref.to_string()),
        beneficiary_business_ref: None,
    };
    let mut events = Batch::new(env, scope, now);
    events.add("checkout_session.completed", &completed.dto(now))?;
    for s in &started {
        events.add("subscription.started", &s.dto(now))?;
    }
    for s in &started {
        let warn_at = end.plus_seconds(-WARN_BEFORE_SECONDS);
        if warn_at <= now {
            events.add(WILL_END, &s.dto(now))?;
        } else {
            let clock = s.test_clock_ref.as_ref();
            jobs::schedule_on(tx, WILL_END, &s.subscription_ref, env, warn_at, clock).await?;
        }
    }
    events.set_key(&checkout_key(tx, &session.checkout_session_ref).await?);
    events.flush(tx).await?;
    Ok(Some(Paid {
        result: PayResult::SubscriptionStarted,
        payment: None,
        subscription: started.into_iter().next(),
        session: completed,
    }))
}

/// The warning before a trial ends (`WILL_END`), at `now`: event
/// `subscription.trial_will_end` when the subscription still trials.
pub async fn will_end(tx: &mut WriteTx, job: &Job, now: Timestamp) -> Result<(), CommerceError> {
    let sub: SubscriptionRecord = subscriptions::lock(tx, &job.subject_ref).await?;
    if sub.status != SubscriptionStatus::Trialing {
        return Ok(());
    }
    let scope = Scope {
        product_refs: vec![sub.product_ref.to_string()],
        buyer_ref: sub.buyer_ref.as_ref().map(Ref::to_string),
        beneficiary_business_ref: None,
    };
    let mut events = Batch::new(&sub.environment_ref, scope, now).keyed(&sub.subscription_ref);
    events.add(WILL_END, &sub.dto(now))?;
    events.flush(tx).await
}

/// The order a renewal bills under: the one its session completed with,
/// or, for the first charge of a trial (whose pay made none), one made
/// now from that charge's `payment`, with the session's entitlements
/// granted (kept through dunning, revoked when it cancels, as for an
/// active subscription); events `order.created`, `entitlement.granted`.
pub async fn order_of(
    tx: &mut WriteTx,
    sub: &SubscriptionRecord,
    session: &SessionRecord,
    payment: &PaymentRecord,
    events: &mut Batch,
) -> Result<OrderRecord, CommerceError> {
    match orders::of_session(tx, &sub.checkout_session_ref).await {
        Err(StoreError::NotFound) if sub.trial_end.is_some() => {}
        found => return Ok(found?),
    }
    let now = events.now();
    let buyer_ref = sub
        .buyer_ref
        .as_ref()
        .ok_or_else(|| CommerceError::broken("a trial without a buyer"))?;
    let order = orders::create(
        tx,
        &sub.environment_ref,
        NewOrder {
            checkout_session_ref: &session.checkout_session_ref,
            buyer_ref,
            payment_intent_ref: &payment.payment_intent_ref,
            line_items: &session.line_items,
            amount_total: session.amount_total,
        },
        now,
    )
    .await?;
    events.add("order.created", &order.dto(now))?;
    for product_ref in session.product_refs() {
        let env = &sub.environment_ref;
        let granted =
            entitlements::grant(tx, env, buyer_ref, &product_ref, &order.order_ref, now).await?;
        events.add("entitlement.granted", &granted.dto(now))?;
    }
    Ok(order)
}
