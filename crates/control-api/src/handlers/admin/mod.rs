//! The administration surface: environments, service accounts, their
//! credentials and grants, and request logs (contract section 3).

pub mod credentials;
pub mod environments;
pub mod grants;
pub mod request_logs;
pub mod service_accounts;
