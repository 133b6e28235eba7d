//! Permissions.

use super::*;

pub(super) async fn permissions(app: TestApp) {
    let s = sellable(&app, eur("1999"), None).await;
    let (_, reader) = app
        .principal_with(&["products:read_list", "promotion:read_plan"])
        .await;
    let r = app.get(PRODUCTS).auth(&reader).send().await;
    assert_eq!(items(&r).len(), 1);
    app.post(PRODUCTS, json!({"name": "x"}))
        .auth(&reader)
        .send()
        .await
        .expect_error(403, "forbidden");
    // Forbidden whatever the reference.
    for path in [at(PRODUCTS, &s.product, ""), at(PRODUCTS, NO_PRODUCT, "")] {
        app.get(&path)
            .auth(&reader)
            .send()
            .await
            .expect_error(403, "forbidden");
    }
    let body = promo(&[&s.offer], json!({"percent_off": 10}));
    let r = app.req("POST", PLAN).json(&body).auth(&reader).send().await;
    r.expect(200);
    let tag = r.etag();
    app.post(APPLY, body.clone())
        .if_match(&tag)
        .auth(&reader)
        .send()
        .await
        .expect_error(403, "forbidden");
    assert!(offer(&app, &s.offer).await["promotion_ref"].is_null());

    let (_, pricer) = app.principal_with(&["products:reprice"]).await;
    let r = app
        .post(
            &at(OFFERS, &s.offer, "/reprice"),
            json!({"amount": eur("2999"), "reason": "r"}),
        )
        .auth(&pricer)
        .send()
        .await;
    r.expect(200);
    app.post(&at(PRICES, &s.price, "/publish"), json!({}))
        .auth(&pricer)
        .send()
        .await
        .expect_error(403, "forbidden");
    // No credential at all.
    app.get(OFFERS)
        .no_auth()
        .send()
        .await
        .expect_error(401, "authentication_failed");
}
