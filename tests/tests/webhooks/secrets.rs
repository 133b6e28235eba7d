//! Secrets.

use super::*;

pub(super) async fn secret_rotation_walkthrough(app: TestApp) {
    let (e, created) = create_endpoint(&app, URL).await;
    let rotate = ep(&e, "/secret/rotate");
    let confirm = ep(&e, "/secret/confirm");
    let revoke = ep(&e, "/secret/revoke");
    let s1 = revealed(&created, 1);
    check_signing(&app, &e, &[(&s1, true)]).await;

    // Rotate: v2 pending, shown once; both sign.
    let rotated = post_if(&app, &rotate, &created.etag(), json!({"reason": "yearly"})).await;
    rotated.expect(200);
    let tag = etag_matches(&rotated);
    assert_eq!(
        versions(rotated.data()),
        sv(&[(1, "active"), (2, "pending")])
    );
    let s2 = revealed(&rotated, 2);
    assert_ne!(s1, s2);
    assert!(rotated.data()["secret_versions"][1]["expires_at"].is_null());
    is_ts(&rotated.data()["secret_versions"][1]["created_at"]);
    let got = get(&app, &ep(&e, "")).await;
    no_secret(&got);
    assert_eq!(*got.data(), without_secrets(rotated.data()));
    check_signing(&app, &e, &[(&s1, true), (&s2, true)]).await;
    post_if(&app, &rotate, &tag, json!({"reason": "again"}))
        .await
        .expect_error(422, "semantic_error");

    // Confirm: v2 active, v1 retiring for the grace period; both sign.
    let confirmed = post_if(&app, &confirm, &tag, json!({"reason": "receivers updated"})).await;
    confirmed.expect(200);
    no_secret(&confirmed);
    let tag = etag_matches(&confirmed);
    assert_eq!(
        versions(confirmed.data()),
        sv(&[(1, "retiring"), (2, "active")])
    );
    let expires = Timestamp::parse(&text(&confirmed.data()["secret_versions"][0]["expires_at"]))
        .expect("expires_at");
    let grace_end = Timestamp::now().plus_seconds(24 * 3600).millis();
    assert!(
        (expires.millis() - grace_end).abs() < 60_000,
        "expires_at is now + 24 h"
    );
    check_signing(&app, &e, &[(&s1, true), (&s2, true)]).await;
    post_if(&app, &confirm, &tag, json!({"reason": "again"}))
        .await
        .expect_error(422, "semantic_error");

    // Revoke: v1 revoked, never signs again.
    let revoked = post_if(&app, &revoke, &tag, json!({"reason": "done"})).await;
    revoked.expect(200);
    no_secret(&revoked);
    let tag = etag_matches(&revoked);
    assert_eq!(
        versions(revoked.data()),
        sv(&[(1, "revoked"), (2, "active")])
    );
    check_signing(&app, &e, &[(&s1, false), (&s2, true)]).await;
    post_if(&app, &revoke, &tag, json!({"reason": "again"}))
        .await
        .expect_error(422, "semantic_error");

    // Revoke withdraws a pending version first.
    let rotated = post_if(&app, &rotate, &tag, json!({"reason": "leaked"})).await;
    rotated.expect(200);
    let s3 = revealed(&rotated, 3);
    check_signing(&app, &e, &[(&s1, false), (&s2, true), (&s3, true)]).await;
    let revoked = post_if(&app, &revoke, "*", json!({"reason": "abandon"})).await;
    revoked.expect(200);
    assert_eq!(
        versions(revoked.data()),
        sv(&[(1, "revoked"), (2, "active"), (3, "revoked")])
    );
    check_signing(&app, &e, &[(&s1, false), (&s2, true), (&s3, false)]).await;
}

/// The same walk through a real dispatcher: each stage's delivery carries
/// one signature per signing version, checked by the official verifier.
pub(super) async fn delivered_signatures_follow_rotation(app: TestApp) {
    let receiver = TestReceiver::start(Behaviour::Status(204)).await;
    let (e, created) = create_endpoint(&app, &receiver.url()).await;
    let s1 = revealed(&created, 1);
    let mut s2 = String::new();
    for stage in ["created", "rotate", "confirm", "revoke"] {
        if stage != "created" {
            let r = post_if(
                &app,
                &ep(&e, &format!("/secret/{stage}")),
                "*",
                json!({"reason": stage}),
            )
            .await;
            r.expect(200);
            if stage == "rotate" {
                s2 = revealed(&r, 2);
            }
        }
        let d = test_send(&app, &e, "webhook.test").await;
        dispatched(&app, &text(&d["delivery_ref"]), "succeeded").await;
        let got = receiver.received();
        let req = got.last().expect("a request");
        assert_eq!(req.header("webhook-id"), d["delivery_ref"]);
        let signature = req.header("webhook-signature");
        let verifies = |secret: &str| {
            verifier::verifies(
                secret,
                req.header("webhook-id"),
                req.header("webhook-timestamp"),
                signature,
                &req.body,
            )
        };
        let (v1, v2, count) = match stage {
            "created" => (true, None, 1),
            "revoke" => (false, Some(true), 1),
            _ => (true, Some(true), 2),
        };
        assert_eq!(signature.split(' ').count(), count, "{stage}: {signature}");
        assert_eq!(verifies(&s1), v1, "{stage}: v1");
        if let Some(v2) = v2 {
            assert_eq!(verifies(&s2), v2, "{stage}: v2");
        }
    }
}

pub(super) async fn retiring_secret_expires_after_grace(app: TestApp) {
    let app = TestApp::spawn_with(app.backend, |s| {
        s.webhooks.secret_grace = Duration::from_secs(3600)
    })
    .await;
    let (e, created) = create_endpoint(&app, URL).await;
    let s1 = revealed(&created, 1);
    let rotated = act(&app, &ep(&e, "/secret/rotate")).await;
    let s2 = revealed(&rotated, 2);
    let confirmed = act(&app, &ep(&e, "/secret/confirm")).await;
    confirmed.expect(200);
    let expires = Timestamp::parse(&text(&confirmed.data()["secret_versions"][0]["expires_at"]))
        .expect("expires_at");
    let left = expires.millis() - Timestamp::now().millis();
    assert!(
        (3_590_000..=3_600_000).contains(&left),
        "grace of an hour, {left} ms left"
    );
    check_signing(&app, &e, &[(&s1, true), (&s2, true)]).await;
    app.advance(Duration::from_millis(left as u64 + 200));
    let got = get(&app, &ep(&e, "")).await;
    assert_eq!(versions(got.data()), sv(&[(1, "expired"), (2, "active")]));
    check_signing(&app, &e, &[(&s1, false), (&s2, true)]).await;
    // An expired version is neither pending nor retiring.
    act(&app, &ep(&e, "/secret/revoke"))
        .await
        .expect_error(422, "semantic_error");
}

pub(super) async fn secret_operation_errors(app: TestApp) {
    let e = endpoint(&app).await;
    for op in ["rotate", "confirm", "revoke"] {
        let path = ep(&e, &format!("/secret/{op}"));
        wants_current_tag(&app, &path, "\"stale\"").await;
        for body in [
            json!({}),
            json!({"reason": ""}),
            json!({ "reason": "r".repeat(501) }),
            json!({"reason": 5}),
        ] {
            invalid(&post_if(&app, &path, "*", body).await, "reason");
        }
        invalid(
            &post_if(&app, &path, "*", json!({"reason": "r", "x": 1})).await,
            "x",
        );
    }
    // Nothing pending, nothing to revoke.
    for op in ["confirm", "revoke"] {
        act(&app, &ep(&e, &format!("/secret/{op}")))
            .await
            .expect_error(422, "semantic_error");
    }
    // A 500-character reason is accepted.
    let r = post_if(
        &app,
        &ep(&e, "/secret/rotate"),
        &etag_of(&app, &ep(&e, "")).await,
        json!({ "reason": "r".repeat(500) }),
    )
    .await;
    r.expect(200);
    assert_eq!(versions(r.data()), sv(&[(1, "active"), (2, "pending")]));

    // With a retiring and a pending version, revoke takes the pending one.
    act(&app, &ep(&e, "/secret/confirm")).await.expect(200);
    act(&app, &ep(&e, "/secret/rotate")).await.expect(200);
    let revoke = ep(&e, "/secret/revoke");
    let r = act(&app, &revoke).await;
    assert_eq!(
        versions(r.data()),
        sv(&[(1, "retiring"), (2, "active"), (3, "revoked")])
    );
    let r = act(&app, &revoke).await;
    assert_eq!(
        versions(r.data()),
        sv(&[(1, "revoked"), (2, "active"), (3, "revoked")])
    );
}

/// Contract section 5: of conditional writes racing on one ETag, one wins;
/// each loser gets `precondition_failed` (it read after the winner) or
/// `version_conflict` (it lost between check and write), never an answer
/// decided on a state it was not conditioned on.
pub(super) async fn concurrent_writes_have_one_winner(app: TestApp) {
    for _ in 0..10 {
        for (op, body) in [
            ("/pause", json!({})),
            ("/secret/rotate", json!({"reason": "r"})),
        ] {
            let (e, created) = create_endpoint(&app, URL).await;
            let (path, tag) = (ep(&e, op), created.etag());
            let calls: Vec<_> = (0..8)
                .map(|_| post_if(&app, &path, &tag, body.clone()))
                .collect();
            let results = futures::future::join_all(calls).await;
            let won = results.iter().filter(|r| r.status == 200).count();
            assert_eq!(won, 1, "{op}: {results:?}");
            for r in results.iter().filter(|r| r.status != 200) {
                let code = r.json["error"]["code"].as_str().unwrap_or_default();
                assert!(
                    code == "version_conflict" || code == "precondition_failed",
                    "{op}: {}",
                    r.text
                );
            }
            let secret_versions = if op == "/pause" { 1 } else { 2 };
            let got = get(&app, &ep(&e, "")).await;
            assert_eq!(versions(got.data()).len(), secret_versions, "applied once");
        }
    }
}
