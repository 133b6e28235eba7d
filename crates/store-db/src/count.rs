//! How many statements the store has sent to its database in this process,
//! for benchmarks that report statements per operation (`statements`).
//!
//! Every statement that goes through this crate counts once: a
//! transaction's `BEGIN`, each `execute` and `fetch`, its `COMMIT` or
//! `ROLLBACK`, each read (`read`) and each autocommitted write (`write`).
//! On PostgreSQL each is one round trip once its statement is prepared
//! (sqlx prepares a statement on its connection's first use of it, one
//! round trip more); on SQLite through sqlx each is a hop to the
//! connection's thread, and on the write lane a call in place. Not
//! counted: a transaction dropped without `commit` or `rollback` (its
//! `ROLLBACK` is sent by the driver), and the statements the store runs
//! on sqlx directly (migrations, the store's identity, `ping`).
//!
//! A relaxed atomic: one uncontended add per statement.

use std::sync::atomic::{AtomicU64, Ordering};

static STATEMENTS: AtomicU64 = AtomicU64::new(0);

/// Statements sent so far by this process's stores (module docs).
pub fn statements() -> u64 {
    STATEMENTS.load(Ordering::Relaxed)
}

/// Counts one statement.
pub(crate) fn one() {
    STATEMENTS.fetch_add(1, Ordering::Relaxed);
}
