//! Projection of other systems' events (disputes, payouts, participations)
//! onto the resources they name, before the intake accepts them.
//!
//! The intake of a process asks the `Projector` its event queue was given
//! (`dispatcher::EventQueue::with_projector`; the process that builds the
//! parts, `billing::app`, gives it the billing surface's) about each event
//! another system published. The projector applies it in a unit of
//! work of its own that also remembers the event (`remember`), and answers
//! the data and scope subscribers receive (the resource as projected), or
//! why the event is refused (dead-lettered). A redelivered event finds
//! itself remembered (`remembered`) and is delivered as it was, applied
//! once: the projection commits before the intake's, and the message is
//! acknowledged only after both.
//!
//! This module never decides what an event does to a resource; the
//! projector does.

use crate::db::codec::{json_col, to_json};
use crate::db::tx::{text, WriteTx};
use crate::{EventData, EventRecord, StoreError};
use domain::webhook::shaping::Scope;
use domain::Timestamp;
use std::future::Future;
use std::pin::Pin;

/// What becomes of an event before it is accepted.
#[derive(Debug)]
pub enum Projection {
    /// Not an event the projector applies: accepted as it is.
    Skip,
    /// Applied (or applied before): accepted with this data and scope.
    Apply { data: EventData, scope: Scope },
    /// Data that does not fit the resource: dead-lettered with the reason.
    Refuse(String),
}

pub type ProjectionFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Projection, StoreError>> + Send + 'a>>;

/// What the intake needs from the billing surface.
pub trait Projector: Send + Sync {
    fn project<'a>(&'a self, event: &'a EventRecord) -> ProjectionFuture<'a>;
}

/// The data and scope an event was delivered with, if it was projected.
pub async fn remembered(
    tx: &mut WriteTx,
    event: &EventRecord,
) -> Result<Option<(EventData, Scope)>, StoreError> {
    let rows = tx
        .fetch(
            "SELECT data, scope FROM projected_events WHERE event_ref = $1",
            &[event.event_ref.as_str().into()],
        )
        .await?;
    let Some(row) = rows.first() else {
        return Ok(None);
    };
    let data = EventData::parse(text(row, "data")?).map_err(StoreError::Corrupt)?;
    Ok(Some((data, json_col(row, "scope")?)))
}

/// Remembers a projected event with what subscribers receive.
pub async fn remember(
    tx: &mut WriteTx,
    event: &EventRecord,
    data: &EventData,
    scope: &Scope,
) -> Result<(), StoreError> {
    tx.execute(
        "INSERT INTO projected_events (event_ref, environment_ref, data, scope, created_at) \
         VALUES ($1, $2, $3, $4, $5)",
        &[
            event.event_ref.as_str().into(),
            event.environment_ref.as_str().into(),
            data.as_str().into(),
            to_json(scope).as_str().into(),
            Timestamp::now().millis().into(),
        ],
    )
    .await?;
    Ok(())
}
