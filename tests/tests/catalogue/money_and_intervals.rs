//! Money and intervals.

use super::*;

/// Money the contract refuses (section 8), with what is wrong.
pub(super) fn bad_amounts() -> Vec<(&'static str, Value)> {
    vec![
        ("a leading zero", eur("01")),
        ("a sign", eur("-5")),
        ("a plus sign", eur("+5")),
        ("a decimal point", eur("1.5")),
        ("19 digits", eur("1234567890123456789")),
        ("no digits", eur("")),
        (
            "a number",
            json!({"currency": "EUR", "unit": "minor", "value": 1999}),
        ),
        (
            "unit major",
            json!({"currency": "EUR", "unit": "major", "value": "1999"}),
        ),
        ("a lower-case currency", money("1999", "eur")),
        ("a four-letter currency", money("1999", "EURO")),
        ("no value", json!({"currency": "EUR", "unit": "minor"})),
        ("no unit", json!({"currency": "EUR", "value": "1999"})),
        ("no currency", json!({"unit": "minor", "value": "1999"})),
        (
            "an extra field",
            json!({"currency": "EUR", "unit": "minor", "value": "1999", "scale": 2}),
        ),
        ("a string", json!("1999")),
        ("null", Value::Null),
    ]
}

pub(super) async fn bad_money_is_refused(app: TestApp) {
    let product = published_product(&app).await;
    for (what, amount) in bad_amounts() {
        let r = app
            .post(PRICES, price_body(&product, amount, None))
            .send()
            .await;
        assert_eq!(r.status, 400, "createPrice with {what}: {}", r.text);
        invalid_under(&r, "amount");
    }
    let r = app
        .post(
            PRICES,
            without(price_body(&product, eur("1"), None), "amount"),
        )
        .send()
        .await;
    invalid_under(&r, "amount");
    assert!(
        list(&app, &format!("{PRICES}?product_ref={product}"))
            .await
            .is_empty(),
        "nothing was made"
    );
    // Zero and 18 digits are Money.
    for value in ["0", "999999999999999999"] {
        let r = app
            .post(PRICES, price_body(&product, eur(value), None))
            .send()
            .await;
        r.expect(201);
        assert_eq!(r.data()["amount"], eur(value));
    }

    // The same rules on reprice.
    let s = sellable(&app, eur("1999"), None).await;
    let reprice = at(OFFERS, &s.offer, "/reprice");
    for (what, amount) in bad_amounts() {
        let r = app
            .post(&reprice, json!({"amount": amount, "reason": "review"}))
            .send()
            .await;
        assert_eq!(r.status, 400, "repriceOffer with {what}: {}", r.text);
        invalid_under(&r, "amount");
    }
    let r = app.post(&reprice, json!({"reason": "review"})).send().await;
    invalid_under(&r, "amount");
    assert_eq!(offer(&app, &s.offer).await["price_ref"], s.price.as_str());
    let r = app
        .post(&reprice, json!({"amount": eur("0"), "reason": "free now"}))
        .send()
        .await;
    r.expect(200);
    assert_eq!(r.data()["amount"], eur("0"));
    assert_eq!(r.data()["base_amount"], eur("0"));
}

pub(super) async fn interval_rules(app: TestApp) {
    let product = published_product(&app).await;
    let base = json!({"product_ref": product, "amount": eur("500")});
    for (patch, field) in [
        (json!({"type": "recurring"}), "interval"),
        (json!({"type": "recurring", "interval": null}), "interval"),
        (json!({"type": "recurring", "interval": "week"}), "interval"),
        (json!({"type": "one_time", "interval": "month"}), "interval"),
        (json!({"type": "one_time", "interval": "year"}), "interval"),
        (json!({"type": "weekly"}), "type"),
        (json!({}), "type"),
    ] {
        let mut body = base.clone();
        for (k, v) in patch.as_object().expect("patch") {
            body[k] = v.clone();
        }
        let r = app.post(PRICES, body.clone()).send().await;
        assert_eq!(r.status, 400, "{body}: {}", r.text);
        invalid(&r, field);
    }
    let r = app
        .post(PRICES, json!({"amount": eur("5"), "type": "one_time"}))
        .send()
        .await;
    invalid(&r, "product_ref");
    let r = app
        .post(PRICES, price_body("pri_N5xP3cV8bT1m", eur("5"), None))
        .send()
        .await;
    invalid(&r, "product_ref");
    let r = app
        .post(PRICES, price_body(NO_PRODUCT, eur("5"), None))
        .send()
        .await;
    r.expect_error(404, "not_found");
    assert!(list(&app, PRICES).await.is_empty(), "nothing was made");

    // One-time with an explicit null interval is fine.
    let r = app
        .post(
            PRICES,
            json!({"product_ref": product, "amount": eur("5"), "type": "one_time", "interval": null}),
        )
        .send()
        .await;
    r.expect(201);
    assert!(r.data()["interval"].is_null());
}
