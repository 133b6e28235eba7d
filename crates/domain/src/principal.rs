//! Environments, service accounts, credentials and grants: their states and
//! the transitions allowed between them (contract section 3).

use crate::time::Timestamp;

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("cannot {action} a {from} service account")]
pub struct TransitionError {
    pub action: &'static str,
    pub from: &'static str,
}

/// Declares a closed enum with its wire names, `ALL`, `as_str` and `parse`.
macro_rules! wire_enum {
    ($(#[$m:meta])* $name:ident { $($variant:ident => $s:literal),* $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($variant),* }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),*];
            pub const fn as_str(self) -> &'static str {
                match self { $($name::$variant => $s),* }
            }
            pub fn parse(s: &str) -> Option<$name> {
                match s { $($s => Some($name::$variant),)* _ => None }
            }
        }
    };
}
pub(crate) use wire_enum;

wire_enum!(
    /// Sandbox or live: the two kinds of environment.
    Mode { Sandbox => "sandbox", Live => "live" }
);

wire_enum!(
    ServiceAccountStatus { Active => "active", Suspended => "suspended", Retired => "retired" }
);

wire_enum!(
    /// `Expired` is derived from `expires_at` when the row is read.
    CredentialStatus { Active => "active", Revoked => "revoked", Expired => "expired" }
);

wire_enum!(GrantStatus { Active => "active", Revoked => "revoked" });

impl ServiceAccountStatus {
    pub fn suspend(self) -> Result<ServiceAccountStatus, TransitionError> {
        match self {
            ServiceAccountStatus::Active => Ok(ServiceAccountStatus::Suspended),
            from => Err(TransitionError {
                action: "suspend",
                from: from.as_str(),
            }),
        }
    }

    pub fn resume(self) -> Result<ServiceAccountStatus, TransitionError> {
        match self {
            ServiceAccountStatus::Suspended => Ok(ServiceAccountStatus::Active),
            from => Err(TransitionError {
                action: "resume",
                from: from.as_str(),
            }),
        }
    }

    pub fn retire(self) -> Result<ServiceAccountStatus, TransitionError> {
        match self {
            ServiceAccountStatus::Active | ServiceAccountStatus::Suspended => {
                Ok(ServiceAccountStatus::Retired)
            }
            from => Err(TransitionError {
                action: "retire",
                from: from.as_str(),
            }),
        }
    }
}

impl CredentialStatus {
    /// The status a reader sees: an active credential past its expiry is expired.
    pub fn effective(self, expires_at: Option<Timestamp>, now: Timestamp) -> CredentialStatus {
        match (self, expires_at) {
            (CredentialStatus::Active, Some(exp)) if exp <= now => CredentialStatus::Expired,
            (s, _) => s,
        }
    }
}

/// Bounds of a credential rotation's grace period, in seconds.
pub const MAX_ROTATION_GRACE_SECONDS: i64 = 604_800;
pub const DEFAULT_ROTATION_GRACE_SECONDS: i64 = 86_400;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use ServiceAccountStatus::*;

    #[test]
    fn retired_is_terminal() {
        assert!(
            Retired.suspend().is_err() && Retired.resume().is_err() && Retired.retire().is_err()
        );
    }

    #[test]
    fn expiry_is_derived() {
        let now = Timestamp::from_millis(1000);
        let past = Some(Timestamp::from_millis(999));
        assert_eq!(
            CredentialStatus::Active.effective(past, now),
            CredentialStatus::Expired
        );
        assert_eq!(
            CredentialStatus::Revoked.effective(past, now),
            CredentialStatus::Revoked
        );
        assert_eq!(
            CredentialStatus::Active.effective(None, now),
            CredentialStatus::Active
        );
    }

    proptest! {
        /// Walking any sequence of actions never leaves the three states, and
        /// once retired nothing moves the account again.
        #[test]
        fn state_machine_walk(actions in proptest::collection::vec(0u8..3, 0..30)) {
            let mut s = Active;
            for a in actions {
                let next = match a { 0 => s.suspend(), 1 => s.resume(), _ => s.retire() };
                match next {
                    Ok(n) => { prop_assert!(s != Retired); s = n; }
                    Err(e) => prop_assert_eq!(e.from, s.as_str()),
                }
            }
        }
    }
}
