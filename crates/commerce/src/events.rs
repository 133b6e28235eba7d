//! The events billing writes emit (contract 10.1, "Events are the
//! resource"): an event's data is the resource as the API shows it, and it
//! is written into the outbox in the unit of work that makes its change.

use crate::CommerceError;
use domain::webhook::shaping::Scope;
use domain::{Prefix, Ref, Timestamp};
use serde::Serialize;
use store::dispatch::outbox::Emit;
use store::{EventData, EventRecord, WriteTx};

/// A new event of `event_type` carrying `data` (a wire DTO).
pub fn event(
    environment_ref: &Ref,
    event_type: &str,
    scope: &Scope,
    data: &impl Serialize,
    occurred_at: Timestamp,
) -> Result<EventRecord, CommerceError> {
    let text = serde_json::to_string(data)
        .map_err(|e| CommerceError::broken(format!("an event's data: {e}")))?;
    let data = EventData::parse(text)
        .map_err(|e| CommerceError::broken(format!("an event's data: {e}")))?;
    Ok(EventRecord {
        event_ref: Ref::generate(Prefix::Event),
        environment_ref: environment_ref.clone(),
        public_event_type: event_type.to_owned(),
        occurred_at,
        scope: scope.clone(),
        data,
    })
}

/// Emits an event of `event_type` that happens now, in the unit of work.
pub async fn emit(
    tx: &mut WriteTx,
    environment_ref: &Ref,
    event_type: &str,
    scope: &Scope,
    data: &impl Serialize,
) -> Result<(), CommerceError> {
    let event = event(environment_ref, event_type, scope, data, Timestamp::now())?;
    tx.emit(&event).await?;
    Ok(())
}
