//! `WriteTx`, the one write transaction of the store, whichever engine runs
//! it. Every write of every domain module is a function of a `WriteTx`, so
//! a caller can make several writes (and emit their events, which the
//! store's `dispatch::outbox` does through `execute`) in one unit of work:
//! all of it commits, or none of it.
//!
//! It runs on PostgreSQL through sqlx, on SQLite through sqlx's writer
//! connection (the store's `Store::begin`, the API's transactions) or
//! through the write lane's own connection (`crate::lane`, the
//! dispatcher's hot writes), synchronously: a `Lite` statement never waits
//! for another thread.
//!
//! Why two drivers: through sqlx every SQLite statement is a round trip to
//! its connection thread (arguments converted for `Any`, then each
//! returned row sent back over a channel and converted again). The hot
//! writes hold the single SQLite writer, so they must not hop to another
//! thread per statement: on the lane they run in place.
//!
//! Statements given to `Tx` bind their values in mark order: anonymous `?`
//! marks (`crate::marks`) or `$1, $2, …` each first written in that order.
//! This module must never decide what to write; it only runs statements.
//! What a commit announces in the process is the caller's: the owner of
//! the transaction attaches its signals (`WriteTx::new`'s `signals`, opaque
//! here) and a write asks for one to be woken (`wake_on_commit`).
//!
//! A write may also ask for statements to run last, right before the
//! `COMMIT` (`at_commit`): a row that concurrent units of work queue on (a
//! counter) is then locked for the commit alone, not for the rest of the
//! unit of work. What they write is the caller's, as any statement's.

use crate::error::LaneError;
use crate::lane::{self, Home};
use crate::{Backend, StoreError, Synchronous};
use sqlx::Row;
use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use tokio::sync::Notify;

/// A value bound to a statement.
#[derive(Debug, Clone, Copy)]
pub enum Arg<'a> {
    Int(Option<i64>),
    Text(Option<&'a str>),
}

impl Arg<'_> {
    /// The value written into a statement's text (`'…'` for text, as it
    /// is: no quote is escaped), for a test that reads the statement's
    /// plan with its values in place of the marks.
    pub fn literal(&self) -> String {
        match self {
            Arg::Int(v) => v.map_or("NULL".to_owned(), |v| v.to_string()),
            Arg::Text(v) => v.map_or("NULL".to_owned(), |v| format!("'{v}'")),
        }
    }
}

impl From<i64> for Arg<'_> {
    fn from(v: i64) -> Self {
        Arg::Int(Some(v))
    }
}

impl From<Option<i64>> for Arg<'_> {
    fn from(v: Option<i64>) -> Self {
        Arg::Int(v)
    }
}

impl<'a> From<&'a str> for Arg<'a> {
    fn from(v: &'a str) -> Self {
        Arg::Text(Some(v))
    }
}

impl<'a> From<Option<&'a str>> for Arg<'a> {
    fn from(v: Option<&'a str>) -> Self {
        Arg::Text(v)
    }
}

impl<'a> From<&'a String> for Arg<'a> {
    fn from(v: &'a String) -> Self {
        Arg::Text(Some(v.as_str()))
    }
}

/// A returned value.
#[derive(Debug, Clone, PartialEq)]
enum Cell {
    Null,
    Int(i64),
    Text(String),
}

/// A returned row: its statement's column names and its values.
#[derive(Debug, Clone)]
pub struct CellRow {
    names: Arc<[String]>,
    cells: Vec<Cell>,
}

/// Named column access, for rows of either driver (the store's
/// repositories decode their records through it).
pub trait Columns {
    fn text(&self, name: &str) -> Result<Option<String>, StoreError>;
    fn int(&self, name: &str) -> Result<Option<i64>, StoreError>;
}

impl Columns for sqlx::any::AnyRow {
    fn text(&self, name: &str) -> Result<Option<String>, StoreError> {
        Ok(self.try_get(name)?)
    }

    fn int(&self, name: &str) -> Result<Option<i64>, StoreError> {
        Ok(self.try_get(name)?)
    }
}

impl CellRow {
    fn cell(&self, name: &str) -> Result<&Cell, StoreError> {
        self.names
            .iter()
            .position(|n| n == name)
            .map(|i| &self.cells[i])
            .ok_or_else(|| StoreError::Corrupt(format!("no column {name}")))
    }
}

impl Columns for CellRow {
    fn text(&self, name: &str) -> Result<Option<String>, StoreError> {
        match self.cell(name)? {
            Cell::Null => Ok(None),
            Cell::Text(t) => Ok(Some(t.clone())),
            Cell::Int(_) => Err(StoreError::Corrupt(format!("{name}: a number, not text"))),
        }
    }

    fn int(&self, name: &str) -> Result<Option<i64>, StoreError> {
        match self.cell(name)? {
            Cell::Null => Ok(None),
            Cell::Int(v) => Ok(Some(*v)),
            Cell::Text(_) => Err(StoreError::Corrupt(format!("{name}: text, not a number"))),
        }
    }
}

/// The one row a write returned.
pub fn single<R>(rows: &[R]) -> Result<&R, StoreError> {
    match rows {
        [row] => Ok(row),
        _ => Err(StoreError::Corrupt(format!(
            "a write returned {} rows, not one",
            rows.len()
        ))),
    }
}

/// Required values of `Columns`.
pub fn text(row: &(impl Columns + ?Sized), name: &str) -> Result<String, StoreError> {
    row.text(name)?
        .ok_or_else(|| StoreError::Corrupt(format!("{name} is null")))
}

pub fn int(row: &(impl Columns + ?Sized), name: &str) -> Result<i64, StoreError> {
    row.int(name)?
        .ok_or_else(|| StoreError::Corrupt(format!("{name} is null")))
}

/// An open write transaction; dropped without `commit`, it rolls back
/// (and wakes nobody).
pub struct WriteTx {
    conn: Conn,
    backend: Backend,
    /// What the owner of the transaction attached for the writes made in
    /// it (the store's in-process signals); this layer never looks inside.
    signals: Option<Arc<dyn Any + Send + Sync>>,
    /// Woken, once each, after the commit (never after a rollback).
    on_commit: Vec<Arc<Notify>>,
    /// Released when the transaction ends, committed or not (an
    /// idempotency key's in-process claim).
    _held: Option<Box<dyn Send + Sync>>,
    /// Run in order by `commit`, before its `COMMIT` (`at_commit`).
    last: Vec<Last>,
}

/// What a function given to `at_commit` returns: its statements, run on
/// the transaction it was given.
pub type LastFuture<'t> = Pin<Box<dyn Future<Output = Result<(), StoreError>> + Send + 't>>;

type Last = Box<dyn for<'t> FnOnce(&'t mut WriteTx) -> LastFuture<'t> + Send + Sync>;

/// The connection a `WriteTx` runs on: a pooled sqlx transaction, the
/// write lane's (`crate::lane`), or a unit of a group transaction on that
/// same connection (`crate::group`).
pub enum Conn {
    Sqlx(sqlx::Transaction<'static, sqlx::Any>),
    Lite(LiteTx),
    Group(crate::group::Unit),
}

impl Conn {
    /// The SQLite connection a `Lite` or `Group` transaction runs its
    /// statements on, synchronously.
    fn sqlite(&self) -> Result<&rusqlite::Connection, StoreError> {
        match self {
            Conn::Sqlx(_) => Err(StoreError::Corrupt(
                "a pooled transaction has no SQLite connection of its own".into(),
            )),
            Conn::Lite(tx) => tx.conn(),
            Conn::Group(unit) => unit.conn(),
        }
    }
}

/// A transaction on the write lane's connection, which it takes from its
/// slot for its duration (and puts back when dropped), holding the
/// process's turn to write.
pub struct LiteTx {
    conn: Option<rusqlite::Connection>,
    home: Home,
    _turn: Option<sqlx::pool::PoolConnection<sqlx::Any>>,
    /// The connection's durability, put back when the transaction ends,
    /// if it began with another (`begin_unsynced`).
    restore: Option<Synchronous>,
}

impl LiteTx {
    /// Begins an immediate transaction on the connection in `home`.
    pub fn begin(
        home: Home,
        turn: Option<sqlx::pool::PoolConnection<sqlx::Any>>,
    ) -> Result<LiteTx, StoreError> {
        Self::begin_with(home, turn, None)
    }

    /// Begins a transaction whose `COMMIT` writes the WAL without waiting
    /// for the disk (`synchronous = NORMAL`), on a connection configured
    /// with `configured`, which it gets back when the transaction ends.
    ///
    /// Only for work that is done again if a power cut loses it (the
    /// retention sweep: its rows are still due at the next pass). Nothing
    /// else loses durability: the next commit that syncs the WAL syncs
    /// this one's frames with its own, and a commit the cut tore is
    /// dropped whole when the WAL is recovered.
    pub fn begin_unsynced(
        home: Home,
        turn: Option<sqlx::pool::PoolConnection<sqlx::Any>>,
        configured: Synchronous,
    ) -> Result<LiteTx, StoreError> {
        match configured {
            Synchronous::Normal => Self::begin_with(home, turn, None),
            Synchronous::Full => Self::begin_with(home, turn, Some(configured)),
        }
    }

    fn begin_with(
        home: Home,
        turn: Option<sqlx::pool::PoolConnection<sqlx::Any>>,
        restore: Option<Synchronous>,
    ) -> Result<LiteTx, StoreError> {
        let conn = lane::take(&home)?;
        let tx = LiteTx {
            conn: Some(conn),
            home,
            _turn: turn,
            restore,
        };
        if restore.is_some() {
            tx.conn()?.execute_batch(Synchronous::Normal.pragma())?;
        }
        tx.conn()?.execute_batch("BEGIN IMMEDIATE")?;
        Ok(tx)
    }

    fn conn(&self) -> Result<&rusqlite::Connection, StoreError> {
        self.conn
            .as_ref()
            .ok_or(StoreError::Lane(LaneError::TransactionEnded))
    }
}

impl Drop for LiteTx {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            if !conn.is_autocommit() {
                let _ = conn.execute_batch("ROLLBACK");
            }
            if let Some(configured) = self.restore {
                // A connection that cannot get its durability back must
                // not serve another write: the lane's writes then fail
                // loudly instead of committing unsynced.
                if let Err(e) = conn.execute_batch(configured.pragma()) {
                    tracing::error!(error = %e, "the write lane's connection lost its durability; it is closed");
                    return;
                }
            }
            lane::put_back(&self.home, conn);
        }
    }
}

impl WriteTx {
    /// A transaction on `conn`. `signals` is whatever its owner wants the
    /// writes made in it to reach (`signals`), e.g. the `Notify`s a commit
    /// may wake; `None` when nobody is to be woken.
    /// Its `BEGIN`, sent by the caller on `conn`, counts here (`count`).
    pub fn new(conn: Conn, backend: Backend, signals: Option<Arc<dyn Any + Send + Sync>>) -> Self {
        crate::count::one();
        WriteTx {
            conn,
            backend,
            signals,
            on_commit: Vec::new(),
            _held: None,
            last: Vec::new(),
        }
    }

    /// Runs `last` when the transaction commits, after every statement
    /// made through it and before the `COMMIT`, in the order asked; if it
    /// fails, nothing commits. A rollback never runs it.
    pub fn at_commit<F>(&mut self, last: F)
    where
        F: for<'t> FnOnce(&'t mut WriteTx) -> LastFuture<'t> + Send + Sync + 'static,
    {
        self.last.push(Box::new(last));
    }

    /// What the owner attached at `new`, if it is a `T`.
    pub fn signals<T: Any>(&self) -> Option<&T> {
        self.signals.as_deref()?.downcast_ref()
    }

    /// Wakes `notify` (once, however often it is asked) after this
    /// transaction commits; a rollback wakes nobody.
    pub fn wake_on_commit(&mut self, notify: &Arc<Notify>) {
        if !self.wakes_on_commit(notify) {
            self.on_commit.push(notify.clone());
        }
    }

    /// Whether the commit already wakes `notify`.
    pub fn wakes_on_commit(&self, notify: &Arc<Notify>) -> bool {
        self.on_commit.iter().any(|n| Arc::ptr_eq(n, notify))
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Keeps `value` until the transaction ends, committed or not.
    pub fn hold(&mut self, value: Box<dyn Send + Sync>) {
        self._held = Some(value);
    }

    /// Commits, then wakes what the writes asked for (`wake_on_commit`):
    /// in the store, this process's relay and dispatcher for what the
    /// transaction emitted or made due.
    /// What was asked to run last (`at_commit`) runs first; should it
    /// fail, the transaction rolls back as it is dropped.
    pub async fn commit(mut self) -> Result<(), StoreError> {
        for last in std::mem::take(&mut self.last) {
            last(&mut self).await?;
        }
        let WriteTx {
            conn,
            on_commit,
            _held,
            ..
        } = self;
        crate::count::one();
        match conn {
            Conn::Sqlx(tx) => tx.commit().await?,
            // A failed COMMIT leaves the transaction open: the drop rolls
            // it back.
            Conn::Lite(tx) => tx.conn()?.execute_batch("COMMIT")?,
            Conn::Group(unit) => unit.commit().await?,
        }
        for notify in on_commit {
            notify.notify_one();
        }
        Ok(())
    }

    /// Rolls back now. Dropping a transaction also rolls it back, but on
    /// PostgreSQL only once its connection is next used, so what it holds
    /// (row and advisory locks) outlives the drop for a moment; a caller
    /// that goes on to take the same locks rolls back first.
    pub async fn rollback(self) -> Result<(), StoreError> {
        crate::count::one();
        match self.conn {
            Conn::Sqlx(tx) => tx.rollback().await?,
            Conn::Lite(tx) => tx.conn()?.execute_batch("ROLLBACK")?,
            Conn::Group(unit) => unit.rollback(),
        }
        Ok(())
    }

    /// Runs `sql`; returns the number of rows it changed.
    pub async fn execute(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<u64, StoreError> {
        crate::count::one();
        match &mut self.conn {
            Conn::Sqlx(tx) => Ok(sqlx_query(sql, args)
                .execute(&mut **tx)
                .await?
                .rows_affected()),
            lite => {
                let mut stmt = lite_statement(lite.sqlite()?, sql, args)?;
                Ok(stmt.raw_execute()? as u64)
            }
        }
    }

    /// Runs `sql` and returns its rows.
    pub async fn fetch(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<Vec<CellRow>, StoreError> {
        crate::count::one();
        match &mut self.conn {
            Conn::Sqlx(tx) => {
                let rows = sqlx_query(sql, args).fetch_all(&mut **tx).await?;
                let Some(first) = rows.first() else {
                    return Ok(Vec::new());
                };
                let names: Arc<[String]> = first
                    .columns()
                    .iter()
                    .map(|c| sqlx::Column::name(c).to_owned())
                    .collect();
                rows.iter()
                    .map(|row| {
                        let cells = (0..names.len())
                            .map(|i| sqlx_cell(row, i))
                            .collect::<Result<_, _>>()?;
                        Ok(CellRow {
                            names: names.clone(),
                            cells,
                        })
                    })
                    .collect()
            }
            lite => {
                let mut stmt = lite_statement(lite.sqlite()?, sql, args)?;
                let names: Arc<[String]> =
                    stmt.column_names().into_iter().map(str::to_owned).collect();
                let mut rows = stmt.raw_query();
                let mut out = Vec::new();
                while let Some(row) = rows.next()? {
                    let cells = (0..names.len())
                        .map(|i| lite_cell(row, i))
                        .collect::<Result<_, _>>()?;
                    out.push(CellRow {
                        names: names.clone(),
                        cells,
                    });
                }
                Ok(out)
            }
        }
    }

    /// The values of `column` in the rows `sql` returns.
    pub async fn fetch_texts(
        &mut self,
        sql: &str,
        args: &[Arg<'_>],
        column: &str,
    ) -> Result<Vec<String>, StoreError> {
        self.fetch(sql, args)
            .await?
            .iter()
            .map(|row| text(row, column))
            .collect()
    }
}

pub(crate) fn sqlx_query<'q>(
    sql: &'q str,
    args: &[Arg<'q>],
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
    let mut q = sqlx::query(sql);
    for arg in args {
        q = match *arg {
            Arg::Int(v) => q.bind(v),
            Arg::Text(v) => q.bind(v),
        };
    }
    q
}

fn sqlx_cell(row: &sqlx::any::AnyRow, i: usize) -> Result<Cell, StoreError> {
    use sqlx::{TypeInfo, ValueRef};
    let raw = row.try_get_raw(i)?;
    if raw.is_null() {
        return Ok(Cell::Null);
    }
    let kind = raw.type_info().name().to_ascii_uppercase();
    if kind.contains("INT") {
        Ok(Cell::Int(row.try_get::<i64, _>(i)?))
    } else {
        Ok(Cell::Text(row.try_get::<String, _>(i)?))
    }
}

/// The cached statement for `sql` with `args` bound.
fn lite_statement<'c>(
    conn: &'c rusqlite::Connection,
    sql: &str,
    args: &[Arg<'_>],
) -> Result<rusqlite::CachedStatement<'c>, StoreError> {
    let mut stmt = conn.prepare_cached(sql)?;
    if stmt.parameter_count() != args.len() {
        return Err(StoreError::Corrupt(format!(
            "statement takes {} values, {} given",
            stmt.parameter_count(),
            args.len()
        )));
    }
    for (i, arg) in args.iter().enumerate() {
        match *arg {
            Arg::Int(v) => stmt.raw_bind_parameter(i + 1, v)?,
            Arg::Text(v) => stmt.raw_bind_parameter(i + 1, v)?,
        }
    }
    Ok(stmt)
}

fn lite_cell(row: &rusqlite::Row<'_>, i: usize) -> Result<Cell, StoreError> {
    use rusqlite::types::ValueRef;
    Ok(match row.get_ref(i)? {
        ValueRef::Null => Cell::Null,
        ValueRef::Integer(v) => Cell::Int(v),
        ValueRef::Text(t) => Cell::Text(
            std::str::from_utf8(t)
                .map_err(|e| StoreError::Corrupt(e.to_string()))?
                .to_owned(),
        ),
        ValueRef::Real(v) => Cell::Text(v.to_string()),
        ValueRef::Blob(_) => return Err(StoreError::Corrupt("unexpected blob".into())),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    fn lite() -> WriteTx {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (k TEXT PRIMARY KEY, n BIGINT)")
            .unwrap();
        WriteTx::new(
            Conn::Lite(LiteTx::begin(Arc::new(Mutex::new(Some(conn))), None).unwrap()),
            Backend::Sqlite,
            None,
        )
    }

    #[tokio::test]
    async fn lite_statements_bind_in_mark_order_and_return_named_cells() {
        let mut tx = lite();
        let changed = tx
            .execute(
                "INSERT INTO t (k, n) VALUES (?, ?), (?, ?)",
                &["a".into(), 1i64.into(), "b".into(), Arg::Int(None)],
            )
            .await
            .unwrap();
        assert_eq!(changed, 2);
        let rows = tx
            .fetch(
                "UPDATE t SET n = $1 WHERE k = $2 OR n IS NULL RETURNING k, n",
                &[7i64.into(), "a".into()],
            )
            .await
            .unwrap();
        let mut got: Vec<(String, i64)> = rows
            .iter()
            .map(|r| (text(r, "k").unwrap(), int(r, "n").unwrap()))
            .collect();
        got.sort();
        assert_eq!(got, [("a".to_owned(), 7), ("b".to_owned(), 7)]);
    }

    #[tokio::test]
    async fn a_wrong_number_of_values_is_refused_not_run() {
        let mut tx = lite();
        let refused = tx
            .execute("INSERT INTO t (k, n) VALUES (?, ?)", &["a".into()])
            .await;
        assert!(matches!(refused, Err(StoreError::Corrupt(_))));
    }

    #[tokio::test]
    async fn a_unique_violation_is_a_duplicate() {
        let mut tx = lite();
        let sql = "INSERT INTO t (k, n) VALUES (?, ?)";
        tx.execute(sql, &["a".into(), 1i64.into()]).await.unwrap();
        let again = tx.execute(sql, &["a".into(), 2i64.into()]).await;
        assert!(matches!(again, Err(StoreError::Duplicate)));
    }

    #[tokio::test]
    async fn a_dropped_transaction_rolls_back_and_gives_its_connection_back() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (k TEXT PRIMARY KEY)")
            .unwrap();
        let home = Arc::new(Mutex::new(Some(conn)));
        let mut tx = WriteTx::new(
            Conn::Lite(LiteTx::begin(home.clone(), None).unwrap()),
            Backend::Sqlite,
            None,
        );
        tx.execute("INSERT INTO t (k) VALUES (?)", &["a".into()])
            .await
            .unwrap();
        assert!(LiteTx::begin(home.clone(), None).is_err(), "one at a time");
        drop(tx);
        let mut tx = WriteTx::new(
            Conn::Lite(LiteTx::begin(home.clone(), None).unwrap()),
            Backend::Sqlite,
            None,
        );
        let rows = tx.fetch("SELECT k FROM t", &[]).await.unwrap();
        assert!(rows.is_empty());
        tx.execute("INSERT INTO t (k) VALUES (?)", &["b".into()])
            .await
            .unwrap();
        tx.commit().await.unwrap();
        let conn = home.lock().unwrap().take().unwrap();
        let n: i64 = conn
            .query_row("SELECT COUNT(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 1);
    }

    /// An unsynced transaction runs with `synchronous = NORMAL` and gives
    /// its connection back with the durability it had, whether it commits
    /// or is dropped; its writes commit as any transaction's.
    #[tokio::test]
    async fn an_unsynced_transaction_gives_the_durability_back() {
        let synchronous = |home: &Home| -> i64 {
            let guard = home.lock().unwrap();
            let conn = guard.as_ref().expect("the connection is home");
            conn.query_row("PRAGMA synchronous", [], |r| r.get(0))
                .unwrap()
        };
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch("PRAGMA synchronous = FULL; CREATE TABLE t (k TEXT PRIMARY KEY)")
            .unwrap();
        let home = Arc::new(Mutex::new(Some(conn)));
        for commit in [true, false] {
            let mut tx = WriteTx::new(
                Conn::Lite(LiteTx::begin_unsynced(home.clone(), None, Synchronous::Full).unwrap()),
                Backend::Sqlite,
                None,
            );
            let during = tx.fetch("PRAGMA synchronous", &[]).await.unwrap();
            assert_eq!(int(&during[0], "synchronous").unwrap(), 1, "NORMAL inside");
            tx.execute(
                "INSERT INTO t (k) VALUES (?)",
                &[commit.to_string().as_str().into()],
            )
            .await
            .unwrap();
            if commit {
                tx.commit().await.unwrap();
            } else {
                drop(tx);
            }
            assert_eq!(synchronous(&home), 2, "FULL again after commit = {commit}");
        }
        let guard = home.lock().unwrap();
        let kept: String = guard
            .as_ref()
            .unwrap()
            .query_row("SELECT group_concat(k) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(kept, "true");
    }

    /// What the owner attached is read back by its type; a commit wakes
    /// what the writes asked for, once each, and a rollback wakes nobody.
    #[tokio::test]
    async fn a_commit_wakes_what_was_asked_for_and_a_rollback_nothing() {
        struct Signals(Arc<Notify>);
        let notify = Arc::new(Notify::new());
        let begin = |notify: &Arc<Notify>| {
            let conn = rusqlite::Connection::open_in_memory().unwrap();
            WriteTx::new(
                Conn::Lite(LiteTx::begin(Arc::new(Mutex::new(Some(conn))), None).unwrap()),
                Backend::Sqlite,
                Some(Arc::new(Signals(notify.clone()))),
            )
        };
        let mut tx = begin(&notify);
        assert!(tx.signals::<String>().is_none());
        let asked = tx.signals::<Signals>().expect("attached").0.clone();
        tx.wake_on_commit(&asked);
        assert!(tx.wakes_on_commit(&notify));
        tx.rollback().await.unwrap();
        let mut tx = begin(&notify);
        tx.wake_on_commit(&notify);
        tx.wake_on_commit(&notify);
        assert_eq!(tx.on_commit.len(), 1, "once each");
        let woken = notify.notified();
        tx.commit().await.unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(1), woken)
            .await
            .expect("the commit wakes it");
    }

    /// What is asked to run last runs at the commit, after the statements
    /// made meanwhile and in the order asked; a failing one commits
    /// nothing, and a rollback runs none.
    #[tokio::test]
    async fn what_runs_last_runs_before_the_commit_or_not_at_all() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (k TEXT PRIMARY KEY, n BIGINT)")
            .unwrap();
        let home = Arc::new(Mutex::new(Some(conn)));
        let begin = || {
            WriteTx::new(
                Conn::Lite(LiteTx::begin(home.clone(), None).unwrap()),
                Backend::Sqlite,
                None,
            )
        };
        async fn append(tx: &mut WriteTx, n: i64) -> Result<(), StoreError> {
            tx.execute("UPDATE t SET n = n * 10 + ? WHERE k = 'a'", &[n.into()])
                .await?;
            Ok(())
        }
        let mut tx = begin();
        tx.at_commit(|tx| Box::pin(append(tx, 1)));
        tx.at_commit(|tx| Box::pin(append(tx, 2)));
        tx.execute("INSERT INTO t (k, n) VALUES ('a', 0)", &[])
            .await
            .unwrap();
        tx.commit().await.unwrap();
        let n = |home: &Arc<Mutex<Option<rusqlite::Connection>>>| -> i64 {
            home.lock()
                .unwrap()
                .as_ref()
                .unwrap()
                .query_row("SELECT n FROM t WHERE k = 'a'", [], |r| r.get(0))
                .unwrap()
        };
        assert_eq!(n(&home), 12, "after the insert, first 1 then 2");

        let mut tx = begin();
        tx.at_commit(|tx| Box::pin(append(tx, 3)));
        tx.rollback().await.unwrap();
        assert_eq!(n(&home), 12, "a rollback runs nothing");

        let mut tx = begin();
        tx.execute("UPDATE t SET n = 0", &[]).await.unwrap();
        tx.at_commit(|tx| {
            Box::pin(async move {
                tx.execute("INSERT INTO t (k, n) VALUES ('a', 1)", &[])
                    .await?;
                Ok(())
            })
        });
        assert!(matches!(tx.commit().await, Err(StoreError::Duplicate)));
        assert_eq!(n(&home), 12, "a failing last statement commits nothing");
    }

    #[test]
    fn columns_refuse_a_null_where_a_value_is_required() {
        let row = CellRow {
            names: vec!["k".to_owned()].into(),
            cells: vec![Cell::Null],
        };
        assert!(text(&row, "k").is_err());
        assert_eq!(row.text("k").unwrap(), None);
        assert!(row.text("missing").is_err());
    }
}
