//! WAL checkpoints for SQLite, off the writer's path.
//!
//! SQLite checkpoints by default inside the commit that pushes the WAL past
//! 1,000 pages, so one unlucky write transaction copies the WAL back into
//! the database file and waits for its `fsync` while every other writer of
//! the process queues behind it (8 % of the dispatcher's profile, all of it
//! on the single writer connection). The store turns automatic checkpoints
//! off on its connections and runs a passive checkpoint from a read
//! connection on a timer instead: it copies what it can without blocking
//! the writer or readers, and the WAL is reset once a checkpoint caught up.
//!
//! The task ends once every `Store` clone is gone (it holds only a weak
//! token), so a dropped store does not keep its connections open.

use sqlx::AnyPool;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// How often the WAL is checkpointed. Short enough that the WAL stays a
/// few megabytes under a heavy write load.
const EVERY: Duration = Duration::from_millis(200);

/// Starts the checkpoint task for `pool`; it runs while `alive` can be
/// upgraded and the pool is open.
pub(crate) fn spawn(pool: AnyPool, alive: &Arc<()>) {
    let alive: Weak<()> = Arc::downgrade(alive);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if alive.strong_count() == 0 || pool.is_closed() {
                return;
            }
            if let Err(e) = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)")
                .execute(&pool)
                .await
            {
                if pool.is_closed() {
                    return;
                }
                tracing::warn!(error = %e, "WAL checkpoint failed; the next one will retry");
            }
        }
    });
}
