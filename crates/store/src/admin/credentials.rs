//! Credentials: bearer secrets of service accounts, stored as digests.

use super::Admin;
use crate::db::codec::{opt_ts, state};
use crate::db::read;
use crate::db::tx::{int, text, Columns, WriteTx};
use crate::resource::{Resource, Scope};
use crate::StoreError;
use domain::principal::{CredentialStatus, GrantStatus, Mode, ServiceAccountStatus};
use domain::secret::CredentialSecret;
use domain::{Prefix, Ref, Timestamp};

#[derive(Debug, Clone)]
pub struct CredentialRecord {
    pub credential_ref: Ref,
    pub environment_ref: Ref,
    pub principal_ref: Ref,
    pub name: Option<String>,
    /// As stored: an active one past `expires_at` is `Expired` at that
    /// time (`status_at`).
    pub status: CredentialStatus,
    pub secret_hint: String,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub expires_at: Option<Timestamp>,
    pub last_used_at: Option<Timestamp>,
    pub revoked_at: Option<Timestamp>,
    pub previous_secret_expires_at: Option<Timestamp>,
    pub version: i64,
}

impl CredentialRecord {
    /// Its status at `now`: an active credential past `expires_at` is
    /// `Expired`.
    pub fn status_at(&self, now: Timestamp) -> CredentialStatus {
        self.status.effective(self.expires_at, now)
    }
}

#[derive(Debug, Clone)]
pub struct NewCredential<'a> {
    pub name: Option<&'a str>,
    pub expires_at: Option<Timestamp>,
}

/// What authenticating a secret yields.
#[derive(Debug, Clone)]
pub struct AuthRecord {
    pub credential_ref: Ref,
    pub principal_ref: Ref,
    pub environment_ref: Ref,
    pub mode: Mode,
    pub principal_status: ServiceAccountStatus,
    pub credential_status: CredentialStatus,
    pub last_used_at: Option<Timestamp>,
    pub permissions: Vec<String>,
}

impl Resource for CredentialRecord {
    const TABLE: &'static str = "credentials";
    const REF_COLUMN: &'static str = "credential_ref";
    const PARENT_COLUMN: Option<&'static str> = Some("principal_ref");

    fn decode(row: &dyn Columns) -> Result<Self, StoreError> {
        from_row(row)
    }
}

fn from_row(row: &dyn Columns) -> Result<CredentialRecord, StoreError> {
    let expires_at = opt_ts(row, "expires_at")?;
    let status = state(row, "status", CredentialStatus::parse)?;
    Ok(CredentialRecord {
        credential_ref: Ref::from_trusted(text(row, "credential_ref")?),
        environment_ref: Ref::from_trusted(text(row, "environment_ref")?),
        principal_ref: Ref::from_trusted(text(row, "principal_ref")?),
        name: row.text("name")?,
        status,
        secret_hint: text(row, "secret_hint")?,
        created_at: Timestamp::from_millis(int(row, "created_at")?),
        updated_at: Timestamp::from_millis(int(row, "updated_at")?),
        expires_at,
        last_used_at: opt_ts(row, "last_used_at")?,
        revoked_at: opt_ts(row, "revoked_at")?,
        previous_secret_expires_at: opt_ts(row, "previous_secret_expires_at")?,
        version: int(row, "version")?,
    })
}

/// Issues an active credential of `principal_ref` whose secret is `secret`
/// (only its digest and hint are kept).
pub async fn issue(
    tx: &mut WriteTx,
    environment_ref: &Ref,
    principal_ref: &Ref,
    new: NewCredential<'_>,
    secret: &CredentialSecret,
) -> Result<CredentialRecord, StoreError> {
    let credential_ref = Ref::generate(Prefix::Credential);
    let (digest, hint) = (secret.digest(), secret.hint());
    let rows = tx
        .fetch(
            "INSERT INTO credentials (credential_ref, environment_ref, principal_ref, name, status, \
             secret_digest, secret_hint, created_at, updated_at, expires_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8, $9) RETURNING *",
            &[
                credential_ref.as_str().into(),
                environment_ref.as_str().into(),
                principal_ref.as_str().into(),
                new.name.into(),
                CredentialStatus::Active.as_str().into(),
                digest.as_str().into(),
                hint.as_str().into(),
                Timestamp::now().millis().into(),
                new.expires_at.map(Timestamp::millis).into(),
            ],
        )
        .await?;
    rows.first()
        .ok_or_else(|| StoreError::Corrupt("issuing a credential returned no row".into()))
        .and_then(|row| from_row(row))
}

/// Replaces the secret if the credential is still at `current.version`
/// (`Conflict` otherwise); the old one keeps working for `grace_seconds`.
pub async fn rotate(
    tx: &mut WriteTx,
    current: &CredentialRecord,
    secret: &CredentialSecret,
    grace_seconds: i64,
) -> Result<CredentialRecord, StoreError> {
    let now = Timestamp::now();
    let (digest, hint) = (secret.digest(), secret.hint());
    let rows = tx
        .fetch(
            "UPDATE credentials SET previous_secret_digest = secret_digest, \
             previous_secret_expires_at = $1, secret_digest = $2, secret_hint = $3, \
             updated_at = $4, version = version + 1 \
             WHERE credential_ref = $5 AND environment_ref = $6 AND version = $7 RETURNING *",
            &[
                now.plus_seconds(grace_seconds).millis().into(),
                digest.as_str().into(),
                hint.as_str().into(),
                now.millis().into(),
                current.credential_ref.as_str().into(),
                current.environment_ref.as_str().into(),
                current.version.into(),
            ],
        )
        .await?;
    rows.first()
        .ok_or(StoreError::Conflict)
        .and_then(|row| from_row(row))
}

/// Revokes the credential if it is still at `current.version` (`Conflict`
/// otherwise): every secret of it stops working at once.
pub async fn revoke(
    tx: &mut WriteTx,
    current: &CredentialRecord,
) -> Result<CredentialRecord, StoreError> {
    let rows = tx
        .fetch(
            "UPDATE credentials SET status = $1, revoked_at = $2, updated_at = $2, \
             previous_secret_expires_at = CASE WHEN previous_secret_expires_at > $2 \
             THEN $2 ELSE previous_secret_expires_at END, version = version + 1 \
             WHERE credential_ref = $3 AND environment_ref = $4 AND version = $5 RETURNING *",
            &[
                CredentialStatus::Revoked.as_str().into(),
                Timestamp::now().millis().into(),
                current.credential_ref.as_str().into(),
                current.environment_ref.as_str().into(),
                current.version.into(),
            ],
        )
        .await?;
    rows.first()
        .ok_or(StoreError::Conflict)
        .and_then(|row| from_row(row))
}

impl Admin<'_> {
    pub async fn credential(
        &self,
        environment_ref: &Ref,
        credential_ref: &Ref,
    ) -> Result<CredentialRecord, StoreError> {
        read::one(
            self.pool(),
            "SELECT * FROM credentials WHERE environment_ref = $1 AND credential_ref = $2",
            &[
                environment_ref.as_str().into(),
                credential_ref.as_str().into(),
            ],
            from_row,
        )
        .await
    }

    /// The account's credentials, newest first (not paged).
    pub async fn list_credentials(
        &self,
        environment_ref: &Ref,
        principal_ref: &Ref,
    ) -> Result<Vec<CredentialRecord>, StoreError> {
        self.0
            .list_all(Scope::under(environment_ref, principal_ref), &[])
            .await
    }

    /// Finds the credential whose current secret, or previous secret still
    /// in its grace period, has `digest`, with its principal and permissions.
    pub async fn authenticate(
        &self,
        digest: &str,
        now: Timestamp,
    ) -> Result<Option<AuthRecord>, StoreError> {
        let found = read::optional(
            self.pool(),
            "SELECT c.credential_ref, c.principal_ref, c.environment_ref, c.status, c.expires_at, \
             c.last_used_at, c.secret_digest, c.previous_secret_digest, \
             s.status AS principal_status, e.mode \
             FROM credentials c \
             JOIN service_accounts s ON s.principal_ref = c.principal_ref \
             JOIN environments e ON e.environment_ref = c.environment_ref \
             WHERE c.secret_digest = $1 \
                OR (c.previous_secret_digest = $1 AND c.previous_secret_expires_at > $2)",
            &[digest.into(), now.millis().into()],
            |row| {
                let current = text(row, "secret_digest")?;
                let previous = row.text("previous_secret_digest")?;
                let matches = domain::secret::digests_equal(&current, digest)
                    || previous.is_some_and(|p| domain::secret::digests_equal(&p, digest));
                if !matches {
                    return Ok(None);
                }
                Ok(Some(AuthRecord {
                    credential_ref: Ref::from_trusted(text(row, "credential_ref")?),
                    principal_ref: Ref::from_trusted(text(row, "principal_ref")?),
                    environment_ref: Ref::from_trusted(text(row, "environment_ref")?),
                    mode: state(row, "mode", Mode::parse)?,
                    principal_status: state(row, "principal_status", ServiceAccountStatus::parse)?,
                    credential_status: state(row, "status", CredentialStatus::parse)?
                        .effective(opt_ts(row, "expires_at")?, now),
                    last_used_at: opt_ts(row, "last_used_at")?,
                    // Read below, once the secret matched.
                    permissions: Vec::new(),
                }))
            },
        )
        .await?;
        let Some(mut auth) = found.flatten() else {
            return Ok(None);
        };
        auth.permissions = read::all(
            self.pool(),
            "SELECT permission_action FROM grants WHERE principal_ref = $1 AND status = $2",
            &[
                auth.principal_ref.as_str().into(),
                GrantStatus::Active.as_str().into(),
            ],
            |row| text(row, "permission_action"),
        )
        .await?;
        Ok(Some(auth))
    }

    /// Records use of a credential, on the writer: called while
    /// authenticating, before the request opens its transaction. Never call
    /// it while holding a `WriteTx` of this store: with SQLite it would
    /// wait for that transaction's connection. Does not bump the version:
    /// use is not a change a client must condition on.
    pub async fn touch_credential(
        &self,
        credential_ref: &Ref,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        self.0
            .write_alone(
                "UPDATE credentials SET last_used_at = $1 WHERE credential_ref = $2",
                &[now.millis().into(), credential_ref.as_str().into()],
            )
            .await?;
        Ok(())
    }
}
