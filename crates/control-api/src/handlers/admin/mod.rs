//! The administration surface: environments, service accounts, their
//! credentials and grants, and request logs (contract section 3).

pub mod credentials;
pub mod environments;
pub mod grants;
pub mod request_logs;
pub mod service_accounts;

use domain::Timestamp;

pub(crate) fn ts(t: Timestamp) -> String {
    t.to_rfc3339()
}

pub(crate) fn opt_ts(t: Option<Timestamp>) -> Option<String> {
    t.map(Timestamp::to_rfc3339)
}
