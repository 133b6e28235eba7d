//! The administration domain's rows: environments, service accounts, their
//! credentials and permission grants, idempotency records and request logs.
//!
//! It never decides wire shapes or permissions; it keeps rows and the
//! conditional writes that guard them.

pub mod credentials;
pub mod environments;
pub mod grants;
pub mod idempotency;
pub mod request_logs;
pub mod service_accounts;
