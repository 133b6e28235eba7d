//! Concurrency.

use super::*;

pub(super) async fn concurrent_pays_of_one_session(app: TestApp) {
    let (config, _) = one_time_config(&app).await;
    let session = open_session(&app, &config, "ada@example.com").await;
    let answers =
        futures::future::join_all((0..20).map(|_| pay(&app, &session, card("pm_card_visa")))).await;
    let mut won = Vec::new();
    for r in &answers {
        match r.status {
            200 => won.push(r.clone()),
            409 => {
                r.expect_error(409, "version_conflict");
            }
            422 => {
                r.expect_error(422, "semantic_error");
            }
            s => panic!("unexpected {s}: {}", r.text),
        }
    }
    assert_eq!(won.len(), 1, "exactly one pay completes the session");
    let d = answered(&won[0], "succeeded");
    let payment = text(&d["payment"]["payment_intent_ref"]);
    let payments = records(&app, &PAYMENT, "").await;
    assert_eq!(
        refs(&payments, "payment_intent_ref"),
        std::slice::from_ref(&payment)
    );
    let c = the_one(&app, &CAPTURE, "").await;
    assert_eq!(c["payment_intent_ref"], payment.as_str());
    let o = the_one(&app, &ORDER, "").await;
    assert_eq!(o["payment_intent_ref"], payment.as_str());
    the_one(&app, &INVOICE, "").await;
    the_one(&app, &BUYER, "").await;
    the_one(&app, &ENTITLEMENT, "").await;
    let s = session_state(&app, &session).await;
    assert_eq!(s["status"], "complete");
    assert_eq!(s["payment_intent_ref"], payment.as_str());
}

/// Pays `session` with `body`, retrying a `409` with the same key (a 409
/// keeps nothing: contract 4), until it is decided.
pub(super) async fn pay_decided(app: &TestApp, session: &str, body: Value) -> Resp {
    let key = unique_key();
    billing_tests::poll::wait_until(
        std::time::Duration::from_secs(5),
        || format!("the pay of {session} stayed in conflict"),
        || async {
            let r = pay_keyed(app, session, &key, &body).await;
            if r.status != 409 {
                return Some(r);
            }
            r.expect_error(409, "version_conflict");
            None
        },
    )
    .await
}

/// 50 pays at once after a first one: the 51 invoices are numbered 1 to
/// 51 of the year, each number once (the number is taken last, at each
/// pay's commit: `store::billing::checkout::invoice_numbers`), and each
/// `invoice.paid` event carries its invoice's number.
pub(super) async fn concurrent_pays_number_invoices_consecutively(app: TestApp) {
    let (config, _) = one_time_config(&app).await;
    // One invoice first, to number from.
    paid_session(&app, &config, "first@example.com").await;
    let mut sessions = Vec::new();
    for i in 0..50 {
        sessions.push(open_session(&app, &config, &format!("buyer{i}@example.com")).await);
    }
    let answers = futures::future::join_all(
        sessions
            .iter()
            .map(|s| pay_decided(&app, s, card("pm_card_visa"))),
    )
    .await;
    for r in &answers {
        answered(r, "succeeded");
    }
    let invoices = list(&app, INVOICES).await;
    assert_eq!(invoices.len(), 51);
    let mut numbers: Vec<(u32, u32)> = invoices
        .iter()
        .map(|i| invoice_number(&i["number"]))
        .collect();
    numbers.sort_unstable();
    let distinct: HashSet<&(u32, u32)> = numbers.iter().collect();
    assert_eq!(distinct.len(), 51, "distinct numbers: {numbers:?}");
    for pair in numbers.windows(2) {
        assert_eq!(pair[0].0, pair[1].0, "one year: {numbers:?}");
        assert_eq!(
            pair[0].1 + 1,
            pair[1].1,
            "consecutive, without gaps: {numbers:?}"
        );
    }
    let year = numbers[0].0;
    let expected: Vec<(u32, u32)> = (1..=51).map(|n| (year, n)).collect();
    assert_eq!(numbers, expected, "every number from 1 to 51, once each");
    // No relay runs here: the events are still in the outbox.
    let carried: Vec<(String, String)> = app
        .store
        .outbox_batch(10_000)
        .await
        .expect("the outbox reads")
        .iter()
        .filter(|e| e.public_event_type == "invoice.paid")
        .map(|e| {
            let data: Value = serde_json::from_str(e.data.as_str()).expect("event data");
            (text(&data["invoice_ref"]), text(&data["number"]))
        })
        .collect();
    let mut numbered: Vec<(String, String)> = invoices
        .iter()
        .map(|i| (text(&i["invoice_ref"]), text(&i["number"])))
        .collect();
    let mut carried = carried;
    carried.sort_unstable();
    numbered.sort_unstable();
    assert_eq!(
        carried, numbered,
        "each invoice.paid carries its invoice's number"
    );
    assert_eq!(list(&app, CAPTURES).await.len(), 51);
    assert_eq!(list(&app, BUYERS).await.len(), 51);
}
