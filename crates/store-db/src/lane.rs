//! The write lane: a thread with its own single-threaded runtime on which
//! the store runs its hot write transactions (the intake's group write,
//! claims, releases, attempt records).
//!
//! The rule: a task that holds SQLite's single writer never waits in a run
//! queue between the steps of its transaction. A transaction is several
//! steps (`BEGIN`, each statement, `COMMIT`), and between two of them the
//! task that drives it must be polled again; on the application's runtime
//! it would wait behind the HTTP tasks with the writer held idle, while
//! every other writer of the process queues for it. On the lane nothing
//! else competes, so a transaction's steps follow each other at once.
//!
//! The lane has its own SQLite connection, on which the hot writes run
//! their statements synchronously (`crate::tx`): no statement waits for
//! another thread. Its turn at the database's write lock is the store's
//! sqlx writer (a pool of one), held for the transaction, so the lane and
//! the other writes of this process take turns instead of meeting SQLite's
//! busy handler (which sleeps); other processes still do.
//!
//! Its thread ends when the `Lane` is dropped (the store holds it in an
//! `Arc` shared by its clones). A future sent to
//! the lane runs to its end even if its caller stops waiting, so a group
//! write is never abandoned half-way by a cancelled caller.

use crate::error::LaneError;
use crate::tx::LiteTx;
use crate::{StoreError, Synchronous};
use sqlx::AnyPool;
use std::future::Future;
use std::sync::{Arc, Mutex};
use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// Prepared statements kept per connection: the multi-row statements come
/// in a few sizes each.
const STATEMENT_CACHE: usize = 128;

/// The write lane: its thread's runtime and its SQLite connection.
pub struct Lane {
    handle: Handle,
    /// The lane's connection, taken by a `LiteTx` while it runs.
    connection: Arc<Mutex<Option<rusqlite::Connection>>>,
    /// Dropped with the lane, which ends the lane's thread.
    _stop: oneshot::Sender<()>,
}

impl Lane {
    /// Starts the lane with its connection to the database `file`, which
    /// must exist (the store's pools made it).
    pub fn start(file: &str, synchronous: Synchronous) -> Result<Lane, StoreError> {
        let connection = rusqlite::Connection::open_with_flags(
            file,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE
                | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX
                | rusqlite::OpenFlags::SQLITE_OPEN_URI,
        )?;
        // As the pools' connections (`SQLITE_PRAGMAS`, then the durability).
        connection.execute_batch(crate::SQLITE_PRAGMAS)?;
        connection.execute_batch(synchronous.pragma())?;
        connection.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .thread_name("store-lane")
            .build()
            .map_err(|e| StoreError::Config(format!("write lane: {e}")))?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("store-lane".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let _ = stopped.await;
                });
            })
            .map_err(|e| StoreError::Config(format!("write lane: {e}")))?;
        Ok(Lane {
            handle,
            connection: Arc::new(Mutex::new(Some(connection))),
            _stop: stop,
        })
    }

    /// Runs `work` on the lane and waits for its result.
    pub async fn run<T, F>(&self, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        self.handle.spawn(work).await.map_err(LaneError::TaskLost)?
    }

    /// Begins a transaction on the lane's connection, holding `writer`'s
    /// connection as this process's turn to write. Its statements run on
    /// the calling thread: callers of the hot writes are on the lane.
    pub async fn begin(&self, writer: &AnyPool) -> Result<LiteTx, StoreError> {
        let turn = writer.acquire().await?;
        LiteTx::begin(self.connection.clone(), Some(turn))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Synchronous;

    /// The lane's connection runs with the configured durability:
    /// `PRAGMA synchronous` reads 2 for FULL and 1 for NORMAL (the store's
    /// tests check its pools' connections).
    #[tokio::test]
    async fn the_lane_has_the_configured_durability() {
        for (synchronous, want) in [(Synchronous::Full, 2i64), (Synchronous::Normal, 1)] {
            let dir = tempfile::tempdir().unwrap();
            let file = dir.path().join("d.db");
            drop(rusqlite::Connection::open(&file).unwrap());
            let lane = Lane::start(file.to_str().unwrap(), synchronous).unwrap();
            let got: i64 = lane
                .connection
                .lock()
                .unwrap()
                .as_ref()
                .unwrap()
                .query_row("PRAGMA synchronous", [], |r| r.get(0))
                .unwrap();
            assert_eq!(got, want, "{synchronous:?} lane");
        }
    }
}
