//! The rate limit of each credential (contract 2, `rate_limited`): a token
//! bucket per credential with bursts of twice the rate, checked right after
//! authentication, answered with 429 and `Retry-After`; with a Redis
//! scheduler one bucket serves every API process of a fleet.

use billing_tests::poll::wait_until;
use billing_tests::{Backend, Resp, TestApp};
use dispatcher::redis_schedule::{Keys, RedisSchedule};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;

/// An app whose credentials may send `rate` requests a second.
async fn limited(backend: Backend, rate: u32) -> TestApp {
    TestApp::spawn_with(backend, |s| s.rate_limit = rate).await
}

#[track_caller]
fn assert_limited(r: &Resp) {
    r.expect_error(429, "rate_limited");
    let wait: u64 = r
        .header("retry-after")
        .expect("Retry-After on 429")
        .parse()
        .expect("Retry-After in whole seconds");
    assert!((1..=2).contains(&wait), "Retry-After {wait}");
    assert_eq!(
        r.json["error"]["request_id"].as_str(),
        r.header("request-id"),
        "the body names the request"
    );
}

/// Sends requests until one is refused; returns how many passed.
async fn passes_until_refused(app: &TestApp, secret: &str, at_most: usize) -> (usize, Resp) {
    for passed in 0..at_most {
        let r = app.get("/api/v1/environments").auth(secret).send().await;
        if r.status == 429 {
            return (passed, r);
        }
        r.expect(200);
    }
    panic!("{at_most} requests passed a limit that should have refused one");
}

/// What a request's round trip may add to a wait the server names.
const LATENCY: Duration = Duration::from_millis(500);

/// Asks until a request of `secret` passes, which must be `within`; a
/// refusal meanwhile takes nothing from the bucket.
async fn passes_within(app: &TestApp, secret: &str, within: Duration) {
    wait_until(
        within,
        || "the credential did not pass again".to_owned(),
        || async {
            let r = app.get("/api/v1/environments").auth(secret).send().await;
            if r.status == 429 {
                return None;
            }
            r.expect(200);
            Some(())
        },
    )
    .await
}

async fn a_burst_passes_then_429_with_retry_after(backend: Backend) {
    let app = limited(backend, 5).await;
    let secret = app.sandbox.secret.clone();
    let started = Instant::now();
    let (passed, refused) = passes_until_refused(&app, &secret, 100).await;
    // Bursts of 10, plus what refilled while they were sent.
    let refill = (started.elapsed().as_millis() as usize * 5).div_ceil(1000);
    assert!(
        (10..=10 + refill).contains(&passed),
        "{passed} passed, refill {refill}"
    );
    assert_limited(&refused);
    // Within the time it names, the credential passes again (the bucket
    // refills on the wall clock: it is asked until it does, each refusal
    // taking nothing).
    let wait: u64 = refused.header("retry-after").unwrap().parse().unwrap();
    let within = Duration::from_secs(wait) + LATENCY;
    passes_within(&app, &secret, within).await;
}

async fn each_credential_has_its_own_bucket(backend: Backend) {
    let app = limited(backend, 2).await;
    let (_, refused) = passes_until_refused(&app, &app.sandbox.secret.clone(), 50).await;
    assert_limited(&refused);
    // Another credential, even of the same account's environment, passes.
    app.get("/api/v1/environments")
        .auth(&app.live.secret)
        .send()
        .await
        .expect(200);
}

async fn failed_authentication_costs_nothing(backend: Backend) {
    let app = limited(backend, 2).await;
    let wrong = format!("sk_test_{}", "x".repeat(32));
    for _ in 0..30 {
        app.get("/api/v1/environments")
            .auth(&wrong)
            .send()
            .await
            .expect_error(401, "authentication_failed");
    }
    app.get("/api/v1/environments")
        .no_auth()
        .send()
        .await
        .expect_error(401, "authentication_failed");
    // The real credential still has its whole burst of 4.
    let (passed, refused) = passes_until_refused(&app, &app.sandbox.secret.clone(), 50).await;
    assert!(passed >= 4, "{passed} passed");
    assert_limited(&refused);
}

async fn refused_writes_change_nothing(backend: Backend) {
    let app = limited(backend, 1).await;
    let secret = app.sandbox.secret.clone();
    // Spend the burst of 2.
    passes_until_refused(&app, &secret, 10).await;
    let key = billing_tests::unique_key();
    // The same request twice: refused, then run once the bucket refills.
    let request = || {
        app.post(
            "/api/v1/service_accounts",
            serde_json::json!({"name": "refused"}),
        )
        .auth(&secret)
        .idem(&key)
    };
    let r = request().send().await;
    assert_limited(&r);
    // The key was not taken: the same request, refused until the bucket
    // refills, then runs, and makes the only such account.
    let created = wait_until(
        Duration::from_secs(3),
        || "the bucket never refilled".to_owned(),
        || async {
            let r = request().send().await;
            if r.status == 429 {
                assert_limited(&r);
                return None;
            }
            Some(r)
        },
    )
    .await;
    created.expect(201);
    assert!(created.header("idempotent-replayed").is_none());
    let listed = wait_until(
        Duration::from_secs(3),
        || "the bucket never refilled".to_owned(),
        || async {
            let r = app
                .get("/api/v1/service_accounts")
                .auth(&secret)
                .send()
                .await;
            (r.status != 429).then_some(r)
        },
    )
    .await;
    listed.expect(200);
    let named = listed.data()["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["name"] == "refused")
        .count();
    assert_eq!(named, 1);
}

macro_rules! on_both {
    ($($name:ident),*) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(billing_tests::Backend::Sqlite).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    if billing_tests::fleet_enabled() {
                        super::$name(billing_tests::Backend::Postgres).await
                    }
                }
            )*
        }
    };
}

on_both!(
    a_burst_passes_then_429_with_retry_after,
    each_credential_has_its_own_bucket,
    failed_authentication_costs_nothing,
    refused_writes_change_nothing
);

/// Two API processes of a fleet (two routers over one store) keep one
/// bucket per credential in Redis: together they pass one burst.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_shares_each_bucket_through_redis() {
    if !billing_tests::fleet_enabled() {
        return;
    }
    let app = TestApp::spawn(Backend::Postgres).await;
    let prefix = format!("rate-test-{}", billing_tests::unique_key());
    let schedule = Arc::new(
        RedisSchedule::connect(
            &billing_tests::redis::url(),
            Keys::exclusive(prefix.clone(), app.store.identity().await.unwrap()),
        )
        .await
        .expect("redis reachable"),
    );
    let mut bases = Vec::new();
    for _ in 0..2 {
        let buckets = billing::app::shared_buckets(schedule.clone());
        let mut settings = TestApp::settings();
        settings.rate_limit = 5;
        let state =
            control_api::AppState::new(app.store.clone(), settings).with_shared_rate_limit(buckets);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        bases.push(format!("http://{}", listener.local_addr().unwrap()));
        tokio::spawn(control_api::run(
            state,
            listener,
            tokio_util::sync::CancellationToken::new(),
        ));
    }
    let client = reqwest::Client::new();
    let started = Instant::now();
    let (mut passed, mut refused) = (0usize, 0usize);
    // Alternate between the two processes.
    for i in 0..40 {
        let r = client
            .get(format!("{}/api/v1/environments", bases[i % 2]))
            .bearer_auth(&app.sandbox.secret)
            .send()
            .await
            .unwrap();
        match r.status().as_u16() {
            200 => passed += 1,
            429 => {
                assert!(r.headers().contains_key("retry-after"));
                refused += 1
            }
            other => panic!("unexpected status {other}"),
        }
    }
    let refill = (started.elapsed().as_millis() as usize * 5).div_ceil(1000);
    // One bucket of 10 for both processes, not 10 each.
    assert!(
        (10..=10 + refill).contains(&passed),
        "{passed} passed, {refused} refused, refill {refill}"
    );
    assert!(refused > 0);
    billing_tests::redis::delete_prefix(&prefix).await;
}
