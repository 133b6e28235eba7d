//! Refunds (contract sections 10 and 10.1, "Refunds"): the states of a
//! refund and their transitions, its reason, scope and access effect, the
//! bounds of `scheduled_at`, and the arithmetic of the refundable
//! remainder and of the order status a refund leaves behind.
//!
//! It owns the rules, never their storage or their timing: nothing here
//! reads a clock or a database. In particular the remainder check here is
//! the rule only; making it race-free (one conditional write that reserves
//! the amount) belongs to the store, which passes what it read.

pub mod amounts;
pub mod states;

pub use amounts::{order_status_after, refund_amount, remainder, scope, RefundAmountError};
pub use states::{
    check_schedule, AccessEffect, RefundReason, RefundScope, RefundStatus, ScheduleError,
    MAX_SCHEDULE_DAYS,
};
