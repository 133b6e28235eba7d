//! References.

use super::*;

pub(super) async fn unknown_and_malformed_refs(app: TestApp) {
    for (base, unknown, param, wrong) in [
        (PRODUCTS, NO_PRODUCT, "product_ref", NO_PRICE),
        (PRICES, NO_PRICE, "price_ref", NO_PRODUCT),
        (OFFERS, NO_OFFER, "offer_ref", NO_CONFIG),
        (CONFIGS, NO_CONFIG, "config_ref", NO_OFFER),
    ] {
        app.get(&at(base, unknown, ""))
            .send()
            .await
            .expect_error(404, "not_found");
        let prefix = &unknown[..unknown.find('_').expect("prefix") + 1];
        for malformed in [
            wrong.to_owned(),
            format!("{prefix}short"),
            format!("{prefix}N5xP3cV8bT1-"),
        ] {
            let r = app.get(&at(base, &malformed, "")).send().await;
            assert_eq!(r.status, 400, "{malformed}: {}", r.text);
            invalid(&r, param);
        }
    }
    for (path, body) in [
        (at(PRODUCTS, NO_PRODUCT, "/publish"), json!({})),
        (at(PRICES, NO_PRICE, "/publish"), json!({})),
        (
            at(OFFERS, NO_OFFER, "/reprice"),
            json!({"amount": eur("1"), "reason": "r"}),
        ),
        (at(CONFIGS, NO_CONFIG, "/publish"), json!({})),
        (at(CONFIGS, NO_CONFIG, "/versions"), json!({})),
    ] {
        let r = app.post(&path, body).send().await;
        assert_eq!(r.status, 404, "{path}: {}", r.text);
        r.expect_error(404, "not_found");
    }
    for (path, body, param) in [
        (at(PRODUCTS, NO_PRICE, "/publish"), json!({}), "product_ref"),
        (at(PRICES, "pri_x", "/publish"), json!({}), "price_ref"),
        (
            at(OFFERS, NO_PRODUCT, "/reprice"),
            json!({"amount": eur("1"), "reason": "r"}),
            "offer_ref",
        ),
        (at(CONFIGS, "cco_", "/publish"), json!({}), "config_ref"),
        (at(CONFIGS, NO_OFFER, "/versions"), json!({}), "config_ref"),
    ] {
        let r = app.post(&path, body).send().await;
        assert_eq!(r.status, 400, "{path}: {}", r.text);
        invalid(&r, param);
    }
}
