//! Reads outside a `WriteTx`: in the store, the reads of the domain
//! repositories and of `Store` methods on the read pool. (A write outside
//! a unit of work is `write::autocommit`.)
//!
//! Their values are `Arg`s, bound exactly as `WriteTx` binds them
//! (`crate::tx::sqlx_query`), so the store passes arguments one way
//! only. Rows are decoded by the caller's `decode`, one row at a time,
//! through `Columns`, as rows read in a `WriteTx` are: one decoder per
//! record whichever way it was read.
//!
//! `exec` is anything sqlx runs statements on (here always a pool).

use crate::tx::{sqlx_query, Arg, Columns};
use crate::StoreError;
use sqlx::{Any, Executor};

/// Every row `sql` returns, decoded.
pub async fn all<'c, T>(
    exec: impl Executor<'c, Database = Any>,
    sql: &str,
    args: &[Arg<'_>],
    decode: impl Fn(&dyn Columns) -> Result<T, StoreError>,
) -> Result<Vec<T>, StoreError> {
    crate::count::one();
    let rows = sqlx_query(sql, args).fetch_all(exec).await?;
    rows.iter().map(|row| decode(row)).collect()
}

/// The first row `sql` returns, decoded, if there is one.
pub async fn optional<'c, T>(
    exec: impl Executor<'c, Database = Any>,
    sql: &str,
    args: &[Arg<'_>],
    decode: impl Fn(&dyn Columns) -> Result<T, StoreError>,
) -> Result<Option<T>, StoreError> {
    crate::count::one();
    let row = sqlx_query(sql, args).fetch_optional(exec).await?;
    row.as_ref().map(|row| decode(row)).transpose()
}

/// The first row `sql` returns, decoded; `NotFound` when there is none.
pub async fn one<'c, T>(
    exec: impl Executor<'c, Database = Any>,
    sql: &str,
    args: &[Arg<'_>],
    decode: impl Fn(&dyn Columns) -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    // What sqlx's `fetch_one` does: the first row, `RowNotFound` without one.
    optional(exec, sql, args, decode)
        .await?
        .ok_or(StoreError::NotFound)
}

/// The first column of the one row `sql` returns (an aggregate: `COUNT`,
/// `MIN`, …), `None` when it is null; `NotFound` when there is no row.
pub async fn scalar_int<'c>(
    exec: impl Executor<'c, Database = Any>,
    sql: &str,
    args: &[Arg<'_>],
) -> Result<Option<i64>, StoreError> {
    use sqlx::Row;
    crate::count::one();
    let row = sqlx_query(sql, args)
        .fetch_optional(exec)
        .await?
        .ok_or(StoreError::NotFound)?;
    Ok(row.try_get::<Option<i64>, _>(0)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tx::text;

    async fn pool() -> sqlx::AnyPool {
        sqlx::any::install_default_drivers();
        // One connection: each connection to `:memory:` is a database of
        // its own.
        let pool = sqlx::any::AnyPoolOptions::new()
            .max_connections(1)
            .connect("sqlite::memory:")
            .await
            .unwrap();
        crate::write::autocommit(&pool, "CREATE TABLE t (k TEXT PRIMARY KEY, n BIGINT)", &[])
            .await
            .unwrap();
        pool
    }

    #[tokio::test]
    async fn values_bind_in_mark_order_and_rows_decode_one_by_one() {
        let pool = pool().await;
        let added = crate::write::autocommit(
            &pool,
            "INSERT INTO t (k, n) VALUES ($1, $2), ($3, $4)",
            &["a".into(), 1i64.into(), "b".into(), Arg::Int(None)],
        )
        .await
        .unwrap();
        assert_eq!(added, 2);
        let keys = all(
            &pool,
            "SELECT k FROM t WHERE k <> $1 OR n IS NULL ORDER BY k",
            &["a".into()],
            |row| text(row, "k"),
        )
        .await
        .unwrap();
        assert_eq!(keys, ["b"]);
        let n = one(
            &pool,
            "SELECT n FROM t WHERE k = $1",
            &["a".into()],
            |row| crate::tx::int(row, "n"),
        )
        .await
        .unwrap();
        assert_eq!(n, 1);
        assert!(matches!(
            one(
                &pool,
                "SELECT k FROM t WHERE k = $1",
                &["z".into()],
                |_| Ok(())
            )
            .await,
            Err(StoreError::NotFound)
        ));
        let missing = optional(&pool, "SELECT k FROM t WHERE k = $1", &["z".into()], |_| {
            Ok(())
        })
        .await
        .unwrap();
        assert!(missing.is_none());
        let count = scalar_int(&pool, "SELECT COUNT(*) FROM t WHERE n = $1", &[1i64.into()])
            .await
            .unwrap();
        assert_eq!(count, Some(1));
        let none = scalar_int(&pool, "SELECT MIN(n) FROM t WHERE k = $1", &["b".into()])
            .await
            .unwrap();
        assert_eq!(none, None);
    }
}
