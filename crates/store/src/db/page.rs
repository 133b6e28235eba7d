//! Keyset paging: newest first by `(created_at, ref)`.

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
    pub(crate) fn from_overfetch(mut rows: Vec<T>, limit: u32) -> Page<T> {
        let has_more = rows.len() > limit as usize;
        rows.truncate(limit as usize);
        Page {
            items: rows,
            has_more,
        }
    }
}

/// A bound value of a list query's filter.
pub(crate) enum Arg {
    Text(String),
    Int(i64),
}

/// One keyset page of `SELECT * FROM <table> WHERE <filter>`, newest first
/// by `(created_at, <ref_column>)`. `filter` uses `$1..$n` for `args`.
pub(crate) async fn fetch_page<T>(
    pool: &sqlx::AnyPool,
    table: &str,
    ref_column: &str,
    filter: &str,
    args: Vec<Arg>,
    page: &PageRequest,
    map: impl Fn(&sqlx::any::AnyRow) -> Result<T, crate::StoreError>,
) -> Result<Page<T>, crate::StoreError> {
    let mut sql = format!("SELECT * FROM {table} WHERE {filter}");
    if page.after.is_some() {
        let (a, b) = (args.len() + 1, args.len() + 2);
        sql.push_str(&format!(
            " AND (created_at < ${a} OR (created_at = ${a} AND {ref_column} < ${b}))"
        ));
    }
    sql.push_str(&format!(
        " ORDER BY created_at DESC, {ref_column} DESC LIMIT {}",
        page.limit as u64 + 1
    ));
    let mut q = sqlx::query(&sql);
    for arg in args {
        q = match arg {
            Arg::Text(t) => q.bind(t),
            Arg::Int(i) => q.bind(i),
        };
    }
    if let Some((ms, r)) = &page.after {
        q = q.bind(*ms).bind(r.clone());
    }
    let rows = q.fetch_all(pool).await?;
    let items = rows.iter().map(map).collect::<Result<Vec<_>, _>>()?;
    Ok(Page::from_overfetch(items, page.limit))
}
