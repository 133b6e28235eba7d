//! The catalogue and checkout configs (contract sections 10 and 10.1,
//! `docs/catalogue.md`): the states of products, prices, offers and configs
//! and their transitions, a price's recurrence, promotion arithmetic and
//! windows, the rules of checkout config line items and custom fields, and
//! the digest that ties a promotion plan to what it read.
//!
//! It owns the rules, never their storage: nothing here reads a clock, a
//! database or a request. Callers pass `now`, the versions they read and the
//! parsed bodies; every function is pure and testable alone.

pub mod checkout_config;
pub mod plan;
pub mod promotion;
pub mod states;

pub use states::{
    ConfigStatus, Interval, OfferStatus, PriceStatus, PriceType, ProductStatus, Recurrence,
    RecurrenceError, StateError,
};
