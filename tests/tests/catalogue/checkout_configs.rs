//! Checkout configs.

use super::*;

pub(super) async fn checkout_configs(app: TestApp) {
    let o1 = offer_ref(&app, eur("1999"), None).await;
    let o2 = offer_ref(&app, eur("500"), None).await;
    let m = offer_ref(&app, eur("900"), Some("month")).await;

    let r = create_config(
        &app,
        json!({"name": "Spring sale", "line_items": [line(&o1, 2), line(&o2, 1)], "success_url": OK_URL}),
    )
    .await;
    r.expect(201);
    let tag = etag_matches(&r);
    let c = r.data().clone();
    has_fields(&c, CONFIG_FIELDS);
    is_ref(&c["config_ref"], "cco_");
    assert_eq!(c["name"], "Spring sale");
    assert_eq!(c["status"], "draft");
    assert_eq!(c["current_version"], 1);
    assert!(c["published_version"].is_null());
    assert_eq!(lines_of(&c), vec![(o1.clone(), 2), (o2.clone(), 1)], "{c}");
    assert_eq!(c["mode"], "payment");
    assert_eq!(c["success_url"], OK_URL);
    assert!(c["cancel_url"].is_null());
    assert_eq!(c["custom_fields"], json!([]));
    is_ts(&c["created_at"]);
    is_ts(&c["updated_at"]);
    let cfg = text(&c["config_ref"]);
    let got = get(&app, &at(CONFIGS, &cfg, "")).await;
    assert_eq!(etag_matches(&got), tag);
    assert_eq!(*got.data(), c);

    // Any recurring item makes a subscription.
    let r = create_config(
        &app,
        json!({"name": "Membership", "line_items": [line(&o1, 1), line(&m, 1)],
            "success_url": OK_URL, "cancel_url": "http://example.com/cancel"}),
    )
    .await;
    r.expect(201);
    assert_eq!(r.data()["mode"], "subscription");
    assert_eq!(r.data()["cancel_url"], "http://example.com/cancel");

    // A body's mode must agree.
    for (items, mode) in [
        (vec![line(&o1, 1)], "payment"),
        (vec![line(&m, 1)], "subscription"),
    ] {
        let r = create_config(&app, with(config_body(items), "mode", json!(mode))).await;
        r.expect(201);
        assert_eq!(r.data()["mode"], mode);
    }
    for (items, mode) in [
        (vec![line(&o1, 1)], "subscription"),
        (vec![line(&m, 1)], "payment"),
        (vec![line(&o1, 1), line(&m, 1)], "payment"),
    ] {
        create_config(&app, with(config_body(items), "mode", json!(mode)))
            .await
            .expect_error(422, "semantic_error");
    }

    // The other fields.
    let base = config_body(vec![line(&o1, 1)]);
    for (body, field) in [
        (with(base.clone(), "mode", json!("rental")), "mode"),
        (with(base.clone(), "name", json!("")), "name"),
        (with(base.clone(), "name", json!("n".repeat(201))), "name"),
        (without(base.clone(), "name"), "name"),
        (without(base.clone(), "success_url"), "success_url"),
        (
            with(base.clone(), "success_url", json!("ftp://example.com/ok")),
            "success_url",
        ),
        (
            with(base.clone(), "success_url", json!("/ok")),
            "success_url",
        ),
        (
            with(
                base.clone(),
                "success_url",
                json!(format!("https://example.com/{}", "a".repeat(2000))),
            ),
            "success_url",
        ),
        (
            with(base.clone(), "cancel_url", json!("not a url")),
            "cancel_url",
        ),
        (with(base.clone(), "theme", json!("dark")), "theme"),
    ] {
        let r = create_config(&app, body.clone()).await;
        assert_eq!(r.status, 400, "{body}: {}", r.text);
        invalid(&r, field);
    }
    let r = create_config(&app, with(base.clone(), "name", json!("n".repeat(200)))).await;
    r.expect(201);
}

pub(super) async fn checkout_config_line_items(app: TestApp) {
    let eur1 = offer_ref(&app, eur("1999"), None).await;
    let usd = offer_ref(&app, money("1999", "USD"), None).await;
    let month = offer_ref(&app, eur("900"), Some("month")).await;
    let month2 = offer_ref(&app, eur("1900"), Some("month")).await;
    let year = offer_ref(&app, eur("9000"), Some("year")).await;

    for (items, field) in [
        (vec![], "line_items"),
        (vec![line(&eur1, 0)], "line_items"),
        (vec![line(&eur1, 1001)], "line_items"),
        (vec![line(&eur1, 1), line(&eur1, 2)], "line_items"),
        (vec![line("ofr_short", 1)], "line_items"),
        (vec![json!({"offer_ref": eur1})], "line_items"),
        (
            vec![json!({"offer_ref": eur1, "quantity": 1.5})],
            "line_items",
        ),
        (
            vec![json!({"offer_ref": eur1, "quantity": 1, "price": 5})],
            "line_items",
        ),
    ] {
        let body = config_body(items);
        let r = create_config(&app, body.clone()).await;
        assert_eq!(r.status, 400, "{body}: {}", r.text);
        invalid_under(&r, field);
    }
    create_config(&app, config_body(vec![line(NO_OFFER, 1)]))
        .await
        .expect_error(404, "not_found");
    for items in [
        vec![line(&eur1, 1), line(&usd, 1)],
        vec![line(&month, 1), line(&year, 1)],
        vec![line(&eur1, 1), line(&month, 1), line(&year, 1)],
    ] {
        let body = config_body(items);
        let r = create_config(&app, body.clone()).await;
        assert_eq!(r.status, 422, "{body}: {}", r.text);
        r.expect_error(422, "semantic_error");
    }
    // One interval, twice; the largest quantity.
    let r = create_config(
        &app,
        config_body(vec![line(&month, 1), line(&month2, 1000), line(&eur1, 3)]),
    )
    .await;
    r.expect(201);
    assert_eq!(r.data()["mode"], "subscription");

    // 20 items are allowed, 21 are not.
    let mut offers = vec![eur1.clone()];
    for i in 0..20 {
        offers.push(offer_ref(&app, eur(&format!("{}", 100 + i)), None).await);
    }
    let lines: Vec<Value> = offers.iter().map(|o| line(o, 1)).collect();
    let r = create_config(&app, config_body(lines[..20].to_vec())).await;
    r.expect(201);
    assert_eq!(r.data()["line_items"].as_array().unwrap().len(), 20);
    let r = create_config(&app, config_body(lines)).await;
    invalid_under(&r, "line_items");
}

pub(super) async fn checkout_config_custom_fields(app: TestApp) {
    let o = offer_ref(&app, eur("1999"), None).await;
    let body = |fields: Value| with(config_body(vec![line(&o, 1)]), "custom_fields", fields);
    let text_field = |key: &str| json!({"key": key, "label": "Label", "type": "text"});

    let r = create_config(
        &app,
        body(json!([
            {"key": "company", "label": "Company", "type": "text"},
            {"key": "size", "label": "Size", "type": "dropdown", "options": ["S", "M", "L"], "required": true},
            {"key": "k".repeat(40), "label": "l".repeat(100), "type": "numeric", "required": false, "options": null},
        ])),
    )
    .await;
    r.expect(201);
    let fields = r.data()["custom_fields"]
        .as_array()
        .expect("fields")
        .clone();
    assert_eq!(fields.len(), 3);
    for f in &fields {
        has_fields(f, CUSTOM_FIELD_FIELDS);
    }
    assert_eq!(fields[0]["key"], "company");
    assert_eq!(fields[0]["label"], "Company");
    assert_eq!(fields[0]["type"], "text");
    assert_eq!(fields[0]["required"], false, "required defaults to false");
    assert!(fields[0]["options"].is_null());
    assert_eq!(fields[1]["type"], "dropdown");
    assert_eq!(fields[1]["required"], true);
    assert_eq!(fields[1]["options"], json!(["S", "M", "L"]));
    assert_eq!(fields[2]["type"], "numeric");
    assert!(fields[2]["options"].is_null());
    for f in &fields {
        is_ref(&f["custom_field_ref"], "cf_");
    }
    let refs: HashSet<String> = fields
        .iter()
        .map(|f| text(&f["custom_field_ref"]))
        .collect();
    assert_eq!(refs.len(), 3, "one reference per field: {fields:?}");

    let dropdown = |options: Value| json!([{"key": "size", "label": "Size", "type": "dropdown", "options": options}]);
    let many_options: Vec<String> = (0..21).map(|i| format!("o{i}")).collect();
    for fields in [
        json!([text_field("Bad-Key")]),
        json!([text_field("")]),
        json!([text_field(&"k".repeat(41))]),
        json!([text_field("a b")]),
        json!([
            text_field("a"),
            text_field("b"),
            text_field("c"),
            text_field("d")
        ]),
        json!([text_field("a"), text_field("a")]),
        json!([{"key": "size", "label": "Size", "type": "dropdown"}]),
        dropdown(json!(null)),
        dropdown(json!([])),
        dropdown(json!(["S", "S"])),
        dropdown(json!([""])),
        dropdown(json!(["o".repeat(101)])),
        dropdown(json!(many_options)),
        json!([{"key": "company", "label": "Company", "type": "text", "options": ["a"]}]),
        json!([{"key": "seats", "label": "Seats", "type": "numeric", "options": ["1"]}]),
        json!([{"key": "company", "label": "", "type": "text"}]),
        json!([{"key": "company", "label": "l".repeat(101), "type": "text"}]),
        json!([{"key": "company", "label": "Company", "type": "date"}]),
        json!([{"key": "company", "label": "Company"}]),
        json!([{"key": "company", "label": "Company", "type": "text", "hint": "x"}]),
        // The service assigns references; a body never gives one.
        json!([{"key": "company", "label": "Company", "type": "text",
            "custom_field_ref": "cf_K1lZ4xC7vB3n"}]),
    ] {
        let r = create_config(&app, body(fields.clone())).await;
        assert_eq!(r.status, 400, "{fields}: {}", r.text);
        invalid_under(&r, "custom_fields");
    }
}

pub(super) async fn checkout_config_versions(app: TestApp) {
    let o1 = offer_ref(&app, eur("1999"), None).await;
    let o2 = offer_ref(&app, eur("500"), None).await;
    let fields = json!([{"key": "company", "label": "Company", "type": "text", "required": false, "options": null}]);
    let r = create_config(
        &app,
        json!({"name": "Shop", "line_items": [line(&o1, 1)], "success_url": OK_URL,
            "cancel_url": "https://example.com/cancel", "custom_fields": fields}),
    )
    .await;
    r.expect(201);
    let v1 = r.data().clone();
    let cfg = text(&v1["config_ref"]);
    let versions = at(CONFIGS, &cfg, "/versions");
    let publish_path = at(CONFIGS, &cfg, "/publish");

    // Only the name changes; the rest is carried over.
    let r = app.post(&versions, json!({"name": "Shop v2"})).send().await;
    r.expect(201);
    let tag2 = etag_matches(&r);
    assert_ne!(tag2, v1["etag"].as_str().unwrap());
    let v2 = r.data().clone();
    has_fields(&v2, CONFIG_FIELDS);
    assert_eq!(v2["config_ref"], cfg.as_str());
    assert_eq!(v2["current_version"], 2);
    assert_eq!(v2["name"], "Shop v2");
    for carried in [
        "line_items",
        "success_url",
        "cancel_url",
        "custom_fields",
        "mode",
        "created_at",
    ] {
        assert_eq!(v2[carried], v1[carried], "{carried}");
    }
    assert_eq!(v2["status"], "draft");
    assert!(v2["published_version"].is_null());
    assert_eq!(*get(&app, &at(CONFIGS, &cfg, "")).await.data(), v2);

    // An empty body copies the newest version.
    let r = app.post(&versions, json!({})).send().await;
    r.expect(201);
    let v3 = r.data().clone();
    assert_eq!(v3["current_version"], 3);
    for carried in [
        "name",
        "line_items",
        "success_url",
        "cancel_url",
        "custom_fields",
        "mode",
    ] {
        assert_eq!(v3[carried], v2[carried], "{carried}");
    }

    // Publish defaults to the newest.
    let r = publish(&app, &publish_path).await;
    r.expect(200);
    etag_matches(&r);
    assert_eq!(r.data()["status"], "published");
    assert_eq!(r.data()["published_version"], 3);
    assert_eq!(r.data()["current_version"], 3);

    // A new version leaves the published one.
    let r = app
        .post(&versions, json!({"line_items": [line(&o2, 3)]}))
        .send()
        .await;
    r.expect(201);
    let v4 = r.data().clone();
    assert_eq!(v4["current_version"], 4);
    assert_eq!(v4["published_version"], 3);
    assert_eq!(v4["status"], "published");
    assert_eq!(lines_of(&v4), vec![(o2.clone(), 3)]);
    assert_eq!(v4["name"], "Shop v2");

    // Rollback to version 1.
    let r = app.post(&publish_path, json!({"version": 1})).send().await;
    r.expect(200);
    assert_eq!(r.data()["published_version"], 1);
    assert_eq!(r.data()["current_version"], 4);
    assert_eq!(r.data()["status"], "published");
    let got = get(&app, &at(CONFIGS, &cfg, "")).await;
    assert_eq!(got.data()["published_version"], 1);
    assert_eq!(got.data()["current_version"], 4);
    assert_eq!(
        lines_of(got.data()),
        vec![(o2.clone(), 3)],
        "the newest shows"
    );

    // A version that does not exist; a malformed one.
    app.post(&publish_path, json!({"version": 99}))
        .send()
        .await
        .expect_error(422, "semantic_error");
    for v in [json!(0), json!(-1), json!("2"), json!(1.5)] {
        let r = app
            .post(&publish_path, json!({ "version": v }))
            .send()
            .await;
        assert_eq!(r.status, 400, "version {v}: {}", r.text);
        invalid(&r, "version");
    }
    assert_eq!(
        get(&app, &at(CONFIGS, &cfg, "")).await.data()["published_version"],
        1
    );

    // A version follows create's rules.
    let r = app
        .post(&versions, json!({"line_items": [line(&o1, 0)]}))
        .send()
        .await;
    invalid_under(&r, "line_items");
    let r = app.post(&versions, json!({"name": ""})).send().await;
    invalid(&r, "name");
    app.post(&versions, json!({"mode": "subscription"}))
        .send()
        .await
        .expect_error(422, "semantic_error");
    let usd = offer_ref(&app, money("100", "USD"), None).await;
    app.post(
        &versions,
        json!({"line_items": [line(&o1, 1), line(&usd, 1)]}),
    )
    .send()
    .await
    .expect_error(422, "semantic_error");
    app.post(&versions, json!({"line_items": [line(NO_OFFER, 1)]}))
        .send()
        .await
        .expect_error(404, "not_found");
    assert_eq!(
        get(&app, &at(CONFIGS, &cfg, "")).await.data()["current_version"],
        4,
        "refused versions are not counted"
    );
    app.post(&at(CONFIGS, NO_CONFIG, "/versions"), json!({}))
        .send()
        .await
        .expect_error(404, "not_found");

    // The mode is derived again from a version's line items.
    let m = offer_ref(&app, eur("900"), Some("month")).await;
    let r = app
        .post(&versions, json!({"line_items": [line(&m, 1)]}))
        .send()
        .await;
    r.expect(201);
    assert_eq!(r.data()["current_version"], 5);
    assert_eq!(r.data()["mode"], "subscription");
}

/// A field's reference is kept across the config's versions for the same
/// key (also when a version drops the key and a later one brings it back);
/// a new key gets a new one; another config's field of the same key has
/// its own (contract 9, "Data profile grants").
pub(super) async fn checkout_config_custom_field_refs(app: TestApp) {
    let o = offer_ref(&app, eur("1999"), None).await;
    let field = |key: &str, label: &str| json!({"key": key, "label": label, "type": "text"});
    let r = create_config(
        &app,
        with(
            config_body(vec![line(&o, 1)]),
            "custom_fields",
            json!([field("gift_note", "Gift note"), field("po_number", "PO")]),
        ),
    )
    .await;
    r.expect(201);
    let v1 = field_refs(r.data());
    let cfg = text(&r.data()["config_ref"]);
    let versions = at(CONFIGS, &cfg, "/versions");
    assert_eq!(v1.len(), 2);
    assert_ne!(v1["gift_note"], v1["po_number"]);

    // Same key, new label: same reference. A new key: a new reference.
    let r = app
        .post(
            &versions,
            json!({"custom_fields": [field("po_number", "Purchase order"), field("seats", "Seats")]}),
        )
        .send()
        .await;
    r.expect(201);
    let v2 = field_refs(r.data());
    assert_eq!(r.data()["current_version"], 2);
    assert_eq!(r.data()["custom_fields"][0]["label"], "Purchase order");
    assert_eq!(v2["po_number"], v1["po_number"], "kept for the same key");
    assert!(
        !v1.values().any(|r| *r == v2["seats"]),
        "a new key, a new reference: {v1:?} {v2:?}"
    );
    assert_eq!(*get(&app, &at(CONFIGS, &cfg, "")).await.data(), *r.data());

    // A key dropped in version 2 and given again in version 3 gets its
    // reference back; fields carried over keep theirs.
    let r = app
        .post(
            &versions,
            json!({"custom_fields": [field("seats", "Seats"), field("gift_note", "Note")]}),
        )
        .send()
        .await;
    r.expect(201);
    let v3 = field_refs(r.data());
    assert_eq!(v3["gift_note"], v1["gift_note"]);
    assert_eq!(v3["seats"], v2["seats"]);
    let r = app.post(&versions, json!({"name": "Renamed"})).send().await;
    r.expect(201);
    assert_eq!(field_refs(r.data()), v3, "carried over with the fields");

    // Publishing an older version still shows the newest's fields.
    let r = app
        .post(&at(CONFIGS, &cfg, "/publish"), json!({"version": 1}))
        .send()
        .await;
    r.expect(200);
    assert_eq!(field_refs(r.data()), v3);

    // Another config's field of the same key is another field.
    let r = create_config(
        &app,
        with(
            config_body(vec![line(&o, 1)]),
            "custom_fields",
            json!([field("gift_note", "Gift note")]),
        ),
    )
    .await;
    r.expect(201);
    let other = field_refs(r.data());
    assert_ne!(other["gift_note"], v1["gift_note"]);

    // A version's body may not give a reference either.
    let r = app
        .post(
            &versions,
            json!({"custom_fields": [{"key": "gift_note", "label": "Note", "type": "text",
                "custom_field_ref": v1["gift_note"]}]}),
        )
        .send()
        .await;
    invalid_under(&r, "custom_fields");
    assert_eq!(
        get(&app, &at(CONFIGS, &cfg, "")).await.data()["current_version"],
        4
    );
}

/// Versions written before custom fields had references (migration 0016)
/// get theirs when the store is migrated: the same for a key in every
/// version, shown by the config, and kept by the versions written after.
/// Migrating again changes nothing.
pub(super) async fn custom_field_refs_of_versions_older_than_the_migration(app: TestApp) {
    let o = offer_ref(&app, eur("1999"), None).await;
    let field = |key: &str| json!({"key": key, "label": "Label", "type": "text"});
    let r = create_config(
        &app,
        with(
            config_body(vec![line(&o, 1)]),
            "custom_fields",
            json!([field("gift_note")]),
        ),
    )
    .await;
    r.expect(201);
    let cfg = text(&r.data()["config_ref"]);
    let versions = at(CONFIGS, &cfg, "/versions");
    app.post(
        &versions,
        json!({"custom_fields": [field("gift_note"), field("seats")]}),
    )
    .send()
    .await
    .expect(201);
    let plain = create_config(&app, config_body(vec![line(&o, 1)])).await;
    plain.expect(201);

    // Back to what an older service wrote: no references anywhere.
    let pool = app.raw_pool().await;
    let bodies: Vec<(i64, String)> = sqlx::query_as(
        "SELECT version, body FROM checkout_config_versions WHERE config_ref = $1 \
         ORDER BY version",
    )
    .bind(cfg.as_str())
    .fetch_all(&pool)
    .await
    .expect("the versions");
    assert_eq!(bodies.len(), 2);
    for (version, body) in &bodies {
        let mut content: Value = serde_json::from_str(body).expect("JSON");
        for f in content["custom_fields"].as_array_mut().expect("fields") {
            assert!(f["custom_field_ref"].is_string(), "{body}");
            f.as_object_mut()
                .expect("a field")
                .remove("custom_field_ref");
        }
        sqlx::query(
            "UPDATE checkout_config_versions SET body = $1 WHERE config_ref = $2 AND version = $3",
        )
        .bind(serde_json::to_string(&content).expect("JSON"))
        .bind(cfg.as_str())
        .bind(*version)
        .execute(&pool)
        .await
        .expect("an old body");
    }
    sqlx::query("DELETE FROM checkout_custom_fields")
        .execute(&pool)
        .await
        .expect("no references");

    app.store.migrate().await.expect("migrated again");
    let c = get(&app, &at(CONFIGS, &cfg, "")).await.data().clone();
    let refs = field_refs(&c);
    assert_eq!(refs.len(), 2);
    assert_ne!(refs["gift_note"], refs["seats"]);
    let rows: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT custom_field_ref, config_ref, key FROM checkout_custom_fields ORDER BY key",
    )
    .fetch_all(&pool)
    .await
    .expect("the references");
    assert_eq!(
        rows,
        vec![
            (
                refs["gift_note"].clone(),
                cfg.clone(),
                "gift_note".to_owned()
            ),
            (refs["seats"].clone(), cfg.clone(), "seats".to_owned()),
        ]
    );
    // Version 1's body has its field's reference too, the same.
    let (v1,): (String,) = sqlx::query_as(
        "SELECT body FROM checkout_config_versions WHERE config_ref = $1 AND version = 1",
    )
    .bind(cfg.as_str())
    .fetch_one(&pool)
    .await
    .expect("version 1");
    let v1: Value = serde_json::from_str(&v1).expect("JSON");
    assert_eq!(
        v1["custom_fields"][0]["custom_field_ref"],
        refs["gift_note"].as_str()
    );

    app.store.migrate().await.expect("migrated once more");
    assert_eq!(*get(&app, &at(CONFIGS, &cfg, "")).await.data(), c);
    let r = app
        .post(&versions, json!({"custom_fields": [field("seats")]}))
        .send()
        .await;
    r.expect(201);
    assert_eq!(field_refs(r.data())["seats"], refs["seats"]);
    let plain = get(&app, &at(CONFIGS, &text(&plain.data()["config_ref"]), "")).await;
    assert_eq!(plain.data()["custom_fields"], json!([]));
    pool.close().await;
}
