//! Webhook rules: the kinds and states of endpoints, secrets, grants and
//! deliveries, the event catalogue, payload shaping, signing, destination
//! checks, endpoint health, the retry schedule (contract section 9),
//! order per key (13.1) and receiver protection (13.2: `limits`).
//!
//! Pure functions and types only: no I/O, no clock reads except through
//! arguments, no HTTP.

pub mod body;
pub mod catalogue;
pub mod cipher;
pub mod event;
pub mod fanout;
pub mod filter;
pub mod health;
pub mod kinds;
pub mod limits;
pub mod ordering;
pub mod redrive_job;
pub mod retry;
pub mod secret_version;
pub mod shaping;
pub mod signing;
pub mod url;

pub use kinds::*;
