//! Concurrency.

use super::*;

/// `r` either won (200) or lost to a concurrent change (409
/// `version_conflict`).
#[track_caller]
fn won_or_conflicted(r: &Resp, round: usize) {
    assert!(
        r.status == 200 || r.status == 409,
        "round {round}: {}",
        r.text
    );
    if r.status == 409 {
        r.expect_error(409, "version_conflict");
    }
}

pub(super) async fn concurrent_price_publishes(app: TestApp) {
    for round in 0..5 {
        let product = published_product(&app).await;
        let p1 = create_price(&app, &product, eur("1000"), None).await;
        let p2 = create_price(&app, &product, eur("2000"), None).await;
        let path1 = at(PRICES, &p1, "/publish");
        let path2 = at(PRICES, &p2, "/publish");
        let (r1, r2) = tokio::join!(publish(&app, &path1), publish(&app, &path2));
        for r in [&r1, &r2] {
            won_or_conflicted(r, round);
        }
        assert!(r1.status == 200 || r2.status == 200, "one at least wins");
        let o = offer_of(&app, &product).await;
        let on = text(&o["price_ref"]);
        assert!(on == p1 || on == p2, "{o}");
        let s1 = text(&price(&app, &p1).await["status"]);
        let s2 = text(&price(&app, &p2).await["status"]);
        let published: Vec<&String> = [&s1, &s2]
            .into_iter()
            .filter(|s| *s == "published")
            .collect();
        assert_eq!(published.len(), 1, "round {round}: {s1} {s2}");
        let (mine, other, other_r) = if on == p1 {
            (&s1, &s2, &r2)
        } else {
            (&s2, &s1, &r1)
        };
        assert_eq!(mine, "published", "the offer's price is the published one");
        let expected = if other_r.status == 200 {
            "superseded"
        } else {
            "draft"
        };
        assert_eq!(other, expected, "round {round}");
        let listed = list(
            &app,
            &format!("{PRICES}?product_ref={product}&status=published"),
        )
        .await;
        assert_eq!(refs(&listed, "price_ref"), vec![on.clone()]);
        assert_eq!(o["base_amount"], price(&app, &on).await["amount"]);
    }
}

pub(super) async fn concurrent_overlapping_applies(app: TestApp) {
    let allowed = |r: &Resp| {
        matches!(
            (r.status, r.json["error"]["code"].as_str()),
            (412, Some("precondition_failed"))
                | (422, Some("semantic_error"))
                | (409, Some("version_conflict"))
        )
    };
    for round in 0..4 {
        let o = offer_ref(&app, eur("1000"), None).await;
        let a = promo(&[&o], json!({"percent_off": 10}));
        let b = json!({"offer_refs": [o], "discount": {"percent_off": 20}, "ends_at": later(3600)});
        let (ta, _) = planned(&app, &a).await;
        let (tb, _) = planned(&app, &b).await;
        let (ra, rb) = tokio::join!(apply(&app, &a, &ta), apply(&app, &b, &tb));
        let won: Vec<&Resp> = [&ra, &rb].into_iter().filter(|r| r.status == 200).collect();
        assert!(won.len() <= 1, "round {round}: {ra:?} {rb:?}");
        for r in [&ra, &rb] {
            assert!(r.status == 200 || allowed(r), "round {round}: {}", r.text);
        }
        let got = offer(&app, &o).await;
        match won.first() {
            Some(w) => {
                assert_eq!(got["promotion_ref"], w.data()["promotion_ref"]);
                let expected = if w.data()["discount"]["percent_off"] == 10 {
                    "900"
                } else {
                    "800"
                };
                assert_eq!(got["amount"], eur(expected));
            }
            None => {
                assert!(got["promotion_ref"].is_null());
                assert_eq!(got["amount"], eur("1000"));
            }
        }
    }
    // One plan applied twice at once (two keys): at most one promotion.
    for round in 0..4 {
        let o = offer_ref(&app, eur("1000"), None).await;
        let body = promo(&[&o], json!({"percent_off": 10}));
        let (tag, _) = planned(&app, &body).await;
        let (r1, r2) = tokio::join!(apply(&app, &body, &tag), apply(&app, &body, &tag));
        let won = [&r1, &r2].iter().filter(|r| r.status == 200).count();
        assert!(won <= 1, "round {round}: {r1:?} {r2:?}");
        for r in [&r1, &r2] {
            assert!(r.status == 200 || allowed(r), "round {round}: {}", r.text);
        }
        let got = offer(&app, &o).await;
        assert_eq!(got["amount"], eur(if won == 1 { "900" } else { "1000" }));
    }
}

/// docs/catalogue.md, Concurrency: publishPrice and repriceOffer of one
/// product run one after the other; whatever the interleaving, the product
/// ends with one published price and its one offer on it.
pub(super) async fn concurrent_reprice_and_publish(app: TestApp) {
    for round in 0..4 {
        let s = sellable(&app, eur("1000"), None).await;
        let draft = create_price(&app, &s.product, eur("2000"), None).await;
        let publish_path = at(PRICES, &draft, "/publish");
        let reprice_path = at(OFFERS, &s.offer, "/reprice");
        let (rp, rr) = tokio::join!(
            publish(&app, &publish_path),
            app.post(&reprice_path, json!({"amount": eur("3000"), "reason": "r"}))
                .send()
        );
        for r in [&rp, &rr] {
            won_or_conflicted(r, round);
        }
        let o = offer_of(&app, &s.product).await;
        let published = list(
            &app,
            &format!("{PRICES}?product_ref={}&status=published", s.product),
        )
        .await;
        assert_eq!(
            refs(&published, "price_ref"),
            vec![text(&o["price_ref"])],
            "round {round}"
        );
        assert_eq!(o["base_amount"], published[0]["amount"]);
        let all = list(&app, &format!("{PRICES}?product_ref={}", s.product)).await;
        let superseded = all.iter().filter(|p| p["status"] == "superseded").count();
        let wins = [&rp, &rr].iter().filter(|r| r.status == 200).count();
        assert_eq!(superseded, wins, "round {round}: {all:?}");
    }
}

/// An offer's `amount` is its `base_amount` after the promotion active
/// now: a reprice keeps the promotion and discounts the new base.
pub(super) async fn a_promotion_outlives_a_reprice(app: TestApp) {
    let s = sellable(&app, eur("1999"), None).await;
    let body = promo(&[&s.offer], json!({"percent_off": 10}));
    let (tag, _) = planned(&app, &body).await;
    let r = apply(&app, &body, &tag).await;
    r.expect(200);
    let promotion = r.data()["promotion_ref"].clone();
    let r = app
        .post(
            &at(OFFERS, &s.offer, "/reprice"),
            json!({"amount": eur("3000"), "reason": "r"}),
        )
        .send()
        .await;
    r.expect(200);
    assert_eq!(r.data()["base_amount"], eur("3000"));
    assert_eq!(r.data()["amount"], eur("2700"));
    assert_eq!(r.data()["promotion_ref"], promotion);
    let o = offer(&app, &s.offer).await;
    assert_eq!(o["amount"], eur("2700"));
    assert_eq!(o["promotion_ref"], promotion);
}
