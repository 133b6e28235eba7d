//! The administration domain's rows: environments, service accounts, their
//! credentials and permission grants, idempotency records and request logs.
//!
//! It never decides wire shapes or permissions; it keeps rows and the
//! conditional writes that guard them.
//!
//! Writes are free functions of the caller's unit of work
//! (`service_accounts::create(tx, …)`). Reads, and the few statements that
//! run outside a unit of work, are methods of `Admin`, the domain's read
//! repository (`store.admin()`).

pub mod credentials;
pub mod environments;
pub mod grants;
pub mod idempotency;
pub mod request_logs;
pub mod service_accounts;

use crate::Store;
use sqlx::AnyPool;

/// The administration domain's read repository, borrowing the store
/// (`Store::admin`): environments, service accounts, credentials (with
/// `authenticate` and `touch_credential`), grants, request logs
/// (`insert_request_log`, `list_request_logs`). Claiming an idempotency
/// key, which opens a request's unit of work, is
/// `Store::claim_idempotency_key`; expired records go with the retention
/// sweep (`Store::retention`).
#[derive(Clone, Copy)]
pub struct Admin<'a>(&'a Store);

impl Store {
    /// The administration domain's reads (`Admin`).
    pub fn admin(&self) -> Admin<'_> {
        Admin(self)
    }
}

impl<'a> Admin<'a> {
    /// For reads.
    fn pool(&self) -> &'a AnyPool {
        self.0.pool()
    }
}
