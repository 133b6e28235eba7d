//! Webhook endpoints and their signing secret versions.
//!
//! The writes are functions of the caller's `WriteTx` (`create`,
//! `set_status`, `update_secret_versions`) and return the record as the
//! transaction sees it; the reads are `Webhooks` methods
//! (`store.webhooks()`) on the read pool.

use super::Webhooks;
use crate::db::codec::{opt_ts, state};
use crate::db::marks::Marks;
use crate::db::page::{Page, PageRequest};
use crate::db::read;
use crate::db::tx::single;
use crate::db::tx::{int, text, Arg, Columns, WriteTx};
use crate::dispatch::signals::signal_due;
use crate::resource::{Resource, Scope};
use crate::StoreError;
use domain::webhook::limits::{EndpointLimits, MaxInFlight, Pressure, Protection, RateLimit};
use domain::webhook::ordering::EndpointOrdering;
use domain::webhook::secret_version::{SecretVersion, SecretVersionStatus};
use domain::webhook::{DeliveryStatus, EndpointStatus};
use domain::{Prefix, Ref, Timestamp};

#[derive(Debug, Clone)]
pub struct EndpointRecord {
    pub endpoint_ref: Ref,
    pub environment_ref: Ref,
    pub url: String,
    pub description: Option<String>,
    pub status: EndpointStatus,
    pub url_immutable: bool,
    pub ordering: EndpointOrdering,
    /// Its limits, back-pressure and hold-off (contract 13.2).
    pub protection: Protection,
    /// Its failing health was announced (`webhook_endpoint.failing`) and
    /// no attempt has succeeded since.
    pub reported_failing: bool,
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

pub(crate) fn endpoint_from_row(row: &dyn Columns) -> Result<EndpointRecord, StoreError> {
    Ok(EndpointRecord {
        endpoint_ref: Ref::from_trusted(text(row, "endpoint_ref")?),
        environment_ref: Ref::from_trusted(text(row, "environment_ref")?),
        url: text(row, "url")?,
        description: row.text("description")?,
        status: state(row, "status", EndpointStatus::parse)?,
        url_immutable: int(row, "url_immutable")? != 0,
        ordering: state(row, "ordering", EndpointOrdering::parse)?,
        protection: protection_from_row(row)?,
        reported_failing: int(row, "reported_failing")? != 0,
        created_at: Timestamp::from_millis(int(row, "created_at")?),
        updated_at: Timestamp::from_millis(int(row, "updated_at")?),
        version: int(row, "version")?,
        secret_versions: Vec::new(),
    })
}

/// An endpoint's protection from its row (`rate_limit`, `max_in_flight`,
/// the pressure columns, `throttled_until`).
pub(crate) fn protection_from_row(row: &dyn Columns) -> Result<Protection, StoreError> {
    let corrupt = |what: &str| StoreError::Corrupt(format!("an endpoint's {what}"));
    let rate_limit = match row.int("rate_limit")? {
        Some(n) => Some(RateLimit::parse(n).map_err(|_| corrupt("rate_limit"))?),
        None => None,
    };
    let max_in_flight = match row.int("max_in_flight")? {
        Some(n) => Some(MaxInFlight::parse(n).map_err(|_| corrupt("max_in_flight"))?),
        None => None,
    };
    let pressure = match (
        row.int("pressure_base")?,
        row.int("pressure_rate")?,
        row.int("pressure_at")?,
    ) {
        (Some(base), Some(rate), Some(at)) => Some(
            Pressure::from_parts(base as u64, rate as u64, Timestamp::from_millis(at))
                .ok_or_else(|| corrupt("pressure"))?,
        ),
        _ => None,
    };
    Ok(Protection {
        limits: EndpointLimits {
            rate_limit,
            max_in_flight,
        },
        pressure,
        throttled_until: opt_ts(row, "throttled_until")?,
    })
}

/// The columns of an endpoint's own limits, as bound values.
fn limit_args(limits: &EndpointLimits) -> (Option<i64>, Option<i64>) {
    (
        limits.rate_limit.map(|r| i64::from(r.per_second())),
        limits.max_in_flight.map(|m| i64::from(m.get())),
    )
}

/// An endpoint's row without its secret versions: what the generic list
/// reads, before `Webhooks::attach_secret_versions`. Only this module
/// lists it, so no caller sees an endpoint without its versions.
struct Unversioned(EndpointRecord);

impl Resource for Unversioned {
    const TABLE: &'static str = "webhook_endpoints";
    const REF_COLUMN: &'static str = "endpoint_ref";
    const FILTERS: &'static [(&'static str, &'static str)] = &[("status", "status")];

    fn decode(row: &dyn Columns) -> Result<Self, StoreError> {
        endpoint_from_row(row).map(Unversioned)
    }
}

fn secret_from_row(row: &dyn Columns) -> Result<(String, StoredSecretVersion), StoreError> {
    Ok((
        text(row, "endpoint_ref")?,
        StoredSecretVersion {
            meta: SecretVersion {
                version: int(row, "version")? as u32,
                status: state(row, "status", SecretVersionStatus::parse)?,
                created_at: Timestamp::from_millis(int(row, "created_at")?),
                expires_at: opt_ts(row, "expires_at")?,
            },
            ciphertext: text(row, "secret_ciphertext")?,
            hint: text(row, "secret_hint")?,
        },
    ))
}

/// An endpoint's secret versions, oldest first.
const SECRET_VERSIONS: &str = "SELECT * FROM webhook_secret_versions \
     WHERE endpoint_ref = $1 AND environment_ref = $2 ORDER BY version";

/// Creates an endpoint with secret version 1 (active).
pub async fn create(
    tx: &mut WriteTx,
    environment_ref: &Ref,
    url: &str,
    description: Option<&str>,
    settings: (EndpointOrdering, EndpointLimits),
    secret: NewSecret,
) -> Result<EndpointRecord, StoreError> {
    let (ordering, limits) = settings;
    let now = Timestamp::now();
    let endpoint_ref = Ref::generate(Prefix::WebhookEndpoint);
    let (rate_limit, max_in_flight) = limit_args(&limits);
    let rows = tx
        .fetch(
            "INSERT INTO webhook_endpoints (endpoint_ref, environment_ref, url, description, \
             status, created_at, updated_at, ordering, rate_limit, max_in_flight) \
             VALUES ($1, $2, $3, $4, $5, $6, $6, $7, $8, $9) RETURNING *",
            &[
                endpoint_ref.as_str().into(),
                environment_ref.as_str().into(),
                url.into(),
                description.into(),
                EndpointStatus::Active.as_str().into(),
                now.millis().into(),
                ordering.as_str().into(),
                rate_limit.into(),
                max_in_flight.into(),
            ],
        )
        .await?;
    let mut endpoint = endpoint_from_row(single(&rows)?)?;
    let first = SecretVersion::initial(now);
    let rows = tx
        .fetch(
            "INSERT INTO webhook_secret_versions (endpoint_ref, environment_ref, version, status, \
             secret_ciphertext, secret_hint, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7) \
             RETURNING *",
            &[
                endpoint_ref.as_str().into(),
                environment_ref.as_str().into(),
                i64::from(first.version).into(),
                first.status.as_str().into(),
                (&secret.ciphertext).into(),
                (&secret.hint).into(),
                first.created_at.millis().into(),
            ],
        )
        .await?;
    endpoint
        .secret_versions
        .push(secret_from_row(single(&rows)?)?.1);
    Ok(endpoint)
}

/// Moves an endpoint to `status` if it is still at its read version.
/// Resuming releases its held deliveries (they become due; an ordered one
/// waits again, and those of them that may start are released).
pub async fn set_status(
    tx: &mut WriteTx,
    current: &EndpointRecord,
    status: EndpointStatus,
) -> Result<EndpointRecord, StoreError> {
    let now = Timestamp::now().millis();
    let rows = tx
        .fetch(
            "UPDATE webhook_endpoints SET status = $1, updated_at = $2, version = version + 1 \
             WHERE endpoint_ref = $3 AND version = $4 RETURNING *",
            &[
                status.as_str().into(),
                now.into(),
                current.endpoint_ref.as_str().into(),
                current.version.into(),
            ],
        )
        .await?;
    let row = rows.first().ok_or(StoreError::Conflict)?;
    if status == EndpointStatus::Active {
        tx.execute(
            "UPDATE webhook_deliveries SET status = $1, \
             next_attempt_at = CASE WHEN ordered_key IS NULL THEN $2 ELSE NULL END, \
             updated_at = $2, version = version + 1 WHERE endpoint_ref = $3 AND status = $4",
            &[
                DeliveryStatus::Pending.as_str().into(),
                now.into(),
                current.endpoint_ref.as_str().into(),
                DeliveryStatus::Held.as_str().into(),
            ],
        )
        .await?;
        crate::dispatch::ordering::release_endpoint(
            tx.inner(),
            &current.endpoint_ref,
            Timestamp::from_millis(now),
        )
        .await?;
        signal_due(tx).await?;
    }
    with_secret_versions(tx, endpoint_from_row(row)?).await
}

/// What `updateWebhookEndpoint` sets: the whole of the endpoint's
/// settings after the change.
#[derive(Debug, Clone)]
pub struct EndpointSettings {
    pub description: Option<String>,
    pub ordering: EndpointOrdering,
    pub limits: EndpointLimits,
}

/// Writes `settings` if the endpoint is still at its read version. An
/// endpoint that stops ordering (`per_key` to `none`) lets its waiting
/// deliveries go: they are due at once and no longer wait for their key,
/// and its failed deliveries no longer block one. One that starts
/// ordering orders the deliveries written from then on.
pub async fn update_settings(
    tx: &mut WriteTx,
    current: &EndpointRecord,
    settings: &EndpointSettings,
) -> Result<EndpointRecord, StoreError> {
    let now = Timestamp::now().millis();
    let (rate_limit, max_in_flight) = limit_args(&settings.limits);
    let rows = tx
        .fetch(
            "UPDATE webhook_endpoints SET description = $1, ordering = $2, rate_limit = $3, \
             max_in_flight = $4, updated_at = $5, version = version + 1 \
             WHERE endpoint_ref = $6 AND version = $7 RETURNING *",
            &[
                settings.description.as_deref().into(),
                settings.ordering.as_str().into(),
                rate_limit.into(),
                max_in_flight.into(),
                now.into(),
                current.endpoint_ref.as_str().into(),
                current.version.into(),
            ],
        )
        .await?;
    let row = rows.first().ok_or(StoreError::Conflict)?;
    if current.ordering == EndpointOrdering::PerKey && settings.ordering == EndpointOrdering::None {
        tx.execute(
            "UPDATE webhook_deliveries SET \
             next_attempt_at = CASE WHEN status = $1 AND next_attempt_at IS NULL \
             THEN $2 ELSE next_attempt_at END, \
             ordered_key = NULL, updated_at = $2, version = version + 1 \
             WHERE endpoint_ref = $3 AND ordered_key IS NOT NULL AND status <> $4",
            &[
                DeliveryStatus::Pending.as_str().into(),
                now.into(),
                current.endpoint_ref.as_str().into(),
                DeliveryStatus::Succeeded.as_str().into(),
            ],
        )
        .await?;
        signal_due(tx).await?;
    }
    with_secret_versions(tx, endpoint_from_row(row)?).await
}

/// Writes the new states of an endpoint's secret versions (and a new
/// version, if any) if the endpoint is still at its read version.
pub async fn update_secret_versions(
    tx: &mut WriteTx,
    current: &EndpointRecord,
    versions: &[SecretVersion],
    added: Option<(SecretVersion, NewSecret)>,
) -> Result<EndpointRecord, StoreError> {
    let now = Timestamp::now().millis();
    let rows = tx
        .fetch(
            "UPDATE webhook_endpoints SET updated_at = $1, version = version + 1 \
             WHERE endpoint_ref = $2 AND version = $3 RETURNING *",
            &[
                now.into(),
                current.endpoint_ref.as_str().into(),
                current.version.into(),
            ],
        )
        .await?;
    let row = rows.first().ok_or(StoreError::Conflict)?;
    for v in versions {
        tx.execute(
            "UPDATE webhook_secret_versions SET status = $1, expires_at = $2 \
             WHERE endpoint_ref = $3 AND version = $4",
            &[
                v.status.as_str().into(),
                v.expires_at.map(Timestamp::millis).into(),
                current.endpoint_ref.as_str().into(),
                i64::from(v.version).into(),
            ],
        )
        .await?;
    }
    if let Some((v, secret)) = added {
        tx.execute(
            "INSERT INTO webhook_secret_versions (endpoint_ref, environment_ref, version, status, \
             secret_ciphertext, secret_hint, created_at, expires_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            &[
                current.endpoint_ref.as_str().into(),
                current.environment_ref.as_str().into(),
                i64::from(v.version).into(),
                v.status.as_str().into(),
                (&secret.ciphertext).into(),
                (&secret.hint).into(),
                v.created_at.millis().into(),
                v.expires_at.map(Timestamp::millis).into(),
            ],
        )
        .await?;
    }
    with_secret_versions(tx, endpoint_from_row(row)?).await
}

/// `endpoint` with its secret versions as `tx` sees them.
pub(crate) async fn with_secret_versions(
    tx: &mut WriteTx,
    mut endpoint: EndpointRecord,
) -> Result<EndpointRecord, StoreError> {
    for row in tx
        .fetch(
            SECRET_VERSIONS,
            &[
                endpoint.endpoint_ref.as_str().into(),
                endpoint.environment_ref.as_str().into(),
            ],
        )
        .await?
    {
        endpoint.secret_versions.push(secret_from_row(&row)?.1);
    }
    Ok(endpoint)
}

impl Webhooks<'_> {
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
        let versions = read::all(
            self.pool(),
            SECRET_VERSIONS,
            &[
                endpoint_ref.as_str().into(),
                environment_ref.as_str().into(),
            ],
            |row| Ok(secret_from_row(row)?.1),
        )
        .await?;
        let mut endpoint = read::one(
            self.pool(),
            "SELECT * FROM webhook_endpoints WHERE environment_ref = $1 AND endpoint_ref = $2",
            &[
                environment_ref.as_str().into(),
                endpoint_ref.as_str().into(),
            ],
            endpoint_from_row,
        )
        .await?;
        endpoint.secret_versions = versions;
        Ok(endpoint)
    }

    /// A page of the environment's endpoints (of `status` when given),
    /// newest first: the generic list of their rows (`Unversioned`), then
    /// their secret versions in one read.
    pub async fn list_endpoints(
        &self,
        environment_ref: &Ref,
        status: Option<EndpointStatus>,
        page: &PageRequest,
    ) -> Result<Page<EndpointRecord>, StoreError> {
        let rows = self
            .0
            .list::<Unversioned>(
                Scope::environment(environment_ref),
                &[("status", status.map(|s| s.as_str().into()))],
                page,
            )
            .await?;
        let mut items: Vec<EndpointRecord> = rows.items.into_iter().map(|r| r.0).collect();
        self.attach_secret_versions(&mut items).await?;
        Ok(Page {
            items,
            has_more: rows.has_more,
        })
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
            Marks::new(self.0.backend()).list(endpoints.len())
        );
        let args: Vec<Arg> = endpoints
            .iter()
            .map(|e| e.endpoint_ref.as_str().into())
            .collect();
        for (endpoint_ref, version) in read::all(self.pool(), &sql, &args, secret_from_row).await? {
            if let Some(e) = endpoints
                .iter_mut()
                .find(|e| e.endpoint_ref.as_str() == endpoint_ref)
            {
                e.secret_versions.push(version);
            }
        }
        Ok(())
    }

    /// Every endpoint's reference and status (all environments), up to
    /// `limit`. Its attempts are not looked at here: a correlated
    /// `EXISTS` over `webhook_attempts` is planned as a sequential scan
    /// when a few endpoints hold most attempts, and then reads the whole
    /// table for each endpoint without one (`recent_attempt_outcomes_of`
    /// reads them by index, many endpoints per statement).
    pub async fn endpoint_statuses(
        &self,
        limit: u32,
    ) -> Result<Vec<(Ref, EndpointStatus)>, StoreError> {
        read::all(
            self.pool(),
            &format!(
                "SELECT endpoint_ref, status FROM webhook_endpoints ORDER BY endpoint_ref \
                 LIMIT {limit}"
            ),
            &[],
            |row| {
                let status = state(row, "status", EndpointStatus::parse)?;
                Ok((Ref::from_trusted(text(row, "endpoint_ref")?), status))
            },
        )
        .await
    }

    /// Version and status of each endpoint in `refs` (any environment).
    pub async fn endpoint_versions(&self, refs: &[&Ref]) -> Result<EndpointVersions, StoreError> {
        let gates = self.endpoint_gates(refs).await?;
        Ok(gates
            .into_iter()
            .map(|(r, g)| (r, (g.version, g.status)))
            .collect())
    }

    /// Version, status and protection of each endpoint in `refs` (any
    /// environment): what the claim loop reads once per claim.
    pub async fn endpoint_gates(&self, refs: &[&Ref]) -> Result<EndpointGates, StoreError> {
        if refs.is_empty() {
            return Ok(EndpointGates::new());
        }
        let sql = versions_query(self.0.backend(), refs.len());
        let args: Vec<Arg> = refs.iter().map(|r| r.as_str().into()).collect();
        let entries = read::all(self.pool(), &sql, &args, gate_entry).await?;
        Ok(entries.into_iter().collect())
    }
}

/// What the dispatcher's claim loop needs of an endpoint to start an
/// attempt: the version of its view, its status and its protection.
#[derive(Debug, Clone, Copy)]
pub struct EndpointGate {
    pub version: i64,
    pub status: EndpointStatus,
    pub protection: Protection,
}

/// Endpoint references to their gates.
pub type EndpointGates = std::collections::HashMap<String, EndpointGate>;

/// Endpoint references to their version and status.
pub type EndpointVersions = std::collections::HashMap<String, (i64, EndpointStatus)>;

fn gate_entry(row: &dyn Columns) -> Result<(String, EndpointGate), StoreError> {
    let (endpoint_ref, (version, status)) = version_entry(row)?;
    let gate = EndpointGate {
        version,
        status,
        protection: protection_from_row(row)?,
    };
    Ok((endpoint_ref, gate))
}

fn versions_query(backend: crate::Backend, n: usize) -> String {
    format!(
        "SELECT endpoint_ref, version, status, url_immutable, rate_limit, max_in_flight, \
         pressure_base, pressure_rate, pressure_at, throttled_until FROM webhook_endpoints \
         WHERE endpoint_ref IN ({})",
        Marks::new(backend).list(n)
    )
}

fn version_entry(row: &dyn Columns) -> Result<(String, (i64, EndpointStatus)), StoreError> {
    let status = state(row, "status", EndpointStatus::parse)?;
    Ok((text(row, "endpoint_ref")?, (int(row, "version")?, status)))
}

/// `Webhooks::endpoint_versions`, read inside `tx` (the fan-out plans in the
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
    let args: Vec<Arg> = refs.iter().map(|r| r.as_str().into()).collect();
    for row in tx
        .fetch(&versions_query(tx.backend(), refs.len()), &args)
        .await?
    {
        let (endpoint_ref, entry) = version_entry(&row)?;
        if int(&row, "url_immutable")? != 0 {
            fixed.insert(endpoint_ref.clone());
        }
        versions.insert(endpoint_ref, entry);
    }
    Ok((versions, fixed))
}
