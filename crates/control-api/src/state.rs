//! Shared state of the control API: the store and the settings it needs.

use crate::rate_limit::{RateLimiter, SharedBuckets};
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
    /// Requests per second per credential (bursts of twice as many); 0 is
    /// no limit.
    pub rate_limit: u32,
    pub webhooks: WebhookSettings,
    /// "Now" for the rules requests apply: credentials' expiry and
    /// secret versions' grace, delivery bodies' retention, the statuses
    /// reads show, the time refunds and redrive jobs are scheduled
    /// against. The wall clock, or a test's (`domain::ClockHand`). Rate
    /// limits, idempotency records, request logs, the catalogue's
    /// promotion windows and checkout sessions' expiry read the wall clock.
    pub clock: domain::Clock,
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
    /// An endpoint's `max_in_flight` when it sets none
    /// (`delivery.endpoint_max_in_flight`, contract 13.2): what the
    /// endpoint resource shows then.
    pub endpoint_max_in_flight: u32,
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
            endpoint_max_in_flight: webhook_shapes::endpoint::DEFAULT_MAX_IN_FLIGHT,
        }
    }
}

impl ApiSettings {
    pub fn new(webhooks: WebhookSettings) -> ApiSettings {
        ApiSettings {
            idempotency_retention: Duration::from_secs(24 * 3600),
            max_body_bytes: 1 << 20,
            rate_limit: 1000,
            webhooks,
            clock: domain::Clock::wall(),
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
    pub limiter: Arc<RateLimiter>,
}

impl AppState {
    pub fn new(store: Store, settings: ApiSettings) -> AppState {
        AppState {
            store,
            limiter: Arc::new(RateLimiter::new(settings.rate_limit)),
            settings: Arc::new(settings),
            probes: Arc::new(Vec::new()),
        }
    }

    /// Keeps the rate-limit buckets in `shared` (a fleet's Redis).
    pub fn with_shared_rate_limit(mut self, shared: SharedBuckets) -> AppState {
        self.limiter = Arc::new(RateLimiter::new(self.settings.rate_limit).with_shared(shared));
        self
    }

    /// Adds a service `/readyz` must find reachable.
    pub fn with_probe(mut self, name: &'static str, probe: Probe) -> AppState {
        Arc::make_mut(&mut self.probes).push((name, probe));
        self
    }
}
