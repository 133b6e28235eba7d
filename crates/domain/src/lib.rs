//! Domain types and rules of the billing and webhook service.
//!
//! This crate owns the vocabulary: references, money, cursors, timestamps,
//! the states of administration resources and their transitions, the rules
//! of the catalogue and checkout configs, the states and rules of checkout
//! sessions and the records a payment makes, and the formats of credential
//! secrets. It must never do I/O, know about HTTP, SQL or an async runtime:
//! every function here is pure and testable alone.

pub mod catalogue;
pub mod checkout;
pub mod cursor;
pub mod duration;
pub mod etag;
pub mod idempotency;
pub mod money;
pub mod outside;
pub mod principal;
pub mod rate_limit;
pub mod reference;
pub mod refunds;
pub mod retention;
pub mod secret;
pub mod store_id;
pub mod time;
pub mod webhook;

pub use cursor::{Cursor, CursorError};
pub use money::{Currency, Money, MoneyError};
pub use reference::{Prefix, Ref, RefError};
pub use store_id::StoreId;
pub use time::{Clock, ClockHand, Timestamp};
