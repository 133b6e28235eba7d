//! Webhook persistence: endpoints and their secret versions, subscriptions,
//! data profile grants, deliveries and attempts.
//!
//! Secrets arrive here already encrypted; the store never sees a plaintext
//! signing secret. JSON columns (`event_data`, `match_reasons`, lists of
//! references) are stored as text and parsed at this boundary.
//!
//! Each module is the repository of its tables: its writes are free
//! functions taking the caller's unit of work first
//! (`endpoints::create(tx, …)`), so that a request's writes commit together,
//! and read back what they wrote through that transaction (`RETURNING`, or a
//! read on it). Its reads are methods of `Webhooks`, the domain's read
//! repository (`store.webhooks()`), on the read pool (`crate::db::read`,
//! with the same `Arg`s). One decoder per record reads rows of either
//! (`crate::db::tx::Columns`, with the column codecs of `crate::db::codec`), and state values are bound from the
//! domain's enums, not written into the SQL.

pub mod activity;
pub mod attempts;
pub mod data_profiles;
pub mod deliveries;
pub mod endpoints;
pub mod keys;
pub mod payload;
pub mod redrive_jobs;
pub mod subscriptions;

use crate::Store;
use sqlx::AnyPool;

/// The webhook domain's read repository, borrowing the store
/// (`Store::webhooks`): endpoints with their secret versions (and the
/// endpoint statuses and versions the dispatcher reads), subscriptions, data
/// profile grants, deliveries, attempts and the per-endpoint views.
#[derive(Clone, Copy)]
pub struct Webhooks<'a>(&'a Store);

impl Store {
    /// The webhook domain's reads (`Webhooks`).
    pub fn webhooks(&self) -> Webhooks<'_> {
        Webhooks(self)
    }
}

impl<'a> Webhooks<'a> {
    /// For reads.
    fn pool(&self) -> &'a AnyPool {
        self.0.pool()
    }
}
