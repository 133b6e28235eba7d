//! Shared state of the control API: the store and the settings it needs.

use domain::webhook::cipher::SecretCipher;
use futures::future::BoxFuture;
use std::sync::Arc;
use std::time::Duration;
use store::Store;

/// Settings the API reads on every request; built from configuration.
#[derive(Clone)]
pub struct ApiSettings {
    /// How long idempotency records are kept (at least 24 h by default).
    pub idempotency_retention: Duration,
    /// Largest accepted request body.
    pub max_body_bytes: usize,
    pub webhooks: WebhookSettings,
}

/// The `delivery.*` settings the control API applies.
#[derive(Clone)]
pub struct WebhookSettings {
    /// Plain `http` endpoint urls in live environments (always allowed in sandbox).
    pub allow_http: bool,
    /// Loopback and private destinations (tests and local quick starts).
    pub allow_private_networks: bool,
    /// Lifetime of a retiring secret version after a confirm.
    pub secret_grace: Duration,
    /// Stored bodies older than this read as `expired`.
    pub body_retention: Duration,
    /// Encrypts signing secrets at rest.
    pub cipher: Arc<SecretCipher>,
}

impl WebhookSettings {
    /// The contract's defaults, with the given cipher.
    pub fn with_cipher(cipher: SecretCipher) -> WebhookSettings {
        WebhookSettings {
            allow_http: false,
            allow_private_networks: false,
            secret_grace: Duration::from_secs(24 * 3600),
            body_retention: Duration::from_secs(30 * 86_400),
            cipher: Arc::new(cipher),
        }
    }
}

impl ApiSettings {
    pub fn new(webhooks: WebhookSettings) -> ApiSettings {
        ApiSettings {
            idempotency_retention: Duration::from_secs(24 * 3600),
            max_body_bytes: 1 << 20,
            webhooks,
        }
    }
}

/// A readiness check of a backing service: `Err` says what is wrong.
pub type Probe = Arc<dyn Fn() -> BoxFuture<'static, Result<(), String>> + Send + Sync>;

#[derive(Clone)]
pub struct AppState {
    pub store: Store,
    pub settings: Arc<ApiSettings>,
    /// Backing services `/readyz` checks besides the store (queue, scheduler).
    pub probes: Arc<Vec<(&'static str, Probe)>>,
}

impl AppState {
    pub fn new(store: Store, settings: ApiSettings) -> AppState {
        AppState {
            store,
            settings: Arc::new(settings),
            probes: Arc::new(Vec::new()),
        }
    }

    /// Adds a service `/readyz` must find reachable.
    pub fn with_probe(mut self, name: &'static str, probe: Probe) -> AppState {
        Arc::make_mut(&mut self.probes).push((name, probe));
        self
    }
}
