//! Authentication by bearer credential and the caller it yields.

use crate::error::ApiError;
use crate::state::AppState;
use axum::http::{header, HeaderMap};
use domain::principal::GrantStatus;
use domain::principal::{CredentialStatus, Mode, ServiceAccountStatus};
use domain::secret::CredentialSecret;
use domain::Ref;
use store::StoreError;

/// How stale `last_used_at` may get before a request refreshes it; keeps
/// reads from turning into a write each.
const LAST_USED_RESOLUTION_MS: i64 = 60_000;

/// The authenticated principal of a request.
#[derive(Debug, Clone)]
pub struct Caller {
    pub principal_ref: Ref,
    pub credential_ref: Ref,
    pub environment_ref: Ref,
    pub mode: Mode,
    pub permissions: Vec<String>,
}

impl Caller {
    pub fn holds(&self, permission: &str) -> bool {
        self.permissions.iter().any(|p| p == permission)
    }
}

/// Resolves `Authorization: Bearer <secret>` to a caller. Every failure is
/// the same `authentication_failed`, so a client learns nothing about which
/// part was wrong.
pub async fn authenticate(state: &AppState, headers: &HeaderMap) -> Result<Caller, ApiError> {
    let store = &state.store;
    let mut presented = headers.get_all(header::AUTHORIZATION).iter();
    let (first, second) = (presented.next(), presented.next());
    if second.is_some() {
        // Two credentials on one request are ambiguous: refuse both.
        return Err(ApiError::AuthenticationFailed);
    }
    let secret = first
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .and_then(|s| CredentialSecret::parse(s.trim()))
        .ok_or(ApiError::AuthenticationFailed)?;
    let now = state.settings.clock.now();
    let record = store
        .admin()
        .authenticate(&secret.digest(), now)
        .await?
        .ok_or(ApiError::AuthenticationFailed)?;
    let usable = record.credential_status == CredentialStatus::Active
        && record.principal_status == ServiceAccountStatus::Active
        && record.mode == secret.mode();
    if !usable {
        return Err(ApiError::AuthenticationFailed);
    }
    let stale = record
        .last_used_at
        .is_none_or(|t| t.millis() < now.millis() - LAST_USED_RESOLUTION_MS);
    if stale {
        if let Err(e) = store
            .admin()
            .touch_credential(&record.credential_ref, now)
            .await
        {
            tracing::warn!(error = %e, "could not record credential use");
        }
    }
    Ok(Caller {
        principal_ref: record.principal_ref,
        credential_ref: record.credential_ref,
        environment_ref: record.environment_ref,
        mode: record.mode,
        permissions: record.permissions,
    })
}

/// The caller a session names (the operator console's, `console`): the
/// credential `credential_ref` of `environment_ref`, read afresh, with the
/// same rules as a bearer secret: a revoked or expired credential, or a
/// principal that is not active, is `authentication_failed`, so that a
/// session ends the moment its credential does. Its permissions are the
/// principal's active grants now.
pub async fn caller_of_credential(
    state: &AppState,
    environment_ref: &Ref,
    credential_ref: &Ref,
) -> Result<Caller, ApiError> {
    let admin = state.store.admin();
    let missing = |e: StoreError| match e {
        StoreError::NotFound => ApiError::AuthenticationFailed,
        e => e.into(),
    };
    let credential = admin
        .credential(environment_ref, credential_ref)
        .await
        .map_err(missing)?;
    if credential.status_at(state.settings.clock.now()) != CredentialStatus::Active {
        return Err(ApiError::AuthenticationFailed);
    }
    let account = admin
        .service_account(environment_ref, &credential.principal_ref)
        .await
        .map_err(missing)?;
    if account.status != ServiceAccountStatus::Active {
        return Err(ApiError::AuthenticationFailed);
    }
    let environment = admin.environment(environment_ref).await.map_err(missing)?;
    let permissions = admin
        .list_grants(environment_ref, &account.principal_ref)
        .await?
        .into_iter()
        .filter(|g| g.status == GrantStatus::Active)
        .map(|g| g.permission_action)
        .collect();
    let now = state.settings.clock.now();
    let stale = credential
        .last_used_at
        .is_none_or(|t| t.millis() < now.millis() - LAST_USED_RESOLUTION_MS);
    if stale {
        if let Err(e) = admin
            .touch_credential(&credential.credential_ref, now)
            .await
        {
            tracing::warn!(error = %e, "could not record credential use");
        }
    }
    Ok(Caller {
        principal_ref: account.principal_ref,
        credential_ref: credential.credential_ref,
        environment_ref: environment.environment_ref,
        mode: environment.mode,
        permissions,
    })
}
