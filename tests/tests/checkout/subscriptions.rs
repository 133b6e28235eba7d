//! Subscriptions.

use super::*;

pub(super) async fn a_recurring_config_starts_a_subscription(app: TestApp) {
    let monthly = sellable(&app, eur("999"), Some("month")).await;
    let once = sellable(&app, eur("2500"), None).await;
    let config = published_config(&app, vec![line(&monthly.offer, 1), line(&once.offer, 1)]).await;
    let r = create_session(&app, session_body(&config, "ada@example.com")).await;
    r.expect(201);
    assert_eq!(r.data()["mode"], "subscription");
    assert_eq!(r.data()["amount_total"], eur("3499"));
    let session = text(&r.data()["checkout_session_ref"]);

    let d = pay_ok(&app, &session, card("pm_card_visa")).await;
    assert_eq!(d["result"], "subscription_started");
    assert!(d["next_action"].is_null());
    let p = d["payment"].clone();
    assert_eq!(
        p["amount"],
        eur("3499"),
        "one-time items with the first period"
    );
    let buyer = text(&p["buyer_ref"]);
    let sub = d["subscription"].clone();
    has_fields(&sub, SUBSCRIPTION_FIELDS);
    is_ref(&sub["subscription_ref"], "sub_");
    let subscription = text(&sub["subscription_ref"]);
    assert_eq!(sub["buyer_ref"], buyer.as_str());
    assert_eq!(sub["price_ref"], monthly.price.as_str());
    assert_eq!(sub["product_ref"], monthly.product.as_str());
    assert_eq!(sub["status"], "active");
    is_ts(&sub["started_at"]);
    assert!(sub["canceled_at"].is_null());
    let start = text(&sub["current_period_start"]);
    is_ts(&sub["current_period_start"]);
    assert_eq!(
        ts_of(&sub["current_period_end"]),
        one_month_after(&start),
        "a period is one month: {sub}"
    );
    // Recurring items always store the payment method.
    is_ref(&sub["stored_payment_method_ref"], "spm_");
    let spm = text(&sub["stored_payment_method_ref"]);
    assert_eq!(p["stored_payment_method_ref"], spm.as_str());
    let m = the_one(&app, &METHOD, "").await;
    is_stored_visa(&m, &spm, &buyer);

    let cs = d["checkout_session"].clone();
    assert_eq!(cs["status"], "complete");
    assert_eq!(cs["subscription_ref"], subscription.as_str());
    assert_eq!(session_state(&app, &session).await, cs);
    assert_eq!(the_one(&app, &SUBSCRIPTION, "").await, sub);
    let ch = the_one(&app, &CHANGE, "").await;
    assert_eq!(ch["subscription_ref"], subscription.as_str());
    assert_eq!(ch["kind"], "started");
    assert_eq!(ch["to_price_ref"], monthly.price.as_str());
    is_ts(&ch["effective_at"]);
    let i = the_one(&app, &INVOICE, "").await;
    assert_eq!(i["subscription_ref"], subscription.as_str());
    assert_eq!(i["amount_total"], eur("3499"));
    // The first period is a `period` line with its bounds and price; the
    // one-time item an `item` line.
    let lines = invoice_lines(&i);
    assert_eq!(lines.len(), 2, "{i}");
    let line_of = |price: &str| {
        lines
            .iter()
            .find(|l| l["price_ref"] == price)
            .unwrap_or_else(|| panic!("a line of {price}: {i}"))
    };
    let period = line_of(&monthly.price);
    assert_eq!(period["kind"], "period", "{i}");
    assert_eq!(period["amount"], eur("999"));
    assert_eq!(period["period_start"], sub["current_period_start"]);
    assert_eq!(period["period_end"], sub["current_period_end"]);
    let item = line_of(&once.price);
    assert_eq!(item["kind"], "item", "{i}");
    assert_eq!(item["amount"], eur("2500"));
    assert!(
        item["period_start"].is_null() && item["period_end"].is_null(),
        "{i}"
    );
    assert_eq!(records(&app, &ENTITLEMENT, "").await.len(), 2);
    the_one(&app, &CAPTURE, "").await;
    the_one(&app, &ORDER, "").await;
    let j = the_one(&app, &JOURNEY, "").await;
    assert_eq!(j["status"], "converted");
    assert_eq!(steps_of(&j, "subscription_started").len(), 1, "{j}");
    assert_eq!(steps_of(&j, "payment_succeeded").len(), 1, "{j}");

    // A yearly price: one year later.
    let yearly = sellable(&app, eur("9900"), Some("year")).await;
    let yearly_config = published_config(&app, vec![line(&yearly.offer, 1)]).await;
    let d = paid_session(&app, &yearly_config, "grace@example.com").await;
    let sub = &d["subscription"];
    let start = text(&sub["current_period_start"]);
    let year: i32 = start[..4].parse().expect("year");
    let (month, day): (u32, u32) = (
        start[5..7].parse().expect("month"),
        start[8..10].parse().expect("day"),
    );
    let day = day.min(days_in_month(year + 1, month));
    let end = format!("{:04}-{month:02}-{day:02}{}", year + 1, &start[10..]);
    assert_eq!(
        ts_of(&sub["current_period_end"]),
        Timestamp::parse(&end).expect("end"),
        "a period is one year: {sub}"
    );
    assert_eq!(list(&app, SUBSCRIPTIONS).await.len(), 2);
    assert_eq!(list(&app, METHODS).await.len(), 2);
}
