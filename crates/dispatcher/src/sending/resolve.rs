//! Name resolution of webhook destinations: what a host name stands for
//! ([`Lookup`]: the system resolver, or the answers a test scripts), which
//! of those addresses may be connected to ([`AddressPolicy`]), and the HTTP
//! client's resolver that puts the two together ([`GuardedResolver`]).
//!
//! The client asks its resolver for every new connection and never for a
//! pooled one, so an endpoint's name is judged by what it resolves to when
//! the dispatcher connects, however it resolved when the endpoint was
//! created or last reached: a name rebound to a private address (DNS
//! rebinding) is refused on the next connection. A pooled connection goes
//! on to the address it was admitted for. Forbidden addresses are dropped
//! from an answer; only an answer left empty refuses the connection, so an
//! answer mixing a public and a private address reaches the public one only.

use super::DestinationError;
use domain::webhook::url::forbidden_ip;
use futures::future::BoxFuture;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

/// Looks a host name up: the addresses it stands for now. Called for each
/// new connection with a name, never with an address literal.
pub trait Lookup: Send + Sync + 'static {
    fn lookup(&self, host: &str) -> BoxFuture<'static, io::Result<Vec<IpAddr>>>;
}

/// The system resolver (`getaddrinfo`, on the blocking pool).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemLookup;

impl Lookup for SystemLookup {
    fn lookup(&self, host: &str) -> BoxFuture<'static, io::Result<Vec<IpAddr>>> {
        let host = host.to_owned();
        Box::pin(async move {
            let found = tokio::net::lookup_host((host.as_str(), 0)).await?;
            Ok(found.map(|a| a.ip()).collect())
        })
    }
}

/// Which addresses a webhook may be sent to.
#[derive(Debug, Clone, Default)]
pub struct AddressPolicy {
    /// Every address, forbidden ones included (`delivery.allow_private_networks`).
    pub allow_private: bool,
    /// Forbidden addresses admitted all the same, one by one (tests, whose
    /// receivers all run on loopback, let one stand for a public address).
    pub admitted: Vec<IpAddr>,
}

impl AddressPolicy {
    /// Whether a connection to `ip` may be made.
    pub fn admits(&self, ip: IpAddr) -> bool {
        self.allow_private || !forbidden_ip(ip) || self.admitted.contains(&ip)
    }
}

/// The HTTP client's resolver: looks the name up and keeps the addresses
/// the policy admits; none left refuses the connection.
pub struct GuardedResolver {
    lookup: Arc<dyn Lookup>,
    policy: AddressPolicy,
}

impl GuardedResolver {
    pub fn new(lookup: Arc<dyn Lookup>, policy: AddressPolicy) -> GuardedResolver {
        GuardedResolver { lookup, policy }
    }
}

/// The addresses of `found` that `policy` admits, in their order; an error
/// when none is left.
fn admitted(policy: &AddressPolicy, found: Vec<IpAddr>) -> Result<Vec<IpAddr>, DestinationError> {
    if found.is_empty() {
        return Err(DestinationError::Unresolved("no address".to_owned()));
    }
    let allowed: Vec<IpAddr> = found.into_iter().filter(|ip| policy.admits(*ip)).collect();
    if allowed.is_empty() {
        return Err(DestinationError::ForbiddenAddresses);
    }
    Ok(allowed)
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let lookup = self.lookup.lookup(name.as_str());
        let policy = self.policy.clone();
        Box::pin(async move {
            let found = lookup
                .await
                .map_err(|e| DestinationError::Unresolved(e.to_string()))?;
            let allowed = admitted(&policy, found)?;
            // The port is the connector's to set.
            let addrs = allowed.into_iter().map(|ip| SocketAddr::new(ip, 0));
            Ok(Box::new(addrs) as Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    const PUBLIC: IpAddr = IpAddr::V4(Ipv4Addr::new(93, 184, 215, 14));
    const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
    const PRIVATE: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3));

    fn refusing() -> AddressPolicy {
        AddressPolicy::default()
    }

    #[test]
    fn forbidden_addresses_are_dropped_from_an_answer() {
        let kept = admitted(&refusing(), vec![LOOPBACK, PUBLIC, PRIVATE]).unwrap();
        assert_eq!(kept, vec![PUBLIC]);
    }

    #[test]
    fn an_answer_of_forbidden_addresses_only_is_refused() {
        let refused = admitted(&refusing(), vec![LOOPBACK, PRIVATE]).unwrap_err();
        assert!(matches!(refused, DestinationError::ForbiddenAddresses));
        // Never the addresses: an attempt record is the customer's to read,
        // and the service's resolver may know names of its own network.
        assert!(!refused.to_string().contains("127.0.0.1"));
    }

    #[test]
    fn an_empty_answer_is_unresolved() {
        let refused = admitted(&refusing(), vec![]).unwrap_err();
        assert!(matches!(refused, DestinationError::Unresolved(_)));
    }

    #[test]
    fn private_networks_allowed_admit_everything() {
        let policy = AddressPolicy {
            allow_private: true,
            admitted: vec![],
        };
        let kept = admitted(&policy, vec![LOOPBACK, PRIVATE]).unwrap();
        assert_eq!(kept, vec![LOOPBACK, PRIVATE]);
    }

    #[test]
    fn an_admitted_address_is_the_only_exception() {
        let policy = AddressPolicy {
            allow_private: false,
            admitted: vec![IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2))],
        };
        assert!(policy.admits(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2))));
        assert!(!policy.admits(LOOPBACK));
        assert!(!policy.admits(PRIVATE));
        assert!(policy.admits(PUBLIC));
    }
}
