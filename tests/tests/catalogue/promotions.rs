//! Promotions.

use super::*;

/// An offer, its current amount and its promotional amount.
pub(super) type Expected<'a> = (&'a str, &'a str, &'a str);

pub(super) async fn plan_arithmetic(app: TestApp) {
    let a = offer_ref(&app, eur("1999"), None).await;
    let b = offer_ref(&app, eur("500"), None).await;
    let z = offer_ref(&app, eur("0"), None).await;
    let a_tag = etag_of(&app, &at(OFFERS, &a, "")).await;
    let (a, b, z) = (a.as_str(), b.as_str(), z.as_str());

    let cases: Vec<(Vec<&str>, Value, Vec<Expected>)> = vec![
        // floor(1999 × 15 / 100) = 299; floor(500 × 15 / 100) = 75.
        (
            vec![a, b, z],
            json!({"percent_off": 15}),
            vec![(a, "1999", "1700"), (b, "500", "425"), (z, "0", "0")],
        ),
        (
            vec![a],
            json!({"percent_off": 1}),
            vec![(a, "1999", "1980")],
        ),
        // floor(1999 × 33 / 100) = 659.
        (
            vec![a],
            json!({"percent_off": 33}),
            vec![(a, "1999", "1340")],
        ),
        // floor(1999 × 50 / 100) = 999.
        (
            vec![a],
            json!({"percent_off": 50}),
            vec![(a, "1999", "1000")],
        ),
        (
            vec![a, b],
            json!({"percent_off": 100}),
            vec![(a, "1999", "0"), (b, "500", "0")],
        ),
        // An amount discount is capped at the amount.
        (
            vec![a, b],
            json!({"amount_off": eur("600")}),
            vec![(a, "1999", "1399"), (b, "500", "0")],
        ),
        (
            vec![b],
            json!({"amount_off": eur("500")}),
            vec![(b, "500", "0")],
        ),
        (
            vec![a],
            json!({"amount_off": eur("1")}),
            vec![(a, "1999", "1998")],
        ),
    ];
    for (offers, discount, expected) in cases {
        let body = promo(&offers, discount.clone());
        let (_, plan) = planned(&app, &body).await;
        assert_eq!(
            plan["changes"].as_array().expect("changes").len(),
            expected.len(),
            "{plan}"
        );
        for (o, current, promotional) in expected {
            let c = change_for(&plan, o);
            assert_eq!(c["current_amount"], eur(current), "{discount}: {plan}");
            assert_eq!(
                c["promotional_amount"],
                eur(promotional),
                "{discount}: {plan}"
            );
        }
    }
    // Planning changes nothing.
    let o = offer(&app, a).await;
    assert_eq!(o["etag"], a_tag.as_str());
    assert_eq!(o["amount"], eur("1999"));
    assert!(o["promotion_ref"].is_null());
}

/// `floor(amount × percent_off / 100)` is exact for the largest Money:
/// 999999999999999999 × 50 does not fit in 64 bits, the answer does.
pub(super) async fn plan_arithmetic_on_the_largest_amount(app: TestApp) {
    let max = "999999999999999999";
    let o = offer_ref(&app, eur(max), None).await;
    for (percent, promotional) in [
        (50, "500000000000000000"),
        (1, "990000000000000000"),
        (99, "10000000000000000"),
        (100, "0"),
    ] {
        let (_, plan) = planned(&app, &promo(&[&o], json!({ "percent_off": percent }))).await;
        let c = change_for(&plan, &o);
        assert_eq!(c["current_amount"], eur(max));
        assert_eq!(c["promotional_amount"], eur(promotional), "{percent}%");
    }
    let (_, plan) = planned(&app, &promo(&[&o], json!({"amount_off": eur(max)}))).await;
    assert_eq!(change_for(&plan, &o)["promotional_amount"], eur("0"));
}

pub(super) async fn plan_digest(app: TestApp) {
    let o = offer_ref(&app, eur("1999"), None).await;
    let body = promo(&[&o], json!({"percent_off": 15}));
    let (tag, first) = planned(&app, &body).await;
    let (again, _) = planned(&app, &body).await;
    assert_eq!(tag, again, "the same plan, the same digest");
    // Key order and white space do not matter.
    let reordered = format!(r#"{{ "discount" : {{"percent_off":15}}, "offer_refs": ["{o}"] }}"#);
    let r = app.req("POST", PLAN).raw(reordered).send().await;
    r.expect(200);
    assert_eq!(r.etag(), tag);
    assert_eq!(r.data()["plan_digest"], first["plan_digest"]);
    // Another body, another digest.
    let (other, _) = planned(&app, &promo(&[&o], json!({"percent_off": 16}))).await;
    assert_ne!(other, tag);
    let (windowed, _) = planned(&app, &with(body.clone(), "ends_at", json!(later(3600)))).await;
    assert_ne!(windowed, tag);
    // A catalogue change, another digest.
    app.post(
        &at(OFFERS, &o, "/reprice"),
        json!({"amount": eur("2999"), "reason": "r"}),
    )
    .send()
    .await
    .expect(200);
    let (moved, plan) = planned(&app, &body).await;
    assert_ne!(moved, tag);
    assert_eq!(change_for(&plan, &o)["current_amount"], eur("2999"));
}

pub(super) async fn apply_promotion(app: TestApp) {
    let s = sellable(&app, eur("1999"), None).await;
    let offer_tag = etag_of(&app, &at(OFFERS, &s.offer, "")).await;
    let body = promo(&[&s.offer], json!({"percent_off": 15}));
    let (tag, _) = planned(&app, &body).await;

    // If-Match is required.
    app.post(APPLY, body.clone())
        .send()
        .await
        .expect_error(428, "precondition_required");
    // So is an idempotency key.
    app.req("POST", APPLY)
        .json(&body)
        .if_match(&tag)
        .send()
        .await
        .expect_error(400, "idempotency_key_required");

    let before = Timestamp::now().plus_seconds(-2);
    let r = apply(&app, &body, &tag).await;
    r.expect(200);
    etag_matches(&r);
    let p = r.data().clone();
    has_fields(&p, PROMOTION_FIELDS);
    is_ref(&p["promotion_ref"], "prm_");
    assert_eq!(p["offer_refs"], json!([s.offer]));
    assert_eq!(p["discount"], json!({"percent_off": 15}));
    let starts = ts_of(&p["starts_at"]);
    assert!(
        starts >= before && starts <= Timestamp::now().plus_seconds(2),
        "starts_at defaults to the moment of apply: {p}"
    );
    assert!(p["ends_at"].is_null());
    assert_eq!(p["status"], "active");
    is_ts(&p["created_at"]);
    let promotion = text(&p["promotion_ref"]);

    let o = offer(&app, &s.offer).await;
    assert_eq!(o["base_amount"], eur("1999"));
    assert_eq!(o["amount"], eur("1700"));
    assert_eq!(o["promotion_ref"], promotion.as_str());
    assert_eq!(o["price_ref"], s.price.as_str(), "the price stays");
    assert_ne!(o["etag"], offer_tag.as_str(), "applying bumps the offer");
    let listed = offer_of(&app, &s.product).await;
    assert_eq!(listed["amount"], eur("1700"));

    // An amount off with an end, on another offer; `*` matches too.
    let b = offer_ref(&app, eur("500"), None).await;
    let ends = later(3600);
    let body = json!({"offer_refs": [b], "discount": {"amount_off": eur("600")}, "ends_at": ends});
    let (tag, plan) = planned(&app, &body).await;
    assert_eq!(change_for(&plan, &b)["promotional_amount"], eur("0"));
    let r = apply(&app, &body, &tag).await;
    r.expect(200);
    assert_eq!(r.data()["discount"], json!({"amount_off": eur("600")}));
    assert_eq!(
        ts_of(&r.data()["ends_at"]),
        Timestamp::parse(&ends).unwrap()
    );
    assert_eq!(r.data()["status"], "active");
    let ob = offer(&app, &b).await;
    assert_eq!(ob["amount"], eur("0"));
    assert_eq!(ob["base_amount"], eur("500"));
    assert_eq!(ob["promotion_ref"], r.data()["promotion_ref"]);

    // Overlaps: one promotion per offer at a time.
    let r = apply(&app, &promo(&[&s.offer], json!({"percent_off": 5})), "*").await;
    r.expect_error(422, "semantic_error");
    // A listed offer with a promotion refuses the whole promotion.
    let c = offer_ref(&app, eur("700"), None).await;
    let r = apply(
        &app,
        &promo(&[&c, &s.offer], json!({"percent_off": 5})),
        "*",
    )
    .await;
    r.expect_error(422, "semantic_error");
    let oc = offer(&app, &c).await;
    assert!(oc["promotion_ref"].is_null(), "nothing half-applied: {oc}");
    assert_eq!(oc["amount"], eur("700"));
    assert_eq!(
        offer(&app, &s.offer).await["promotion_ref"],
        promotion.as_str()
    );
}

pub(super) async fn apply_after_a_change_is_412(app: TestApp) {
    let s = sellable(&app, eur("1999"), None).await;
    let body = promo(&[&s.offer], json!({"percent_off": 10}));
    let (tag, _) = planned(&app, &body).await;
    app.post(
        &at(OFFERS, &s.offer, "/reprice"),
        json!({"amount": eur("2999"), "reason": "r"}),
    )
    .send()
    .await
    .expect(200);
    apply(&app, &body, &tag)
        .await
        .expect_error(412, "precondition_failed");
    let o = offer(&app, &s.offer).await;
    assert!(o["promotion_ref"].is_null());
    assert_eq!(o["amount"], eur("2999"));

    // A second price published between plan and apply: 412 too.
    let (tag, _) = planned(&app, &body).await;
    let p = create_price(&app, &s.product, eur("3999"), None).await;
    publish(&app, &at(PRICES, &p, "/publish")).await.expect(200);
    apply(&app, &body, &tag)
        .await
        .expect_error(412, "precondition_failed");

    // Another body than the one planned.
    let (tag, _) = planned(&app, &body).await;
    let other = promo(&[&s.offer], json!({"percent_off": 20}));
    apply(&app, &other, &tag)
        .await
        .expect_error(412, "precondition_failed");
    assert!(offer(&app, &s.offer).await["promotion_ref"].is_null());

    // A fresh plan applies: floor(3999 × 10 / 100) = 399.
    let r = apply(&app, &body, &tag).await;
    r.expect(200);
    assert_eq!(offer(&app, &s.offer).await["amount"], eur("3600"));
}

pub(super) async fn scheduled_promotions(app: TestApp) {
    let s = sellable(&app, eur("1999"), None).await;
    // Active now, for an hour.
    let now =
        json!({"offer_refs": [s.offer], "discount": {"percent_off": 15}, "ends_at": later(3600)});
    let (tag, _) = planned(&app, &now).await;
    let r = apply(&app, &now, &tag).await;
    r.expect(200);
    assert_eq!(r.data()["status"], "active");
    let active = text(&r.data()["promotion_ref"]);

    // In two hours, for an hour: the plan shows the amount now and the
    // discount applied to the base amount.
    let (starts, ends) = (later(7200), later(10800));
    let future = json!({"offer_refs": [s.offer], "discount": {"percent_off": 50},
        "starts_at": starts, "ends_at": ends});
    let (tag, plan) = planned(&app, &future).await;
    let c = change_for(&plan, &s.offer);
    assert_eq!(c["current_amount"], eur("1700"));
    assert_eq!(c["promotional_amount"], eur("1000"));
    let r = apply(&app, &future, &tag).await;
    r.expect(200);
    etag_matches(&r);
    assert_eq!(r.data()["status"], "scheduled");
    assert_eq!(
        ts_of(&r.data()["starts_at"]),
        Timestamp::parse(&starts).unwrap()
    );
    assert_eq!(
        ts_of(&r.data()["ends_at"]),
        Timestamp::parse(&ends).unwrap()
    );
    let o = offer(&app, &s.offer).await;
    assert_eq!(o["amount"], eur("1700"), "the scheduled one waits");
    assert_eq!(o["promotion_ref"], active.as_str());

    // Overlapping the scheduled one, or the active one: refused.
    for body in [
        json!({"offer_refs": [s.offer], "discount": {"percent_off": 10},
            "starts_at": later(9000), "ends_at": later(14400)}),
        json!({"offer_refs": [s.offer], "discount": {"percent_off": 10},
            "starts_at": later(1800), "ends_at": later(2400)}),
        json!({"offer_refs": [s.offer], "discount": {"percent_off": 10}, "ends_at": later(600)}),
        // Open-ended from inside the scheduled one.
        json!({"offer_refs": [s.offer], "discount": {"percent_off": 10}, "starts_at": later(10000)}),
    ] {
        apply(&app, &body, "*")
            .await
            .expect_error(422, "semantic_error");
    }
    // Between the two: allowed.
    let between = json!({"offer_refs": [s.offer], "discount": {"percent_off": 10},
        "starts_at": later(3700), "ends_at": later(7100)});
    let r = apply(&app, &between, "*").await;
    r.expect(200);
    assert_eq!(r.data()["status"], "scheduled");

    // A future window on an offer without a promotion leaves its amount.
    let b = offer_ref(&app, eur("800"), None).await;
    let body =
        json!({"offer_refs": [b], "discount": {"percent_off": 25}, "starts_at": later(3600)});
    let (tag, plan) = planned(&app, &body).await;
    assert_eq!(change_for(&plan, &b)["current_amount"], eur("800"));
    assert_eq!(change_for(&plan, &b)["promotional_amount"], eur("600"));
    let r = apply(&app, &body, &tag).await;
    r.expect(200);
    assert_eq!(r.data()["status"], "scheduled");
    assert!(r.data()["ends_at"].is_null());
    let ob = offer(&app, &b).await;
    assert_eq!(ob["amount"], eur("800"));
    assert!(ob["promotion_ref"].is_null());
}

pub(super) async fn promotion_validation(app: TestApp) {
    let o = offer_ref(&app, eur("1999"), None).await;
    let usd = offer_ref(&app, money("1999", "USD"), None).await;
    let many: Vec<String> = (0..101).map(|i| format!("ofr_A{i:011}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let bad: Vec<(Value, &str)> = vec![
        (promo(&[&o], json!({"percent_off": 0})), "discount"),
        (promo(&[&o], json!({"percent_off": 101})), "discount"),
        (promo(&[&o], json!({"percent_off": -1})), "discount"),
        (promo(&[&o], json!({"percent_off": 15.5})), "discount"),
        (promo(&[&o], json!({"percent_off": "15"})), "discount"),
        (
            promo(&[&o], json!({"percent_off": 15, "amount_off": eur("1")})),
            "discount",
        ),
        (promo(&[&o], json!({})), "discount"),
        (promo(&[&o], json!({"amount_off": eur("01")})), "discount"),
        (json!({"offer_refs": [o]}), "discount"),
        (promo(&[], json!({"percent_off": 15})), "offer_refs"),
        (promo(&[&o, &o], json!({"percent_off": 15})), "offer_refs"),
        (promo(&many, json!({"percent_off": 15})), "offer_refs"),
        (
            promo(&["ofr_short"], json!({"percent_off": 15})),
            "offer_refs",
        ),
        (
            promo(&[NO_PRODUCT], json!({"percent_off": 15})),
            "offer_refs",
        ),
        (json!({"discount": {"percent_off": 15}}), "offer_refs"),
        (
            with(
                promo(&[&o], json!({"percent_off": 15})),
                "ends_at",
                json!(later(-60)),
            ),
            "ends_at",
        ),
        (
            json!({"offer_refs": [o], "discount": {"percent_off": 15},
                "starts_at": later(7200), "ends_at": later(3600)}),
            "ends_at",
        ),
        (
            with(
                promo(&[&o], json!({"percent_off": 15})),
                "starts_at",
                json!("tomorrow"),
            ),
            "starts_at",
        ),
        (
            with(
                promo(&[&o], json!({"percent_off": 15})),
                "priority",
                json!(1),
            ),
            "priority",
        ),
    ];
    for (body, field) in &bad {
        let r = plan(&app, body).await;
        assert_eq!(r.status, 400, "plan {body}: {}", r.text);
        invalid_under(&r, field);
        let r = apply(&app, body, "*").await;
        assert_eq!(r.status, 400, "apply {body}: {}", r.text);
        invalid_under(&r, field);
    }
    // A window that ends when it starts.
    let at_once = later(3600);
    let body = json!({"offer_refs": [o], "discount": {"percent_off": 15},
        "starts_at": at_once, "ends_at": at_once});
    invalid_under(&plan(&app, &body).await, "ends_at");
    // 100 well-formed offers are well-formed: unknown ones are 404.
    plan(&app, &promo(&many[..100], json!({"percent_off": 15})))
        .await
        .expect_error(404, "not_found");
    // Unknown offers: 404.
    for body in [
        promo(&[NO_OFFER], json!({"percent_off": 15})),
        promo(&[&o, NO_OFFER], json!({"percent_off": 15})),
    ] {
        plan(&app, &body).await.expect_error(404, "not_found");
        apply(&app, &body, "*").await.expect_error(404, "not_found");
    }
    // An amount off in another currency than an offer's: 422.
    for body in [
        promo(&[&o], json!({"amount_off": money("100", "USD")})),
        promo(&[&o, &usd], json!({"amount_off": eur("100")})),
    ] {
        plan(&app, &body).await.expect_error(422, "semantic_error");
        apply(&app, &body, "*")
            .await
            .expect_error(422, "semantic_error");
    }
    // Percentages are currency-free: both offers at once.
    let (_, p) = planned(&app, &promo(&[&o, &usd], json!({"percent_off": 100}))).await;
    assert_eq!(
        change_for(&p, &usd)["promotional_amount"],
        money("0", "USD")
    );
    for offer_ref in [&o, &usd] {
        assert!(offer(&app, offer_ref).await["promotion_ref"].is_null());
    }
}
