//! Data profile grants.

use super::*;

pub(super) async fn data_profile_grants(app: TestApp) {
    let (e, created) = create_endpoint(&app, URL).await;
    let path = ep(&e, "/data_profile_grants");
    let revoke = ep(&e, "/data_profile_grants/revoke");
    assert!(items(&get(&app, &path).await).is_empty());
    post_if(&app, &revoke, "*", json!({"reason": "none yet"}))
        .await
        .expect_error(422, "semantic_error");

    let body = json!({"purpose": "support", "reason": "help desk",
        "data_classes": ["contact", "tax_id"], "custom_field_refs": [CUSTOM_FIELD]});
    let r = app.post(&path, body).send().await;
    r.expect(201);
    let g = r.data();
    assert_eq!(g["endpoint_ref"], e.as_str());
    assert_eq!(g["purpose"], "support");
    assert_eq!(g["data_classes"], json!(["contact", "tax_id"]));
    assert_eq!(g["custom_field_refs"], json!([CUSTOM_FIELD]));
    assert_eq!(g["status"], "active");
    is_ts(&g["created_at"]);
    assert!(g["revoked_at"].is_null());

    for (patch, field) in [
        (json!({"purpose": "marketing"}), "purpose"),
        (json!({"purpose": null}), "purpose"),
        (json!({"data_classes": ["biometrics"]}), "data_classes.0"),
        (
            json!({"data_classes": ["contact", "contact"]}),
            "data_classes.1",
        ),
        (json!({"data_classes": "contact"}), "data_classes"),
        (json!({"reason": ""}), "reason"),
        (json!({ "reason": "r".repeat(501) }), "reason"),
        (json!({"reason": null}), "reason"),
        (json!({"custom_field_refs": ["cf_"]}), "custom_field_refs.0"),
        (
            json!({"custom_field_refs": [CUSTOM_FIELD, CUSTOM_FIELD]}),
            "custom_field_refs.1",
        ),
        (json!({"extra": true}), "extra"),
    ] {
        let mut b = grant_body(&["contact"], &[]);
        for (k, v) in patch.as_object().unwrap() {
            if v.is_null() {
                b.as_object_mut().unwrap().remove(k);
            } else {
                b[k] = v.clone();
            }
        }
        invalid(&app.post(&path, b).send().await, field);
    }
    assert_eq!(items(&get(&app, &path).await).len(), 1);

    // Revoke: the endpoint's ETag (the grant moved it on).
    wants_current_tag(&app, &revoke, &created.etag()).await;
    for body in [
        json!({}),
        json!({"reason": ""}),
        json!({ "reason": "r".repeat(501) }),
    ] {
        invalid(&post_if(&app, &revoke, "*", body).await, "reason");
    }
    let current = etag_of(&app, &ep(&e, "")).await;
    assert_ne!(current, created.etag());
    let r = post_if(
        &app,
        &revoke,
        &current,
        json!({"reason": "no longer needed"}),
    )
    .await;
    r.expect(200);
    assert_eq!(r.data()["status"], "revoked");
    assert_eq!(r.data()["purpose"], "support");
    is_ts(&r.data()["revoked_at"]);
    post_if(&app, &revoke, "*", json!({"reason": "again"}))
        .await
        .expect_error(422, "semantic_error");

    // Every purpose is accepted; each new grant supersedes the previous.
    for purpose in [
        "fulfillment",
        "accounting",
        "support",
        "analytics",
        "fraud_prevention",
    ] {
        let mut b = grant_body(&["billing_address", "payment_instrument"], &[]);
        b["purpose"] = json!(purpose);
        app.post(&path, b).send().await.expect(201);
    }
    let history = items(&get(&app, &path).await);
    assert_eq!(history.len(), 6, "the list is the history");
    let active: Vec<&Value> = history.iter().filter(|g| g["status"] == "active").collect();
    assert_eq!(active.len(), 1);
    assert_eq!(active[0]["purpose"], "fraud_prevention");
    assert!(active[0]["revoked_at"].is_null());
    for g in history.iter().filter(|g| g["status"] != "active") {
        assert_eq!(g["status"], "revoked");
        is_ts(&g["revoked_at"]);
    }
    let times: Vec<String> = history.iter().map(|g| text(&g["created_at"])).collect();
    let mut sorted = times.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(times, sorted, "newest first");
}

pub(super) async fn grants_shape_and_redact_bodies(app: TestApp) {
    let e = endpoint(&app).await;
    let types = ["payment.succeeded", "checkout_session.completed"];
    let classified = |body: &Value, class: Option<&str>| -> Vec<String> {
        let version = body["payload"]["dto_version"].as_u64().unwrap() as u32;
        let ty = text(&body["payload"]["public_event_type"]);
        catalogue::data_classes(&ty, version)
            .into_iter()
            .filter(|(_, c)| class.is_none_or(|k| c.as_str() == k))
            .filter(|(path, _)| at(&body["payload"]["data"], path).is_some())
            .map(|(path, _)| path.to_owned())
            .collect()
    };

    // No grant: no classified field, no custom field value (a session's
    // `custom_fields` object is delivered empty); references and amounts
    // stay.
    let mut bare = Vec::new();
    for ty in types {
        let d = test_send(&app, &e, ty).await;
        assert_eq!(d["diagnostic"], true);
        let b = body_of(&app, &d).await;
        assert_eq!(b["body_status"], "available");
        assert_eq!(b["match_reasons"], json!([{"kind": "test_send"}]));
        assert_eq!(b["payload"]["public_event_type"], ty);
        assert_eq!(b["payload"]["dto_version"], d["dto_version"]);
        assert!(classified(&b, None).is_empty(), "{b}");
        let custom_fields = b["payload"]["data"].get("custom_fields");
        if ty == "checkout_session.completed" {
            assert_eq!(custom_fields, Some(&json!({})), "{b}");
        } else {
            assert!(custom_fields.is_none(), "{b}");
        }
        assert!(b["payload"]["data"]["buyer_ref"].is_string(), "{b}");
        assert_eq!(b["payload"]["data"]["buyer"], json!({}), "{b}");
        bare.push((d, b));
    }
    let paid = &bare[0].1["payload"]["data"];
    assert_eq!(bare[0].0["dto_version"], 2, "the newest version");
    assert_eq!(
        paid["amount"],
        json!({"currency": "EUR", "unit": "minor", "value": "1999"})
    );
    assert_eq!(paid["status"], "succeeded");
    is_ref(&paid["payment_intent_ref"], "pay_");
    assert!(paid.get("payment_method").is_none(), "{paid}");
    assert!(bare[1].1["payload"]["data"]["amount_total"].is_object());

    // A grant of `contact` and a custom field: contact, and only contact.
    app.post(
        &ep(&e, "/data_profile_grants"),
        grant_body(&["contact"], &[CUSTOM_FIELD]),
    )
    .send()
    .await
    .expect(201);
    let mut granted = Vec::new();
    for ty in types {
        let d = test_send(&app, &e, ty).await;
        let b = body_of(&app, &d).await;
        let contact = classified(&b, Some("contact"));
        assert_eq!(contact.len(), 2, "{b}");
        assert_eq!(classified(&b, None), contact, "other classes stay out: {b}");
        assert_eq!(b["payload"]["data"]["buyer"]["email"], "ada@example.com");
        granted.push(d);
    }
    // The grant's `cf_` reference names no field of this environment (the
    // catalogue example's config is not one of its configs): the example
    // session's custom field value stays out, its object stays in.
    let checkout = body_of(&app, &granted[1]).await;
    assert_eq!(
        checkout["payload"]["data"]["custom_fields"],
        json!({}),
        "{checkout}"
    );

    // Revoking redacts the bodies holding data no longer covered.
    let revoked = post_if(
        &app,
        &ep(&e, "/data_profile_grants/revoke"),
        &etag_of(&app, &ep(&e, "")).await,
        json!({"reason": "contract ended"}),
    )
    .await;
    revoked.expect(200);
    for d in &granted {
        let b = body_of(&app, d).await;
        assert_eq!(b["body_status"], "redacted", "{b}");
        assert!(b["payload"].is_null(), "{b}");
        assert_eq!(b["delivery_ref"], d["delivery_ref"]);
        assert_eq!(b["match_reasons"], json!([{"kind": "test_send"}]));
    }
    for (d, before) in &bare {
        assert_eq!(body_of(&app, d).await, *before, "nothing to redact");
    }

    // A new grant that still covers the data keeps the bodies; one that
    // does not redacts them, and the superseded grants read as revoked.
    let grants = ep(&e, "/data_profile_grants");
    app.post(&grants, grant_body(&["contact"], &[]))
        .send()
        .await
        .expect(201);
    let d = test_send(&app, &e, "payment.succeeded").await;
    assert_eq!(body_of(&app, &d).await["body_status"], "available");
    app.post(&grants, grant_body(&["contact", "payment_instrument"], &[]))
        .send()
        .await
        .expect(201);
    assert_eq!(body_of(&app, &d).await["body_status"], "available");
    app.post(&grants, grant_body(&["payment_instrument"], &[]))
        .send()
        .await
        .expect(201);
    let b = body_of(&app, &d).await;
    assert_eq!(b["body_status"], "redacted", "contact is no longer covered");
    assert!(b["payload"].is_null());
    let history = items(&get(&app, &grants).await);
    assert_eq!(history.len(), 4);
    let statuses: Vec<(Value, Value)> = history
        .iter()
        .map(|g| (g["data_classes"].clone(), g["status"].clone()))
        .collect();
    for (classes, status) in [
        (json!(["contact"]), "revoked"),
        (json!(["contact", "payment_instrument"]), "revoked"),
        (json!(["payment_instrument"]), "active"),
    ] {
        assert!(
            statuses.contains(&(classes.clone(), json!(status))),
            "{classes} {status}: {statuses:?}"
        );
    }
}

/// A grant revoked after a delivery was queued: its attempt carries none of
/// the data the grant covered.
pub(super) async fn grants_apply_at_the_time_of_the_attempt(app: TestApp) {
    let receiver = TestReceiver::start(Behaviour::Status(200)).await;
    let (e, _) = create_endpoint(&app, &receiver.url()).await;
    app.post(
        &ep(&e, "/data_profile_grants"),
        grant_body(&["contact"], &[]),
    )
    .send()
    .await
    .expect(201);
    let d = test_send(&app, &e, "payment.succeeded").await;
    let queued = body_of(&app, &d).await;
    assert_eq!(
        queued["payload"]["data"]["buyer"]["email"],
        "ada@example.com"
    );
    act(&app, &ep(&e, "/data_profile_grants/revoke"))
        .await
        .expect(200);
    dispatched(&app, &text(&d["delivery_ref"]), "succeeded").await;
    let sent = receiver.received()[0].json();
    assert_eq!(sent["event_ref"], d["event_ref"]);
    for (path, _) in catalogue::data_classes("payment.succeeded", 2) {
        assert!(at(&sent["data"], path).is_none(), "{path} was sent: {sent}");
    }
    assert_eq!(sent["data"]["buyer_ref"], "buy_7Rk2Wd9Lq4Zs");
    assert_eq!(sent["data"]["buyer"], json!({}));
    let view = body_of(&app, &d).await;
    assert!(
        view["payload"].is_null() || view["payload"] == sent,
        "the body view is null or the body as delivered: {view}"
    );
}
