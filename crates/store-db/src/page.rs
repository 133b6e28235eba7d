//! Keyset paging: newest first by `(created_at, ref)`.

use crate::read;
use crate::tx::Arg;

/// Where a page starts and how long it is.
#[derive(Debug, Clone)]
pub struct PageRequest {
    pub limit: u32,
    /// `(created_at_ms, ref)` of the last item of the previous page.
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

/// One keyset page of `SELECT * FROM <table> WHERE <filter>`, newest first
/// by `(created_at, <ref_column>)`. `filter` uses `$1..$n` for `args`.
pub async fn fetch_page<T>(
    pool: &sqlx::AnyPool,
    table: &str,
    ref_column: &str,
    filter: &str,
    args: &[Arg<'_>],
    page: &PageRequest,
    map: impl Fn(&dyn crate::tx::Columns) -> Result<T, crate::StoreError>,
) -> Result<Page<T>, crate::StoreError> {
    let sql = page_sql(table, ref_column, filter, args.len(), page);
    let mut args = args.to_vec();
    if let Some((ms, r)) = &page.after {
        args.extend([Arg::from(*ms), Arg::from(r)]);
    }
    let items = read::all(pool, &sql, &args, map).await?;
    Ok(Page::from_overfetch(items, page.limit))
}

/// The statement of `fetch_page`: `filter` uses `$1..$filter_args`, and a
/// page that starts after an item binds its `(created_at, ref)` as the two
/// marks that follow.
pub fn page_sql(
    table: &str,
    ref_column: &str,
    filter: &str,
    filter_args: usize,
    page: &PageRequest,
) -> String {
    let mut sql = format!("SELECT * FROM {table} WHERE {filter}");
    if page.after.is_some() {
        let (a, b) = (filter_args + 1, filter_args + 2);
        sql.push_str(&format!(
            " AND (created_at < ${a} OR (created_at = ${a} AND {ref_column} < ${b}))"
        ));
    }
    sql.push_str(&format!(
        " ORDER BY created_at DESC, {ref_column} DESC LIMIT {}",
        page.limit as u64 + 1
    ));
    sql
}

/// A condition of a list on one column.
#[derive(Debug, Clone, Copy)]
pub enum Clause<'a> {
    /// `column = value`.
    Eq(&'a str, &'a str),
    /// `column <= at`: the moment has come.
    Reached(&'a str, i64),
    /// `column > at`: the moment is still ahead.
    Ahead(&'a str, i64),
}

/// One keyset page of `table`'s rows of an environment (the
/// `environment_ref` column every resource row carries) that meet every
/// clause: in the store, the lists of the billing resources.
pub async fn fetch_env_page<T>(
    pool: &sqlx::AnyPool,
    table: &str,
    ref_column: &str,
    environment_ref: &str,
    clauses: &[Clause<'_>],
    page: &PageRequest,
    map: impl Fn(&dyn crate::tx::Columns) -> Result<T, crate::StoreError>,
) -> Result<Page<T>, crate::StoreError> {
    let mut filter = String::from("environment_ref = $1");
    let mut args = vec![Arg::from(environment_ref)];
    for clause in clauses {
        let (column, op, arg) = match *clause {
            Clause::Eq(column, value) => (column, "=", Arg::from(value)),
            Clause::Reached(column, at) => (column, "<=", Arg::from(at)),
            Clause::Ahead(column, at) => (column, ">", Arg::from(at)),
        };
        args.push(arg);
        filter.push_str(&format!(" AND {column} {op} ${}", args.len()));
    }
    fetch_page(pool, table, ref_column, &filter, &args, page, map).await
}

/// The equality clauses of the filters that have a value.
pub fn equal<'a>(filters: &[(&'a str, Option<&'a str>)]) -> Vec<Clause<'a>> {
    filters
        .iter()
        .filter_map(|(column, value)| value.map(|v| Clause::Eq(column, v)))
        .collect()
}
