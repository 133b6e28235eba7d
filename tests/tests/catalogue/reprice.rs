//! Reprice.

use super::*;

pub(super) async fn reprice(app: TestApp) {
    let s = sellable(&app, eur("1999"), None).await;
    let before = etag_of(&app, &at(OFFERS, &s.offer, "")).await;
    let r = app
        .post(
            &at(OFFERS, &s.offer, "/reprice"),
            json!({"amount": eur("2499"), "reason": "Yearly price review"}),
        )
        .send()
        .await;
    r.expect(200);
    let tag = etag_matches(&r);
    assert_ne!(tag, before);
    let o = r.data().clone();
    has_fields(&o, OFFER_FIELDS);
    assert_eq!(o["offer_ref"], s.offer.as_str());
    assert_eq!(o["product_ref"], s.product.as_str());
    assert_eq!(o["base_amount"], eur("2499"));
    assert_eq!(o["amount"], eur("2499"));
    assert!(o["promotion_ref"].is_null());
    assert_eq!(o["status"], "active");
    assert_eq!(o["type"], "one_time");
    assert!(o["interval"].is_null());
    let new = text(&o["price_ref"]);
    is_ref(&o["price_ref"], "pri_");
    assert_ne!(new, s.price, "a new price");
    assert_eq!(offer(&app, &s.offer).await, o);

    let np = price(&app, &new).await;
    assert_eq!(np["status"], "published");
    assert_eq!(np["product_ref"], s.product.as_str());
    assert_eq!(np["amount"], eur("2499"));
    assert_eq!(np["type"], "one_time");
    assert!(np["interval"].is_null());
    is_ts(&np["published_at"]);
    let old = price(&app, &s.price).await;
    assert_eq!(old["status"], "superseded");
    is_ts(&old["superseded_at"]);
    assert_eq!(old["amount"], eur("1999"));
    offer_of(&app, &s.product).await;
    let published = list(
        &app,
        &format!("{PRICES}?product_ref={}&status=published", s.product),
    )
    .await;
    assert_eq!(refs(&published, "price_ref"), vec![new]);

    // A recurring offer keeps its type and interval.
    let y = sellable(&app, eur("10000"), Some("year")).await;
    let r = app
        .post(
            &at(OFFERS, &y.offer, "/reprice"),
            json!({"amount": eur("12000"), "reason": "r"}),
        )
        .send()
        .await;
    r.expect(200);
    assert_eq!(r.data()["type"], "recurring");
    assert_eq!(r.data()["interval"], "year");
    let np = price(&app, &text(&r.data()["price_ref"])).await;
    assert_eq!(np["type"], "recurring");
    assert_eq!(np["interval"], "year");

    // Another currency is a semantic error; nothing moves.
    let r = app
        .post(
            &at(OFFERS, &s.offer, "/reprice"),
            json!({"amount": money("2499", "USD"), "reason": "r"}),
        )
        .send()
        .await;
    r.expect_error(422, "semantic_error");
    assert_eq!(etag_of(&app, &at(OFFERS, &s.offer, "")).await, tag);
}

pub(super) async fn reprice_validation(app: TestApp) {
    let s = sellable(&app, eur("1999"), None).await;
    let path = at(OFFERS, &s.offer, "/reprice");
    for (body, field) in [
        (json!({"amount": eur("1")}), "reason"),
        (json!({"amount": eur("1"), "reason": ""}), "reason"),
        (
            json!({"amount": eur("1"), "reason": "r".repeat(201)}),
            "reason",
        ),
        (json!({"amount": eur("1"), "reason": 5}), "reason"),
        (
            json!({"amount": eur("1"), "reason": "r", "effective_at": "now"}),
            "effective_at",
        ),
    ] {
        let r = app.post(&path, body.clone()).send().await;
        assert_eq!(r.status, 400, "{body}: {}", r.text);
        invalid(&r, field);
    }
    assert_eq!(offer(&app, &s.offer).await["price_ref"], s.price.as_str());
    let r = app
        .post(
            &path,
            json!({"amount": eur("1"), "reason": "r".repeat(200)}),
        )
        .send()
        .await;
    r.expect(200);
    let r = app
        .post(
            &at(OFFERS, NO_OFFER, "/reprice"),
            json!({"amount": eur("1"), "reason": "r"}),
        )
        .send()
        .await;
    r.expect_error(404, "not_found");
}
