//! A subscription's price change (contract 14.2): `changeSubscription` and
//! its preview, and what later renewals do with what a change left (the
//! buyer's credit balance, a subscription's pending lines).
//!
//! [`plan`] is the one computation both the preview and the change run: it
//! takes the subscription, its current and new priced items, the mode, the
//! buyer's balance and the instant, and returns the lines
//! (`domain::checkout::proration::plan_change`), so the change made at the
//! same (clock) time yields exactly the lines its preview showed. [`change`]
//! then writes in the request's one unit of work: the charge (a decline
//! records the failed payment and changes nothing else, answered
//! `CommerceError::PaymentDeclined`), the invoice, the credit balance, the
//! new price (and period, when the interval differs), the `price_change`
//! record, the entitlements when the product changes, and the events
//! (`subscription.changed` carries `from_price_ref` and `to_price_ref`).
//!
//! Renewals ([`renewal_lines`]) add a subscription's pending lines to their
//! invoice and apply the buyer's credit balance first (`credit_applied`);
//! an invoice the balance covers is paid without a charge ([`renew_covered`]).

use crate::events::Batch;
use crate::shapes::checkout::SubscriptionDto;
use crate::shapes::Served;
use crate::CommerceError;
use domain::catalogue::{Interval, PriceStatus};
use domain::checkout::lines::{apply_credit, InvoiceLine, InvoiceLines, LinePeriod};
use domain::checkout::period::period_end;
use domain::checkout::proration::{
    plan_change, ChangeOutcome, NewPeriod, PriceChange, PricedPeriod, ProrationMode,
};
use domain::checkout::renewal::next_period_end;
use domain::checkout::states::{ChangeKind, PaymentStatus, SubscriptionStatus};
use domain::webhook::shaping::Scope;
use domain::{Currency, Money, Ref, Timestamp};
use serde::Serialize;
use store::billing::checkout::orders::{self, RenewalInvoice};
use store::billing::checkout::price_changes::{self, PriceMove};
use store::billing::checkout::sessions::SessionRecord;
use store::billing::checkout::subscriptions::{self, Move, SubscriptionRecord};
use store::billing::checkout::{credit, entitlements, PricedItem};
use store::billing::jobs;
use store::billing::prices::PriceRecord;
use store::{Store, StoreError, WriteTx};

fn broken(e: impl std::fmt::Display) -> CommerceError {
    CommerceError::broken(format!("price change: {e}"))
}

/// What a change asks for.
#[derive(Debug, Clone)]
pub struct ChangeAsk {
    pub price_ref: Ref,
    pub proration: ProrationMode,
}

/// The subscription's line item as it charges now: as its session priced
/// it while it is on the price it started on, else its current price (from
/// the catalogue) times the quantity it was bought in.
pub(crate) async fn current_item(
    store: &Store,
    sub: &SubscriptionRecord,
    session: &SessionRecord,
) -> Result<PricedItem, CommerceError> {
    if let Some(item) = session
        .line_items
        .iter()
        .find(|i| i.price_ref == sub.price_ref.as_str())
    {
        return Ok(item.clone());
    }
    let price: PriceRecord = store.get(&sub.environment_ref, &sub.price_ref).await?;
    item_of(&price, quantity_of(sub, session))
}

/// How many the subscription was bought in: its session's line item of its
/// product, or its one recurring line item; 1 when neither says.
fn quantity_of(sub: &SubscriptionRecord, session: &SessionRecord) -> u32 {
    let recurring = || {
        let mut r = session.line_items.iter().filter(|i| i.interval.is_some());
        match (r.next(), r.next()) {
            (Some(one), None) => Some(one.quantity),
            _ => None,
        }
    };
    session
        .line_items
        .iter()
        .find(|i| i.product_ref == sub.product_ref.as_str())
        .map(|i| i.quantity)
        .or_else(recurring)
        .unwrap_or(1)
}

/// `price` times `quantity` as a line item.
fn item_of(price: &PriceRecord, quantity: u32) -> Result<PricedItem, CommerceError> {
    let unit = price.amount.minor();
    let amount = unit
        .checked_mul(u64::from(quantity))
        .ok_or_else(|| CommerceError::refused("the new price times the quantity is too large"))?;
    Money::new(price.amount.currency(), amount)?;
    Ok(PricedItem {
        offer_ref: String::new(),
        price_ref: price.price_ref.to_string(),
        product_ref: price.product_ref.to_string(),
        quantity,
        unit_amount: unit,
        amount,
        price_type: price.recurrence.price_type().as_str().to_owned(),
        interval: price.recurrence.interval().map(|i| i.as_str().to_owned()),
    })
}

fn interval_of(item: &PricedItem) -> Result<Interval, CommerceError> {
    item.recurrence()?
        .interval()
        .ok_or_else(|| broken("a subscription of a one-time item"))
}

/// What a change reads before it plans: the session (for the buyer's
/// contact), the current and the new items, the currency.
pub struct Loaded {
    pub session: SessionRecord,
    pub current: PricedItem,
    pub to: PricedItem,
    pub to_product_ref: Ref,
    pub currency: Currency,
}

/// Reads and checks what a change of `sub` to `ask.price_ref` needs: the
/// price is published, recurring, in the subscription's currency and not
/// its current one; the subscription is `active` (or `trialing`).
pub async fn load(
    store: &Store,
    sub: &SubscriptionRecord,
    ask: &ChangeAsk,
) -> Result<Loaded, CommerceError> {
    if !matches!(sub.status.as_str(), "active" | "trialing") {
        return Err(CommerceError::refused(format!(
            "a {} subscription cannot change its price",
            sub.status.as_str()
        )));
    }
    let price: PriceRecord = crate::error::found(
        store.get(&sub.environment_ref, &ask.price_ref).await,
        "price",
    )?;
    if price.price_ref == sub.price_ref {
        return Err(CommerceError::refused(
            "the subscription is already on this price",
        ));
    }
    if price.status != PriceStatus::Published {
        return Err(CommerceError::refused(format!(
            "the price is {}, not published",
            price.status.as_str()
        )));
    }
    if !price.recurrence.is_recurring() {
        return Err(CommerceError::refused("the price is not recurring"));
    }
    let session: SessionRecord = store
        .get(&sub.environment_ref, &sub.checkout_session_ref)
        .await?;
    let currency = session.amount_total.currency();
    if price.amount.currency() != currency {
        return Err(CommerceError::refused(format!(
            "the price is in {}, the subscription in {}",
            price.amount.currency().as_str(),
            currency.as_str()
        )));
    }
    let current = current_item(store, sub, &session).await?;
    let to = item_of(&price, quantity_of(sub, &session))?;
    Ok(Loaded {
        session,
        current,
        to,
        to_product_ref: price.product_ref,
        currency,
    })
}

/// A change planned: what it charges, credits or leaves pending.
#[derive(Debug, Clone)]
pub struct Plan {
    pub mode: ProrationMode,
    pub at: Timestamp,
    /// The subscription's period after the change.
    pub period: (Timestamp, Timestamp),
    /// Whether the period restarts at the change (another interval).
    pub restarts: bool,
    pub outcome: ChangeOutcome,
    /// The buyer's balance before the change.
    pub balance: Money,
    /// What the next renewal's invoice has before credit: the new price's
    /// period and every pending line after the change.
    pub next_lines: Vec<InvoiceLine>,
    pub currency: Currency,
}

impl Plan {
    /// The lines the change makes (its invoice's) or leaves pending.
    pub fn lines(&self) -> Vec<InvoiceLine> {
        self.outcome.lines()
    }

    /// What is charged at once.
    pub fn amount_total(&self) -> Money {
        self.outcome.charged_now(self.currency)
    }

    /// The buyer's credit balance after the change.
    pub fn credit_balance_after(&self) -> Money {
        match &self.outcome {
            ChangeOutcome::Invoice { credit, .. } => credit.balance_after,
            ChangeOutcome::ToCreditBalance { balance_after, .. } => *balance_after,
            _ => self.balance,
        }
    }

    /// When the next renewal comes and what it will charge, the balance
    /// after the change applied (as the renewal applies it), if nothing
    /// else changes meanwhile.
    pub fn next_renewal(&self) -> Result<(Timestamp, Money), CommerceError> {
        let sum: i128 = self.next_lines.iter().map(|l| i128::from(l.amount())).sum();
        let total = Money::new(self.currency, u64::try_from(sum.max(0)).map_err(broken)?)?;
        let credited = apply_credit(total, self.credit_balance_after()).map_err(broken)?;
        Ok((self.period.1, credited.total_after))
    }
}

/// The one computation of a change and its preview: `sub` (its current
/// period) from `loaded.current` to `loaded.to` under `mode` at `at`, for
/// a buyer whose balance is `balance`.
pub fn plan(
    sub: &SubscriptionRecord,
    loaded: &Loaded,
    mode: ProrationMode,
    balance: Money,
    at: Timestamp,
) -> Result<Plan, CommerceError> {
    let (Some(start), Some(end)) = (sub.current_period_start, sub.current_period_end) else {
        return Err(broken("an active subscription without a period"));
    };
    if at < start || at > end {
        return Err(CommerceError::refused(
            "the change falls outside the subscription's current period",
        ));
    }
    // A trial charged nothing: there is nothing to prorate (contract 14.3;
    // its conversion charges the new price).
    let mode = if sub.status.as_str() == "trialing" {
        ProrationMode::None
    } else {
        mode
    };
    let currency = loaded.currency;
    let from_interval = interval_of(&loaded.current)?;
    let to_interval = interval_of(&loaded.to)?;
    let restarts = from_interval != to_interval;
    let period = if restarts {
        (at, period_end(at, to_interval))
    } else {
        (start, end)
    };
    let change = PriceChange {
        from: PricedPeriod {
            price_ref: Ref::from_trusted(loaded.current.price_ref.clone()),
            amount: Money::new(currency, loaded.current.amount)?,
        },
        to: PricedPeriod {
            price_ref: Ref::from_trusted(loaded.to.price_ref.clone()),
            amount: Money::new(currency, loaded.to.amount)?,
        },
        period: LinePeriod::new(start, end).map_err(broken)?,
        at,
        new_period: if restarts {
            NewPeriod::Restarts { end: period.1 }
        } else {
            NewPeriod::SameInterval
        },
    };
    let outcome = plan_change(&change, mode, balance).map_err(|e| match e {
        domain::checkout::ProrationError::CurrencyMismatch => {
            CommerceError::refused("the prices and the balance are in different currencies")
        }
        e => broken(e),
    })?;
    // The renewal after the change counts from where its periods do, as
    // `renewals::renew` will, so that the preview's next invoice is the
    // one the renewal makes.
    let anchor = if restarts {
        at
    } else {
        sub.periods_from().unwrap_or(start)
    };
    let next_period = (period.1, next_period_end(anchor, to_interval, period.1));
    let mut next_lines = vec![crate::lines::line_of(
        &loaded.to,
        currency,
        Some(next_period),
    )?];
    next_lines.extend(sub.pending_invoice_lines.iter().cloned());
    if let ChangeOutcome::NextInvoice { proration } = &outcome {
        next_lines.extend(proration.lines());
    }
    Ok(Plan {
        mode,
        at,
        period,
        restarts,
        outcome,
        balance,
        next_lines,
        currency,
    })
}

/// The event `subscription.changed`: the subscription after the change,
/// with the price it left and the one it moved to.
#[derive(Debug, Serialize)]
pub struct ChangedDto {
    #[serde(flatten)]
    pub subscription: SubscriptionDto,
    pub from_price_ref: String,
    pub to_price_ref: String,
}

/// The events of a change of `sub`, at `now`: they concern both products
/// and the buyer, in the subscription's order.
fn events_of(sub: &SubscriptionRecord, to_product: &Ref, now: Timestamp) -> Batch {
    let mut product_refs = vec![sub.product_ref.to_string()];
    if to_product != &sub.product_ref {
        product_refs.push(to_product.to_string());
    }
    let scope = Scope {
        product_refs,
        buyer_ref: sub.buyer_ref.as_ref().map(Ref::to_string),
        beneficiary_business_ref: None,
    };
    Batch::new(&sub.environment_ref, scope, now).keyed(&sub.subscription_ref)
}

/// Changes `sub` (read at the version the caller checked) as `ask` says, at
/// `now` (its clock's time), in the request's unit of work.
pub async fn change(
    store: &Store,
    tx: &mut WriteTx,
    sub: &SubscriptionRecord,
    ask: &ChangeAsk,
    now: Timestamp,
) -> Result<SubscriptionRecord, CommerceError> {
    let loaded = load(store, sub, ask).await?;
    let buyer = sub
        .buyer_ref
        .clone()
        .ok_or_else(|| broken("an active subscription without a buyer"))?;
    let balance = credit::balance(tx, &buyer, loaded.currency).await?;
    let plan = plan(sub, &loaded, ask.proration, balance, now)?;
    debug_assert!(plan.mode == ask.proration || sub.status.as_str() == "trialing");
    let mut events = events_of(sub, &loaded.to_product_ref, now);
    let mut pending = sub.pending_invoice_lines.clone();
    match &plan.outcome {
        ChangeOutcome::Invoice { lines, credit, .. } => {
            let payment = if credit.total_after.minor() > 0 {
                let payment = crate::renewals::charge(
                    store,
                    tx,
                    sub,
                    &loaded.session,
                    credit.total_after,
                    now,
                )
                .await?;
                if payment.status != PaymentStatus::Succeeded {
                    events.add("payment.failed", &payment.dto(now))?;
                    events.flush(tx).await?;
                    return Err(CommerceError::PaymentDeclined);
                }
                events.add("payment.succeeded", &payment.dto(now))?;
                Some(payment)
            } else {
                None
            };
            credit::take(tx, &buyer, credit.applied, now).await?;
            let order = orders::of_session(tx, &sub.checkout_session_ref).await?;
            let invoice = orders::renewal_invoice(
                tx,
                RenewalInvoice {
                    order: &order,
                    subscription_ref: &sub.subscription_ref,
                    lines,
                    paid_by: payment.as_ref().map(|p| &p.payment_intent_ref),
                    now,
                },
            )
            .await?;
            events.add_new_invoice("invoice.paid", &invoice)?;
        }
        ChangeOutcome::ToCreditBalance { added, .. } => {
            credit::add(tx, &sub.environment_ref, &buyer, *added, now).await?;
        }
        ChangeOutcome::NextInvoice { proration } => pending.extend(proration.lines()),
        ChangeOutcome::NoProration => {}
    }
    let to_price = Ref::from_trusted(loaded.to.price_ref.clone());
    let changed = price_changes::change_price(
        tx,
        sub,
        PriceMove {
            price_ref: &to_price,
            product_ref: &loaded.to_product_ref,
            period: plan.restarts.then_some(plan.period),
            pending: &pending,
        },
        now,
    )
    .await?;
    if plan.restarts {
        jobs::cancel(tx, crate::timed::RENEW, &sub.subscription_ref).await?;
        crate::timed::schedule_period_end(tx, &changed).await?;
    }
    price_changes::record(tx, &changed, &sub.price_ref, plan.mode, now).await?;
    // A trial has no order and grants no entitlement yet.
    let order = match orders::of_session(tx, &sub.checkout_session_ref).await {
        Ok(order) => Some(order),
        Err(StoreError::NotFound) => None,
        Err(e) => return Err(e.into()),
    };
    if let Some(order) = order.filter(|_| loaded.to_product_ref != sub.product_ref) {
        let revoked =
            entitlements::revoke_of_subscription(tx, &order.order_ref, &sub.product_ref, now)
                .await?;
        let granted = entitlements::grant(
            tx,
            &sub.environment_ref,
            &buyer,
            loaded.to_product_ref.as_str(),
            &order.order_ref,
            now,
        )
        .await?;
        for e in &revoked {
            events.add("entitlement.revoked", &e.dto(now))?;
        }
        events.add("entitlement.granted", &granted.dto(now))?;
    }
    events.add(
        "subscription.changed",
        &ChangedDto {
            subscription: changed.dto(now),
            from_price_ref: sub.price_ref.to_string(),
            to_price_ref: changed.price_ref.to_string(),
        },
    )?;
    events.flush(tx).await?;
    Ok(changed)
}

/// A renewal's invoice lines: its period's, then the lines a
/// `next_invoice` change left (taken from the subscription), then the
/// buyer's credit balance applied (`credit_applied`, taken from the
/// balance). Pending lines that would take the invoice below zero go to
/// the balance instead.
pub(crate) async fn renewal_lines(
    tx: &mut WriteTx,
    sub: &SubscriptionRecord,
    period: InvoiceLines,
    now: Timestamp,
) -> Result<InvoiceLines, CommerceError> {
    let currency = period.currency();
    let mut lines = period;
    if !sub.pending_invoice_lines.is_empty() {
        price_changes::clear_pending(tx, &sub.subscription_ref).await?;
        let mut all = lines.lines().to_vec();
        all.extend(sub.pending_invoice_lines.iter().cloned());
        match InvoiceLines::new(currency, all) {
            Ok(with) => lines = with,
            Err(domain::checkout::lines::LineError::BelowZero(_)) => {
                let net: i128 = sub
                    .pending_invoice_lines
                    .iter()
                    .map(|l| i128::from(l.amount()))
                    .sum();
                let back = u64::try_from(-net).map_err(broken)?;
                if let Some(buyer) = &sub.buyer_ref {
                    let back = Money::new(currency, back)?;
                    credit::add(tx, &sub.environment_ref, buyer, back, now).await?;
                }
            }
            Err(e) => return Err(broken(e)),
        }
    }
    let Some(buyer) = &sub.buyer_ref else {
        return Ok(lines);
    };
    let balance = credit::balance(tx, buyer, currency).await?;
    let (lines, applied) = lines.with_credit(balance).map_err(broken)?;
    credit::take(tx, buyer, applied.applied, now).await?;
    Ok(lines)
}

/// A renewal whose invoice the buyer's credit covers: paid without a
/// charge, the next `period`, events `invoice.paid` and
/// `subscription.renewed`.
pub(crate) async fn renew_covered(
    tx: &mut WriteTx,
    sub: &SubscriptionRecord,
    lines: &InvoiceLines,
    period: (Timestamp, Timestamp),
    events: &mut Batch,
) -> Result<(), CommerceError> {
    let now = events.now();
    let order = orders::of_session(tx, &sub.checkout_session_ref).await?;
    let invoice = orders::renewal_invoice(
        tx,
        RenewalInvoice {
            order: &order,
            subscription_ref: &sub.subscription_ref,
            lines,
            paid_by: None,
            now,
        },
    )
    .await?;
    let moved = Move {
        status: Some(SubscriptionStatus::Active),
        period: Some(period),
        ..Move::default()
    };
    let renewed = subscriptions::update(tx, sub, moved, now).await?;
    subscriptions::change(tx, &renewed, ChangeKind::Renewal, now).await?;
    crate::timed::schedule_period_end(tx, &renewed).await?;
    events.add_new_invoice("invoice.paid", &invoice)?;
    events.add("subscription.renewed", &renewed.dto(now))?;
    Ok(())
}
