use super::*;
use proptest::prelude::*;

fn strict(s: &str) -> Result<EndpointUrl, UrlError> {
    EndpointUrl::parse(s, false, false)
}

fn lax_http(s: &str) -> Result<EndpointUrl, UrlError> {
    EndpointUrl::parse(s, true, false)
}

#[test]
fn accepts_plain_https() {
    let u = strict("https://Hooks.Example.com/in?x=1").unwrap();
    assert_eq!(u.as_str(), "https://hooks.example.com/in?x=1");
    assert_eq!(
        (u.host(), u.port(), u.is_ip_literal()),
        ("hooks.example.com", 443, false)
    );
    let u = strict("https://example.com:8443/").unwrap();
    assert_eq!(u.port(), 8443);
    let u = lax_http("http://example.com/").unwrap();
    assert_eq!(u.port(), 80);
    let u = strict("https://8.8.8.8/").unwrap();
    assert!(u.is_ip_literal() && u.host() == "8.8.8.8");
    let u = strict("https://[2606:4700::1111]:444/").unwrap();
    assert_eq!((u.host(), u.port()), ("2606:4700::1111", 444));
}

#[test]
fn shape_errors() {
    assert_eq!(strict("/webhooks"), Err(UrlError::NotAbsolute));
    assert_eq!(strict("http://example.com/"), Err(UrlError::HttpNotAllowed));
    assert_eq!(
        strict("ftp://example.com/"),
        Err(UrlError::NotHttps {
            scheme: "ftp".into()
        })
    );
    assert_eq!(
        lax_http("ftp://example.com/"),
        Err(UrlError::NotHttps {
            scheme: "ftp".into()
        })
    );
    assert_eq!(
        strict("https://u:p@example.com/"),
        Err(UrlError::HasCredentials)
    );
    assert_eq!(
        strict("https://u@example.com/"),
        Err(UrlError::HasCredentials)
    );
    assert_eq!(
        strict("https://example.com/#top"),
        Err(UrlError::HasFragment)
    );
    assert_eq!(strict("https://"), Err(UrlError::NoHost));
    assert_eq!(strict("https://:443/x"), Err(UrlError::NoHost));
    assert!(matches!(
        strict("https://exa mple.com/"),
        Err(UrlError::Invalid(_))
    ));
    assert!(matches!(
        strict("mailto:a@example.com"),
        Err(UrlError::NotHttps { .. })
    ));
    let long = format!("https://example.com/{}", "a".repeat(MAX_LEN));
    assert_eq!(strict(&long), Err(UrlError::TooLong));
    assert!(strict(&long[..MAX_LEN]).is_ok());
}

#[test]
fn forbidden_literals() {
    for s in [
        "https://10.0.0.1/",
        "https://127.0.0.1/",
        "https://169.254.169.254/latest/meta-data",
        "https://[fe80::1]/",
        "https://[::1]/",
        "https://[::]/",
        "https://0.0.0.0/",
        "https://2130706433/",
        "https://0x7f.1/",
        "https://0177.0.0.1/",
        "https://127.1/",
        "https://[::ffff:127.0.0.1]/",
        "https://[::ffff:a9fe:a9fe]/",
        "https://[64:ff9b::a00:1]/",
        "https://[2002:c0a8:0101::1]/",
        "https://[fd00::1]/",
        "https://[ff02::1]/",
        "https://255.255.255.255/",
        "https://224.0.0.1/",
        "https://100.64.0.1/",
        "https://172.31.255.255/",
        "https://192.168.1.1/",
        "https://localhost/",
        "https://LocalHost./",
        "https://api.localhost:8080/",
    ] {
        assert_eq!(strict(s), Err(UrlError::ForbiddenAddress), "{s}");
        assert!(EndpointUrl::parse(s, false, true).is_ok(), "{s}");
    }
    assert_eq!(
        lax_http("http://[::ffff:127.0.0.1]/"),
        Err(UrlError::ForbiddenAddress)
    );
    assert_eq!(
        strict("http://[::ffff:127.0.0.1]/"),
        Err(UrlError::HttpNotAllowed)
    );
    let normalised = EndpointUrl::parse("https://0x7f.1/", false, true).unwrap();
    assert_eq!(normalised.host(), "127.0.0.1");
}

#[test]
fn forbidden_ip_ranges() {
    let ip = |s: &str| forbidden_ip(s.parse().unwrap());
    for bad in [
        "0.1.2.3",
        "10.255.0.1",
        "100.127.255.255",
        "172.16.0.1",
        "192.0.2.5",
        "198.18.0.1",
        "198.51.100.7",
        "203.0.113.9",
        "240.0.0.1",
        "::",
        "::1",
        "fe80::abcd",
        "febf::1",
        "fc00::1",
        "2001:db8::1",
        "::ffff:10.0.0.1",
        "::ffff:0:10.0.0.1",
        "::10.0.0.1",
        "64:ff9b::7f00:1",
        "64:ff9b:1::1",
        "2001::1",
        "100::1",
        "ff0e::1",
        "fec0::1",
    ] {
        assert!(ip(bad), "{bad}");
    }
    for good in [
        "8.8.8.8",
        "1.1.1.1",
        "100.63.255.255",
        "100.128.0.0",
        "172.32.0.1",
        "172.15.255.255",
        "192.169.0.1",
        "2606:4700::1111",
        "::ffff:8.8.8.8",
        "64:ff9b::808:808",
        "2002:0808:0808::1",
        "2a00:1450::1",
    ] {
        assert!(!ip(good), "{good}");
    }
}

proptest! {
    #[test]
    fn ipv6_forms_judged_by_their_ipv4(a in any::<u32>()) {
        let v4 = Ipv4Addr::from(a);
        let expected = forbidden_ip(IpAddr::V4(v4));
        prop_assert_eq!(forbidden_ip(IpAddr::V6(v4.to_ipv6_mapped())), expected);
        let nat64 = Ipv6Addr::from((0x0064_ff9b_u128 << 96) | a as u128);
        prop_assert_eq!(forbidden_ip(IpAddr::V6(nat64)), expected);
        let url = format!("https://{v4}/");
        prop_assert_eq!(strict(&url).is_err(), expected);
        let decimal = format!("https://{a}/");
        prop_assert_eq!(strict(&decimal).is_err(), expected);
    }

    #[test]
    fn private_v4_ranges_always_refused(a in any::<u32>()) {
        let v4 = Ipv4Addr::from(a);
        if v4.is_private() || v4.is_loopback() || v4.is_link_local() || v4.is_multicast()
            || v4.is_unspecified() || v4.is_broadcast() || v4.is_documentation() {
            prop_assert!(forbidden_ip(IpAddr::V4(v4)));
        }
    }

    #[test]
    fn parse_never_panics_and_accepts_only_https(s in "\\PC{0,80}") {
        if let Ok(u) = strict(&s) {
            prop_assert!(u.as_str().starts_with("https://"));
            prop_assert!(u.as_url().fragment().is_none());
            prop_assert!(!u.host().is_empty());
        }
    }
}
