//! Signing secret versions of an endpoint and their rotation: rotate adds a
//! pending version, confirm promotes it and lets the old active one retire
//! for a grace period, revoke withdraws the pending or retiring ones
//! (contract section 9, "Secrets and signatures").
//!
//! Invariant kept by every function here: exactly one version is active, at
//! most one is pending, and versions are numbered 1..n in order.

use crate::principal::wire_enum;
use crate::time::Timestamp;

wire_enum!(
    /// `Expired` is derived: a retiring version past its `expires_at`.
    SecretVersionStatus {
        Active => "active",
        Pending => "pending",
        Retiring => "retiring",
        Revoked => "revoked",
        Expired => "expired",
    }
);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretVersion {
    pub version: u32,
    pub status: SecretVersionStatus,
    pub created_at: Timestamp,
    pub expires_at: Option<Timestamp>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretRotationError {
    #[error("a secret version is already pending; confirm or revoke it first")]
    AlreadyPending,
    #[error("there is no pending secret version to confirm")]
    NothingToConfirm,
    #[error("there is no pending or retiring secret version to revoke")]
    NothingToRevoke,
}

impl SecretVersion {
    /// Version 1, active: created with its endpoint.
    pub fn initial(now: Timestamp) -> SecretVersion {
        SecretVersion {
            version: 1,
            status: SecretVersionStatus::Active,
            created_at: now,
            expires_at: None,
        }
    }

    /// The status a reader sees: retiring past `expires_at` reads as expired.
    pub fn effective_status(&self, now: Timestamp) -> SecretVersionStatus {
        match (self.status, self.expires_at) {
            (SecretVersionStatus::Retiring, Some(exp)) if exp <= now => {
                SecretVersionStatus::Expired
            }
            (s, _) => s,
        }
    }

    /// Whether this version signs an attempt made at `now`: active, pending,
    /// or retiring and not yet expired.
    pub fn signs(&self, now: Timestamp) -> bool {
        matches!(
            self.effective_status(now),
            SecretVersionStatus::Active
                | SecretVersionStatus::Pending
                | SecretVersionStatus::Retiring
        )
    }
}

/// The version numbers that sign an attempt made at `now`, in version order.
pub fn signing_versions(versions: &[SecretVersion], now: Timestamp) -> Vec<u32> {
    let mut v: Vec<u32> = versions
        .iter()
        .filter(|s| s.signs(now))
        .map(|s| s.version)
        .collect();
    v.sort_unstable();
    v
}

/// The version a rotation adds (n+1, pending); error if one is pending.
pub fn rotate(
    versions: &[SecretVersion],
    now: Timestamp,
) -> Result<SecretVersion, SecretRotationError> {
    if versions
        .iter()
        .any(|v| v.status == SecretVersionStatus::Pending)
    {
        return Err(SecretRotationError::AlreadyPending);
    }
    let last = versions.iter().map(|v| v.version).max().unwrap_or(0);
    Ok(SecretVersion {
        version: last + 1,
        status: SecretVersionStatus::Pending,
        created_at: now,
        expires_at: None,
    })
}

/// Pending → active; the old active → retiring with `expires_at` = now +
/// `grace_ms`. Versions already retiring keep their own expiry.
pub fn confirm(
    versions: &mut [SecretVersion],
    now: Timestamp,
    grace_ms: i64,
) -> Result<(), SecretRotationError> {
    if !versions
        .iter()
        .any(|v| v.status == SecretVersionStatus::Pending)
    {
        return Err(SecretRotationError::NothingToConfirm);
    }
    let expires_at = Timestamp::from_millis(now.millis().saturating_add(grace_ms));
    for v in versions.iter_mut() {
        match v.status {
            SecretVersionStatus::Active => {
                v.status = SecretVersionStatus::Retiring;
                v.expires_at = Some(expires_at);
            }
            SecretVersionStatus::Pending => v.status = SecretVersionStatus::Active,
            _ => {}
        }
    }
    Ok(())
}

/// Revokes the pending version if any, else every retiring one not yet
/// expired; returns the revoked version numbers.
pub fn revoke(
    versions: &mut [SecretVersion],
    now: Timestamp,
) -> Result<Vec<u32>, SecretRotationError> {
    let pending = versions
        .iter()
        .any(|v| v.status == SecretVersionStatus::Pending);
    let target = if pending {
        SecretVersionStatus::Pending
    } else {
        SecretVersionStatus::Retiring
    };
    let mut revoked = Vec::new();
    for v in versions
        .iter_mut()
        .filter(|v| v.effective_status(now) == target)
    {
        v.status = SecretVersionStatus::Revoked;
        revoked.push(v.version);
    }
    if revoked.is_empty() {
        return Err(SecretRotationError::NothingToRevoke);
    }
    Ok(revoked)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use SecretVersionStatus::*;

    fn t(ms: i64) -> Timestamp {
        Timestamp::from_millis(ms)
    }

    fn statuses(vs: &[SecretVersion], now: Timestamp) -> Vec<SecretVersionStatus> {
        vs.iter().map(|v| v.effective_status(now)).collect()
    }

    #[test]
    fn rotate_confirm_and_expire() {
        let mut vs = vec![SecretVersion::initial(t(0))];
        let v2 = rotate(&vs, t(10)).unwrap();
        assert_eq!((v2.version, v2.status), (2, Pending));
        vs.push(v2);
        assert_eq!(rotate(&vs, t(11)), Err(SecretRotationError::AlreadyPending));
        assert_eq!(signing_versions(&vs, t(11)), [1, 2]);
        confirm(&mut vs, t(20), 100).unwrap();
        assert_eq!(statuses(&vs, t(20)), [Retiring, Active]);
        assert_eq!(vs[0].expires_at, Some(t(120)));
        assert_eq!(statuses(&vs, t(120)), [Expired, Active]);
        assert!(vs[0].signs(t(119)) && !vs[0].signs(t(120)));
        assert_eq!(
            confirm(&mut vs, t(30), 100),
            Err(SecretRotationError::NothingToConfirm)
        );
    }

    #[test]
    fn revoke_pending_first_then_retiring() {
        let mut vs = vec![SecretVersion::initial(t(0))];
        assert_eq!(
            revoke(&mut vs, t(1)),
            Err(SecretRotationError::NothingToRevoke)
        );
        vs.push(rotate(&vs, t(1)).unwrap());
        confirm(&mut vs, t(2), 1000).unwrap();
        vs.push(rotate(&vs, t(3)).unwrap());
        assert_eq!(revoke(&mut vs, t(4)), Ok(vec![3]));
        assert_eq!(statuses(&vs, t(4)), [Retiring, Active, Revoked]);
        assert_eq!(revoke(&mut vs, t(5)), Ok(vec![1]));
        assert_eq!(signing_versions(&vs, t(5)), [2]);
        assert_eq!(
            revoke(&mut vs, t(6)),
            Err(SecretRotationError::NothingToRevoke)
        );
    }

    #[test]
    fn expired_versions_are_not_revoked() {
        let mut vs = vec![SecretVersion::initial(t(0))];
        vs.push(rotate(&vs, t(1)).unwrap());
        confirm(&mut vs, t(2), 10).unwrap();
        assert_eq!(
            revoke(&mut vs, t(12)),
            Err(SecretRotationError::NothingToRevoke)
        );
        assert_eq!(statuses(&vs, t(12)), [Expired, Active]);
    }

    proptest! {
        #[test]
        fn any_sequence_keeps_the_invariants(ops in proptest::collection::vec((0u8..3, 0i64..50), 0..40)) {
            let mut vs = vec![SecretVersion::initial(t(0))];
            let mut now = 0;
            let mut revoked = Vec::new();
            for (op, step) in ops {
                now += step;
                match op {
                    0 => if let Ok(v) = rotate(&vs, t(now)) { vs.push(v) },
                    1 => { let _ = confirm(&mut vs, t(now), 30); }
                    _ => if let Ok(r) = revoke(&mut vs, t(now)) { revoked.extend(r) },
                }
                let st = statuses(&vs, t(now));
                prop_assert_eq!(st.iter().filter(|s| **s == Active).count(), 1);
                prop_assert!(st.iter().filter(|s| **s == Pending).count() <= 1);
                for (i, v) in vs.iter().enumerate() {
                    prop_assert_eq!(v.version as usize, i + 1);
                }
                let signing = signing_versions(&vs, t(now));
                prop_assert!(revoked.iter().all(|r| !signing.contains(r)));
            }
        }
    }
}
