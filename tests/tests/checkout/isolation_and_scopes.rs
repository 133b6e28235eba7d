//! Isolation and scopes.

use super::*;

pub(super) async fn environments_are_isolated(app: TestApp) {
    let (config, _) = monthly_config(&app).await;
    let d = paid_session(&app, &config, "ada@example.com").await;
    let session = text(&d["checkout_session"]["checkout_session_ref"]);
    let mut named = vec![
        (&SESSION, session.clone()),
        (&JOURNEY, text(&d["checkout_session"]["journey_ref"])),
        (&PAYMENT, text(&d["payment"]["payment_intent_ref"])),
        (&BUYER, text(&d["payment"]["buyer_ref"])),
        (&SUBSCRIPTION, text(&d["subscription"]["subscription_ref"])),
        (
            &METHOD,
            text(&d["subscription"]["stored_payment_method_ref"]),
        ),
    ];
    for kind in [&CAPTURE, &ORDER, &INVOICE, &ENTITLEMENT, &CHANGE] {
        let one = the_one(&app, kind, "").await;
        named.push((kind, text(&one[kind.ref_field])));
    }
    let live = app.live.secret.clone();
    for (kind, reference) in &named {
        app.get(&at(kind.path, reference, ""))
            .auth(&live)
            .send()
            .await
            .expect_error(404, "not_found");
        assert!(
            list_as(&app, &live, kind.path).await.is_empty(),
            "nothing in the live {}",
            kind.path
        );
    }
    // Live cannot pay a sandbox session, nor make one of a sandbox config.
    let r = app
        .post(&pay_path(&session), card("pm_card_visa"))
        .auth(&live)
        .send()
        .await;
    assert!(matches!(r.status, 404 | 503), "{}", r.text);
    create_session_as(&app, &live, session_body(&config, "ada@example.com"))
        .await
        .expect_error(404, "not_found");
    // A live filter on a sandbox reference finds nothing.
    let buyer = text(&d["payment"]["buyer_ref"]);
    assert!(
        list_as(&app, &live, &format!("{PAYMENTS}?buyer_ref={buyer}"))
            .await
            .is_empty()
    );
}

pub(super) async fn webhook_buyer_scopes_name_existing_buyers(app: TestApp) {
    let (endpoint, _) = kit::create_endpoint(&app, "https://example.com/hooks").await;
    let path = format!("{ENDPOINTS}/{endpoint}/subscriptions");
    let sub = |scope_ref: &str| {
        json!({"public_event_type": "payment.succeeded", "scope_type": "buyer",
            "scope_ref": scope_ref, "dto_version": 2})
    };
    app.post(&path, sub(NO_BUYER))
        .send()
        .await
        .expect_error(404, "not_found");
    let (config, _) = one_time_config(&app).await;
    let d = paid_session(&app, &config, "ada@example.com").await;
    let buyer = text(&d["payment"]["buyer_ref"]);
    let r = app.post(&path, sub(&buyer)).send().await;
    r.expect(201);
    assert_eq!(r.data()["scope_type"], "buyer");
    assert_eq!(r.data()["scope_ref"], buyer.as_str());
    assert_eq!(
        items(&app.get(&path).send().await).len(),
        1,
        "the refused one was not made"
    );
    // A sandbox buyer is unknown to the live environment.
    let r = app
        .post(ENDPOINTS, json!({"url": "https://example.com/live"}))
        .auth(&app.live.secret)
        .send()
        .await;
    r.expect(201);
    let live_endpoint = text(&r.data()["endpoint_ref"]);
    app.post(
        &format!("{ENDPOINTS}/{live_endpoint}/subscriptions"),
        sub(&buyer),
    )
    .auth(&app.live.secret)
    .send()
    .await
    .expect_error(404, "not_found");
}
