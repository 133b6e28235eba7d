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
//! Background work (the retention sweep) takes the lane only when no other
//! work waits for it (`run_when_quiet`): a live write that arrives while a
//! background batch runs waits for that batch alone, never for a queue of
//! them.
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
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// Prepared statements kept per connection: the multi-row statements come
/// in a few sizes each, and the API's units of work (`crate::group`) run
/// theirs on this connection too.
const STATEMENT_CACHE: usize = 512;

/// Where the lane's connection waits while no transaction holds it: a
/// `LiteTx` or an open group (`crate::group`) takes it, holding the
/// process's write turn, and puts it back when it ends.
pub type Home = Arc<Mutex<Option<rusqlite::Connection>>>;

/// Takes the connection from `home`; it is there whenever its taker holds
/// the write turn.
pub(crate) fn take(home: &Home) -> Result<rusqlite::Connection, StoreError> {
    home.lock()
        .unwrap_or_else(|p| p.into_inner())
        .take()
        .ok_or(StoreError::Lane(LaneError::ConnectionInUse))
}

/// Puts the connection back in `home`, out of any transaction.
pub(crate) fn put_back(home: &Home, conn: rusqlite::Connection) {
    *home.lock().unwrap_or_else(|p| p.into_inner()) = Some(conn);
}

/// The write lane: its thread's runtime and its SQLite connection.
pub struct Lane {
    handle: Handle,
    /// The lane's connection, taken by a `LiteTx` while it runs.
    connection: Home,
    /// Work sent to the lane and not finished yet.
    queued: Arc<AtomicUsize>,
    /// The connection's durability.
    synchronous: Synchronous,
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
            queued: Arc::new(AtomicUsize::new(0)),
            synchronous,
            _stop: stop,
        })
    }

    /// Runs `work` on the lane and waits for its result.
    pub async fn run<T, F>(&self, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        let queued = Queued::enter(&self.queued);
        self.handle
            .spawn(async move {
                let _queued = queued;
                work.await
            })
            .await
            .map_err(LaneError::TaskLost)?
    }

    /// Runs background `work` on the lane once no other work is queued on
    /// it, or once it has waited `patience` for that (a lane that is never
    /// quiet still gets its background work done).
    pub async fn run_when_quiet<T, F>(&self, patience: Duration, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        let queued = self.queued.clone();
        self.run(async move {
            let until = Instant::now() + patience;
            // This task is one of the queued.
            while queued.load(Ordering::Acquire) > 1 && Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            work.await
        })
        .await
    }

    /// The lane's runtime, for tasks that run beside the lane's work until
    /// they end or the lane does.
    pub(crate) fn runtime(&self) -> Handle {
        self.handle.clone()
    }

    /// The slot of the lane's connection, which a transaction takes while
    /// it holds the process's write turn.
    pub(crate) fn connection(&self) -> Home {
        self.connection.clone()
    }

    /// Begins a transaction on the lane's connection, holding `writer`'s
    /// connection as this process's turn to write. Its statements run on
    /// the calling thread: callers of the hot writes are on the lane.
    pub async fn begin(&self, writer: &AnyPool) -> Result<LiteTx, StoreError> {
        let turn = writer.acquire().await?;
        LiteTx::begin(self.connection.clone(), Some(turn))
    }

    /// As `begin`, for work that is done again if a power cut loses it:
    /// its commit does not wait for the disk (`LiteTx::begin_unsynced`).
    pub async fn begin_unsynced(&self, writer: &AnyPool) -> Result<LiteTx, StoreError> {
        let turn = writer.acquire().await?;
        LiteTx::begin_unsynced(self.connection.clone(), Some(turn), self.synchronous)
    }
}

/// One piece of work counted in a lane's queue until it is dropped: when
/// its work ends, or when the work is lost with the lane.
struct Queued(Arc<AtomicUsize>);

impl Queued {
    fn enter(queued: &Arc<AtomicUsize>) -> Queued {
        queued.fetch_add(1, Ordering::AcqRel);
        Queued(queued.clone())
    }
}

impl Drop for Queued {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
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

    fn lane() -> (tempfile::TempDir, Lane) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("d.db");
        drop(rusqlite::Connection::open(&file).unwrap());
        let lane = Lane::start(file.to_str().unwrap(), Synchronous::Normal).unwrap();
        (dir, lane)
    }

    /// Runs background work (patience `patience`) while live work that
    /// takes `live` holds the lane: when each ended.
    async fn background_beside_live(live: Duration, patience: Duration) -> (Instant, Instant) {
        let (_dir, lane) = lane();
        let lane = Arc::new(lane);
        let live = {
            let lane = lane.clone();
            tokio::spawn(async move {
                lane.run(async move {
                    tokio::time::sleep(live).await;
                    Ok(Instant::now())
                })
                .await
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        let background = lane
            .run_when_quiet(patience, async { Ok(Instant::now()) })
            .await
            .unwrap();
        let live_ended = live.await.unwrap().unwrap();
        assert_eq!(lane.queued.load(Ordering::Acquire), 0);
        (background, live_ended)
    }

    /// Background work waits until the work queued before it is done.
    #[tokio::test]
    async fn background_work_waits_for_a_quiet_lane() {
        let (background, live_ended) =
            background_beside_live(Duration::from_millis(150), Duration::from_secs(5)).await;
        assert!(background >= live_ended, "the background work ran first");
    }

    /// A lane that is never quiet still runs background work after its
    /// patience.
    #[tokio::test]
    async fn background_work_runs_after_its_patience() {
        let (background, live_ended) =
            background_beside_live(Duration::from_secs(2), Duration::from_millis(50)).await;
        assert!(
            background < live_ended,
            "the background work waited for ever"
        );
    }
}
