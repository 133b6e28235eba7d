//! Environments: `sandbox` and `live`, created by bootstrap.

use crate::{Store, StoreError};
use domain::principal::Mode;
use domain::{Prefix, Ref, Timestamp};
use sqlx::Row;

#[derive(Debug, Clone)]
pub struct EnvironmentRecord {
    pub environment_ref: Ref,
    pub name: String,
    pub mode: Mode,
    pub created_at: Timestamp,
}

fn from_row(row: &sqlx::any::AnyRow) -> Result<EnvironmentRecord, StoreError> {
    Ok(EnvironmentRecord {
        environment_ref: Ref::from_trusted(row.try_get("environment_ref")?),
        name: row.try_get("name")?,
        mode: Mode::parse(&row.try_get::<String, _>("mode")?).unwrap_or(Mode::Sandbox),
        created_at: Timestamp::from_millis(row.try_get("created_at")?),
    })
}

impl Store {
    /// The environment of `mode`, created when missing.
    pub async fn ensure_environment(&self, mode: Mode) -> Result<EnvironmentRecord, StoreError> {
        sqlx::query(
            "INSERT INTO environments (environment_ref, name, mode, created_at) \
             VALUES ($1, $2, $3, $4) ON CONFLICT (mode) DO NOTHING",
        )
        .bind(Ref::generate(Prefix::Environment).into_string())
        .bind(mode.as_str())
        .bind(mode.as_str())
        .bind(Timestamp::now().millis())
        .execute(self.writer())
        .await?;
        let row = sqlx::query("SELECT * FROM environments WHERE mode = $1")
            .bind(mode.as_str())
            .fetch_one(self.pool())
            .await?;
        from_row(&row)
    }

    pub async fn environment(
        &self,
        environment_ref: &Ref,
    ) -> Result<EnvironmentRecord, StoreError> {
        let row = sqlx::query("SELECT * FROM environments WHERE environment_ref = $1")
            .bind(environment_ref.as_str())
            .fetch_one(self.pool())
            .await?;
        from_row(&row)
    }
}
