//! The unit of work as the store's callers hold it: `WriteTx`, which they
//! pass to the store's writes and then commit or roll back. The statements
//! it runs are the store's alone: `execute`, `fetch` and the rest are this
//! crate's, so no caller outside the store writes SQL or names a table.
//!
//! Everything else of `store_db::tx` (arguments, rows and their codecs) is
//! re-exported as it is.

use crate::{Backend, StoreError};
use std::any::Any;
use std::sync::Arc;
pub use store_db::tx::{int, single, text, Arg, CellRow, Columns, Conn, LastFuture};
use tokio::sync::Notify;

/// An open unit of work (`Store::begin`); dropped without `commit`, it
/// rolls back.
pub struct WriteTx(store_db::WriteTx);

impl WriteTx {
    pub(crate) fn new(
        conn: Conn,
        backend: Backend,
        signals: Option<Arc<dyn Any + Send + Sync>>,
    ) -> WriteTx {
        WriteTx(store_db::WriteTx::new(conn, backend, signals))
    }

    /// Commits every write made in it, or none (`store_db::WriteTx::commit`).
    pub async fn commit(self) -> Result<(), StoreError> {
        self.0.commit().await
    }

    /// Rolls back now (`store_db::WriteTx::rollback`).
    pub async fn rollback(self) -> Result<(), StoreError> {
        self.0.rollback().await
    }

    pub fn backend(&self) -> Backend {
        self.0.backend()
    }

    /// Runs `last` right before the commit (`store_db::WriteTx::at_commit`);
    /// it is given the inner transaction, on which it runs its statements.
    pub(crate) fn at_commit<F>(&mut self, last: F)
    where
        F: for<'t> FnOnce(&'t mut store_db::WriteTx) -> LastFuture<'t> + Send + Sync + 'static,
    {
        self.0.at_commit(last)
    }

    /// The transaction this one wraps, for a statement also run at the
    /// commit (`at_commit`), where only the inner one is at hand.
    pub(crate) fn inner(&mut self) -> &mut store_db::WriteTx {
        &mut self.0
    }

    pub(crate) fn signals<T: Any>(&self) -> Option<&T> {
        self.0.signals()
    }

    pub(crate) fn wake_on_commit(&mut self, notify: &Arc<Notify>) {
        self.0.wake_on_commit(notify)
    }

    pub(crate) fn wakes_on_commit(&self, notify: &Arc<Notify>) -> bool {
        self.0.wakes_on_commit(notify)
    }

    pub(crate) fn hold(&mut self, value: Box<dyn Send + Sync>) {
        self.0.hold(value)
    }

    pub(crate) async fn execute(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<u64, StoreError> {
        self.0.execute(sql, args).await
    }

    pub(crate) async fn fetch(
        &mut self,
        sql: &str,
        args: &[Arg<'_>],
    ) -> Result<Vec<CellRow>, StoreError> {
        self.0.fetch(sql, args).await
    }

    pub(crate) async fn fetch_texts(
        &mut self,
        sql: &str,
        args: &[Arg<'_>],
        column: &str,
    ) -> Result<Vec<String>, StoreError> {
        self.0.fetch_texts(sql, args, column).await
    }
}
