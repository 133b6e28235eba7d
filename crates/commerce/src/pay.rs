//! Pay: one unit of work per call. It claims the open session first (so
//! that of concurrent pays one goes on and the rest answer 409 before they
//! write), asks the sandbox processor, and writes what the outcome makes,
//! with its events, in the same transaction:
//!
//! - succeeded: buyer (found by e-mail or created), stored method when
//!   kept, payment, capture, subscriptions with their first change, the
//!   session completed, order, invoice (its number taken last, at the
//!   commit: `invoice_numbers`), entitlements, journey
//!   steps; events `payment.succeeded`, `checkout_session.completed`,
//!   `order.created`, `invoice.paid`, `entitlement.granted` and
//!   `subscription.started`;
//! - failed: the payment, a journey step and `payment.failed`;
//! - requires action: the payment waiting for `{"authentication"}`, a journey
//!   step, and incomplete subscriptions for recurring items.
//!
//! Live environments have no processor: they are refused before anything
//! is read or written (`check_processor`).
//!
//! A pay is two calls: `prepare` reads and checks what it will charge
//! before the unit of work opens (so that no write turn is held meanwhile),
//! then `run` writes it all in the caller's unit of work.

use crate::error::found;
use crate::events::{checkout_key, Batch};
use crate::shapes::checkout::step;
use crate::shapes::Served;
use crate::timed::{schedule_period_end, DISPUTE_AFTER_SECONDS, OPEN_DISPUTE};
use crate::CommerceError;
use domain::checkout::buyer::Email;
use domain::checkout::period::period_end;
use domain::checkout::sandbox::{authenticate, Card, Outcome, TestCard, ACTION_TTL_SECONDS};
use domain::checkout::states::{
    FailureCode, PayResult, PaymentStatus, StepKind, StoredMethodStatus,
};
use domain::principal::Mode;
use domain::webhook::shaping::Scope;
use domain::{Ref, Timestamp};
use store::billing::checkout::buyers::{self, BuyerOf, BuyerRecord};
use store::billing::checkout::entitlements::{self, EntitlementRecord};
use store::billing::checkout::journeys::{self, Step};
use store::billing::checkout::methods::{self, StoredMethodRecord};
use store::billing::checkout::orders::{self, InvoiceRecord, NewInvoice, NewOrder, OrderRecord};
use store::billing::checkout::payments::{self, Finish, NewPayment, PaymentRecord};
use store::billing::checkout::sessions::{self, Attempt, Completion, SessionRecord};
use store::billing::checkout::subscriptions::{self, NewSubscription, SubscriptionRecord};
use store::billing::jobs;
use store::{Store, WriteTx};

/// What a pay call asks for.
pub enum Request {
    /// Charge a card, keeping it when `save`.
    Pay { method: Method, save: bool },
    /// Approve (`true`) or decline the payment waiting for authentication.
    Authenticate(bool),
}

/// What a pay charges.
pub enum Method {
    /// A sandbox card.
    Card(TestCard),
    /// A stored payment method of the session's buyer.
    Stored(Ref),
}

/// What a pay made: its result, the payment (none when it started a
/// trial: `crate::trials`), the session's first subscription and the
/// session after it.
pub struct Paid {
    pub result: PayResult,
    pub payment: Option<PaymentRecord>,
    pub subscription: Option<SubscriptionRecord>,
    pub session: SessionRecord,
}

/// A pay checked and ready to run (`prepare`).
pub struct Prepared {
    email: Email,
    charge: Charge,
    /// Whether the charge goes through, for a `Request::Authenticate`;
    /// the payment it finishes.
    authenticated: Option<(bool, PaymentRecord)>,
}

/// Live environments have no processor yet: every pay there is refused
/// before anything is read.
pub fn check_processor(mode: Mode) -> Result<(), CommerceError> {
    match mode {
        Mode::Live => Err(CommerceError::ProcessorUnavailable),
        Mode::Sandbox => Ok(()),
    }
}

/// Reads and checks what `request` will charge on `session` at `now` (the
/// session's time): the session payable, a stored method active and the
/// buyer's, or the payment waiting for authentication.
pub async fn prepare(
    store: &Store,
    env: &Ref,
    session: &SessionRecord,
    request: Request,
    now: Timestamp,
) -> Result<Prepared, CommerceError> {
    session.status_at(now).check_payable()?;
    let email = Email::parse(&session.buyer_email)
        .map_err(|e| CommerceError::broken(format!("stored e-mail: {e}")))?;
    match request {
        Request::Pay { method, save } => {
            let charge = match method {
                Method::Card(card) => Charge {
                    card,
                    method: card.as_str().to_owned(),
                    details: card.card(now),
                    save,
                    stored: None,
                },
                Method::Stored(spm) => stored_charge(store, env, &spm, &email, save).await?,
            };
            Ok(Prepared {
                email,
                charge,
                authenticated: None,
            })
        }
        Request::Authenticate(approve) => {
            let waiting = waiting_payment(store, env, session, now).await?;
            let charge = Charge {
                card: TestCard::parse(&waiting.method).unwrap_or(TestCard::Visa),
                method: waiting.method.clone(),
                details: waiting.card.clone(),
                save: waiting.save_method,
                stored: waiting.stored_payment_method_ref.clone(),
            };
            Ok(Prepared {
                email,
                charge,
                authenticated: Some((approve, waiting)),
            })
        }
    }
}

/// Runs a prepared pay on `session` in `tx` at `now`: claims the session
/// (of concurrent pays one goes on, the others fail with
/// `StoreError::Conflict` before they write), asks the sandbox processor
/// and writes what its outcome makes, with the events.
pub async fn run(
    tx: &mut WriteTx,
    env: &Ref,
    session: &SessionRecord,
    prepared: Prepared,
    now: Timestamp,
) -> Result<Paid, CommerceError> {
    let claimed = sessions::claim(tx, session).await?;
    let Prepared {
        email,
        charge,
        authenticated,
    } = prepared;
    // A trial (contract 14.3) keeps a card that would go through and
    // charges nothing; a buyer who had the product before pays at once, as
    // does a session that also sells one-time items.
    let trial = claimed.trial_period_days > 0
        && authenticated.is_none()
        && charge.card.outcome() == Outcome::Succeeded
        && claimed.line_items.iter().all(|i| i.interval.is_some());
    if trial {
        let method = crate::trials::TrialMethod {
            method: &charge.method,
            card: &charge.details,
            stored: charge.stored.as_ref(),
        };
        let started = crate::trials::start(tx, env, &claimed, &email, method, now).await?;
        if let Some(paid) = started {
            return Ok(paid);
        }
    }
    let unit = Unit {
        tx,
        env,
        session: claimed,
        email: &email,
        now,
    };
    match authenticated {
        None => match charge.card.outcome() {
            Outcome::Succeeded => unit.succeed(&charge, None).await,
            Outcome::Failed(code) => unit.fail(Some(&charge), None, code).await,
            Outcome::RequiresAction => unit.wait_for_action(&charge).await,
        },
        Some((approve, waiting)) => match authenticate(approve) {
            Outcome::Failed(code) => unit.fail(None, Some(&waiting), code).await,
            _ => unit.succeed(&charge, Some(&waiting)).await,
        },
    }
}

/// A stored method the session's buyer may pay with.
async fn stored_charge(
    store: &Store,
    env: &Ref,
    spm: &Ref,
    email: &Email,
    save: bool,
) -> Result<Charge, CommerceError> {
    let method = found(
        store.get::<StoredMethodRecord>(env, spm).await,
        "stored payment method",
    )?;
    if method.status != StoredMethodStatus::Active {
        return Err(CommerceError::refused(format!(
            "the stored payment method is {}",
            method.status.as_str()
        )));
    }
    let owner = store.get::<BuyerRecord>(env, &method.buyer_ref).await?;
    let same = Email::parse(&owner.email).is_ok_and(|o| o.matches(email));
    if !same {
        return Err(CommerceError::refused(
            "the stored payment method belongs to another buyer",
        ));
    }
    let card = TestCard::parse(&method.method).ok_or_else(|| {
        CommerceError::broken(format!("stored method with card {}", method.method))
    })?;
    Ok(Charge {
        card,
        method: method.method.clone(),
        details: method.card.clone(),
        save,
        stored: Some(method.stored_payment_method_ref.clone()),
    })
}

/// The session's newest payment, when it waits for authentication.
async fn waiting_payment(
    store: &Store,
    env: &Ref,
    session: &SessionRecord,
    now: Timestamp,
) -> Result<PaymentRecord, CommerceError> {
    let none =
        || CommerceError::refused("no payment of this checkout session waits for authentication");
    let payment_ref = session.payment_intent_ref.as_ref().ok_or_else(none)?;
    let payment = store.get::<PaymentRecord>(env, payment_ref).await?;
    let waits = payment.status == PaymentStatus::RequiresAction
        && payment.action_expires_at.is_some_and(|t| now < t);
    if waits {
        Ok(payment)
    } else {
        Err(none())
    }
}

/// The card a pay charges and where it came from.
struct Charge {
    card: TestCard,
    /// `pm_card_…` as given, or the stored method's.
    method: String,
    details: Card,
    save: bool,
    /// The stored method paid with.
    stored: Option<Ref>,
}

/// What completing a session made (`Unit::complete`).
struct Completed {
    session: SessionRecord,
    order: OrderRecord,
    invoice: InvoiceRecord,
    granted: Vec<EntitlementRecord>,
}

/// One pay's unit of work on its claimed session.
struct Unit<'a> {
    tx: &'a mut WriteTx,
    env: &'a Ref,
    session: SessionRecord,
    email: &'a Email,
    now: Timestamp,
}

impl Unit<'_> {
    fn scope(&self, buyer_ref: Option<&Ref>) -> Scope {
        Scope {
            product_refs: self.session.product_refs(),
            buyer_ref: buyer_ref.map(Ref::to_string),
            beneficiary_business_ref: None,
        }
    }

    /// The events of this pay, concerning `buyer_ref`: written together,
    /// in order (`Batch::flush`).
    fn events(&self, buyer_ref: Option<&Ref>) -> Batch {
        Batch::new(self.env, self.scope(buyer_ref), self.now)
    }

    fn steps(&self, kinds: &[StepKind], payment: &Ref) -> Vec<Step> {
        kinds
            .iter()
            .map(|k| step(*k, self.now, Some(payment)))
            .collect()
    }

    /// The ordering key of this pay's events (`checkout_key`): a one-time
    /// session starts no subscription, so it is the session, unread.
    async fn ordering_key(&mut self) -> Result<Ref, CommerceError> {
        if self.is_recurring() {
            checkout_key(self.tx, &self.session.checkout_session_ref).await
        } else {
            Ok(self.session.checkout_session_ref.clone())
        }
    }

    fn is_recurring(&self) -> bool {
        self.session.line_items.iter().any(|i| i.interval.is_some())
    }

    /// A new payment of this pay.
    async fn new_payment(
        &mut self,
        charge: &Charge,
        status: PaymentStatus,
        failure_code: Option<FailureCode>,
        buyer_ref: Option<&Ref>,
        stored: Option<&Ref>,
    ) -> Result<PaymentRecord, CommerceError> {
        let product_refs = self.session.product_refs();
        let new = NewPayment {
            checkout_session_ref: &self.session.checkout_session_ref,
            buyer_ref,
            buyer_email: &self.session.buyer_email,
            buyer_name: self.session.buyer_name.as_deref(),
            amount: self.session.amount_total,
            status,
            failure_code,
            method: &charge.method,
            card: &charge.details,
            save_method: charge.save,
            stored_payment_method_ref: stored,
            product_refs: &product_refs,
            action_expires_at: (status == PaymentStatus::RequiresAction)
                .then(|| self.now.plus_seconds(ACTION_TTL_SECONDS)),
            captured_at: (status == PaymentStatus::Succeeded).then_some(self.now),
            at: self.now,
        };
        Ok(payments::create(self.tx, self.env, new).await?)
    }

    /// A pay that went through: the buyer found or made, the method kept,
    /// the payment captured, the session completed with its order, invoice,
    /// entitlements and subscriptions, the journey's steps, and the events.
    async fn succeed(
        mut self,
        charge: &Charge,
        waiting: Option<&PaymentRecord>,
    ) -> Result<Paid, CommerceError> {
        let buyer = buyers::find_or_create(
            self.tx,
            self.env,
            BuyerOf {
                email: self.email,
                name: self.session.buyer_name.as_deref(),
                test_clock_ref: self.session.test_clock_ref.as_ref(),
                now: self.now,
            },
        )
        .await?;
        let buyer_ref = &buyer.buyer_ref;
        let stored = self.kept_method(charge, buyer_ref).await?;
        let payment = self
            .captured(charge, waiting, buyer_ref, stored.as_ref())
            .await?;
        let subscriptions = self.start_subscriptions(buyer_ref, stored.as_ref()).await?;
        let done = self
            .complete(buyer_ref, &payment, subscriptions.first())
            .await?;
        let mut kinds = match waiting {
            Some(_) => vec![StepKind::PaymentSucceeded],
            None => vec![StepKind::PaymentAttempted, StepKind::PaymentSucceeded],
        };
        kinds.extend(subscriptions.iter().map(|_| StepKind::SubscriptionStarted));
        let steps = self.steps(&kinds, &payment.payment_intent_ref);
        journeys::add_steps(self.tx, &done.session.journey_ref, &steps, Some(buyer_ref)).await?;

        let now = self.now;
        let mut events = self.events(Some(buyer_ref));
        events.add("payment.succeeded", &payment.dto(now))?;
        events.add("checkout_session.completed", &done.session.dto(now))?;
        events.add("order.created", &done.order.dto(now))?;
        // The invoice's number is taken last, at the commit: this event
        // is made then, and the pay's events are written with it.
        events.add_new_invoice("invoice.paid", &done.invoice)?;
        for entitlement in &done.granted {
            events.add("entitlement.granted", &entitlement.dto(now))?;
        }
        for subscription in &subscriptions {
            events.add("subscription.started", &subscription.dto(now))?;
        }
        events.set_key(&self.ordering_key().await?);
        events.flush(self.tx).await?;
        let result = if subscriptions.is_empty() {
            PayResult::RetrievePaymentResponse
        } else {
            PayResult::SubscriptionStarted
        };
        Ok(Paid {
            result,
            payment: Some(payment),
            subscription: subscriptions.into_iter().next(),
            session: done.session,
        })
    }

    /// The stored method a successful pay charged, or keeps: the one paid
    /// with, else the card when asked to keep it or when a subscription
    /// will charge it again.
    async fn kept_method(
        &mut self,
        charge: &Charge,
        buyer_ref: &Ref,
    ) -> Result<Option<Ref>, CommerceError> {
        if let Some(r) = &charge.stored {
            return Ok(Some(r.clone()));
        }
        if !(charge.save || self.is_recurring()) {
            return Ok(None);
        }
        let kept = methods::store(
            self.tx,
            self.env,
            buyer_ref,
            &charge.method,
            &charge.details,
            self.now,
        )
        .await?;
        Ok(Some(kept.stored_payment_method_ref))
    }

    /// The succeeded payment (the waiting one finished, or a new one),
    /// captured; a `pm_card_dispute` one also gets its sandbox dispute.
    async fn captured(
        &mut self,
        charge: &Charge,
        waiting: Option<&PaymentRecord>,
        buyer_ref: &Ref,
        stored: Option<&Ref>,
    ) -> Result<PaymentRecord, CommerceError> {
        let now = self.now;
        let payment = match waiting {
            Some(p) => {
                let finish = Finish {
                    status: PaymentStatus::Succeeded,
                    failure_code: None,
                    buyer_ref: Some(buyer_ref),
                    stored_payment_method_ref: stored,
                    captured_at: Some(now),
                    at: now,
                };
                payments::finish(self.tx, p, finish).await?
            }
            None => {
                self.new_payment(
                    charge,
                    PaymentStatus::Succeeded,
                    None,
                    Some(buyer_ref),
                    stored,
                )
                .await?
            }
        };
        payments::capture(self.tx, &payment, now).await?;
        if charge.card.opens_dispute() {
            let due = now.plus_seconds(DISPUTE_AFTER_SECONDS);
            jobs::schedule_on(
                self.tx,
                OPEN_DISPUTE,
                &payment.payment_intent_ref,
                self.env,
                due,
                self.session.test_clock_ref.as_ref(),
            )
            .await?;
        }
        Ok(payment)
    }

    /// The session completed by `payment`, with its order, its invoice
    /// (its lines: an `item` per one-time line item, a `period` per
    /// recurring one; numbered at the commit) and an entitlement per
    /// product.
    async fn complete(
        &mut self,
        buyer_ref: &Ref,
        payment: &PaymentRecord,
        first: Option<&SubscriptionRecord>,
    ) -> Result<Completed, CommerceError> {
        let now = self.now;
        let attempt = Attempt {
            payment_intent_ref: &payment.payment_intent_ref,
            completed: Some(Completion {
                buyer_ref,
                subscription_ref: first.map(|s| &s.subscription_ref),
            }),
        };
        let session = sessions::record_pay(self.tx, &self.session, attempt, now).await?;
        let order = orders::create(
            self.tx,
            self.env,
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
        let lines = crate::lines::of_checkout(&session.line_items, session.amount_total, now)?;
        let invoice = orders::invoice(
            self.tx,
            NewInvoice {
                order: &order,
                subscription_ref: first.map(|s| &s.subscription_ref),
                lines: &lines,
                paid_at: now,
            },
        )
        .await?;
        let mut granted = Vec::new();
        for product_ref in session.product_refs() {
            let order_ref = &order.order_ref;
            let entitlement =
                entitlements::grant(self.tx, self.env, buyer_ref, &product_ref, order_ref, now)
                    .await?;
            granted.push(entitlement);
        }
        Ok(Completed {
            session,
            order,
            invoice,
            granted,
        })
    }

    /// The session's subscriptions, active from now: those an earlier
    /// payment left incomplete, or one per recurring line item.
    async fn start_subscriptions(
        &mut self,
        buyer_ref: &Ref,
        stored: Option<&Ref>,
    ) -> Result<Vec<SubscriptionRecord>, CommerceError> {
        let now = self.now;
        if !self.is_recurring() {
            return Ok(Vec::new());
        }
        let waiting =
            subscriptions::incomplete_of_session(self.tx, &self.session.checkout_session_ref)
                .await?;
        let mut started = Vec::new();
        let no_method = || CommerceError::broken("a subscription without a stored method");
        if !waiting.is_empty() {
            for s in &waiting {
                let interval = self.interval_of(&s.price_ref)?;
                let period = (now, period_end(now, interval));
                let spm = stored.ok_or_else(no_method)?;
                started
                    .push(subscriptions::activate(self.tx, s, buyer_ref, spm, period, now).await?);
            }
        } else {
            let spm = stored.ok_or_else(no_method)?;
            started = self
                .create_subscriptions(Some(buyer_ref), Some(spm))
                .await?;
        }
        for s in &started {
            subscriptions::started(self.tx, s, now).await?;
            schedule_period_end(self.tx, s).await?;
        }
        Ok(started)
    }

    /// One subscription per recurring line item: active from now with its
    /// first period when a buyer paid, else incomplete (waiting for
    /// authentication).
    async fn create_subscriptions(
        &mut self,
        buyer_ref: Option<&Ref>,
        stored: Option<&Ref>,
    ) -> Result<Vec<SubscriptionRecord>, CommerceError> {
        let now = self.now;
        let mut made = Vec::new();
        for item in self.session.line_items.clone() {
            let Some(interval) = item.recurrence()?.interval() else {
                continue;
            };
            let new = NewSubscription {
                checkout_session_ref: &self.session.checkout_session_ref,
                buyer_ref,
                price_ref: &item.price_ref,
                product_ref: &item.product_ref,
                stored_payment_method_ref: stored,
                period: buyer_ref.map(|_| (now, period_end(now, interval))),
                test_clock_ref: self.session.test_clock_ref.as_ref(),
                now,
            };
            made.push(subscriptions::create(self.tx, self.env, new).await?);
        }
        Ok(made)
    }

    fn interval_of(&self, price_ref: &Ref) -> Result<domain::catalogue::Interval, CommerceError> {
        self.session
            .line_items
            .iter()
            .find(|i| i.price_ref == price_ref.as_str())
            .map(|i| i.recurrence())
            .transpose()?
            .and_then(|r| r.interval())
            .ok_or_else(|| CommerceError::broken("a subscription of no recurring item"))
    }

    async fn fail(
        mut self,
        charge: Option<&Charge>,
        waiting: Option<&PaymentRecord>,
        code: FailureCode,
    ) -> Result<Paid, CommerceError> {
        let known = buyers::find(self.tx, self.env, self.email).await?;
        let buyer_ref = known.as_ref().map(|b| b.buyer_ref.clone());
        let payment = match (waiting, charge) {
            (Some(p), _) => {
                let finish = Finish {
                    status: PaymentStatus::Failed,
                    failure_code: Some(code),
                    buyer_ref: buyer_ref.as_ref(),
                    stored_payment_method_ref: p.stored_payment_method_ref.as_ref(),
                    captured_at: None,
                    at: self.now,
                };
                payments::finish(self.tx, p, finish).await?
            }
            (None, Some(c)) => {
                self.new_payment(
                    c,
                    PaymentStatus::Failed,
                    Some(code),
                    buyer_ref.as_ref(),
                    c.stored.as_ref(),
                )
                .await?
            }
            (None, None) => return Err(CommerceError::broken("a failure of no payment")),
        };
        let attempt = Attempt {
            payment_intent_ref: &payment.payment_intent_ref,
            completed: None,
        };
        let session = sessions::record_pay(self.tx, &self.session, attempt, self.now).await?;
        let kinds = match waiting {
            Some(_) => vec![StepKind::PaymentFailed],
            None => vec![StepKind::PaymentAttempted, StepKind::PaymentFailed],
        };
        let steps = self.steps(&kinds, &payment.payment_intent_ref);
        journeys::add_steps(self.tx, &session.journey_ref, &steps, None).await?;
        let mut events = self.events(buyer_ref.as_ref());
        events.add("payment.failed", &payment.dto(self.now))?;
        events.set_key(&self.ordering_key().await?);
        events.flush(self.tx).await?;
        Ok(Paid {
            result: PayResult::RetrievePaymentResponse,
            payment: Some(payment),
            subscription: None,
            session,
        })
    }

    async fn wait_for_action(mut self, charge: &Charge) -> Result<Paid, CommerceError> {
        let payment = self
            .new_payment(
                charge,
                PaymentStatus::RequiresAction,
                None,
                None,
                charge.stored.as_ref(),
            )
            .await?;
        let mut incomplete =
            subscriptions::incomplete_of_session(self.tx, &self.session.checkout_session_ref)
                .await?;
        if incomplete.is_empty() {
            incomplete = self.create_subscriptions(None, None).await?;
        }
        let attempt = Attempt {
            payment_intent_ref: &payment.payment_intent_ref,
            completed: None,
        };
        let session = sessions::record_pay(self.tx, &self.session, attempt, self.now).await?;
        let steps = self.steps(
            &[StepKind::PaymentAttempted, StepKind::ActionRequired],
            &payment.payment_intent_ref,
        );
        journeys::add_steps(self.tx, &session.journey_ref, &steps, None).await?;
        let result = if incomplete.is_empty() {
            PayResult::RetrievePaymentResponse
        } else {
            PayResult::SubscriptionSetupActionRequired
        };
        Ok(Paid {
            result,
            payment: Some(payment),
            subscription: incomplete.into_iter().next(),
            session,
        })
    }
}
