//! Idempotency.

use super::*;

pub(super) async fn idempotent_replays(app: TestApp) {
    // Create: the replay never shows the secret again.
    let (first, again) = twice(&app, ENDPOINTS, None, json!({ "url": URL })).await;
    first.expect(201);
    let secret = revealed(&first, 1);
    no_secret(&again);
    assert!(!again.text.contains(&secret));
    assert_eq!(*again.data(), without_secrets(first.data()));
    assert_eq!(again.etag(), first.etag());
    assert_eq!(items(&get(&app, ENDPOINTS).await).len(), 1);
    let e = text(&first.data()["endpoint_ref"]);

    // Same key, other request: a mismatch.
    let key = unique_key();
    for (url, status) in [(URL, 201), ("https://example.org/", 422)] {
        let r = app
            .req("POST", ENDPOINTS)
            .idem(&key)
            .json(&json!({ "url": url }))
            .send()
            .await;
        assert_eq!(r.status, status, "{}", r.text);
    }

    // Rotate: neither is the new secret replayed.
    let rotate = ep(&e, "/secret/rotate");
    let (first, again) = twice(&app, &rotate, Some(&first.etag()), json!({"reason": "r"})).await;
    first.expect(200);
    let s2 = revealed(&first, 2);
    no_secret(&again);
    assert!(!again.text.contains(&s2));
    assert_eq!(*again.data(), without_secrets(first.data()));
    assert_eq!(versions(get(&app, &ep(&e, "")).await.data()).len(), 2);
    // A kept semantic error replays as it was.
    let (first, again) = twice(&app, &rotate, Some("*"), json!({"reason": "r"})).await;
    first.expect_error(422, "semantic_error");
    assert_eq!(again.text, first.text);

    let ops: Vec<(String, Option<&str>, Value, u16)> = vec![
        (ep(&e, "/pause"), Some("*"), json!({}), 200),
        (ep(&e, "/resume"), Some("*"), json!({}), 200),
        (
            ep(&e, "/secret/confirm"),
            Some("*"),
            json!({"reason": "r"}),
            200,
        ),
        (
            ep(&e, "/secret/revoke"),
            Some("*"),
            json!({"reason": "r"}),
            200,
        ),
        (
            ep(&e, "/subscriptions"),
            None,
            sub_body(&app, "invoice.paid", 1),
            201,
        ),
        (
            ep(&e, "/data_profile_grants"),
            None,
            grant_body(&["contact"], &[]),
            201,
        ),
        (
            ep(&e, "/data_profile_grants/revoke"),
            Some("*"),
            json!({"reason": "r"}),
            200,
        ),
        (
            ep(&e, "/test_send"),
            None,
            json!({"public_event_type": "webhook.test"}),
            201,
        ),
    ];
    for (path, tag, body, status) in ops {
        let (first, again) = twice(&app, &path, tag, body).await;
        first.expect(status);
        assert_eq!(again.text, first.text, "{path}");
        assert_eq!(again.header("etag"), first.header("etag"), "{path}");
    }
    assert_eq!(items(&get(&app, &ep(&e, "/deliveries")).await).len(), 1);
    assert_eq!(items(&get(&app, &ep(&e, "/subscriptions")).await).len(), 1);
    assert_eq!(
        items(&get(&app, &ep(&e, "/data_profile_grants")).await).len(),
        1
    );
    let d = text(&items(&get(&app, &ep(&e, "/deliveries")).await)[0]["delivery_ref"]);
    for (path, body) in [
        (dl(&d, "/redrive"), json!({"reason": "r"})),
        (
            BATCH.to_owned(),
            json!({"delivery_refs": [d], "reason": "r"}),
        ),
    ] {
        let (first, again) = twice(&app, &path, Some("*"), body).await;
        first.expect(200);
        assert_eq!(again.text, first.text);
    }
}
