//! Operational events (contract 13.4): the changes the dispatcher's rules
//! detect (an endpoint failing, recovered or disabled; a delivery out of
//! retries) are written with their event in one unit of work, guarded by a
//! conditional write, so each change is announced once whatever the number
//! of dispatchers, and never without the change.
//!
//! The store never knows the events' shapes: the caller's `Announce` makes
//! each event from the record as the unit of work left it.

use super::Dispatch;
use crate::dispatch::outbox::insert;
use crate::webhooks::endpoints::{endpoint_from_row, with_secret_versions};
use crate::{DeliveryRecord, EndpointRecord, EventRecord, StoreError};
use domain::{Ref, Timestamp};

/// A change an operational event announces.
pub enum Happened<'a> {
    /// The endpoint's health became `failing`; it is disabled at
    /// `disable_at` if nothing succeeds by then.
    EndpointFailing {
        endpoint: &'a EndpointRecord,
        disable_at: Timestamp,
    },
    /// An attempt succeeded while its health was `failing`.
    EndpointRecovered { endpoint: &'a EndpointRecord },
    /// The endpoint was disabled: `failing` for too long, or `gone` (410).
    EndpointDisabled {
        endpoint: &'a EndpointRecord,
        reason: &'static str,
    },
    /// A delivery ran out of retries.
    DeliveryFailed { delivery: &'a DeliveryRecord },
}

/// Makes the event that announces a change, at `now`.
pub trait Announce: Send + Sync {
    fn event(&self, happened: Happened<'_>, now: Timestamp) -> Option<EventRecord>;
}

/// Announces nothing: for a caller that records attempts outside the
/// service (a benchmark's seeding).
pub struct Silent;

impl Announce for Silent {
    fn event(&self, _: Happened<'_>, _: Timestamp) -> Option<EventRecord> {
        None
    }
}

impl Dispatch<'_> {
    /// Marks the endpoint `failing` (or no longer), if it is active and was
    /// not marked so already, and writes the event that says so with it;
    /// `disable_at` is when a failing endpoint is disabled. Returns whether
    /// this call made the change.
    pub async fn report_failing(
        &self,
        endpoint_ref: &Ref,
        failing: bool,
        disable_at: Timestamp,
        announce: &dyn Announce,
        now: Timestamp,
    ) -> Result<bool, StoreError> {
        let mut tx = self.begin().await?;
        let rows = tx
            .fetch(
                "UPDATE webhook_endpoints SET reported_failing = $1, version = version + 1, \
                 updated_at = $2 WHERE endpoint_ref = $3 AND reported_failing <> $1 \
                 AND status = 'active' RETURNING *",
                &[
                    i64::from(failing).into(),
                    now.millis().into(),
                    endpoint_ref.as_str().into(),
                ],
            )
            .await?;
        let Some(row) = rows.first() else {
            return Ok(false);
        };
        let endpoint = with_secret_versions(&mut tx, endpoint_from_row(row)?).await?;
        let happened = if failing {
            Happened::EndpointFailing {
                endpoint: &endpoint,
                disable_at,
            }
        } else {
            Happened::EndpointRecovered {
                endpoint: &endpoint,
            }
        };
        if let Some(event) = announce.event(happened, now) {
            insert(tx.inner(), &[event]).await?;
        }
        tx.commit().await?;
        Ok(true)
    }
}
