//! The write lane: a thread with its own single-threaded runtime on which
//! the store runs its hot write transactions (the intake's group write,
//! claims, releases, attempt records).
//!
//! Why: a transaction is several round trips to the database (with SQLite,
//! to sqlx's connection thread: `BEGIN`, each statement, `COMMIT`), and
//! between two of them the task that drives it must be polled again. On
//! the application's runtime that task waits in a run queue behind
//! hundreds of HTTP tasks, holding the single SQLite writer idle meanwhile:
//! under the dispatch benchmark's live load the writer connection was busy
//! only half the time while publishers queued for it. On the lane nothing
//! else competes, so a transaction's round trips follow each other at once.
//!
//! The lane owns no data and never blocks: it only polls futures that wait
//! on the database. Its thread ends when the last `Store` clone is dropped.
//! A future sent to the lane runs to its end even if its caller stops
//! waiting, so a group write is never abandoned half-way by a cancelled
//! caller.

use crate::StoreError;
use std::future::Future;
use tokio::runtime::Handle;
use tokio::sync::oneshot;

pub(crate) struct Lane {
    handle: Handle,
    /// Dropped with the last `Store` clone (the lane is held in an `Arc`),
    /// which ends the lane's thread.
    _stop: oneshot::Sender<()>,
}

impl Lane {
    pub(crate) fn start() -> Result<Lane, StoreError> {
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
            _stop: stop,
        })
    }

    /// Runs `work` on the lane and waits for its result.
    pub(crate) async fn run<T, F>(&self, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        self.handle
            .spawn(work)
            .await
            .map_err(|e| StoreError::Shared(format!("the write lane lost a task: {e}")))?
    }
}
