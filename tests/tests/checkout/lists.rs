//! Lists.

use super::*;
use billing_tests::kit::{newest_first, walk_pages};

pub(super) async fn list_filters(app: TestApp) {
    let (one_time, a) = one_time_config(&app).await;
    let (monthly, b) = monthly_config(&app).await;
    // s1: Ada pays; s2: Grace is declined and stays open; s3: Ada subscribes;
    // s4: open, untouched.
    let s1 = paid_session(&app, &one_time, "ada@example.com").await;
    let ada = text(&s1["payment"]["buyer_ref"]);
    let p1 = text(&s1["payment"]["payment_intent_ref"]);
    let s2 = open_session(&app, &one_time, "grace@example.com").await;
    let failed = answered(&pay(&app, &s2, card("pm_card_declined")).await, "failed");
    let p2 = text(&failed["payment"]["payment_intent_ref"]);
    let s3 = paid_session(&app, &monthly, "ADA@example.com").await;
    assert_eq!(s3["payment"]["buyer_ref"], ada.as_str());
    let p3 = text(&s3["payment"]["payment_intent_ref"]);
    let sub = text(&s3["subscription"]["subscription_ref"]);
    let s4 = open_session(&app, &one_time, "grace@example.com").await;
    let cs1 = text(&s1["checkout_session"]["checkout_session_ref"]);
    let cs3 = text(&s3["checkout_session"]["checkout_session_ref"]);

    let q = |kind: &'static Kind, query: &str| filtered(&app, kind, query.to_owned());
    let of = |v: &[&String]| v.iter().map(|s| s.to_string()).collect::<HashSet<String>>();

    // Sessions: status and config_ref.
    assert_eq!(
        q(&SESSION, "status=open").await,
        of(&[&s2, &s4]),
        "open sessions"
    );
    assert_eq!(q(&SESSION, "status=complete").await, of(&[&cs1, &cs3]));
    assert!(q(&SESSION, "status=expired").await.is_empty());
    assert_eq!(
        q(&SESSION, &format!("config_ref={one_time}")).await,
        of(&[&cs1, &s2, &s4])
    );
    assert_eq!(
        q(&SESSION, &format!("config_ref={monthly}&status=complete")).await,
        of(&[&cs3])
    );
    // Payments: status and buyer_ref.
    assert_eq!(q(&PAYMENT, "status=succeeded").await, of(&[&p1, &p3]));
    assert_eq!(q(&PAYMENT, "status=failed").await, of(&[&p2]));
    assert!(q(&PAYMENT, "status=requires_action").await.is_empty());
    assert_eq!(
        q(&PAYMENT, &format!("buyer_ref={ada}")).await,
        of(&[&p1, &p3])
    );
    assert!(q(&PAYMENT, &format!("buyer_ref={NO_BUYER}"))
        .await
        .is_empty());
    // Captures: payment_intent_ref.
    let caps = records(&app, &CAPTURE, &format!("payment_intent_ref={p1}")).await;
    assert_eq!(caps.len(), 1);
    assert!(q(&CAPTURE, &format!("payment_intent_ref={p2}"))
        .await
        .is_empty());
    // Orders and invoices: status and buyer_ref.
    assert_eq!(
        records(&app, &ORDER, &format!("buyer_ref={ada}&status=paid"))
            .await
            .len(),
        2
    );
    assert!(q(&ORDER, "status=refunded").await.is_empty());
    assert_eq!(
        records(&app, &INVOICE, &format!("buyer_ref={ada}"))
            .await
            .len(),
        2
    );
    assert_eq!(q(&INVOICE, "status=paid").await.len(), 2);
    // Entitlements: status, product_ref, buyer_ref.
    let ents = records(&app, &ENTITLEMENT, &format!("product_ref={}", a.product)).await;
    assert_eq!(ents.len(), 1);
    assert_eq!(ents[0]["product_ref"], a.product.as_str());
    assert_eq!(q(&ENTITLEMENT, &format!("buyer_ref={ada}")).await.len(), 2);
    assert_eq!(q(&ENTITLEMENT, "status=active").await.len(), 2);
    assert!(q(&ENTITLEMENT, "status=revoked").await.is_empty());
    // Subscriptions: status, product_ref, buyer_ref.
    for query in [
        "status=active".to_owned(),
        format!("product_ref={}", b.product),
        format!("buyer_ref={ada}"),
    ] {
        assert_eq!(q(&SUBSCRIPTION, &query).await, of(&[&sub]), "{query}");
    }
    assert!(q(&SUBSCRIPTION, "status=incomplete").await.is_empty());
    assert!(q(&SUBSCRIPTION, &format!("product_ref={}", a.product))
        .await
        .is_empty());
    // Subscription changes: subscription_ref.
    let changes = records(&app, &CHANGE, &format!("subscription_ref={sub}")).await;
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0]["subscription_ref"], sub.as_str());
    // Stored payment methods: status and buyer_ref.
    assert_eq!(q(&METHOD, &format!("buyer_ref={ada}")).await.len(), 1);
    assert_eq!(q(&METHOD, "status=active").await.len(), 1);
    assert!(q(&METHOD, "status=detached").await.is_empty());
    // Journeys: status and buyer_ref.
    assert_eq!(q(&JOURNEY, "status=converted").await.len(), 2);
    assert_eq!(q(&JOURNEY, "status=open").await.len(), 2);
    assert_eq!(q(&JOURNEY, &format!("buyer_ref={ada}")).await.len(), 2);
    // Buyers: no filters.
    assert_eq!(records(&app, &BUYER, "").await.len(), 1);

    // Anything else is refused.
    for (path, field) in [
        (format!("{SESSIONS}?buyer_ref={ada}"), "buyer_ref"),
        (format!("{SESSIONS}?status=paid"), "status"),
        (
            format!("{SESSIONS}?config_ref=prd_N5xP3cV8bT1m"),
            "config_ref",
        ),
        (format!("{PAYMENTS}?status=complete"), "status"),
        (
            format!("{PAYMENTS}?product_ref={}", a.product),
            "product_ref",
        ),
        (
            format!("{PAYMENTS}?buyer_ref=cus_N5xP3cV8bT1m"),
            "buyer_ref",
        ),
        (format!("{CAPTURES}?status=paid"), "status"),
        (format!("{CAPTURES}?buyer_ref={ada}"), "buyer_ref"),
        (format!("{ORDERS}?colour=blue"), "colour"),
        (format!("{INVOICES}?status=void"), "status"),
        (
            format!("{ENTITLEMENTS}?payment_intent_ref={p1}"),
            "payment_intent_ref",
        ),
        (format!("{BUYERS}?status=active"), "status"),
        (format!("{BUYERS}?buyer_ref={ada}"), "buyer_ref"),
        (
            format!("{METHODS}?product_ref={}", a.product),
            "product_ref",
        ),
        (format!("{SUBSCRIPTIONS}?status=paused"), "status"),
        (format!("{CHANGES}?status=started"), "status"),
        (
            format!("{CHANGES}?subscription_ref=sch_N5xP3cV8bT1m"),
            "subscription_ref",
        ),
        (format!("{JOURNEYS}?config_ref={one_time}"), "config_ref"),
    ] {
        let r = app.get(&path).send().await;
        assert_eq!(r.status, 400, "{path}: {}", r.text);
        invalid(&r, field);
    }
    // Unknown and malformed references of each kind.
    for kind in [&[&SESSION], RECORDS, &[&JOURNEY]].concat() {
        let unknown = format!("{}N5xP3cV8bT1m", kind.prefix);
        app.get(&at(kind.path, &unknown, ""))
            .send()
            .await
            .expect_error(404, "not_found");
        let r = app.get(&at(kind.path, "prd_N5xP3cV8bT1m", "")).send().await;
        assert_eq!(r.status, 400, "{}: {}", kind.path, r.text);
        r.expect_error(400, "validation_failed");
    }
}

/// The references `kind`'s list holds under `query`.
pub(super) async fn filtered(app: &TestApp, kind: &Kind, query: String) -> HashSet<String> {
    let path = format!("{}?{query}", kind.path);
    set(&refs(&list(app, &path).await, kind.ref_field))
}

pub(super) async fn payments_page_with_cursors(app: TestApp) {
    let (config, _) = one_time_config(&app).await;
    let mut made = Vec::new();
    for i in 0..7 {
        let session = open_session(&app, &config, &format!("b{i}@example.com")).await;
        let pm = if i % 3 == 0 {
            "pm_card_declined"
        } else {
            "pm_card_visa"
        };
        let r = pay(&app, &session, card(pm)).await;
        r.expect(200);
        made.push(text(&r.data()["payment"]["payment_intent_ref"]));
    }
    let (all, pages) = walk_pages(&app, PAYMENTS, 2, None).await;
    assert_eq!(pages, 4, "7 payments, 2 a page");
    let seen = refs(&all, "payment_intent_ref");
    assert_eq!(set(&seen).len(), seen.len(), "each once: {seen:?}");
    assert_eq!(set(&seen), set(&made));
    newest_first(&all, "payment_intent_ref");
    assert_eq!(
        all,
        list(&app, PAYMENTS).await,
        "the walk is the whole list"
    );
    // A filtered walk.
    let (succeeded, _) = walk_pages(&app, &format!("{PAYMENTS}?status=succeeded"), 2, None).await;
    assert_eq!(succeeded.len(), 4);
    assert!(succeeded.iter().all(|p| p["status"] == "succeeded"));
    // A cursor of another filter is refused.
    let r = get(&app, &format!("{PAYMENTS}?limit=2")).await;
    let cursor = text(&r.data()["next_cursor"]);
    let r = app
        .get(&format!("{PAYMENTS}?status=failed&limit=2&cursor={cursor}"))
        .send()
        .await;
    invalid(&r, "cursor");
    let r = app
        .get(&format!("{ORDERS}?limit=2&cursor={cursor}"))
        .send()
        .await;
    invalid(&r, "cursor");
    // Sessions and invoices page too.
    let (sessions, _) = walk_pages(&app, SESSIONS, 3, None).await;
    assert_eq!(sessions.len(), 7);
    newest_first(&sessions, "checkout_session_ref");
    let (invoices, _) = walk_pages(&app, INVOICES, 2, None).await;
    assert_eq!(invoices.len(), 4);
    newest_first(&invoices, "invoice_ref");
}
