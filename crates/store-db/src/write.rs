//! The one write that is not a `WriteTx`: a single statement committed on
//! its own (autocommit) on the writer pool. It is for writes that must
//! neither wait for a unit of work nor hold one open: a request's log line
//! and its credential's use (written around the request's own
//! transaction), purges, and dead letters. Every other write is a
//! `tx::WriteTx`.

use crate::tx::{sqlx_query, Arg};
use crate::StoreError;
use sqlx::{Any, Executor};

/// Runs `sql` as a unit of work of its own; returns the number of rows it
/// changed.
pub async fn autocommit<'c>(
    exec: impl Executor<'c, Database = Any>,
    sql: &str,
    args: &[Arg<'_>],
) -> Result<u64, StoreError> {
    crate::count::one();
    Ok(sqlx_query(sql, args).execute(exec).await?.rows_affected())
}
