//! Products.

use super::*;

pub(super) async fn products(app: TestApp) {
    let r = app.post(PRODUCTS, json!({"name": "Pro plan"})).send().await;
    r.expect(201);
    let tag = etag_matches(&r);
    let p = r.data().clone();
    has_fields(&p, PRODUCT_FIELDS);
    is_ref(&p["product_ref"], "prd_");
    assert_eq!(p["name"], "Pro plan");
    assert!(p["description"].is_null());
    assert_eq!(p["status"], "draft");
    is_ts(&p["created_at"]);
    is_ts(&p["updated_at"]);
    assert!(p["published_at"].is_null());
    let product = text(&p["product_ref"]);

    let got = get(&app, &at(PRODUCTS, &product, "")).await;
    assert_eq!(etag_matches(&got), tag);
    assert_eq!(*got.data(), p);

    let r = publish(&app, &at(PRODUCTS, &product, "/publish")).await;
    r.expect(200);
    let published = etag_matches(&r);
    assert_ne!(published, tag, "publishing changes the ETag");
    let d = r.data().clone();
    has_fields(&d, PRODUCT_FIELDS);
    assert_eq!(d["product_ref"], product.as_str());
    assert_eq!(d["name"], "Pro plan");
    assert_eq!(d["status"], "published");
    assert!(ts_of(&d["published_at"]) >= ts_of(&d["created_at"]));
    assert_eq!(d["created_at"], p["created_at"]);
    is_ts(&d["updated_at"]);
    let got = get(&app, &at(PRODUCTS, &product, "")).await;
    assert_eq!(got.etag(), published);
    assert_eq!(*got.data(), d);

    // A description, given or null.
    let r = app
        .post(
            PRODUCTS,
            json!({"name": "Team plan", "description": "For teams"}),
        )
        .send()
        .await;
    r.expect(201);
    assert_eq!(r.data()["description"], "For teams");
    let r = app
        .post(PRODUCTS, json!({"name": "Solo", "description": null}))
        .send()
        .await;
    r.expect(201);
    assert!(r.data()["description"].is_null());
}

/// docs/catalogue.md: publish takes `{}`, "an empty body or no body".
/// A POST body is a JSON object, `{}` where no field is needed (contract
/// 1): a publish without one is refused and changes nothing.
pub(super) async fn publish_needs_a_json_object(app: TestApp) {
    let product = text(&create_product(&app, "Solo").await["product_ref"]);
    let r = app
        .req("POST", &at(PRODUCTS, &product, "/publish"))
        .idem(&unique_key())
        .send()
        .await;
    invalid(&r, "body");
    let r = app.get(&at(PRODUCTS, &product, "")).send().await;
    r.expect(200);
    assert_eq!(r.data()["status"], "draft");
}

pub(super) async fn product_validation(app: TestApp) {
    for (body, field) in [
        (json!({}), "name"),
        (json!({"name": ""}), "name"),
        (json!({"name": "x".repeat(201)}), "name"),
        (json!({"name": 7}), "name"),
        (
            json!({"name": "ok", "description": "d".repeat(1001)}),
            "description",
        ),
        (json!({"name": "ok", "colour": "blue"}), "colour"),
    ] {
        let r = app.post(PRODUCTS, body.clone()).send().await;
        invalid(&r, field);
    }
    assert!(list(&app, PRODUCTS).await.is_empty(), "nothing was made");
    // The limits themselves are allowed.
    let r = app
        .post(
            PRODUCTS,
            json!({"name": "x".repeat(200), "description": "d".repeat(1000)}),
        )
        .send()
        .await;
    r.expect(201);
    // Lengths count characters, not bytes.
    let r = app
        .post(
            PRODUCTS,
            json!({"name": "é".repeat(200), "description": "ü".repeat(1000)}),
        )
        .send()
        .await;
    r.expect(201);
    assert_eq!(r.data()["name"], "é".repeat(200));
    // Without a key: idempotency_key_required.
    app.req("POST", PRODUCTS)
        .json(&json!({"name": "no key"}))
        .send()
        .await
        .expect_error(400, "idempotency_key_required");
}
