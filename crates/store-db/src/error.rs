//! The store's error type. Callers branch on the variant, never on text.

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The row does not exist (in this environment).
    #[error("not found")]
    NotFound,
    /// A conditional write lost a race with a concurrent writer.
    #[error("the row changed concurrently")]
    Conflict,
    /// A uniqueness rule refused the write (the constraint's meaning is the caller's).
    #[error("a unique constraint refused the write")]
    Duplicate,
    #[error("invalid store configuration: {0}")]
    Config(String),
    #[error("migration failed: {0}")]
    Migration(String),
    /// A stored value could not be read back (a defect or tampering).
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// The database could not be reached or answered with an error. The
    /// message names the cause, so that a log line of it says what
    /// happened (the API never sends it to a client).
    #[error("database error: {0}")]
    Database(#[source] sqlx::Error),
    /// The same, from the write lane's own SQLite connection (`crate::lane`).
    #[error("database error: {0}")]
    Sqlite(#[source] rusqlite::Error),
    /// The store's own write path failed around the database, not in it:
    /// the write lane (`LaneError`).
    #[error(transparent)]
    Lane(#[from] LaneError),
}

/// A failure of the machinery that runs the store's hot writes (the write
/// lane, `crate::lane`), as opposed to an error of the database. None of them says the database is down.
#[derive(Debug, thiserror::Error)]
pub enum LaneError {
    /// The lane's runtime did not finish a task it was given (the task
    /// panicked, or the runtime is gone): its outcome is unknown.
    #[error("the write lane lost a task: {0}")]
    TaskLost(#[source] tokio::task::JoinError),
    /// A transaction began on the lane's connection while another held it.
    #[error("the write lane's connection is in use")]
    ConnectionInUse,
    /// A statement ran on a lane transaction that had already ended.
    #[error("the write lane's transaction has ended")]
    TransactionEnded,
    /// A group commit (`crate::group`) did not happen: SQLite ended the
    /// group's transaction by itself (a full disk, an I/O error), or the
    /// store stopped before committing it. Nothing of the unit is on disk.
    #[error("the group transaction was rolled back before it committed")]
    GroupRolledBack,
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        match &e {
            sqlx::Error::RowNotFound => StoreError::NotFound,
            sqlx::Error::Database(db) if db.is_unique_violation() => StoreError::Duplicate,
            _ => StoreError::Database(e),
        }
    }
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        match &e {
            rusqlite::Error::QueryReturnedNoRows => StoreError::NotFound,
            rusqlite::Error::SqliteFailure(f, _)
                if matches!(
                    f.extended_code,
                    rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE
                        | rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY
                ) =>
            {
                StoreError::Duplicate
            }
            _ => StoreError::Sqlite(e),
        }
    }
}

impl StoreError {
    /// True when the database itself is unreachable, overloaded or out of
    /// room, so that the same request may succeed later: a lost or refused
    /// connection, a pool that timed out or closed, TLS or protocol
    /// trouble, a server shutting down, starting up or read-only (a
    /// fail-over), a busy or locked database, a serialization failure, a
    /// deadlock, a cancelled statement, a full disk, an I/O error or a lack
    /// of memory. Anything else (a refused or malformed statement, a
    /// violated constraint, a corrupt row, a defect of the store) is false:
    /// retrying it would fail the same way.
    pub fn is_unavailable(&self) -> bool {
        match self {
            StoreError::Database(
                sqlx::Error::Io(_)
                | sqlx::Error::PoolTimedOut
                | sqlx::Error::PoolClosed
                | sqlx::Error::WorkerCrashed
                | sqlx::Error::Tls(_)
                | sqlx::Error::Protocol(_),
            ) => true,
            StoreError::Database(sqlx::Error::Database(db)) => {
                db.code().is_some_and(|code| is_unavailable_code(&code))
            }
            StoreError::Sqlite(rusqlite::Error::SqliteFailure(f, _)) => {
                is_sqlite_unavailable(f.extended_code)
            }
            StoreError::Lane(LaneError::GroupRolledBack) => true,
            StoreError::NotFound
            | StoreError::Conflict
            | StoreError::Duplicate
            | StoreError::Config(_)
            | StoreError::Migration(_)
            | StoreError::Corrupt(_)
            | StoreError::Database(_)
            | StoreError::Sqlite(_)
            | StoreError::Lane(_) => false,
        }
    }
}

/// Whether a database error code says the database is unavailable for now
/// (`StoreError::is_unavailable`). A PostgreSQL SQLSTATE has five
/// characters; a SQLite code (sqlx reports its extended result code) is a
/// number of at most four digits.
fn is_unavailable_code(code: &str) -> bool {
    if code.len() == 5 {
        return is_postgres_unavailable(code);
    }
    code.parse().is_ok_and(is_sqlite_unavailable)
}

/// PostgreSQL: the classes 08 (connection exception) and 53 (insufficient
/// resources: disk full, out of memory, too many connections), and
/// serialization_failure (40001), deadlock_detected (40P01),
/// read_only_sql_transaction (25006, a standby after a fail-over),
/// lock_not_available (55P03), query_canceled (57014), admin_shutdown
/// (57P01), crash_shutdown (57P02), cannot_connect_now (57P03),
/// system_error (58000) and io_error (58030).
fn is_postgres_unavailable(sqlstate: &str) -> bool {
    sqlstate.starts_with("08")
        || sqlstate.starts_with("53")
        || matches!(
            sqlstate,
            "40001"
                | "40P01"
                | "25006"
                | "55P03"
                | "57014"
                | "57P01"
                | "57P02"
                | "57P03"
                | "58000"
                | "58030"
        )
}

/// SQLite, by primary result code (the low byte of an extended one): BUSY
/// (5), LOCKED (6), NOMEM (7), IOERR (10), FULL (13, "database or disk is
/// full"), CANTOPEN (14) and PROTOCOL (15).
fn is_sqlite_unavailable(extended_code: i32) -> bool {
    use rusqlite::ffi;
    matches!(
        extended_code & 0xff,
        ffi::SQLITE_BUSY
            | ffi::SQLITE_LOCKED
            | ffi::SQLITE_NOMEM
            | ffi::SQLITE_IOERR
            | ffi::SQLITE_FULL
            | ffi::SQLITE_CANTOPEN
            | ffi::SQLITE_PROTOCOL
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;

    /// A database error with a code, as a driver reports one.
    #[derive(Debug)]
    struct Coded(&'static str);

    impl std::fmt::Display for Coded {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "error {}", self.0)
        }
    }

    impl std::error::Error for Coded {}

    impl sqlx::error::DatabaseError for Coded {
        fn message(&self) -> &str {
            self.0
        }
        fn code(&self) -> Option<Cow<'_, str>> {
            Some(Cow::Borrowed(self.0))
        }
        fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
            self
        }
        fn kind(&self) -> sqlx::error::ErrorKind {
            sqlx::error::ErrorKind::Other
        }
    }

    fn postgres(code: &'static str) -> StoreError {
        StoreError::from(sqlx::Error::Database(Box::new(Coded(code))))
    }

    /// The error SQLite gives for `sql` on an empty database.
    fn sqlite(sql: &str) -> StoreError {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (k TEXT PRIMARY KEY); INSERT INTO t VALUES ('a');")
            .unwrap();
        StoreError::from(conn.execute_batch(sql).unwrap_err())
    }

    #[test]
    fn a_unique_violation_is_a_duplicate_not_an_outage() {
        let e = sqlite("INSERT INTO t VALUES ('a')");
        assert!(matches!(e, StoreError::Duplicate), "{e:?}");
        assert!(!e.is_unavailable());
    }

    #[test]
    fn a_corrupt_row_is_a_defect() {
        assert!(!StoreError::Corrupt("status: a number, not text".into()).is_unavailable());
    }

    #[test]
    fn busy_and_lost_databases_are_unavailable() {
        assert!(postgres("40P01").is_unavailable());
        assert!(postgres("57P01").is_unavailable());
        assert!(postgres("5").is_unavailable());
        assert!(StoreError::from(sqlx::Error::PoolClosed).is_unavailable());
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        assert!(StoreError::from(sqlx::Error::Io(io)).is_unavailable());
        let busy = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
            None,
        );
        assert!(StoreError::from(busy).is_unavailable());
    }

    /// A database of at most `pages` pages, filled until SQLite refuses:
    /// the error a full disk gives ("database or disk is full").
    fn fill(conn: &rusqlite::Connection, pages: u32) -> rusqlite::Error {
        conn.execute_batch(&format!(
            "PRAGMA max_page_count = {pages}; CREATE TABLE f (v BLOB);"
        ))
        .unwrap();
        loop {
            if let Err(e) = conn.execute("INSERT INTO f VALUES (zeroblob(4096))", []) {
                return e;
            }
        }
    }

    #[test]
    fn a_full_disk_is_an_outage() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        let full = StoreError::from(fill(&conn, 64));
        assert!(
            matches!(&full, StoreError::Sqlite(rusqlite::Error::SqliteFailure(f, _)) if f.code == rusqlite::ErrorCode::DiskFull),
            "{full:?}"
        );
        assert!(full.is_unavailable());
        let io = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_IOERR_WRITE),
            None,
        );
        assert!(StoreError::from(io).is_unavailable());
    }

    #[tokio::test]
    async fn a_full_disk_is_an_outage_through_sqlx_too() {
        use sqlx::Executor;
        let pool = sqlx::sqlite::SqlitePoolOptions::new()
            .max_connections(1)
            .connect("sqlite::memory:")
            .await
            .unwrap();
        pool.execute("PRAGMA max_page_count = 64; CREATE TABLE f (v BLOB);")
            .await
            .unwrap();
        let full = loop {
            if let Err(e) = pool.execute("INSERT INTO f VALUES (zeroblob(4096))").await {
                break StoreError::from(e);
            }
        };
        assert!(full.is_unavailable(), "{full:?}");
        let syntax = StoreError::from(pool.execute("SELEC 1").await.unwrap_err());
        assert!(!syntax.is_unavailable(), "{syntax:?}");
        let missing = StoreError::from(pool.execute("SELECT * FROM nothing").await.unwrap_err());
        assert!(!missing.is_unavailable(), "{missing:?}");
    }

    #[test]
    fn postgres_losing_its_connections_or_room_is_an_outage() {
        for code in [
            "57P01", "57P02", "57P03", "08000", "08001", "08003", "08006", "08P01", "53100",
            "53200", "53300", "40001", "40P01", "55P03", "57014", "25006", "58030",
        ] {
            assert!(postgres(code).is_unavailable(), "{code}");
        }
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        assert!(StoreError::from(sqlx::Error::Io(refused)).is_unavailable());
        assert!(StoreError::from(sqlx::Error::PoolTimedOut).is_unavailable());
        assert!(StoreError::from(sqlx::Error::Protocol("unexpected eof".into())).is_unavailable());
    }

    #[test]
    fn a_sql_bug_is_not_an_outage() {
        // syntax_error, undefined_table, undefined_column,
        // invalid_text_representation, not_null_violation,
        // foreign_key_violation, check_violation, datatype_mismatch.
        for code in [
            "42601", "42P01", "42703", "22P02", "23502", "23503", "23514", "42804",
        ] {
            assert!(!postgres(code).is_unavailable(), "{code}");
        }
        // SQLite: a generic error, a corrupt file, a constraint, a misuse.
        for code in ["1", "11", "19", "787", "21"] {
            assert!(!postgres(code).is_unavailable(), "SQLite {code}");
        }
        assert!(!StoreError::from(sqlx::Error::ColumnNotFound("status".into())).is_unavailable());
        assert!(!StoreError::from(sqlx::Error::Decode("not a number".into())).is_unavailable());
    }

    #[test]
    fn the_write_lanes_own_failures_are_not_outages() {
        for e in [LaneError::ConnectionInUse, LaneError::TransactionEnded] {
            assert!(!StoreError::from(e).is_unavailable());
        }
    }
}
