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
    /// The database could not be reached or answered with an error.
    #[error("database error")]
    Database(#[source] sqlx::Error),
    /// The same, from the write lane's own SQLite connection (`crate::db::lane`).
    #[error("database error")]
    Sqlite(#[source] rusqlite::Error),
    /// A write made together with other callers' failed (or its outcome
    /// was lost); the message is the shared write's error. Retrying is safe.
    #[error("database error (shared write): {0}")]
    Shared(String),
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
    /// True when the database itself is unreachable or overloaded, as opposed
    /// to a bug in a query.
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            StoreError::Database(
                sqlx::Error::Io(_)
                    | sqlx::Error::PoolTimedOut
                    | sqlx::Error::PoolClosed
                    | sqlx::Error::Tls(_)
                    | sqlx::Error::Protocol(_)
            )
        ) || matches!(self, StoreError::Database(sqlx::Error::Database(db)) if is_busy(db.code().as_deref()))
            || matches!(self, StoreError::Shared(_))
            || matches!(self, StoreError::Sqlite(rusqlite::Error::SqliteFailure(f, _))
                if matches!(f.code, rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked))
    }
}

fn is_busy(code: Option<&str>) -> bool {
    // SQLite BUSY (5) and LOCKED (6); PostgreSQL serialization and lock errors.
    matches!(
        code,
        Some("5" | "6" | "517" | "40001" | "40P01" | "55P03" | "57P01" | "57P03")
    )
}
