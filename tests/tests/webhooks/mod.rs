//! The webhook control surface (contract section 9), black-box, on every
//! backend: endpoints and their secrets, subscriptions, data profile
//! grants, deliveries and their views, redrive, health, test sends and the
//! event catalogue, with each operation's errors, idempotent replays and
//! preconditions.
//!
//! Signatures are checked with the official Standard Webhooks verifier
//! (`standardwebhooks` from PyPI, run with python3 and installed on first
//! use) over headers computed from the secrets the store keeps encrypted.

use billing_tests::kit::api::*;
use billing_tests::kit::{
    create_endpoint, etag_matches, get, invalid, is_ref, is_ts, items, newest_first, text, twice,
    walk, walk_from,
};
use billing_tests::receiver::{Behaviour, TestReceiver};
use billing_tests::{backend_tests, unique_key, verifier, Resp, TestApp};
use domain::webhook::catalogue;
use domain::webhook::signing::{signature_header, SigningSecret};
use domain::{Prefix, Ref, Timestamp};
use serde_json::{json, Value};
use std::collections::HashSet;
use std::net::IpAddr;
use std::time::Duration;

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

async fn endpoint(app: &TestApp) -> String {
    create_endpoint(app, URL).await.0
}

async fn etag_of(app: &TestApp, path: &str) -> String {
    get(app, path).await.etag()
}

/// A POST with a fresh idempotency key and `If-Match: tag`.
async fn post_if(app: &TestApp, path: &str, tag: &str, body: Value) -> Resp {
    app.post(path, body).if_match(tag).send().await
}

/// A state-changing POST to `path` with a reason (`r`), whatever the
/// resource's version.
async fn act(app: &TestApp, path: &str) -> Resp {
    post_if(app, path, "*", json!({"reason": "r"})).await
}

/// `path` takes a reasoned action only with a current `If-Match`: 428
/// without one, 412 with `stale`.
async fn wants_current_tag(app: &TestApp, path: &str, stale: &str) {
    app.post(path, json!({"reason": "r"}))
        .send()
        .await
        .expect_error(428, "precondition_required");
    post_if(app, path, stale, json!({"reason": "r"}))
        .await
        .expect_error(412, "precondition_failed");
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
    let now = app.clock.now();
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
    // The signature's time is the wall clock's, as an attempt's is: the
    // receiver's verifier compares it with its own.
    let id = Ref::generate(Prefix::WebhookDelivery).into_string();
    let sent = Timestamp::now().millis() / 1000;
    let timestamp = sent.to_string();
    let body = br#"{"event_ref":"evt_AbCdEfGhIjKl","public_event_type":"webhook.test","data":{}}"#;
    let header = signature_header(&signing, &id, sent, body);
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
/// Attempts every delivery due now (`TestApp::dispatch_due`, retries at
/// once) and returns `delivery`'s view, which must be `status` after it.
async fn dispatched(app: &TestApp, delivery: &str, status: &str) -> Value {
    app.dispatch_due("0s").await;
    let d = status_of(app, delivery).await;
    assert_eq!(d["status"], status, "{delivery}: {d}");
    d
}

mod endpoints;
use endpoints::*;
mod secrets;
use secrets::*;
mod subscriptions;
use subscriptions::*;
mod data_profile_grants;
use data_profile_grants::*;
mod deliveries;
use deliveries::*;
mod health;
use health::*;
mod event_catalogue;
use event_catalogue::*;
mod destinations;
use destinations::*;
mod references;
use references::*;
mod idempotency;
use idempotency::*;
mod contract_gaps_found;
use contract_gaps_found::*;

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
