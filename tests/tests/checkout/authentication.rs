//! Authentication.

use super::*;

pub(super) async fn authentication_approve_completes_the_payment(app: TestApp) {
    let (config, _) = one_time_config(&app).await;
    let session = open_session(&app, &config, "ada@example.com").await;
    let before = Timestamp::now().plus_seconds(-2);
    let d = answered(
        &pay(&app, &session, card("pm_card_requires_action")).await,
        "requires_action",
    );
    assert_eq!(d["result"], "retrieve_payment_response");
    assert!(d["subscription"].is_null());
    let next = d["next_action"].clone();
    assert_eq!(next["type"], "authenticate", "{d}");
    let expires = ts_of(&next["expires_at"]);
    assert!(
        expires >= before.plus_seconds(3600) && expires <= Timestamp::now().plus_seconds(3602),
        "authentication waits one hour: {next}"
    );
    let p = d["payment"].clone();
    let waiting = p.clone();
    assert_eq!(p["next_action"], next, "the payment names its next action");
    assert!(p["captured_at"].is_null());
    let payment = text(&p["payment_intent_ref"]);
    assert_eq!(d["checkout_session"]["status"], "open");
    assert_eq!(
        d["checkout_session"]["payment_intent_ref"],
        payment.as_str()
    );
    assert_eq!(retrieve(&app, &PAYMENT, &payment).await, p);
    for kind in [&CAPTURE, &ORDER, &INVOICE, &ENTITLEMENT, &BUYER] {
        assert!(list(&app, kind.path).await.is_empty(), "{}", kind.path);
    }
    let j = the_one(&app, &JOURNEY, "").await;
    assert_eq!(steps_of(&j, "action_required").len(), 1, "{j}");
    assert_eq!(j["status"], "open");

    let d = answered(
        &pay(&app, &session, json!({"authentication": "approve"})).await,
        "succeeded",
    );
    assert_eq!(d["result"], "retrieve_payment_response");
    assert!(d["next_action"].is_null());
    let p = d["payment"].clone();
    assert_eq!(
        p["payment_intent_ref"],
        payment.as_str(),
        "the same payment"
    );
    assert!(p["next_action"].is_null(), "{p}");
    assert_eq!(
        p["payment_method"], waiting["payment_method"],
        "the card that needed authentication"
    );
    assert_eq!(p["payment_method"]["brand"], "visa", "{p}");
    is_ts(&p["captured_at"]);
    assert_eq!(d["checkout_session"]["status"], "complete");
    assert_eq!(d["checkout_session"]["buyer_ref"], p["buyer_ref"], "{d}");
    assert_eq!(the_one(&app, &PAYMENT, "").await, p);
    the_one(&app, &CAPTURE, "").await;
    the_one(&app, &ORDER, "").await;
    the_one(&app, &INVOICE, "").await;
    the_one(&app, &BUYER, "").await;
    the_one(&app, &ENTITLEMENT, "").await;
    // Nothing is waiting any more; the session is complete.
    pay(&app, &session, json!({"authentication": "approve"}))
        .await
        .expect_error(422, "semantic_error");
}

pub(super) async fn authentication_decline_and_nothing_waiting(app: TestApp) {
    let (config, _) = one_time_config(&app).await;
    // Nothing waits on a fresh session.
    let idle = open_session(&app, &config, "ada@example.com").await;
    for answer in ["approve", "decline"] {
        pay(&app, &idle, json!({ "authentication": answer }))
            .await
            .expect_error(422, "semantic_error");
    }
    // Nor after a plain decline.
    answered(&pay(&app, &idle, card("pm_card_declined")).await, "failed");
    pay(&app, &idle, json!({"authentication": "approve"}))
        .await
        .expect_error(422, "semantic_error");
    assert_eq!(session_state(&app, &idle).await["status"], "open");

    let session = open_session(&app, &config, "ada@example.com").await;
    let d = answered(
        &pay(&app, &session, card("pm_card_requires_action")).await,
        "requires_action",
    );
    let payment = text(&d["payment"]["payment_intent_ref"]);
    let d = answered(
        &pay(&app, &session, json!({"authentication": "decline"})).await,
        "failed",
    );
    assert_eq!(d["result"], "retrieve_payment_response");
    assert_eq!(d["payment"]["payment_intent_ref"], payment.as_str());
    assert_eq!(d["payment"]["failure_code"], "authentication_failed");
    assert!(d["next_action"].is_null());
    assert_eq!(d["checkout_session"]["status"], "open");
    assert_eq!(retrieve(&app, &PAYMENT, &payment).await["status"], "failed");
    // Once declined, nothing waits.
    pay(&app, &session, json!({"authentication": "approve"}))
        .await
        .expect_error(422, "semantic_error");
    for kind in [&CAPTURE, &ORDER, &INVOICE, &ENTITLEMENT, &BUYER] {
        assert!(list(&app, kind.path).await.is_empty(), "{}", kind.path);
    }
    // The session can still be paid.
    pay_ok(&app, &session, card("pm_card_visa")).await;
}

pub(super) async fn authentication_of_a_subscription(app: TestApp) {
    let (config, s) = monthly_config(&app).await;
    let session = open_session(&app, &config, "ada@example.com").await;
    let d = answered(
        &pay(&app, &session, card("pm_card_requires_action")).await,
        "requires_action",
    );
    assert_eq!(d["result"], "subscription_setup_action_required");
    assert_eq!(d["next_action"]["type"], "authenticate", "{d}");
    is_ts(&d["next_action"]["expires_at"]);
    let sub = d["subscription"].clone();
    has_fields(&sub, SUBSCRIPTION_FIELDS);
    assert_eq!(sub["status"], "incomplete", "{sub}");
    assert_eq!(sub["product_ref"], s.product.as_str());
    let subscription = text(&sub["subscription_ref"]);
    assert_eq!(d["checkout_session"]["status"], "open");
    assert_eq!(
        retrieve(&app, &SUBSCRIPTION, &subscription).await["status"],
        "incomplete"
    );
    assert!(list(&app, CAPTURES).await.is_empty());
    assert!(list(&app, INVOICES).await.is_empty());

    let d = answered(
        &pay(&app, &session, json!({"authentication": "approve"})).await,
        "succeeded",
    );
    assert_eq!(d["result"], "subscription_started");
    assert!(d["next_action"].is_null());
    assert_eq!(d["subscription"]["subscription_ref"], subscription.as_str());
    assert_eq!(d["subscription"]["status"], "active");
    is_ref(&d["subscription"]["stored_payment_method_ref"], "spm_");
    assert_eq!(d["checkout_session"]["status"], "complete");
    assert_eq!(
        d["checkout_session"]["subscription_ref"],
        subscription.as_str()
    );
    let got = the_one(&app, &SUBSCRIPTION, "").await;
    assert_eq!(got["status"], "active");
    assert_eq!(got, d["subscription"]);
    let ch = the_one(&app, &CHANGE, "").await;
    assert_eq!(ch["kind"], "started");
    the_one(&app, &CAPTURE, "").await;
    the_one(&app, &METHOD, "").await;
    the_one(&app, &INVOICE, "").await;
}
