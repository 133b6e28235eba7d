//! Deliveries.

use super::*;

pub(super) async fn deliveries_and_their_views(app: TestApp) {
    let e = endpoint(&app).await;
    assert!(items(&get(&app, &ep(&e, "/deliveries")).await).is_empty());
    let d = test_send(&app, &e, "webhook.test").await;
    is_ref(&d["delivery_ref"], "whd_");
    is_ref(&d["event_ref"], "evt_");
    assert_eq!(d["endpoint_ref"], e.as_str());
    assert_eq!(d["public_event_type"], "webhook.test");
    assert_eq!(d["status"], "pending");
    assert_eq!(d["diagnostic"], true);
    assert_eq!(d["dto_version"], 1);
    assert_eq!(d["generation"], 1);
    is_ts(&d["created_at"]);
    let delivery = text(&d["delivery_ref"]);
    let got = get(&app, &dl(&delivery, "")).await;
    etag_matches(&got);
    assert_eq!(*got.data(), d);

    let b = body_of(&app, &d).await;
    assert_eq!(b["delivery_ref"], delivery.as_str());
    assert_eq!(b["body_status"], "available");
    assert_eq!(b["match_reasons"], json!([{"kind": "test_send"}]));
    let p = &b["payload"];
    assert_eq!(p["event_ref"], d["event_ref"]);
    assert_eq!(p["public_event_type"], "webhook.test");
    assert_eq!(p["dto_version"], 1);
    assert_eq!(p["environment_ref"], app.sandbox.environment_ref.as_str());
    is_ts(&p["occurred_at"]);
    assert_eq!(p["data"], catalogue::example("webhook.test", 1).unwrap());

    let attempts = get(&app, &dl(&delivery, "/attempts")).await;
    assert!(items(&attempts).is_empty());
    assert_eq!(attempts.data()["has_more"], false);
    assert!(attempts.data()["next_cursor"].is_null());
    for bad in ["cursor=!!!", "limit=0", "limit=101", "status=x"] {
        let r = app
            .get(&format!("{}?{bad}", dl(&delivery, "/attempts")))
            .send()
            .await;
        invalid(&r, bad.split('=').next().unwrap());
    }

    // Every type of the catalogue can be test-sent, in its newest version.
    for t in catalogue::all() {
        let d = test_send(&app, &e, t.name).await;
        assert_eq!(d["public_event_type"], t.name);
        assert_eq!(
            d["dto_version"],
            t.dto_versions.iter().max().copied().unwrap()
        );
        assert_eq!(d["diagnostic"], true);
    }
    let all = walk(&app, &ep(&e, "/deliveries"), 7).await;
    assert_eq!(all.len(), catalogue::all().len() + 1);
    newest_first(&all, "delivery_ref");
    let refs: HashSet<String> = all.iter().map(|d| text(&d["delivery_ref"])).collect();
    assert_eq!(refs.len(), all.len());
    for item in all.iter().take(3) {
        let r = get(&app, &dl(&text(&item["delivery_ref"]), "")).await;
        assert_eq!(item["etag"], r.etag().as_str());
    }

    // A cursor belongs to its endpoint.
    let other = endpoint(&app).await;
    let page = get(&app, &format!("{}?limit=1", ep(&e, "/deliveries"))).await;
    let c = text(&page.data()["next_cursor"]);
    invalid(
        &app.get(&format!("{}?cursor={c}", ep(&other, "/deliveries")))
            .send()
            .await,
        "cursor",
    );
    invalid(
        &app.get(&format!("{}?limit=500", ep(&e, "/deliveries")))
            .send()
            .await,
        "limit",
    );

    for (body, field) in [
        (
            json!({"public_event_type": "payment.exploded"}),
            "public_event_type",
        ),
        (json!({"public_event_type": 1}), "public_event_type"),
        (json!({}), "public_event_type"),
        (json!({"public_event_type": "webhook.test", "x": 1}), "x"),
    ] {
        invalid(&app.post(&ep(&e, "/test_send"), body).send().await, field);
    }
}

pub(super) async fn pause_holds_and_resume_releases(app: TestApp) {
    let (e, created) = create_endpoint(&app, URL).await;
    assert_eq!(health(&app, &e).await, ("unknown".to_owned(), Value::Null));
    let d1 = test_send(&app, &e, "order.created").await;
    assert_eq!(d1["status"], "pending");
    let first = text(&d1["delivery_ref"]);
    // The first delivery makes the url immutable (and moves the ETag).
    let got = get(&app, &ep(&e, "")).await;
    assert_eq!(got.data()["url_immutable"], true);
    assert_ne!(got.etag(), created.etag());
    assert_eq!(
        health(&app, &e).await,
        ("unknown".to_owned(), json!("pending"))
    );

    // Redrive of a pending delivery changes nothing.
    let r = post_if(
        &app,
        &dl(&first, "/redrive"),
        &text(&d1["etag"]),
        json!({"reason": "r"}),
    )
    .await;
    r.expect(200);
    assert_eq!(
        r.data(),
        &json!({"delivery_ref": first, "outcome": "already_pending"})
    );
    assert_eq!(status_of(&app, &first).await, d1);

    post_if(&app, &ep(&e, "/pause"), &got.etag(), json!({}))
        .await
        .expect(200);
    assert_eq!(health(&app, &e).await.0, "paused");
    let d2 = test_send(&app, &e, "order.created").await;
    assert_eq!(d2["status"], "held");
    assert_eq!(d2["generation"], 1);
    let held = text(&d2["delivery_ref"]);
    assert_eq!(health(&app, &e).await, ("paused".to_owned(), json!("held")));
    let r = act(&app, &dl(&held, "/redrive")).await;
    assert_eq!(r.data()["outcome"], "already_pending");
    assert_eq!(status_of(&app, &held).await["status"], "held");

    post_if(&app, &ep(&e, "/resume"), "*", json!({}))
        .await
        .expect(200);
    let released = status_of(&app, &held).await;
    assert_eq!(released["status"], "pending");
    assert_eq!(released["generation"], 1);
    assert_ne!(released["etag"], d2["etag"], "release changes the delivery");
    assert_eq!(status_of(&app, &first).await["status"], "pending");
    post_if(
        &app,
        &dl(&held, "/redrive"),
        &text(&d2["etag"]),
        json!({"reason": "r"}),
    )
    .await
    .expect_error(412, "precondition_failed");
    assert_eq!(
        health(&app, &e).await,
        ("unknown".to_owned(), json!("pending"))
    );
    assert_eq!(get(&app, &ep(&e, "")).await.data()["url_immutable"], true);
}

/// A delivery queued before the pause is held, not sent, until resumed.
pub(super) async fn a_paused_endpoint_receives_nothing(app: TestApp) {
    let receiver = TestReceiver::start(Behaviour::Status(200)).await;
    let (e, _) = create_endpoint(&app, &receiver.url()).await;
    let d = test_send(&app, &e, "entitlement.granted").await;
    let d = text(&d["delivery_ref"]);
    post_if(&app, &ep(&e, "/pause"), "*", json!({}))
        .await
        .expect(200);
    assert_eq!(app.dispatch_due("0s").await.attempted, 0);
    assert_eq!(status_of(&app, &d).await["status"], "held");
    assert_eq!(receiver.count(), 0);
    post_if(&app, &ep(&e, "/resume"), "*", json!({}))
        .await
        .expect(200);
    assert_eq!(app.dispatch_due("0s").await.attempted, 1);
    assert_eq!(status_of(&app, &d).await["status"], "succeeded");
    assert_eq!(receiver.count(), 1);
}

pub(super) async fn redrive_single_and_batch(app: TestApp) {
    let receiver = TestReceiver::start(Behaviour::Status(200)).await;
    let (e, _) = create_endpoint(&app, &receiver.url()).await;
    let mut ds = Vec::new();
    for _ in 0..3 {
        let d = test_send(&app, &e, "refund.created").await;
        ds.push(text(&d["delivery_ref"]));
    }
    assert_eq!(app.dispatch_due("0s").await.attempted, 3);
    let mut done = Vec::new();
    for d in &ds {
        let d = status_of(&app, d).await;
        assert_eq!(d["status"], "succeeded");
        done.push(d);
    }

    // Attempts of a delivered one.
    let a = items(&get(&app, &dl(&ds[0], "/attempts")).await);
    let first = a.clone();
    assert_eq!(a.len(), 1);
    is_ref(&a[0]["attempt_ref"], "wha_");
    assert_eq!(a[0]["delivery_ref"], ds[0].as_str());
    assert_eq!(
        (a[0]["generation"].as_u64(), a[0]["attempt_number"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(a[0]["status"], "succeeded");
    assert_eq!(a[0]["response_status"], 200);
    assert!(a[0]["duration_ms"].is_i64());
    is_ts(&a[0]["started_at"]);
    assert!(a[0]["next_attempt_at"].is_null());
    assert_eq!(
        health(&app, &e).await,
        ("healthy".to_owned(), json!("succeeded"))
    );

    // Single redrive: the delivery's ETag.
    let path = dl(&ds[0], "/redrive");
    let old = text(&done[0]["etag"]);
    wants_current_tag(&app, &path, "\"stale\"").await;
    for body in [
        json!({}),
        json!({"reason": ""}),
        json!({ "reason": "x".repeat(501) }),
    ] {
        invalid(&post_if(&app, &path, &old, body).await, "reason");
    }
    let r = post_if(&app, &path, &old, json!({ "reason": "x".repeat(500) })).await;
    r.expect(200);
    assert_eq!(
        r.data(),
        &json!({"delivery_ref": ds[0], "outcome": "queued"})
    );
    let now = status_of(&app, &ds[0]).await;
    assert_eq!(
        (now["status"].as_str(), now["generation"].as_u64()),
        (Some("pending"), Some(2))
    );
    assert_ne!(now["etag"], old.as_str());
    post_if(&app, &path, &old, json!({"reason": "again"}))
        .await
        .expect_error(412, "precondition_failed");

    // Paused: the new generation is held.
    post_if(&app, &ep(&e, "/pause"), "*", json!({}))
        .await
        .expect(200);
    let r = post_if(
        &app,
        &dl(&ds[1], "/redrive"),
        &text(&done[1]["etag"]),
        json!({"reason": "r"}),
    )
    .await;
    assert_eq!(r.data()["outcome"], "held");
    let held = status_of(&app, &ds[1]).await;
    assert_eq!(
        (held["status"].as_str(), held["generation"].as_u64()),
        (Some("held"), Some(2))
    );
    post_if(&app, &ep(&e, "/resume"), "*", json!({}))
        .await
        .expect(200);

    // Batch: unlisted or stale ETags fail their precondition, unknown refs
    // are not found, results follow the request order.
    let unknown = Ref::generate(Prefix::WebhookDelivery).into_string();
    let tags = format!("{}, {old}", text(&done[2]["etag"]));
    let r = post_if(
        &app,
        BATCH,
        &tags,
        json!({"delivery_refs": [ds[2], unknown, ds[0], ds[1]], "reason": "replay"}),
    )
    .await;
    r.expect(200);
    assert_eq!(
        r.data()["results"],
        json!([
            {"delivery_ref": ds[2], "outcome": "queued"},
            {"delivery_ref": unknown, "outcome": "not_found"},
            {"delivery_ref": ds[0], "outcome": "precondition_failed"},
            {"delivery_ref": ds[1], "outcome": "precondition_failed"},
        ])
    );
    assert_eq!(status_of(&app, &ds[2]).await["generation"], 2);
    assert_eq!(status_of(&app, &ds[0]).await, now, "nothing changed");
    let r = post_if(
        &app,
        BATCH,
        "*",
        json!({"delivery_refs": [ds[1], ds[0]], "reason": "replay"}),
    )
    .await;
    assert_eq!(
        r.data()["results"],
        json!([
            {"delivery_ref": ds[1], "outcome": "already_pending"},
            {"delivery_ref": ds[0], "outcome": "already_pending"},
        ])
    );

    // Generation 2 goes out; attempts page newest first.
    assert_eq!(app.dispatch_due("0s").await.attempted, 3);
    for d in &ds {
        let s = status_of(&app, d).await;
        assert_eq!(
            (s["status"].as_str(), s["generation"].as_u64()),
            (Some("succeeded"), Some(2))
        );
    }
    let a = walk(&app, &dl(&ds[0], "/attempts"), 1).await;
    let gens: Vec<(u64, u64)> = a
        .iter()
        .map(|x| {
            (
                x["generation"].as_u64().unwrap(),
                x["attempt_number"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(gens, vec![(2, 1), (1, 1)]);
    // The first generation's success reads as it did before the redrive.
    assert_eq!(a[1], first[0]);
    assert_ne!(a[0]["attempt_ref"], a[1]["attempt_ref"]);
    assert_eq!(receiver.count(), 6);
    let page = get(&app, &format!("{}?limit=1", dl(&ds[0], "/attempts"))).await;
    let c = text(&page.data()["next_cursor"]);
    invalid(
        &app.get(&format!("{}?cursor={c}", dl(&ds[1], "/attempts")))
            .send()
            .await,
        "cursor",
    );
}

pub(super) async fn batch_redrive_validation(app: TestApp) {
    let e = endpoint(&app).await;
    let d = text(&test_send(&app, &e, "webhook.test").await["delivery_ref"]);
    let unknown = |n: usize| -> Vec<String> {
        (0..n)
            .map(|_| Ref::generate(Prefix::WebhookDelivery).into_string())
            .collect()
    };
    for (body, field) in [
        (json!({"delivery_refs": [], "reason": "r"}), "delivery_refs"),
        (
            json!({"delivery_refs": unknown(101), "reason": "r"}),
            "delivery_refs",
        ),
        (
            json!({"delivery_refs": [d, d], "reason": "r"}),
            "delivery_refs.1",
        ),
        (
            json!({"delivery_refs": ["whep_AAAAAAAAAAAA"], "reason": "r"}),
            "delivery_refs.0",
        ),
        (
            json!({"delivery_refs": [d, "whd_short"], "reason": "r"}),
            "delivery_refs.1",
        ),
        (json!({"delivery_refs": d, "reason": "r"}), "delivery_refs"),
        (json!({"reason": "r"}), "delivery_refs"),
        (json!({"delivery_refs": [d]}), "reason"),
        (json!({"delivery_refs": [d], "reason": ""}), "reason"),
        (
            json!({"delivery_refs": [d], "reason": "r".repeat(501)}),
            "reason",
        ),
        (json!({"delivery_refs": [d], "reason": "r", "x": 1}), "x"),
    ] {
        invalid(&post_if(&app, BATCH, "*", body).await, field);
    }
    let body = json!({"delivery_refs": [d], "reason": "r"});
    app.post(BATCH, body.clone())
        .send()
        .await
        .expect_error(428, "precondition_required");
    invalid(
        &post_if(&app, BATCH, "nope", body.clone()).await,
        "If-Match",
    );
    app.req("POST", BATCH)
        .if_match("*")
        .json(&body)
        .send()
        .await
        .expect_error(400, "idempotency_key_required");
    // 100 is the most; every result in request order.
    let mut refs = unknown(99);
    refs.insert(50, d.clone());
    let r = post_if(
        &app,
        BATCH,
        "*",
        json!({"delivery_refs": refs, "reason": "r".repeat(500)}),
    )
    .await;
    r.expect(200);
    let results = r.data()["results"].as_array().unwrap();
    let got: Vec<String> = results.iter().map(|x| text(&x["delivery_ref"])).collect();
    assert_eq!(got, refs);
    for (i, x) in results.iter().enumerate() {
        let want = if i == 50 {
            "already_pending"
        } else {
            "not_found"
        };
        assert_eq!(x["outcome"], want);
    }
}
