//! Events from other systems (contract section 10.1, "Events from other
//! systems"): a payment processor's `dispute.opened` and `dispute.closed`,
//! a payout engine's `payout.paid` and `payout.failed`, and a partner
//! system's `participation.invited` and `participation.accepted` arrive on
//! the queue and are projected into the dispute, payout and participation
//! resources the control API serves.
//!
//! This module owns what such an event may say and what the projection
//! makes of it: the resources' states, the typed and validated `data` of
//! each event type ([`data`]), and the sanitising of a dispute's upstream
//! reason ([`sanitize`]). It never decides whether an event is applied
//! (duplicates, ordering by `occurred_at`, unknown payments): that needs
//! the store, and belongs to the intake.

pub mod data;
pub mod sanitize;
pub mod states;

pub use data::{DisputeData, FieldIssue, ParticipationData, PayoutData};
pub use sanitize::{reason_safe, MAX_REASON_CHARS};
pub use states::{
    evidence_due_at, DisputeKind, DisputeStatus, ParticipationStatus, PayoutStatus, EVIDENCE_DAYS,
};
