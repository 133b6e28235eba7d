//! The migrations each engine applies, embedded at build time from files
//! written once (`build.rs`, `migrations/README.md`), and handed to sqlx's
//! migrator, which records each one's SHA-384 and refuses a database whose
//! applied file changed.
//!
//! This module never edits or reorders a migration: what it yields is the
//! files' bytes in version order.

use crate::Backend;
use futures::future::BoxFuture;
use sqlx::error::BoxDynError;
use sqlx::migrate::{Migration, MigrationSource, MigrationType, Migrator};
use std::borrow::Cow;

mod generated {
    include!(concat!(env!("OUT_DIR"), "/migrations.rs"));
}

/// `(file name, SQL)` of every migration of `backend`, in version order.
pub fn files(backend: Backend) -> &'static [(&'static str, &'static str)] {
    match backend {
        Backend::Sqlite => generated::SQLITE,
        Backend::Postgres => generated::POSTGRES,
    }
}

/// The embedded files of one engine, as sqlx reads a migration folder:
/// `NNNN_what_it_does.sql` gives version NNNN and description
/// "what it does"; those after version `through`, when it is set, are
/// left out.
#[derive(Debug)]
struct Embedded {
    files: &'static [(&'static str, &'static str)],
    through: Option<i64>,
}

impl<'s> MigrationSource<'s> for Embedded {
    fn resolve(self) -> BoxFuture<'s, Result<Vec<Migration>, BoxDynError>> {
        Box::pin(async move {
            let all = self.files.iter().map(|(name, sql)| {
                let (version, rest) = name
                    .split_once('_')
                    .ok_or_else(|| format!("{name}: no version"))?;
                let description = rest.trim_end_matches(".sql").replace('_', " ");
                Ok(Migration::new(
                    version.parse()?,
                    Cow::Owned(description),
                    MigrationType::Simple,
                    Cow::Borrowed(*sql),
                    false,
                ))
            });
            let through = self.through.unwrap_or(i64::MAX);
            all.filter(|m: &Result<Migration, BoxDynError>| {
                m.as_ref().map_or(true, |m| m.version <= through)
            })
            .collect()
        })
    }
}

/// The migrator of `backend`.
pub(crate) async fn migrator(backend: Backend) -> Result<Migrator, sqlx::migrate::MigrateError> {
    Migrator::new(Embedded {
        files: files(backend),
        through: None,
    })
    .await
}

/// The migrator of `backend` that stops after version `last`: the schema
/// a store of the release whose newest migration was `last` has, for a
/// test that upgrades such a store with its rows (`Store::migrate_through`).
pub(crate) async fn migrator_through(
    backend: Backend,
    last: i64,
) -> Result<Migrator, sqlx::migrate::MigrateError> {
    Migrator::new(Embedded {
        files: files(backend),
        through: Some(last),
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn both_engines_have_every_version_once_in_order() {
        for backend in [Backend::Sqlite, Backend::Postgres] {
            let m = migrator(backend).await.unwrap();
            let versions: Vec<i64> = m.iter().map(|m| m.version).collect();
            assert_eq!(versions, (1..=versions.len() as i64).collect::<Vec<_>>());
            let through = migrator_through(backend, 31).await.unwrap();
            let versions: Vec<i64> = through.iter().map(|m| m.version).collect();
            assert_eq!(versions, (1..=31).collect::<Vec<_>>());
        }
        let lite = migrator(Backend::Sqlite).await.unwrap();
        let first = lite.iter().next().unwrap();
        assert_eq!(first.description, "administration");
    }
}
