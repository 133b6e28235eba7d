//! The one lease primitive, for every row a runner takes for a while:
//! deliveries (`dispatch::leases`), timed jobs (`billing::jobs`) and
//! redrive jobs (`webhooks::redrive_jobs`).
//!
//! A lease is two columns of the leased row, `lease_owner` and
//! `lease_until` (Unix milliseconds). It is taken in a write transaction
//! (`take`), only where no live lease is (`free`, or `free_or_held_by` for
//! a runner that may take again what it holds); it ends by itself at
//! `lease_until`, so a dead runner's rows are taken again; its owner
//! renews it (`renew`) or gives it back (`RELEASE`), and every write made
//! under it is fenced by `held_by`, so a result whose lease was lost finds
//! nothing to write.
//!
//! Statements and fragments here are text with the caller's bind marks:
//! the callers keep their keys, their conditions and their bind order, and
//! the statements they build read as they did before this module. On
//! PostgreSQL a claim that picks rows by a condition locks them
//! `skip_locked`, so concurrent claimers take disjoint rows; SQLite's one
//! writer needs no row lock.

use crate::Backend;

/// `column = value, …` of a taken lease.
fn set_taken(owner: &str, until: &str) -> String {
    format!("lease_owner = {owner}, lease_until = {until}")
}

/// Takes the lease of the rows of `table` that `condition` selects, for
/// `owner` until `until` (bind marks, or SQL): the condition must say
/// which rows are free (`free`, `free_or_held_by`), unless the rows were
/// locked and checked first (`skip_locked`, then a check by key).
pub(crate) fn take(table: &str, owner: &str, until: &str, condition: &str) -> String {
    format!(
        "UPDATE {table} SET {} WHERE {condition}",
        set_taken(owner, until)
    )
}

/// Moves the end of `owner`'s lease of the rows of `table` that
/// `condition` selects to `until`: rows whose lease another runner took
/// are left alone (zero rows: the lease was lost).
pub(crate) fn renew(table: &str, until: &str, condition: &str, owner: &str) -> String {
    format!(
        "UPDATE {table} SET lease_until = {until} WHERE {condition} AND {}",
        held_by(owner)
    )
}

/// The assignments that give a lease back, for an `UPDATE … SET` that
/// also writes what the lease was taken for.
pub(crate) const RELEASE: &str = "lease_owner = NULL, lease_until = NULL";

/// The row is not held by a live lease at `now`: none, or one that ended
/// before `now`. `is_free` is the same rule over a row already read.
pub(crate) fn free(now: &str) -> String {
    format!("(lease_until IS NULL OR lease_until < {now})")
}

/// `free`, or held by `owner` (who may take it again).
pub(crate) fn free_or_held_by(now: &str, owner: &str) -> String {
    format!("(lease_until IS NULL OR lease_until < {now} OR lease_owner = {owner})")
}

/// The row's lease is `owner`'s: the fence of every write made under it.
pub(crate) fn held_by(owner: &str) -> String {
    format!("lease_owner = {owner}")
}

/// `held_by` with the column qualified by `table`, for a statement that
/// joins another relation (`UPDATE … FROM`).
pub(crate) fn held_by_in(table: &str, owner: &str) -> String {
    format!("{table}.{}", held_by(owner))
}

/// `free` for a row read with this `lease_until`, at `now`.
pub(crate) fn is_free(lease_until: Option<i64>, now: i64) -> bool {
    lease_until.is_none_or(|until| until < now)
}

/// `held_by` for a row read with this `lease_owner`.
pub(crate) fn is_held_by(lease_owner: Option<&str>, owner: &str) -> bool {
    lease_owner == Some(owner)
}

/// The lock a claim by condition takes on its candidates: PostgreSQL
/// skips rows another claimer holds (that claimer takes them); SQLite's
/// write transaction is exclusive.
pub(crate) fn skip_locked(backend: Backend) -> &'static str {
    match backend {
        Backend::Postgres => " FOR UPDATE SKIP LOCKED",
        Backend::Sqlite => "",
    }
}

/// The lock a runner takes on a row it holds before writing under its
/// lease: PostgreSQL waits for another writer of it; SQLite needs none.
pub(crate) fn for_update(backend: Backend) -> &'static str {
    match backend {
        Backend::Postgres => " FOR UPDATE",
        Backend::Sqlite => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The statements read as each leased table wrote them before they
    /// shared this module (the delivery claim's text is its plan's key).
    #[test]
    fn statements_keep_their_text() {
        assert_eq!(
            take(
                "jobs",
                "$1",
                "$2",
                &format!("kind = $3 AND subject_ref = $4 AND {}", free("$5"))
            ),
            "UPDATE jobs SET lease_owner = $1, lease_until = $2 WHERE kind = $3 \
             AND subject_ref = $4 AND (lease_until IS NULL OR lease_until < $5)"
        );
        assert_eq!(
            renew("jobs", "$1", "kind = $2 AND subject_ref = $3", "$4"),
            "UPDATE jobs SET lease_until = $1 WHERE kind = $2 AND subject_ref = $3 \
             AND lease_owner = $4"
        );
        assert_eq!(
            free_or_held_by("$4", "$1"),
            "(lease_until IS NULL OR lease_until < $4 OR lease_owner = $1)"
        );
        assert_eq!(
            held_by_in("webhook_deliveries", "$9"),
            "webhook_deliveries.lease_owner = $9"
        );
    }

    /// The SQL conditions and the checks of a row read agree, row by row.
    #[test]
    fn conditions_in_sql_and_in_rust_agree() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE t (k INTEGER PRIMARY KEY, lease_owner TEXT, lease_until BIGINT)",
        )
        .unwrap();
        let now = 1_000;
        let mut rows = Vec::new();
        for owner in [None, Some("a"), Some("b")] {
            for until in [None, Some(now - 1), Some(now), Some(now + 1)] {
                let k = rows.len() as i64;
                conn.execute(
                    "INSERT INTO t VALUES (?1, ?2, ?3)",
                    rusqlite::params![k, owner, until],
                )
                .unwrap();
                rows.push((
                    k,
                    is_free(until, now),
                    is_free(until, now) || is_held_by(owner, "a"),
                    is_held_by(owner, "a"),
                ));
            }
        }
        let select =
            |condition: String, args: &[&dyn rusqlite::ToSql]| -> std::collections::HashSet<i64> {
                let sql = format!("SELECT k FROM t WHERE {condition}");
                let mut stmt = conn.prepare(&sql).unwrap();
                let found = stmt
                    .query_map(args, |row| row.get(0))
                    .unwrap()
                    .collect::<Result<_, _>>()
                    .unwrap();
                found
            };
        let free_rows = select(free("?1"), &[&now]);
        let takeable = select(free_or_held_by("?1", "?2"), &[&now, &"a"]);
        let held = select(held_by("?1"), &[&"a"]);
        for (k, free, takeable_by_a, held_by_a) in rows {
            assert_eq!(free_rows.contains(&k), free, "{k}");
            assert_eq!(takeable.contains(&k), takeable_by_a, "{k}");
            assert_eq!(held.contains(&k), held_by_a, "{k}");
        }
    }
}
