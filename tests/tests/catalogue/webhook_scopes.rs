//! Webhook scopes.

use super::*;

pub(super) async fn webhook_scopes_name_existing_products(app: TestApp) {
    let (endpoint, _) = kit::create_endpoint(&app, "https://example.com/hooks").await;
    let path = format!("{ENDPOINTS}/{endpoint}/subscriptions");
    let sub = |scope_ref: &str| {
        json!({"public_event_type": "order.created", "scope_type": "product",
            "scope_ref": scope_ref, "dto_version": 1})
    };
    app.post(&path, sub(NO_PRODUCT))
        .send()
        .await
        .expect_error(404, "not_found");
    // A product of the live environment is unknown here.
    let r = app
        .post(PRODUCTS, json!({"name": "Live"}))
        .auth(&app.live.secret)
        .send()
        .await;
    r.expect(201);
    app.post(&path, sub(&text(&r.data()["product_ref"])))
        .send()
        .await
        .expect_error(404, "not_found");
    // A draft product of the environment is a scope.
    let product = text(&create_product(&app, "Scoped").await["product_ref"]);
    let r = app.post(&path, sub(&product)).send().await;
    r.expect(201);
    assert_eq!(r.data()["scope_type"], "product");
    assert_eq!(r.data()["scope_ref"], product.as_str());
    let listed = list(&app, &path).await;
    assert_eq!(listed.len(), 1, "the refused ones were not made");
    // Another type with a product scope.
    app.post(
        &path,
        json!({"public_event_type": "payment.succeeded", "scope_type": "product",
            "scope_ref": NO_PRODUCT, "dto_version": 2}),
    )
    .send()
    .await
    .expect_error(404, "not_found");
}
