//! Reads of order per key (contract 13.1) for operators: what a waiting
//! delivery waits for, how many keys are blocked, and the failed heads
//! that block them. The writes (numbering, release, skip) are
//! `crate::dispatch::ordering` and `deliveries::skip`.

use super::Webhooks;
use crate::db::read;
use crate::db::tx::text;
use crate::dispatch::ordering::statements;
use crate::webhooks::deliveries::{delivery_from_row, DeliveryRecord};
use crate::StoreError;
use domain::webhook::DeliveryStatus;
use domain::Ref;

/// The failed deliveries that block their keys: ordered, failed, not
/// skipped. Word for word the predicate of the partial index
/// `webhook_deliveries_blocking` (migration 0022).
fn blocking() -> String {
    format!(
        "ordered_key IS NOT NULL AND status = '{}' AND skipped_at IS NULL",
        DeliveryStatus::Failed.as_str()
    )
}

/// The negation of `blocking`: what retention may delete of the settled.
pub(crate) fn not_a_blocked_head() -> String {
    format!(
        "(ordered_key IS NULL OR status <> '{}' OR skipped_at IS NOT NULL)",
        DeliveryStatus::Failed.as_str()
    )
}

impl Webhooks<'_> {
    /// The delivery that `delivery` waits for, if it is a waiting one
    /// (ordered, pending with no due time) and an earlier delivery of its
    /// key blocks it; `None` while it waits only for an earlier event to be
    /// accepted.
    pub async fn waiting_for(&self, delivery: &DeliveryRecord) -> Result<Option<Ref>, StoreError> {
        let waiting = delivery.ordered
            && delivery.status == DeliveryStatus::Pending
            && delivery.next_attempt_at.is_none();
        if !waiting {
            return Ok(None);
        }
        read::optional(
            self.pool(),
            &statements::waiting_for(),
            &[delivery.delivery_ref.as_str().into()],
            |row| Ok(Ref::from_trusted(text(row, "delivery_ref")?)),
        )
        .await
    }

    /// The keys blocked now on `endpoint_ref` (all endpoints with `None`).
    pub async fn blocked_keys(&self, endpoint_ref: Option<&Ref>) -> Result<i64, StoreError> {
        let (sql, args) = match endpoint_ref {
            Some(e) => (
                format!(
                    "SELECT COUNT(*) FROM (SELECT DISTINCT ordered_key FROM webhook_deliveries \
                     WHERE endpoint_ref = $1 AND {}) AS k",
                    blocking()
                ),
                vec![e.as_str().into()],
            ),
            None => (
                format!(
                    "SELECT COUNT(*) FROM (SELECT DISTINCT endpoint_ref, ordered_key \
                     FROM webhook_deliveries WHERE {}) AS k",
                    blocking()
                ),
                Vec::new(),
            ),
        };
        Ok(read::scalar_int(self.pool(), &sql, &args)
            .await?
            .unwrap_or(0))
    }

    /// The head of each blocked key of an endpoint (its failed delivery of
    /// lowest sequence), at most `limit` keys, by key.
    pub async fn blocked_heads(
        &self,
        environment_ref: &Ref,
        endpoint_ref: &Ref,
        limit: usize,
    ) -> Result<Vec<DeliveryRecord>, StoreError> {
        // The blocking predicate's columns unqualified are `d`'s here.
        let sql = format!(
            "SELECT * FROM webhook_deliveries d WHERE endpoint_ref = $1 AND environment_ref = $2 \
             AND {} AND NOT EXISTS (SELECT 1 FROM webhook_deliveries p \
             WHERE p.ordered_key = d.ordered_key AND p.endpoint_ref = d.endpoint_ref \
             AND p.sequence < d.sequence AND p.status = '{}' AND p.skipped_at IS NULL) \
             ORDER BY ordered_key LIMIT {limit}",
            blocking(),
            DeliveryStatus::Failed.as_str(),
        );
        read::all(
            self.pool(),
            &sql,
            &[
                endpoint_ref.as_str().into(),
                environment_ref.as_str().into(),
            ],
            delivery_from_row,
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The index's predicate, as migration 0022 creates it.
    #[test]
    fn blocking_is_the_index_predicate() {
        let migration = include_str!("../../migrations/shared/0022_order_per_key.sql");
        let index = migration
            .lines()
            .find(|l| l.contains("INDEX webhook_deliveries_blocking "))
            .expect("the blocking index");
        assert!(
            index.ends_with(&format!("WHERE {};", blocking())),
            "{index}"
        );
    }
}
