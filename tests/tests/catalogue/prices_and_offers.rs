//! Prices and offers.

use super::*;

pub(super) async fn prices_and_offers(app: TestApp) {
    let product = published_product(&app).await;
    let r = app
        .post(PRICES, price_body(&product, eur("1999"), None))
        .send()
        .await;
    r.expect(201);
    let tag = etag_matches(&r);
    let p = r.data().clone();
    has_fields(&p, PRICE_FIELDS);
    is_ref(&p["price_ref"], "pri_");
    assert_eq!(p["product_ref"], product.as_str());
    assert_eq!(p["amount"], eur("1999"));
    assert_eq!(p["type"], "one_time");
    assert!(p["interval"].is_null());
    assert_eq!(p["status"], "draft");
    is_ts(&p["created_at"]);
    assert!(p["published_at"].is_null());
    assert!(p["superseded_at"].is_null());
    let pr = text(&p["price_ref"]);
    let got = get(&app, &at(PRICES, &pr, "")).await;
    assert_eq!(etag_matches(&got), tag);
    assert_eq!(*got.data(), p);
    // No offer before the first publish.
    assert!(list(&app, &format!("{OFFERS}?product_ref={product}"))
        .await
        .is_empty());

    let r = publish(&app, &at(PRICES, &pr, "/publish")).await;
    r.expect(200);
    assert_ne!(etag_matches(&r), tag);
    let d = r.data();
    has_fields(d, PRICE_FIELDS);
    assert_eq!(d["price_ref"], pr.as_str());
    assert_eq!(d["status"], "published");
    is_ts(&d["published_at"]);
    assert!(d["superseded_at"].is_null());
    assert_eq!(d["amount"], eur("1999"));

    // The first publish makes the offer.
    let o = offer_of(&app, &product).await;
    has_fields(&o, OFFER_FIELDS);
    is_ref(&o["offer_ref"], "ofr_");
    assert_eq!(o["product_ref"], product.as_str());
    assert_eq!(o["price_ref"], pr.as_str());
    assert_eq!(o["base_amount"], eur("1999"));
    assert_eq!(o["amount"], eur("1999"));
    assert!(o["promotion_ref"].is_null());
    assert_eq!(o["status"], "active");
    assert_eq!(o["type"], "one_time");
    assert!(o["interval"].is_null());
    is_ts(&o["created_at"]);
    is_ts(&o["updated_at"]);
    let got = get(&app, &at(OFFERS, &text(&o["offer_ref"]), "")).await;
    etag_matches(&got);
    assert_eq!(*got.data(), o, "the listed offer is the retrieved one");

    // Recurring prices carry their interval, on the price and the offer.
    for interval in ["month", "year"] {
        let product = published_product(&app).await;
        let r = app
            .post(PRICES, price_body(&product, eur("900"), Some(interval)))
            .send()
            .await;
        r.expect(201);
        assert_eq!(r.data()["type"], "recurring");
        assert_eq!(r.data()["interval"], interval);
        let pr = text(&r.data()["price_ref"]);
        publish(&app, &at(PRICES, &pr, "/publish"))
            .await
            .expect(200);
        let o = offer_of(&app, &product).await;
        assert_eq!(o["type"], "recurring");
        assert_eq!(o["interval"], interval);
        assert_eq!(o["price_ref"], pr.as_str());
    }

    // A price of a draft product may be created (not published).
    let draft = text(&create_product(&app, "Draft").await["product_ref"]);
    app.post(PRICES, price_body(&draft, eur("1"), None))
        .send()
        .await
        .expect(201);
}

pub(super) async fn refused_transitions(app: TestApp) {
    // A published product.
    let product = published_product(&app).await;
    let r = publish(&app, &at(PRODUCTS, &product, "/publish")).await;
    refused(&r, "published");

    // A price of a draft product: the message names the product's state.
    let draft = text(&create_product(&app, "Draft").await["product_ref"]);
    let pr = create_price(&app, &draft, eur("100"), None).await;
    let r = publish(&app, &at(PRICES, &pr, "/publish")).await;
    refused(&r, "draft");
    assert_eq!(price(&app, &pr).await["status"], "draft");
    assert!(list(&app, &format!("{OFFERS}?product_ref={draft}"))
        .await
        .is_empty());

    // A published price.
    let p1 = create_price(&app, &product, eur("100"), None).await;
    publish(&app, &at(PRICES, &p1, "/publish"))
        .await
        .expect(200);
    let r = publish(&app, &at(PRICES, &p1, "/publish")).await;
    refused(&r, "published");

    // A superseded price.
    let p2 = create_price(&app, &product, eur("200"), None).await;
    publish(&app, &at(PRICES, &p2, "/publish"))
        .await
        .expect(200);
    assert_eq!(price(&app, &p1).await["status"], "superseded");
    let r = publish(&app, &at(PRICES, &p1, "/publish")).await;
    refused(&r, "superseded");
    let o = offer_of(&app, &product).await;
    assert_eq!(o["price_ref"], p2.as_str(), "the refusal moved nothing");
    assert_eq!(price(&app, &p2).await["status"], "published");
}

pub(super) async fn a_second_price_supersedes_the_first(app: TestApp) {
    let s = sellable(&app, eur("1999"), None).await;
    let offer_path = at(OFFERS, &s.offer, "");
    let before = get(&app, &offer_path).await;
    let p2 = create_price(&app, &s.product, eur("2999"), None).await;
    assert_eq!(
        offer(&app, &s.offer).await["price_ref"],
        s.price.as_str(),
        "a draft price moves nothing"
    );
    publish(&app, &at(PRICES, &p2, "/publish"))
        .await
        .expect(200);

    let old = price(&app, &s.price).await;
    assert_eq!(old["status"], "superseded");
    is_ts(&old["superseded_at"]);
    let new = price(&app, &p2).await;
    assert_eq!(new["status"], "published");
    assert!(new["superseded_at"].is_null());

    let o = offer_of(&app, &s.product).await;
    assert_eq!(o["offer_ref"], s.offer.as_str(), "the same offer moved");
    assert_eq!(o["price_ref"], p2.as_str());
    assert_eq!(o["base_amount"], eur("2999"));
    assert_eq!(o["amount"], eur("2999"));
    assert_eq!(o["created_at"], before.data()["created_at"]);
    assert_ne!(etag_of(&app, &offer_path).await, before.etag());

    let published = list(
        &app,
        &format!("{PRICES}?product_ref={}&status=published", s.product),
    )
    .await;
    assert_eq!(refs(&published, "price_ref"), vec![p2.clone()]);
    let superseded = list(
        &app,
        &format!("{PRICES}?product_ref={}&status=superseded", s.product),
    )
    .await;
    assert_eq!(refs(&superseded, "price_ref"), vec![s.price.clone()]);
}
