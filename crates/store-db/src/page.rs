//! Keyset paging, newest first by a moment column and a key column
//! (`Order`; in the store's tables `(created_at, <ref>)` mostly), and the
//! same order unpaged (`all_sql`).

use crate::read;
use crate::tx::Arg;

/// Where a page starts and how long it is.
#[derive(Debug, Clone)]
pub struct PageRequest {
    pub limit: u32,
    /// `(at, key)` of the last item of the previous page (`Order`): its
    /// moment in milliseconds and its reference.
    pub after: Option<(i64, String)>,
}

#[derive(Debug, Clone)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub has_more: bool,
}

impl<T> Page<T> {
    /// Builds a page from `limit + 1` fetched rows.
    fn from_overfetch(mut rows: Vec<T>, limit: u32) -> Page<T> {
        let has_more = rows.len() > limit as usize;
        rows.truncate(limit as usize);
        Page {
            items: rows,
            has_more,
        }
    }
}

/// The newest-first order of a list: by the moment column `at`, then by
/// the key column `key` (a reference) among rows of the same moment. A
/// page's cursor is a row's `(at, key)`.
#[derive(Debug, Clone, Copy)]
pub struct Order<'a> {
    pub at: &'a str,
    pub key: &'a str,
}

/// One keyset page of `SELECT * FROM <table> WHERE <filter>`, newest first
/// by `order`. `filter` uses `$1..$n` for `args`.
pub async fn fetch_page<T>(
    pool: &sqlx::AnyPool,
    table: &str,
    order: Order<'_>,
    filter: &str,
    args: &[Arg<'_>],
    page: &PageRequest,
    map: impl Fn(&dyn crate::tx::Columns) -> Result<T, crate::StoreError>,
) -> Result<Page<T>, crate::StoreError> {
    let sql = page_sql(table, order, filter, args.len(), page);
    let mut args = args.to_vec();
    if let Some((ms, r)) = &page.after {
        args.extend([Arg::from(*ms), Arg::from(r)]);
    }
    let items = read::all(pool, &sql, &args, map).await?;
    Ok(Page::from_overfetch(items, page.limit))
}

/// Run first in the PostgreSQL transaction of a page read in index order
/// (`fetch_page_in_index_order`): for the rest of it, the planner may
/// neither sort the matches nor collect them with a bitmap, so it reads an
/// index in the list's order and stops at the page's end.
pub const IN_INDEX_ORDER: &str =
    "SELECT set_config('enable_sort', 'off', true), set_config('enable_bitmapscan', 'off', true)";

/// As `fetch_page`, for a list whose every filter has an index in its
/// order: on PostgreSQL the page is read in a transaction that begins with
/// `IN_INDEX_ORDER`, so that it costs the page's rows whatever the
/// table's statistics say. A table that grew since its last `ANALYZE` (a
/// new store's first minute, a burst between autovacuum's rounds) has
/// statistics that take every value for rare; the planner then collects
/// every match of the filter and sorts them for one page, as many rows as
/// the table has gained. SQLite's planner needs no such help: it reads an
/// index in the order an `ORDER BY` asks whenever one serves.
#[allow(clippy::too_many_arguments)]
pub async fn fetch_page_in_index_order<T>(
    pool: &sqlx::AnyPool,
    backend: crate::Backend,
    table: &str,
    order: Order<'_>,
    filter: &str,
    args: &[Arg<'_>],
    page: &PageRequest,
    map: impl Fn(&dyn crate::tx::Columns) -> Result<T, crate::StoreError>,
) -> Result<Page<T>, crate::StoreError> {
    if backend != crate::Backend::Postgres {
        return fetch_page(pool, table, order, filter, args, page, map).await;
    }
    let sql = page_sql(table, order, filter, args.len(), page);
    let mut args = args.to_vec();
    if let Some((ms, r)) = &page.after {
        args.extend([Arg::from(*ms), Arg::from(r)]);
    }
    crate::count::one();
    let mut tx = pool.begin().await?;
    read::all(&mut *tx, IN_INDEX_ORDER, &[], |_| Ok(())).await?;
    let items = read::all(&mut *tx, &sql, &args, map).await?;
    crate::count::one();
    tx.commit().await?;
    Ok(Page::from_overfetch(items, page.limit))
}

/// The statement of `fetch_page`: `filter` uses `$1..$filter_args`, and a
/// page that starts after an item binds its `(at, key)` as the two marks
/// that follow. Its `at <= ` bound, which the `OR` implies, is what an
/// index that orders by `at` starts the page's range at.
pub fn page_sql(
    table: &str,
    order: Order<'_>,
    filter: &str,
    filter_args: usize,
    page: &PageRequest,
) -> String {
    let Order { at, key } = order;
    let mut sql = format!("SELECT * FROM {table} WHERE {filter}");
    if page.after.is_some() {
        let (a, b) = (filter_args + 1, filter_args + 2);
        sql.push_str(&format!(
            " AND {at} <= ${a} AND ({at} < ${a} OR ({at} = ${a} AND {key} < ${b}))"
        ));
    }
    sql.push_str(&format!(
        " ORDER BY {at} DESC, {key} DESC LIMIT {}",
        page.limit as u64 + 1
    ));
    sql
}

/// Every row of `SELECT * FROM <table> WHERE <filter>`, newest first by
/// `order`: a list that is not paged.
pub fn all_sql(table: &str, order: Order<'_>, filter: &str) -> String {
    let Order { at, key } = order;
    format!("SELECT * FROM {table} WHERE {filter} ORDER BY {at} DESC, {key} DESC")
}
