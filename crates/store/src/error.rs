//! The store's error type. Callers branch on the variant, never on text.

use std::sync::Arc;

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
    /// The database could not be reached or answered with an error.
    #[error("database error")]
    Database(#[source] sqlx::Error),
    /// The same, from the write lane's own SQLite connection (`crate::db::lane`).
    #[error("database error")]
    Sqlite(#[source] rusqlite::Error),
    /// A write made together with other callers' (the intake's group
    /// commit, `crate::dispatch::intake`) failed: the cause is the group
    /// write's own error, shared by every caller of that group. Whether
    /// retrying can help is the cause's to say (`is_unavailable`).
    #[error("a shared write failed: {0}")]
    Shared(#[source] Arc<StoreError>),
    /// The store's own write path failed around the database, not in it:
    /// the write lane or the intake's group commit (`LaneError`).
    #[error(transparent)]
    Lane(#[from] LaneError),
}

/// A failure of the machinery that runs the store's hot writes (the write
/// lane, `crate::db::lane`, and the intake's group commit), as opposed to
/// an error of the database. None of them says the database is down.
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
    /// The intake's group commit no longer takes events.
    #[error("the intake is closed")]
    IntakeClosed,
    /// The group write this caller's event joined ended without answering
    /// it (its writer was cancelled or lost): whether the event was
    /// committed is unknown, and trying again is safe (an event is
    /// accepted once per `event_ref`).
    #[error("the shared intake write ended without an answer")]
    Unanswered,
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
    /// True when the database itself is unreachable or overloaded (a lost
    /// connection, a pool that timed out or closed, TLS or protocol
    /// trouble, a busy or locked database, a serialization failure, a
    /// deadlock, a server shutting down), so that the same request may
    /// succeed later. Anything else (a refused or malformed statement, a
    /// corrupt row, a defect of the store) is false: retrying it would
    /// fail the same way. A shared write is unavailable only when its
    /// cause is.
    pub fn is_unavailable(&self) -> bool {
        match self {
            StoreError::Database(
                sqlx::Error::Io(_)
                | sqlx::Error::PoolTimedOut
                | sqlx::Error::PoolClosed
                | sqlx::Error::Tls(_)
                | sqlx::Error::Protocol(_),
            ) => true,
            StoreError::Database(sqlx::Error::Database(db)) => is_busy(db.code().as_deref()),
            StoreError::Sqlite(rusqlite::Error::SqliteFailure(f, _)) => matches!(
                f.code,
                rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
            ),
            StoreError::Shared(cause) => cause.is_unavailable(),
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

fn is_busy(code: Option<&str>) -> bool {
    // SQLite BUSY (5), LOCKED (6) and BUSY_SNAPSHOT (517); PostgreSQL
    // serialization_failure (40001), deadlock_detected (40P01),
    // lock_not_available (55P03), admin_shutdown (57P01) and
    // cannot_connect_now (57P03).
    matches!(
        code,
        Some("5" | "6" | "517" | "40001" | "40P01" | "55P03" | "57P01" | "57P03")
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

    fn shared(cause: StoreError) -> StoreError {
        StoreError::Shared(Arc::new(cause))
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
    fn a_shared_write_is_unavailable_only_when_its_cause_is() {
        let timed_out = shared(StoreError::from(sqlx::Error::PoolTimedOut));
        assert!(timed_out.is_unavailable());
        let syntax = sqlite("SELEC 1");
        assert!(matches!(syntax, StoreError::Sqlite(_)), "{syntax:?}");
        assert!(!syntax.is_unavailable());
        let syntax = shared(syntax);
        assert!(!syntax.is_unavailable());
        assert!(
            !shared(postgres("42601")).is_unavailable(),
            "a syntax error"
        );
        assert!(
            shared(postgres("40001")).is_unavailable(),
            "a serialization failure"
        );
    }

    #[test]
    fn a_shared_write_says_its_cause() {
        let e = shared(StoreError::Corrupt("no column status".into()));
        assert!(e.to_string().contains("no column status"), "{e}");
        let source = std::error::Error::source(&e).expect("the cause");
        assert_eq!(
            source.to_string(),
            "stored data is corrupt: no column status"
        );
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

    #[test]
    fn the_write_lanes_own_failures_are_not_outages() {
        for e in [
            LaneError::ConnectionInUse,
            LaneError::TransactionEnded,
            LaneError::IntakeClosed,
            LaneError::Unanswered,
        ] {
            assert!(!StoreError::from(e).is_unavailable());
        }
        assert!(!shared(StoreError::Lane(LaneError::TransactionEnded)).is_unavailable());
    }
}
