//! Dead letters: messages the intake could not parse or validate, kept
//! with why.

use super::Dispatch;
use crate::db::read;
use crate::StoreError;
use domain::{Prefix, Ref, Timestamp};

impl Dispatch<'_> {
    /// Keeps a message that could not be parsed or validated, with why.
    pub async fn dead_letter(&self, body: &str, reason: &str) -> Result<(), StoreError> {
        let dead_event_id = Ref::generate(Prefix::Event)
            .as_str()
            .replacen("evt_", "dead_", 1);
        read::execute(
            self.writer(),
            "INSERT INTO dead_events (dead_event_id, body, reason, received_at) VALUES ($1, $2, $3, $4)",
            &[
                (&dead_event_id).into(),
                body.into(),
                reason.into(),
                Timestamp::now().millis().into(),
            ],
        )
        .await?;
        Ok(())
    }

    pub async fn dead_letter_count(&self) -> Result<i64, StoreError> {
        read::scalar_int(self.pool(), "SELECT COUNT(*) FROM dead_events", &[])
            .await?
            .ok_or_else(|| StoreError::Corrupt("COUNT(*) was null".into()))
    }
}
