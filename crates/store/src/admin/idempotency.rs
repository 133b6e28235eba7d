//! Idempotency records: one row per (environment, principal, operation,
//! key), written in the unit of work of the request that decided it.
//!
//! `Store::claim_idempotency_key` claims the key for this process and finds
//! a decided result to replay. The owner then opens the request's unit of
//! work with `KeyClaim::begin` (which, on PostgreSQL, also claims the key
//! against other processes with a transaction-scoped advisory lock), and
//! the request's writes, its events and its result (`KeyClaim::keep`)
//! commit together. So a key has a stored result if and only if its
//! operation's writes committed: a crash at any point leaves both or
//! neither, and a replay never runs the operation again. No row says "in
//! flight": a claim lives in this process's memory and in the open
//! transaction, so it ends with them, however they end.
//!
//! On PostgreSQL the stored response is kept packed (`crate::packed`), as
//! an event's copy is: records are kept at least a day, and plain they
//! were about half of what a fleet's billing writes keep. On
//! SQLite it is kept as it is: there the unit of work holds the file's one
//! write lock, so the packing's CPU would be spent by every writer in turn
//! (it cost pay about 8 %, `docs/performance.md`). A replay reads either.

use crate::db::read;
use crate::db::tx::{int, text, WriteTx};
use crate::packed;
use crate::{Backend, Store, StoreError};
use domain::Timestamp;
use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

#[derive(Debug, Clone)]
pub struct IdempotencyScope {
    pub environment_ref: String,
    pub principal_ref: String,
    pub operation_id: String,
    pub key: String,
}

impl IdempotencyScope {
    /// One string per scope, for the in-process claims and the lock id.
    fn id(&self) -> String {
        [
            self.environment_ref.as_str(),
            &self.principal_ref,
            &self.operation_id,
            &self.key,
        ]
        .join("\u{1f}")
    }

    /// The PostgreSQL advisory lock that claims this scope across
    /// processes: the first 8 bytes of its SHA-256 (a collision only makes
    /// two keys wait for each other's 409).
    fn lock_id(&self) -> i64 {
        let digest = Sha256::digest(self.id().as_bytes());
        let mut head = [0u8; 8];
        head.copy_from_slice(&digest[..8]);
        i64::from_be_bytes(head)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    pub status: u16,
    pub body: String,
    pub etag: Option<String>,
}

/// The outcome of claiming a key.
pub enum Claim {
    /// This process owns the key: run the operation in the unit of work
    /// `KeyClaim::begin` opens, keep its result there (`KeyClaim::keep`)
    /// and commit.
    Owned(KeyClaim),
    /// The key was used with another request.
    Mismatch,
    /// A request with this key is still executing.
    InFlight,
    /// The key already decided a response: replay it.
    Replay(StoredResponse),
}

/// The keys claimed by requests of this process.
#[derive(Default)]
pub(crate) struct Claimed(Mutex<HashSet<String>>);

/// One claimed key; released when the claim and every transaction opened
/// with it have ended.
struct ClaimGuard {
    claimed: Arc<Claimed>,
    id: String,
}

impl Drop for ClaimGuard {
    fn drop(&mut self) {
        self.claimed
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.id);
    }
}

/// A key claimed by this process, whose unit of work is not open yet: an
/// operation may check its input (even over the network) before it takes
/// a write transaction.
pub struct KeyClaim {
    store: Store,
    scope: IdempotencyScope,
    fingerprint: String,
    now: Timestamp,
    retention_ms: i64,
    /// Whether the claim's read found a row of the scope that decided
    /// nothing the client may replay (past retention, or `in_flight`):
    /// `begin` deletes it. Without one, `begin` has nothing to delete.
    leftover: bool,
    guard: Arc<ClaimGuard>,
}

const SCOPE: &str =
    "environment_ref = $1 AND principal_ref = $2 AND operation_id = $3 AND idem_key = $4";

impl Store {
    /// Claims `scope`'s key in this process and says whether it already
    /// decided a response (module docs). A record older than
    /// `retention_ms` no longer exists for the client.
    pub async fn claim_idempotency_key(
        &self,
        scope: &IdempotencyScope,
        fingerprint: &str,
        now: Timestamp,
        retention_ms: i64,
    ) -> Result<Claim, StoreError> {
        let id = scope.id();
        if !self
            .claimed
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.clone())
        {
            return Ok(Claim::InFlight);
        }
        let guard = Arc::new(ClaimGuard {
            claimed: self.claimed.clone(),
            id,
        });
        let cutoff = now.millis() - retention_ms;
        // The scope's row, whatever it holds (one at most: the scope is the
        // key), so that `begin` knows whether it has one to delete.
        let found = read::optional(
            self.pool(),
            &format!(
                "SELECT state, created_at, fingerprint, status_code, response_body, \
                 response_etag FROM idempotency_keys WHERE {SCOPE}"
            ),
            &scope_args(scope),
            |row| {
                if text(row, "state")? != "done" || int(row, "created_at")? < cutoff {
                    return Ok(None);
                }
                if text(row, "fingerprint")? != fingerprint {
                    return Ok(Some(Claim::Mismatch));
                }
                Ok(Some(Claim::Replay(StoredResponse {
                    status: u16::try_from(int(row, "status_code")?)
                        .map_err(|_| StoreError::Corrupt("status_code out of range".into()))?,
                    body: packed::unpack_owned(text(row, "response_body")?),
                    etag: row.text("response_etag")?,
                })))
            },
        )
        .await?;
        let owned = |leftover| {
            Claim::Owned(KeyClaim {
                store: self.clone(),
                scope: scope.clone(),
                fingerprint: fingerprint.to_owned(),
                now,
                retention_ms,
                leftover,
                guard,
            })
        };
        Ok(match found {
            None => owned(false),
            Some(None) => owned(true),
            Some(Some(decided)) => decided,
        })
    }
}

impl KeyClaim {
    /// Opens the key's unit of work. Another process may have claimed or
    /// decided the key since `claim_idempotency_key` (PostgreSQL fleets):
    /// then the request is a concurrent duplicate, `Conflict`.
    pub async fn begin(&self) -> Result<WriteTx, StoreError> {
        let mut tx = self.store.begin().await?;
        tx.hold(Box::new(self.guard.clone()));
        if tx.backend() == Backend::Postgres {
            let locked = tx
                .fetch(
                    "SELECT CAST(CASE WHEN pg_try_advisory_xact_lock($1) THEN 1 ELSE 0 END AS BIGINT) \
                     AS locked",
                    &[self.scope.lock_id().into()],
                )
                .await?;
            let locked = match locked.first() {
                Some(row) => int(row, "locked")? == 1,
                None => false,
            };
            if !locked {
                return Err(StoreError::Conflict);
            }
        }
        let args = scope_args(&self.scope);
        let cutoff = self.now.millis() - self.retention_ms;
        // `in_flight` rows are left by versions that reserved a key in a
        // transaction of its own; whether their operation committed cannot
        // be known, and such a row was taken over once stale. Only the
        // claim's read can have found one: a row written since is seen by
        // the check below (PostgreSQL), and with SQLite there is none.
        if self.leftover {
            tx.execute(
                &format!(
                    "DELETE FROM idempotency_keys WHERE {SCOPE} AND (created_at < $5 OR state <> 'done')"
                ),
                &[args[0], args[1], args[2], args[3], cutoff.into()],
            )
            .await?;
        }
        // Another API process may have decided the key since the claim's
        // check (or left a row of an older version): either is a request
        // still executing for this one. With SQLite this process is the
        // file's only writer, so that check, under its in-process claim,
        // already holds.
        if tx.backend() == Backend::Postgres {
            let decided = tx
                .fetch(
                    &format!("SELECT idem_key FROM idempotency_keys WHERE {SCOPE}"),
                    &args,
                )
                .await?;
            if !decided.is_empty() {
                return Err(StoreError::Conflict);
            }
        }
        Ok(tx)
    }

    /// Keeps `response` as the key's result in `tx`, a unit of work this
    /// claim began; it stands once `tx` commits.
    pub async fn keep(
        &self,
        tx: &mut WriteTx,
        response: &StoredResponse,
    ) -> Result<(), StoreError> {
        let args = scope_args(&self.scope);
        let body = match tx.backend() {
            Backend::Postgres => packed::pack(&response.body),
            Backend::Sqlite => response.body.as_str().into(),
        };
        tx.execute(
            "INSERT INTO idempotency_keys (environment_ref, principal_ref, operation_id, idem_key, \
             fingerprint, state, created_at, locked_at, status_code, response_body, response_etag) \
             VALUES ($1, $2, $3, $4, $5, 'done', $6, $6, $7, $8, $9)",
            &[
                args[0],
                args[1],
                args[2],
                args[3],
                self.fingerprint.as_str().into(),
                self.now.millis().into(),
                i64::from(response.status).into(),
                body.as_ref().into(),
                response.etag.as_deref().into(),
            ],
        )
        .await?;
        Ok(())
    }
}

fn scope_args(scope: &IdempotencyScope) -> [crate::db::tx::Arg<'_>; 4] {
    [
        scope.environment_ref.as_str().into(),
        scope.principal_ref.as_str().into(),
        scope.operation_id.as_str().into(),
        scope.key.as_str().into(),
    ]
}
