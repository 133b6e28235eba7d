//! Refused pays.

use super::*;

pub(super) async fn paying_a_complete_or_expired_session_is_refused(app: TestApp) {
    let (config, _) = one_time_config(&app).await;
    let session = open_session(&app, &config, "ada@example.com").await;
    pay_ok(&app, &session, card("pm_card_visa")).await;
    let done = session_state(&app, &session).await;
    for body in [
        card("pm_card_visa"),
        card("pm_card_declined"),
        json!({"authentication": "approve"}),
    ] {
        pay(&app, &session, body)
            .await
            .expect_error(422, "semantic_error");
    }
    assert_eq!(session_state(&app, &session).await, done, "unchanged");
    assert_eq!(list(&app, PAYMENTS).await.len(), 1, "no second charge");
    assert_eq!(list(&app, CAPTURES).await.len(), 1);

    // An expired session (moved past its expiry in the store).
    let late = open_session(&app, &config, "grace@example.com").await;
    expire(&app, &late).await;
    let s = session_state(&app, &late).await;
    assert_eq!(s["status"], "expired", "{s}");
    pay(&app, &late, card("pm_card_visa"))
        .await
        .expect_error(422, "semantic_error");
    let s = session_state(&app, &late).await;
    assert_eq!(s["status"], "expired");
    assert!(s["payment_intent_ref"].is_null());
    assert_eq!(list(&app, PAYMENTS).await.len(), 1);
    // Its journey reads abandoned.
    let journey = text(&s["journey_ref"]);
    let j = retrieve(&app, &JOURNEY, &journey).await;
    assert_eq!(j["status"], "abandoned", "{j}");
    // A complete session never reads expired.
    expire(&app, &session).await;
    assert_eq!(session_state(&app, &session).await["status"], "complete");
}

/// Lists read a session's and a journey's status as their retrieves do
/// (`expired`, `abandoned` once the expiry has passed) and filter on it.
pub(super) async fn expired_sessions_in_lists(app: TestApp) {
    let (config, _) = one_time_config(&app).await;
    let paid = text(
        &paid_session(&app, &config, "ada@example.com").await["checkout_session"]
            ["checkout_session_ref"],
    );
    let late = open_session(&app, &config, "grace@example.com").await;
    expire(&app, &late).await;
    expire(&app, &paid).await;
    let journey = text(&session_state(&app, &late).await["journey_ref"]);
    let item = list(&app, SESSIONS)
        .await
        .into_iter()
        .find(|i| i["checkout_session_ref"] == late.as_str())
        .expect("listed");
    assert_eq!(item["status"], "expired", "{item}");
    let item = list(&app, JOURNEYS)
        .await
        .into_iter()
        .find(|i| i["journey_ref"] == journey.as_str())
        .expect("listed");
    assert_eq!(item["status"], "abandoned", "{item}");
    let only = |v: &String| HashSet::from([v.clone()]);
    let mut wrong = Vec::new();
    for (kind, query, want) in [
        (&SESSION, "status=open", HashSet::new()),
        (&SESSION, "status=expired", only(&late)),
        (&SESSION, "status=complete", only(&paid)),
        (&JOURNEY, "status=open", HashSet::new()),
        (&JOURNEY, "status=abandoned", only(&journey)),
    ] {
        let got = filtered(&app, kind, query.to_owned()).await;
        if got != want {
            wrong.push(format!("{}?{query}: {got:?}, expected {want:?}", kind.path));
        }
    }
    assert!(
        wrong.is_empty(),
        "filters disagree with the status read: {wrong:#?}"
    );
}

pub(super) async fn live_pay_is_unavailable(app: TestApp) {
    let live = app.live.secret.clone();
    let s = sellable_as(&app, &live, eur("1999"), None).await;
    let config = config_as(&app, &live, config_body(vec![line(&s.offer, 1)])).await;
    let r = create_session_as(&app, &live, session_body(&config, "ada@example.com")).await;
    r.expect(201);
    let session = text(&r.data()["checkout_session_ref"]);
    let before = get_as(&app, &live, &at(SESSIONS, &session, ""))
        .await
        .data()
        .clone();
    for body in [
        card("pm_card_visa"),
        json!({"payment_method": "pm_card_visa", "save_payment_method": true}),
        card("pm_card_declined"),
    ] {
        let r = app.post(&pay_path(&session), body).auth(&live).send().await;
        r.expect_error(503, "dependency_unavailable");
        assert!(r.header("retry-after").is_some(), "Retry-After: {r:?}");
    }
    let after = get_as(&app, &live, &at(SESSIONS, &session, ""))
        .await
        .data()
        .clone();
    assert_eq!(after, before, "nothing changed");
    assert_eq!(after["status"], "open");
    for (path, n) in census_as(&app, &live).await {
        assert_eq!(n, 0, "nothing in the live {path}");
    }
    let j = get_as(&app, &live, &at(JOURNEYS, &text(&after["journey_ref"]), "")).await;
    assert_eq!(step_kinds(j.data()), ["session_created"]);
    no_records(&app).await;
}
