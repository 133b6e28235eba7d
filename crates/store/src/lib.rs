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
//!
//! How statements run (the write transaction, reads, paging, the column
//! codecs, SQLite's write lane) is the crate `store_db`, a leaf that knows
//! no table, re-exported as `db`; what a write means for the dispatcher
//! (the outbox's `emit`, the due signal) is `dispatch`'s.
//!
//! Reads are grouped by domain in read repositories borrowing the store
//! (`store.admin()`, `store.webhooks()`, `store.billing()`); writes are functions of a
//! `WriteTx`; the dispatcher's persistence (`dispatch`) is `Store`'s.
//! Every list but an endpoint's filtered deliveries is read one way,
//! `Store::list` (or `list_all`) of a `resource::Resource`; the
//! repositories' `list_…` methods are typed doors to it.

pub mod admin;
pub mod billing;
pub mod db;
pub mod dispatch;
mod identity;
pub(crate) mod lease;
pub mod packed;
pub mod resource;
pub mod retention;
pub mod webhooks;

pub use admin::credentials::{AuthRecord, CredentialRecord, NewCredential};
pub use admin::environments::EnvironmentRecord;
pub use admin::grants::GrantRecord;
pub use admin::idempotency::{Claim, IdempotencyScope, KeyClaim, StoredResponse};
pub use admin::request_logs::{RequestLogFilter, RequestLogRecord};
pub use admin::service_accounts::ServiceAccountRecord;
pub use admin::Admin;
pub use billing::Billing;
pub use db::{Backend, LaneError, Page, PageRequest, StoreError, Synchronous, WriteTx};
pub use dispatch::dead_letters::DeadLetterRecord;
pub use dispatch::intake::{EventsWritten, Leased, Leasing, Prepared, Roomless};
pub use dispatch::signals::Wakeups;
pub use dispatch::{fanout, projection, signals};
pub use dispatch::{AttemptResult, EventData, EventRecord, Recorded};
pub use webhooks::attempts::{AttemptRecord, KeptSuccess};
pub use webhooks::data_profiles::{DataProfileGrantRecord, NewDataProfileGrant, StoredBody};
pub use webhooks::deliveries::{DeliveryFilter, DeliveryRecord, NewDelivery, Payload};
pub use webhooks::endpoints::{
    EndpointGate, EndpointGates, EndpointRecord, EndpointSettings, NewSecret, StoredSecretVersion,
};
pub use webhooks::subscriptions::{NewSubscription, SubscriptionRecord};
pub use webhooks::Webhooks;

use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{AnyPool, Connection, Executor};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

/// A handle on the database; cheap to clone.
///
/// Reads go through `pool`. With SQLite, `writer` is a pool of one
/// connection that serves as the process's write turn: the write lane and
/// the group commit each hold it while their transaction runs on the
/// lane's connection, so the writers of this process queue fairly instead
/// of meeting SQLite's write lock, whose busy handler sleeps; reads run
/// beside them (WAL). With PostgreSQL `writer` is the writers' pool,
/// separate from the readers', so that a request holding a write
/// transaction never waits for a connection to read.
#[derive(Clone)]
pub struct Store {
    pool: AnyPool,
    writer: AnyPool,
    backend: Backend,
    /// What a commit of this store wakes in this process (events emitted
    /// into the outbox, deliveries made due), if the process gave any
    /// (`waking`): attached to each `WriteTx`.
    wake: Option<Arc<Wakeups>>,
    /// PostgreSQL only: where `signals` listens.
    pg_url: Option<Arc<str>>,
    /// This process's projection of other systems' events (`projection`).
    /// SQLite only: where the hot write transactions run (`lane`).
    lane: Option<Arc<db::lane::Lane>>,
    /// SQLite only: the other units of work, which share commits on the
    /// lane's connection (`group`).
    group: Option<Arc<db::group::Group>>,
    /// Idempotency keys claimed by this process's open transactions.
    claimed: Arc<admin::idempotency::Claimed>,
    /// Held by every clone; the SQLite checkpoint task stops once the last
    /// clone is dropped.
    _alive: Arc<()>,
}

/// Options of `Store::connect_with`.
#[derive(Debug, Clone, Copy, Default)]
pub struct StoreOptions {
    pub synchronous: Synchronous,
}

impl Store {
    /// Opens `url` (`sqlite://path` or `postgres://…`). A SQLite file and its
    /// folder are created when missing.
    pub async fn connect(url: &str) -> Result<Store, StoreError> {
        Store::connect_with(url, StoreOptions::default()).await
    }

    /// `connect` with explicit options.
    pub async fn connect_with(url: &str, options: StoreOptions) -> Result<Store, StoreError> {
        let synchronous = options.synchronous;
        sqlx::any::install_default_drivers();
        let mut sqlite_file = None;
        let (backend, url) = if let Some(path) = url.strip_prefix("sqlite://") {
            let file = path.split('?').next().unwrap_or(path);
            sqlite_file = Some(file.to_owned());
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
        let pool_of = |size: u32| {
            AnyPoolOptions::new()
                .max_connections(size)
                // With SQLite the writers queue for the one connection, so a
                // wait is a turn; with PostgreSQL a long wait means the
                // server is gone: the request answers 503 within seconds.
                .acquire_timeout(match backend {
                    Backend::Sqlite => Duration::from_secs(10),
                    Backend::Postgres => Duration::from_secs(2),
                })
                // A SQLite connection is a file handle that cannot go stale,
                // and the check before each use is one more round trip to
                // its thread; a PostgreSQL one can (a server restart).
                .test_before_acquire(backend == Backend::Postgres)
                // A transaction the database ended by itself (SQLite rolls
                // back on a full disk or an I/O error) leaves sqlx counting
                // it open, and the connection would refuse every `BEGIN`
                // from then on: such a connection is closed, not reused.
                .after_release(|conn, _meta| {
                    Box::pin(async move {
                        if !conn.is_in_transaction() {
                            return Ok(true);
                        }
                        // Runs the rollback the dropped transaction queued.
                        conn.ping().await?;
                        Ok(!conn.is_in_transaction())
                    })
                })
                .after_connect(move |conn, _meta| {
                    Box::pin(async move {
                        if backend == Backend::Sqlite {
                            conn.execute(db::SQLITE_PRAGMAS).await?;
                            conn.execute(synchronous.pragma()).await?;
                        }
                        Ok(())
                    })
                })
        };
        let (pool, writer) = match backend {
            Backend::Sqlite => {
                let writer = pool_of(1).connect_with(options.clone()).await?;
                (pool_of(8).connect_with(options).await?, writer)
            }
            // Reads have a pool of their own, so that requests holding a
            // write transaction can always read.
            Backend::Postgres => (
                pool_of(8).connect_with(options.clone()).await?,
                pool_of(16).connect_with(options).await?,
            ),
        };
        let alive = Arc::new(());
        if backend == Backend::Sqlite {
            // Automatic checkpoints are off on every connection (above).
            db::checkpoint::spawn(pool.clone(), writer.clone(), &alive);
        }
        let lane = match sqlite_file {
            Some(file) => Some(Arc::new(db::lane::Lane::start(&file, synchronous)?)),
            None => None,
        };
        let group = lane
            .as_ref()
            .map(|lane| Arc::new(db::group::Group::start(lane, writer.clone())));
        Ok(Store {
            pool,
            writer,
            backend,
            wake: None,
            pg_url: (backend == Backend::Postgres).then(|| Arc::from(url.as_str())),
            lane,
            group,
            claimed: Arc::default(),
            _alive: alive,
        })
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Applies every pending versioned migration of this backend, then the
    /// data fix-ups that need Rust rather than SQL (each idempotent, and one
    /// read when there is nothing to do): the custom field references of
    /// checkout config versions written before migration 0016
    /// (`billing::checkout_configs::assign_missing_refs`).
    pub async fn migrate(&self) -> Result<(), StoreError> {
        self.run(db::migrations::migrator(self.backend).await)
            .await?;
        self.ensure_identity().await?;
        let completed = billing::checkout_configs::assign_missing_refs(self).await?;
        if completed > 0 {
            tracing::info!(
                versions = completed,
                "custom fields of checkout config versions given their references"
            );
        }
        Ok(())
    }

    /// Applies the migrations up to version `last` and no further, and
    /// nothing else: the schema of the release whose newest migration was
    /// `last`. An upgrade test writes that release's rows into it, then
    /// `migrate`s the rest.
    pub async fn migrate_through(&self, last: i64) -> Result<(), StoreError> {
        self.run(db::migrations::migrator_through(self.backend, last).await)
            .await
    }

    async fn run(
        &self,
        migrator: Result<sqlx::migrate::Migrator, sqlx::migrate::MigrateError>,
    ) -> Result<(), StoreError> {
        migrator
            .map_err(|e| StoreError::Migration(e.to_string()))?
            .run(&self.writer)
            .await
            .map_err(|e| StoreError::Migration(e.to_string()))
    }

    /// A cheap round trip, for readiness checks.
    pub async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    pub async fn close(&self) {
        self.writer.close().await;
        self.pool.close().await;
    }

    /// Begins a unit of work. Every write the caller makes through it, and
    /// every event it emits, commits together or not at all, and its
    /// `commit` returns once that commit is on disk. With SQLite it is a
    /// unit of the group commit (`db::group`): units that end while a
    /// commit syncs share the next one, each inside a savepoint of its own,
    /// so a unit that rolls back takes only its own writes with it. With
    /// PostgreSQL it is a transaction on the writer pool.
    pub async fn begin(&self) -> Result<WriteTx, StoreError> {
        let conn = match &self.group {
            Some(group) => db::tx::Conn::Group(group.begin().await?),
            None => db::tx::Conn::Sqlx(self.writer.begin().await?),
        };
        Ok(WriteTx::new(conn, self.backend, self.signals()))
    }

    /// Runs one statement as a unit of work of its own (a request's log
    /// line, a credential's use, a purge, a dead letter): with SQLite in
    /// the group commit, as `begin` does; with PostgreSQL on its own.
    /// Returns the number of rows it changed. Never call it while holding a
    /// `WriteTx` of this store: with SQLite it would wait for itself.
    pub(crate) async fn write_alone(
        &self,
        sql: &str,
        args: &[db::tx::Arg<'_>],
    ) -> Result<u64, StoreError> {
        if self.group.is_none() {
            return db::write::autocommit(&self.writer, sql, args).await;
        }
        let mut tx = self.begin().await?;
        let changed = tx.execute(sql, args).await?;
        tx.commit().await?;
        Ok(changed)
    }

    /// `write_alone` for a statement with `RETURNING`: returns `column` of
    /// the rows it returns.
    pub(crate) async fn write_alone_returning(
        &self,
        sql: &str,
        args: &[db::tx::Arg<'_>],
        column: &str,
    ) -> Result<Vec<String>, StoreError> {
        if self.group.is_none() {
            return db::write::autocommit_texts(&self.writer, sql, args, column).await;
        }
        let mut tx = self.begin().await?;
        let returned = tx.fetch_texts(sql, args, column).await?;
        tx.commit().await?;
        Ok(returned)
    }

    /// This store's commits wake `wakeups` (its clones made from now on
    /// share them): the process's relay and dispatchers start at once.
    pub fn waking(mut self, wakeups: Arc<Wakeups>) -> Store {
        self.wake = Some(wakeups);
        self
    }

    /// What this store's transactions carry for their writes to wake
    /// (`Wakeups`).
    pub(crate) fn signals(&self) -> Option<Arc<dyn std::any::Any + Send + Sync>> {
        let wake = self.wake.clone()?;
        Some(wake)
    }

    /// Runs a write on the lane (SQLite; `lane`), or here (PostgreSQL,
    /// whose pool has many writers and whose sockets belong to this
    /// runtime).
    pub(crate) async fn on_lane<T, F>(&self, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: std::future::Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        match &self.lane {
            Some(lane) => lane.run(work).await,
            None => work.await,
        }
    }

    /// Runs background work on the lane once no other work waits for it
    /// there, or after `patience` (SQLite; `lane::Lane::run_when_quiet`),
    /// or here (PostgreSQL, whose writers do not queue behind one another).
    pub(crate) async fn on_lane_when_quiet<T, F>(
        &self,
        patience: std::time::Duration,
        work: F,
    ) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: std::future::Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        match &self.lane {
            Some(lane) => lane.run_when_quiet(patience, work).await,
            None => work.await,
        }
    }

    /// A write transaction for the hot writes: on the lane's connection
    /// (SQLite; `lane`, so call it from a future on the lane), or a pooled
    /// one (PostgreSQL).
    pub(crate) async fn begin_write(&self) -> Result<WriteTx, StoreError> {
        let conn = match &self.lane {
            Some(lane) => db::tx::Conn::Lite(lane.begin(&self.writer).await?),
            None => db::tx::Conn::Sqlx(self.writer.begin().await?),
        };
        Ok(WriteTx::new(conn, self.backend, self.signals()))
    }

    /// As `begin_write`, for work that is done again if a power cut loses
    /// it (the retention sweep): its commit does not wait for the disk.
    /// On SQLite it writes the WAL unsynced (`Lane::begin_unsynced`); on
    /// PostgreSQL it sets `synchronous_commit` off for itself alone. Either
    /// way every commit that does wait makes this one durable too, and a
    /// lost one is lost whole.
    pub(crate) async fn begin_unsynced(&self) -> Result<WriteTx, StoreError> {
        let conn = match &self.lane {
            Some(lane) => db::tx::Conn::Lite(lane.begin_unsynced(&self.writer).await?),
            None => db::tx::Conn::Sqlx(self.writer.begin().await?),
        };
        let mut tx = WriteTx::new(conn, self.backend, self.signals());
        if self.backend == Backend::Postgres {
            tx.execute("SET LOCAL synchronous_commit = off", &[])
                .await?;
        }
        Ok(tx)
    }

    /// For reads.
    pub(crate) fn pool(&self) -> &AnyPool {
        &self.pool
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every connection of the pools runs with the configured durability:
    /// `PRAGMA synchronous` reads 2 for FULL and 1 for NORMAL (`store_db`'s
    /// lane tests check the lane's connection).
    #[tokio::test]
    async fn every_connection_has_the_configured_durability() {
        for (synchronous, want) in [(Synchronous::Full, 2i64), (Synchronous::Normal, 1)] {
            let dir = tempfile::tempdir().unwrap();
            let url = format!("sqlite://{}/d.db", dir.path().display());
            let store = Store::connect_with(&url, StoreOptions { synchronous })
                .await
                .unwrap();
            for pool in [&store.pool, &store.writer] {
                let got: i64 = sqlx::query_scalar("PRAGMA synchronous")
                    .fetch_one(pool)
                    .await
                    .unwrap();
                assert_eq!(got, want, "{synchronous:?} pool");
            }
            assert!(store.lane.is_some(), "SQLite has a lane");
        }
    }

    #[test]
    fn the_default_is_full() {
        assert_eq!(StoreOptions::default().synchronous, Synchronous::Full);
    }
}
