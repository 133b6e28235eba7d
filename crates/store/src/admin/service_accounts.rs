//! Service accounts: the principals that hold grants and credentials.
//!
//! Writes are functions of the caller's `WriteTx` and read their result
//! back through it; reads are `Admin` methods (`store.admin()`) on the
//! read pool.

use super::Admin;
use crate::db::codec::{opt_ts, state};
use crate::db::read;
use crate::db::tx::{int, single, text, Columns, WriteTx};
use crate::resource::{Resource, Scope};
use crate::StoreError;
use domain::principal::{CredentialStatus, GrantStatus, ServiceAccountStatus};
use domain::{Prefix, Ref, Timestamp};

/// The name of an environment's bootstrap account (at most one that is
/// not retired per environment, by a unique index).
const ADMIN_NAME: &str = "admin";

#[derive(Debug, Clone)]
pub struct ServiceAccountRecord {
    pub principal_ref: Ref,
    pub environment_ref: Ref,
    pub name: String,
    pub description: Option<String>,
    pub status: ServiceAccountStatus,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub suspended_at: Option<Timestamp>,
    pub retired_at: Option<Timestamp>,
    pub version: i64,
}

impl Resource for ServiceAccountRecord {
    const TABLE: &'static str = "service_accounts";
    const REF_COLUMN: &'static str = "principal_ref";

    fn decode(row: &dyn Columns) -> Result<Self, StoreError> {
        from_row(row)
    }
}

fn from_row(row: &dyn Columns) -> Result<ServiceAccountRecord, StoreError> {
    Ok(ServiceAccountRecord {
        principal_ref: Ref::from_trusted(text(row, "principal_ref")?),
        environment_ref: Ref::from_trusted(text(row, "environment_ref")?),
        name: text(row, "name")?,
        description: row.text("description")?,
        status: state(row, "status", ServiceAccountStatus::parse)?,
        created_at: Timestamp::from_millis(int(row, "created_at")?),
        updated_at: Timestamp::from_millis(int(row, "updated_at")?),
        suspended_at: opt_ts(row, "suspended_at")?,
        retired_at: opt_ts(row, "retired_at")?,
        version: int(row, "version")?,
    })
}

/// Creates an active account. `Duplicate` when `name` is `admin` and the
/// environment already has a bootstrap account.
pub async fn create(
    tx: &mut WriteTx,
    environment_ref: &Ref,
    name: &str,
    description: Option<&str>,
) -> Result<ServiceAccountRecord, StoreError> {
    let principal_ref = Ref::generate(Prefix::ServiceAccount);
    let rows = tx
        .fetch(
            "INSERT INTO service_accounts (principal_ref, environment_ref, name, description, \
             status, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $6) RETURNING *",
            &[
                principal_ref.as_str().into(),
                environment_ref.as_str().into(),
                name.into(),
                description.into(),
                ServiceAccountStatus::Active.as_str().into(),
                Timestamp::now().millis().into(),
            ],
        )
        .await?;
    from_row(single(&rows)?)
}

/// The bootstrap account `admin` of an environment: the one that is not
/// retired, resumed if suspended, created when missing (bootstrap is the
/// way back in when every administrator is locked out).
pub async fn ensure_admin(
    tx: &mut WriteTx,
    environment_ref: &Ref,
) -> Result<ServiceAccountRecord, StoreError> {
    let existing = tx
        .fetch(
            "SELECT * FROM service_accounts WHERE environment_ref = $1 AND name = $2 \
             AND status <> $3",
            &[
                environment_ref.as_str().into(),
                ADMIN_NAME.into(),
                ServiceAccountStatus::Retired.as_str().into(),
            ],
        )
        .await?;
    match existing.first().map(|row| from_row(row)).transpose()? {
        Some(admin) if admin.status == ServiceAccountStatus::Suspended => {
            set_status(tx, &admin, ServiceAccountStatus::Active).await
        }
        Some(admin) => Ok(admin),
        None => {
            // A concurrent bootstrap may create it first: the insert then
            // does nothing (a unique violation would end a PostgreSQL
            // transaction) and the account is read again.
            let created = tx
                .fetch(
                    "INSERT INTO service_accounts (principal_ref, environment_ref, name, \
                     description, status, created_at, updated_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $6) ON CONFLICT DO NOTHING RETURNING *",
                    &[
                        Ref::generate(Prefix::ServiceAccount).as_str().into(),
                        environment_ref.as_str().into(),
                        ADMIN_NAME.into(),
                        "bootstrap administrator".into(),
                        ServiceAccountStatus::Active.as_str().into(),
                        Timestamp::now().millis().into(),
                    ],
                )
                .await?;
            match created.first() {
                Some(row) => from_row(row),
                None => Box::pin(ensure_admin(tx, environment_ref)).await,
            }
        }
    }
}

/// Moves an account to `status` if it is still at `current.version`
/// (`Conflict` otherwise). Retiring also revokes every credential and
/// grant of the account, in the same transaction.
pub async fn set_status(
    tx: &mut WriteTx,
    current: &ServiceAccountRecord,
    status: ServiceAccountStatus,
) -> Result<ServiceAccountRecord, StoreError> {
    let now = Timestamp::now().millis();
    let (suspended_at, retired_at) = match status {
        ServiceAccountStatus::Suspended => (Some(now), current.retired_at.map(|t| t.millis())),
        ServiceAccountStatus::Active => (None, None),
        ServiceAccountStatus::Retired => (current.suspended_at.map(|t| t.millis()), Some(now)),
    };
    let rows = tx
        .fetch(
            "UPDATE service_accounts SET status = $1, suspended_at = $2, retired_at = $3, \
             updated_at = $4, version = version + 1 \
             WHERE principal_ref = $5 AND environment_ref = $6 AND version = $7 RETURNING *",
            &[
                status.as_str().into(),
                suspended_at.into(),
                retired_at.into(),
                now.into(),
                current.principal_ref.as_str().into(),
                current.environment_ref.as_str().into(),
                current.version.into(),
            ],
        )
        .await?;
    let account = rows
        .first()
        .ok_or(StoreError::Conflict)
        .and_then(|row| from_row(row))?;
    if status == ServiceAccountStatus::Retired {
        tx.execute(
            "UPDATE credentials SET status = $1, revoked_at = $2, updated_at = $2, \
             version = version + 1 WHERE principal_ref = $3 AND status = $4",
            &[
                CredentialStatus::Revoked.as_str().into(),
                now.into(),
                current.principal_ref.as_str().into(),
                CredentialStatus::Active.as_str().into(),
            ],
        )
        .await?;
        tx.execute(
            "UPDATE grants SET status = $1, revoked_at = $2 \
             WHERE principal_ref = $3 AND status = $4",
            &[
                GrantStatus::Revoked.as_str().into(),
                now.into(),
                current.principal_ref.as_str().into(),
                GrantStatus::Active.as_str().into(),
            ],
        )
        .await?;
    }
    Ok(account)
}

/// Bumps an account's version inside `tx` if it is still at
/// `expected_version` (any version when `None`; `Conflict` otherwise):
/// grant changes are changes of the account.
pub(crate) async fn bump(
    tx: &mut WriteTx,
    principal_ref: &Ref,
    expected_version: Option<i64>,
    now: i64,
) -> Result<(), StoreError> {
    let changed = tx
        .execute(
            "UPDATE service_accounts SET version = version + 1, updated_at = $1 \
             WHERE principal_ref = $2 AND ($3 < 0 OR version = $3)",
            &[
                now.into(),
                principal_ref.as_str().into(),
                expected_version.unwrap_or(-1).into(),
            ],
        )
        .await?;
    if changed == 1 {
        Ok(())
    } else {
        Err(StoreError::Conflict)
    }
}

impl Admin<'_> {
    pub async fn service_account(
        &self,
        environment_ref: &Ref,
        principal_ref: &Ref,
    ) -> Result<ServiceAccountRecord, StoreError> {
        read::one(
            self.pool(),
            "SELECT * FROM service_accounts WHERE environment_ref = $1 AND principal_ref = $2",
            &[
                environment_ref.as_str().into(),
                principal_ref.as_str().into(),
            ],
            from_row,
        )
        .await
    }

    /// The environment's service accounts, newest first (not paged).
    pub async fn list_service_accounts(
        &self,
        environment_ref: &Ref,
    ) -> Result<Vec<ServiceAccountRecord>, StoreError> {
        self.0
            .list_all(Scope::environment(environment_ref), &[])
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin::{credentials, environments, grants};
    use crate::Store;
    use domain::principal::Mode;
    use domain::secret::CredentialSecret;

    /// A migrated store in a fresh SQLite file.
    async fn store() -> (Store, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!(
            "store-admin-{}-{}",
            std::process::id(),
            Ref::generate(Prefix::ServiceAccount)
        ));
        let store = Store::connect(&format!("sqlite://{}/billing.db", dir.display()))
            .await
            .unwrap();
        store.migrate().await.unwrap();
        (store, dir)
    }

    #[tokio::test]
    async fn admin_writes_read_back_through_their_transaction_and_commit_together() {
        let (store, dir) = store().await;
        let mut tx = store.begin().await.unwrap();
        let env = environments::ensure(&mut tx, Mode::Sandbox).await.unwrap();
        let again = environments::ensure(&mut tx, Mode::Sandbox).await.unwrap();
        assert_eq!(env.environment_ref, again.environment_ref);
        let env = env.environment_ref;

        let admin = ensure_admin(&mut tx, &env).await.unwrap();
        assert_eq!(
            ensure_admin(&mut tx, &env).await.unwrap().principal_ref,
            admin.principal_ref
        );
        assert!(matches!(
            create(&mut tx, &env, ADMIN_NAME, None).await,
            Err(StoreError::Duplicate)
        ));
        let suspended = set_status(&mut tx, &admin, ServiceAccountStatus::Suspended)
            .await
            .unwrap();
        assert_eq!(suspended.version, admin.version + 1);
        let resumed = ensure_admin(&mut tx, &env).await.unwrap();
        assert_eq!(resumed.status, ServiceAccountStatus::Active);
        assert!(resumed.suspended_at.is_none());

        let sa = create(&mut tx, &env, "ops", Some("operators"))
            .await
            .unwrap();
        assert_eq!(sa.status, ServiceAccountStatus::Active);
        assert_eq!(
            grants::ensure(&mut tx, &env, &sa.principal_ref, &["a:b", "c:d"])
                .await
                .unwrap(),
            2
        );
        assert_eq!(
            grants::ensure(&mut tx, &env, &sa.principal_ref, &["a:b"])
                .await
                .unwrap(),
            0
        );
        let secret = CredentialSecret::generate(Mode::Sandbox);
        let new = credentials::NewCredential {
            name: Some("ci"),
            expires_at: None,
        };
        let credential = credentials::issue(&mut tx, &env, &sa.principal_ref, new, &secret)
            .await
            .unwrap();
        let rotated = credentials::rotate(
            &mut tx,
            &credential,
            &CredentialSecret::generate(Mode::Sandbox),
            60,
        )
        .await
        .unwrap();
        assert!(matches!(
            credentials::rotate(&mut tx, &credential, &secret, 60).await,
            Err(StoreError::Conflict)
        ));
        assert!(rotated.previous_secret_expires_at.is_some());

        // Uncommitted: the pool does not see it.
        assert!(matches!(
            store.admin().service_account(&env, &sa.principal_ref).await,
            Err(StoreError::NotFound)
        ));
        let sa = read_in_tx(&mut tx, &sa.principal_ref).await;
        assert!(matches!(
            grants::revoke(&mut tx, &sa.principal_ref, "a:b", sa.version - 1).await,
            Err(StoreError::Conflict)
        ));
        let revoked = grants::revoke(&mut tx, &sa.principal_ref, "a:b", sa.version)
            .await
            .unwrap();
        assert_eq!(revoked.status, GrantStatus::Revoked);
        let sa = read_in_tx(&mut tx, &sa.principal_ref).await;
        let retired = set_status(&mut tx, &sa, ServiceAccountStatus::Retired)
            .await
            .unwrap();
        assert!(retired.retired_at.is_some());
        tx.commit().await.unwrap();

        let grants = store
            .admin()
            .list_grants(&env, &sa.principal_ref)
            .await
            .unwrap();
        assert!(grants.iter().all(|g| g.status == GrantStatus::Revoked));
        let credential = store
            .admin()
            .credential(&env, &credential.credential_ref)
            .await
            .unwrap();
        assert_eq!(credential.status, CredentialStatus::Revoked);
        let auth = store
            .admin()
            .authenticate(&secret.digest(), Timestamp::now())
            .await
            .unwrap()
            .expect("the previous secret is still in its grace period");
        assert_eq!(auth.credential_status, CredentialStatus::Revoked);
        assert_eq!(auth.principal_status, ServiceAccountStatus::Retired);
        store.close().await;
        let _ = std::fs::remove_dir_all(dir);
    }

    async fn read_in_tx(tx: &mut WriteTx, principal_ref: &Ref) -> ServiceAccountRecord {
        let rows = tx
            .fetch(
                "SELECT * FROM service_accounts WHERE principal_ref = $1",
                &[principal_ref.as_str().into()],
            )
            .await
            .unwrap();
        from_row(&rows[0]).unwrap()
    }
}
