//! The webhook resources as the API shows them and as the service's
//! operational events carry them (contract 10.1, "Events are the
//! resource"; 13.4): an endpoint (`endpoint`) and a delivery (`delivery`).
//! `control-api` answers with them; the dispatcher's operational events
//! carry them. One shape each, so a receiver reads the same resource in a
//! response and in an event.
//!
//! Pure conversion from the store's records: no I/O, no HTTP.

pub mod body;
pub mod delivery;
pub mod endpoint;

use domain::Timestamp;

pub(crate) fn ts(t: Timestamp) -> String {
    t.to_rfc3339()
}

pub(crate) fn opt_ts(t: Option<Timestamp>) -> Option<String> {
    t.map(ts)
}
