//! Webhook endpoint URLs: what a destination may look like, and which
//! addresses are never a destination (contract section 9, "Endpoint").
//!
//! [`EndpointUrl::parse`] refuses literal IP hosts in forbidden ranges and
//! the `localhost` names; names are resolved, and each resolved address
//! checked with [`forbidden_ip`], by the sender at connect time.

use ::url::{Host, Url};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Longest accepted URL, in bytes.
pub const MAX_LEN: usize = 2048;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    #[error("must be at most {MAX_LEN} characters long")]
    TooLong,
    #[error("must be an absolute URL such as https://example.com/webhooks")]
    NotAbsolute,
    #[error("is not a valid URL: {0}")]
    Invalid(String),
    #[error("must use https, not {scheme}")]
    NotHttps { scheme: String },
    #[error("must use https: plain http is not allowed here")]
    HttpNotAllowed,
    #[error("must not contain a user name or password")]
    HasCredentials,
    #[error("must not contain a fragment (#...)")]
    HasFragment,
    #[error("must name a host")]
    NoHost,
    #[error("names a forbidden address (loopback, private, link-local, multicast or reserved)")]
    ForbiddenAddress,
}

/// A parsed, checked endpoint URL.
#[derive(Clone, PartialEq, Eq)]
pub struct EndpointUrl(Url);

impl EndpointUrl {
    /// Parses and checks `s`. `allow_http` admits plain `http`;
    /// `allow_private` admits forbidden addresses and `localhost`.
    pub fn parse(s: &str, allow_http: bool, allow_private: bool) -> Result<EndpointUrl, UrlError> {
        if s.len() > MAX_LEN {
            return Err(UrlError::TooLong);
        }
        let url = Url::parse(s).map_err(|e| match e {
            ::url::ParseError::RelativeUrlWithoutBase => UrlError::NotAbsolute,
            ::url::ParseError::EmptyHost => UrlError::NoHost,
            e => UrlError::Invalid(e.to_string()),
        })?;
        match url.scheme() {
            "https" => {}
            "http" if allow_http => {}
            "http" => return Err(UrlError::HttpNotAllowed),
            other => {
                return Err(UrlError::NotHttps {
                    scheme: other.to_owned(),
                })
            }
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(UrlError::HasCredentials);
        }
        if url.fragment().is_some() {
            return Err(UrlError::HasFragment);
        }
        let forbidden = match url.host() {
            None => return Err(UrlError::NoHost),
            Some(Host::Domain("")) => return Err(UrlError::NoHost),
            Some(Host::Domain(d)) => is_localhost(d),
            Some(Host::Ipv4(ip)) => forbidden_ip(IpAddr::V4(ip)),
            Some(Host::Ipv6(ip)) => forbidden_ip(IpAddr::V6(ip)),
        };
        if forbidden && !allow_private {
            return Err(UrlError::ForbiddenAddress);
        }
        Ok(EndpointUrl(url))
    }

    /// The URL in its normalised form.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    pub fn as_url(&self) -> &Url {
        &self.0
    }

    /// The host to resolve or connect to: a name, or an IP address (IPv6
    /// without its brackets).
    pub fn host(&self) -> &str {
        let h = self.0.host_str().unwrap_or_default();
        h.strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(h)
    }

    /// The port, the scheme's default when none is written.
    pub fn port(&self) -> u16 {
        self.0
            .port_or_known_default()
            .unwrap_or(if self.0.scheme() == "http" { 80 } else { 443 })
    }

    /// The literal IP address of the host, if it is one.
    pub fn ip(&self) -> Option<IpAddr> {
        match self.0.host()? {
            Host::Ipv4(ip) => Some(IpAddr::V4(ip)),
            Host::Ipv6(ip) => Some(IpAddr::V6(ip)),
            Host::Domain(_) => None,
        }
    }

    pub fn is_ip_literal(&self) -> bool {
        self.ip().is_some()
    }
}

impl fmt::Display for EndpointUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for EndpointUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EndpointUrl({})", self.as_str())
    }
}

/// `localhost` and its subdomains always resolve to loopback (RFC 6761).
fn is_localhost(domain: &str) -> bool {
    let d = domain.trim_end_matches('.').to_ascii_lowercase();
    d == "localhost" || d.ends_with(".localhost")
}

/// Whether `ip` is never a webhook destination: loopback, private (10/8,
/// 172.16/12, 192.168/16), link-local (169.254/16, fe80::/10), multicast,
/// unspecified, broadcast, 0.0.0.0/8, CGNAT 100.64/10, IETF protocol
/// assignments 192.0.0/24, benchmarking 198.18/15, reserved 240/4,
/// documentation ranges (192.0.2/24, 198.51.100/24, 203.0.113/24,
/// 2001:db8::/32), unique-local fc00::/7, site-local fec0::/10, discard
/// 100::/64 and Teredo 2001::/32. IPv6 forms that carry an IPv4 address
/// (mapped `::ffff:a.b.c.d`, compatible `::a.b.c.d`, translated
/// `::ffff:0:a.b.c.d`, NAT64 64:ff9b::/96, 6to4 2002::/16) are judged by
/// that address; local-use NAT64 64:ff9b:1::/48 is refused.
pub fn forbidden_ip(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => forbidden_v4(v4),
        IpAddr::V6(v6) => forbidden_v6(v6),
    }
}

fn in_v4(ip: u32, net: [u8; 4], bits: u32) -> bool {
    let mask = u32::MAX.checked_shl(32 - bits).unwrap_or(0);
    ip & mask == u32::from_be_bytes(net) & mask
}

const FORBIDDEN_V4: &[([u8; 4], u32)] = &[
    ([0, 0, 0, 0], 8),
    ([10, 0, 0, 0], 8),
    ([100, 64, 0, 0], 10),
    ([127, 0, 0, 0], 8),
    ([169, 254, 0, 0], 16),
    ([172, 16, 0, 0], 12),
    ([192, 0, 0, 0], 24),
    ([192, 0, 2, 0], 24),
    ([192, 88, 99, 0], 24),
    ([192, 168, 0, 0], 16),
    ([198, 18, 0, 0], 15),
    ([198, 51, 100, 0], 24),
    ([203, 0, 113, 0], 24),
    ([224, 0, 0, 0], 4),
    ([240, 0, 0, 0], 4),
];

fn forbidden_v4(ip: Ipv4Addr) -> bool {
    let n = u32::from(ip);
    FORBIDDEN_V4.iter().any(|(net, bits)| in_v4(n, *net, *bits))
}

fn in_v6(ip: u128, net: u128, bits: u32) -> bool {
    let mask = u128::MAX.checked_shl(128 - bits).unwrap_or(0);
    ip & mask == net & mask
}

const FORBIDDEN_V6: &[(u128, u32)] = &[
    (0x0100_0000_0000_0000_0000_0000_0000_0000, 64), // discard-only
    (0x0064_ff9b_0001_0000_0000_0000_0000_0000, 48), // local-use NAT64
    (0x2001_0000_0000_0000_0000_0000_0000_0000, 32), // Teredo
    (0x2001_0db8_0000_0000_0000_0000_0000_0000, 32), // documentation
    (0xfc00_0000_0000_0000_0000_0000_0000_0000, 7),  // unique local
    (0xfe80_0000_0000_0000_0000_0000_0000_0000, 10), // link-local
    (0xfec0_0000_0000_0000_0000_0000_0000_0000, 10), // site-local
    (0xff00_0000_0000_0000_0000_0000_0000_0000, 8),  // multicast
];

/// The IPv4 address an IPv6 address stands for, if it embeds one.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let n = u128::from(ip);
    let low32 = Ipv4Addr::from(n as u32);
    if n >> 32 == 0 // compatible ::a.b.c.d, and :: and ::1
        || n >> 32 == 0xffff // mapped ::ffff:a.b.c.d
        || n >> 32 == 0xffff_0000 // translated ::ffff:0:a.b.c.d
        || in_v6(n, 0x0064_ff9b << 96, 96)
    // NAT64
    {
        return Some(low32);
    }
    if in_v6(n, 0x2002 << 112, 16) {
        return Some(Ipv4Addr::from((n >> 80) as u32)); // 6to4
    }
    None
}

fn forbidden_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = embedded_v4(ip) {
        return forbidden_v4(v4);
    }
    let n = u128::from(ip);
    FORBIDDEN_V6.iter().any(|(net, bits)| in_v6(n, *net, *bits))
}

#[cfg(test)]
mod tests;
