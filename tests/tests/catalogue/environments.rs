//! Environments.

use super::*;

pub(super) async fn environments_are_isolated(app: TestApp) {
    let s = sellable(&app, eur("1999"), None).await;
    let draft_price = create_price(&app, &s.product, eur("5"), None).await;
    let cfg = config(&app, vec![line(&s.offer, 1)]).await;
    let live = app.live.secret.clone();
    let lget = |path: String| {
        let call = app.get(&path).auth(&live);
        async move { call.send().await }
    };
    let lpost = |path: String, body: Value| {
        let call = app.post(&path, body).auth(&live);
        async move { call.send().await }
    };

    for path in [
        at(PRODUCTS, &s.product, ""),
        at(PRICES, &s.price, ""),
        at(OFFERS, &s.offer, ""),
        at(CONFIGS, &cfg, ""),
    ] {
        lget(path).await.expect_error(404, "not_found");
    }
    for (path, body) in [
        (at(PRODUCTS, &s.product, "/publish"), json!({})),
        (at(PRICES, &draft_price, "/publish"), json!({})),
        (
            at(OFFERS, &s.offer, "/reprice"),
            json!({"amount": eur("1"), "reason": "r"}),
        ),
        (at(CONFIGS, &cfg, "/publish"), json!({})),
        (at(CONFIGS, &cfg, "/versions"), json!({})),
        (PRICES.to_owned(), price_body(&s.product, eur("1"), None)),
        (CONFIGS.to_owned(), config_body(vec![line(&s.offer, 1)])),
        (
            PLAN.to_owned(),
            promo(&[&s.offer], json!({"percent_off": 10})),
        ),
    ] {
        let r = lpost(path.clone(), body).await;
        assert_eq!(r.status, 404, "{path}: {}", r.text);
        r.expect_error(404, "not_found");
    }
    let r = app
        .post(APPLY, promo(&[&s.offer], json!({"percent_off": 10})))
        .if_match("*")
        .auth(&live)
        .send()
        .await;
    r.expect_error(404, "not_found");
    for path in [PRODUCTS, PRICES, OFFERS] {
        assert!(items(&lget(path.to_owned()).await).is_empty(), "{path}");
    }
    // Nothing in the sandbox moved.
    assert_eq!(price(&app, &draft_price).await["status"], "draft");
    let o = offer(&app, &s.offer).await;
    assert_eq!(o["price_ref"], s.price.as_str());
    assert!(o["promotion_ref"].is_null());
    let c = get(&app, &at(CONFIGS, &cfg, "")).await;
    assert_eq!(c.data()["current_version"], 1);
    assert_eq!(c.data()["status"], "draft");

    // And the other way round.
    let r = app
        .post(PRODUCTS, json!({"name": "Live product"}))
        .auth(&live)
        .send()
        .await;
    r.expect(201);
    let live_product = text(&r.data()["product_ref"]);
    app.get(&at(PRODUCTS, &live_product, ""))
        .send()
        .await
        .expect_error(404, "not_found");
    assert_eq!(list(&app, PRODUCTS).await.len(), 1);
    assert_eq!(items(&lget(PRODUCTS.to_owned()).await).len(), 1);
}
