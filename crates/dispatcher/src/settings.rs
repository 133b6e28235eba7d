//! Settings of the dispatcher, built from the `delivery` configuration.

use crate::sending::{Lookup, SystemLookup};
use domain::webhook::cipher::SecretCipher;
use domain::webhook::retry::RetrySchedule;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone)]
pub struct DispatchSettings {
    pub retry_schedule: RetrySchedule,
    /// Per-attempt time-out.
    pub timeout: Duration,
    pub allow_private_networks: bool,
    /// An endpoint failing for this long is disabled.
    pub disable_after: Duration,
    pub cipher: Arc<SecretCipher>,
    /// Names this process's leases.
    pub worker_id: String,
    /// Attempts in flight at once, over all endpoints.
    pub max_in_flight: usize,
    /// Attempts in flight at once to one endpoint from this process.
    pub max_in_flight_per_endpoint: usize,
    /// An endpoint's `max_in_flight` when it sets none
    /// (`delivery.endpoint_max_in_flight`, contract 13.2).
    pub endpoint_max_in_flight: u32,
    /// Deliveries leased per claim.
    pub claim_batch: u32,
    /// How often an idle worker looks for due work.
    pub poll_interval: Duration,
    /// How much longer than the time-out a lease lasts.
    pub lease_margin: Duration,
    /// How endpoint host names are looked up, for every new connection:
    /// the system resolver (`SystemLookup`); tests script the answers.
    pub lookup: Arc<dyn Lookup>,
    /// Forbidden addresses that are destinations all the same while
    /// `allow_private_networks` is off: none but in tests, where one
    /// loopback receiver stands for a public address.
    pub admitted_addresses: Vec<IpAddr>,
    /// "Now" for which secret versions sign (a retiring one's expiry):
    /// the wall clock, or a test's. Due times and leases stay on the wall
    /// clock, which every process of a fleet shares; only a driven round
    /// (`drive::Driven`, run by tests and tools) claims what is due by
    /// this clock's now.
    pub clock: domain::Clock,
    /// Makes the operational events (contract 13.4) of the changes the
    /// attempts' rules detect (`Announcer::new` with
    /// `endpoint_max_in_flight`).
    pub announce: Arc<dyn store::dispatch::operational::Announce>,
}

impl DispatchSettings {
    pub fn new(retry_schedule: RetrySchedule, cipher: SecretCipher) -> DispatchSettings {
        DispatchSettings {
            retry_schedule,
            timeout: Duration::from_secs(15),
            allow_private_networks: false,
            disable_after: Duration::from_secs(5 * 86_400),
            cipher: Arc::new(cipher),
            worker_id: format!(
                "dispatcher-{}-{:08x}",
                std::process::id(),
                rand::random::<u32>()
            ),
            max_in_flight: 512,
            max_in_flight_per_endpoint: 32,
            endpoint_max_in_flight: webhook_shapes::endpoint::DEFAULT_MAX_IN_FLIGHT,
            claim_batch: 256,
            poll_interval: Duration::from_millis(50),
            lease_margin: Duration::from_secs(10),
            lookup: Arc::new(SystemLookup),
            admitted_addresses: Vec::new(),
            clock: domain::Clock::wall(),
            announce: Arc::new(crate::announce::Announcer::new(
                webhook_shapes::endpoint::DEFAULT_MAX_IN_FLIGHT,
            )),
        }
    }

    /// A lease outlives the longest attempt by a margin, so only a dead
    /// worker's leases ever expire.
    pub fn lease(&self) -> Duration {
        self.timeout + self.lease_margin
    }
}
