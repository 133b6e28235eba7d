//! Endpoints.

use super::*;

pub(super) async fn endpoint_shapes_and_secret_shown_once(app: TestApp) {
    let r = app
        .post(ENDPOINTS, json!({"url": URL, "description": "orders"}))
        .send()
        .await;
    r.expect(201);
    let d = r.data();
    is_ref(&d["endpoint_ref"], "whep_");
    let e = text(&d["endpoint_ref"]);
    assert_eq!(d["url"], URL);
    assert_eq!(d["description"], "orders");
    assert_eq!(d["url_immutable"], false);
    assert_eq!(d["status"], "active");
    is_ts(&d["created_at"]);
    is_ts(&d["updated_at"]);
    let tag = etag_matches(&r);
    assert_eq!(versions(d), sv(&[(1, "active")]));
    let v1 = &d["secret_versions"][0];
    is_ts(&v1["created_at"]);
    assert!(v1["expires_at"].is_null());
    let secret = revealed(&r, 1);

    // Retrieve and list never show it again.
    let got = get(&app, &ep(&e, "")).await;
    no_secret(&got);
    assert_eq!(etag_matches(&got), tag);
    assert_eq!(*got.data(), without_secrets(d));
    let listed = get(&app, ENDPOINTS).await;
    no_secret(&listed);
    let item = &items(&listed)[0];
    assert_eq!(*item, without_secrets(d));
    assert_eq!(item["etag"], tag.as_str());
    assert_eq!(item["secret_versions"][0]["secret_hint"], &secret[46..]);
}

pub(super) async fn endpoint_create_validation(app: TestApp) {
    let long = format!("https://example.com/{}", "a".repeat(2048));
    for (body, field) in [
        (json!({"url": "not a url"}), "url"),
        (json!({"url": "/relative/path"}), "url"),
        (json!({"url": "ftp://example.com/x"}), "url"),
        (json!({"url": "https://user:pw@example.com/"}), "url"),
        (json!({"url": "https://example.com/#fragment"}), "url"),
        (json!({"url": "https://"}), "url"),
        (json!({ "url": long }), "url"),
        (json!({"url": 5}), "url"),
        (json!({}), "url"),
        (json!({"url": URL, "extra": true}), "extra"),
        (
            json!({"url": URL, "description": "d".repeat(501)}),
            "description",
        ),
    ] {
        let r = app.post(ENDPOINTS, body.clone()).send().await;
        invalid(&r, field);
    }
    // Plain http: accepted in the sandbox, refused in live by default.
    create_endpoint(&app, "http://example.com/hooks").await;
    let live = |url: &str| {
        app.anon("POST", ENDPOINTS)
            .auth(&app.live.secret)
            .idem(&unique_key())
            .json(&json!({ "url": url }))
            .send()
    };
    invalid(&live("http://example.com/hooks").await, "url");
    live(URL).await.expect(201);
    app.req("POST", ENDPOINTS)
        .json(&json!({ "url": URL }))
        .send()
        .await
        .expect_error(400, "idempotency_key_required");
    // Nothing was written by the failures.
    assert_eq!(items(&app.get(ENDPOINTS).send().await).len(), 1);
}

pub(super) async fn endpoint_list_filter_and_cursor(app: TestApp) {
    let mut created = Vec::new();
    for _ in 0..5 {
        created.push(endpoint(&app).await);
    }
    for e in &created[1..3] {
        post_if(&app, &ep(e, "/pause"), "*", json!({}))
            .await
            .expect(200);
    }
    let first = get(&app, &format!("{ENDPOINTS}?limit=2")).await;
    // Created after the first page: never shifts or repeats the walk.
    let later = endpoint(&app).await;
    let cursor = text(&first.data()["next_cursor"]);
    let rest = walk_from(&app, ENDPOINTS, 2, Some(cursor)).await;
    let mut all = items(&first);
    all.extend(rest);
    let mut refs: Vec<String> = all.iter().map(|i| text(&i["endpoint_ref"])).collect();
    assert!(!refs.contains(&later));
    newest_first(&all, "endpoint_ref");
    refs.sort();
    created.sort();
    assert_eq!(refs, created);
    for item in &all {
        assert_eq!(
            item["etag"],
            etag_of(&app, &ep(&text(&item["endpoint_ref"]), "")).await
        );
        assert!(item["secret_versions"][0].get("secret").is_none());
    }
    assert_eq!(walk(&app, ENDPOINTS, 100).await.len(), 6);

    let paused = walk(&app, &format!("{ENDPOINTS}?status=paused"), 1).await;
    assert_eq!(paused.len(), 2);
    assert!(paused.iter().all(|i| i["status"] == "paused"));
    let active = walk(&app, &format!("{ENDPOINTS}?status=active"), 2).await;
    assert_eq!(active.len(), 4);
    assert!(active.iter().all(|i| i["status"] == "active"));
    assert!(walk(&app, &format!("{ENDPOINTS}?status=disabled"), 5)
        .await
        .is_empty());

    // A cursor belongs to its filter.
    let page = get(&app, &format!("{ENDPOINTS}?status=active&limit=1")).await;
    let c = text(&page.data()["next_cursor"]);
    for bad in [
        format!("status=paused&cursor={c}"),
        format!("cursor={c}"),
        "cursor=!!!".to_owned(),
        "status=bogus".to_owned(),
        "status=".to_owned(),
        "limit=0".to_owned(),
        "limit=101".to_owned(),
        "limit=x".to_owned(),
        "colour=blue".to_owned(),
    ] {
        let r = app.get(&format!("{ENDPOINTS}?{bad}")).send().await;
        let field = bad.split('=').next().unwrap();
        let field = if bad.contains("cursor=") {
            "cursor"
        } else {
            field
        };
        invalid(&r, field);
    }
    // Another environment sees none of them.
    let live = app
        .anon("GET", ENDPOINTS)
        .auth(&app.live.secret)
        .send()
        .await;
    assert!(items(&live).is_empty());
}

pub(super) async fn pause_and_resume(app: TestApp) {
    let (e, created) = create_endpoint(&app, URL).await;
    let original = created.etag();
    let pause = ep(&e, "/pause");
    let resume = ep(&e, "/resume");
    // Header checks come first: the key, then the precondition, then the body.
    app.req("POST", &pause)
        .if_match("*")
        .json(&json!({}))
        .send()
        .await
        .expect_error(400, "idempotency_key_required");
    app.post(&pause, json!({"bad": 1}))
        .send()
        .await
        .expect_error(428, "precondition_required");
    invalid(&post_if(&app, &pause, "abc", json!({})).await, "If-Match");
    invalid(
        &post_if(&app, &pause, "*", json!({"reason": "x"})).await,
        "reason",
    );
    post_if(&app, &pause, "\"stale\"", json!({}))
        .await
        .expect_error(412, "precondition_failed");

    let paused = post_if(&app, &pause, &original, json!({})).await;
    paused.expect(200);
    assert_eq!(paused.data()["status"], "paused");
    let tag = etag_matches(&paused);
    assert_ne!(tag, original, "the ETag changes with the endpoint");
    assert_eq!(etag_of(&app, &ep(&e, "")).await, tag);
    assert_eq!(health(&app, &e).await.0, "paused");
    post_if(&app, &pause, &tag, json!({}))
        .await
        .expect_error(422, "semantic_error");
    post_if(&app, &resume, &original, json!({}))
        .await
        .expect_error(412, "precondition_failed");

    // A list of tags matches when one does.
    let resumed = post_if(&app, &resume, &format!("\"nope\", {tag}"), json!({})).await;
    resumed.expect(200);
    assert_eq!(resumed.data()["status"], "active");
    etag_matches(&resumed);
    assert_eq!(health(&app, &e).await.0, "unknown");
    post_if(&app, &resume, "*", json!({}))
        .await
        .expect_error(422, "semantic_error");
    post_if(&app, &pause, "*", json!({})).await.expect(200);
    post_if(&app, &resume, "*", json!({})).await.expect(200);
}
