//! The store's identity (`domain::StoreId`, table `store_identity`): made by
//! the first `migrate`, read by the processes that name what they keep
//! outside the store after it (the fleet's Redis keys and RabbitMQ queue).
//! It must never change once made: renaming a running fleet's keys would
//! strand its schedule.

use crate::{Store, StoreError};
use domain::{StoreId, Timestamp};

impl Store {
    /// Gives the store its identity unless it has one. Concurrent first
    /// migrations agree: the row is written once (`ON CONFLICT DO NOTHING`)
    /// and every process reads the one that won.
    pub(crate) async fn ensure_identity(&self) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO store_identity (singleton, store_id, created_at) VALUES (1, $1, $2) \
             ON CONFLICT (singleton) DO NOTHING",
        )
        .bind(StoreId::generate().as_str().to_owned())
        .bind(Timestamp::now().millis())
        .execute(&self.writer)
        .await?;
        Ok(())
    }

    /// The store's identity. `Corrupt` when the store was never migrated
    /// or holds a malformed one.
    pub async fn identity(&self) -> Result<StoreId, StoreError> {
        let text = crate::db::read::optional(
            &self.pool,
            "SELECT store_id FROM store_identity WHERE singleton = 1",
            &[],
            |row| crate::db::tx::text(row, "store_id"),
        )
        .await?
        .ok_or_else(|| StoreError::Corrupt("the store has no identity: migrate it".into()))?;
        StoreId::parse(&text).ok_or(StoreError::Corrupt(format!("store identity {text}")))
    }
}
