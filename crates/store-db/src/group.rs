//! SQLite's group commit: units of work that run while another commit
//! syncs share the next one.
//!
//! The rule: a unit is answered only once a `COMMIT` that holds its writes
//! is on disk, as when each unit had a commit of its own, and a unit that
//! rolls back leaves nothing behind. What the group changes is the number
//! of syncs: with `synchronous = FULL` every commit waits for the disk, and
//! one commit now holds every unit that ended while the previous one
//! synced.
//!
//! How: one transaction at a time is open on the write lane's connection,
//! taken with the process's write turn (the writer pool's connection, as
//! `crate::lane` takes it), so the lane's hot writes and the group take
//! turns. Units run in it one after another (`Group::begin` queues them,
//! first come first served), each inside a savepoint of its own: a unit
//! that fails or is dropped rolls back to its savepoint and leaves the
//! others' writes alone; one that ends well releases its savepoint and
//! waits for the group's `COMMIT`. The committer, a task on the lane's
//! runtime, queues for the same turn as the units: when it gets it, every
//! unit that queued before it has ended, and it commits them together and
//! answers each. Units that arrive while it syncs form the next group. A
//! group holds at most `MAX_GROUP` units: the unit that fills it hands it
//! to the committer at once, so the first unit of a burst waits for a
//! bounded number of others.
//!
//! Statements run on the caller's thread, synchronously, as the lane's do
//! (`crate::tx`): a unit holds the write turn, so its statements must not
//! each hop to another thread and back. Only the `COMMIT`, which waits for
//! the disk, runs on the lane's thread.
//!
//! What it must never do: answer a unit before the commit that holds it,
//! or keep the writes of a unit that rolled back. Should SQLite end the
//! transaction by itself (a full disk, an I/O error), or the `COMMIT`
//! fail, every unit of the group is answered with an error: none of them
//! is on disk.

use crate::error::LaneError;
use crate::lane::{self, Home, Lane};
use crate::StoreError;
use sqlx::AnyPool;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{oneshot, Notify, OwnedMutexGuard};

/// The units of work of a store that share commits (SQLite).
pub struct Group {
    shared: Arc<Shared>,
}

struct Shared {
    /// The open group transaction; its lock is the turn to run statements.
    slot: Arc<tokio::sync::Mutex<Slot>>,
    /// Signalled when a unit ends: the committer has work.
    ended: Notify,
    /// The process's write turn (`crate::lane`).
    writer: AnyPool,
    /// The lane's runtime, where groups commit.
    lane: tokio::runtime::Handle,
    /// The lane's connection, taken while a group is open.
    home: Home,
    /// Groups committed (the tests count them).
    commits: AtomicU64,
}

#[derive(Default)]
struct Slot {
    open: Option<Open>,
}

/// An open group transaction and the units it holds.
struct Open {
    conn: rusqlite::Connection,
    _turn: sqlx::pool::PoolConnection<sqlx::Any>,
    /// Units that released their savepoint, each waiting for the commit.
    members: Vec<oneshot::Sender<Result<(), Failure>>>,
}

/// Why a group did not commit, copied to each of its units.
#[derive(Debug, Clone)]
enum Failure {
    /// The `COMMIT` failed with this SQLite error.
    Commit(rusqlite::ffi::Error, Option<String>),
    /// SQLite ended the transaction by itself, or a unit's writes could
    /// not be undone alone.
    RolledBack,
}

impl Failure {
    fn of(e: rusqlite::Error) -> Failure {
        match e {
            rusqlite::Error::SqliteFailure(code, message) => Failure::Commit(code, message),
            _ => Failure::RolledBack,
        }
    }

    fn into_error(self) -> StoreError {
        match self {
            Failure::Commit(code, message) => rusqlite::Error::SqliteFailure(code, message).into(),
            Failure::RolledBack => StoreError::Lane(LaneError::GroupRolledBack),
        }
    }
}

/// The longest a unit waits for its turn, as long as a write waits for
/// the writer pool's connection: past it, the store is too busy to answer
/// in time (`StoreError::is_unavailable`).
const TURN_WAIT: Duration = Duration::from_secs(10);

/// The most units one commit holds.
pub const MAX_GROUP: usize = 32;

/// The savepoint of the running unit (one runs at a time).
const SAVEPOINT: &str = "SAVEPOINT unit";
const RELEASE: &str = "RELEASE unit";
const UNDO: &str = "ROLLBACK TO unit; RELEASE unit";

impl Group {
    /// The group of the store whose write turn is `writer`, on `lane`'s
    /// connection; its committer runs on the lane's runtime.
    pub fn start(lane: &Lane, writer: AnyPool) -> Group {
        let shared = Arc::new(Shared {
            slot: Arc::default(),
            ended: Notify::new(),
            writer,
            lane: lane.runtime(),
            home: lane.connection(),
            commits: AtomicU64::new(0),
        });
        drop(shared.lane.spawn(commit_groups(shared.clone())));
        Group { shared }
    }

    /// Begins a unit: waits for its turn (for at most `TURN_WAIT`), opens
    /// a group transaction if none is open, and sets the unit's savepoint.
    pub async fn begin(&self) -> Result<Unit, StoreError> {
        let mut slot = tokio::time::timeout(TURN_WAIT, self.shared.slot.clone().lock_owned())
            .await
            .map_err(|_| StoreError::Database(sqlx::Error::PoolTimedOut))?;
        if slot.open.is_none() {
            let turn = self.shared.writer.acquire().await?;
            let conn = lane::take(&self.shared.home)?;
            if let Err(e) = conn.execute_batch("BEGIN IMMEDIATE") {
                lane::put_back(&self.shared.home, conn);
                return Err(e.into());
            }
            slot.open = Some(Open {
                conn,
                _turn: turn,
                members: Vec::new(),
            });
        }
        let unit = Unit {
            slot: Some(slot),
            shared: self.shared.clone(),
        };
        unit.conn()?.execute_batch(SAVEPOINT)?;
        Ok(unit)
    }

    /// Groups committed so far (the tests count them).
    pub fn commits(&self) -> u64 {
        self.shared.commits.load(Ordering::Relaxed)
    }
}

/// One unit of work in a group: it holds the turn until it ends. Dropped
/// without `commit`, it rolls back to its savepoint.
pub struct Unit {
    slot: Option<OwnedMutexGuard<Slot>>,
    shared: Arc<Shared>,
}

impl Unit {
    /// The group's connection, for the unit's statements.
    pub(crate) fn conn(&self) -> Result<&rusqlite::Connection, StoreError> {
        self.slot
            .as_ref()
            .and_then(|slot| slot.open.as_ref())
            .map(|open| &open.conn)
            .ok_or(StoreError::Lane(LaneError::TransactionEnded))
    }

    /// Keeps the unit's writes: releases its savepoint, gives the turn to
    /// the next unit, and returns once the group's commit is on disk.
    pub(crate) async fn commit(mut self) -> Result<(), StoreError> {
        let mut slot = self
            .slot
            .take()
            .ok_or(StoreError::Lane(LaneError::TransactionEnded))?;
        let Some(open) = slot.open.as_mut() else {
            return Err(StoreError::Lane(LaneError::TransactionEnded));
        };
        if let Err(e) = open.conn.execute_batch(RELEASE) {
            // The drop undoes the unit's writes.
            self.slot = Some(slot);
            return Err(e.into());
        }
        let (done, committed) = oneshot::channel();
        open.members.push(done);
        if open.members.len() >= MAX_GROUP {
            if let Some(full) = slot.open.take() {
                let shared = self.shared.clone();
                drop(self.shared.lane.spawn(async move {
                    finish(&shared, full, Finish::Commit);
                }));
            }
        }
        drop(slot);
        self.shared.ended.notify_one();
        match committed.await {
            Ok(outcome) => outcome.map_err(Failure::into_error),
            Err(_) => Err(StoreError::Lane(LaneError::GroupRolledBack)),
        }
    }

    /// Undoes the unit's writes and gives the turn to the next unit.
    pub(crate) fn rollback(mut self) {
        self.undo();
    }

    fn undo(&mut self) {
        let Some(mut slot) = self.slot.take() else {
            return;
        };
        if let Some(open) = slot.open.as_ref() {
            let undone = !open.conn.is_autocommit() && open.conn.execute_batch(UNDO).is_ok();
            if !undone {
                // The transaction is gone, or this unit's writes cannot be
                // taken out of it alone: the whole group goes.
                if let Some(open) = slot.open.take() {
                    finish(&self.shared, open, Finish::Abandon);
                }
            }
        }
        drop(slot);
        self.shared.ended.notify_one();
    }
}

impl Drop for Unit {
    fn drop(&mut self) {
        self.undo();
    }
}

enum Finish {
    /// Commit what the members kept.
    Commit,
    /// Roll everything back: the members are answered with a failure.
    Abandon,
}

/// The committer: after units end, it takes the turn once those queued
/// before it are done, and commits the open group. It runs on the lane's
/// runtime, so it stops with the lane.
async fn commit_groups(shared: Arc<Shared>) {
    loop {
        shared.ended.notified().await;
        let mut slot = shared.slot.lock().await;
        if let Some(open) = slot.open.take() {
            finish(&shared, open, Finish::Commit);
        }
    }
}

/// Ends the group transaction `open`, gives its connection and the write
/// turn back, and answers its members.
fn finish(shared: &Shared, open: Open, how: Finish) {
    let Open {
        conn,
        _turn,
        members,
    } = open;
    let outcome = if conn.is_autocommit() {
        Err(Failure::RolledBack)
    } else {
        match how {
            Finish::Commit if members.is_empty() => {
                conn.execute_batch("ROLLBACK").map_err(Failure::of)
            }
            Finish::Commit => conn.execute_batch("COMMIT").map_err(Failure::of),
            Finish::Abandon => Err(Failure::RolledBack),
        }
    };
    if !conn.is_autocommit() {
        // An abandoned group, or a failed COMMIT, which leaves the
        // transaction open.
        let _ = conn.execute_batch("ROLLBACK");
    }
    if outcome.is_ok() && !members.is_empty() {
        shared.commits.fetch_add(1, Ordering::Relaxed);
    }
    lane::put_back(&shared.home, conn);
    drop(_turn);
    for member in members {
        let _ = member.send(outcome.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Synchronous;
    use sqlx::any::AnyPoolOptions;

    struct Fixture {
        _dir: tempfile::TempDir,
        file: std::path::PathBuf,
        _lane: Lane,
        group: Arc<Group>,
    }

    async fn fixture() -> Fixture {
        sqlx::any::install_default_drivers();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("d.db");
        rusqlite::Connection::open(&file)
            .unwrap()
            .execute_batch("PRAGMA journal_mode = WAL; CREATE TABLE t (k BIGINT PRIMARY KEY)")
            .unwrap();
        let lane = Lane::start(file.to_str().unwrap(), Synchronous::Full).unwrap();
        let writer = AnyPoolOptions::new()
            .max_connections(1)
            .connect(&format!("sqlite://{}", file.display()))
            .await
            .unwrap();
        let group = Arc::new(Group::start(&lane, writer));
        Fixture {
            _dir: dir,
            file,
            _lane: lane,
            group,
        }
    }

    impl Fixture {
        /// The keys on disk, read on a connection of their own.
        fn kept(&self) -> Vec<i64> {
            let conn = rusqlite::Connection::open(&self.file).unwrap();
            let mut stmt = conn.prepare("SELECT k FROM t ORDER BY k").unwrap();
            let keys = stmt.query_map([], |r| r.get(0)).unwrap();
            keys.map(Result::unwrap).collect()
        }
    }

    /// How a unit of `together` ends after writing its key.
    #[derive(Debug, Clone, Copy)]
    enum End {
        Commit,
        Rollback,
        Drop,
        /// Ends the group's transaction behind the group's back, as SQLite
        /// does on a full disk.
        KillTransaction,
    }

    async fn write_and_end(unit: Unit, key: i64, end: End) -> Result<(), StoreError> {
        unit.conn()?
            .execute("INSERT INTO t (k) VALUES (?1)", [key])?;
        match end {
            End::Commit => unit.commit().await,
            End::Rollback => {
                unit.rollback();
                Ok(())
            }
            End::Drop => {
                drop(unit);
                Ok(())
            }
            End::KillTransaction => {
                unit.conn()?.execute_batch("ROLLBACK")?;
                drop(unit);
                Ok(())
            }
        }
    }

    /// Runs one unit per `ends` (unit `i` writes key `base + i`) so that
    /// all of them are in one group: the first holds the turn until the
    /// others queue behind it. Returns each unit's outcome.
    async fn together(fixture: &Fixture, base: i64, ends: &[End]) -> Vec<Result<(), StoreError>> {
        let first = fixture.group.begin().await.unwrap();
        let mut tasks = Vec::new();
        for (key, end) in ends.iter().enumerate().skip(1) {
            let (group, end) = (fixture.group.clone(), *end);
            tasks.push(tokio::spawn(async move {
                write_and_end(group.begin().await?, base + key as i64, end).await
            }));
        }
        // The others run up to their wait for the turn (a current-thread
        // runtime runs them when this task yields).
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        tasks.insert(0, tokio::spawn(write_and_end(first, base, ends[0])));
        let mut outcomes = Vec::new();
        for task in tasks {
            outcomes.push(task.await.unwrap());
        }
        outcomes
    }

    /// Units that queue while another runs share one commit, and each is
    /// on disk when its commit returns.
    #[tokio::test]
    async fn units_that_queue_together_share_one_commit() {
        let fixture = fixture().await;
        let outcomes = together(&fixture, 0, &[End::Commit; 5]).await;
        assert!(outcomes.iter().all(Result::is_ok), "{outcomes:?}");
        assert_eq!(fixture.kept(), [0, 1, 2, 3, 4]);
        assert_eq!(fixture.group.commits(), 1);

        // A group holds at most MAX_GROUP units.
        let outcomes = together(&fixture, 100, &[End::Commit; MAX_GROUP + 1]).await;
        assert!(outcomes.iter().all(Result::is_ok), "{outcomes:?}");
        assert_eq!(fixture.kept().len(), 5 + MAX_GROUP + 1);
        assert_eq!(fixture.group.commits(), 3);

        // Alone, a unit has a commit of its own.
        let unit = fixture.group.begin().await.unwrap();
        write_and_end(unit, 5, End::Commit).await.unwrap();
        assert!(fixture.kept().contains(&5), "on disk once it returns");
        assert_eq!(fixture.group.commits(), 4);
    }

    /// A unit that rolls back, or is dropped, takes its own writes with it
    /// and leaves those of the rest of its group.
    #[tokio::test]
    async fn a_unit_that_rolls_back_takes_only_its_own_writes() {
        let fixture = fixture().await;
        let ends = [
            End::Commit,
            End::Rollback,
            End::Drop,
            End::Commit,
            End::Drop,
        ];
        let outcomes = together(&fixture, 0, &ends).await;
        assert!(outcomes.iter().all(Result::is_ok), "{outcomes:?}");
        assert_eq!(fixture.kept(), [0, 3]);
        assert_eq!(fixture.group.commits(), 1);

        // A group whose units all rolled back commits nothing, and frees
        // the turn.
        let outcomes = together(&fixture, 5, &[End::Rollback, End::Drop]).await;
        assert!(outcomes.iter().all(Result::is_ok), "{outcomes:?}");
        assert_eq!(fixture.group.commits(), 1);
        let unit = fixture.group.begin().await.unwrap();
        write_and_end(unit, 9, End::Commit).await.unwrap();
        assert_eq!(fixture.kept(), [0, 3, 9]);
    }

    /// When SQLite ends the group's transaction by itself, no unit of the
    /// group is answered as committed, nothing of it is on disk, and the
    /// next unit starts a new group.
    #[tokio::test]
    async fn a_group_whose_transaction_ends_fails_every_unit_in_it() {
        let fixture = fixture().await;
        let ends = [End::Commit, End::Commit, End::KillTransaction, End::Commit];
        let outcomes = together(&fixture, 0, &ends).await;
        for outcome in &outcomes[..2] {
            let e = outcome.as_ref().expect_err("answered as committed");
            assert!(e.is_unavailable(), "{e}: a failure to retry");
        }
        assert!(outcomes[2].is_ok(), "{:?}", outcomes[2]);
        // The unit queued after the one that ended the transaction began a
        // group of its own.
        assert!(outcomes[3].is_ok(), "{:?}", outcomes[3]);
        assert_eq!(fixture.kept(), [3]);
        let unit = fixture.group.begin().await.unwrap();
        write_and_end(unit, 7, End::Commit).await.unwrap();
        assert_eq!(fixture.kept(), [3, 7]);
    }

    /// What a batch of units ending together leaves, by the rule: a unit
    /// that commits is kept and answered `Ok` once its group commits; a
    /// unit that ends the transaction fails every unit that committed
    /// before it in its group, and the next unit starts a new group.
    fn model(base: i64, ends: &[End]) -> (Vec<i64>, Vec<bool>) {
        let (mut kept, mut ok) = (Vec::new(), vec![true; ends.len()]);
        let mut group = Vec::new();
        for (i, end) in ends.iter().enumerate() {
            match end {
                End::Commit => group.push(i),
                End::Rollback | End::Drop => {}
                End::KillTransaction => {
                    for &member in &group {
                        ok[member] = false;
                    }
                    group.clear();
                }
            }
        }
        kept.extend(group.iter().map(|&i| base + i as i64));
        (kept, ok)
    }

    fn any_end() -> impl proptest::strategy::Strategy<Value = End> {
        use proptest::prelude::*;
        prop_oneof![
            6 => Just(End::Commit),
            2 => Just(End::Rollback),
            2 => Just(End::Drop),
            1 => Just(End::KillTransaction),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

        /// Whatever mix of units ends together, what is on disk and what
        /// each unit is told follow the rule (`model`), and the next unit
        /// after them commits.
        #[test]
        fn a_group_keeps_exactly_its_committed_units(
            ends in proptest::collection::vec(any_end(), 1..12),
        ) {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let fixture = fixture().await;
                let outcomes = together(&fixture, 0, &ends).await;
                let (kept, ok) = model(0, &ends);
                let told: Vec<bool> = outcomes.iter().map(Result::is_ok).collect();
                assert_eq!(told, ok, "{ends:?}: {outcomes:?}");
                assert_eq!(fixture.kept(), kept, "{ends:?}");
                let unit = fixture.group.begin().await.unwrap();
                write_and_end(unit, 100, End::Commit).await.unwrap();
                assert_eq!(fixture.kept().last(), Some(&100));
            });
        }
    }
}
