//! `listDeadLetters` (contract 12.3) on every backend: the messages the
//! intake refused, newest first, in the environment their envelope names
//! (or in every environment when it names none), filtered by `reason`,
//! paged, each as received and cut at 64 KiB.

use billing_tests::kit::{get, invalid, is_ref, is_ts, items};
use billing_tests::{backend_tests, TestApp};
use dispatcher::intake::Accepted;
use serde_json::json;

const LIST: &str = "/api/v1/dead_letters";

/// Offers `body` to the intake, which must refuse it; returns its reason.
async fn refuse(app: &TestApp, body: &str) -> String {
    match dispatcher::intake::accept(&app.queue, body.as_bytes(), "test")
        .await
        .expect("store reachable")
    {
        Accepted::Dead(reason) => reason,
        other => panic!("accepted {other:?}: {body}"),
    }
}

async fn refused_messages_are_listed_newest_first_in_their_environment(app: TestApp) {
    let sandbox = app.sandbox.environment_ref.clone();
    let live = app.live.environment_ref.clone();
    // Names the sandbox environment but is no event.
    let named = json!({"environment_ref": sandbox, "event_ref": 5}).to_string();
    let named_reason = refuse(&app, &named).await;
    // Names no environment at all.
    let unnamed_reason = refuse(&app, "not json at all").await;
    // Names the live environment.
    let live_body = json!({"environment_ref": live, "public_event_type": 7}).to_string();
    refuse(&app, &live_body).await;

    let r = get(&app, LIST).await;
    let listed = items(&r);
    assert_eq!(
        listed.len(),
        2,
        "the sandbox's and the unnamed one: {listed:?}"
    );
    assert_eq!(listed[0]["envelope"], "not json at all", "newest first");
    assert_eq!(listed[0]["reason"], unnamed_reason.as_str());
    assert_eq!(listed[1]["envelope"], named.as_str());
    assert_eq!(listed[1]["reason"], named_reason.as_str());
    for d in &listed {
        is_ref(&d["dead_letter_ref"], "dlq_");
        is_ts(&d["received_at"]);
    }

    // Filtered by reason, and paged with a cursor bound to the filter.
    let filtered = app
        .get(&format!("{LIST}?{}", query("reason", &named_reason)))
        .send()
        .await;
    filtered.expect(200);
    assert_eq!(items(&filtered).len(), 1);
    let first = app.get(&format!("{LIST}?limit=1")).send().await;
    first.expect(200);
    assert_eq!(first.data()["has_more"], true);
    let cursor = first.data()["next_cursor"].as_str().unwrap().to_owned();
    let second = app
        .get(&format!("{LIST}?limit=1&cursor={cursor}"))
        .send()
        .await;
    second.expect(200);
    assert_eq!(items(&second)[0]["envelope"], named.as_str());
    let mismatched = app
        .get(&format!("{LIST}?limit=1&cursor={cursor}&reason=x"))
        .send()
        .await;
    mismatched.expect(400);

    // Bad filters are refused by name.
    let bad = app.get(&format!("{LIST}?colour=red")).send().await;
    invalid(&bad, "colour");
}

async fn a_long_message_is_kept_up_to_64_kib(app: TestApp) {
    let long = format!("{{\"x\": \"{}\"", "a".repeat(100 * 1024));
    refuse(&app, &long).await;
    let listed = items(&get(&app, LIST).await);
    let envelope = listed[0]["envelope"].as_str().unwrap();
    assert_eq!(envelope.len(), 64 * 1024);
    assert!(long.starts_with(envelope));
}

async fn reading_dead_letters_takes_its_permission(app: TestApp) {
    let (_, secret) = app.principal_with(&["webhooks:read_list_endpoints"]).await;
    app.get(LIST)
        .auth(&secret)
        .send()
        .await
        .expect_error(403, "forbidden");
    let (_, secret) = app.principal_with(&["events:read_dead_letters"]).await;
    app.get(LIST).auth(&secret).send().await.expect(200);
}

/// `name=value`, encoded for a query string.
fn query(name: &str, value: &str) -> String {
    let mut url = reqwest::Url::parse("http://localhost/").expect("a url");
    url.query_pairs_mut().append_pair(name, value);
    url.query().unwrap_or_default().to_owned()
}

backend_tests!(
    refused_messages_are_listed_newest_first_in_their_environment,
    a_long_message_is_kept_up_to_64_kib,
    reading_dead_letters_takes_its_permission,
);
