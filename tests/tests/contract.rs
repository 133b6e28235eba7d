//! The cross-cutting HTTP contract (contract sections 1 to 8), black-box,
//! on every backend: envelope, errors, request ids, authentication,
//! permissions over the whole operation table, environment isolation,
//! idempotency, preconditions, cursors and malformed input.

use billing_tests::{backend_tests, unique_key, TestApp};
use control_api::operations::{permissions, Method, OPERATIONS};
use domain::principal::Mode;
use domain::secret::CredentialSecret;
use domain::{Prefix, Ref};
use serde_json::json;
use std::collections::HashSet;
use store::{IdempotencyScope, NewCredential};

// ---- envelope, request ids, errors -------------------------------------

async fn envelope_and_request_id(app: TestApp) {
    let r = app.get("/api/v1/environments").send().await;
    r.expect(200);
    let id = r.header("request-id").expect("Request-Id").to_owned();
    assert!(Ref::parse(Prefix::RequestLog, &id).is_ok(), "{id}");
    let data = r.data();
    assert!(data["items"].is_array() && data["has_more"] == false && data["next_cursor"].is_null());
    assert!(data["items"][0]["created_at"]
        .as_str()
        .unwrap()
        .ends_with('Z'));

    let e = app
        .get("/api/v1/service_accounts/sa_AAAAAAAAAAAA")
        .send()
        .await;
    e.expect_error(404, "not_found");
    assert_eq!(
        e.json["error"]["request_id"],
        e.header("request-id").unwrap()
    );

    // The request id is the request log's reference.
    let logs = app.get("/api/v1/request_logs?limit=100").send().await;
    let items = logs.data()["items"].as_array().unwrap();
    let logged = items
        .iter()
        .find(|l| l["request_log_ref"] == id.as_str())
        .expect("logged");
    assert_eq!(logged["operation_id"], "listEnvironments");
    assert_eq!(logged["status"], 200);
}

async fn every_response_carries_a_request_id(app: TestApp) {
    let responses = [
        app.anon("GET", "/api/v1/environments").send().await,
        app.get("/api/v1/nowhere").send().await,
        app.req("DELETE", "/api/v1/environments").send().await,
        app.post("/api/v1/service_accounts", json!({"x": 1}))
            .send()
            .await,
        app.anon("GET", "/healthz").send().await,
    ];
    for r in &responses[..4] {
        let id = r.header("request-id").expect("Request-Id");
        assert!(id.starts_with("req_"));
        assert_eq!(r.json["error"]["request_id"], id);
    }
    responses[1].expect_error(404, "not_found");
    responses[2].expect_error(404, "not_found");
}

async fn authentication_failures_are_uniform(app: TestApp) {
    let revoked = {
        let (_, secret) = app.principal_with(&[]).await;
        secret
    };
    let unknown = CredentialSecret::generate(Mode::Sandbox);
    let cases = [
        None,
        Some("Bearer".to_owned()),
        Some("Basic dXNlcjpwdw==".to_owned()),
        Some("Bearer sk_test_short".to_owned()),
        Some(format!("Bearer {}", unknown.reveal())),
        Some(format!("Bearer {}x", app.sandbox.secret)),
    ];
    let mut messages = HashSet::new();
    for header in cases {
        let mut call = app.anon("GET", "/api/v1/environments");
        if let Some(h) = &header {
            call = call.header("Authorization", h);
        }
        let r = call.send().await;
        r.expect_error(401, "authentication_failed");
        assert_eq!(r.header("www-authenticate"), Some("Bearer"), "{header:?}");
        messages.insert(r.json["error"]["message"].as_str().unwrap().to_owned());
    }
    assert_eq!(messages.len(), 1, "one message for every failure");
    // Two credentials on one request are ambiguous, even if one is valid.
    let both = app
        .get("/api/v1/environments")
        .header("Authorization", &format!("Bearer {}", app.live.secret))
        .send()
        .await;
    both.expect_error(401, "authentication_failed");
    // A valid principal without the permission is forbidden, not unauthenticated.
    app.get("/api/v1/environments")
        .auth(&revoked)
        .send()
        .await
        .expect_error(403, "forbidden");
}

// ---- permissions over the whole operation table ------------------------

fn concrete_path(template: &str) -> String {
    template
        .split('/')
        .map(
            |seg| match seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                Some("permission_action") => "payouts:read".to_owned(),
                Some(param) => Ref::generate(prefix_of(param)).into_string(),
                None => seg.to_owned(),
            },
        )
        .collect::<Vec<_>>()
        .join("/")
}

fn prefix_of(param: &str) -> Prefix {
    match param {
        "buyer_ref" => Prefix::Buyer,
        "capture_ref" => Prefix::Capture,
        "config_ref" => Prefix::CheckoutConfig,
        "checkout_session_ref" => Prefix::CheckoutSession,
        "credential_ref" => Prefix::Credential,
        "dispute_ref" => Prefix::Dispute,
        "entitlement_ref" => Prefix::Entitlement,
        "invoice_ref" => Prefix::Invoice,
        "journey_ref" => Prefix::Journey,
        "offer_ref" => Prefix::Offer,
        "order_ref" => Prefix::Order,
        "participation_ref" => Prefix::Participation,
        "stored_payment_method_ref" => Prefix::StoredPaymentMethod,
        "payment_ref" => Prefix::Payment,
        "payout_ref" => Prefix::Payout,
        "price_ref" => Prefix::Price,
        "product_ref" => Prefix::Product,
        "refund_ref" => Prefix::Refund,
        "principal_ref" => Prefix::ServiceAccount,
        "subscription_change_ref" => Prefix::SubscriptionChange,
        "subscription_ref" => Prefix::Subscription,
        "delivery_ref" => Prefix::WebhookDelivery,
        "endpoint_ref" => Prefix::WebhookEndpoint,
        "redrive_job_ref" => Prefix::RedriveJob,
        "test_clock_ref" => Prefix::TestClock,
        other => panic!("no prefix known for {other}"),
    }
}

/// A principal holding `permissions`, made through the store (setup only).
async fn principal_holding(app: &TestApp, permissions: &[&str]) -> String {
    let env = Ref::parse(Prefix::Environment, &app.sandbox.environment_ref).unwrap();
    let mut tx = app.store.begin().await.unwrap();
    let sa = store::admin::service_accounts::create(&mut tx, &env, "perm-test", None)
        .await
        .unwrap();
    store::admin::grants::ensure(&mut tx, &env, &sa.principal_ref, permissions)
        .await
        .unwrap();
    let secret = CredentialSecret::generate(Mode::Sandbox);
    let new = NewCredential {
        name: None,
        expires_at: None,
    };
    store::admin::credentials::issue(&mut tx, &env, &sa.principal_ref, new, &secret)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    secret.reveal().to_owned()
}

async fn call_operation(
    app: &TestApp,
    op: &control_api::operations::Operation,
    secret: &str,
) -> billing_tests::Resp {
    let path = concrete_path(op.path);
    match op.method {
        Method::Get => app.anon("GET", &path).auth(secret).send().await,
        Method::Post | Method::Patch => {
            app.anon(&op.method.lower().to_uppercase(), &path)
                .auth(secret)
                .idem(&unique_key())
                .if_match("*")
                .json(&json!({}))
                .send()
                .await
        }
    }
}

async fn lacking_the_permission_is_forbidden_on_every_operation(app: TestApp) {
    let all = permissions();
    let nothing = principal_holding(&app, &[]).await;
    for op in OPERATIONS {
        call_operation(&app, op, &nothing)
            .await
            .expect_error(403, "forbidden");
        let others: Vec<&str> = all
            .iter()
            .copied()
            .filter(|p| *p != op.permission)
            .collect();
        let secret = principal_holding(&app, &others).await;
        let r = call_operation(&app, op, &secret).await;
        assert_eq!(
            r.status, 403,
            "{} without {}: {}",
            op.id, op.permission, r.text
        );
        // With the permission, the same call is not refused for it.
        let allowed = principal_holding(&app, &[op.permission]).await;
        let r = call_operation(&app, op, &allowed).await;
        assert!(
            r.status != 403 && r.status != 401 && r.status < 500,
            "{} with permission: {}",
            op.id,
            r.text
        );
    }
}

// ---- environments -------------------------------------------------------

async fn environments_are_isolated(app: TestApp) {
    let live_account = app
        .anon("POST", "/api/v1/service_accounts")
        .auth(&app.live.secret)
        .idem(&unique_key())
        .json(&json!({"name": "live-only"}))
        .send()
        .await;
    live_account.expect(201);
    let live_ref = live_account.data()["principal_ref"]
        .as_str()
        .unwrap()
        .to_owned();
    app.get(&format!("/api/v1/service_accounts/{live_ref}"))
        .send()
        .await
        .expect_error(404, "not_found");
    app.get(&format!("/api/v1/service_accounts/{live_ref}/credentials"))
        .send()
        .await
        .expect_error(404, "not_found");
    let listed = app.get("/api/v1/service_accounts").send().await;
    assert!(!listed.text.contains(&live_ref));
    let envs = app
        .anon("GET", "/api/v1/environments")
        .auth(&app.live.secret)
        .send()
        .await;
    let items = envs.data()["items"].as_array().unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["mode"], "live");
    // The live admin's credential is not visible from the sandbox either.
    let cred = &app.live.credential_ref;
    app.req("POST", &format!("/api/v1/credentials/{cred}/revoke"))
        .idem(&unique_key())
        .if_match("*")
        .json(&json!({"reason": "x"}))
        .send()
        .await
        .expect_error(404, "not_found");
}

// ---- idempotency ----------------------------------------------------------

async fn idempotent_replay_is_identical(app: TestApp) {
    let key = unique_key();
    let first = app
        .req("POST", "/api/v1/service_accounts")
        .idem(&key)
        .json(&json!({"name": "a", "description": "d"}))
        .send()
        .await;
    first.expect(201);
    assert_eq!(first.header("idempotent-replayed"), None);
    // Same JSON, other key order and spacing: a replay.
    let again = app
        .req("POST", "/api/v1/service_accounts")
        .idem(&key)
        .raw("{ \"description\" : \"d\",\n  \"name\": \"a\" }")
        .send()
        .await;
    again.expect(201);
    assert_eq!(again.text, first.text);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.header("etag"), first.header("etag"));
    assert_ne!(again.header("request-id"), first.header("request-id"));
    let listed = app.get("/api/v1/service_accounts").send().await;
    let named_a = listed.data()["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["name"] == "a")
        .count();
    assert_eq!(named_a, 1, "the replay created nothing");

    // Same key, other body: mismatch.
    app.req("POST", "/api/v1/service_accounts")
        .idem(&key)
        .json(&json!({"name": "b"}))
        .send()
        .await
        .expect_error(422, "idempotency_mismatch");
    // Same key on another path is another request too.
    let principal = first.data()["principal_ref"].as_str().unwrap();
    app.req(
        "POST",
        &format!("/api/v1/service_accounts/{principal}/credentials"),
    )
    .idem(&key)
    .json(&json!({}))
    .send()
    .await
    .expect(201);
    // Keys are scoped by principal: another principal may use the same key.
    let (_, other) = app
        .principal_with(&["service_accounts:manage_create"])
        .await;
    app.req("POST", "/api/v1/service_accounts")
        .auth(&other)
        .idem(&key)
        .json(&json!({"name": "b"}))
        .send()
        .await
        .expect(201);
}

async fn kept_and_unkept_results(app: TestApp) {
    // A validation failure keeps nothing: the key is free afterwards.
    let key = unique_key();
    app.req("POST", "/api/v1/service_accounts")
        .idem(&key)
        .json(&json!({"name": 5}))
        .send()
        .await
        .expect_error(400, "validation_failed");
    app.req("POST", "/api/v1/service_accounts")
        .idem(&key)
        .json(&json!({"name": "ok"}))
        .send()
        .await
        .expect(201);

    // A 404 the operation decided is kept and replayed identically.
    let key = unique_key();
    let path = "/api/v1/service_accounts/sa_AAAAAAAAAAAA/credentials";
    let first = app
        .req("POST", path)
        .idem(&key)
        .json(&json!({}))
        .send()
        .await;
    first.expect_error(404, "not_found");
    let again = app
        .req("POST", path)
        .idem(&key)
        .json(&json!({}))
        .send()
        .await;
    again.expect_error(404, "not_found");
    assert_eq!(again.text, first.text);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));

    // A 422 semantic error is kept too.
    let account = app.create_account("to-resume").await;
    let p = account["principal_ref"].as_str().unwrap();
    let key = unique_key();
    let first = app
        .req("POST", &format!("/api/v1/service_accounts/{p}/resume"))
        .idem(&key)
        .if_match("*")
        .json(&json!({}))
        .send()
        .await;
    first.expect_error(422, "semantic_error");
    let again = app
        .req("POST", &format!("/api/v1/service_accounts/{p}/resume"))
        .idem(&key)
        .if_match("*")
        .json(&json!({}))
        .send()
        .await;
    assert_eq!(
        (again.status, again.text.as_str()),
        (422, first.text.as_str())
    );
}

async fn idempotency_key_header_rules(app: TestApp) {
    // E4: a missing key is validation_failed naming the header.
    let r = app
        .req("POST", "/api/v1/service_accounts")
        .json(&json!({"name": "x"}))
        .send()
        .await;
    r.expect_error(400, "validation_failed");
    assert_eq!(r.fields(), vec!["Idempotency-Key"]);
    // E3: a missing key is idempotency_key_required.
    app.req("POST", "/api/v1/products")
        .json(&json!({"name": "x"}))
        .send()
        .await
        .expect_error(400, "idempotency_key_required");
    // Malformed keys.
    for bad in ["k".repeat(256), "tab\there".to_owned()] {
        let r = app
            .req("POST", "/api/v1/service_accounts")
            .idem(&bad)
            .json(&json!({"name": "x"}))
            .send()
            .await;
        r.expect_error(400, "validation_failed");
        assert_eq!(r.fields(), vec!["Idempotency-Key"]);
    }
    app.req("POST", "/api/v1/service_accounts")
        .idem(&"k".repeat(255))
        .json(&json!({"name": "x"}))
        .send()
        .await
        .expect(201);
    // Order: the key is checked before the precondition.
    let r = app
        .req("POST", "/api/v1/service_accounts/sa_AAAAAAAAAAAA/suspend")
        .json(&json!({}))
        .send()
        .await;
    assert_eq!(r.fields(), vec!["Idempotency-Key"]);
}

async fn same_key_in_flight_is_a_conflict(app: TestApp) {
    let key = unique_key();
    let body = json!({"name": "inflight"});
    // A request holding the key right now (as a concurrent request would).
    let scope = IdempotencyScope {
        environment_ref: app.sandbox.environment_ref.clone(),
        principal_ref: app.sandbox.principal_ref.clone(),
        operation_id: "createServiceAccount".into(),
        key: key.clone(),
    };
    let fp = domain::idempotency::fingerprint("POST", "/api/v1/service_accounts", &body);
    let now = domain::Timestamp::now();
    let claim = app
        .store
        .claim_idempotency_key(&scope, &fp, now, 86_400_000)
        .await
        .unwrap();
    let store::Claim::Owned(held) = claim else {
        panic!("a fresh key is owned");
    };
    let r = app
        .req("POST", "/api/v1/service_accounts")
        .idem(&key)
        .json(&body)
        .send()
        .await;
    r.expect_error(409, "version_conflict");
    assert_eq!(r.header("retry-after"), Some("1"));
    drop(held);
    app.req("POST", "/api/v1/service_accounts")
        .idem(&key)
        .json(&body)
        .send()
        .await
        .expect(201);

    // Truly concurrent duplicates: one execution, the rest replays or 409s.
    let key = unique_key();
    let calls = (0..8).map(|_| {
        app.req("POST", "/api/v1/service_accounts")
            .idem(&key)
            .json(&json!({"name": "race"}))
            .send()
    });
    let results = futures::future::join_all(calls).await;
    let created: Vec<_> = results.iter().filter(|r| r.status == 201).collect();
    assert!(!created.is_empty());
    assert!(
        results.iter().all(|r| r.status == 201 || r.status == 409),
        "{results:?}"
    );
    assert!(created.iter().all(|r| r.text == created[0].text));
    let listed = app.get("/api/v1/service_accounts").send().await;
    let races = listed.data()["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["name"] == "race")
        .count();
    assert_eq!(races, 1);
}

// ---- preconditions --------------------------------------------------------

async fn preconditions(app: TestApp) {
    let account = app.create_account("cond").await;
    let p = account["principal_ref"].as_str().unwrap().to_owned();
    let etag = account["etag"].as_str().unwrap().to_owned();
    let suspend = format!("/api/v1/service_accounts/{p}/suspend");
    let resume = format!("/api/v1/service_accounts/{p}/resume");
    app.req("POST", &suspend)
        .idem(&unique_key())
        .json(&json!({}))
        .send()
        .await
        .expect_error(428, "precondition_required");
    let r = app
        .req("POST", &suspend)
        .idem(&unique_key())
        .if_match("not-quoted")
        .json(&json!({}))
        .send()
        .await;
    r.expect_error(400, "validation_failed");
    assert_eq!(r.fields(), vec!["If-Match"]);
    app.req("POST", &suspend)
        .idem(&unique_key())
        .if_match("\"0000\"")
        .json(&json!({}))
        .send()
        .await
        .expect_error(412, "precondition_failed");
    let ok = app
        .req("POST", &suspend)
        .idem(&unique_key())
        .if_match(&etag)
        .json(&json!({}))
        .send()
        .await;
    ok.expect(200);
    assert_ne!(ok.etag(), etag, "the ETag changes with the resource");
    assert_eq!(ok.data()["etag"], ok.etag());
    // The old tag is stale now.
    app.req("POST", &resume)
        .idem(&unique_key())
        .if_match(&etag)
        .json(&json!({}))
        .send()
        .await
        .expect_error(412, "precondition_failed");
    // A list of tags matches if any does; `*` matches anything.
    let list = format!("\"aaaa\", {}", ok.etag());
    app.action(&resume, &list).send().await.expect(200);
    app.action(&suspend, "*").send().await.expect(200);
    // Existence is checked before the precondition.
    app.action("/api/v1/service_accounts/sa_AAAAAAAAAAAA/suspend", "\"x\"")
        .send()
        .await
        .expect_error(404, "not_found");
}

async fn concurrent_conditional_writes_have_one_winner(app: TestApp) {
    for round in 0..10 {
        let account = app.create_account(&format!("race-{round}")).await;
        let p = account["principal_ref"].as_str().unwrap().to_owned();
        let etag = account["etag"].as_str().unwrap().to_owned();
        let path = format!("/api/v1/service_accounts/{p}/suspend");
        let a = app
            .req("POST", &path)
            .idem(&unique_key())
            .if_match(&etag)
            .json(&json!({}))
            .send();
        let b = app
            .req("POST", &path)
            .idem(&unique_key())
            .if_match(&etag)
            .json(&json!({}))
            .send();
        let (a, b) = tokio::join!(a, b);
        let mut statuses = [a.status, b.status];
        statuses.sort();
        assert!(
            statuses == [200, 409] || statuses == [200, 412],
            "round {round}: {} / {}",
            a.text,
            b.text
        );
    }
}

// ---- cursors ----------------------------------------------------------------

async fn cursor_walk_sees_each_item_once(app: TestApp) {
    let filter = "operation_id=createServiceAccount";
    let mut expected = HashSet::new();
    for i in 0..250 {
        let r = app
            .post(
                "/api/v1/service_accounts",
                json!({"name": format!("walk-{i}")}),
            )
            .send()
            .await;
        r.expect(201);
        expected.insert(r.header("request-id").unwrap().to_owned());
    }
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let url = match &cursor {
            Some(c) => format!("/api/v1/request_logs?{filter}&limit=7&cursor={c}"),
            None => format!("/api/v1/request_logs?{filter}&limit=7"),
        };
        let page = app.get(&url).send().await;
        page.expect(200);
        let items = page.data()["items"].as_array().unwrap().clone();
        assert!(items.len() <= 7);
        let has_more = page.data()["has_more"].as_bool().unwrap();
        seen.extend(
            items
                .iter()
                .map(|i| i["request_log_ref"].as_str().unwrap().to_owned()),
        );
        pages += 1;
        // Inserts between pages never shift or repeat pages.
        for _ in 0..2 {
            app.post("/api/v1/service_accounts", json!({"name": "between"}))
                .send()
                .await
                .expect(201);
        }
        if !has_more {
            assert!(page.data()["next_cursor"].is_null());
            break;
        }
        assert_eq!(items.len(), 7, "a page holds min(limit, remaining) items");
        cursor = Some(page.data()["next_cursor"].as_str().unwrap().to_owned());
    }
    let unique: HashSet<_> = seen.iter().cloned().collect();
    assert_eq!(unique.len(), seen.len(), "no item repeats");
    assert_eq!(
        unique, expected,
        "each item exactly once, and nothing inserted later"
    );
    assert_eq!(pages, 250usize.div_ceil(7));
}

async fn cursor_and_limit_validation(app: TestApp) {
    for bad in [
        "limit=0",
        "limit=101",
        "limit=abc",
        "limit=-1",
        "cursor=!!!",
        "cursor=",
        "status=abc",
        "status=99",
        "operation_id=nope",
        "bogus=1",
        "limit=5&limit=6",
    ] {
        let r = app.get(&format!("/api/v1/request_logs?{bad}")).send().await;
        r.expect_error(400, "validation_failed");
        assert!(!r.fields().is_empty(), "{bad}");
    }
    for _ in 0..3 {
        app.get("/api/v1/environments").send().await.expect(200);
    }
    let page = app
        .get("/api/v1/request_logs?limit=1&status=200")
        .send()
        .await;
    let cursor = page.data()["next_cursor"].as_str().unwrap().to_owned();
    // The cursor belongs to this filter only.
    app.get(&format!(
        "/api/v1/request_logs?limit=1&status=201&cursor={cursor}"
    ))
    .send()
    .await
    .expect_error(400, "validation_failed");
    app.get(&format!("/api/v1/request_logs?limit=1&cursor={cursor}"))
        .send()
        .await
        .expect_error(400, "validation_failed");
    app.get(&format!(
        "/api/v1/request_logs?limit=1&status=200&cursor={cursor}"
    ))
    .send()
    .await
    .expect(200);
    // Lists without paging take no paging parameters.
    app.get("/api/v1/service_accounts?limit=5")
        .send()
        .await
        .expect_error(400, "validation_failed");
}

// ---- malformed input ----------------------------------------------------------

async fn malformed_input_never_writes(app: TestApp) {
    let before = app.get("/api/v1/service_accounts").send().await.data()["items"]
        .as_array()
        .unwrap()
        .len();
    let post = |body: &'static str| {
        app.req("POST", "/api/v1/service_accounts")
            .idem(&unique_key())
            .raw(body)
            .send()
    };
    let cases: [(&str, &str); 9] = [
        ("{", "body"),
        ("", "body"),
        ("[]", "body"),
        ("\"name\"", "body"),
        ("null", "body"),
        ("{\"name\": 5}", "name"),
        ("{\"name\": \"x\", \"extra\": true}", "extra"),
        ("{\"description\": \"no name\"}", "name"),
        ("{\"name\": \"\"}", "name"),
    ];
    for (body, field) in cases {
        let r = post(body).await;
        r.expect_error(400, "validation_failed");
        assert_eq!(r.fields(), vec![field], "{body}");
    }
    let huge = format!("{{\"name\": \"{}\"}}", "x".repeat(2 << 20));
    let r = app
        .req("POST", "/api/v1/service_accounts")
        .idem(&unique_key())
        .raw(huge)
        .send()
        .await;
    r.expect_error(413, "validation_failed");
    for bad_ref in [
        "sa_short",
        "cred_AAAAAAAAAAAA",
        "sa_AAAAAAAAAAA!",
        "sa_AAAAAAAAAAAAA",
    ] {
        let r = app
            .get(&format!("/api/v1/service_accounts/{bad_ref}"))
            .send()
            .await;
        r.expect_error(400, "validation_failed");
        assert_eq!(r.fields(), vec!["principal_ref"]);
    }
    let after = app.get("/api/v1/service_accounts").send().await.data()["items"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(before, after, "no failed request wrote anything");
}

// ---- documents and probes --------------------------------------------------

async fn openapi_health_and_readiness(app: TestApp) {
    let doc = app.anon("GET", "/api/v1/openapi.json").send().await;
    doc.expect(200);
    assert_eq!(doc.json["openapi"], "3.1.0");
    let paths = doc.json["paths"].as_object().unwrap();
    for op in OPERATIONS.iter().filter(|o| o.binding.is_some()) {
        assert_eq!(paths[op.path][op.method.lower()]["operationId"], op.id);
    }
    let create = &paths["/api/v1/service_accounts"]["post"];
    let schema = create["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        .as_str()
        .unwrap();
    let name = schema.rsplit('/').next().unwrap();
    assert!(doc.json["components"]["schemas"][name]["properties"]["name"].is_object());
    app.anon("GET", "/healthz").send().await.expect(200);
    let ready = app.anon("GET", "/readyz").send().await;
    ready.expect(200);
    assert_eq!(ready.json["status"], "ready");
}

backend_tests!(
    envelope_and_request_id,
    every_response_carries_a_request_id,
    authentication_failures_are_uniform,
    lacking_the_permission_is_forbidden_on_every_operation,
    environments_are_isolated,
    idempotent_replay_is_identical,
    kept_and_unkept_results,
    idempotency_key_header_rules,
    same_key_in_flight_is_a_conflict,
    preconditions,
    concurrent_conditional_writes_have_one_winner,
    cursor_walk_sees_each_item_once,
    cursor_and_limit_validation,
    malformed_input_never_writes,
    openapi_health_and_readiness,
);
