//! Health.

use super::*;

pub(super) async fn health_follows_attempts(app: TestApp) {
    let receiver = TestReceiver::start(Behaviour::Status(204)).await;
    let (e, _) = create_endpoint(&app, &receiver.url()).await;
    assert_eq!(health(&app, &e).await, ("unknown".to_owned(), Value::Null));
    let send = |status: &'static str| {
        let app = &app;
        let e = &e;
        async move {
            let d = test_send(app, e, "invoice.paid").await;
            dispatched(app, &text(&d["delivery_ref"]), status).await
        }
    };
    send("succeeded").await;
    assert_eq!(
        health(&app, &e).await,
        ("healthy".to_owned(), json!("succeeded"))
    );
    receiver.set(Behaviour::Status(500));
    for _ in 0..4 {
        send("failed").await;
    }
    // Four of five failed: under 95 %, but not five failures in a row.
    assert_eq!(
        health(&app, &e).await,
        ("degraded".to_owned(), json!("failed"))
    );
    let failed = send("failed").await;
    assert_eq!(
        health(&app, &e).await,
        ("failing".to_owned(), json!("failed"))
    );
    let a = items(&get(&app, &dl(&text(&failed["delivery_ref"]), "/attempts")).await);
    assert_eq!(a.len(), 1);
    assert_eq!(
        (a[0]["status"].as_str(), a[0]["response_status"].as_u64()),
        (Some("failed"), Some(500))
    );
    assert!(a[0]["next_attempt_at"].is_null(), "the schedule ran out");
    post_if(&app, &ep(&e, "/pause"), "*", json!({}))
        .await
        .expect(200);
    assert_eq!(
        health(&app, &e).await,
        ("paused".to_owned(), json!("failed"))
    );
    post_if(&app, &ep(&e, "/resume"), "*", json!({}))
        .await
        .expect(200);
    assert_eq!(health(&app, &e).await.0, "failing");
}

pub(super) async fn a_disabled_endpoint_holds_until_resumed(app: TestApp) {
    let receiver = TestReceiver::start(Behaviour::Status(410)).await;
    let (e, _) = create_endpoint(&app, &receiver.url()).await;
    let gone = test_send(&app, &e, "payout.paid").await;
    dispatched(&app, &text(&gone["delivery_ref"]), "failed").await;
    let disabled = get(&app, &ep(&e, "")).await;
    assert_eq!(disabled.data()["status"], "disabled", "410 Gone disables");
    assert_eq!(
        health(&app, &e).await,
        ("disabled".to_owned(), json!("failed"))
    );
    let listed = items(&get(&app, &format!("{ENDPOINTS}?status=disabled")).await);
    assert_eq!(listed.len(), 1);
    post_if(&app, &ep(&e, "/pause"), &disabled.etag(), json!({}))
        .await
        .expect_error(422, "semantic_error");
    let held = test_send(&app, &e, "payout.paid").await;
    assert_eq!(held["status"], "held");
    assert_eq!(app.dispatch_due("0s").await.attempted, 0);
    assert_eq!(receiver.count(), 1, "held deliveries are not sent");

    receiver.set(Behaviour::Status(200));
    let resumed = post_if(&app, &ep(&e, "/resume"), &disabled.etag(), json!({})).await;
    resumed.expect(200);
    assert_eq!(resumed.data()["status"], "active");
    dispatched(&app, &text(&held["delivery_ref"]), "succeeded").await;
    assert_eq!(
        health(&app, &e).await,
        ("degraded".to_owned(), json!("succeeded"))
    );
}

pub(super) async fn bodies_expire_after_retention(app: TestApp) {
    let app = TestApp::spawn_with(app.backend, |s| {
        s.webhooks.body_retention = Duration::from_secs(3600)
    })
    .await;
    let e = endpoint(&app).await;
    let d = test_send(&app, &e, "webhook.test").await;
    assert_eq!(body_of(&app, &d).await["body_status"], "available");
    app.advance(Duration::from_secs(3_000));
    assert_eq!(body_of(&app, &d).await["body_status"], "available");
    app.advance(Duration::from_secs(601));
    let b = body_of(&app, &d).await;
    assert_eq!(b["body_status"], "expired");
    assert!(b["payload"].is_null());
    assert_eq!(b["match_reasons"], json!([{"kind": "test_send"}]));
}
