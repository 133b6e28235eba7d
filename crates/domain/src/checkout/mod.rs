//! Checkout sessions, pay and the records a successful payment makes
//! (contract sections 10 and 10.1, `docs/checkout.md`): the states of
//! sessions, payments, orders, invoices, entitlements, stored payment
//! methods, subscriptions and journeys; the sandbox processor's test cards
//! and their outcomes; invoice numbers; subscription periods; and buyer
//! e-mail addresses.
//!
//! It owns the rules, never their storage or their timing: nothing here
//! reads a clock, a database, a request or a random source. Callers pass
//! `now` and what they read; every function is pure and testable alone. In
//! particular the sandbox processor here only *decides* an outcome from a
//! test card; charging, scheduling disputes and settling refunds belong to
//! the caller.
//!
//! Invoice lines and credit applied to an invoice are `lines`; the exact
//! arithmetic of a subscription's price change, and what each proration
//! mode makes of it, `proration` (contract 14).

pub mod buyer;
pub mod invoice;
pub mod lines;
pub mod period;
pub mod proration;
pub mod renewal;
pub mod sandbox;
pub mod states;

pub use buyer::{BuyerName, BuyerNameError, Email, EmailError};
pub use invoice::{InvoiceNumber, InvoiceNumberError};
pub use lines::{CreditApplied, InvoiceLine, InvoiceLines, LineError, LineKind, LinePeriod};
pub use period::{add_periods, period_end};
pub use proration::{ChangeOutcome, ProrationError, ProrationMode};
pub use renewal::{AtPeriodEnd, DunningSchedule, TestClockStatus};
pub use sandbox::{Card, Outcome, TestCard};
pub use states::{
    CancelReason, ChangeKind, EntitlementStatus, FailureCode, InvoiceStatus, JourneyStatus,
    OrderStatus, PayResult, PaymentStatus, SessionStatus, StepKind, StoredMethodStatus,
    SubscriptionStatus,
};
