//! `CommerceError`: why a use case did not happen. `control-api` maps each
//! variant to the contract's code in one place (`From<CommerceError> for
//! ApiError`); nothing here knows a status code.

use store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum CommerceError {
    /// No such record in the caller's environment (`what` names it).
    #[error("no such {0}")]
    NotFound(&'static str),
    /// An input the caller gave is malformed, at `field`.
    #[error("{field}: {issue}")]
    Invalid { field: String, issue: String },
    /// Well-formed, but the rules refuse it now (a state, an amount).
    #[error("{0}")]
    Refused(String),
    /// A charge the change asked for was declined: the failed payment is
    /// recorded (its unit of work commits), nothing else changed
    /// (contract 14.2's `payment_declined`).
    #[error("the charge was declined: payment_declined")]
    PaymentDeclined,
    /// The payment processor cannot be reached (live environments have
    /// none yet).
    #[error("the payment processor is unavailable")]
    ProcessorUnavailable,
    /// The store failed or refused a write (a lost race is `Conflict`).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A defect: stored data that the rules cannot have written.
    #[error("{0}")]
    Broken(String),
}

impl CommerceError {
    pub fn invalid(field: impl Into<String>, issue: impl Into<String>) -> CommerceError {
        CommerceError::Invalid {
            field: field.into(),
            issue: issue.into(),
        }
    }

    pub fn refused(why: impl Into<String>) -> CommerceError {
        CommerceError::Refused(why.into())
    }

    pub fn broken(what: impl Into<String>) -> CommerceError {
        CommerceError::Broken(what.into())
    }
}

/// A refused state transition names the state.
impl From<domain::catalogue::StateError> for CommerceError {
    fn from(e: domain::catalogue::StateError) -> CommerceError {
        CommerceError::Refused(e.to_string())
    }
}

/// Amounts of two currencies met, or a sum too large.
impl From<domain::MoneyError> for CommerceError {
    fn from(e: domain::MoneyError) -> CommerceError {
        CommerceError::Refused(e.to_string())
    }
}

/// `StoreError::NotFound` as "no such `what`".
pub fn found<T>(r: Result<T, StoreError>, what: &'static str) -> Result<T, CommerceError> {
    match r {
        Err(StoreError::NotFound) => Err(CommerceError::NotFound(what)),
        other => Ok(other?),
    }
}
