//! WAL checkpoints for SQLite, off the writer's path, with the WAL kept
//! bounded.
//!
//! The rule: no write transaction checkpoints. SQLite checkpoints by
//! default inside the commit that pushes the WAL past 1,000 pages, so one
//! unlucky write transaction would copy the WAL back into the database
//! file and wait for its `fsync` while every other writer of the process
//! queues behind it on the single writer connection. The store turns
//! automatic checkpoints off on its connections and runs a passive
//! checkpoint from a read connection on a timer instead: it copies what it
//! can without blocking the writer or readers.
//!
//! The second rule: the WAL stays bounded under a steady write load. A
//! passive checkpoint alone never lets the WAL start over then: SQLite
//! rewinds the WAL only once a checkpoint has copied every frame, and
//! writers keep appending while it copies, so the WAL would grow without
//! bound, every commit appending to new file pages. So when a passive
//! checkpoint leaves the WAL longer than `RESTART_FRAMES`,
//! the task takes the process's write turn (the writer pool's connection,
//! which the write lane also waits for) and runs a `RESTART` checkpoint:
//! it copies the few frames the passive one left, and the next write
//! starts the WAL over from its beginning, reusing the same file pages.
//! It waits for readers of older snapshots for at most `RESTART_WAIT`
//! (the process's writes wait meanwhile); if they are still there, it gives
//! up and the next tick tries again.
//!
//! The task ends once every clone of its owner's token `alive` is gone (it
//! holds only a weak one; the store's clones hold it), so a dropped store
//! does not keep its connections open.

use crate::BUSY_TIMEOUT;
use sqlx::AnyPool;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// How often the WAL is checkpointed.
const EVERY: Duration = Duration::from_millis(200);

/// WAL length, in frames (pages), past which a checkpoint makes the WAL
/// start over: 16 MiB with 4 KiB pages.
const RESTART_FRAMES: i64 = 4096;

/// Longest a restarting checkpoint waits for readers (SQLite's busy
/// timeout on the writer's connection while it runs).
const RESTART_WAIT: Duration = Duration::from_millis(100);

/// Starts the checkpoint task: passive checkpoints on `pool` (reads), a
/// restarting one on `writer` (the write turn) when the WAL is long. It
/// runs while `alive` can be upgraded and the pools are open.
pub fn spawn(pool: AnyPool, writer: AnyPool, alive: &Arc<()>) {
    let alive: Weak<()> = Arc::downgrade(alive);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if alive.strong_count() == 0 || pool.is_closed() || writer.is_closed() {
                return;
            }
            let outcome = match checkpoint(&pool, "PASSIVE").await {
                Ok(frames) if frames > RESTART_FRAMES => restart(&writer).await,
                other => other.map(|_| ()),
            };
            if let Err(e) = outcome {
                if pool.is_closed() || writer.is_closed() {
                    return;
                }
                tracing::warn!(error = %e, "WAL checkpoint failed; the next one will retry");
            }
        }
    });
}

/// Runs one checkpoint of `mode`; returns the WAL's length in frames.
async fn checkpoint<'c>(
    on: impl sqlx::Executor<'c, Database = sqlx::Any>,
    mode: &str,
) -> Result<i64, sqlx::Error> {
    // (busy, frames in the WAL, frames checkpointed)
    let (_, frames, _): (i64, i64, i64) = sqlx::query_as(&format!("PRAGMA wal_checkpoint({mode})"))
        .fetch_one(on)
        .await?;
    Ok(frames)
}

/// A `RESTART` checkpoint on the writer's connection, waiting at most
/// `RESTART_WAIT` for readers.
async fn restart(writer: &AnyPool) -> Result<(), sqlx::Error> {
    let mut conn = writer.acquire().await?;
    let timeout = |d: Duration| format!("PRAGMA busy_timeout = {}", d.as_millis());
    sqlx::query(&timeout(RESTART_WAIT))
        .execute(&mut *conn)
        .await?;
    let outcome = checkpoint(&mut *conn, "RESTART").await;
    if let Err(e) = sqlx::query(&timeout(BUSY_TIMEOUT))
        .execute(&mut *conn)
        .await
    {
        // A writer that gives up after 100 ms must not go back to the pool.
        conn.close_on_drop();
        return Err(e);
    }
    outcome.map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_connections_busy_timeout_is_the_one_put_back() {
        let set = format!("busy_timeout = {};", BUSY_TIMEOUT.as_millis());
        assert!(crate::SQLITE_PRAGMAS.contains(&set));
    }
}
