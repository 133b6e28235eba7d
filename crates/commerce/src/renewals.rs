//! Subscriptions over time (contract 12.4), as timed work run by
//! `crate::jobs`: a subscription's period end (`RENEW`: renew it, or cancel
//! it when it was set to cancel then), the retries of a declined renewal
//! (`RETRY`, on `billing.dunning_schedule`), and a cancel asked for now
//! (`cancel_now`). A test clock's advance runs these at the clock's time
//! (`crate::test_clocks`).
//!
//! Each renewal, retry or cancel is written with its events and the
//! deletion of its job in one unit of work (`jobs::run_in`; jobs due at the
//! same time share one, `jobs::run_group`), so a crash leaves all of it or
//! none of it and it runs once with any number of runners. The rules (which period comes next, what a card answers, when
//! to retry) are `domain::checkout`'s; this module writes what they decide.

use crate::events::Batch;
use crate::shapes::Served;
use crate::timed::{schedule_period_end, Rules};
pub use crate::timed::{RENEW, RETRY};
use crate::CommerceError;
use domain::checkout::renewal::{next_period_end, AtPeriodEnd};
use domain::checkout::sandbox::{Outcome, TestCard};
use domain::checkout::states::{
    CancelReason, ChangeKind, FailureCode, PaymentStatus, StoredMethodStatus, SubscriptionStatus,
};
use domain::webhook::shaping::Scope;
use domain::{Money, Ref, Timestamp};
use store::billing::checkout::entitlements;
use store::billing::checkout::methods::StoredMethodRecord;
use store::billing::checkout::orders::{self, InvoiceRecord, RenewalInvoice, Retried};
use store::billing::checkout::payments::{self, NewPayment, PaymentRecord};
use store::billing::checkout::sessions::SessionRecord;
use store::billing::checkout::subscriptions::{self, Move, SubscriptionRecord};
use store::billing::checkout::PricedItem;
use store::billing::jobs::{self, Job};
use store::{Store, StoreError, WriteTx};

/// The events of a unit of work on `s`, at `now`: they concern its product
/// and buyer.
fn events_of(s: &SubscriptionRecord, now: Timestamp) -> Batch {
    let scope = Scope {
        product_refs: vec![s.product_ref.to_string()],
        buyer_ref: s.buyer_ref.as_ref().map(Ref::to_string),
        beneficiary_business_ref: None,
    };
    Batch::new(&s.environment_ref, scope, now).keyed(&s.subscription_ref)
}

/// A subscription's period end (`RENEW`), at `now`.
pub async fn period_end(
    store: &Store,
    rules: &Rules,
    tx: &mut WriteTx,
    job: &Job,
    now: Timestamp,
) -> Result<(), CommerceError> {
    let sub = subscriptions::lock(tx, &job.subject_ref).await?;
    // A job left from a period that is no longer the current one (its end
    // moved on) has nothing to do.
    if sub.current_period_end.is_none_or(|end| end > now) {
        return Ok(());
    }
    let mut events = events_of(&sub, now);
    match sub.status.at_period_end(sub.cancel_at_period_end) {
        None => return Ok(()),
        Some(AtPeriodEnd::Cancel) => {
            cancel(tx, &sub, CancelReason::Requested, &mut events).await?;
        }
        Some(AtPeriodEnd::Renew) => renew(store, rules, tx, &sub, &mut events).await?,
    }
    events.flush(tx).await
}

/// What a renewal charges (`charge_of`).
struct Priced {
    /// For the buyer's contact.
    session: SessionRecord,
    /// The subscription's line item as its session priced it.
    item: PricedItem,
    /// The price it started on, times its quantity.
    amount: Money,
    interval: domain::catalogue::Interval,
}

/// What a renewal charges: the subscription's line item as its session
/// priced it (the price it started on, times its quantity; after a price
/// change, the new price times it), and the session for the buyer's
/// contact.
async fn charge_of(store: &Store, sub: &SubscriptionRecord) -> Result<Priced, CommerceError> {
    let session: SessionRecord = store
        .get(&sub.environment_ref, &sub.checkout_session_ref)
        .await?;
    // After a price change, its current price (`crate::changes`).
    let item = crate::changes::current_item(store, sub, &session).await?;
    let interval = item
        .recurrence()?
        .interval()
        .ok_or_else(|| CommerceError::broken("a subscription of a one-time item"))?;
    let amount = Money::new(session.amount_total.currency(), item.amount)
        .map_err(|e| CommerceError::broken(e.to_string()))?;
    Ok(Priced {
        session,
        item,
        amount,
        interval,
    })
}

/// Charges the subscription's stored method through the sandbox processor
/// at `events.now` and records the payment (captured when it succeeded).
pub(crate) async fn charge(
    store: &Store,
    tx: &mut WriteTx,
    sub: &SubscriptionRecord,
    session: &SessionRecord,
    amount: Money,
    now: Timestamp,
) -> Result<PaymentRecord, CommerceError> {
    let spm = sub
        .stored_payment_method_ref
        .as_ref()
        .ok_or_else(|| CommerceError::broken("an active subscription without a method"))?;
    let method: StoredMethodRecord = store.get(&sub.environment_ref, spm).await?;
    let outcome = match TestCard::parse(&method.method) {
        Some(card) if method.status == StoredMethodStatus::Active => card.renewal_outcome(),
        _ => Outcome::Failed(FailureCode::CardDeclined),
    };
    let succeeded = outcome.status() == PaymentStatus::Succeeded;
    let product_refs = [sub.product_ref.to_string()];
    let new = NewPayment {
        checkout_session_ref: &sub.checkout_session_ref,
        buyer_ref: sub.buyer_ref.as_ref(),
        buyer_email: &session.buyer_email,
        buyer_name: session.buyer_name.as_deref(),
        amount,
        status: outcome.status(),
        failure_code: outcome.failure_code(),
        method: &method.method,
        card: &method.card,
        save_method: true,
        stored_payment_method_ref: Some(spm),
        product_refs: &product_refs,
        action_expires_at: None,
        captured_at: succeeded.then_some(now),
        at: now,
    };
    let payment = payments::create(tx, &sub.environment_ref, new).await?;
    if succeeded {
        payments::capture(tx, &payment, now).await?;
    }
    Ok(payment)
}

/// Renews an active subscription at its period's end: the charge, the
/// invoice (a `period` line of the next period; its number taken at the
/// commit), the next period; a decline makes it
/// `past_due` with an open invoice that dunning retries.
async fn renew(
    store: &Store,
    rules: &Rules,
    tx: &mut WriteTx,
    sub: &SubscriptionRecord,
    events: &mut Batch,
) -> Result<(), CommerceError> {
    let now = events.now();
    let Priced {
        session,
        item,
        amount,
        interval,
    } = charge_of(store, sub).await?;
    let current_end = sub
        .current_period_end
        .ok_or_else(|| CommerceError::broken("an active subscription without a period"))?;
    let anchor = sub.periods_from().unwrap_or(current_end);
    let period = (current_end, next_period_end(anchor, interval, current_end));
    let lines = crate::lines::of_renewal(&item, amount.currency(), period)?;
    // Pending change lines and the buyer's credit first (contract 14.2).
    let lines = crate::changes::renewal_lines(tx, sub, lines, now).await?;
    if lines.total().minor() == 0 && sub.status == SubscriptionStatus::Active {
        return crate::changes::renew_covered(tx, sub, &lines, period, events).await;
    }
    let payment = charge(store, tx, sub, &session, lines.total(), now).await?;
    let order = crate::trials::order_of(tx, sub, &session, &payment, events).await?;
    let paid = payment.status == PaymentStatus::Succeeded;
    let invoice = orders::renewal_invoice(
        tx,
        RenewalInvoice {
            order: &order,
            subscription_ref: &sub.subscription_ref,
            lines: &lines,
            paid_by: paid.then_some(&payment.payment_intent_ref),
            now,
        },
    )
    .await?;
    let status = if paid {
        SubscriptionStatus::Active
    } else {
        SubscriptionStatus::PastDue
    };
    let moved = Move {
        status: Some(status),
        period: Some(period),
        ..Move::default()
    };
    let renewed = subscriptions::update(tx, sub, moved, now).await?;
    subscriptions::change(tx, &renewed, ChangeKind::Renewal, now).await?;
    if paid {
        schedule_period_end(tx, &renewed).await?;
        events.add("payment.succeeded", &payment.dto(now))?;
        events.add_new_invoice("invoice.paid", &invoice)?;
        events.add("subscription.renewed", &renewed.dto(now))?;
        return Ok(());
    }
    events.add("payment.failed", &payment.dto(now))?;
    events.add("subscription.past_due", &renewed.dto(now))?;
    events.add_new_invoice("invoice.payment_failed", &invoice)?;
    match rules
        .dunning
        .retry_at(invoice.issued_at, invoice.attempt_count)
    {
        Some(at) => schedule_retry(tx, &renewed, at).await?,
        None => give_up(tx, &renewed, &invoice, events).await?,
    }
    Ok(())
}

async fn schedule_retry(
    tx: &mut WriteTx,
    s: &SubscriptionRecord,
    at: Timestamp,
) -> Result<(), StoreError> {
    let clock = s.test_clock_ref.as_ref();
    jobs::schedule_on(
        tx,
        RETRY,
        &s.subscription_ref,
        &s.environment_ref,
        at,
        clock,
    )
    .await
}

/// The dunning schedule ran out: the invoice is `uncollectible` and the
/// subscription `canceled` for nonpayment.
async fn give_up(
    tx: &mut WriteTx,
    sub: &SubscriptionRecord,
    invoice: &InvoiceRecord,
    events: &mut Batch,
) -> Result<(), CommerceError> {
    // The invoice was written by this unit of work: marking it does not
    // count another try.
    orders::uncollectible(tx, invoice).await?;
    give_credit_back(tx, invoice, events.now()).await?;
    cancel(tx, sub, CancelReason::Nonpayment, events).await?;
    Ok(())
}

/// An invoice that ends `uncollectible` gives back to the buyer's credit
/// balance what the balance paid of it (`credit_applied`): the buyer never
/// loses credit to a charge that never happened.
async fn give_credit_back(
    tx: &mut WriteTx,
    invoice: &InvoiceRecord,
    now: Timestamp,
) -> Result<(), CommerceError> {
    let used = invoice
        .lines
        .credit_used()
        .map_err(|e| CommerceError::broken(format!("invoice {}: {e}", invoice.invoice_ref)))?;
    if used.minor() > 0 {
        let env = &invoice.environment_ref;
        store::billing::checkout::credit::add(tx, env, &invoice.buyer_ref, used, now).await?;
    }
    Ok(())
}

/// A retry of a declined renewal (`RETRY`), at `now`.
pub async fn retry(
    store: &Store,
    rules: &Rules,
    tx: &mut WriteTx,
    job: &Job,
    now: Timestamp,
) -> Result<(), CommerceError> {
    let sub = subscriptions::lock(tx, &job.subject_ref).await?;
    if sub.status != SubscriptionStatus::PastDue {
        return Ok(());
    }
    let Some(invoice) = orders::open_of_subscription(tx, &sub.subscription_ref).await? else {
        return Ok(());
    };
    let mut events = events_of(&sub, now);
    let Priced { session, .. } = charge_of(store, &sub).await?;
    let payment = charge(store, tx, &sub, &session, invoice.amount_total, now).await?;
    if payment.status == PaymentStatus::Succeeded {
        let paid = Retried::Paid(&payment.payment_intent_ref);
        let invoice = orders::retried(tx, &invoice, paid, now).await?;
        let moved = Move {
            status: Some(SubscriptionStatus::Active),
            ..Move::default()
        };
        let active = subscriptions::update(tx, &sub, moved, now).await?;
        schedule_period_end(tx, &active).await?;
        events.add("payment.succeeded", &payment.dto(now))?;
        events.add("invoice.paid", &invoice.dto(now))?;
        events.add("subscription.renewed", &active.dto(now))?;
        return events.flush(tx).await;
    }
    events.add("payment.failed", &payment.dto(now))?;
    let tried = invoice.attempt_count.saturating_add(1);
    match rules.dunning.retry_at(invoice.issued_at, tried) {
        Some(at) => {
            let invoice = orders::retried(tx, &invoice, Retried::Declined, now).await?;
            events.add("invoice.payment_failed", &invoice.dto(now))?;
            schedule_retry(tx, &sub, at).await?;
        }
        None => {
            let invoice = orders::retried(tx, &invoice, Retried::Uncollectible, now).await?;
            give_credit_back(tx, &invoice, now).await?;
            events.add("invoice.payment_failed", &invoice.dto(now))?;
            cancel(tx, &sub, CancelReason::Nonpayment, &mut events).await?;
        }
    }
    events.flush(tx).await
}

/// Cancels a subscription at `events.now`: its `canceled` change, its
/// entitlements revoked, its timed work dropped, an open invoice left
/// `uncollectible`; events `subscription.canceled` and
/// `entitlement.revoked`.
async fn cancel(
    tx: &mut WriteTx,
    sub: &SubscriptionRecord,
    reason: CancelReason,
    events: &mut Batch,
) -> Result<SubscriptionRecord, CommerceError> {
    let now = events.now();
    let moved = Move {
        status: Some(SubscriptionStatus::Canceled),
        canceled: Some(reason),
        ..Move::default()
    };
    let canceled = subscriptions::update(tx, sub, moved, now).await?;
    subscriptions::change(tx, &canceled, ChangeKind::Canceled, now).await?;
    jobs::cancel(tx, RENEW, &sub.subscription_ref).await?;
    jobs::cancel(tx, RETRY, &sub.subscription_ref).await?;
    if let Some(open) = orders::open_of_subscription(tx, &sub.subscription_ref).await? {
        orders::uncollectible(tx, &open).await?;
        give_credit_back(tx, &open, now).await?;
    }
    let revoked = match orders::of_session(tx, &sub.checkout_session_ref).await {
        Ok(order) => {
            entitlements::revoke_of_subscription(tx, &order.order_ref, &sub.product_ref, now)
                .await?
        }
        // A subscription canceled before its first payment has no order.
        Err(StoreError::NotFound) => Vec::new(),
        Err(e) => return Err(e.into()),
    };
    events.add("subscription.canceled", &canceled.dto(now))?;
    for entitlement in &revoked {
        events.add("entitlement.revoked", &entitlement.dto(now))?;
    }
    Ok(canceled)
}

/// Cancels a subscription now, for `cancelSubscription`, with its events.
pub async fn cancel_now(
    tx: &mut WriteTx,
    sub: &SubscriptionRecord,
    now: Timestamp,
) -> Result<SubscriptionRecord, CommerceError> {
    let mut events = events_of(sub, now);
    let canceled = cancel(tx, sub, CancelReason::Requested, &mut events).await?;
    events.flush(tx).await?;
    Ok(canceled)
}
