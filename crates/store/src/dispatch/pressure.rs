//! Back-pressure written where it is seen (contract 13.2): a `429` or
//! `503` answer halves its endpoint's effective rate and may hold its
//! attempts off (`Retry-After`), by the domain's rule
//! (`domain::webhook::limits::Pushback`), in the unit of work that records
//! the attempt. The endpoint's `version` is not bumped: back-pressure is
//! what its receiver said, not a change an API client made, so an
//! `If-Match` taken before it still holds.
//!
//! Every dispatcher of a fleet reads the same row, so the endpoint slows
//! down everywhere at once. Two recorders pressing one endpoint take
//! turns: each write is conditional on the pressure it read.

use crate::db::codec::opt_ts;
use crate::db::tx::{Columns, WriteTx};
use crate::webhooks::endpoints::protection_from_row;
use crate::StoreError;
use domain::webhook::limits::Pushback;
use domain::{Ref, Timestamp};

/// How often a pressing write re-reads after losing a race before it
/// gives up (the other writer's pressure stands).
const TRIES: usize = 3;

/// Applies `pushback` to the endpoint's stored pressure at `now`.
pub(crate) async fn press(
    tx: &mut WriteTx,
    endpoint_ref: &Ref,
    pushback: &Pushback,
    now: Timestamp,
) -> Result<(), StoreError> {
    for _ in 0..TRIES {
        let rows = tx
            .fetch(
                "SELECT rate_limit, max_in_flight, pressure_base, pressure_rate, pressure_at, \
                 throttled_until FROM webhook_endpoints WHERE endpoint_ref = $1",
                &[endpoint_ref.as_str().into()],
            )
            .await?;
        let Some(row) = rows.first() else {
            return Ok(());
        };
        let before = protection_from_row(row)?;
        let read_at = row.int("pressure_at")?;
        let read_until = opt_ts(row, "throttled_until")?;
        let pressure = pushback.press(before.pressure, now);
        let until = pushback.hold_off(before.throttled_until, now);
        if Some(pressure) == before.pressure && until == read_until {
            return Ok(());
        }
        let changed = tx
            .execute(
                "UPDATE webhook_endpoints SET pressure_base = $1, pressure_rate = $2, \
                 pressure_at = $3, throttled_until = $4 WHERE endpoint_ref = $5 \
                 AND COALESCE(pressure_at, -1) = $6 AND COALESCE(throttled_until, -1) = $7",
                &[
                    (pressure.base_milli() as i64).into(),
                    (pressure.rate_milli() as i64).into(),
                    pressure.at().millis().into(),
                    until.map(Timestamp::millis).into(),
                    endpoint_ref.as_str().into(),
                    read_at.unwrap_or(-1).into(),
                    read_until.map_or(-1, Timestamp::millis).into(),
                ],
            )
            .await?;
        if changed > 0 {
            return Ok(());
        }
    }
    Ok(())
}
