//! Subscriptions.

use super::*;

pub(super) async fn subscriptions(app: TestApp) {
    let e = endpoint(&app).await;
    let path = ep(&e, "/subscriptions");
    let empty = get(&app, &path).await;
    assert!(items(&empty).is_empty());
    assert_eq!(empty.data()["has_more"], false);
    assert!(empty.data()["next_cursor"].is_null());

    let r = app
        .post(&path, sub_body(&app, "payment.succeeded", 2))
        .send()
        .await;
    r.expect(201);
    let s = r.data();
    assert_eq!(s["endpoint_ref"], e.as_str());
    assert_eq!(s["public_event_type"], "payment.succeeded");
    assert_eq!(s["scope_type"], "environment");
    assert_eq!(s["scope_ref"], app.sandbox.environment_ref.as_str());
    assert_eq!(s["dto_version"], 2);
    assert_eq!(s["custom_field_refs"], json!([]));
    is_ts(&s["created_at"]);
    // A product scope names a product of the environment (contract 10.1).
    let unknown = json!({"public_event_type": "order.created", "scope_type": "product",
        "scope_ref": "prd_N5xP3cV8bT1m", "dto_version": 1});
    app.post(&path, unknown)
        .send()
        .await
        .expect_error(404, "not_found");
    // So does a buyer scope (`checkout.rs` subscribes to a paying buyer).
    let unknown = json!({"public_event_type": "dispute.opened", "scope_type": "buyer",
        "scope_ref": "buy_7Rk2Wd9Lq4Zs", "dto_version": 1});
    app.post(&path, unknown)
        .send()
        .await
        .expect_error(404, "not_found");
    let product = app
        .post("/api/v1/products", json!({"name": "Scoped"}))
        .send()
        .await;
    product.expect(201);
    let product_ref = text(&product.data()["product_ref"]);
    for body in [
        json!({"public_event_type": "order.created", "scope_type": "product",
            "scope_ref": product_ref, "dto_version": 1, "custom_field_refs": [CUSTOM_FIELD]}),
        json!({"public_event_type": "payout.paid", "scope_type": "beneficiary_business",
            "scope_ref": "biz_B8nM1qW4eR7t", "dto_version": 1}),
        // The same type in another scope is another subscription.
        json!({"public_event_type": "payment.succeeded", "scope_type": "product",
            "scope_ref": product_ref, "dto_version": 1}),
    ] {
        let r = app.post(&path, body.clone()).send().await;
        r.expect(201);
        assert_eq!(r.data()["scope_ref"], body["scope_ref"]);
        assert_eq!(
            r.data()["custom_field_refs"],
            body.get("custom_field_refs")
                .cloned()
                .unwrap_or_else(|| json!([]))
        );
    }
    // The same endpoint, type and scope twice, whatever the version.
    for v in [2, 1] {
        app.post(&path, sub_body(&app, "payment.succeeded", v))
            .send()
            .await
            .expect_error(422, "semantic_error");
    }

    let env = app.sandbox.environment_ref.clone();
    let with = |patch: Value| {
        let mut b = sub_body(&app, "payment.succeeded", 2);
        for (k, v) in patch.as_object().expect("patch") {
            if v.is_null() {
                b.as_object_mut().unwrap().remove(k);
            } else {
                b[k] = v.clone();
            }
        }
        b
    };
    for (patch, field) in [
        (
            json!({"public_event_type": "payment.exploded"}),
            "public_event_type",
        ),
        (json!({"public_event_type": 7}), "public_event_type"),
        (json!({"dto_version": 3}), "dto_version"),
        (json!({"dto_version": 0}), "dto_version"),
        (json!({"dto_version": "2"}), "dto_version"),
        (
            json!({"public_event_type": "refund.created", "dto_version": 2}),
            "dto_version",
        ),
        (json!({"scope_type": "galaxy"}), "scope_type"),
        (
            json!({"public_event_type": "payout.paid", "dto_version": 1,
            "scope_type": "product", "scope_ref": "prd_N5xP3cV8bT1m"}),
            "scope_type",
        ),
        (
            json!({"public_event_type": "dispute.opened", "dto_version": 1,
            "scope_type": "product", "scope_ref": "prd_N5xP3cV8bT1m"}),
            "scope_type",
        ),
        (
            json!({"scope_type": "product", "scope_ref": "prd_short"}),
            "scope_ref",
        ),
        (
            json!({"scope_type": "product", "scope_ref": "buy_7Rk2Wd9Lq4Zs"}),
            "scope_ref",
        ),
        (
            json!({"scope_type": "buyer", "scope_ref": env}),
            "scope_ref",
        ),
        (json!({"scope_ref": "prd_N5xP3cV8bT1m"}), "scope_ref"),
        (json!({"scope_ref": null}), "scope_ref"),
        (
            json!({"custom_field_refs": ["cf_bad!"]}),
            "custom_field_refs.0",
        ),
        (
            json!({"custom_field_refs": ["prd_N5xP3cV8bT1m"]}),
            "custom_field_refs.0",
        ),
        (
            json!({"custom_field_refs": [CUSTOM_FIELD, CUSTOM_FIELD]}),
            "custom_field_refs.1",
        ),
        (json!({"extra": 1}), "extra"),
    ] {
        let r = app.post(&path, with(patch.clone())).send().await;
        invalid(&r, field);
    }

    // The environment scope and three of the scopes above; refused ones
    // made nothing.
    let listed = items(&get(&app, &path).await);
    assert_eq!(listed.len(), 4);
    assert!(listed.iter().all(|s| s["endpoint_ref"] == e.as_str()));
    let times: Vec<String> = listed.iter().map(|s| text(&s["created_at"])).collect();
    let mut sorted = times.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(times, sorted, "newest first");
    invalid(&app.get(&format!("{path}?limit=5")).send().await, "limit");
}
