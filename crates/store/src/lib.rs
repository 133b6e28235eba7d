//! Persistence for every mode: SQLite (the embedded default) and PostgreSQL
//! (fleets), behind one `Store`.
//!
//! The store owns SQL, rows, migrations and transactions. It speaks one
//! dialect that both engines accept (`$n` placeholders, `TEXT` and `BIGINT`
//! columns, partial unique indexes) through sqlx's `Any` driver, so each query
//! is written once. It never knows HTTP or wire shapes: it returns records
//! built from domain types, and errors as `StoreError`.
//!
//! Invariants: every resource row carries `environment_ref` and a `version`
//! bumped by each write; every conditional write is `... WHERE version = $n`
//! so a lost race is reported as `StoreError::Conflict`, never half-applied.

mod credentials;
pub mod dispatch;
mod environments;
mod error;
mod grants;
mod idempotency;
mod page;
mod request_logs;
mod service_accounts;
pub mod webhooks;

pub use credentials::{AuthRecord, CredentialRecord, NewCredential};
pub use dispatch::{AttemptResult, EventRecord};
pub use environments::EnvironmentRecord;
pub use error::StoreError;
pub use grants::GrantRecord;
pub use idempotency::{IdempotencyScope, Reservation, StoredResponse};
pub use page::{Page, PageRequest};
pub use request_logs::{RequestLogFilter, RequestLogRecord};
pub use service_accounts::ServiceAccountRecord;
pub use webhooks::data_profiles::{DataProfileGrantRecord, NewDataProfileGrant, StoredBody};
pub use webhooks::deliveries::{AttemptRecord, DeliveryRecord, NewDelivery};
pub use webhooks::endpoints::{EndpointRecord, NewSecret, StoredSecretVersion};
pub use webhooks::subscriptions::{NewSubscription, SubscriptionRecord};

use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{AnyPool, Executor};
use std::str::FromStr;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// A handle on the database; cheap to clone.
#[derive(Clone)]
pub struct Store {
    pool: AnyPool,
    backend: Backend,
}

static SQLITE_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");
static POSTGRES_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

impl Store {
    /// Opens `url` (`sqlite://path` or `postgres://…`). A SQLite file and its
    /// folder are created when missing.
    pub async fn connect(url: &str) -> Result<Store, StoreError> {
        sqlx::any::install_default_drivers();
        let (backend, url) = if let Some(path) = url.strip_prefix("sqlite://") {
            let file = path.split('?').next().unwrap_or(path);
            if let Some(dir) = std::path::Path::new(file).parent() {
                if !dir.as_os_str().is_empty() {
                    std::fs::create_dir_all(dir).map_err(|e| StoreError::Config(e.to_string()))?;
                }
            }
            let url = if path.contains("mode=") {
                url.to_owned()
            } else if path.contains('?') {
                format!("{url}&mode=rwc")
            } else {
                format!("{url}?mode=rwc")
            };
            (Backend::Sqlite, url)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            (Backend::Postgres, url.to_owned())
        } else {
            return Err(StoreError::Config(
                "store.url must start with sqlite:// or postgres://".into(),
            ));
        };
        let options = AnyConnectOptions::from_str(&url)?;
        let pool = AnyPoolOptions::new()
            .max_connections(match backend {
                Backend::Sqlite => 8,
                Backend::Postgres => 16,
            })
            .acquire_timeout(Duration::from_secs(10))
            .after_connect(move |conn, _meta| {
                Box::pin(async move {
                    if backend == Backend::Sqlite {
                        conn.execute(
                            "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; \
                             PRAGMA busy_timeout = 15000; PRAGMA foreign_keys = ON;",
                        )
                        .await?;
                    }
                    Ok(())
                })
            })
            .connect_with(options)
            .await?;
        Ok(Store { pool, backend })
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Applies every pending versioned migration of this backend.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        let migrator = match self.backend {
            Backend::Sqlite => &SQLITE_MIGRATIONS,
            Backend::Postgres => &POSTGRES_MIGRATIONS,
        };
        migrator
            .run(&self.pool)
            .await
            .map_err(|e| StoreError::Migration(e.to_string()))
    }

    /// A cheap round trip, for readiness checks.
    pub async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// Starts a write transaction. SQLite takes its write lock up front
    /// (`BEGIN IMMEDIATE`) so that two writers queue on the busy timeout
    /// instead of failing when a read lock is upgraded.
    pub(crate) async fn write_tx(
        &self,
    ) -> Result<sqlx::Transaction<'static, sqlx::Any>, StoreError> {
        Ok(match self.backend {
            Backend::Sqlite => self.pool.begin_with("BEGIN IMMEDIATE").await?,
            Backend::Postgres => self.pool.begin().await?,
        })
    }

    pub(crate) fn pool(&self) -> &AnyPool {
        &self.pool
    }
}
