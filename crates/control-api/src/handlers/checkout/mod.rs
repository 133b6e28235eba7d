//! Checkout sessions, pay, and the records a payment makes (contract 10.1,
//! `docs/checkout.md`).
//!
//! The records are read-only on the wire: each is `Served`
//! (`handlers::reads`) and listed and retrieved by the generic reads bound
//! in the operation table. Writes happen in `sessions::create` and
//! `pay::pay`, each one unit of work.

pub mod pay;
pub mod records;
pub mod sessions;
