//! One-time payments.

use super::*;

pub(super) async fn a_one_time_payment_writes_each_record_once(app: TestApp) {
    let a = sellable(&app, eur("1999"), None).await;
    let b = sellable(&app, eur("500"), None).await;
    let config = published_config(&app, vec![line(&a.offer, 2), line(&b.offer, 1)]).await;

    let before = Timestamp::now().plus_seconds(-2);
    let r = create_session(&app, session_body(&config, "ada@example.com")).await;
    r.expect(201);
    let tag = etag_matches(&r);
    let s = r.data().clone();
    has_fields(&s, SESSION_FIELDS);
    is_ref(&s["checkout_session_ref"], "cs_");
    let session = text(&s["checkout_session_ref"]);
    assert_eq!(s["config_ref"], config.as_str());
    assert_eq!(s["config_version"], 1);
    assert_eq!(s["status"], "open");
    assert_eq!(s["mode"], "payment");
    assert_eq!(
        s["buyer"],
        json!({"email": "ada@example.com", "name": NAME})
    );
    assert!(s["buyer_ref"].is_null(), "no buyer before a payment: {s}");
    is_ref(&s["journey_ref"], "jrn_");
    assert!(s["payment_intent_ref"].is_null());
    assert!(s["subscription_ref"].is_null());
    assert_eq!(s["success_url"], OK_URL);
    assert!(s["cancel_url"].is_null());
    assert!(s["completed_at"].is_null());
    let created = ts_of(&s["created_at"]);
    assert!(created >= before && created <= Timestamp::now().plus_seconds(2));
    assert_eq!(
        ts_of(&s["expires_at"]),
        created.plus_seconds(24 * 3600),
        "expires_at is created_at + 24 h"
    );
    let lines = s["line_items"].as_array().expect("line_items").clone();
    assert_eq!(lines.len(), 2, "{s}");
    for l in &lines {
        has_fields(l, LINE_ITEM_FIELDS);
    }
    let line_of = |offer: &str| {
        lines
            .iter()
            .find(|l| l["offer_ref"] == offer)
            .unwrap_or_else(|| panic!("a line item of {offer}: {s}"))
            .clone()
    };
    let la = line_of(&a.offer);
    assert_eq!(la["price_ref"], a.price.as_str());
    assert_eq!(la["product_ref"], a.product.as_str());
    assert_eq!(la["quantity"], 2);
    assert_eq!(la["unit_amount"], eur("1999"));
    assert_eq!(la["amount"], eur("3998"));
    let lb = line_of(&b.offer);
    assert_eq!(lb["price_ref"], b.price.as_str());
    assert_eq!(lb["product_ref"], b.product.as_str());
    assert_eq!(lb["quantity"], 1);
    assert_eq!(lb["unit_amount"], eur("500"));
    assert_eq!(lb["amount"], eur("500"));
    assert_eq!(s["amount_total"], eur("4498"));

    let got = get(&app, &at(SESSIONS, &session, "")).await;
    assert_eq!(etag_matches(&got), tag);
    assert_eq!(*got.data(), s);
    // Creating a session starts its journey.
    let journey = text(&s["journey_ref"]);
    let j = retrieve(&app, &JOURNEY, &journey).await;
    has_fields(&j, JOURNEY_FIELDS);
    assert_eq!(j["checkout_session_ref"], session.as_str());
    assert!(j["buyer_ref"].is_null());
    assert_eq!(j["status"], "open");
    assert_eq!(step_kinds(&j), ["session_created"]);
    is_ts(&j["steps"][0]["at"]);
    no_records(&app).await;

    let paid_from = Timestamp::now().plus_seconds(-2);
    let d = pay_ok(&app, &session, card("pm_card_visa")).await;
    assert_eq!(d["result"], "retrieve_payment_response");
    assert!(d["subscription"].is_null(), "one-time items: {d}");
    assert!(d["next_action"].is_null(), "{d}");

    let p = d["payment"].clone();
    is_ref(&p["payment_intent_ref"], "pay_");
    let payment = text(&p["payment_intent_ref"]);
    assert_eq!(p["checkout_session_ref"], session.as_str());
    is_ref(&p["buyer_ref"], "buy_");
    let buyer = text(&p["buyer_ref"]);
    assert_eq!(
        p["buyer"],
        json!({"email": "ada@example.com", "name": NAME})
    );
    assert_eq!(p["amount"], eur("4498"));
    assert_eq!(p["amount_refunded"], eur("0"));
    assert!(p["failure_code"].is_null(), "{p}");
    card_is(&p, "visa", "4242");
    assert!(p["stored_payment_method_ref"].is_null(), "not stored: {p}");
    let products: Vec<String> = p["product_refs"]
        .as_array()
        .expect("product_refs")
        .iter()
        .map(text)
        .collect();
    assert_eq!(products.len(), 2, "{p}");
    assert_eq!(set(&products), set(&[a.product.clone(), b.product.clone()]));
    assert!(p["next_action"].is_null());
    assert!(ts_of(&p["captured_at"]) >= paid_from);
    is_ts(&p["created_at"]);

    let cs = d["checkout_session"].clone();
    assert_eq!(cs["checkout_session_ref"], session.as_str());
    assert_eq!(cs["status"], "complete");
    assert_eq!(cs["buyer_ref"], buyer.as_str());
    assert_eq!(cs["payment_intent_ref"], payment.as_str());
    assert!(ts_of(&cs["completed_at"]) >= paid_from);
    assert_eq!(cs["amount_total"], eur("4498"));
    assert_eq!(cs["line_items"], s["line_items"]);
    assert_eq!(cs["journey_ref"], s["journey_ref"]);
    assert_ne!(cs["etag"], tag.as_str(), "the session changed");
    // The answer's resources are their retrieves.
    assert_eq!(session_state(&app, &session).await, cs);
    assert_eq!(retrieve(&app, &PAYMENT, &payment).await, p);

    // Exactly one record of each kind, each retrieve equal to its list item.
    assert_eq!(the_one(&app, &PAYMENT, "").await, p);
    let c = the_one(&app, &CAPTURE, "").await;
    assert_eq!(c["payment_intent_ref"], payment.as_str());
    assert_eq!(c["amount"], eur("4498"));
    assert_eq!(c["amount_refunded"], eur("0"));
    is_ts(&c["captured_at"]);
    let o = the_one(&app, &ORDER, "").await;
    let order = text(&o["order_ref"]);
    assert_eq!(o["checkout_session_ref"], session.as_str());
    assert_eq!(o["buyer_ref"], buyer.as_str());
    assert_eq!(o["payment_intent_ref"], payment.as_str());
    assert_eq!(o["amount_total"], eur("4498"));
    assert_eq!(o["status"], "paid");
    assert_eq!(o["line_items"].as_array().map(Vec::len), Some(2), "{o}");
    let i = the_one(&app, &INVOICE, "").await;
    let (year, _) = invoice_number(&i["number"]);
    assert_eq!(year, this_year());
    assert_eq!(i["order_ref"], order.as_str());
    assert_eq!(i["buyer_ref"], buyer.as_str());
    assert!(i["subscription_ref"].is_null());
    assert_eq!(i["amount_total"], eur("4498"));
    assert_eq!(i["status"], "paid");
    is_ts(&i["issued_at"]);
    is_ts(&i["paid_at"]);
    // An `item` line per line item, each naming its price, no period.
    let lines = invoice_lines(&i);
    assert_eq!(lines.len(), 2, "{i}");
    for (price, amount) in [(&a.price, eur("3998")), (&b.price, eur("500"))] {
        let l = lines
            .iter()
            .find(|l| l["price_ref"] == price.as_str())
            .unwrap_or_else(|| panic!("a line of {price}: {i}"));
        assert_eq!(l["kind"], "item", "{i}");
        assert_eq!(l["amount"], amount);
        assert!(
            l["period_start"].is_null() && l["period_end"].is_null(),
            "{l}"
        );
        assert!(!text(&l["description"]).is_empty());
    }
    let ents = records(&app, &ENTITLEMENT, "").await;
    assert_eq!(ents.len(), 2, "one entitlement per product: {ents:?}");
    assert_eq!(
        set(&refs(&ents, "product_ref")),
        set(&[a.product.clone(), b.product.clone()])
    );
    for e in &ents {
        assert_eq!(e["buyer_ref"], buyer.as_str());
        assert_eq!(e["order_ref"], order.as_str());
        assert_eq!(e["status"], "active");
        is_ts(&e["granted_at"]);
        assert!(e["revoked_at"].is_null());
    }
    let by = the_one(&app, &BUYER, "").await;
    assert_eq!(by["buyer_ref"], buyer.as_str());
    assert_eq!(by["email"], "ada@example.com");
    assert_eq!(by["name"], NAME);
    is_ts(&by["created_at"]);
    let j = the_one(&app, &JOURNEY, "").await;
    assert_eq!(j["journey_ref"], journey.as_str());
    assert_eq!(j["buyer_ref"], buyer.as_str());
    assert_eq!(j["status"], "converted");
    let kinds = step_kinds(&j);
    assert_eq!(kinds[0], "session_created", "{j}");
    let succeeded = steps_of(&j, "payment_succeeded");
    assert_eq!(succeeded.len(), 1, "one payment_succeeded step: {j}");
    assert_eq!(succeeded[0]["payment_intent_ref"], payment.as_str());
    for k in ["payment_failed", "action_required", "subscription_started"] {
        assert!(!kinds.iter().any(|x| x == k), "no {k} step: {j}");
    }
    for step in j["steps"].as_array().expect("steps") {
        is_ts(&step["at"]);
    }
    let listed = the_one(&app, &SESSION, "").await;
    assert_eq!(listed, cs);
    for kind in [&METHOD, &SUBSCRIPTION, &CHANGE] {
        assert!(
            list(&app, kind.path).await.is_empty(),
            "nothing in {}",
            kind.path
        );
    }
}

pub(super) async fn other_sandbox_cards_succeed(app: TestApp) {
    let (config, s) = one_time_config(&app).await;
    let session = open_session(&app, &config, "ada@example.com").await;
    let d = pay_ok(&app, &session, card("pm_card_mastercard")).await;
    assert_eq!(d["result"], "retrieve_payment_response");
    card_is(&d["payment"], "mastercard", "4444");
    assert_eq!(d["payment"]["amount"], eur("1999"));
    assert_eq!(d["payment"]["product_refs"], json!([s.product]));
    assert_eq!(d["checkout_session"]["status"], "complete");
    let payment = text(&d["payment"]["payment_intent_ref"]);
    let p = retrieve(&app, &PAYMENT, &payment).await;
    card_is(&p, "mastercard", "4444");
    // The dispute and refund cards' payments succeed (their later
    // behaviour is issue 18's).
    for pm in ["pm_card_dispute", "pm_card_refund_fails"] {
        let session = open_session(&app, &config, "ada@example.com").await;
        let d = pay_ok(&app, &session, card(pm)).await;
        assert_eq!(d["checkout_session"]["status"], "complete", "{pm}");
    }
    assert_eq!(list(&app, CAPTURES).await.len(), 3);
    assert_eq!(list(&app, BUYERS).await.len(), 1, "one buyer, found again");
}

pub(super) async fn declined_cards_write_a_failed_payment_only(app: TestApp) {
    let (config, _) = one_time_config(&app).await;
    let session = open_session(&app, &config, "ada@example.com").await;
    let mut failed = Vec::new();
    for (pm, code) in [
        ("pm_card_declined", "card_declined"),
        ("pm_card_insufficient_funds", "insufficient_funds"),
    ] {
        let d = answered(&pay(&app, &session, card(pm)).await, "failed");
        assert_eq!(d["result"], "retrieve_payment_response", "{pm}");
        assert!(d["subscription"].is_null());
        assert!(d["next_action"].is_null());
        let p = d["payment"].clone();
        assert_eq!(p["failure_code"], code, "{p}");
        assert!(p["captured_at"].is_null(), "{p}");
        assert!(
            p["buyer_ref"].is_null(),
            "a buyer not known yet is not made by a decline: {p}"
        );
        assert_eq!(p["amount"], eur("1999"));
        let payment = text(&p["payment_intent_ref"]);
        let cs = d["checkout_session"].clone();
        assert_eq!(cs["status"], "open", "{pm}");
        assert!(cs["buyer_ref"].is_null());
        assert!(cs["completed_at"].is_null());
        assert_eq!(
            cs["payment_intent_ref"],
            payment.as_str(),
            "the session names its newest payment"
        );
        assert_eq!(session_state(&app, &session).await, cs);
        assert_eq!(retrieve(&app, &PAYMENT, &payment).await, p);
        failed.push(payment);
    }
    let payments = records(&app, &PAYMENT, "").await;
    assert_eq!(payments.len(), 2);
    assert!(payments.iter().all(|p| p["status"] == "failed"));
    // Every record but the payments themselves (and subscription changes).
    for kind in RECORDS
        .iter()
        .filter(|k| k.path != PAYMENTS && k.path != CHANGES)
    {
        assert!(
            list(&app, kind.path).await.is_empty(),
            "a decline makes nothing in {}",
            kind.path
        );
    }
    let j = the_one(&app, &JOURNEY, "").await;
    assert_eq!(j["status"], "open");
    let fails = steps_of(&j, "payment_failed");
    assert_eq!(fails.len(), 2, "{j}");
    assert_eq!(set(&refs(&fails, "payment_intent_ref")), set(&failed));

    // Paying again succeeds, with a new payment.
    let d = pay_ok(&app, &session, card("pm_card_visa")).await;
    let payment = text(&d["payment"]["payment_intent_ref"]);
    assert!(!failed.contains(&payment), "a new payment");
    assert_eq!(d["checkout_session"]["status"], "complete");
    assert_eq!(
        d["checkout_session"]["payment_intent_ref"],
        payment.as_str()
    );
    assert_eq!(list(&app, PAYMENTS).await.len(), 3);
    let c = the_one(&app, &CAPTURE, "").await;
    assert_eq!(c["payment_intent_ref"], payment.as_str());
    assert_eq!(
        the_one(&app, &ORDER, "").await["payment_intent_ref"],
        payment.as_str()
    );
    the_one(&app, &INVOICE, "").await;
    the_one(&app, &ENTITLEMENT, "").await;
    the_one(&app, &BUYER, "").await;
    // The failed payments stay as they were.
    for f in &failed {
        assert_eq!(retrieve(&app, &PAYMENT, f).await["status"], "failed");
    }
    let j = the_one(&app, &JOURNEY, "").await;
    assert_eq!(j["status"], "converted");
    assert_eq!(steps_of(&j, "payment_failed").len(), 2);
    assert_eq!(steps_of(&j, "payment_succeeded").len(), 1);
}

pub(super) async fn pay_validation(app: TestApp) {
    let (config, _) = one_time_config(&app).await;
    let session = open_session(&app, &config, "ada@example.com").await;
    for (body, field) in [
        (card("pm_card_nope"), "payment_method"),
        (card("pm_card_VISA"), "payment_method"),
        (card("card_visa"), "payment_method"),
        (card(""), "payment_method"),
        (card("spm_short"), "payment_method"),
        (json!({"payment_method": 7}), "payment_method"),
        (
            json!({"payment_method": "pm_card_visa", "save_payment_method": "yes"}),
            "save_payment_method",
        ),
        (json!({"authentication": "maybe"}), "authentication"),
        (
            json!({"payment_method": "pm_card_visa", "colour": "blue"}),
            "colour",
        ),
    ] {
        let r = pay(&app, &session, body.clone()).await;
        assert_eq!(r.status, 400, "{body}: {}", r.text);
        invalid(&r, field);
    }
    // Neither a payment method nor an authentication.
    pay(&app, &session, json!({}))
        .await
        .expect_error(400, "validation_failed");
    // The idempotency key is required.
    app.req("POST", &pay_path(&session))
        .json(&card("pm_card_visa"))
        .send()
        .await
        .expect_error(400, "idempotency_key_required");
    // An unknown stored method, an unknown or malformed session.
    pay(&app, &session, card(NO_METHOD))
        .await
        .expect_error(404, "not_found");
    pay(&app, NO_SESSION, card("pm_card_visa"))
        .await
        .expect_error(404, "not_found");
    let r = pay(&app, "cs_short", card("pm_card_visa")).await;
    invalid(&r, "checkout_session_ref");
    // Nothing was written.
    let s = session_state(&app, &session).await;
    assert_eq!(s["status"], "open");
    assert!(s["payment_intent_ref"].is_null());
    no_records(&app).await;
    pay_ok(&app, &session, card("pm_card_visa")).await;
}
