//! Destinations.

use super::*;

/// A host name other than `localhost` that resolves to loopback here (from
/// `/etc/hosts`), else a public name known to resolve to 127.0.0.1.
pub(super) fn loopback_name() -> String {
    let hosts = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    hosts
        .lines()
        .find_map(|line| {
            let mut words = line.split('#').next()?.split_whitespace();
            let ip: IpAddr = words.next()?.parse().ok()?;
            if !ip.is_loopback() {
                return None;
            }
            words
                .find(|n| {
                    let n = n.to_ascii_lowercase();
                    n != "localhost" && !n.ends_with(".localhost")
                })
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "localtest.me".to_owned())
}

pub(super) async fn private_destinations_are_refused(app: TestApp) {
    let app = TestApp::spawn_with(app.backend, |s| s.webhooks.allow_private_networks = false).await;
    let name = format!("https://{}/hooks", loopback_name());
    for url in [
        "https://127.0.0.1/",
        "https://127.0.0.2:8443/hooks",
        "https://127.1/",
        "https://2130706433/",
        "https://[::1]/",
        "https://10.0.0.1/",
        "https://172.16.0.1/",
        "https://172.31.255.254/",
        "https://192.168.1.1/",
        "https://169.254.169.254/latest/meta-data",
        "https://[fe80::1]/",
        "https://[::ffff:127.0.0.1]/",
        "https://[::ffff:10.0.0.1]/",
        "https://[64:ff9b::7f00:1]/",
        "https://[fd00::1]/",
        "https://224.0.0.1/",
        "https://[ff02::1]/",
        "https://0.0.0.0/",
        "https://[::]/",
        "https://localhost/",
        "https://LOCALHOST./hooks",
        "https://api.localhost/",
        "http://127.0.0.1/",
        name.as_str(),
    ] {
        let r = app.post(ENDPOINTS, json!({ "url": url })).send().await;
        invalid(&r, "url");
        assert_eq!(r.fields(), vec!["url"], "{url}");
    }
    assert!(items(&get(&app, ENDPOINTS).await).is_empty());
    for url in [URL, "https://8.8.8.8/hooks", "https://172.32.0.1/hooks"] {
        create_endpoint(&app, url).await;
    }
    // http: sandbox yes, live no.
    create_endpoint(&app, "http://example.com/hooks").await;
    let live = |app: &TestApp, url: &str| {
        app.anon("POST", ENDPOINTS)
            .auth(&app.live.secret)
            .idem(&unique_key())
            .json(&json!({ "url": url }))
            .send()
    };
    invalid(&live(&app, "http://example.com/hooks").await, "url");
    invalid(&live(&app, "https://10.1.2.3/hooks").await, "url");
    live(&app, URL).await.expect(201);

    // `delivery.allow_http` admits plain http in live too.
    let app = TestApp::spawn_with(app.backend, |s| {
        s.webhooks.allow_private_networks = false;
        s.webhooks.allow_http = true;
    })
    .await;
    live(&app, "http://example.com/hooks").await.expect(201);
    invalid(&live(&app, "http://192.168.0.10/hooks").await, "url");
}
