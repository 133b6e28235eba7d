//! Attempt results: each recorded with its delivery's next state in one
//! unit of work, fenced by the lease that attempted it. A failure is a row
//! of `webhook_attempts`; a success without an error stays on its
//! delivery's row, which the same write rewrites anyway
//! (`webhooks::attempts`). On PostgreSQL a small batch (the common case
//! below saturation) is one statement; a larger one, or one that disables
//! an endpoint or presses on it (`pressure`), is a transaction.

use super::statements;
use super::*;
use crate::db::marks::Marks;
use crate::db::read;
use crate::db::tx::{Arg, WriteTx};
use crate::dispatch::operational::{Announce, Happened};
use crate::dispatch::outbox::insert;
use crate::webhooks::deliveries::delivery_from_row;
use crate::webhooks::endpoints::{endpoint_from_row, with_secret_versions};
use crate::{Backend, StoreError};
use crate::{DeliveryRecord, EndpointRecord};
use domain::webhook::{AttemptStatus, BodyStatus, DeliveryStatus, EndpointStatus, ResponseClass};
use domain::{Prefix, Ref, Timestamp};
use std::collections::BTreeSet;
use std::sync::Arc;

impl Dispatch<'_> {
    /// Records attempts and their deliveries' next states in one unit of
    /// work. A result whose lease was lost (expired and taken by another
    /// worker) is dropped. A success of an ordered delivery releases its
    /// key's next, in the same unit of work (`ordering::release`); an
    /// endpoint disabled and a delivery out of retries are announced in it
    /// (`operational`, by `announce`).
    pub async fn record_attempts(
        &self,
        owner: &str,
        results: &[AttemptResult],
        announce: Arc<dyn Announce>,
    ) -> Result<Recorded, StoreError> {
        let (store, owner, results) = (self.0.clone(), owner.to_owned(), results.to_vec());
        self.on_lane(async move {
            store
                .dispatch()
                .record_on_lane(&owner, &results, &*announce)
                .await
        })
        .await
    }

    async fn record_on_lane(
        &self,
        owner: &str,
        results: &[AttemptResult],
        announce: &dyn Announce,
    ) -> Result<Recorded, StoreError> {
        let now = Timestamp::now().millis();
        // A delivery has one lease, so one result each; a repeated one
        // would have found the lease gone, and is dropped as it was then.
        let mut seen = std::collections::HashSet::new();
        let unique: Vec<&AttemptResult> = results
            .iter()
            .filter(|r| seen.insert(r.delivery_ref.as_str()))
            .collect();
        if unique.is_empty() {
            return Ok(Recorded::default());
        }
        // A reference for each attempt that will be a row of its own.
        let attempt_refs: Vec<Option<Ref>> = unique
            .iter()
            .map(|r| (!r.kept_on_delivery()).then(|| Ref::generate(Prefix::DeliveryAttempt)))
            .collect();
        if self.backend() == Backend::Postgres
            && unique.len() <= ONE_STATEMENT_ROWS
            && !unique.iter().any(|r| {
                r.disable_endpoint
                    || r.pushback.is_some()
                    || r.releases_key()
                    || r.delivery_status == DeliveryStatus::Failed
            })
        {
            let recorded =
                record_in_one_statement(self.0, owner, &unique, &attempt_refs, now).await?;
            return Ok(Recorded {
                recorded,
                released: Vec::new(),
            });
        }
        let mut tx = self.begin_write().await?;
        by_primary_key(&mut tx, self.backend()).await?;
        let mut recorded: Vec<(&AttemptResult, &Option<Ref>)> = Vec::with_capacity(unique.len());
        for (chunk, refs) in unique
            .chunks(UPDATE_ROWS)
            .zip(attempt_refs.chunks(UPDATE_ROWS))
        {
            let kept = update_leased(&mut tx, self.backend(), owner, chunk, now).await?;
            recorded.extend(
                chunk
                    .iter()
                    .copied()
                    .zip(refs)
                    .filter(|(r, _)| kept.contains(r.delivery_ref.as_str())),
            );
        }
        let at = Timestamp::from_millis(now);
        for (r, _) in &recorded {
            if let Some(pushback) = &r.pushback {
                pressure::press(&mut tx, &r.endpoint_ref, pushback, at).await?;
            }
        }
        let mut announced = Vec::new();
        for (r, _) in &recorded {
            if r.disable_endpoint {
                if let Some(endpoint) = disable_endpoint(&mut tx, &r.endpoint_ref, now).await? {
                    let reason = if r.response_status == Some(410) {
                        "gone"
                    } else {
                        "failing"
                    };
                    let happened = Happened::EndpointDisabled {
                        endpoint: &endpoint,
                        reason,
                    };
                    announced.extend(announce.event(happened, at));
                }
            }
        }
        let failed: Vec<&str> = recorded
            .iter()
            .filter(|(r, _)| r.delivery_status == DeliveryStatus::Failed)
            .map(|(r, _)| r.delivery_ref.as_str())
            .collect();
        for delivery in out_of_retries(&mut tx, &failed).await? {
            let happened = Happened::DeliveryFailed {
                delivery: &delivery,
            };
            announced.extend(announce.event(happened, at));
        }
        // One statement per chunk of attempts, never one per attempt: each
        // statement is a round trip to the database.
        let own_rows: Vec<(&AttemptResult, &Ref)> = recorded
            .iter()
            .filter_map(|&(r, attempt_ref)| Some((r, attempt_ref.as_ref()?)))
            .collect();
        for chunk in own_rows.chunks(ATTEMPT_ROWS) {
            let mut marks = Marks::new(self.backend());
            let rows: Vec<String> = (0..chunk.len())
                .map(|_| format!("({})", marks.list(14)))
                .collect();
            let sql = format!(
                "INSERT INTO webhook_attempts (attempt_ref, delivery_ref, environment_ref, endpoint_ref, \
                 generation, attempt_number, status, response_status, error, response_body_excerpt, \
                 duration_ms, started_at, next_attempt_at, created_at) VALUES {}",
                rows.join(", ")
            );
            let mut args: Vec<Arg> = Vec::with_capacity(chunk.len() * 14);
            for &(r, attempt_ref) in chunk {
                args.extend::<[Arg; _]>([
                    attempt_ref.as_str().into(),
                    r.delivery_ref.as_str().into(),
                    r.environment_ref.as_str().into(),
                    r.endpoint_ref.as_str().into(),
                    (r.generation as i64).into(),
                    (r.attempt_number as i64).into(),
                    r.status.as_str().into(),
                    r.response_status.map(i64::from).into(),
                    r.error.as_deref().into(),
                    r.response_body_excerpt.as_deref().into(),
                    r.duration_ms.into(),
                    r.started_at.millis().into(),
                    r.next_attempt_at.map(Timestamp::millis).into(),
                    now.into(),
                ]);
            }
            tx.execute(&sql, &args).await?;
        }
        if !announced.is_empty() {
            insert(tx.inner(), &announced).await?;
        }
        let keys: BTreeSet<ordering::KeyOf> = recorded
            .iter()
            .filter(|(r, _)| r.releases_key())
            .filter_map(|(r, _)| Some((r.environment_ref.to_string(), r.ordered_key.clone()?)))
            .collect();
        let mut released = Vec::new();
        if !keys.is_empty() {
            ordering::lock_keys(tx.inner(), &keys).await?;
            released = ordering::release(tx.inner(), &keys, Timestamp::from_millis(now)).await?;
        }
        tx.commit().await?;
        Ok(Recorded {
            recorded: recorded.len(),
            released,
        })
    }

    /// When the endpoint's current run of failures began: its oldest
    /// failed attempt after its newest success.
    pub async fn endpoint_failing_since(
        &self,
        endpoint_ref: &Ref,
    ) -> Result<Option<Timestamp>, StoreError> {
        let since = read::scalar_int(
            self.pool(),
            crate::webhooks::attempts::FAILING_SINCE,
            &[
                endpoint_ref.as_str().into(),
                AttemptStatus::Failed.as_str().into(),
                AttemptStatus::Succeeded.as_str().into(),
            ],
        )
        .await?;
        Ok(since.map(Timestamp::from_millis))
    }
}

/// Results up to which PostgreSQL records a batch with one statement
/// (`record_in_one_statement`), the common case below saturation: few
/// enough that the planner looks each delivery up by its key without
/// being told to (`by_primary_key`).
const ONE_STATEMENT_ROWS: usize = 8;

/// PostgreSQL: records `results` (each with its attempt reference, if it
/// is to be a row of its own) with one statement, committed on its own:
/// the deliveries' next states where `owner` still holds the lease of that
/// generation, and an attempt row for each so written that its delivery's
/// row does not keep. One round trip instead of a
/// transaction's five; a statement is atomic, so the rule of one unit of
/// work holds. Returns how many were recorded.
async fn record_in_one_statement(
    store: &crate::Store,
    owner: &str,
    results: &[&AttemptResult],
    attempt_refs: &[Option<Ref>],
    now: i64,
) -> Result<usize, StoreError> {
    const COLUMNS: usize = statements::RECORD_COLUMNS;
    let sql = statements::record_small(results.len());
    let mut args: Vec<Arg> = Vec::with_capacity(results.len() * COLUMNS + 3);
    for (r, attempt_ref) in results.iter().zip(attempt_refs) {
        args.extend(next_state(r));
        args.extend::<[Arg; _]>([
            attempt_ref.as_ref().map(Ref::as_str).into(),
            r.environment_ref.as_str().into(),
            r.endpoint_ref.as_str().into(),
            r.response_status.map(i64::from).into(),
            r.error.as_deref().into(),
            r.response_body_excerpt.as_deref().into(),
            r.duration_ms.into(),
            r.status.as_str().into(),
        ]);
    }
    args.extend(written_by(owner, now));
    Ok(store
        .write_alone_returning(&sql, &args, "delivery_ref")
        .await?
        .len())
}

/// The values after every result's in both ways of recording: the body
/// status, the time of the write and the lease's owner.
fn written_by(owner: &str, now: i64) -> [Arg<'_>; 3] {
    [
        BodyStatus::Available.as_str().into(),
        now.into(),
        owner.into(),
    ]
}

/// A result's delivery's next state, as both ways of recording bind it:
/// reference, generation, status, attempt count, next and last attempt
/// times, the body sent, the response class; and a success's response
/// status, duration and body excerpt, which the delivery's row keeps
/// (nulls for an attempt that is a row of its own,
/// `AttemptResult::kept_on_delivery`).
fn next_state(r: &AttemptResult) -> [Arg<'_>; statements::STATE_COLUMNS] {
    let kept = r.kept_on_delivery();
    [
        r.delivery_ref.as_str().into(),
        (r.generation as i64).into(),
        r.delivery_status.as_str().into(),
        (r.attempt_number as i64).into(),
        r.next_attempt_at.map(Timestamp::millis).into(),
        r.started_at.millis().into(),
        r.payload.stored().into(),
        ResponseClass::of(r.response_status).as_str().into(),
        r.response_status.filter(|_| kept).map(i64::from).into(),
        kept.then_some(r.duration_ms).into(),
        r.response_body_excerpt.as_deref().filter(|_| kept).into(),
    ]
}

/// Writes the deliveries' next states where `owner` still holds the lease
/// of that generation, in one statement (`statements::record_states`);
/// returns the references written.
async fn update_leased(
    tx: &mut WriteTx,
    backend: Backend,
    owner: &str,
    chunk: &[&AttemptResult],
    now: i64,
) -> Result<std::collections::HashSet<String>, StoreError> {
    let sql = statements::record_states(backend, chunk.len());
    let mut args: Vec<Arg> = Vec::with_capacity(chunk.len() * statements::STATE_COLUMNS + 3);
    for r in chunk {
        args.extend(next_state(r));
    }
    args.extend(written_by(owner, now));
    Ok(tx
        .fetch_texts(&sql, &args, "delivery_ref")
        .await?
        .into_iter()
        .collect())
}

/// Disables an active endpoint and holds its pending deliveries; the
/// endpoint as disabled, if this call disabled it.
async fn disable_endpoint(
    tx: &mut WriteTx,
    endpoint_ref: &Ref,
    now: i64,
) -> Result<Option<EndpointRecord>, StoreError> {
    let rows = tx
        .fetch(
            "UPDATE webhook_endpoints SET status = $1, updated_at = $2, version = version + 1 \
             WHERE endpoint_ref = $3 AND status = $4 RETURNING *",
            &[
                EndpointStatus::Disabled.as_str().into(),
                now.into(),
                endpoint_ref.as_str().into(),
                EndpointStatus::Active.as_str().into(),
            ],
        )
        .await?;
    let Some(row) = rows.first() else {
        return Ok(None);
    };
    let endpoint = with_secret_versions(tx, endpoint_from_row(row)?).await?;
    tx.execute(
        "UPDATE webhook_deliveries SET status = $1, next_attempt_at = NULL, version = version + 1 \
         WHERE endpoint_ref = $2 AND status = $3 AND lease_owner IS NULL",
        &[
            DeliveryStatus::Held.as_str().into(),
            endpoint_ref.as_str().into(),
            DeliveryStatus::Pending.as_str().into(),
        ],
    )
    .await?;
    Ok(Some(endpoint))
}

/// The non-diagnostic deliveries among `refs` (just recorded failed: out
/// of retries), as they now stand.
async fn out_of_retries(
    tx: &mut WriteTx,
    refs: &[&str],
) -> Result<Vec<DeliveryRecord>, StoreError> {
    if refs.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "SELECT * FROM webhook_deliveries WHERE delivery_ref IN ({}) AND diagnostic = 0",
        Marks::new(tx.backend()).list(refs.len())
    );
    let args: Vec<Arg> = refs.iter().map(|r| Arg::from(*r)).collect();
    tx.fetch(&sql, &args)
        .await?
        .iter()
        .map(|row| delivery_from_row(row))
        .collect()
}
