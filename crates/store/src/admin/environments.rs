//! Environments: `sandbox` and `live`, created by bootstrap.

use super::Admin;
use crate::db::codec::state;
use crate::db::read;
use crate::db::tx::{int, text, Columns, WriteTx};
use crate::StoreError;
use domain::principal::Mode;
use domain::{Prefix, Ref, Timestamp};

#[derive(Debug, Clone)]
pub struct EnvironmentRecord {
    pub environment_ref: Ref,
    pub name: String,
    pub mode: Mode,
    pub created_at: Timestamp,
}

fn from_row(row: &dyn Columns) -> Result<EnvironmentRecord, StoreError> {
    Ok(EnvironmentRecord {
        environment_ref: Ref::from_trusted(text(row, "environment_ref")?),
        name: text(row, "name")?,
        mode: state(row, "mode", Mode::parse)?,
        created_at: Timestamp::from_millis(int(row, "created_at")?),
    })
}

/// The environment of `mode`, created when missing.
pub async fn ensure(tx: &mut WriteTx, mode: Mode) -> Result<EnvironmentRecord, StoreError> {
    let environment_ref = Ref::generate(Prefix::Environment);
    tx.execute(
        "INSERT INTO environments (environment_ref, name, mode, created_at) \
         VALUES ($1, $2, $3, $4) ON CONFLICT (mode) DO NOTHING",
        &[
            environment_ref.as_str().into(),
            mode.as_str().into(),
            mode.as_str().into(),
            Timestamp::now().millis().into(),
        ],
    )
    .await?;
    let rows = tx
        .fetch(
            "SELECT * FROM environments WHERE mode = $1",
            &[mode.as_str().into()],
        )
        .await?;
    rows.first()
        .ok_or(StoreError::NotFound)
        .and_then(|row| from_row(row))
}

impl Admin<'_> {
    pub async fn environment(
        &self,
        environment_ref: &Ref,
    ) -> Result<EnvironmentRecord, StoreError> {
        read::one(
            self.pool(),
            "SELECT * FROM environments WHERE environment_ref = $1",
            &[environment_ref.as_str().into()],
            from_row,
        )
        .await
    }
}
