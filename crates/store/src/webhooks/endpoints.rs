//! Webhook endpoints and their signing secret versions.

use super::placeholders;
use crate::db::tx::{int, text, Arg as ExecArg, Columns, WriteTx};
use crate::db::page::{fetch_page, Arg, Page, PageRequest};
use crate::admin::service_accounts::opt_ts;
use crate::{Store, StoreError};
use domain::webhook::secret_version::{SecretVersion, SecretVersionStatus};
use domain::webhook::{DeliveryStatus, EndpointStatus};
use domain::{Prefix, Ref, Timestamp};
use sqlx::Row;

#[derive(Debug, Clone)]
pub struct EndpointRecord {
    pub endpoint_ref: Ref,
    pub environment_ref: Ref,
    pub url: String,
    pub description: Option<String>,
    pub status: EndpointStatus,
    pub url_immutable: bool,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub version: i64,
    /// Oldest first.
    pub secret_versions: Vec<StoredSecretVersion>,
}

/// A secret version with its encrypted secret.
#[derive(Debug, Clone)]
pub struct StoredSecretVersion {
    pub meta: SecretVersion,
    pub ciphertext: String,
    pub hint: String,
}

/// A new secret, encrypted by the caller.
#[derive(Debug, Clone)]
pub struct NewSecret {
    pub ciphertext: String,
    pub hint: String,
}

fn endpoint_from_row(row: &sqlx::any::AnyRow) -> Result<EndpointRecord, StoreError> {
    let status: String = row.try_get("status")?;
    Ok(EndpointRecord {
        endpoint_ref: Ref::from_trusted(row.try_get("endpoint_ref")?),
        environment_ref: Ref::from_trusted(row.try_get("environment_ref")?),
        url: row.try_get("url")?,
        description: row.try_get("description")?,
        status: EndpointStatus::parse(&status).ok_or_else(|| StoreError::Corrupt(status))?,
        url_immutable: row.try_get::<i64, _>("url_immutable")? != 0,
        created_at: Timestamp::from_millis(row.try_get("created_at")?),
        updated_at: Timestamp::from_millis(row.try_get("updated_at")?),
        version: row.try_get("version")?,
        secret_versions: Vec::new(),
    })
}

fn secret_from_row(row: &sqlx::any::AnyRow) -> Result<(String, StoredSecretVersion), StoreError> {
    let status: String = row.try_get("status")?;
    Ok((
        row.try_get("endpoint_ref")?,
        StoredSecretVersion {
            meta: SecretVersion {
                version: row.try_get::<i64, _>("version")? as u32,
                status: SecretVersionStatus::parse(&status)
                    .ok_or_else(|| StoreError::Corrupt(status))?,
                created_at: Timestamp::from_millis(row.try_get("created_at")?),
                expires_at: opt_ts(row, "expires_at")?,
            },
            ciphertext: row.try_get("secret_ciphertext")?,
            hint: row.try_get("secret_hint")?,
        },
    ))
}

impl Store {
    /// Creates an endpoint with secret version 1 (active), in one transaction.
    pub async fn create_endpoint(
        &self,
        environment_ref: &Ref,
        url: &str,
        description: Option<&str>,
        secret: NewSecret,
    ) -> Result<EndpointRecord, StoreError> {
        let now = Timestamp::now().millis();
        let endpoint_ref = Ref::generate(Prefix::WebhookEndpoint);
        let mut tx = self.write_tx().await?;
        sqlx::query(
            "INSERT INTO webhook_endpoints (endpoint_ref, environment_ref, url, description, status, \
             created_at, updated_at) VALUES ($1, $2, $3, $4, 'active', $5, $5)",
        )
        .bind(endpoint_ref.as_str())
        .bind(environment_ref.as_str())
        .bind(url)
        .bind(description)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "INSERT INTO webhook_secret_versions (endpoint_ref, environment_ref, version, status, \
             secret_ciphertext, secret_hint, created_at) VALUES ($1, $2, 1, 'active', $3, $4, $5)",
        )
        .bind(endpoint_ref.as_str())
        .bind(environment_ref.as_str())
        .bind(&secret.ciphertext)
        .bind(&secret.hint)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        self.endpoint(environment_ref, &endpoint_ref).await
    }

    /// The endpoint with its secret versions. The versions are read before
    /// the row: every change of the versions bumps the row's version, so a
    /// change committed between the two reads shows as a newer row version,
    /// and a conditional write based on this record fails (412 or 409)
    /// rather than acting on a mixed view.
    pub async fn endpoint(
        &self,
        environment_ref: &Ref,
        endpoint_ref: &Ref,
    ) -> Result<EndpointRecord, StoreError> {
        let versions = sqlx::query(
            "SELECT * FROM webhook_secret_versions WHERE endpoint_ref = $1 AND environment_ref = $2 \
             ORDER BY version",
        )
        .bind(endpoint_ref.as_str())
        .bind(environment_ref.as_str())
        .fetch_all(self.pool())
        .await?;
        let row = sqlx::query(
            "SELECT * FROM webhook_endpoints WHERE environment_ref = $1 AND endpoint_ref = $2",
        )
        .bind(environment_ref.as_str())
        .bind(endpoint_ref.as_str())
        .fetch_one(self.pool())
        .await?;
        let mut endpoint = endpoint_from_row(&row)?;
        for v in &versions {
            endpoint.secret_versions.push(secret_from_row(v)?.1);
        }
        Ok(endpoint)
    }

    pub async fn list_endpoints(
        &self,
        environment_ref: &Ref,
        status: Option<EndpointStatus>,
        page: &PageRequest,
    ) -> Result<Page<EndpointRecord>, StoreError> {
        let args = vec![
            Arg::Text(environment_ref.to_string()),
            Arg::Text(status.map(|s| s.as_str()).unwrap_or("").to_owned()),
        ];
        let filter = "environment_ref = $1 AND ($2 = '' OR status = $2)";
        let mut page = fetch_page(
            self.pool(),
            "webhook_endpoints",
            "endpoint_ref",
            filter,
            args,
            page,
            endpoint_from_row,
        )
        .await?;
        self.attach_secret_versions(&mut page.items).await?;
        Ok(page)
    }

    async fn attach_secret_versions(
        &self,
        endpoints: &mut [EndpointRecord],
    ) -> Result<(), StoreError> {
        if endpoints.is_empty() {
            return Ok(());
        }
        let sql = format!(
            "SELECT * FROM webhook_secret_versions WHERE endpoint_ref IN ({}) ORDER BY version",
            placeholders(1, endpoints.len())
        );
        let mut q = sqlx::query(&sql);
        for e in endpoints.iter() {
            q = q.bind(e.endpoint_ref.as_str().to_owned());
        }
        for row in q.fetch_all(self.pool()).await? {
            let (endpoint_ref, version) = secret_from_row(&row)?;
            if let Some(e) = endpoints
                .iter_mut()
                .find(|e| e.endpoint_ref.as_str() == endpoint_ref)
            {
                e.secret_versions.push(version);
            }
        }
        Ok(())
    }

    /// Every endpoint's reference and status (all environments), up to `limit`.
    pub async fn endpoint_statuses(
        &self,
        limit: u32,
    ) -> Result<Vec<(Ref, EndpointStatus)>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT endpoint_ref, status FROM webhook_endpoints ORDER BY endpoint_ref LIMIT {limit}"
        ))
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|row| {
                let status: String = row.try_get("status")?;
                let status = EndpointStatus::parse(&status).ok_or(StoreError::Corrupt(status))?;
                Ok((Ref::from_trusted(row.try_get("endpoint_ref")?), status))
            })
            .collect()
    }

    /// Version and status of each endpoint in `refs` (any environment).
    pub async fn endpoint_versions(&self, refs: &[&Ref]) -> Result<EndpointVersions, StoreError> {
        if refs.is_empty() {
            return Ok(EndpointVersions::new());
        }
        let sql = versions_query(refs.len());
        let mut q = sqlx::query(&sql);
        for r in refs {
            q = q.bind(r.as_str().to_owned());
        }
        q.fetch_all(self.pool())
            .await?
            .iter()
            .map(version_entry)
            .collect()
    }

    /// Moves an endpoint to `status` if it is still at its read version.
    /// Resuming releases its held deliveries in the same transaction.
    pub async fn set_endpoint_status(
        &self,
        current: &EndpointRecord,
        status: EndpointStatus,
    ) -> Result<EndpointRecord, StoreError> {
        let now = Timestamp::now().millis();
        let mut tx = self.write_tx().await?;
        let done = sqlx::query(
            "UPDATE webhook_endpoints SET status = $1, updated_at = $2, version = version + 1 \
             WHERE endpoint_ref = $3 AND version = $4",
        )
        .bind(status.as_str())
        .bind(now)
        .bind(current.endpoint_ref.as_str())
        .bind(current.version)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() != 1 {
            return Err(StoreError::Conflict);
        }
        if status == EndpointStatus::Active {
            sqlx::query(
                "UPDATE webhook_deliveries SET status = $1, next_attempt_at = $2, updated_at = $2, \
                 version = version + 1 WHERE endpoint_ref = $3 AND status = $4",
            )
            .bind(DeliveryStatus::Pending.as_str())
            .bind(now)
            .bind(current.endpoint_ref.as_str())
            .bind(DeliveryStatus::Held.as_str())
            .execute(&mut *tx)
            .await?;
        }
        let mut tx = WriteTx::new(crate::db::tx::Conn::Sqlx(tx), self.backend(), Some(self.wake()));
        let resumed = status == EndpointStatus::Active;
        if resumed {
            tx.signal_due().await?;
        }
        tx.commit().await?;
        if resumed {
            self.due_signalled();
        }
        self.endpoint(&current.environment_ref, &current.endpoint_ref)
            .await
    }

    /// Writes the new states of an endpoint's secret versions (and a new
    /// version, if any) if the endpoint is still at its read version.
    pub async fn update_secret_versions(
        &self,
        current: &EndpointRecord,
        versions: &[SecretVersion],
        added: Option<(SecretVersion, NewSecret)>,
    ) -> Result<EndpointRecord, StoreError> {
        let now = Timestamp::now().millis();
        let mut tx = self.write_tx().await?;
        let done = sqlx::query(
            "UPDATE webhook_endpoints SET updated_at = $1, version = version + 1 \
             WHERE endpoint_ref = $2 AND version = $3",
        )
        .bind(now)
        .bind(current.endpoint_ref.as_str())
        .bind(current.version)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() != 1 {
            return Err(StoreError::Conflict);
        }
        for v in versions {
            sqlx::query(
                "UPDATE webhook_secret_versions SET status = $1, expires_at = $2 \
                 WHERE endpoint_ref = $3 AND version = $4",
            )
            .bind(v.status.as_str())
            .bind(v.expires_at.map(Timestamp::millis))
            .bind(current.endpoint_ref.as_str())
            .bind(v.version as i64)
            .execute(&mut *tx)
            .await?;
        }
        if let Some((v, secret)) = added {
            sqlx::query(
                "INSERT INTO webhook_secret_versions (endpoint_ref, environment_ref, version, status, \
                 secret_ciphertext, secret_hint, created_at, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            )
            .bind(current.endpoint_ref.as_str())
            .bind(current.environment_ref.as_str())
            .bind(v.version as i64)
            .bind(v.status.as_str())
            .bind(&secret.ciphertext)
            .bind(&secret.hint)
            .bind(v.created_at.millis())
            .bind(v.expires_at.map(Timestamp::millis))
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        self.endpoint(&current.environment_ref, &current.endpoint_ref)
            .await
    }
}

/// Endpoint references to their version and status.
pub type EndpointVersions = std::collections::HashMap<String, (i64, EndpointStatus)>;

fn versions_query(n: usize) -> String {
    format!(
        "SELECT endpoint_ref, version, status, url_immutable FROM webhook_endpoints \
         WHERE endpoint_ref IN ({})",
        placeholders(1, n)
    )
}

fn version_entry(row: &impl Columns) -> Result<(String, (i64, EndpointStatus)), StoreError> {
    let status = text(row, "status")?;
    let status = EndpointStatus::parse(&status).ok_or(StoreError::Corrupt(status))?;
    Ok((text(row, "endpoint_ref")?, (int(row, "version")?, status)))
}

/// `Store::endpoint_versions`, read inside `tx` (the fan-out plans in the
/// transaction that writes its deliveries), with the endpoints whose url
/// is already fixed (`url_immutable`: it never goes back, so a delivery
/// written in this transaction need not fix it again).
pub(crate) async fn endpoint_versions_in(
    tx: &mut WriteTx,
    refs: &[&Ref],
) -> Result<(EndpointVersions, std::collections::HashSet<String>), StoreError> {
    let mut versions = EndpointVersions::new();
    let mut fixed = std::collections::HashSet::new();
    if refs.is_empty() {
        return Ok((versions, fixed));
    }
    let args: Vec<ExecArg> = refs.iter().map(|r| r.as_str().into()).collect();
    for row in tx.fetch(&versions_query(refs.len()), &args).await? {
        let (endpoint_ref, entry) = version_entry(&row)?;
        if int(&row, "url_immutable")? != 0 {
            fixed.insert(endpoint_ref.clone());
        }
        versions.insert(endpoint_ref, entry);
    }
    Ok((versions, fixed))
}
