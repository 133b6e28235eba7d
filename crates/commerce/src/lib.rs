//! Billing's use cases: what happens when a buyer pays, a refund is asked
//! for or settles, a subscription is canceled, renews, is dunned or lives on
//! a test clock, and when another system's event arrives.
//!
//! This layer sits between the HTTP surface (`control-api`, which parses
//! the wire, checks credentials, idempotency and preconditions, and maps
//! [`CommerceError`] to the contract's codes) and the store (which knows
//! rows and SQL). It owns the rules' order of work inside one unit of work,
//! the events each change emits, and the resource shapes those events carry
//! (`shapes`: an event's data is the resource as the API shows it).
//!
//! It must never know HTTP (no status, header or request type) nor write
//! SQL; its rules' arithmetic and state machines are `domain`'s.
//!
//! - `checkout`: a checkout session opened, priced from its config.
//! - `pay`: checkout's pay, one unit of work per call.
//! - `lines`: the lines of the invoices pay and renewals make.
//! - `refunds`: a refund asked for; `jobs` starts and settles it.
//! - `renewals`: a subscription's period end, dunning retries, cancels.
//! - `changes`: a subscription's price change and its preview, and what
//!   renewals do with a buyer's credit balance and pending lines.
//! - `test_clocks`: a test clock's advance and the time of a clock.
//! - `jobs`: the timed-work runner (refunds, sandbox disputes, renewals).
//! - `timed`: what timed work is (its kinds, rules, the period end's
//!   schedule), below the use cases that schedule it and the runner.
//! - `trials`: a trial started at pay, and its warning before it ends.
//! - `projection`: other systems' events onto disputes, payouts,
//!   participations.
//! - `events`: how a use case emits an event into its unit of work.

pub mod changes;
pub mod checkout;
pub mod error;
pub mod events;
pub mod jobs;
pub mod lines;
pub mod pay;
pub mod projection;
pub mod refunds;
pub mod renewals;
pub mod shapes;
pub mod test_clocks;
pub mod timed;
pub mod trials;

pub use error::CommerceError;
