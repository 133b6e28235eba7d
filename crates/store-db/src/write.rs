//! The one write that is not a `WriteTx`: a single statement committed on
//! its own (autocommit) on a PostgreSQL writer pool, for writes that need
//! no unit of work (a request's log line when the request wrote nothing,
//! a credential's use, purges, dead letters: the store's `write_alone`;
//! a small batch of attempt results, written by one statement).
//! On SQLite the same writes are units of the group commit
//! (`crate::group`), which shares their syncs. Every other write is a
//! `tx::WriteTx`.

use crate::tx::{sqlx_query, text, Arg};
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

/// Runs `sql` as a unit of work of its own; returns `column` of the rows
/// it returns (`RETURNING`).
pub async fn autocommit_texts<'c>(
    exec: impl Executor<'c, Database = Any>,
    sql: &str,
    args: &[Arg<'_>],
    column: &str,
) -> Result<Vec<String>, StoreError> {
    crate::count::one();
    sqlx_query(sql, args)
        .fetch_all(exec)
        .await?
        .iter()
        .map(|row| text(row, column))
        .collect()
}
