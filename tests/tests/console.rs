//! The operator console over HTTP (contract 12.3), on every backend: the
//! sign-in exchanges a secret for a strict session cookie; every answer
//! carries the security headers and no script; a state change without
//! its CSRF token is refused; a read-only credential sees no action and
//! its forged POST answers 403; a revoked credential's session ends at
//! once; secrets appear only where the API answer that created them is
//! shown; bad input is a page with its status, never a 500; a per_key
//! endpoint's blocked key is listed and skipped from the console; an
//! endpoint's limits are shown and changed from its page; the
//! deliveries page lists every endpoint's until one is chosen (its plan at
//! scale: `console_plans.rs`). The real browser's walk is
//! `tests/browser/main.rs`.

use billing_tests::console_kit::{unescape, ConsoleVisitor, Page};
use billing_tests::kit::{deliveries, get, text};
use billing_tests::receiver::{Behaviour, TestReceiver};
use billing_tests::{backend_tests, TestApp};
use serde_json::{json, Value};

const POLICY: &str = "default-src 'none'; style-src 'self'; img-src 'self' data:; \
                      form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// Asserts the headers every console answer carries, and that no page
/// holds a script.
#[track_caller]
fn secured(p: &Page) {
    let h = |n: &str| p.headers.get(n).and_then(|v| v.to_str().ok()).unwrap_or("");
    assert_eq!(h("content-security-policy"), POLICY);
    assert_eq!(h("x-content-type-options"), "nosniff");
    assert_eq!(h("referrer-policy"), "no-referrer");
    assert_eq!(h("cache-control"), "no-store");
    assert_eq!(h("x-frame-options"), "DENY");
    let lower = p.html.to_lowercase();
    assert!(!lower.contains("<script"), "no script in a page");
    assert!(
        !lower.contains(" style="),
        "no inline style (the policy forbids it)"
    );
    let handler = lower.match_indices(" on").any(|(i, _)| {
        let rest = &lower[i + 3..];
        let name_len = rest.find(|c: char| !c.is_ascii_lowercase()).unwrap_or(0);
        name_len > 0 && rest[name_len..].starts_with('=')
    });
    assert!(!handler, "no inline event handler");
}

async fn signed_in(app: &TestApp, secret: &str) -> ConsoleVisitor {
    let mut v = ConsoleVisitor::new(app);
    let r = v.sign_in(secret).await;
    assert_eq!(r.status, 303, "{}", r.html);
    v
}

/// An endpoint (its ref, its first secret).
async fn endpoint(app: &TestApp) -> (String, String) {
    let r = app
        .post(
            "/api/v1/webhook_endpoints",
            json!({"url": "http://127.0.0.1:9/hook"}),
        )
        .send()
        .await;
    r.expect(201);
    (
        r.data()["endpoint_ref"].as_str().unwrap().to_owned(),
        r.data()["secret_versions"][0]["secret"]
            .as_str()
            .unwrap()
            .to_owned(),
    )
}

async fn endpoint_status(app: &TestApp, endpoint: &str) -> String {
    let r = app
        .get(&format!("/api/v1/webhook_endpoints/{endpoint}"))
        .send()
        .await;
    r.expect(200);
    r.data()["status"].as_str().unwrap().to_owned()
}

async fn sign_in_exchanges_a_secret_for_a_strict_session_cookie(app: TestApp) {
    let mut v = ConsoleVisitor::new(&app);
    let form = v.get("/console/sign-in").await;
    assert_eq!(form.status, 200);
    secured(&form);
    let answer = v.sign_in(&app.sandbox.secret).await;
    assert_eq!(answer.status, 303);
    secured(&answer);
    let cookie = answer
        .set_cookies()
        .into_iter()
        .find(|c| c.starts_with("billing_console="))
        .expect("a session cookie");
    for attribute in [
        "HttpOnly",
        "SameSite=Strict",
        "Path=/console",
        "Max-Age=43200",
    ] {
        assert!(cookie.contains(attribute), "{attribute} in {cookie}");
    }
    assert!(
        !cookie.contains("Secure"),
        "a loopback listener's cookie cannot be Secure: {cookie}"
    );
    assert!(
        !cookie.contains(&app.sandbox.secret),
        "the cookie never holds the secret"
    );
    let home = v.get("/console").await;
    assert_eq!((home.status, home.location()), (303, "/console/deliveries"));
    let page = v.get("/console/deliveries").await;
    assert_eq!(page.status, 200, "{}", page.html);
    secured(&page);
    assert!(page.html.contains(&app.sandbox.credential_ref));
    assert!(!page.html.contains(&app.sandbox.secret));

    // A wrong secret, a form without its token, no session at all.
    let mut stranger = ConsoleVisitor::new(&app);
    let wrong = stranger
        .sign_in("sk_test_0000000000000000000000000000000A")
        .await;
    assert_eq!(wrong.status, 401);
    assert!(stranger.session.is_none());
    let forged = stranger
        .post(
            "/console/sign-in",
            &[("secret", app.sandbox.secret.as_str())],
        )
        .await;
    assert_eq!(forged.status, 403, "a sign-in without its form's token");
    let away = stranger.get("/console/endpoints").await;
    assert_eq!(away.status, 303);
    assert!(away.location().starts_with("/console/sign-in"));
    let css = stranger.get("/console/console.css").await;
    assert_eq!(css.status, 200);
    assert!(css.headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/css"));

    // Signing out ends the session (the cookie is cleared).
    let page = v.get("/console/deliveries").await;
    let out = v
        .post("/console/sign-out", &[("csrf", page.csrf().as_str())])
        .await;
    assert_eq!(out.status, 303);
    assert!(out
        .set_cookies()
        .iter()
        .any(|c| c.starts_with("billing_console=;") && c.contains("Max-Age=0")));
}

async fn a_change_without_its_csrf_token_is_refused(app: TestApp) {
    let (endpoint, _) = endpoint(&app).await;
    let v = signed_in(&app, &app.sandbox.secret).await;
    let page = v.get(&format!("/console/endpoints/{endpoint}")).await;
    assert_eq!(page.status, 200, "{}", page.html);
    secured(&page);
    let etag = page
        .hidden("etag")
        .expect("the pause form carries the ETag");
    let path = format!("/console/endpoints/{endpoint}/pause");
    let missing = v.post(&path, &[("etag", etag.as_str())]).await;
    assert_eq!(missing.status, 403);
    secured(&missing);
    let other = signed_in(&app, &app.sandbox.secret).await;
    let foreign = other.get("/console/endpoints").await.csrf();
    let wrong = v
        .post(
            &path,
            &[("csrf", foreign.as_str()), ("etag", etag.as_str())],
        )
        .await;
    assert_eq!(wrong.status, 403, "another session's token");
    assert_eq!(endpoint_status(&app, &endpoint).await, "active");

    let done = v
        .post(
            &path,
            &[("csrf", page.csrf().as_str()), ("etag", etag.as_str())],
        )
        .await;
    assert_eq!(done.status, 303, "{}", done.html);
    assert_eq!(endpoint_status(&app, &endpoint).await, "paused");
    // The stale ETag of the page is refused by the operation itself.
    let stale = v
        .post(
            &format!("/console/endpoints/{endpoint}/resume"),
            &[("csrf", page.csrf().as_str()), ("etag", etag.as_str())],
        )
        .await;
    assert_eq!(stale.status, 412, "{}", stale.html);
    // The action is the operation, logged under the session's credential.
    let logs = app
        .get("/api/v1/request_logs?operation_id=pauseWebhookEndpoint")
        .send()
        .await;
    let logged = &logs.data()["items"][0];
    assert_eq!(logged["status"], 200);
    assert_eq!(
        logged["credential_ref"],
        app.sandbox.credential_ref.as_str()
    );
    assert_eq!(
        logged["path"],
        format!("/api/v1/webhook_endpoints/{endpoint}/pause")
    );
}

async fn a_read_only_credential_sees_no_action_and_its_forged_post_is_forbidden(app: TestApp) {
    let (endpoint, _) = endpoint(&app).await;
    let (_, secret) = app
        .principal_with(&[
            "webhooks:read_list_endpoints",
            "webhooks:read_retrieve_endpoint",
            "webhooks:read_health",
            "webhooks:read_list_subscriptions",
            "webhooks:read_list_deliveries",
            "webhooks:read_redrive_jobs",
        ])
        .await;
    let v = signed_in(&app, &secret).await;
    for path in [
        format!("/console/endpoints/{endpoint}"),
        "/console/endpoints".to_owned(),
        "/console/redrive-jobs".to_owned(),
        format!("/console/deliveries?endpoint_ref={endpoint}&status=failed"),
    ] {
        let page = v.get(&path).await;
        assert_eq!(page.status, 200, "{path}: {}", page.html);
        let posts = page.html.matches("method=\"post\"").count();
        assert_eq!(posts, 1, "{path}: only the sign-out form");
        assert!(!page.html.contains("Redrive every delivery"), "{path}");
    }
    // Pages it may not read are not in its navigation, and answer 403.
    let page = v.get("/console/endpoints").await;
    assert!(!page.html.contains("/console/request-logs"));
    assert_eq!(v.get("/console/request-logs").await.status, 403);
    assert_eq!(v.get("/console/dead-letters").await.status, 403);

    // Its own session's token does not make a forged action pass.
    let csrf = page.csrf();
    for action in ["pause", "rotate", "test-send", "limits"] {
        let forged = v
            .post(
                &format!("/console/endpoints/{endpoint}/{action}"),
                &[
                    ("csrf", csrf.as_str()),
                    ("etag", "*"),
                    ("reason", "forged"),
                    ("public_event_type", "webhook.test"),
                    ("rate_limit", "1"),
                    ("idempotency_key", "forged-1"),
                ],
            )
            .await;
        assert_eq!(forged.status, 403, "{action}: {}", forged.html);
        assert!(forged.html.contains("forbidden"));
    }
    let job = v
        .post(
            "/console/redrive-jobs",
            &[
                ("csrf", csrf.as_str()),
                ("status", "failed"),
                ("reason", "forged"),
            ],
        )
        .await;
    assert_eq!(job.status, 403);
    assert_eq!(endpoint_status(&app, &endpoint).await, "active");
    let r = app
        .get(&format!("/api/v1/webhook_endpoints/{endpoint}"))
        .send()
        .await;
    assert_eq!(r.data()["secret_versions"].as_array().unwrap().len(), 1);
}

async fn a_revoked_credentials_session_ends_at_once(app: TestApp) {
    let issued = app
        .post(
            &format!(
                "/api/v1/service_accounts/{}/credentials",
                app.sandbox.principal_ref
            ),
            json!({}),
        )
        .send()
        .await;
    issued.expect(201);
    let (credential, secret) = (
        issued.data()["credential_ref"].as_str().unwrap().to_owned(),
        issued.data()["secret"].as_str().unwrap().to_owned(),
    );
    let v = signed_in(&app, &secret).await;
    assert_eq!(v.get("/console/endpoints").await.status, 200);
    app.post(
        &format!("/api/v1/credentials/{credential}/revoke"),
        json!({"reason": "left the team"}),
    )
    .if_match("*")
    .send()
    .await
    .expect(200);
    let after = v.get("/console/endpoints").await;
    assert_eq!(after.status, 303);
    assert_eq!(after.location(), "/console/sign-in?ended=1");
    let ended = v.get("/console/sign-in?ended=1").await;
    assert!(ended.html.contains("Your session has ended"));
    let post = v.post("/console/sign-out", &[("csrf", "x")]).await;
    assert_eq!(
        post.status, 303,
        "a POST of an ended session changes nothing"
    );
    // Its secret no longer signs in either.
    let mut again = ConsoleVisitor::new(&app);
    assert_eq!(again.sign_in(&secret).await.status, 401);
}

async fn secrets_appear_only_in_the_answer_that_created_them(app: TestApp) {
    let (endpoint, first) = endpoint(&app).await;
    let v = signed_in(&app, &app.sandbox.secret).await;
    let page = v.get(&format!("/console/endpoints/{endpoint}")).await;
    assert!(
        !page.html.contains(&first),
        "an endpoint's secret is never shown again"
    );
    assert!(page.html.contains(&first[first.len() - 4..]), "its hint is");
    let fields = [
        ("csrf", page.csrf()),
        ("etag", page.hidden("etag").unwrap()),
        ("reason", "scheduled rotation".to_owned()),
        ("idempotency_key", "rotate-once".to_owned()),
    ];
    let fields: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let path = format!("/console/endpoints/{endpoint}/rotate");
    let rotated = v.post(&path, &fields).await;
    assert_eq!(rotated.status, 200, "{}", rotated.html);
    secured(&rotated);
    let shown: Vec<&str> = rotated
        .html
        .split(|c: char| !(c.is_ascii_alphanumeric() || "_+/=".contains(c)))
        .filter(|w| w.starts_with("whsec_"))
        .collect();
    assert_eq!(shown.len(), 1, "the new secret, once: {}", rotated.html);
    let new = shown[0].to_owned();
    // Replaying the same form does not show it again; nor does any page.
    let replay = v.post(&path, &fields).await;
    assert_eq!(replay.status, 200);
    assert!(!replay.html.contains(&new));
    assert!(replay.html.contains("shown the first time only"));
    for p in [
        format!("/console/endpoints/{endpoint}"),
        "/console/endpoints".to_owned(),
        "/console/request-logs".to_owned(),
    ] {
        let html = v.get(&p).await.html;
        assert!(!html.contains(&new) && !html.contains(&first), "{p}");
        assert!(!html.contains(&app.sandbox.secret), "{p}");
    }
}

async fn every_page_renders_and_bad_input_is_a_page_never_a_500(app: TestApp) {
    let (endpoint, _) = endpoint(&app).await;
    let v = signed_in(&app, &app.sandbox.secret).await;
    for path in [
        "/console/deliveries".to_owned(),
        format!("/console/deliveries?endpoint_ref={endpoint}&status=failed&last_response_class=5xx&created_after=2026-01-01T00:00"),
        "/console/redrive-jobs".to_owned(),
        format!("/console/redrive-jobs?status=failed&endpoint_ref={endpoint}"),
        "/console/endpoints".to_owned(),
        "/console/endpoints?status=paused".to_owned(),
        format!("/console/endpoints/{endpoint}"),
        "/console/event-types".to_owned(),
        "/console/dead-letters".to_owned(),
        "/console/dead-letters?reason=anything".to_owned(),
        "/console/request-logs".to_owned(),
        "/console/request-logs?operation_id=listWebhookEndpoints&status=200".to_owned(),
    ] {
        let page = v.get(&path).await;
        assert_eq!(page.status, 200, "{path}: {}", page.html);
        secured(&page);
    }
    let endpoint_page = v.get(&format!("/console/endpoints/{endpoint}")).await;
    assert_eq!(
        endpoint_page.html.matches("<svg").count(),
        4,
        "two charts a window"
    );
    let catalogue = v.get("/console/event-types").await;
    assert!(catalogue.html.contains("payment.succeeded"));
    assert!(catalogue.html.contains("Example payload"));

    let bad = [
        ("/console/deliveries/not-a-ref", 400),
        ("/console/deliveries/whd_AAAAAAAAAAAA", 404),
        ("/console/deliveries?q=nonsense", 400),
        ("/console/deliveries?q=evt_short", 400),
        ("/console/deliveries?endpoint_ref=whep_AAAAAAAAAAAA", 404),
        ("/console/deliveries?status=lost", 400),
        (
            "/console/deliveries?public_event_type=nothing.happened",
            400,
        ),
        ("/console/deliveries?created_before=yesterday", 400),
        ("/console/deliveries?last_response_class=2xx", 400),
        ("/console/deliveries?cursor=forged", 400),
        ("/console/deliveries?endpoint_ref=nope", 400),
        (
            "/console/deliveries?endpoint_ref=whep_AAAAAAAAAAAA&status=lost",
            400,
        ),
        (
            "/console/deliveries?endpoint_ref=whep_AAAAAAAAAAAA&created_after=yesterday",
            400,
        ),
        (
            "/console/deliveries?endpoint_ref=whep_AAAAAAAAAAAA&cursor=forged",
            400,
        ),
        ("/console/redrive-jobs/rdj_AAAAAAAAAAAA", 404),
        ("/console/redrive-jobs/%00", 400),
        ("/console/endpoints/whep_AAAAAAAAAAAA", 404),
        ("/console/request-logs?status=abc", 400),
        ("/console/request-logs?operation_id=nothing", 400),
        ("/console/no-such-page", 404),
        ("/console/deliveries/whd_AAAAAAAAAAAA/more/segments", 404),
    ];
    for (path, status) in bad {
        let page = v.get(path).await;
        assert_eq!(page.status, status, "{path}: {}", page.html);
        secured(&page);
    }
    let csrf = endpoint_page.csrf();
    let posts = [
        (format!("/console/endpoints/{endpoint}/explode"), 404),
        ("/console/endpoints/whep_AAAAAAAAAAAA/pause".to_owned(), 428),
        (
            "/console/endpoints/whep_AAAAAAAAAAAA/test-send".to_owned(),
            400,
        ),
        (format!("/console/endpoints/{endpoint}/rotate"), 428),
        (format!("/console/endpoints/{endpoint}/test-send"), 400),
        ("/console/redrive-jobs".to_owned(), 400),
        (
            "/console/redrive-jobs/rdj_AAAAAAAAAAAA/cancel".to_owned(),
            404,
        ),
        (
            "/console/deliveries/whd_AAAAAAAAAAAA/redrive".to_owned(),
            428,
        ),
    ];
    for (path, status) in posts {
        let page = v
            .post(&path, &[("csrf", csrf.as_str()), ("reason", "r")])
            .await;
        assert_eq!(page.status, status, "{path}: {}", page.html);
        secured(&page);
    }
    let junk = v
        .post(&format!("/console/endpoints/{endpoint}/pause"), &[])
        .await;
    assert_eq!(junk.status, 403, "no token: refused before anything");
}

async fn search_finds_a_delivery_and_an_events_deliveries(app: TestApp) {
    let (endpoint, _) = endpoint(&app).await;
    let sent = app
        .post(
            &format!("/api/v1/webhook_endpoints/{endpoint}/test_send"),
            json!({"public_event_type": "webhook.test"}),
        )
        .send()
        .await;
    sent.expect(201);
    let (delivery, event) = (
        sent.data()["delivery_ref"].as_str().unwrap().to_owned(),
        sent.data()["event_ref"].as_str().unwrap().to_owned(),
    );
    let v = signed_in(&app, &app.sandbox.secret).await;
    let by_ref = v.get(&format!("/console/deliveries?q={delivery}")).await;
    assert_eq!(
        (by_ref.status, by_ref.location()),
        (303, format!("/console/deliveries/{delivery}").as_str())
    );
    let page = v.get(&format!("/console/deliveries/{delivery}")).await;
    assert_eq!(page.status, 200, "{}", page.html);
    assert!(
        page.html.contains("test_send"),
        "its body view: {}",
        page.html
    );
    let by_event = v.get(&format!("/console/deliveries?q={event}")).await;
    assert_eq!(by_event.status, 200, "{}", by_event.html);
    assert!(by_event.html.contains(&delivery));
    // Another environment's event finds nothing.
    let live = signed_in(&app, &app.live.secret).await;
    let elsewhere = live.get(&format!("/console/deliveries?q={event}")).await;
    assert_eq!(elsewhere.status, 200);
    assert!(!elsewhere.html.contains(&delivery));
    assert_eq!(
        live.get(&format!("/console/deliveries/{delivery}"))
            .await
            .status,
        404
    );
}

/// The hidden field `name` of the page's form posting to `action`.
#[track_caller]
fn hidden_in(page: &Page, action: &str, name: &str) -> String {
    let start = page
        .html
        .find(&format!("action=\"{action}\""))
        .unwrap_or_else(|| panic!("a form to {action}: {}", page.html));
    let form = &page.html[start..];
    let form = &form[..form.find("</form>").expect("the form's end")];
    let marker = format!("name=\"{name}\" value=\"");
    let at = form
        .find(&marker)
        .unwrap_or_else(|| panic!("{name} in the form to {action}"))
        + marker.len();
    let len = form[at..].find('"').expect("the value's end");
    unescape(&form[at..at + len])
}

/// Publishes a `refund.created` with the ordering key `key`, as another
/// system would.
async fn publish_keyed(app: &TestApp, key: &str) {
    let (_, envelope) = app.envelope("refund.created", json!({"refund_ref": "ref_AAAAAAAAAAAA"}));
    let mut envelope: Value = serde_json::from_str(&envelope).unwrap();
    envelope["ordering_key"] = json!(key);
    app.accept(&envelope.to_string()).await;
}

async fn blocked_keys(app: &TestApp, endpoint: &str) -> i64 {
    let r = get(app, &format!("/api/v1/webhook_endpoints/{endpoint}/health")).await;
    r.data()["blocked_keys"].as_i64().expect("blocked_keys")
}

/// A per_key endpoint's failed head is listed on the endpoint's page with
/// redrive and skip (a read-only credential sees it without them); the
/// waiting delivery's page links the head it waits for. Skip, posted from
/// the endpoint's page, is the operation with the head's ETag: the head
/// stays failed, shown skipped with its reason, and its key goes on.
async fn a_blocked_key_is_listed_and_skipped_from_the_endpoint_page(app: TestApp) {
    let receiver = TestReceiver::start(Behaviour::Status(500)).await;
    let r = app
        .post(
            "/api/v1/webhook_endpoints",
            json!({"url": receiver.url(), "ordering": "per_key"}),
        )
        .send()
        .await;
    r.expect(201);
    let endpoint = text(&r.data()["endpoint_ref"]);
    app.subscribe(&endpoint, "refund.created", 1).await;
    for _ in 0..2 {
        publish_keyed(&app, "order-42").await;
    }
    app.dispatch_due("0s").await;
    let mut ds = deliveries(&app, &endpoint).await;
    ds.sort_by_key(|d| d["sequence"].as_i64());
    assert_eq!(ds.len(), 2);
    assert_eq!(
        (&ds[0]["status"], &ds[1]["status"]),
        (&json!("failed"), &json!("pending"))
    );
    let (head, next) = (text(&ds[0]["delivery_ref"]), text(&ds[1]["delivery_ref"]));
    assert_eq!(blocked_keys(&app, &endpoint).await, 1);

    let v = signed_in(&app, &app.sandbox.secret).await;
    let path = format!("/console/endpoints/{endpoint}");
    let page = v.get(&path).await;
    assert_eq!(page.status, 200, "{}", page.html);
    secured(&page);
    assert!(page.html.contains("per_key"), "its ordering");
    assert!(page.html.contains("id=\"blocked-keys\""), "{}", page.html);
    let row = &page.html[page
        .html
        .find(&format!("data-ref=\"{head}\""))
        .expect("the head's row")..];
    let row = &row[..row.find("</tr>").unwrap()];
    for shown in ["order-42", "<td class=\"num\">1</td>", "refund.created"] {
        assert!(row.contains(shown), "{shown} in {row}");
    }
    assert!(!page.html.contains(&next), "only the head is listed");
    let skip = format!("/console/deliveries/{head}/skip");
    let redrive = format!("/console/deliveries/{head}/redrive");
    assert!(page.html.contains(&format!("action=\"{redrive}\"")));

    // A read-only credential sees the head, and no action.
    let (_, secret) = app
        .principal_with(&[
            "webhooks:read_retrieve_endpoint",
            "webhooks:read_list_deliveries",
            "webhooks:read_retrieve_delivery",
        ])
        .await;
    let reader = signed_in(&app, &secret).await;
    for p in [path.clone(), format!("/console/deliveries/{head}")] {
        let seen = reader.get(&p).await;
        assert_eq!(seen.status, 200, "{p}: {}", seen.html);
        assert!(seen.html.contains(&head), "{p}");
        assert_eq!(seen.html.matches("method=\"post\"").count(), 1, "{p}");
    }

    // The waiting delivery shows its key, sequence and the head it waits
    // for, and offers no skip; the head offers one.
    let waiting = v.get(&format!("/console/deliveries/{next}")).await;
    assert_eq!(waiting.status, 200, "{}", waiting.html);
    assert!(waiting.html.contains("order-42"));
    assert!(
        waiting.html.contains("id=\"sequence\">2<"),
        "{}",
        waiting.html
    );
    assert!(waiting
        .html
        .contains(&format!("href=\"/console/deliveries/{head}\"")));
    assert!(!waiting.html.contains("/skip\""));
    let head_page = v.get(&format!("/console/deliveries/{head}")).await;
    assert!(head_page.html.contains(&format!("action=\"{skip}\"")));

    let etag = hidden_in(&page, &skip, "etag");
    let done = v
        .post(
            &skip,
            &[
                ("csrf", hidden_in(&page, &skip, "csrf").as_str()),
                ("etag", etag.as_str()),
                (
                    "idempotency_key",
                    hidden_in(&page, &skip, "idempotency_key").as_str(),
                ),
                ("reason", "rebuilt by hand"),
            ],
        )
        .await;
    assert_eq!(
        (done.status, done.location()),
        (
            303,
            format!("/console/deliveries/{head}?notice=skipped").as_str()
        ),
        "{}",
        done.html
    );
    let skipped = v.get(done.location()).await;
    assert_eq!(skipped.status, 200, "{}", skipped.html);
    assert!(skipped.html.contains("id=\"skipped-at\""));
    assert!(skipped.html.contains("rebuilt by hand"));
    assert!(!skipped.html.contains(&format!("action=\"{skip}\"")));
    let d = get(&app, &format!("/api/v1/webhook_deliveries/{head}")).await;
    assert_eq!(d.data()["status"], "failed");
    assert_eq!(d.data()["skip_reason"], "rebuilt by hand");
    assert_eq!(blocked_keys(&app, &endpoint).await, 0);
    let logs = app
        .get("/api/v1/request_logs?operation_id=skipWebhookDelivery")
        .send()
        .await;
    assert_eq!(
        logs.data()["items"][0]["credential_ref"],
        app.sandbox.credential_ref.as_str()
    );
    // The page's ETag is stale now: the operation refuses another skip.
    let stale = v
        .post(
            &skip,
            &[
                ("csrf", page.csrf().as_str()),
                ("etag", etag.as_str()),
                ("idempotency_key", "skip-again"),
                ("reason", "again"),
            ],
        )
        .await;
    assert_eq!(stale.status, 412, "{}", stale.html);
    let after = v.get(&path).await;
    assert!(!after.html.contains("id=\"blocked-keys\""));

    // The key goes on past its skipped head.
    receiver.set(Behaviour::Status(200));
    app.dispatch_due("0s").await;
    let d = get(&app, &format!("/api/v1/webhook_deliveries/{next}")).await;
    assert_eq!(d.data()["status"], "succeeded", "{}", d.data());
}

/// The deliveries the page lists, in its order.
fn listed(page: &Page) -> Vec<String> {
    let marker = "data-ref=\"";
    page.html
        .match_indices(marker)
        .map(|(i, _)| {
            let rest = &page.html[i + marker.len()..];
            rest[..rest.find('"').expect("the ref's end")].to_owned()
        })
        .collect()
}

/// The page's "Next page" link, if it has one.
fn next_link(page: &Page) -> Option<String> {
    let marker = "class=\"more\"><a href=\"";
    let at = page.html.find(marker)? + marker.len();
    let len = page.html[at..].find('"')?;
    Some(unescape(&page.html[at..at + len]))
}

/// A test delivery to `endpoint` as `secret`'s environment; its ref and
/// its `created_at`.
async fn test_send(app: &TestApp, secret: &str, endpoint: &str) -> (String, String) {
    // Apart in time from the one before, so that newest first is one order.
    tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    let r = app
        .post(
            &format!("/api/v1/webhook_endpoints/{endpoint}/test_send"),
            json!({"public_event_type": "webhook.test"}),
        )
        .auth(secret)
        .send()
        .await;
    r.expect(201);
    (
        text(&r.data()["delivery_ref"]),
        text(&r.data()["created_at"]),
    )
}

/// The deliveries page lists the newest deliveries of every endpoint of
/// the caller's environment before any endpoint is chosen (contract 12.3),
/// each row with its endpoint; the endpoint is one more filter, and every
/// other filter works with or without it; pages follow one another with
/// their cursor, which no other filter accepts.
async fn the_deliveries_page_lists_every_endpoint_until_one_is_chosen(app: TestApp) {
    let failing = TestReceiver::start(Behaviour::Status(500)).await;
    let answering = TestReceiver::start(Behaviour::Status(200)).await;
    let create = |url: String, secret: String| {
        let app = &app;
        async move {
            let r = app
                .post("/api/v1/webhook_endpoints", json!({ "url": url }))
                .auth(&secret)
                .send()
                .await;
            r.expect(201);
            text(&r.data()["endpoint_ref"])
        }
    };
    let sandbox = app.sandbox.secret.clone();
    let a = create(failing.url(), sandbox.clone()).await;
    let b = create(answering.url(), sandbox.clone()).await;
    let (a1, _) = test_send(&app, &sandbox, &a).await;
    let (b1, b1_at) = test_send(&app, &sandbox, &b).await;
    app.dispatch_due("0s").await;
    let (b2, _) = test_send(&app, &sandbox, &b).await;
    // Live endpoints take https only; this one is never dispatched to.
    let elsewhere = create(
        "https://example.com/hook".to_owned(),
        app.live.secret.clone(),
    )
    .await;
    let (l1, _) = test_send(&app, &app.live.secret, &elsewhere).await;
    let status = |d: &str| {
        let (app, path) = (&app, format!("/api/v1/webhook_deliveries/{d}"));
        async move { text(&get(app, &path).await.data()["status"]) }
    };
    assert_eq!(
        (status(&a1).await, status(&b1).await, status(&b2).await),
        ("failed".into(), "succeeded".into(), "pending".into())
    );

    let v = signed_in(&app, &app.sandbox.secret).await;
    let page = v.get("/console/deliveries").await;
    assert_eq!(page.status, 200, "{}", page.html);
    secured(&page);
    assert_eq!(
        listed(&page),
        [b2.as_str(), b1.as_str(), a1.as_str()],
        "every endpoint's, newest first, none of another environment: {}",
        page.html
    );
    assert!(!page.html.contains(&l1));
    for (delivery, endpoint, url) in [(&a1, &a, failing.url()), (&b1, &b, answering.url())] {
        let row = &page.html[page
            .html
            .find(&format!("data-ref=\"{delivery}\""))
            .expect("its row")..];
        let row = &row[..row.find("</tr>").unwrap()];
        assert!(
            row.contains(&format!("href=\"/console/endpoints/{endpoint}\"")) && row.contains(&url),
            "the row shows its endpoint: {row}"
        );
    }
    assert!(next_link(&page).is_none(), "one page");

    // The endpoint is one more filter; the others work with it or without.
    let b1_at = b1_at.replace(':', "%3A").replace('+', "%2B");
    for (query, expected) in [
        (format!("endpoint_ref={a}"), vec![a1.as_str()]),
        (format!("endpoint_ref={b}"), vec![b2.as_str(), b1.as_str()]),
        ("status=failed".to_owned(), vec![a1.as_str()]),
        ("status=succeeded".to_owned(), vec![b1.as_str()]),
        ("status=pending".to_owned(), vec![b2.as_str()]),
        ("status=held".to_owned(), vec![]),
        (
            format!("status=succeeded&endpoint_ref={b}"),
            vec![b1.as_str()],
        ),
        (format!("status=failed&endpoint_ref={b}"), vec![]),
        ("last_response_class=5xx".to_owned(), vec![a1.as_str()]),
        (
            "last_response_class=5xx&status=failed".to_owned(),
            vec![a1.as_str()],
        ),
        (
            "public_event_type=webhook.test".to_owned(),
            vec![b2.as_str(), b1.as_str(), a1.as_str()],
        ),
        ("public_event_type=payment.succeeded".to_owned(), vec![]),
        (format!("created_after={b1_at}"), vec![b2.as_str()]),
        (format!("created_before={b1_at}"), vec![a1.as_str()]),
        (format!("created_before={b1_at}&endpoint_ref={b}"), vec![]),
    ] {
        let page = v.get(&format!("/console/deliveries?{query}")).await;
        assert_eq!(page.status, 200, "{query}: {}", page.html);
        assert_eq!(listed(&page), expected, "{query}");
    }
    let failed = v.get("/console/deliveries?status=failed").await;
    assert!(
        failed
            .html
            .contains("href=\"/console/redrive-jobs?status=failed\""),
        "failed deliveries of every endpoint can be redriven by filter: {}",
        failed.html
    );

    // Pages of 50, newest first, each delivery once.
    let mut all = vec![b2.clone(), b1.clone(), a1.clone()];
    for _ in 0..50 {
        all.insert(0, test_send(&app, &sandbox, &a).await.0);
    }
    let first = v.get("/console/deliveries").await;
    assert_eq!(listed(&first), &all[..50]);
    let next = next_link(&first).expect("a next page");
    let second = v.get(&next).await;
    assert_eq!(second.status, 200, "{}", second.html);
    assert_eq!(listed(&second), &all[50..]);
    assert!(next_link(&second).is_none());
    // Its cursor pages this list only: not under another filter.
    let cursor = next.split_once("cursor=").expect("a cursor").1;
    let refused = v
        .get(&format!(
            "/console/deliveries?status=pending&cursor={cursor}"
        ))
        .await;
    assert_eq!(refused.status, 400, "{}", refused.html);

    // The list across endpoints asks the list's permission.
    let (_, secret) = app.principal_with(&["webhooks:read_list_endpoints"]).await;
    let stranger = signed_in(&app, &secret).await;
    let page = stranger.get("/console/deliveries").await;
    assert_eq!(page.status, 403, "{}", page.html);
}

/// The text of the `dd` with `id` in `html`.
fn fact(html: &str, id: &str) -> String {
    let start = html
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("#{id} in {html}"));
    let rest = &html[start..];
    let open = rest.find('>').unwrap() + 1;
    let close = rest.find("</dd>").unwrap();
    rest[open..close].to_owned()
}

/// The endpoint's page shows its limits and the rate they leave it; the
/// limits form runs `updateWebhookEndpoint` with the page's ETag, sending
/// only what changed (an empty rate limit is none); a refused value is
/// the operation's 400 naming the field, a stale page its 412.
async fn limits_are_shown_and_changed_from_the_endpoint_page(app: TestApp) {
    let (endpoint, _) = endpoint(&app).await;
    let v = signed_in(&app, &app.sandbox.secret).await;
    let path = format!("/console/endpoints/{endpoint}");
    let page = v.get(&path).await;
    assert_eq!(page.status, 200, "{}", page.html);
    secured(&page);
    assert_eq!(fact(&page.html, "ordering"), "none");
    assert_eq!(fact(&page.html, "rate-limit"), "none");
    assert_eq!(fact(&page.html, "max-in-flight"), "100");
    assert_eq!(fact(&page.html, "effective-rate"), "unlimited");
    assert_eq!(fact(&page.html, "throttled-until"), "—");
    assert!(page.html.contains("id=\"limits\""), "the form");
    let etag = page.hidden("etag").expect("the page's ETag");
    let csrf = page.csrf();
    let limits = format!("{path}/limits");
    let post = |fields: Vec<(&'static str, String)>| {
        let v = &v;
        let limits = limits.clone();
        async move {
            let fields: Vec<(&str, &str)> = fields.iter().map(|(k, x)| (*k, x.as_str())).collect();
            v.post(&limits, &fields).await
        }
    };
    let form = |etag: &str, shown: (&str, &str), given: (&str, &str)| {
        vec![
            ("csrf", csrf.clone()),
            ("etag", etag.to_owned()),
            ("shown_rate_limit", shown.0.to_owned()),
            ("shown_max_in_flight", shown.1.to_owned()),
            ("rate_limit", given.0.to_owned()),
            ("max_in_flight", given.1.to_owned()),
        ]
    };

    let bad = post(form(&etag, ("", "100"), ("0", "100"))).await;
    assert_eq!(bad.status, 400, "{}", bad.html);
    secured(&bad);
    assert!(bad.html.contains("rate_limit"), "{}", bad.html);

    let done = post(form(&etag, ("", "100"), ("25", "100"))).await;
    assert_eq!(done.status, 303, "{}", done.html);
    assert_eq!(done.location(), format!("{path}?notice=limits_saved"));
    let shown = get(&app, &format!("/api/v1/webhook_endpoints/{endpoint}")).await;
    assert_eq!(shown.data()["rate_limit"], 25);
    assert_eq!(shown.data()["max_in_flight"], 100);
    let page = v.get(done.location()).await;
    assert_eq!(page.status, 200, "{}", page.html);
    assert!(page.html.contains("limits are saved"), "the notice");
    assert_eq!(fact(&page.html, "rate-limit"), "25/s");
    assert_eq!(fact(&page.html, "effective-rate"), "25/s");
    assert!(
        page.html
            .contains("name=\"rate_limit\" min=\"1\" max=\"10000\" step=\"1\" value=\"25\""),
        "{}",
        page.html
    );

    // The page it was sent from is stale now.
    let stale = post(form(&etag, ("", "100"), ("30", "100"))).await;
    assert_eq!(stale.status, 412, "{}", stale.html);

    // Emptied: no rate limit; a new max_in_flight.
    let fresh = page.hidden("etag").unwrap();
    let done = post(form(&fresh, ("25", "100"), ("", "8"))).await;
    assert_eq!(done.status, 303, "{}", done.html);
    let shown = get(&app, &format!("/api/v1/webhook_endpoints/{endpoint}")).await;
    assert!(shown.data()["rate_limit"].is_null(), "{}", shown.text);
    assert_eq!(shown.data()["max_in_flight"], 8);
    let page = v.get(&path).await;
    assert_eq!(fact(&page.html, "rate-limit"), "none");
    assert_eq!(fact(&page.html, "max-in-flight"), "8");
    let logs = get(
        &app,
        "/api/v1/request_logs?operation_id=updateWebhookEndpoint&status=200",
    )
    .await;
    let logged = &logs.data()["items"][0];
    assert_eq!(
        logged["credential_ref"],
        app.sandbox.credential_ref.as_str()
    );
    assert_eq!(logged["method"], "PATCH");
}

/// The `data` of a 200 answer to GET `path`.
async fn read(app: &TestApp, path: &str) -> Value {
    let r = app.get(path).send().await;
    r.expect(200);
    r.data().clone()
}

/// A subscription on a test clock moved up (`charge_now`: an invoice of
/// two proration lines), back down (678 into the buyer's credit), then up
/// again with `next_invoice` (two lines waiting).
async fn changed_subscription(app: &TestApp) -> Value {
    use billing_tests::kit::{at, eur, published_config, sellable};
    let basic = sellable(app, "Basic", eur("1000"), Some("month")).await;
    let premium = sellable(app, "Premium", eur("2000"), Some("month")).await;
    let config = published_config(
        app,
        json!({"name": "Subscribe", "success_url": "https://example.com/ok",
            "line_items": [{"offer_ref": basic.offer, "quantity": 1}]}),
    )
    .await;
    let r = app
        .post(
            "/api/v1/test_clocks",
            json!({"frozen_time": "2026-01-01T00:00:00.000Z"}),
        )
        .send()
        .await;
    r.expect(201);
    let clock = text(&r.data()["test_clock_ref"]);
    let email = format!("{}@example.com", billing_tests::unique_key());
    let r = app
        .post(
            billing_tests::kit::api::SESSIONS,
            json!({"config_ref": config, "buyer": {"email": email}, "test_clock_ref": clock}),
        )
        .send()
        .await;
    r.expect(201);
    let session = text(&r.data()["checkout_session_ref"]);
    let r = app
        .post(
            &at(billing_tests::kit::api::SESSIONS, &session, "/pay"),
            json!({"payment_method": "pm_card_visa"}),
        )
        .send()
        .await;
    r.expect(200);
    let sub = text(&r.data()["subscription"]["subscription_ref"]);
    let r = app
        .post(
            &at("/api/v1/test_clocks", &clock, "/advance"),
            json!({"frozen_time": "2026-01-11T00:00:00.000Z"}),
        )
        .send()
        .await;
    r.expect(202);
    commerce::jobs::run_due(
        &app.store,
        &commerce::jobs::Rules::default(),
        "test",
        domain::Timestamp::now(),
    )
    .await;
    for (price, proration) in [
        (&premium.price, "charge_now"),
        (&basic.price, "charge_now"),
        (&premium.price, "next_invoice"),
    ] {
        let now = read(app, &format!("/api/v1/subscriptions/{sub}")).await;
        app.post(
            &format!("/api/v1/subscriptions/{sub}/change"),
            json!({"price_ref": price, "proration": proration}),
        )
        .if_match(&text(&now["etag"]))
        .send()
        .await
        .expect(200);
    }
    read(app, &format!("/api/v1/subscriptions/{sub}")).await
}

/// The `(kind, amount)` of each line of the table with `class` in `html`.
fn line_rows(html: &str, class: &str) -> Vec<(String, String)> {
    let start = html
        .find(&format!("<table class=\"{class}\""))
        .unwrap_or_else(|| panic!("table.{class} in {html}"));
    let table = &html[start..start + html[start..].find("</table>").unwrap()];
    table
        .split("data-kind=\"")
        .skip(1)
        .map(|row| {
            let kind = row[..row.find('"').unwrap()].to_owned();
            let cell = row.split("<td class=\"amount\">").nth(1).unwrap();
            (kind, cell[..cell.find("</td>").unwrap()].to_owned())
        })
        .collect()
}

/// The subscriptions page lists it; its page shows its pending invoice
/// lines, its latest invoice's lines and the buyer's credit balance, read
/// through the operations; a credential without the invoice and buyer
/// reads sees the subscription and is told what it lacks; an unknown or
/// malformed reference is a page with its status.
async fn a_subscription_shows_its_lines_and_the_buyers_credit(app: TestApp) {
    let sub = changed_subscription(&app).await;
    let r = text(&sub["subscription_ref"]);
    let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter()
            .map(|(k, a)| (k.to_string(), a.to_string()))
            .collect()
    };
    let v = signed_in(&app, &app.sandbox.secret).await;
    let list = v.get("/console/subscriptions").await;
    assert_eq!(list.status, 200, "{}", list.html);
    secured(&list);
    assert!(list.html.contains(&format!("/console/subscriptions/{r}")));
    assert!(
        list.html.contains("href=\"/console/subscriptions\""),
        "in the navigation"
    );
    let filtered = v
        .get(&format!(
            "/console/subscriptions?status=canceled&buyer_ref={}",
            text(&sub["buyer_ref"])
        ))
        .await;
    assert_eq!(filtered.status, 200, "{}", filtered.html);
    assert!(filtered.html.contains("No subscription."));

    let page = v.get(&format!("/console/subscriptions/{r}")).await;
    assert_eq!(page.status, 200, "{}", page.html);
    secured(&page);
    assert!(fact(&page.html, "subscription-status").contains("active"));
    assert_eq!(fact(&page.html, "credit-balance"), "EUR 678");
    assert_eq!(
        line_rows(&page.html, "pending-lines"),
        pairs(&[
            ("proration_credit", "EUR -677"),
            ("proration_debit", "EUR 1355")
        ])
    );
    assert_eq!(fact(&page.html, "invoice-total"), "EUR 678");
    assert!(fact(&page.html, "invoice-status").contains("paid"));
    assert_eq!(
        line_rows(&page.html, "invoice-lines"),
        pairs(&[
            ("proration_credit", "EUR -677"),
            ("proration_debit", "EUR 1355")
        ])
    );
    let invoices = read(
        &app,
        &format!("/api/v1/invoices?buyer_ref={}", text(&sub["buyer_ref"])),
    )
    .await;
    let numbers: Vec<String> = invoices["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| text(&i["number"]))
        .collect();
    assert_eq!(numbers.len(), 2, "the first period's and the upgrade's");
    let latest = numbers.iter().max().unwrap();
    assert_eq!(&fact(&page.html, "invoice-number"), latest);

    // Only the subscription reads: the rest is named, not shown.
    let (_, secret) = app
        .principal_with(&["subscriptions:read_list", "subscriptions:read_retrieve"])
        .await;
    let narrow = signed_in(&app, &secret).await;
    let home = narrow.get("/console").await;
    assert_eq!(home.location(), "/console/subscriptions");
    let page = narrow.get(&format!("/console/subscriptions/{r}")).await;
    assert_eq!(page.status, 200, "{}", page.html);
    assert!(fact(&page.html, "credit-balance").contains("buyers:read_retrieve"));
    assert!(page.html.contains("invoices:read_list"));
    assert!(!page.html.contains("invoice-lines"));
    assert_eq!(line_rows(&page.html, "pending-lines").len(), 2);
    assert_eq!(narrow.get("/console/deliveries").await.status, 403);

    for (path, status) in [
        ("/console/subscriptions/sub_AAAAAAAAAAAA", 404),
        ("/console/subscriptions?status=lost", 400),
        ("/console/subscriptions?cursor=forged", 400),
    ] {
        let page = v.get(path).await;
        assert_eq!(page.status, status, "{path}: {}", page.html);
        secured(&page);
    }
    let malformed = v.get("/console/subscriptions/not-a-ref").await;
    assert!([400, 404].contains(&malformed.status), "{}", malformed.html);
}

backend_tests!(
    sign_in_exchanges_a_secret_for_a_strict_session_cookie,
    a_change_without_its_csrf_token_is_refused,
    a_read_only_credential_sees_no_action_and_its_forged_post_is_forbidden,
    a_revoked_credentials_session_ends_at_once,
    secrets_appear_only_in_the_answer_that_created_them,
    every_page_renders_and_bad_input_is_a_page_never_a_500,
    search_finds_a_delivery_and_an_events_deliveries,
    a_blocked_key_is_listed_and_skipped_from_the_endpoint_page,
    the_deliveries_page_lists_every_endpoint_until_one_is_chosen,
    limits_are_shown_and_changed_from_the_endpoint_page,
    a_subscription_shows_its_lines_and_the_buyers_credit,
);
