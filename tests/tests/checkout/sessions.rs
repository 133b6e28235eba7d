//! Sessions.

use super::*;

pub(super) async fn session_validation(app: TestApp) {
    let s = sellable(&app, eur("1999"), None).await;
    let draft = draft_config_as(
        &app,
        &app.sandbox.secret,
        config_body(vec![line(&s.offer, 1)]),
    )
    .await;
    let r = create_session(&app, session_body(&draft, "ada@example.com")).await;
    refused(&r, "draft");
    create_session(&app, session_body(NO_CONFIG, "ada@example.com"))
        .await
        .expect_error(404, "not_found");
    let config = published_config(&app, vec![line(&s.offer, 1)]).await;

    let long_local = "a".repeat(245);
    let too_long = format!("{long_local}@example.com");
    for email in [
        "",
        "ab",
        "ada.example.com",
        "ada@example",
        "ada@@example.com",
        "ada@exa@mple.com",
        too_long.as_str(),
    ] {
        let r = create_session(&app, session_body(&config, email)).await;
        assert_eq!(r.status, 400, "{email}: {}", r.text);
        invalid(&r, "buyer.email");
    }
    let email = json!({"email": "ada@example.com"});
    for (body, field) in [
        (json!({"config_ref": config}), "buyer"),
        (json!({"buyer": email}), "config_ref"),
        (
            json!({"config_ref": "cco_short", "buyer": email}),
            "config_ref",
        ),
        (json!({"config_ref": config, "buyer": {}}), "buyer.email"),
        (
            json!({"config_ref": config, "buyer": {"email": 7}}),
            "buyer.email",
        ),
        (
            json!({"config_ref": config, "buyer": {"email": "ada@example.com", "name": ""}}),
            "buyer.name",
        ),
        (
            json!({"config_ref": config, "buyer": {"email": "ada@example.com", "name": "n".repeat(201)}}),
            "buyer.name",
        ),
        (
            json!({"config_ref": config, "buyer": email, "colour": "blue"}),
            "colour",
        ),
        (
            json!({"config_ref": config, "buyer": email, "custom_fields": {"colour": "blue"}}),
            "custom_fields.colour",
        ),
    ] {
        let r = create_session(&app, body.clone()).await;
        assert_eq!(r.status, 400, "{body}: {}", r.text);
        invalid(&r, field);
    }
    assert!(list(&app, SESSIONS).await.is_empty(), "nothing was made");
    assert!(list(&app, JOURNEYS).await.is_empty(), "no journey either");

    // The limits themselves are allowed; the name is optional.
    let longest = format!("{}@example.com", "a".repeat(242));
    assert_eq!(longest.len(), 254);
    for buyer in [
        json!({"email": "a@b.c"}),
        json!({ "email": longest }),
        json!({"email": "ada@example.com", "name": "n".repeat(200)}),
        json!({"email": "ada@example.com", "name": null}),
    ] {
        let r = create_session(&app, json!({"config_ref": config, "buyer": buyer})).await;
        r.expect(201);
        assert_eq!(r.data()["buyer"]["email"], buyer["email"]);
    }
    let r = create_session(
        &app,
        json!({"config_ref": config, "buyer": {"email": "ada@example.com"}}),
    )
    .await;
    r.expect(201);
    assert!(r.data()["buyer"]["name"].is_null(), "{}", r.text);
    // Unknown and malformed sessions.
    app.get(&at(SESSIONS, NO_SESSION, ""))
        .send()
        .await
        .expect_error(404, "not_found");
    let r = app.get(&at(SESSIONS, "cs_short", "")).send().await;
    invalid(&r, "checkout_session_ref");
}

pub(super) async fn session_custom_fields(app: TestApp) {
    let s = sellable(&app, eur("1999"), None).await;
    let body = json!({
        "name": "Checkout",
        "line_items": [line(&s.offer, 1)],
        "success_url": OK_URL,
        "custom_fields": [
            {"key": "company", "label": "Company", "type": "text", "required": true},
            {"key": "seats", "label": "Seats", "type": "numeric"},
            {"key": "size", "label": "Size", "type": "dropdown", "options": ["S", "M", "L"]},
        ],
    });
    let config = config_as(&app, &app.sandbox.secret, body).await;
    let with_fields = |fields: Value| json!({"config_ref": config, "buyer": {"email": "ada@example.com"}, "custom_fields": fields});
    for (fields, field) in [
        (
            json!({"company": "Acme", "colour": "blue"}),
            "custom_fields.colour",
        ),
        (json!({}), "custom_fields.company"),
        (json!({"seats": "3"}), "custom_fields.company"),
        (
            json!({"company": "Acme", "seats": "many"}),
            "custom_fields.seats",
        ),
        (
            json!({"company": "Acme", "size": "XL"}),
            "custom_fields.size",
        ),
        (
            json!({"company": "Acme", "size": "m"}),
            "custom_fields.size",
        ),
    ] {
        let r = create_session(&app, with_fields(fields.clone())).await;
        assert_eq!(r.status, 400, "{fields}: {}", r.text);
        invalid(&r, field);
    }
    // A missing required field, custom_fields absent altogether.
    let r = create_session(
        &app,
        json!({"config_ref": config, "buyer": {"email": "ada@example.com"}}),
    )
    .await;
    invalid(&r, "custom_fields.company");
    assert!(list(&app, SESSIONS).await.is_empty(), "nothing was made");

    let r = create_session(
        &app,
        with_fields(json!({"company": "Acme", "seats": "12", "size": "M"})),
    )
    .await;
    r.expect(201);
    assert_eq!(
        r.data()["custom_fields"],
        json!({"company": "Acme", "seats": "12", "size": "M"}),
        "values are kept as strings"
    );
    let session = text(&r.data()["checkout_session_ref"]);
    assert_eq!(
        session_state(&app, &session).await["custom_fields"],
        json!({"company": "Acme", "seats": "12", "size": "M"})
    );
    // Optional fields may be left out.
    let r = create_session(&app, with_fields(json!({"company": "Acme"}))).await;
    r.expect(201);
    assert_eq!(r.data()["custom_fields"], json!({"company": "Acme"}));
}

pub(super) async fn a_session_uses_the_published_version(app: TestApp) {
    let s = sellable(&app, eur("1000"), None).await;
    let config = published_config(&app, vec![line(&s.offer, 1)]).await;
    // A newer version, not published: sessions keep using version 1.
    app.post(
        &at(CONFIGS, &config, "/versions"),
        json!({"line_items": [line(&s.offer, 3)]}),
    )
    .send()
    .await
    .expect(201);
    let r = create_session(&app, session_body(&config, "ada@example.com")).await;
    r.expect(201);
    assert_eq!(r.data()["config_version"], 1);
    assert_eq!(r.data()["line_items"][0]["quantity"], 1);
    assert_eq!(r.data()["amount_total"], eur("1000"));
    let v1 = text(&r.data()["checkout_session_ref"]);
    app.post(&at(CONFIGS, &config, "/publish"), json!({"version": 2}))
        .send()
        .await
        .expect(200);
    let r = create_session(&app, session_body(&config, "ada@example.com")).await;
    r.expect(201);
    assert_eq!(r.data()["config_version"], 2);
    assert_eq!(r.data()["line_items"][0]["quantity"], 3);
    assert_eq!(r.data()["line_items"][0]["amount"], eur("3000"));
    assert_eq!(r.data()["amount_total"], eur("3000"));
    // The earlier session keeps its version and charges it.
    let d = pay_ok(&app, &v1, card("pm_card_visa")).await;
    assert_eq!(d["payment"]["amount"], eur("1000"));
    assert_eq!(d["checkout_session"]["config_version"], 1);
}

pub(super) async fn a_session_keeps_its_prices(app: TestApp) {
    let s = sellable(&app, eur("1999"), None).await;
    let config = published_config(&app, vec![line(&s.offer, 2)]).await;
    let first = open_session(&app, &config, "ada@example.com").await;
    let before = session_state(&app, &first).await;
    assert_eq!(before["amount_total"], eur("3998"));

    app.post(
        &at(OFFERS, &s.offer, "/reprice"),
        json!({"amount": eur("2999"), "reason": "Yearly price review"}),
    )
    .send()
    .await
    .expect(200);
    assert_eq!(
        session_state(&app, &first).await,
        before,
        "a reprice never changes an open session"
    );
    let r = create_session(&app, session_body(&config, "ada@example.com")).await;
    r.expect(201);
    let second = r.data().clone();
    assert_eq!(second["line_items"][0]["unit_amount"], eur("2999"));
    assert_ne!(second["line_items"][0]["price_ref"], s.price.as_str());
    assert_eq!(second["amount_total"], eur("5998"));

    // A promotion active when a session is created is included.
    let promo = json!({"offer_refs": [s.offer], "discount": {"percent_off": 10}});
    let plan = app.req("POST", PLAN).json(&promo).send().await;
    plan.expect(200);
    app.post(APPLY, promo)
        .if_match(&plan.etag())
        .send()
        .await
        .expect(200);
    let r = create_session(&app, session_body(&config, "ada@example.com")).await;
    r.expect(201);
    let third = r.data().clone();
    assert_eq!(third["line_items"][0]["unit_amount"], eur("2700"));
    assert_eq!(third["line_items"][0]["amount"], eur("5400"));
    assert_eq!(third["amount_total"], eur("5400"));
    let second_ref = text(&second["checkout_session_ref"]);
    assert_eq!(
        session_state(&app, &second_ref).await["amount_total"],
        eur("5998"),
        "a promotion never changes an open session"
    );
    // Each pays its own snapshot.
    for (session, total) in [
        (first.clone(), "3998"),
        (second_ref, "5998"),
        (text(&third["checkout_session_ref"]), "5400"),
    ] {
        let d = pay_ok(&app, &session, card("pm_card_visa")).await;
        assert_eq!(d["payment"]["amount"], eur(total), "{session}");
        assert_eq!(d["checkout_session"]["amount_total"], eur(total));
    }
    let totals: HashSet<String> = list(&app, INVOICES)
        .await
        .iter()
        .map(|i| text(&i["amount_total"]["value"]))
        .collect();
    assert_eq!(
        totals,
        ["3998", "5998", "5400"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    );
}
