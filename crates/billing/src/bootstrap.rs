//! `billing admin bootstrap`: creates the `sandbox` and `live`
//! environments and their `admin` service accounts if missing, grants them
//! every permission, and issues a fresh credential for each, in one
//! transaction. Earlier credentials stay valid; an old secret is never
//! printed.

use control_api::operations::permissions;
use domain::principal::Mode;
use domain::secret::CredentialSecret;
use serde::Serialize;
use store::{admin, NewCredential, Store, StoreError};

#[derive(Debug, Serialize)]
pub struct BootstrapOutput {
    pub environments: Vec<BootstrappedEnvironment>,
}

#[derive(Debug, Serialize)]
pub struct BootstrappedEnvironment {
    pub environment_ref: String,
    pub mode: String,
    pub principal_ref: String,
    pub credential_ref: String,
    pub secret: String,
}

pub async fn bootstrap(store: &Store) -> Result<BootstrapOutput, StoreError> {
    let mut tx = store.begin().await?;
    let mut environments = Vec::new();
    for mode in [Mode::Sandbox, Mode::Live] {
        let env = admin::environments::ensure(&mut tx, mode).await?;
        let account = admin::service_accounts::ensure_admin(&mut tx, &env.environment_ref).await?;
        admin::grants::ensure(
            &mut tx,
            &env.environment_ref,
            &account.principal_ref,
            &permissions(),
        )
        .await?;
        let secret = CredentialSecret::generate(mode);
        let new = NewCredential {
            name: Some("bootstrap"),
            expires_at: None,
        };
        let credential = admin::credentials::issue(
            &mut tx,
            &env.environment_ref,
            &account.principal_ref,
            new,
            &secret,
        )
        .await?;
        environments.push(BootstrappedEnvironment {
            environment_ref: env.environment_ref.to_string(),
            mode: mode.as_str().to_owned(),
            principal_ref: account.principal_ref.to_string(),
            credential_ref: credential.credential_ref.to_string(),
            secret: secret.reveal().to_owned(),
        });
    }
    tx.commit().await?;
    Ok(BootstrapOutput { environments })
}
