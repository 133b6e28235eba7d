//! The administration surface, black-box (contract sections 1-7, mainly 3):
//! environments, service accounts, their credentials and grants, request
//! logs and bootstrap. Every test runs on SQLite and PostgreSQL.

use billing_tests::kit::{get, is_ref};
use billing_tests::{backend_tests, unique_key, Call, Resp, TestApp};
use domain::Timestamp;
use serde_json::{json, Value};
use std::time::Duration;

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

const ACCOUNTS: &str = "/api/v1/service_accounts";
/// Well-formed references that exist nowhere.
const NO_ACCOUNT: &str = "sa_AAAAAAAAAAAA";
const NO_CREDENTIAL: &str = "cred_AAAAAAAAAAAA";

fn account(principal: &str, rest: &str) -> String {
    format!("{ACCOUNTS}/{principal}{rest}")
}

fn credential(credential_ref: &str, action: &str) -> String {
    format!("/api/v1/credentials/{credential_ref}/{action}")
}

/// `v[field]` as a string.
fn field_text<'a>(v: &'a Value, field: &str) -> &'a str {
    v[field]
        .as_str()
        .unwrap_or_else(|| panic!("`{field}` is not a string in {v}"))
}

/// A list answer's items, without checking its status.
fn listed(r: &Resp) -> &Vec<Value> {
    r.data()["items"].as_array().expect("a list")
}

fn is_secret(s: &str, mode: &str) -> bool {
    s.strip_prefix(&format!("sk_{mode}_"))
        .is_some_and(|b| b.len() == 32 && b.bytes().all(|c| c.is_ascii_alphanumeric()))
}

/// `set` hold RFC 3339 UTC timestamps ending in `Z`; `unset` are null.
#[track_caller]
fn assert_times(v: &Value, set: &[&str], unset: &[&str]) {
    for f in set {
        let t = field_text(v, f);
        assert!(
            t.ends_with('Z') && Timestamp::parse(t).is_some(),
            "{f}: {t}"
        );
    }
    for f in unset {
        assert!(v[f].is_null(), "`{f}` should be null in {v}");
    }
}

/// The `etag` field equals the `ETag` header.
#[track_caller]
fn assert_etag_field(r: &Resp) {
    assert_eq!(r.data()["etag"], r.etag().as_str(), "body: {}", r.text);
}

#[track_caller]
fn assert_invalid(r: &Resp, field: &str) {
    r.expect_error(400, "validation_failed");
    assert!(
        r.fields().iter().any(|f| f == field),
        "details should name `{field}`: {}",
        r.text
    );
}

#[track_caller]
fn semantic(r: Resp) {
    r.expect_error(422, "semantic_error");
}

#[track_caller]
fn not_found(r: Resp) {
    r.expect_error(404, "not_found");
}

#[track_caller]
fn forbidden(r: Resp) {
    r.expect_error(403, "forbidden");
}

/// 428: no `If-Match`.
#[track_caller]
fn unconditional(r: Resp) {
    r.expect_error(428, "precondition_required");
}

/// 412: a stale `If-Match`.
#[track_caller]
fn stale(r: Resp) {
    r.expect_error(412, "precondition_failed");
}

#[track_caller]
fn assert_no_secret(r: &Resp, secrets: &[&str]) {
    for s in secrets {
        assert!(!r.text.contains(s), "a secret leaked: {}", r.text);
    }
}

/// A request that only authenticates (the caller may lack the permission).
async fn probe(app: &TestApp, secret: &str) -> Resp {
    app.anon("GET", "/api/v1/environments")
        .auth(secret)
        .send()
        .await
}

async fn assert_accepted(app: &TestApp, secret: &str) {
    let r = probe(app, secret).await;
    assert!(
        r.status != 401,
        "the secret should authenticate: {}",
        r.text
    );
}

async fn assert_rejected(app: &TestApp, secret: &str) {
    let r = probe(app, secret).await;
    r.expect_error(401, "authentication_failed");
    assert_eq!(r.header("www-authenticate"), Some("Bearer"));
}

async fn retrieve(app: &TestApp, principal: &str) -> Resp {
    let r = app.get(&account(principal, "")).send().await;
    r.expect(200);
    r
}

/// suspend, resume or retire, with `If-Match: etag`.
async fn act(app: &TestApp, principal: &str, action: &str, etag: &str) -> Resp {
    app.post(&account(principal, &format!("/{action}")), json!({}))
        .if_match(etag)
        .send()
        .await
}

async fn issue(app: &TestApp, principal: &str, body: Value) -> Resp {
    app.post(&account(principal, "/credentials"), body)
        .send()
        .await
}

/// Issues a credential; returns its data (with `secret`) and ETag.
async fn issue_ok(app: &TestApp, principal: &str) -> (Value, String) {
    let r = issue(app, principal, json!({})).await;
    r.expect(201);
    (r.data().clone(), r.etag())
}

async fn rotate(app: &TestApp, credential_ref: &str, etag: &str, body: Value) -> Resp {
    app.post(&credential(credential_ref, "rotate"), body)
        .if_match(etag)
        .send()
        .await
}

async fn revoke(app: &TestApp, credential_ref: &str, etag: &str) -> Resp {
    app.post(
        &credential(credential_ref, "revoke"),
        json!({"reason": "no longer needed"}),
    )
    .if_match(etag)
    .send()
    .await
}

async fn list_credentials(app: &TestApp, principal: &str) -> Resp {
    let r = app.get(&account(principal, "/credentials")).send().await;
    r.expect(200);
    r
}

/// The newest credential of an account.
async fn newest_credential(app: &TestApp, principal: &str) -> Value {
    listed(&list_credentials(app, principal).await)[0].clone()
}

async fn grant(app: &TestApp, principal: &str, permission: &str) -> Resp {
    app.post(
        &account(principal, "/grants"),
        json!({"permission_action": permission}),
    )
    .send()
    .await
}

async fn revoke_grant(app: &TestApp, principal: &str, permission: &str, etag: &str) -> Resp {
    app.post(
        &account(principal, &format!("/grants/{permission}/revoke")),
        json!({"reason": "tidy up"}),
    )
    .if_match(etag)
    .send()
    .await
}

async fn list_grants(app: &TestApp, principal: &str) -> Resp {
    let r = app.get(&account(principal, "/grants")).send().await;
    r.expect(200);
    r
}

/// A fresh account; returns its reference and ETag.
async fn fresh_account(app: &TestApp) -> (String, String) {
    let a = app.create_account("worker").await;
    (
        field_text(&a, "principal_ref").to_owned(),
        field_text(&a, "etag").to_owned(),
    )
}

/// Waits for the wall clock to move, so that two creations get distinct
/// `created_at`.
async fn tick() {
    billing_tests::poll::next_millisecond().await;
}

/// Moves the app's clock to a second past `t`.
fn advance_past(app: &TestApp, t: Timestamp) {
    let wait = t.millis() + 1_000 - app.clock.now().millis();
    if wait > 0 {
        app.advance(Duration::from_millis(wait as u64));
    }
}

// ---------------------------------------------------------------------------
// Environments
// ---------------------------------------------------------------------------

async fn environments_list_the_callers_own(app: TestApp) {
    let r = app.get("/api/v1/environments").send().await;
    r.expect(200);
    assert_eq!(r.data()["has_more"], false);
    assert!(r.data()["next_cursor"].is_null());
    let envs = listed(&r);
    assert_eq!(envs.len(), 1, "only the caller's environment: {}", r.text);
    let env = &envs[0];
    assert_eq!(env["environment_ref"], app.sandbox.environment_ref.as_str());
    is_ref(&env["environment_ref"], "env_");
    assert_eq!(env["mode"], "sandbox");
    assert!(env["name"].is_string());
    assert_times(env, &["created_at"], &[]);

    let live = app
        .anon("GET", "/api/v1/environments")
        .auth(&app.live.secret)
        .send()
        .await;
    live.expect(200);
    assert_eq!(listed(&live).len(), 1);
    assert_eq!(listed(&live)[0]["mode"], "live");
    assert_eq!(
        listed(&live)[0]["environment_ref"],
        app.live.environment_ref.as_str()
    );

    let (_, secret) = app.principal_with(&[]).await;
    forbidden(probe(&app, &secret).await);
    app.anon("GET", "/api/v1/environments")
        .send()
        .await
        .expect_error(401, "authentication_failed");
}

// ---------------------------------------------------------------------------
// Service accounts
// ---------------------------------------------------------------------------

async fn service_account_create_and_retrieve(app: TestApp) {
    let r = app
        .post(
            ACCOUNTS,
            json!({"name": "reporting", "description": "nightly export"}),
        )
        .send()
        .await;
    r.expect(201);
    assert_etag_field(&r);
    let a = r.data();
    let principal = field_text(a, "principal_ref");
    is_ref(&json!(principal), "sa_");
    assert_eq!(a["environment_ref"], app.sandbox.environment_ref.as_str());
    assert_eq!(a["name"], "reporting");
    assert_eq!(a["description"], "nightly export");
    assert_eq!(a["status"], "active");
    assert_times(
        a,
        &["created_at", "updated_at"],
        &["suspended_at", "retired_at"],
    );

    let got = retrieve(&app, principal).await;
    assert_etag_field(&got);
    assert_eq!(got.etag(), r.etag());
    assert_eq!(got.data(), a);

    let plain = app.post(ACCOUNTS, json!({"name": "plain"})).send().await;
    plain.expect(201);
    assert!(plain.data()["description"].is_null());
}

async fn service_account_create_rejects_bad_bodies(app: TestApp) {
    let cases = [
        (json!({}), "name"),
        (json!({"name": 7}), "name"),
        (json!({"name": "x", "description": false}), "description"),
        (json!({"name": "x", "colour": "red"}), "colour"),
    ];
    for (body, field) in cases {
        assert_invalid(&app.post(ACCOUNTS, body).send().await, field);
    }
    let no_key = app
        .req("POST", ACCOUNTS)
        .json(&json!({"name": "x"}))
        .send()
        .await;
    assert_invalid(&no_key, "Idempotency-Key");
}

async fn service_accounts_are_listed_newest_first(app: TestApp) {
    let (first, _) = fresh_account(&app).await;
    tick().await;
    let (second, _) = fresh_account(&app).await;
    let r = app.get(ACCOUNTS).send().await;
    r.expect(200);
    assert_eq!(r.data()["has_more"], false);
    let list = listed(&r);
    let refs: Vec<&str> = list
        .iter()
        .map(|a| field_text(a, "principal_ref"))
        .collect();
    assert_eq!(refs[..2], [second.as_str(), first.as_str()]);
    assert!(refs.contains(&app.sandbox.principal_ref.as_str()));
    assert!(!refs.contains(&app.live.principal_ref.as_str()));
    for a in list {
        assert_times(a, &["created_at", "updated_at"], &[]);
        let tag = retrieve(&app, field_text(a, "principal_ref")).await.etag();
        assert_eq!(a["etag"], tag.as_str());
    }
}

async fn service_account_refs_are_checked(app: TestApp) {
    for bad in ["sa_short", "cred_AAAAAAAAAAAA", "sa_AAAAAAAAAAA!"] {
        assert_invalid(&app.get(&account(bad, "")).send().await, "principal_ref");
        assert_invalid(&act(&app, bad, "suspend", "*").await, "principal_ref");
        assert_invalid(
            &app.get(&account(bad, "/credentials")).send().await,
            "principal_ref",
        );
        assert_invalid(
            &app.get(&account(bad, "/grants")).send().await,
            "principal_ref",
        );
    }
    // Well-formed but unknown, or living in the live environment: not found.
    for missing in [NO_ACCOUNT, app.live.principal_ref.as_str()] {
        not_found(app.get(&account(missing, "")).send().await);
        for action in ["suspend", "resume", "retire"] {
            not_found(act(&app, missing, action, "*").await);
        }
        for path in ["/credentials", "/grants"] {
            not_found(app.get(&account(missing, path)).send().await);
        }
        not_found(issue(&app, missing, json!({})).await);
        not_found(grant(&app, missing, "environments:read_list").await);
        not_found(revoke_grant(&app, missing, "environments:read_list", "*").await);
    }
}

async fn suspend_and_resume(app: TestApp) {
    let (p, e0) = fresh_account(&app).await;
    let r = app
        .post(&account(&p, "/suspend"), json!({"reason": "incident 42"}))
        .if_match(&e0)
        .send()
        .await;
    r.expect(200);
    assert_etag_field(&r);
    assert_ne!(r.etag(), e0, "the ETag changes with the account");
    assert_eq!(r.data()["status"], "suspended");
    assert_times(r.data(), &["suspended_at", "updated_at"], &["retired_at"]);
    assert_eq!(retrieve(&app, &p).await.data()["status"], "suspended");

    let back = act(&app, &p, "resume", &r.etag()).await;
    back.expect(200);
    assert_etag_field(&back);
    assert_eq!(back.data()["status"], "active");
    assert_times(back.data(), &["updated_at"], &["retired_at"]);
}

async fn invalid_transitions_are_semantic_errors(app: TestApp) {
    let (p, _) = fresh_account(&app).await;
    semantic(act(&app, &p, "resume", "*").await);
    act(&app, &p, "suspend", "*").await.expect(200);
    semantic(act(&app, &p, "suspend", "*").await);
    // Retire from suspended.
    let r = act(&app, &p, "retire", "*").await;
    r.expect(200);
    assert_etag_field(&r);
    assert_eq!(r.data()["status"], "retired");
    assert_times(r.data(), &["retired_at", "updated_at"], &[]);
    // Retired is terminal.
    for action in ["suspend", "resume", "retire"] {
        semantic(act(&app, &p, action, "*").await);
    }
    semantic(issue(&app, &p, json!({})).await);
    semantic(grant(&app, &p, "environments:read_list").await);
    // Retire from active works too.
    let (q, _) = fresh_account(&app).await;
    act(&app, &q, "retire", "*").await.expect(200);
}

async fn transitions_need_a_matching_if_match(app: TestApp) {
    let (p, e0) = fresh_account(&app).await;
    for action in ["suspend", "resume", "retire"] {
        unconditional(
            app.post(&account(&p, &format!("/{action}")), json!({}))
                .send()
                .await,
        );
    }
    assert_invalid(&act(&app, &p, "suspend", "not-quoted").await, "If-Match");
    let e1 = act(&app, &p, "suspend", &e0).await.etag();
    stale(act(&app, &p, "resume", &e0).await);
    stale(act(&app, &p, "retire", &e0).await);
    act(&app, &p, "resume", &e1).await.expect(200);
    act(&app, &p, "suspend", "*").await.expect(200);
    assert_eq!(retrieve(&app, &p).await.data()["status"], "suspended");
}

async fn transitions_reject_bad_bodies(app: TestApp) {
    let (p, _) = fresh_account(&app).await;
    for action in ["suspend", "resume", "retire"] {
        let path = account(&p, &format!("/{action}"));
        for (body, field) in [
            (json!({"reason": 5}), "reason"),
            (json!({"why": "x"}), "why"),
        ] {
            assert_invalid(&app.post(&path, body).if_match("*").send().await, field);
        }
    }
    assert_eq!(retrieve(&app, &p).await.data()["status"], "active");
}

async fn suspended_principal_cannot_authenticate_until_resumed(app: TestApp) {
    let (p, secret) = app.principal_with(&["environments:read_list"]).await;
    probe(&app, &secret).await.expect(200);
    act(&app, &p, "suspend", "*").await.expect(200);
    assert_rejected(&app, &secret).await;
    act(&app, &p, "resume", "*").await.expect(200);
    probe(&app, &secret).await.expect(200);
}

async fn retire_revokes_credentials_and_grants(app: TestApp) {
    let (p, first) = app
        .principal_with(&["environments:read_list", "service_accounts:read_list"])
        .await;
    let (cred, _) = issue_ok(&app, &p).await;
    let second = field_text(&cred, "secret").to_owned();
    // A secret still in its rotation grace period dies with the account too.
    let c = field_text(&cred, "credential_ref");
    let rotated = rotate(&app, c, "*", json!({"grace_period_seconds": 3600})).await;
    let third = field_text(rotated.expect(200).data(), "secret").to_owned();
    probe(&app, &second).await.expect(200);

    act(&app, &p, "retire", "*").await.expect(200);
    for secret in [&first, &second, &third] {
        assert_rejected(&app, secret).await;
    }

    let creds = list_credentials(&app, &p).await;
    assert_eq!(listed(&creds).len(), 2);
    for c in listed(&creds) {
        assert_eq!(c["status"], "revoked", "{c}");
        assert_times(c, &["revoked_at"], &[]);
    }
    let grants = list_grants(&app, &p).await;
    assert_eq!(listed(&grants).len(), 2);
    for g in listed(&grants) {
        assert_eq!(g["status"], "revoked", "{g}");
        assert_times(g, &["revoked_at"], &[]);
    }
    // Revoked by retirement: no further rotate or revoke.
    semantic(rotate(&app, c, "*", json!({})).await);
    semantic(revoke(&app, c, "*").await);
}

// ---------------------------------------------------------------------------
// Self-lockout
// ---------------------------------------------------------------------------

async fn admin_cannot_lock_itself_out(app: TestApp) {
    let me = app.sandbox.principal_ref.as_str();
    for action in ["suspend", "retire"] {
        semantic(act(&app, me, action, "*").await);
    }
    semantic(revoke(&app, &app.sandbox.credential_ref, "*").await);
    semantic(revoke_grant(&app, me, "grants:manage_grant", "*").await);
    let r = retrieve(&app, me).await;
    assert_eq!(r.data()["status"], "active");
    let grants = list_grants(&app, me).await;
    assert!(listed(&grants)
        .iter()
        .any(|g| g["permission_action"] == "grants:manage_grant" && g["status"] == "active"));
    assert_accepted(&app, &app.sandbox.secret).await;
}

async fn any_principal_cannot_lock_itself_out(app: TestApp) {
    let (p, secret) = app
        .principal_with(&[
            "service_accounts:manage_suspend",
            "service_accounts:manage_retire",
            "credentials:manage_revoke",
            "grants:manage_grant",
            "grants:manage_revoke",
        ])
        .await;
    let own_cred = field_text(&newest_credential(&app, &p).await, "credential_ref").to_owned();
    let as_self = |path: String, body: Value| {
        app.anon("POST", &path)
            .auth(&secret)
            .idem(&unique_key())
            .if_match("*")
            .json(&body)
    };
    for action in ["suspend", "retire"] {
        semantic(
            as_self(account(&p, &format!("/{action}")), json!({}))
                .send()
                .await,
        );
    }
    semantic(
        as_self(credential(&own_cred, "revoke"), json!({"reason": "oops"}))
            .send()
            .await,
    );
    semantic(
        as_self(account(&p, "/grants/grants:manage_grant/revoke"), json!({}))
            .send()
            .await,
    );
    // Another principal's `grants:manage_grant` may be revoked.
    revoke_grant(&app, &p, "grants:manage_grant", "*")
        .await
        .expect(200);
    assert_accepted(&app, &secret).await;
}

// ---------------------------------------------------------------------------
// Credentials
// ---------------------------------------------------------------------------

async fn credential_issue_shape(app: TestApp) {
    let (p, _) = fresh_account(&app).await;
    let r = issue(&app, &p, json!({})).await;
    r.expect(201);
    assert_etag_field(&r);
    let c = r.data();
    is_ref(&c["credential_ref"], "cred_");
    assert_eq!(c["principal_ref"], p.as_str());
    assert_eq!(c["status"], "active");
    let secret = field_text(c, "secret");
    assert!(is_secret(secret, "test"), "{secret}");
    assert_eq!(c["secret_hint"], &secret[secret.len() - 4..]);
    assert_times(
        c,
        &["created_at"],
        &["expires_at", "revoked_at", "previous_secret_expires_at"],
    );
    assert!(c.get("last_used_at").is_some());
    assert_accepted(&app, secret).await;

    let until = Timestamp::now().plus_seconds(3600);
    let named = issue(
        &app,
        &p,
        json!({"name": "ci", "expires_at": until.to_rfc3339()}),
    )
    .await;
    named.expect(201);
    assert_times(named.data(), &["expires_at"], &[]);
    let got = Timestamp::parse(field_text(named.data(), "expires_at")).expect("timestamp");
    assert_eq!(got.millis(), until.millis());

    // A live account gets a live secret.
    let live = app
        .anon("POST", ACCOUNTS)
        .auth(&app.live.secret)
        .idem(&unique_key())
        .json(&json!({"name": "live-worker"}))
        .send()
        .await;
    live.expect(201);
    let lp = field_text(live.data(), "principal_ref");
    let lc = app
        .anon("POST", &account(lp, "/credentials"))
        .auth(&app.live.secret)
        .idem(&unique_key())
        .json(&json!({}))
        .send()
        .await;
    lc.expect(201);
    assert!(
        is_secret(field_text(lc.data(), "secret"), "live"),
        "{}",
        lc.text
    );
}

async fn credential_issue_rejects_bad_bodies(app: TestApp) {
    let (p, _) = fresh_account(&app).await;
    let past = Timestamp::now().plus_seconds(-60).to_rfc3339();
    let cases = [
        (json!({"expires_at": past}), "expires_at"),
        (json!({"expires_at": "tomorrow"}), "expires_at"),
        (json!({"expires_at": 1_900_000_000}), "expires_at"),
        (json!({"name": 5}), "name"),
        (json!({"scope": "all"}), "scope"),
    ];
    for (body, field) in cases {
        assert_invalid(&issue(&app, &p, body).await, field);
    }
    assert!(listed(&list_credentials(&app, &p).await).is_empty());
}

async fn credentials_are_listed_without_secrets(app: TestApp) {
    let (p, _) = fresh_account(&app).await;
    let (a, a_tag) = issue_ok(&app, &p).await;
    tick().await;
    let (b, b_tag) = issue_ok(&app, &p).await;
    let r = list_credentials(&app, &p).await;
    assert_eq!(r.data()["has_more"], false);
    let list = listed(&r);
    assert_eq!(list.len(), 2);
    assert_eq!(list[0]["credential_ref"], b["credential_ref"]);
    assert_eq!(list[1]["credential_ref"], a["credential_ref"]);
    assert_eq!(list[0]["etag"], b_tag.as_str());
    assert_eq!(list[1]["etag"], a_tag.as_str());
    for c in list {
        assert!(c.get("secret").is_none(), "{c}");
        assert_eq!(c["status"], "active");
        assert_times(c, &["created_at"], &[]);
    }
    assert_no_secret(&r, &[field_text(&a, "secret"), field_text(&b, "secret")]);
    let admin = list_credentials(&app, &app.sandbox.principal_ref).await;
    assert_no_secret(&admin, &[&app.sandbox.secret]);
    // Use is recorded.
    assert_accepted(&app, field_text(&a, "secret")).await;
    let list = list_credentials(&app, &p).await;
    assert_times(&listed(&list)[1], &["last_used_at"], &[]);
    assert!(
        listed(&list)[0]["last_used_at"].is_null(),
        "b was never used"
    );
}

async fn credential_refs_are_checked(app: TestApp) {
    for bad in ["cred_short", "sa_AAAAAAAAAAAA", "cred_AAAAAAAAAAA-"] {
        assert_invalid(&rotate(&app, bad, "*", json!({})).await, "credential_ref");
        assert_invalid(&revoke(&app, bad, "*").await, "credential_ref");
    }
    for missing in [NO_CREDENTIAL, app.live.credential_ref.as_str()] {
        not_found(rotate(&app, missing, "*", json!({})).await);
        not_found(revoke(&app, missing, "*").await);
    }
    // The live admin's credential still works.
    assert_accepted(&app, &app.live.secret).await;
}

async fn rotation_keeps_the_old_secret_for_the_grace_period(app: TestApp) {
    let (p, old) = app.principal_with(&["environments:read_list"]).await;
    let cred = &newest_credential(&app, &p).await;
    let (c, e0) = (field_text(cred, "credential_ref"), field_text(cred, "etag"));
    let r = rotate(&app, c, e0, json!({"grace_period_seconds": 3600})).await;
    r.expect(200);
    assert_etag_field(&r);
    assert_ne!(r.etag(), e0);
    let new = field_text(r.data(), "secret").to_owned();
    assert!(is_secret(&new, "test") && new != old);
    assert_eq!(r.data()["secret_hint"], &new[new.len() - 4..]);
    assert_eq!(r.data()["status"], "active");
    assert_times(r.data(), &["previous_secret_expires_at"], &[]);
    let until = Timestamp::parse(field_text(r.data(), "previous_secret_expires_at")).expect("ts");
    let ahead = until.millis() - Timestamp::now().millis();
    assert!(
        (3_590_000..=3_600_000).contains(&ahead),
        "grace ends in {ahead} ms"
    );

    probe(&app, &old).await.expect(200);
    probe(&app, &new).await.expect(200);
    advance_past(&app, until);
    assert_rejected(&app, &old).await;
    probe(&app, &new).await.expect(200);
}

async fn rotation_without_grace_stops_the_old_secret_at_once(app: TestApp) {
    let (p, old) = app.principal_with(&["environments:read_list"]).await;
    let c = field_text(&newest_credential(&app, &p).await, "credential_ref").to_owned();
    let r = rotate(&app, &c, "*", json!({"grace_period_seconds": 0})).await;
    r.expect(200);
    assert_rejected(&app, &old).await;
    probe(&app, field_text(r.data(), "secret"))
        .await
        .expect(200);

    // The default grace period is one day.
    let d = rotate(&app, &c, "*", json!({})).await;
    d.expect(200);
    let until = Timestamp::parse(field_text(d.data(), "previous_secret_expires_at")).expect("ts");
    let ahead = until.millis() - Timestamp::now().millis();
    assert!(
        (86_390_000..=86_400_000).contains(&ahead),
        "grace ends in {ahead} ms"
    );
}

async fn rotation_rejects_bad_requests(app: TestApp) {
    let (p, _) = fresh_account(&app).await;
    let (cred, e0) = issue_ok(&app, &p).await;
    let c = field_text(&cred, "credential_ref");
    for (body, field) in [
        (json!({"grace_period_seconds": -1}), "grace_period_seconds"),
        (
            json!({"grace_period_seconds": 604_801}),
            "grace_period_seconds",
        ),
        (
            json!({"grace_period_seconds": "60"}),
            "grace_period_seconds",
        ),
        (json!({"grace_period_seconds": 1.5}), "grace_period_seconds"),
        (json!({"grace": 60}), "grace"),
    ] {
        assert_invalid(&rotate(&app, c, "*", body).await, field);
    }
    unconditional(app.post(&credential(c, "rotate"), json!({})).send().await);
    let e1 = rotate(&app, c, &e0, json!({"grace_period_seconds": 604_800}))
        .await
        .expect(200)
        .etag();
    stale(rotate(&app, c, &e0, json!({})).await);
    rotate(&app, c, &e1, json!({})).await.expect(200);
    rotate(&app, c, "*", json!({})).await.expect(200);
}

async fn revoke_stops_every_secret_at_once(app: TestApp) {
    let (p, old) = app.principal_with(&["environments:read_list"]).await;
    let cred = &newest_credential(&app, &p).await;
    let c = field_text(cred, "credential_ref").to_owned();
    let rotated = rotate(&app, &c, "*", json!({"grace_period_seconds": 3600})).await;
    rotated.expect(200);
    let new = field_text(rotated.data(), "secret").to_owned();
    probe(&app, &old).await.expect(200);

    let r = revoke(&app, &c, &rotated.etag()).await;
    r.expect(200);
    assert_etag_field(&r);
    assert_eq!(r.data()["status"], "revoked");
    assert_times(r.data(), &["revoked_at"], &[]);
    assert!(r.data().get("secret").is_none());
    assert_no_secret(&r, &[&old, &new]);
    assert_rejected(&app, &old).await;
    assert_rejected(&app, &new).await;

    let listed = newest_credential(&app, &p).await;
    assert_eq!(listed["status"], "revoked");
    semantic(revoke(&app, &c, "*").await);
    semantic(rotate(&app, &c, "*", json!({})).await);
}

async fn revoke_rejects_bad_requests(app: TestApp) {
    let (p, _) = fresh_account(&app).await;
    let (cred, e0) = issue_ok(&app, &p).await;
    let c = field_text(&cred, "credential_ref");
    let path = credential(c, "revoke");
    for (body, field) in [
        (json!({}), "reason"),
        (json!({"reason": 3}), "reason"),
        (json!({"reason": "x", "force": true}), "force"),
    ] {
        assert_invalid(&app.post(&path, body).if_match("*").send().await, field);
    }
    unconditional(app.post(&path, json!({"reason": "x"})).send().await);
    let e1 = rotate(&app, c, &e0, json!({})).await.etag();
    stale(revoke(&app, c, &e0).await);
    revoke(&app, c, &e1).await.expect(200);
    // `If-Match: *` on another credential.
    let (other, _) = issue_ok(&app, &p).await;
    revoke(&app, field_text(&other, "credential_ref"), "*")
        .await
        .expect(200);
}

async fn expired_credential_is_rejected_and_listed_expired(app: TestApp) {
    let (p, _) = app.principal_with(&["environments:read_list"]).await;
    let until = Timestamp::now().plus_seconds(3600);
    let r = issue(&app, &p, json!({"expires_at": until.to_rfc3339()})).await;
    r.expect(201);
    let secret = field_text(r.data(), "secret").to_owned();
    let c = field_text(r.data(), "credential_ref").to_owned();
    probe(&app, &secret).await.expect(200);
    advance_past(&app, until);
    assert_rejected(&app, &secret).await;
    let list = list_credentials(&app, &p).await;
    let listed = listed(&list)
        .iter()
        .find(|x| x["credential_ref"] == c.as_str())
        .expect("listed");
    assert_eq!(listed["status"], "expired");
}

// ---------------------------------------------------------------------------
// Grants
// ---------------------------------------------------------------------------

async fn grant_shape_and_duplicates(app: TestApp) {
    let (p, _) = fresh_account(&app).await;
    let r = grant(&app, &p, "service_accounts:read_list").await;
    r.expect(201);
    let g = r.data();
    assert_eq!(g["principal_ref"], p.as_str());
    assert_eq!(g["permission_action"], "service_accounts:read_list");
    assert_eq!(g["status"], "active");
    assert_times(g, &["granted_at"], &["revoked_at"]);
    semantic(grant(&app, &p, "service_accounts:read_list").await);

    let list = list_grants(&app, &p).await;
    assert_eq!(list.data()["has_more"], false);
    assert_eq!(listed(&list).len(), 1);
    assert_eq!(&listed(&list)[0], g);
}

async fn grant_rejects_bad_bodies(app: TestApp) {
    let (p, _) = fresh_account(&app).await;
    let path = account(&p, "/grants");
    for (body, field) in [
        (json!({}), "permission_action"),
        (
            json!({"permission_action": "payments:do_everything"}),
            "permission_action",
        ),
        (
            json!({"permission_action": ["grants:read_list"]}),
            "permission_action",
        ),
        (
            json!({"permission_action": "grants:read_list", "note": "x"}),
            "note",
        ),
    ] {
        assert_invalid(&app.post(&path, body).send().await, field);
    }
    assert!(listed(&list_grants(&app, &p).await).is_empty());
}

/// Grant responses carry one resource, so they carry an `ETag` (section 5).
async fn grant_responses_carry_an_etag(app: TestApp) {
    let (p, _) = fresh_account(&app).await;
    let r = grant(&app, &p, "grants:read_list").await;
    r.expect(201);
    assert!(r.header("etag").is_some(), "grant without ETag");
    let v = revoke_grant(&app, &p, "grants:read_list", "*").await;
    v.expect(200);
    assert!(v.header("etag").is_some(), "grant revoke without ETag");
}

async fn grant_revoke_keeps_history(app: TestApp) {
    let (p, _) = fresh_account(&app).await;
    grant(&app, &p, "grants:read_list").await.expect(201);
    let etag = retrieve(&app, &p).await.etag();
    let r = revoke_grant(&app, &p, "grants:read_list", &etag).await;
    r.expect(200);
    assert_eq!(r.data()["principal_ref"], p.as_str());
    assert_eq!(r.data()["permission_action"], "grants:read_list");
    assert_eq!(r.data()["status"], "revoked");
    assert_times(r.data(), &["granted_at", "revoked_at"], &[]);

    tick().await;
    grant(&app, &p, "grants:read_list").await.expect(201);
    let list = list_grants(&app, &p).await;
    let statuses: Vec<&str> = listed(&list)
        .iter()
        .map(|g| field_text(g, "status"))
        .collect();
    assert_eq!(statuses, ["active", "revoked"], "{}", list.text);
}

async fn grant_revoke_rejects_bad_requests(app: TestApp) {
    let (p, e0) = fresh_account(&app).await;
    grant(&app, &p, "grants:read_list").await.expect(201);
    let path = account(&p, "/grants/grants:read_list/revoke");
    unconditional(app.post(&path, json!({})).send().await);
    for (body, field) in [
        (json!({"reason": 1}), "reason"),
        (json!({"because": "x"}), "because"),
    ] {
        assert_invalid(&app.post(&path, body).if_match("*").send().await, field);
    }
    assert_invalid(
        &revoke_grant(&app, &p, "nope:nothing", "*").await,
        "permission_action",
    );
    assert_invalid(
        &revoke_grant(&app, "sa_short", "grants:read_list", "*").await,
        "principal_ref",
    );
    // A permission the account does not hold.
    not_found(revoke_grant(&app, &p, "grants:manage_grant", "*").await);
    // A stale ETag: the account changed since `e0`.
    let e1 = act(&app, &p, "suspend", "*").await.etag();
    let e2 = act(&app, &p, "resume", &e1).await.etag();
    stale(revoke_grant(&app, &p, "grants:read_list", &e0).await);
    revoke_grant(&app, &p, "grants:read_list", &e2)
        .await
        .expect(200);
}

/// 403 without `permission`, `success` with it, 403 again once revoked.
async fn permission_gate(
    app: &TestApp,
    caller: &str,
    permission: &str,
    call: impl Fn() -> Call,
    success: u16,
) {
    forbidden(call().send().await);
    grant(app, caller, permission).await.expect(201);
    let r = call().send().await;
    assert_eq!(r.status, success, "{permission}: {}", r.text);
    revoke_grant(app, caller, permission, "*").await.expect(200);
    forbidden(call().send().await);
}

/// Each administration operation opens with its permission, and closes
/// again when the grant is revoked.
async fn granted_permission_opens_each_operation(app: TestApp) {
    let (victim, _) = fresh_account(&app).await;
    let (cred, _) = issue_ok(&app, &victim).await;
    let c = field_text(&cred, "credential_ref");
    let (caller, secret) = app.principal_with(&[]).await;
    let v = |rest: &str| account(&victim, rest);
    // Without the permission, the reference does not matter.
    for missing in [NO_ACCOUNT, app.live.principal_ref.as_str(), "sa_short"] {
        let call = app.anon("GET", &account(missing, "")).auth(&secret);
        forbidden(call.send().await);
    }

    let reads = [
        ("/api/v1/environments".to_owned(), "environments:read_list"),
        (ACCOUNTS.to_owned(), "service_accounts:read_list"),
        (v(""), "service_accounts:read_retrieve"),
        (v("/credentials"), "credentials:read_list"),
        (v("/grants"), "grants:read_list"),
        ("/api/v1/request_logs".to_owned(), "request_logs:read_list"),
    ];
    for (path, permission) in reads {
        let call = || app.anon("GET", &path).auth(&secret);
        permission_gate(&app, &caller, permission, call, 200).await;
    }

    // In an order that keeps each call valid; retire last.
    let grant_body = json!({"permission_action": "grants:read_list"});
    let reason = json!({"reason": "r"});
    let writes = [
        (
            ACCOUNTS.to_owned(),
            json!({"name": "n"}),
            "service_accounts:manage_create",
            201,
        ),
        (
            v("/suspend"),
            json!({}),
            "service_accounts:manage_suspend",
            200,
        ),
        (
            v("/resume"),
            json!({}),
            "service_accounts:manage_resume",
            200,
        ),
        (
            v("/credentials"),
            json!({}),
            "credentials:manage_issue",
            201,
        ),
        (
            credential(c, "rotate"),
            json!({}),
            "credentials:manage_rotate",
            200,
        ),
        (
            credential(c, "revoke"),
            reason,
            "credentials:manage_revoke",
            200,
        ),
        (v("/grants"), grant_body, "grants:manage_grant", 201),
        (
            v("/grants/grants:read_list/revoke"),
            json!({}),
            "grants:manage_revoke",
            200,
        ),
        (
            v("/retire"),
            json!({}),
            "service_accounts:manage_retire",
            200,
        ),
    ];
    for (path, body, permission, success) in writes {
        let call = || {
            app.anon("POST", &path)
                .auth(&secret)
                .idem(&unique_key())
                .if_match("*")
                .json(&body)
        };
        permission_gate(&app, &caller, permission, call, success).await;
    }
}

// ---------------------------------------------------------------------------
// Request logs
// ---------------------------------------------------------------------------

fn find_log<'a>(logs: &'a Resp, request_id: &str) -> &'a Value {
    listed(logs)
        .iter()
        .find(|l| l["request_log_ref"] == request_id)
        .unwrap_or_else(|| panic!("no log {request_id} in {}", logs.text))
}

async fn logs(app: &TestApp, query: &str) -> Resp {
    get(app, &format!("/api/v1/request_logs?limit=100{query}")).await
}

async fn request_logs_record_each_request(app: TestApp) {
    let key = unique_key();
    let created = app
        .req("POST", ACCOUNTS)
        .idem(&key)
        .json(&json!({"name": "logged"}))
        .send()
        .await;
    created.expect(201);
    let p = field_text(created.data(), "principal_ref").to_owned();
    let queried = app
        .get(&format!("{}?marker=querytrace42", account(&p, "")))
        .send()
        .await;
    let missing = app.get(&account(NO_ACCOUNT, "")).send().await;
    missing.expect(404);

    let all = logs(&app, "").await;
    assert_no_secret(&all, &["querytrace42", "marker=", &app.sandbox.secret]);

    let log = find_log(&all, created.header("request-id").expect("Request-Id"));
    is_ref(&log["request_log_ref"], "req_");
    assert_eq!(log["operation_id"], "createServiceAccount");
    assert_eq!(log["method"], "POST");
    assert_eq!(log["path"], ACCOUNTS);
    assert_eq!(log["status"], 201);
    assert!(log["error_code"].is_null());
    assert_eq!(log["principal_ref"], app.sandbox.principal_ref.as_str());
    assert_eq!(log["credential_ref"], app.sandbox.credential_ref.as_str());
    assert_eq!(log["idempotency_key"], key.as_str());
    assert!(log["duration_ms"].is_i64());
    assert_times(log, &["created_at"], &[]);

    let log = find_log(&all, queried.header("request-id").expect("Request-Id"));
    assert_eq!(log["operation_id"], "retrieveServiceAccount");
    assert_eq!(log["method"], "GET");
    assert_eq!(log["path"], account(&p, "").as_str());
    assert_eq!(log["status"], queried.status);
    assert!(log["idempotency_key"].is_null());

    let log = find_log(&all, missing.header("request-id").expect("Request-Id"));
    assert_eq!(log["status"], 404);
    assert_eq!(log["error_code"], "not_found");
    assert_eq!(log["path"], account(NO_ACCOUNT, "").as_str());

    // The live environment's logs do not show sandbox traffic.
    let live = app
        .anon("GET", "/api/v1/request_logs?limit=100")
        .auth(&app.live.secret)
        .send()
        .await;
    live.expect(200);
    assert!(!live.text.contains(&p));
}

async fn request_logs_filter_by_operation_and_status(app: TestApp) {
    let (p, _) = fresh_account(&app).await;
    retrieve(&app, &p).await;
    let missing = app.get(&account(NO_ACCOUNT, "")).send().await;
    missing.expect(404);
    let missing_id = missing.header("request-id").expect("Request-Id");

    let by_op = logs(&app, "&operation_id=retrieveServiceAccount").await;
    assert_eq!(listed(&by_op).len(), 2, "{}", by_op.text);
    assert!(listed(&by_op)
        .iter()
        .all(|l| l["operation_id"] == "retrieveServiceAccount"));

    let by_status = logs(&app, "&status=404").await;
    assert_eq!(listed(&by_status).len(), 1, "{}", by_status.text);
    assert_eq!(listed(&by_status)[0]["request_log_ref"], missing_id);

    let both = logs(&app, "&operation_id=createServiceAccount&status=404").await;
    assert!(listed(&both).is_empty());

    for (query, field) in [
        ("operation_id=doEverything", "operation_id"),
        ("status=abc", "status"),
        ("status=2.5", "status"),
    ] {
        let r = app
            .get(&format!("/api/v1/request_logs?{query}"))
            .send()
            .await;
        assert_invalid(&r, field);
    }
}

// ---------------------------------------------------------------------------
// Secrets never leak
// ---------------------------------------------------------------------------

async fn secrets_appear_only_on_issue_and_rotate(app: TestApp) {
    let (p, first) = app.principal_with(&["environments:read_list"]).await;
    let (cred, _) = issue_ok(&app, &p).await;
    let issued = field_text(&cred, "secret").to_owned();
    let c = field_text(&cred, "credential_ref").to_owned();
    let rotated = rotate(&app, &c, "*", json!({})).await;
    rotated.expect(200);
    assert_no_secret(&rotated, &[&issued]);
    let new = field_text(rotated.data(), "secret").to_owned();
    for s in [&first, &issued, &new] {
        probe(&app, s).await.expect(200);
    }
    let secrets = [
        app.sandbox.secret.as_str(),
        first.as_str(),
        issued.as_str(),
        new.as_str(),
    ];
    let reads = [
        account(&p, ""),
        ACCOUNTS.to_owned(),
        account(&p, "/credentials"),
        account(&p, "/grants"),
        "/api/v1/environments".to_owned(),
        "/api/v1/request_logs?limit=100".to_owned(),
    ];
    for path in reads {
        let r = app.get(&path).send().await;
        r.expect(200);
        assert_no_secret(&r, &secrets);
    }
    let revoked = revoke(&app, &c, "*").await;
    revoked.expect(200);
    assert_no_secret(&revoked, &secrets);
    // An authentication failure does not echo the presented secret.
    let denied = probe(&app, &new).await;
    denied.expect(401);
    assert_no_secret(&denied, &secrets);
}

/// Replaying an issue or a rotate with its idempotency key must not show the
/// secret a second time: it is "shown once" and "stored only as hashes".
async fn replays_do_not_reveal_secrets(app: TestApp) {
    let (p, _) = fresh_account(&app).await;
    let (issue_key, rotate_key) = (unique_key(), unique_key());
    let issue_path = account(&p, "/credentials");
    let send_issue = || {
        app.req("POST", &issue_path)
            .idem(&issue_key)
            .json(&json!({}))
            .send()
    };
    let issued = send_issue().await;
    issued.expect(201);
    let c = field_text(issued.data(), "credential_ref").to_owned();
    let rotate_path = credential(&c, "rotate");
    let send_rotate = || {
        app.req("POST", &rotate_path)
            .idem(&rotate_key)
            .if_match("*")
            .json(&json!({}))
            .send()
    };
    let rotated = send_rotate().await;
    rotated.expect(200);

    let issue_replay = send_issue().await;
    let rotate_replay = send_rotate().await;
    let leaks: Vec<&str> = [
        (&issued, &issue_replay, "issue"),
        (&rotated, &rotate_replay, "rotate"),
    ]
    .into_iter()
    .filter(|(first, replay, _)| replay.text.contains(field_text(first.data(), "secret")))
    .map(|(_, _, op)| op)
    .collect();
    assert!(
        leaks.is_empty(),
        "replays of {leaks:?} show the secret again"
    );
    // Otherwise a replay is the same response.
    for (first, replay) in [(&issued, &issue_replay), (&rotated, &rotate_replay)] {
        replay.expect(first.status);
        assert_eq!(replay.header("idempotent-replayed"), Some("true"));
        assert_eq!(replay.data()["credential_ref"], c.as_str());
    }
}

// ---------------------------------------------------------------------------
// Bootstrap
// ---------------------------------------------------------------------------

async fn bootstrap_again_issues_fresh_credentials(app: TestApp) {
    let before = list_grants(&app, &app.sandbox.principal_ref).await;
    let again = billing::bootstrap::bootstrap(&app.store)
        .await
        .expect("bootstrap");
    assert_eq!(again.environments.len(), 2);
    for (old, new) in [&app.sandbox, &app.live]
        .into_iter()
        .zip(&again.environments)
    {
        assert_eq!(new.mode, old.mode);
        assert_eq!(new.environment_ref, old.environment_ref);
        assert_eq!(new.principal_ref, old.principal_ref);
        assert_ne!(new.credential_ref, old.credential_ref);
        assert_ne!(new.secret, old.secret);
        assert_accepted(&app, &old.secret).await;
        assert_accepted(&app, &new.secret).await;
    }
    let sandbox = &again.environments[0];
    let accounts = app.get(ACCOUNTS).send().await;
    accounts.expect(200);
    let admins = listed(&accounts)
        .iter()
        .filter(|a| a["name"] == "admin")
        .count();
    assert_eq!(admins, 1, "{}", accounts.text);
    assert_no_secret(&accounts, &[&sandbox.secret]);

    let creds = list_credentials(&app, &sandbox.principal_ref).await;
    let refs: Vec<&str> = listed(&creds)
        .iter()
        .map(|c| field_text(c, "credential_ref"))
        .collect();
    assert!(refs.contains(&sandbox.credential_ref.as_str()));
    assert!(refs.contains(&app.sandbox.credential_ref.as_str()));
    assert_no_secret(&creds, &[&sandbox.secret, &app.sandbox.secret]);

    // Every permission, each held once.
    let after = list_grants(&app, &app.sandbox.principal_ref).await;
    assert_eq!(listed(&after).len(), listed(&before).len());
    let mut held: Vec<&str> = listed(&after)
        .iter()
        .filter(|g| g["status"] == "active")
        .map(|g| field_text(g, "permission_action"))
        .collect();
    held.sort_unstable();
    assert_eq!(held, control_api::operations::permissions());
}

/// Retirement is terminal and leaves no active grant or credential; a later
/// bootstrap must still yield an admin that holds every permission.
async fn bootstrap_after_the_admin_is_retired(app: TestApp) {
    let (_, secret) = app
        .principal_with(&[
            "service_accounts:manage_retire",
            "service_accounts:read_retrieve",
            "grants:read_list",
            "credentials:read_list",
        ])
        .await;
    let old = app.sandbox.principal_ref.as_str();
    let as_other = |method: &str, path: String| app.anon(method, &path).auth(&secret);
    let retire = as_other("POST", account(old, "/retire"))
        .idem(&unique_key())
        .if_match("*")
        .json(&json!({}));
    retire.send().await.expect(200);

    let again = billing::bootstrap::bootstrap(&app.store)
        .await
        .expect("bootstrap");
    let sandbox = &again.environments[0];
    let r = app.anon("GET", ACCOUNTS).auth(&sandbox.secret).send().await;
    assert_eq!(r.status, 200, "the new admin secret: {}", r.text);

    let account_now = as_other("GET", account(old, "")).send().await;
    assert_eq!(account_now.data()["status"], "retired");
    for list in ["/grants", "/credentials"] {
        let r = as_other("GET", account(old, list)).send().await;
        r.expect(200);
        let active = listed(&r)
            .iter()
            .filter(|x| x["status"] == "active")
            .count();
        assert_eq!(active, 0, "a retired account got active {list}");
    }
}

backend_tests!(
    environments_list_the_callers_own,
    service_account_create_and_retrieve,
    service_account_create_rejects_bad_bodies,
    service_accounts_are_listed_newest_first,
    service_account_refs_are_checked,
    suspend_and_resume,
    invalid_transitions_are_semantic_errors,
    transitions_need_a_matching_if_match,
    transitions_reject_bad_bodies,
    suspended_principal_cannot_authenticate_until_resumed,
    retire_revokes_credentials_and_grants,
    admin_cannot_lock_itself_out,
    any_principal_cannot_lock_itself_out,
    credential_issue_shape,
    credential_issue_rejects_bad_bodies,
    credentials_are_listed_without_secrets,
    credential_refs_are_checked,
    rotation_keeps_the_old_secret_for_the_grace_period,
    rotation_without_grace_stops_the_old_secret_at_once,
    rotation_rejects_bad_requests,
    revoke_stops_every_secret_at_once,
    revoke_rejects_bad_requests,
    expired_credential_is_rejected_and_listed_expired,
    grant_shape_and_duplicates,
    grant_rejects_bad_bodies,
    grant_responses_carry_an_etag,
    grant_revoke_keeps_history,
    grant_revoke_rejects_bad_requests,
    granted_permission_opens_each_operation,
    request_logs_record_each_request,
    request_logs_filter_by_operation_and_status,
    secrets_appear_only_on_issue_and_rotate,
    replays_do_not_reveal_secrets,
    bootstrap_again_issues_fresh_credentials,
    bootstrap_after_the_admin_is_retired,
);
