//! Checkout sessions, pay, and the records a payment makes (contract 10.1,
//! `docs/checkout.md`).
//!
//! The records are read-only on the wire: each is `Served`
//! (`commerce::shapes::checkout`) and listed and retrieved by the generic
//! reads bound in the operation table. Writes happen in `sessions::create`,
//! `pay::pay`, `cancel::cancel` and the test clocks' operations, each one
//! unit of work whose rules are `commerce`'s; a subscription's renewals are
//! timed work (`commerce::renewals`).

pub mod cancel;
pub mod change;
pub mod pay;
pub mod sessions;
pub mod test_clocks;
