//! Idempotency.

use super::*;

/// Sends the same POST twice under one key; the second must be a replay
/// of the same body.
pub(super) async fn twice(
    app: &TestApp,
    path: &str,
    tag: Option<&str>,
    body: Value,
) -> (Resp, Resp) {
    let (first, again) = kit::twice(app, path, tag, body).await;
    assert_eq!(again.text, first.text, "the same body");
    (first, again)
}

pub(super) async fn idempotent_replays(app: TestApp) {
    // createProduct.
    let (first, again) = twice(&app, PRODUCTS, None, json!({"name": "Once"})).await;
    first.expect(201);
    assert_eq!(again.etag(), first.etag());
    assert_eq!(list(&app, PRODUCTS).await.len(), 1, "one product");
    let product = text(&first.data()["product_ref"]);

    // Same key, another body: a mismatch, and nothing made.
    let key = unique_key();
    for (name, status) in [("First", 201), ("Second", 422)] {
        let r = app
            .req("POST", PRODUCTS)
            .idem(&key)
            .json(&json!({ "name": name }))
            .send()
            .await;
        assert_eq!(r.status, status, "{}", r.text);
        if status == 422 {
            r.expect_error(422, "idempotency_mismatch");
        }
    }
    assert_eq!(list(&app, PRODUCTS).await.len(), 2);
    // A key is scoped to its operation: the same key on createPrice is new.
    let first = text(&list(&app, PRODUCTS).await[0]["product_ref"]);
    let r = app
        .req("POST", PRICES)
        .idem(&key)
        .json(&price_body(&first, eur("1"), None))
        .send()
        .await;
    r.expect(201);
    assert_eq!(r.header("idempotent-replayed"), None);

    // Publish, and a kept semantic error.
    let path = at(PRODUCTS, &product, "/publish");
    twice(&app, &path, None, json!({})).await.0.expect(200);
    twice(&app, &path, None, json!({}))
        .await
        .0
        .expect_error(422, "semantic_error");

    // createPrice and publishPrice: the replay is not a second publish.
    let (first, _) = twice(&app, PRICES, None, price_body(&product, eur("100"), None)).await;
    first.expect(201);
    let pr = text(&first.data()["price_ref"]);
    assert_eq!(
        list(&app, &format!("{PRICES}?product_ref={product}"))
            .await
            .len(),
        1
    );
    let (first, _) = twice(&app, &at(PRICES, &pr, "/publish"), None, json!({})).await;
    first.expect(200);
    let o = text(&offer_of(&app, &product).await["offer_ref"]);

    // repriceOffer: one new price.
    let (first, _) = twice(
        &app,
        &at(OFFERS, &o, "/reprice"),
        None,
        json!({"amount": eur("150"), "reason": "r"}),
    )
    .await;
    first.expect(200);
    assert_eq!(
        list(&app, &format!("{PRICES}?product_ref={product}"))
            .await
            .len(),
        2
    );

    // applyPromotion: one promotion, replayed (not refused as an overlap).
    let body = promo(&[&o], json!({"percent_off": 10}));
    let (tag, _) = planned(&app, &body).await;
    let (first, _) = twice(&app, APPLY, Some(&tag), body).await;
    first.expect(200);
    assert_eq!(
        offer(&app, &o).await["promotion_ref"],
        first.data()["promotion_ref"]
    );

    // Checkout configs and their versions.
    let (first, _) = twice(&app, CONFIGS, None, config_body(vec![line(&o, 1)])).await;
    first.expect(201);
    let cfg = text(&first.data()["config_ref"]);
    let (first, _) = twice(
        &app,
        &at(CONFIGS, &cfg, "/versions"),
        None,
        json!({"name": "v2"}),
    )
    .await;
    first.expect(201);
    assert_eq!(first.data()["current_version"], 2);
    let (first, _) = twice(&app, &at(CONFIGS, &cfg, "/publish"), None, json!({})).await;
    first.expect(200);
    assert_eq!(
        get(&app, &at(CONFIGS, &cfg, "")).await.data()["current_version"],
        2,
        "one version made"
    );
}
