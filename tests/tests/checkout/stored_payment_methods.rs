//! Stored payment methods.

use super::*;

pub(super) async fn saved_payment_methods(app: TestApp) {
    let (config, _) = one_time_config(&app).await;
    let first = open_session(&app, &config, "Ada.Lovelace@Example.com").await;
    let d = pay_ok(
        &app,
        &first,
        json!({"payment_method": "pm_card_visa", "save_payment_method": true}),
    )
    .await;
    let buyer = text(&d["payment"]["buyer_ref"]);
    is_ref(&d["payment"]["stored_payment_method_ref"], "spm_");
    let spm = text(&d["payment"]["stored_payment_method_ref"]);
    let m = the_one(&app, &METHOD, "").await;
    is_stored_visa(&m, &spm, &buyer);
    expiry(&m);
    is_ts(&m["created_at"]);
    assert_eq!(
        the_one(&app, &METHOD, &format!("buyer_ref={buyer}&status=active")).await,
        m
    );

    // A later session of the same buyer, in other letter case, pays with it.
    let second = open_session(&app, &config, "ada.lovelace@EXAMPLE.COM").await;
    let d = pay_ok(&app, &second, card(&spm)).await;
    let p = &d["payment"];
    card_is(p, "visa", "4242");
    assert_eq!(p["buyer_ref"], buyer.as_str(), "the buyer is found again");
    assert_eq!(p["stored_payment_method_ref"], spm.as_str(), "{p}");
    assert_eq!(d["checkout_session"]["buyer_ref"], buyer.as_str());
    assert_eq!(d["checkout_session"]["status"], "complete");
    let b = the_one(&app, &BUYER, "").await;
    assert_eq!(b["buyer_ref"], buyer.as_str());
    assert_eq!(
        b["email"], "Ada.Lovelace@Example.com",
        "e-mails are kept as first given"
    );
    assert_eq!(
        list(&app, METHODS).await.len(),
        1,
        "paying with a stored method stores nothing new"
    );
    assert_eq!(
        list(&app, &format!("{ORDERS}?buyer_ref={buyer}"))
            .await
            .len(),
        2
    );

    // Another buyer cannot use it; nothing is written.
    let other = open_session(&app, &config, "grace@example.com").await;
    let r = pay(&app, &other, card(&spm)).await;
    r.expect_error(422, "semantic_error");
    let s = session_state(&app, &other).await;
    assert_eq!(s["status"], "open");
    assert!(s["payment_intent_ref"].is_null(), "{s}");
    assert!(list(&app, PAYMENTS)
        .await
        .iter()
        .all(|p| p["checkout_session_ref"] != other.as_str()));
    assert_eq!(list(&app, BUYERS).await.len(), 1);
    // That buyer pays with a card and saves it: a second method.
    let d = pay_ok(
        &app,
        &other,
        json!({"payment_method": "pm_card_mastercard", "save_payment_method": true}),
    )
    .await;
    let grace = text(&d["payment"]["buyer_ref"]);
    assert_ne!(grace, buyer);
    let theirs = the_one(&app, &METHOD, &format!("buyer_ref={grace}")).await;
    assert_eq!(theirs["brand"], "mastercard");
    assert_eq!(theirs["last4"], "4444");
    // Ada cannot use Grace's method either.
    let third = open_session(&app, &config, "ada.lovelace@example.com").await;
    pay(
        &app,
        &third,
        card(&text(&theirs["stored_payment_method_ref"])),
    )
    .await
    .expect_error(422, "semantic_error");
    assert_eq!(list(&app, METHODS).await.len(), 2);
    // save_payment_method: false stores nothing.
    let d = pay_ok(
        &app,
        &third,
        json!({"payment_method": "pm_card_visa", "save_payment_method": false}),
    )
    .await;
    assert!(d["payment"]["stored_payment_method_ref"].is_null());
    assert_eq!(list(&app, METHODS).await.len(), 2);
}
