//! The webhook control surface (contract section 9), black-box, on every
//! backend: endpoints and their secrets, subscriptions, data profile
//! grants, deliveries and their views, redrive, health, test sends and the
//! event catalogue, with each operation's errors, idempotent replays and
//! preconditions.
//!
//! Signatures are checked with the official Standard Webhooks verifier
//! (`standardwebhooks` from PyPI, run with python3 and installed on first
//! use) over headers computed from the secrets the store keeps encrypted.

use billing_tests::kit::{etag_matches, invalid, is_ref, is_ts, items, text};
use billing_tests::receiver::{Behaviour, TestReceiver};
use billing_tests::{backend_tests, unique_key, verifier, Resp, TestApp};
use domain::webhook::catalogue;
use domain::webhook::signing::{signature_header, SigningSecret};
use domain::{Prefix, Ref, Timestamp};
use serde_json::{json, Value};
use std::collections::HashSet;
use std::net::IpAddr;
use std::time::Duration;

const ENDPOINTS: &str = "/api/v1/webhook_endpoints";
const BATCH: &str = "/api/v1/webhook_deliveries/redrive";
const URL: &str = "https://example.com/hooks";
/// The custom field the catalogue's examples carry.
const CUSTOM_FIELD: &str = "cf_K1lZ4xC7vB3n";

// ---- helpers ------------------------------------------------------------------

fn ep(endpoint: &str, tail: &str) -> String {
    format!("{ENDPOINTS}/{endpoint}{tail}")
}

fn dl(delivery: &str, tail: &str) -> String {
    format!("/api/v1/webhook_deliveries/{delivery}{tail}")
}

/// `whsec_` + standard base64 of 32 bytes.
#[track_caller]
fn is_secret(s: &str) {
    let b64 = s.strip_prefix("whsec_").expect("whsec_ prefix");
    assert_eq!(b64.len(), 44, "{s}");
    assert!(b64.ends_with('=') && !b64.ends_with("=="), "{s}");
    assert!(b64[..43]
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '+' || c == '/'));
    assert!(SigningSecret::parse(s).is_some(), "{s}");
}

/// Creates an endpoint in the sandbox; returns its reference and the response.
async fn create_endpoint(app: &TestApp, url: &str) -> (String, Resp) {
    let r = app.post(ENDPOINTS, json!({ "url": url })).send().await;
    r.expect(201);
    (text(&r.data()["endpoint_ref"]), r)
}

async fn endpoint(app: &TestApp) -> String {
    create_endpoint(app, URL).await.0
}

async fn get(app: &TestApp, path: &str) -> Resp {
    let r = app.get(path).send().await;
    r.expect(200);
    r
}

async fn etag_of(app: &TestApp, path: &str) -> String {
    get(app, path).await.etag()
}

/// A POST with a fresh idempotency key and `If-Match: tag`.
async fn post_if(app: &TestApp, path: &str, tag: &str, body: Value) -> Resp {
    app.post(path, body).if_match(tag).send().await
}

/// Sends a test of `event_type`; returns the delivery.
async fn test_send(app: &TestApp, endpoint: &str, event_type: &str) -> Value {
    let r = app
        .post(
            &ep(endpoint, "/test_send"),
            json!({ "public_event_type": event_type }),
        )
        .send()
        .await;
    r.expect(201);
    etag_matches(&r);
    r.data().clone()
}

async fn body_of(app: &TestApp, delivery: &Value) -> Value {
    get(app, &dl(&text(&delivery["delivery_ref"]), "/body"))
        .await
        .data()
        .clone()
}

async fn status_of(app: &TestApp, delivery: &str) -> Value {
    get(app, &dl(delivery, "")).await.data().clone()
}

async fn health(app: &TestApp, endpoint: &str) -> (String, Value) {
    let h = get(app, &ep(endpoint, "/health")).await;
    assert_eq!(h.data()["endpoint_ref"], endpoint);
    (
        text(&h.data()["health"]),
        h.data()["last_delivery_status"].clone(),
    )
}

/// Every item of a paged list, following `next_cursor` `limit` at a time.
async fn walk(app: &TestApp, path: &str, limit: u32) -> Vec<Value> {
    walk_from(app, path, limit, None).await
}

/// Like `walk`, from the page after `cursor`.
async fn walk_from(app: &TestApp, path: &str, limit: u32, cursor: Option<String>) -> Vec<Value> {
    let sep = if path.contains('?') { '&' } else { '?' };
    let mut all = Vec::new();
    let mut cursor = cursor.map(|c| format!("&cursor={c}")).unwrap_or_default();
    loop {
        let r = get(app, &format!("{path}{sep}limit={limit}{cursor}")).await;
        let page = items(&r);
        let has_more = r.data()["has_more"].as_bool().expect("has_more");
        assert!(page.len() <= limit as usize);
        all.extend(page.iter().cloned());
        match r.data()["next_cursor"].as_str() {
            Some(c) => {
                assert!(has_more && page.len() == limit as usize, "{}", r.text);
                cursor = format!("&cursor={c}");
            }
            None => {
                assert!(!has_more, "{}", r.text);
                return all;
            }
        }
    }
}

/// Newest first: `created_at` descending, then the reference descending.
#[track_caller]
fn newest_first(list: &[Value], ref_field: &str) {
    let keys: Vec<(String, String)> = list
        .iter()
        .map(|i| (text(&i["created_at"]), text(&i[ref_field])))
        .collect();
    let mut sorted = keys.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(keys, sorted);
}

/// Sends the same POST twice under one key; the second must be a replay.
async fn twice(app: &TestApp, path: &str, tag: Option<&str>, body: Value) -> (Resp, Resp) {
    let key = unique_key();
    let call = || {
        let c = app.req("POST", path).idem(&key).json(&body);
        match tag {
            Some(t) => c.if_match(t),
            None => c,
        }
    };
    let first = call().send().await;
    let again = call().send().await;
    assert_eq!(again.status, first.status, "{}", again.text);
    assert_eq!(
        again.header("idempotent-replayed"),
        Some("true"),
        "{}",
        again.text
    );
    assert_eq!(first.header("idempotent-replayed"), None);
    (first, again)
}

/// An endpoint's wire form with every revealed secret removed.
fn without_secrets(data: &Value) -> Value {
    let mut d = data.clone();
    for v in d["secret_versions"].as_array_mut().expect("versions") {
        v.as_object_mut().expect("version").remove("secret");
    }
    d
}

/// The secret revealed for `version` in a response, asserting it is the
/// only one revealed.
#[track_caller]
fn revealed(r: &Resp, version: u64) -> String {
    let versions = r.data()["secret_versions"].as_array().expect("versions");
    let shown: Vec<&Value> = versions
        .iter()
        .filter(|v| v.get("secret").is_some())
        .collect();
    assert_eq!(shown.len(), 1, "one secret revealed: {}", r.text);
    assert_eq!(shown[0]["version"], version);
    let secret = text(&shown[0]["secret"]);
    is_secret(&secret);
    assert_eq!(shown[0]["secret_hint"], &secret[secret.len() - 4..]);
    secret
}

#[track_caller]
fn no_secret(r: &Resp) {
    assert!(!r.text.contains("whsec_"), "no secret: {}", r.text);
    assert!(!r.text.contains("\"secret\""), "no secret: {}", r.text);
}

/// `(version, status)` of each secret version.
fn versions(data: &Value) -> Vec<(u64, String)> {
    data["secret_versions"]
        .as_array()
        .expect("versions")
        .iter()
        .map(|v| (v["version"].as_u64().expect("version"), text(&v["status"])))
        .collect()
}

fn sv(list: &[(u64, &str)]) -> Vec<(u64, String)> {
    list.iter().map(|(n, s)| (*n, (*s).to_owned())).collect()
}

fn env_ref(app: &TestApp) -> Ref {
    Ref::parse(Prefix::Environment, &app.sandbox.environment_ref).expect("env ref")
}

/// The signature header the service would send now for a sample body,
/// computed from the endpoint's stored (encrypted) secret versions, checked
/// with the official verifier against each revealed secret (`shown[i]` is
/// version i+1) and whether it should verify.
async fn check_signing(app: &TestApp, endpoint: &str, shown: &[(&str, bool)]) {
    let endpoint_ref = Ref::parse(Prefix::WebhookEndpoint, endpoint).expect("ref");
    let stored = app
        .store
        .webhooks()
        .endpoint(&env_ref(app), &endpoint_ref)
        .await
        .expect("stored endpoint");
    assert_eq!(stored.secret_versions.len(), shown.len());
    let now = Timestamp::now();
    let mut signing = Vec::new();
    for (v, (secret, _)) in stored.secret_versions.iter().zip(shown) {
        assert!(
            !v.ciphertext.contains(&secret["whsec_".len()..]),
            "the stored secret is encrypted"
        );
        let plain = app.cipher.decrypt(&v.ciphertext).expect("decrypts");
        let key: [u8; 32] = plain.try_into().expect("32 bytes");
        let decrypted = SigningSecret::from_bytes(key);
        assert_eq!(decrypted.to_wire(), *secret, "v{}", v.meta.version);
        if v.meta.signs(now) {
            signing.push(decrypted);
        }
    }
    let expected = shown.iter().filter(|(_, signs)| *signs).count();
    assert_eq!(signing.len(), expected, "signing versions");
    let id = Ref::generate(Prefix::WebhookDelivery).into_string();
    let timestamp = (now.millis() / 1000).to_string();
    let body = br#"{"event_ref":"evt_AbCdEfGhIjKl","public_event_type":"webhook.test","data":{}}"#;
    let header = signature_header(&signing, &id, now.millis() / 1000, body);
    assert_eq!(header.split(' ').count(), expected, "{header}");
    for (n, (secret, signs)) in shown.iter().enumerate() {
        assert_eq!(
            verifier::verifies(secret, &id, &timestamp, &header, body),
            *signs,
            "version {} should {}verify",
            n + 1,
            if *signs { "" } else { "not " }
        );
    }
}

fn sub_body(app: &TestApp, event_type: &str, dto_version: u32) -> Value {
    json!({"public_event_type": event_type, "scope_type": "environment",
        "scope_ref": app.sandbox.environment_ref, "dto_version": dto_version})
}

fn grant_body(classes: &[&str], custom_fields: &[&str]) -> Value {
    json!({"purpose": "fulfillment", "reason": "ship the goods",
        "data_classes": classes, "custom_field_refs": custom_fields})
}

/// The value at a dotted path of `data`, if any.
fn at<'a>(data: &'a Value, path: &str) -> Option<&'a Value> {
    data.pointer(&format!("/{}", path.replace('.', "/")))
}

/// Waits until the delivery has `status`.
async fn settled(app: &TestApp, delivery: &str, status: &str) -> Value {
    app.eventually(20, || async {
        let d = status_of(app, delivery).await;
        (d["status"] == status).then_some(d)
    })
    .await
}

// ---- endpoints ----------------------------------------------------------------

async fn endpoint_shapes_and_secret_shown_once(app: TestApp) {
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

async fn endpoint_create_validation(app: TestApp) {
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

async fn endpoint_list_filter_and_cursor(app: TestApp) {
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

async fn pause_and_resume(app: TestApp) {
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

// ---- secrets ------------------------------------------------------------------

async fn secret_rotation_walkthrough(app: TestApp) {
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
async fn delivered_signatures_follow_rotation(app: TestApp) {
    let receiver = TestReceiver::start(Behaviour::Status(204)).await;
    let (e, created) = create_endpoint(&app, &receiver.url()).await;
    let s1 = revealed(&created, 1);
    let dispatcher = app.start_dispatcher(app.dispatch_settings("0s"));
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
        settled(&app, &text(&d["delivery_ref"]), "succeeded").await;
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
    dispatcher.shutdown().await;
}

async fn retiring_secret_expires_after_grace(app: TestApp) {
    let app = TestApp::spawn_with(app.backend, |s| {
        s.webhooks.secret_grace = Duration::from_secs(2)
    })
    .await;
    let (e, created) = create_endpoint(&app, URL).await;
    let s1 = revealed(&created, 1);
    let rotated = post_if(&app, &ep(&e, "/secret/rotate"), "*", json!({"reason": "r"})).await;
    let s2 = revealed(&rotated, 2);
    let confirmed = post_if(
        &app,
        &ep(&e, "/secret/confirm"),
        "*",
        json!({"reason": "r"}),
    )
    .await;
    confirmed.expect(200);
    let expires = Timestamp::parse(&text(&confirmed.data()["secret_versions"][0]["expires_at"]))
        .expect("expires_at");
    let left = expires.millis() - Timestamp::now().millis();
    assert!((0..=2_500).contains(&left), "grace of 2 s, {left} ms left");
    check_signing(&app, &e, &[(&s1, true), (&s2, true)]).await;
    tokio::time::sleep(Duration::from_millis(left as u64 + 200)).await;
    let got = get(&app, &ep(&e, "")).await;
    assert_eq!(versions(got.data()), sv(&[(1, "expired"), (2, "active")]));
    check_signing(&app, &e, &[(&s1, false), (&s2, true)]).await;
    // An expired version is neither pending nor retiring.
    post_if(&app, &ep(&e, "/secret/revoke"), "*", json!({"reason": "r"}))
        .await
        .expect_error(422, "semantic_error");
}

async fn secret_operation_errors(app: TestApp) {
    let e = endpoint(&app).await;
    for op in ["rotate", "confirm", "revoke"] {
        let path = ep(&e, &format!("/secret/{op}"));
        app.post(&path, json!({"reason": "r"}))
            .send()
            .await
            .expect_error(428, "precondition_required");
        post_if(&app, &path, "\"stale\"", json!({"reason": "r"}))
            .await
            .expect_error(412, "precondition_failed");
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
        post_if(
            &app,
            &ep(&e, &format!("/secret/{op}")),
            "*",
            json!({"reason": "r"}),
        )
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
    post_if(
        &app,
        &ep(&e, "/secret/confirm"),
        "*",
        json!({"reason": "r"}),
    )
    .await
    .expect(200);
    post_if(&app, &ep(&e, "/secret/rotate"), "*", json!({"reason": "r"}))
        .await
        .expect(200);
    let revoke = ep(&e, "/secret/revoke");
    let r = post_if(&app, &revoke, "*", json!({"reason": "r"})).await;
    assert_eq!(
        versions(r.data()),
        sv(&[(1, "retiring"), (2, "active"), (3, "revoked")])
    );
    let r = post_if(&app, &revoke, "*", json!({"reason": "r"})).await;
    assert_eq!(
        versions(r.data()),
        sv(&[(1, "revoked"), (2, "active"), (3, "revoked")])
    );
}

/// Contract section 5: of conditional writes racing on one ETag, one wins;
/// each loser gets `precondition_failed` (it read after the winner) or
/// `version_conflict` (it lost between check and write), never an answer
/// decided on a state it was not conditioned on.
async fn concurrent_writes_have_one_winner(app: TestApp) {
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

// ---- subscriptions -------------------------------------------------------------

async fn subscriptions(app: TestApp) {
    let e = endpoint(&app).await;
    let path = ep(&e, "/subscriptions");
    let empty = get(&app, &path).await;
    assert!(items(&empty).is_empty());
    assert_eq!(empty.data()["has_more"], false);
    assert!(empty.data()["next_cursor"].is_null());

    let r = app
        .post(&path, sub_body(&app, "payment.succeeded", 2))
        .send()
        .await;
    r.expect(201);
    let s = r.data();
    assert_eq!(s["endpoint_ref"], e.as_str());
    assert_eq!(s["public_event_type"], "payment.succeeded");
    assert_eq!(s["scope_type"], "environment");
    assert_eq!(s["scope_ref"], app.sandbox.environment_ref.as_str());
    assert_eq!(s["dto_version"], 2);
    assert_eq!(s["custom_field_refs"], json!([]));
    is_ts(&s["created_at"]);
    // A product scope names a product of the environment (contract 10.1).
    let unknown = json!({"public_event_type": "order.created", "scope_type": "product",
        "scope_ref": "prd_N5xP3cV8bT1m", "dto_version": 1});
    app.post(&path, unknown)
        .send()
        .await
        .expect_error(404, "not_found");
    // So does a buyer scope (`checkout.rs` subscribes to a paying buyer).
    let unknown = json!({"public_event_type": "dispute.opened", "scope_type": "buyer",
        "scope_ref": "buy_7Rk2Wd9Lq4Zs", "dto_version": 1});
    app.post(&path, unknown)
        .send()
        .await
        .expect_error(404, "not_found");
    let product = app
        .post("/api/v1/products", json!({"name": "Scoped"}))
        .send()
        .await;
    product.expect(201);
    let product_ref = text(&product.data()["product_ref"]);
    for body in [
        json!({"public_event_type": "order.created", "scope_type": "product",
            "scope_ref": product_ref, "dto_version": 1, "custom_field_refs": [CUSTOM_FIELD]}),
        json!({"public_event_type": "payout.paid", "scope_type": "beneficiary_business",
            "scope_ref": "biz_B8nM1qW4eR7t", "dto_version": 1}),
        // The same type in another scope is another subscription.
        json!({"public_event_type": "payment.succeeded", "scope_type": "product",
            "scope_ref": product_ref, "dto_version": 1}),
    ] {
        let r = app.post(&path, body.clone()).send().await;
        r.expect(201);
        assert_eq!(r.data()["scope_ref"], body["scope_ref"]);
        assert_eq!(
            r.data()["custom_field_refs"],
            body.get("custom_field_refs")
                .cloned()
                .unwrap_or_else(|| json!([]))
        );
    }
    // The same endpoint, type and scope twice, whatever the version.
    for v in [2, 1] {
        app.post(&path, sub_body(&app, "payment.succeeded", v))
            .send()
            .await
            .expect_error(422, "semantic_error");
    }

    let env = app.sandbox.environment_ref.clone();
    let with = |patch: Value| {
        let mut b = sub_body(&app, "payment.succeeded", 2);
        for (k, v) in patch.as_object().expect("patch") {
            if v.is_null() {
                b.as_object_mut().unwrap().remove(k);
            } else {
                b[k] = v.clone();
            }
        }
        b
    };
    for (patch, field) in [
        (
            json!({"public_event_type": "payment.exploded"}),
            "public_event_type",
        ),
        (json!({"public_event_type": 7}), "public_event_type"),
        (json!({"dto_version": 3}), "dto_version"),
        (json!({"dto_version": 0}), "dto_version"),
        (json!({"dto_version": "2"}), "dto_version"),
        (
            json!({"public_event_type": "refund.created", "dto_version": 2}),
            "dto_version",
        ),
        (json!({"scope_type": "galaxy"}), "scope_type"),
        (
            json!({"public_event_type": "payout.paid", "dto_version": 1,
            "scope_type": "product", "scope_ref": "prd_N5xP3cV8bT1m"}),
            "scope_type",
        ),
        (
            json!({"public_event_type": "dispute.opened", "dto_version": 1,
            "scope_type": "product", "scope_ref": "prd_N5xP3cV8bT1m"}),
            "scope_type",
        ),
        (
            json!({"scope_type": "product", "scope_ref": "prd_short"}),
            "scope_ref",
        ),
        (
            json!({"scope_type": "product", "scope_ref": "buy_7Rk2Wd9Lq4Zs"}),
            "scope_ref",
        ),
        (
            json!({"scope_type": "buyer", "scope_ref": env}),
            "scope_ref",
        ),
        (json!({"scope_ref": "prd_N5xP3cV8bT1m"}), "scope_ref"),
        (json!({"scope_ref": null}), "scope_ref"),
        (
            json!({"custom_field_refs": ["cf_bad!"]}),
            "custom_field_refs.0",
        ),
        (
            json!({"custom_field_refs": ["prd_N5xP3cV8bT1m"]}),
            "custom_field_refs.0",
        ),
        (
            json!({"custom_field_refs": [CUSTOM_FIELD, CUSTOM_FIELD]}),
            "custom_field_refs.1",
        ),
        (json!({"extra": 1}), "extra"),
    ] {
        let r = app.post(&path, with(patch.clone())).send().await;
        invalid(&r, field);
    }

    // The environment scope and three of the scopes above; refused ones
    // made nothing.
    let listed = items(&get(&app, &path).await);
    assert_eq!(listed.len(), 4);
    assert!(listed.iter().all(|s| s["endpoint_ref"] == e.as_str()));
    let times: Vec<String> = listed.iter().map(|s| text(&s["created_at"])).collect();
    let mut sorted = times.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(times, sorted, "newest first");
    invalid(&app.get(&format!("{path}?limit=5")).send().await, "limit");
}

// ---- data profile grants -----------------------------------------------------------

async fn data_profile_grants(app: TestApp) {
    let (e, created) = create_endpoint(&app, URL).await;
    let path = ep(&e, "/data_profile_grants");
    let revoke = ep(&e, "/data_profile_grants/revoke");
    assert!(items(&get(&app, &path).await).is_empty());
    post_if(&app, &revoke, "*", json!({"reason": "none yet"}))
        .await
        .expect_error(422, "semantic_error");

    let body = json!({"purpose": "support", "reason": "help desk",
        "data_classes": ["contact", "tax_id"], "custom_field_refs": [CUSTOM_FIELD]});
    let r = app.post(&path, body).send().await;
    r.expect(201);
    let g = r.data();
    assert_eq!(g["endpoint_ref"], e.as_str());
    assert_eq!(g["purpose"], "support");
    assert_eq!(g["data_classes"], json!(["contact", "tax_id"]));
    assert_eq!(g["custom_field_refs"], json!([CUSTOM_FIELD]));
    assert_eq!(g["status"], "active");
    is_ts(&g["created_at"]);
    assert!(g["revoked_at"].is_null());

    for (patch, field) in [
        (json!({"purpose": "marketing"}), "purpose"),
        (json!({"purpose": null}), "purpose"),
        (json!({"data_classes": ["biometrics"]}), "data_classes.0"),
        (
            json!({"data_classes": ["contact", "contact"]}),
            "data_classes.1",
        ),
        (json!({"data_classes": "contact"}), "data_classes"),
        (json!({"reason": ""}), "reason"),
        (json!({ "reason": "r".repeat(501) }), "reason"),
        (json!({"reason": null}), "reason"),
        (json!({"custom_field_refs": ["cf_"]}), "custom_field_refs.0"),
        (
            json!({"custom_field_refs": [CUSTOM_FIELD, CUSTOM_FIELD]}),
            "custom_field_refs.1",
        ),
        (json!({"extra": true}), "extra"),
    ] {
        let mut b = grant_body(&["contact"], &[]);
        for (k, v) in patch.as_object().unwrap() {
            if v.is_null() {
                b.as_object_mut().unwrap().remove(k);
            } else {
                b[k] = v.clone();
            }
        }
        invalid(&app.post(&path, b).send().await, field);
    }
    assert_eq!(items(&get(&app, &path).await).len(), 1);

    // Revoke: the endpoint's ETag (the grant moved it on).
    app.post(&revoke, json!({"reason": "r"}))
        .send()
        .await
        .expect_error(428, "precondition_required");
    post_if(&app, &revoke, &created.etag(), json!({"reason": "r"}))
        .await
        .expect_error(412, "precondition_failed");
    for body in [
        json!({}),
        json!({"reason": ""}),
        json!({ "reason": "r".repeat(501) }),
    ] {
        invalid(&post_if(&app, &revoke, "*", body).await, "reason");
    }
    let current = etag_of(&app, &ep(&e, "")).await;
    assert_ne!(current, created.etag());
    let r = post_if(
        &app,
        &revoke,
        &current,
        json!({"reason": "no longer needed"}),
    )
    .await;
    r.expect(200);
    assert_eq!(r.data()["status"], "revoked");
    assert_eq!(r.data()["purpose"], "support");
    is_ts(&r.data()["revoked_at"]);
    post_if(&app, &revoke, "*", json!({"reason": "again"}))
        .await
        .expect_error(422, "semantic_error");

    // Every purpose is accepted; each new grant supersedes the previous.
    for purpose in [
        "fulfillment",
        "accounting",
        "support",
        "analytics",
        "fraud_prevention",
    ] {
        let mut b = grant_body(&["billing_address", "payment_instrument"], &[]);
        b["purpose"] = json!(purpose);
        app.post(&path, b).send().await.expect(201);
    }
    let history = items(&get(&app, &path).await);
    assert_eq!(history.len(), 6, "the list is the history");
    let active: Vec<&Value> = history.iter().filter(|g| g["status"] == "active").collect();
    assert_eq!(active.len(), 1);
    assert_eq!(active[0]["purpose"], "fraud_prevention");
    assert!(active[0]["revoked_at"].is_null());
    for g in history.iter().filter(|g| g["status"] != "active") {
        assert_eq!(g["status"], "revoked");
        is_ts(&g["revoked_at"]);
    }
    let times: Vec<String> = history.iter().map(|g| text(&g["created_at"])).collect();
    let mut sorted = times.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(times, sorted, "newest first");
}

async fn grants_shape_and_redact_bodies(app: TestApp) {
    let e = endpoint(&app).await;
    let types = ["payment.succeeded", "checkout_session.completed"];
    let classified = |body: &Value, class: Option<&str>| -> Vec<String> {
        let version = body["payload"]["dto_version"].as_u64().unwrap() as u32;
        let ty = text(&body["payload"]["public_event_type"]);
        catalogue::data_classes(&ty, version)
            .into_iter()
            .filter(|(_, c)| class.is_none_or(|k| c.as_str() == k))
            .filter(|(path, _)| at(&body["payload"]["data"], path).is_some())
            .map(|(path, _)| path.to_owned())
            .collect()
    };

    // No grant: no classified field, no custom field value (a session's
    // `custom_fields` object is delivered empty); references and amounts
    // stay.
    let mut bare = Vec::new();
    for ty in types {
        let d = test_send(&app, &e, ty).await;
        assert_eq!(d["diagnostic"], true);
        let b = body_of(&app, &d).await;
        assert_eq!(b["body_status"], "available");
        assert_eq!(b["match_reasons"], json!([{"kind": "test_send"}]));
        assert_eq!(b["payload"]["public_event_type"], ty);
        assert_eq!(b["payload"]["dto_version"], d["dto_version"]);
        assert!(classified(&b, None).is_empty(), "{b}");
        let custom_fields = b["payload"]["data"].get("custom_fields");
        if ty == "checkout_session.completed" {
            assert_eq!(custom_fields, Some(&json!({})), "{b}");
        } else {
            assert!(custom_fields.is_none(), "{b}");
        }
        assert!(b["payload"]["data"]["buyer_ref"].is_string(), "{b}");
        assert_eq!(b["payload"]["data"]["buyer"], json!({}), "{b}");
        bare.push((d, b));
    }
    let paid = &bare[0].1["payload"]["data"];
    assert_eq!(bare[0].0["dto_version"], 2, "the newest version");
    assert_eq!(
        paid["amount"],
        json!({"currency": "EUR", "unit": "minor", "value": "1999"})
    );
    assert_eq!(paid["status"], "succeeded");
    is_ref(&paid["payment_intent_ref"], "pay_");
    assert!(paid.get("payment_method").is_none(), "{paid}");
    assert!(bare[1].1["payload"]["data"]["amount_total"].is_object());

    // A grant of `contact` and a custom field: contact, and only contact.
    app.post(
        &ep(&e, "/data_profile_grants"),
        grant_body(&["contact"], &[CUSTOM_FIELD]),
    )
    .send()
    .await
    .expect(201);
    let mut granted = Vec::new();
    for ty in types {
        let d = test_send(&app, &e, ty).await;
        let b = body_of(&app, &d).await;
        let contact = classified(&b, Some("contact"));
        assert_eq!(contact.len(), 2, "{b}");
        assert_eq!(classified(&b, None), contact, "other classes stay out: {b}");
        assert_eq!(b["payload"]["data"]["buyer"]["email"], "ada@example.com");
        granted.push(d);
    }
    // The grant's `cf_` reference names no field of this environment (the
    // catalogue example's config is not one of its configs): the example
    // session's custom field value stays out, its object stays in.
    let checkout = body_of(&app, &granted[1]).await;
    assert_eq!(
        checkout["payload"]["data"]["custom_fields"],
        json!({}),
        "{checkout}"
    );

    // Revoking redacts the bodies holding data no longer covered.
    let revoked = post_if(
        &app,
        &ep(&e, "/data_profile_grants/revoke"),
        &etag_of(&app, &ep(&e, "")).await,
        json!({"reason": "contract ended"}),
    )
    .await;
    revoked.expect(200);
    for d in &granted {
        let b = body_of(&app, d).await;
        assert_eq!(b["body_status"], "redacted", "{b}");
        assert!(b["payload"].is_null(), "{b}");
        assert_eq!(b["delivery_ref"], d["delivery_ref"]);
        assert_eq!(b["match_reasons"], json!([{"kind": "test_send"}]));
    }
    for (d, before) in &bare {
        assert_eq!(body_of(&app, d).await, *before, "nothing to redact");
    }

    // A new grant that still covers the data keeps the bodies; one that
    // does not redacts them, and the superseded grants read as revoked.
    let grants = ep(&e, "/data_profile_grants");
    app.post(&grants, grant_body(&["contact"], &[]))
        .send()
        .await
        .expect(201);
    let d = test_send(&app, &e, "payment.succeeded").await;
    assert_eq!(body_of(&app, &d).await["body_status"], "available");
    app.post(&grants, grant_body(&["contact", "payment_instrument"], &[]))
        .send()
        .await
        .expect(201);
    assert_eq!(body_of(&app, &d).await["body_status"], "available");
    app.post(&grants, grant_body(&["payment_instrument"], &[]))
        .send()
        .await
        .expect(201);
    let b = body_of(&app, &d).await;
    assert_eq!(b["body_status"], "redacted", "contact is no longer covered");
    assert!(b["payload"].is_null());
    let history = items(&get(&app, &grants).await);
    assert_eq!(history.len(), 4);
    let statuses: Vec<(Value, Value)> = history
        .iter()
        .map(|g| (g["data_classes"].clone(), g["status"].clone()))
        .collect();
    for (classes, status) in [
        (json!(["contact"]), "revoked"),
        (json!(["contact", "payment_instrument"]), "revoked"),
        (json!(["payment_instrument"]), "active"),
    ] {
        assert!(
            statuses.contains(&(classes.clone(), json!(status))),
            "{classes} {status}: {statuses:?}"
        );
    }
}

/// A grant revoked after a delivery was queued: its attempt carries none of
/// the data the grant covered.
async fn grants_apply_at_the_time_of_the_attempt(app: TestApp) {
    let receiver = TestReceiver::start(Behaviour::Status(200)).await;
    let (e, _) = create_endpoint(&app, &receiver.url()).await;
    app.post(
        &ep(&e, "/data_profile_grants"),
        grant_body(&["contact"], &[]),
    )
    .send()
    .await
    .expect(201);
    let d = test_send(&app, &e, "payment.succeeded").await;
    let queued = body_of(&app, &d).await;
    assert_eq!(
        queued["payload"]["data"]["buyer"]["email"],
        "ada@example.com"
    );
    post_if(
        &app,
        &ep(&e, "/data_profile_grants/revoke"),
        "*",
        json!({"reason": "r"}),
    )
    .await
    .expect(200);
    let dispatcher = app.start_dispatcher(app.dispatch_settings("0s"));
    settled(&app, &text(&d["delivery_ref"]), "succeeded").await;
    dispatcher.shutdown().await;
    let sent = receiver.received()[0].json();
    assert_eq!(sent["event_ref"], d["event_ref"]);
    for (path, _) in catalogue::data_classes("payment.succeeded", 2) {
        assert!(at(&sent["data"], path).is_none(), "{path} was sent: {sent}");
    }
    assert_eq!(sent["data"]["buyer_ref"], "buy_7Rk2Wd9Lq4Zs");
    assert_eq!(sent["data"]["buyer"], json!({}));
    let view = body_of(&app, &d).await;
    assert!(
        view["payload"].is_null() || view["payload"] == sent,
        "the body view is null or the body as delivered: {view}"
    );
}

// ---- deliveries -------------------------------------------------------------------

async fn deliveries_and_their_views(app: TestApp) {
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

async fn pause_holds_and_resume_releases(app: TestApp) {
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
    let r = post_if(&app, &dl(&held, "/redrive"), "*", json!({"reason": "r"})).await;
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
async fn a_paused_endpoint_receives_nothing(app: TestApp) {
    let receiver = TestReceiver::start(Behaviour::Status(200)).await;
    let (e, _) = create_endpoint(&app, &receiver.url()).await;
    let d = test_send(&app, &e, "entitlement.granted").await;
    let d = text(&d["delivery_ref"]);
    post_if(&app, &ep(&e, "/pause"), "*", json!({}))
        .await
        .expect(200);
    let dispatcher = app.start_dispatcher(app.dispatch_settings("0s"));
    settled(&app, &d, "held").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(receiver.count(), 0);
    post_if(&app, &ep(&e, "/resume"), "*", json!({}))
        .await
        .expect(200);
    settled(&app, &d, "succeeded").await;
    dispatcher.shutdown().await;
    assert_eq!(receiver.count(), 1);
}

async fn redrive_single_and_batch(app: TestApp) {
    let receiver = TestReceiver::start(Behaviour::Status(200)).await;
    let (e, _) = create_endpoint(&app, &receiver.url()).await;
    let dispatcher = app.start_dispatcher(app.dispatch_settings("0s"));
    let mut ds = Vec::new();
    for _ in 0..3 {
        let d = test_send(&app, &e, "refund.created").await;
        ds.push(text(&d["delivery_ref"]));
    }
    let mut done = Vec::new();
    for d in &ds {
        done.push(settled(&app, d, "succeeded").await);
    }
    dispatcher.shutdown().await;

    // Attempts of a delivered one.
    let a = items(&get(&app, &dl(&ds[0], "/attempts")).await);
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
    app.post(&path, json!({"reason": "r"}))
        .send()
        .await
        .expect_error(428, "precondition_required");
    post_if(&app, &path, "\"stale\"", json!({"reason": "r"}))
        .await
        .expect_error(412, "precondition_failed");
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
    let dispatcher = app.start_dispatcher(app.dispatch_settings("0s"));
    for d in &ds {
        let s = settled(&app, d, "succeeded").await;
        assert_eq!(s["generation"], 2);
    }
    dispatcher.shutdown().await;
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

async fn batch_redrive_validation(app: TestApp) {
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

// ---- health ---------------------------------------------------------------------------

async fn health_follows_attempts(app: TestApp) {
    let receiver = TestReceiver::start(Behaviour::Status(204)).await;
    let (e, _) = create_endpoint(&app, &receiver.url()).await;
    assert_eq!(health(&app, &e).await, ("unknown".to_owned(), Value::Null));
    let dispatcher = app.start_dispatcher(app.dispatch_settings("0s"));
    let send = |status: &'static str| {
        let app = &app;
        let e = &e;
        async move {
            let d = test_send(app, e, "invoice.paid").await;
            settled(app, &text(&d["delivery_ref"]), status).await
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
    dispatcher.shutdown().await;
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

async fn a_disabled_endpoint_holds_until_resumed(app: TestApp) {
    let receiver = TestReceiver::start(Behaviour::Status(410)).await;
    let (e, _) = create_endpoint(&app, &receiver.url()).await;
    let dispatcher = app.start_dispatcher(app.dispatch_settings("0s,1s"));
    let gone = test_send(&app, &e, "payout.paid").await;
    settled(&app, &text(&gone["delivery_ref"]), "failed").await;
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
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(receiver.count(), 1, "held deliveries are not sent");

    receiver.set(Behaviour::Status(200));
    let resumed = post_if(&app, &ep(&e, "/resume"), &disabled.etag(), json!({})).await;
    resumed.expect(200);
    assert_eq!(resumed.data()["status"], "active");
    settled(&app, &text(&held["delivery_ref"]), "succeeded").await;
    dispatcher.shutdown().await;
    assert_eq!(
        health(&app, &e).await,
        ("degraded".to_owned(), json!("succeeded"))
    );
}

async fn bodies_expire_after_retention(app: TestApp) {
    let app = TestApp::spawn_with(app.backend, |s| {
        s.webhooks.body_retention = Duration::from_secs(2)
    })
    .await;
    let e = endpoint(&app).await;
    let d = test_send(&app, &e, "webhook.test").await;
    assert_eq!(body_of(&app, &d).await["body_status"], "available");
    tokio::time::sleep(Duration::from_millis(2_200)).await;
    let b = body_of(&app, &d).await;
    assert_eq!(b["body_status"], "expired");
    assert!(b["payload"].is_null());
    assert_eq!(b["match_reasons"], json!([{"kind": "test_send"}]));
}

// ---- event catalogue ---------------------------------------------------------------

async fn event_catalogue(app: TestApp) {
    let r = get(&app, "/api/v1/webhook_event_types").await;
    assert_eq!(r.data()["has_more"], false);
    assert!(r.data()["next_cursor"].is_null());
    let list = items(&r);
    let names: Vec<String> = list.iter().map(|t| text(&t["public_event_type"])).collect();
    for required in [
        "checkout_session.completed",
        "payment.succeeded",
        "payment.failed",
        "refund.created",
        "refund.succeeded",
        "refund.canceled",
        "dispute.opened",
        "dispute.closed",
        "payout.paid",
        "payout.failed",
        "invoice.paid",
        "order.created",
        "subscription.started",
        "subscription.changed",
        "subscription.canceled",
        "entitlement.granted",
        "entitlement.revoked",
        "participation.invited",
        "participation.accepted",
        "webhook.test",
    ] {
        assert!(names.iter().any(|n| n == required), "{required} missing");
    }
    for t in &list {
        assert!(!text(&t["description"]).is_empty());
        let versions = t["dto_versions"].as_array().expect("dto_versions");
        assert!(!versions.is_empty() && versions.iter().all(Value::is_u64));
        let scopes = t["scope_types"].as_array().expect("scope_types");
        assert!(!scopes.is_empty());
        assert!(scopes.iter().all(|s| {
            ["environment", "product", "buyer", "beneficiary_business"]
                .contains(&s.as_str().unwrap())
        }));
        assert!(!t["data_classes"].is_null());
        assert!(t["example"].is_object(), "{t}");
        let diagnostic = t["public_event_type"] == "webhook.test";
        assert_eq!(t["diagnostic"], diagnostic);
    }
    let paid = list
        .iter()
        .find(|t| t["public_event_type"] == "payment.succeeded")
        .unwrap();
    assert_eq!(paid["dto_versions"], json!([1, 2]));
    assert!(paid["data_classes"].to_string().contains("contact"));
    invalid(
        &app.get("/api/v1/webhook_event_types?limit=5").send().await,
        "limit",
    );
}

// ---- destinations ---------------------------------------------------------------------

/// A host name other than `localhost` that resolves to loopback here (from
/// `/etc/hosts`), else a public name known to resolve to 127.0.0.1.
fn loopback_name() -> String {
    let hosts = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    hosts
        .lines()
        .find_map(|line| {
            let mut words = line.split('#').next()?.split_whitespace();
            let ip: IpAddr = words.next()?.parse().ok()?;
            if !ip.is_loopback() {
                return None;
            }
            words
                .find(|n| {
                    let n = n.to_ascii_lowercase();
                    n != "localhost" && !n.ends_with(".localhost")
                })
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "localtest.me".to_owned())
}

async fn private_destinations_are_refused(app: TestApp) {
    let app = TestApp::spawn_with(app.backend, |s| s.webhooks.allow_private_networks = false).await;
    let name = format!("https://{}/hooks", loopback_name());
    for url in [
        "https://127.0.0.1/",
        "https://127.0.0.2:8443/hooks",
        "https://127.1/",
        "https://2130706433/",
        "https://[::1]/",
        "https://10.0.0.1/",
        "https://172.16.0.1/",
        "https://172.31.255.254/",
        "https://192.168.1.1/",
        "https://169.254.169.254/latest/meta-data",
        "https://[fe80::1]/",
        "https://[::ffff:127.0.0.1]/",
        "https://[::ffff:10.0.0.1]/",
        "https://[64:ff9b::7f00:1]/",
        "https://[fd00::1]/",
        "https://224.0.0.1/",
        "https://[ff02::1]/",
        "https://0.0.0.0/",
        "https://[::]/",
        "https://localhost/",
        "https://LOCALHOST./hooks",
        "https://api.localhost/",
        "http://127.0.0.1/",
        name.as_str(),
    ] {
        let r = app.post(ENDPOINTS, json!({ "url": url })).send().await;
        invalid(&r, "url");
        assert_eq!(r.fields(), vec!["url"], "{url}");
    }
    assert!(items(&get(&app, ENDPOINTS).await).is_empty());
    for url in [URL, "https://8.8.8.8/hooks", "https://172.32.0.1/hooks"] {
        create_endpoint(&app, url).await;
    }
    // http: sandbox yes, live no.
    create_endpoint(&app, "http://example.com/hooks").await;
    let live = |app: &TestApp, url: &str| {
        app.anon("POST", ENDPOINTS)
            .auth(&app.live.secret)
            .idem(&unique_key())
            .json(&json!({ "url": url }))
            .send()
    };
    invalid(&live(&app, "http://example.com/hooks").await, "url");
    invalid(&live(&app, "https://10.1.2.3/hooks").await, "url");
    live(&app, URL).await.expect(201);

    // `delivery.allow_http` admits plain http in live too.
    let app = TestApp::spawn_with(app.backend, |s| {
        s.webhooks.allow_private_networks = false;
        s.webhooks.allow_http = true;
    })
    .await;
    live(&app, "http://example.com/hooks").await.expect(201);
    invalid(&live(&app, "http://192.168.0.10/hooks").await, "url");
}

// ---- references -----------------------------------------------------------------------

async fn unknown_and_foreign_refs_are_not_found(app: TestApp) {
    let live = |method: &str, path: &str| app.anon(method, path).auth(&app.live.secret);
    let r = live("POST", ENDPOINTS)
        .idem(&unique_key())
        .json(&json!({ "url": URL }))
        .send()
        .await;
    r.expect(201);
    let foreign_ep = text(&r.data()["endpoint_ref"]);
    let r = live("POST", &ep(&foreign_ep, "/test_send"))
        .idem(&unique_key())
        .json(&json!({"public_event_type": "webhook.test"}))
        .send()
        .await;
    r.expect(201);
    let foreign_d = text(&r.data()["delivery_ref"]);
    live("GET", &dl(&foreign_d, "")).send().await.expect(200);

    let reason = json!({"reason": "r"});
    let endpoint_ops: Vec<(&str, &str, Value)> = vec![
        ("GET", "", Value::Null),
        ("GET", "/subscriptions", Value::Null),
        ("GET", "/data_profile_grants", Value::Null),
        ("GET", "/deliveries", Value::Null),
        ("GET", "/health", Value::Null),
        ("POST", "/pause", json!({})),
        ("POST", "/resume", json!({})),
        ("POST", "/secret/rotate", reason.clone()),
        ("POST", "/secret/confirm", reason.clone()),
        ("POST", "/secret/revoke", reason.clone()),
        (
            "POST",
            "/subscriptions",
            sub_body(&app, "payment.succeeded", 1),
        ),
        (
            "POST",
            "/data_profile_grants",
            grant_body(&["contact"], &[]),
        ),
        ("POST", "/data_profile_grants/revoke", reason.clone()),
        (
            "POST",
            "/test_send",
            json!({"public_event_type": "webhook.test"}),
        ),
    ];
    let unknown_ep = Ref::generate(Prefix::WebhookEndpoint).into_string();
    for e in [&foreign_ep, &unknown_ep] {
        for (method, tail, body) in &endpoint_ops {
            let mut call = app.req(method, &ep(e, tail));
            if *method == "POST" {
                // Existence is decided before the precondition's match.
                call = call.idem(&unique_key()).if_match("\"stale\"").json(body);
            }
            let r = call.send().await;
            assert_eq!(r.status, 404, "{method} {tail}: {}", r.text);
            r.expect_error(404, "not_found");
        }
    }
    let unknown_d = Ref::generate(Prefix::WebhookDelivery).into_string();
    for d in [&foreign_d, &unknown_d] {
        for tail in ["", "/body", "/attempts"] {
            app.get(&dl(d, tail))
                .send()
                .await
                .expect_error(404, "not_found");
        }
        post_if(&app, &dl(d, "/redrive"), "\"stale\"", reason.clone())
            .await
            .expect_error(404, "not_found");
    }
    let r = post_if(
        &app,
        BATCH,
        "*",
        json!({"delivery_refs": [foreign_d, unknown_d], "reason": "r"}),
    )
    .await;
    r.expect(200);
    let outcomes: Vec<&Value> = r.data()["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| &x["outcome"])
        .collect();
    assert_eq!(outcomes, vec!["not_found", "not_found"]);
    // The foreign endpoint is untouched and unlisted here.
    let still = live("GET", &ep(&foreign_ep, "")).send().await;
    assert_eq!(still.data()["status"], "active");
    assert_eq!(versions(still.data()), sv(&[(1, "active")]));
    assert!(!get(&app, ENDPOINTS).await.text.contains(&foreign_ep));

    // Malformed references are validation failures naming the parameter.
    for (path, field) in [
        (format!("{ENDPOINTS}/whep_short"), "endpoint_ref"),
        (
            format!("{ENDPOINTS}/whd_AAAAAAAAAAAA/health"),
            "endpoint_ref",
        ),
        (dl("whep_AAAAAAAAAAAA", ""), "delivery_ref"),
        (dl("whd_AAAAAAAAAAA!", "/body"), "delivery_ref"),
    ] {
        invalid(&app.get(&path).send().await, field);
    }
}

// ---- idempotency ----------------------------------------------------------------------

async fn idempotent_replays(app: TestApp) {
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

// ---- contract gaps found ------------------------------------------------------------

/// Contract section 5: every response that carries one resource carries a
/// strong ETag; subscriptions and data profile grants are resources.
async fn subscriptions_and_grants_carry_etags(app: TestApp) {
    let e = endpoint(&app).await;
    let sub = app
        .post(
            &ep(&e, "/subscriptions"),
            sub_body(&app, "payment.failed", 1),
        )
        .send()
        .await;
    sub.expect(201);
    let grant = app
        .post(
            &ep(&e, "/data_profile_grants"),
            grant_body(&["contact"], &[]),
        )
        .send()
        .await;
    grant.expect(201);
    let revoked = post_if(
        &app,
        &ep(&e, "/data_profile_grants/revoke"),
        "*",
        json!({"reason": "r"}),
    )
    .await;
    revoked.expect(200);
    for (what, r) in [
        ("subscription", &sub),
        ("grant", &grant),
        ("revoked grant", &revoked),
    ] {
        let tag = r.header("etag");
        assert!(
            tag.is_some_and(|t| t.starts_with('"') && t.ends_with('"')),
            "a {what} response carries a strong ETag; headers: {:?}",
            r.headers
        );
    }
}

/// Contract section 9: the grant body is `{purpose, reason, data_classes,
/// custom_field_refs}`; unlike the optional fields of the section
/// (`description?`, `custom_field_refs?` of a subscription) none is marked
/// optional, and section 1 makes a missing required field
/// `validation_failed` naming it.
async fn grant_body_fields_are_required(app: TestApp) {
    let e = endpoint(&app).await;
    for field in ["data_classes", "custom_field_refs"] {
        let mut body = grant_body(&["contact"], &[]);
        body.as_object_mut().unwrap().remove(field);
        let r = app.post(&ep(&e, "/data_profile_grants"), body).send().await;
        invalid(&r, field);
    }
    assert!(items(&get(&app, &ep(&e, "/data_profile_grants")).await).is_empty());
}

backend_tests!(
    endpoint_shapes_and_secret_shown_once,
    endpoint_create_validation,
    endpoint_list_filter_and_cursor,
    pause_and_resume,
    secret_rotation_walkthrough,
    retiring_secret_expires_after_grace,
    secret_operation_errors,
    subscriptions,
    data_profile_grants,
    grants_shape_and_redact_bodies,
    deliveries_and_their_views,
    pause_holds_and_resume_releases,
    a_paused_endpoint_receives_nothing,
    redrive_single_and_batch,
    batch_redrive_validation,
    health_follows_attempts,
    event_catalogue,
    private_destinations_are_refused,
    unknown_and_foreign_refs_are_not_found,
    idempotent_replays,
    subscriptions_and_grants_carry_etags,
    concurrent_writes_have_one_winner,
    delivered_signatures_follow_rotation,
    grants_apply_at_the_time_of_the_attempt,
    a_disabled_endpoint_holds_until_resumed,
    bodies_expire_after_retention,
    grant_body_fields_are_required,
);
