//! References.

use super::*;

pub(super) async fn unknown_and_foreign_refs_are_not_found(app: TestApp) {
    let live = |method: &str, path: &str| app.anon(method, path).auth(&app.live.secret);
    let r = live("POST", ENDPOINTS)
        .idem(&unique_key())
        .json(&json!({ "url": URL }))
        .send()
        .await;
    r.expect(201);
    let foreign_ep = text(&r.data()["endpoint_ref"]);
    let r = live("POST", &ep(&foreign_ep, "/test_send"))
        .idem(&unique_key())
        .json(&json!({"public_event_type": "webhook.test"}))
        .send()
        .await;
    r.expect(201);
    let foreign_d = text(&r.data()["delivery_ref"]);
    live("GET", &dl(&foreign_d, "")).send().await.expect(200);

    let reason = json!({"reason": "r"});
    let endpoint_ops: Vec<(&str, &str, Value)> = vec![
        ("GET", "", Value::Null),
        ("GET", "/subscriptions", Value::Null),
        ("GET", "/data_profile_grants", Value::Null),
        ("GET", "/deliveries", Value::Null),
        ("GET", "/health", Value::Null),
        ("POST", "/pause", json!({})),
        ("POST", "/resume", json!({})),
        ("POST", "/secret/rotate", reason.clone()),
        ("POST", "/secret/confirm", reason.clone()),
        ("POST", "/secret/revoke", reason.clone()),
        (
            "POST",
            "/subscriptions",
            sub_body(&app, "payment.succeeded", 1),
        ),
        (
            "POST",
            "/data_profile_grants",
            grant_body(&["contact"], &[]),
        ),
        ("POST", "/data_profile_grants/revoke", reason.clone()),
        (
            "POST",
            "/test_send",
            json!({"public_event_type": "webhook.test"}),
        ),
    ];
    let unknown_ep = Ref::generate(Prefix::WebhookEndpoint).into_string();
    for e in [&foreign_ep, &unknown_ep] {
        for (method, tail, body) in &endpoint_ops {
            let mut call = app.req(method, &ep(e, tail));
            if *method == "POST" {
                // Existence is decided before the precondition's match.
                call = call.idem(&unique_key()).if_match("\"stale\"").json(body);
            }
            let r = call.send().await;
            assert_eq!(r.status, 404, "{method} {tail}: {}", r.text);
            r.expect_error(404, "not_found");
        }
    }
    let unknown_d = Ref::generate(Prefix::WebhookDelivery).into_string();
    for d in [&foreign_d, &unknown_d] {
        for tail in ["", "/body", "/attempts"] {
            app.get(&dl(d, tail))
                .send()
                .await
                .expect_error(404, "not_found");
        }
        post_if(&app, &dl(d, "/redrive"), "\"stale\"", reason.clone())
            .await
            .expect_error(404, "not_found");
    }
    let r = post_if(
        &app,
        BATCH,
        "*",
        json!({"delivery_refs": [foreign_d, unknown_d], "reason": "r"}),
    )
    .await;
    r.expect(200);
    let outcomes: Vec<&Value> = r.data()["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| &x["outcome"])
        .collect();
    assert_eq!(outcomes, vec!["not_found", "not_found"]);
    // The foreign endpoint is untouched and unlisted here.
    let still = live("GET", &ep(&foreign_ep, "")).send().await;
    assert_eq!(still.data()["status"], "active");
    assert_eq!(versions(still.data()), sv(&[(1, "active")]));
    assert!(!get(&app, ENDPOINTS).await.text.contains(&foreign_ep));

    // Malformed references are validation failures naming the parameter.
    for (path, field) in [
        (format!("{ENDPOINTS}/whep_short"), "endpoint_ref"),
        (
            format!("{ENDPOINTS}/whd_AAAAAAAAAAAA/health"),
            "endpoint_ref",
        ),
        (dl("whep_AAAAAAAAAAAA", ""), "delivery_ref"),
        (dl("whd_AAAAAAAAAAA!", "/body"), "delivery_ref"),
    ] {
        invalid(&app.get(&path).send().await, field);
    }
}
