//! Redrive jobs (contract 12.2) on every backend, driven by the runner's
//! seam (`dispatcher::redrive_jobs::run_once` at a `now` the test picks):
//! a dry run counts what the list shows; a job redrives each selected
//! delivery once, also with two runners and across a runner's crash; a
//! cancel stops it; bad requests are refused by name.

use billing_tests::kit::{invalid, items};
use billing_tests::receiver::{Behaviour, TestReceiver};
use billing_tests::{backend_tests, TestApp};
use domain::Timestamp;
use serde_json::{json, Value};

const JOBS: &str = "/api/v1/webhook_redrive_jobs";

/// `n` deliveries of one endpoint, failed (the receiver answered 500 to
/// their one attempt); the receiver then answers 204. Returns the endpoint.
async fn failed_deliveries(app: &TestApp, receiver: &TestReceiver, n: usize) -> String {
    let (endpoint, _) = app
        .subscribed_endpoint(&receiver.url(), "payment.succeeded", 1)
        .await;
    receiver.set(Behaviour::Status(500));
    for _ in 0..n {
        app.publish("payment.succeeded", json!({})).await;
    }
    assert_eq!(app.dispatch_due("0s").await.attempted, n);
    assert_eq!(failed(app, &endpoint).await.len(), n);
    receiver.set(Behaviour::Status(204));
    endpoint
}

async fn failed(app: &TestApp, endpoint: &str) -> Vec<Value> {
    let r = app
        .get(&format!(
            "/api/v1/webhook_endpoints/{endpoint}/deliveries?limit=100&status=failed"
        ))
        .send()
        .await;
    r.expect(200);
    items(&r)
}

/// A job's body redriving `endpoint`'s failed deliveries.
fn failed_of(endpoint: &str) -> Value {
    json!({"reason": "r", "filter": {"status": "failed", "endpoint_ref": endpoint}})
}

async fn create(app: &TestApp, body: Value) -> Value {
    let r = app.post(JOBS, body).send().await;
    r.expect(202);
    r.data().clone()
}

async fn job(app: &TestApp, job: &Value) -> Value {
    let r = app
        .get(&format!(
            "{JOBS}/{}",
            job["redrive_job_ref"].as_str().unwrap()
        ))
        .send()
        .await;
    r.expect(200);
    r.data().clone()
}

/// Runs rounds as `owner` at `now` until `job` leaves its open states (at
/// most 50 rounds).
async fn run_to_end(app: &TestApp, owner: &str, now: Timestamp, j: &Value) -> Value {
    for _ in 0..50 {
        dispatcher::redrive_jobs::run_once(&app.store, owner, 500, now)
            .await
            .unwrap();
        let current = job(app, j).await;
        if current["status"] != "counting" && current["status"] != "running" {
            return current;
        }
    }
    panic!("the job did not end: {}", job(app, j).await);
}

async fn a_dry_run_counts_and_a_job_redrives_each_once(app: TestApp) {
    let receiver = TestReceiver::start(Behaviour::Status(204)).await;
    let endpoint = failed_deliveries(&app, &receiver, 5).await;
    let filter = json!({"status": "failed", "endpoint_ref": endpoint});
    let dry = create(
        &app,
        json!({"reason": "count", "filter": filter, "dry_run": true}),
    )
    .await;
    assert_eq!(dry["status"], "counting");
    assert_eq!(dry["filter"], filter);
    let dry = run_to_end(&app, "runner-a", Timestamp::now(), &dry).await;
    assert_eq!(dry["status"], "succeeded");
    assert_eq!(dry["matched"], 5, "the dry run counts what the list shows");
    assert_eq!(dry["redriven"], 0);
    assert!(dry["finished_at"].is_string());
    assert_eq!(
        failed(&app, &endpoint).await.len(),
        5,
        "a dry run changes nothing"
    );

    let sent_before = receiver.count();
    let real = create(&app, json!({"reason": "outage over", "filter": filter})).await;
    let real = run_to_end(&app, "runner-a", Timestamp::now(), &real).await;
    assert_eq!(real["status"], "succeeded");
    assert_eq!(
        (&real["matched"], &real["redriven"], &real["skipped"]),
        (&json!(5), &json!(5), &json!(0))
    );
    assert!(failed(&app, &endpoint).await.is_empty());
    // Generation 2 of each goes out once.
    assert_eq!(app.dispatch_due("0s").await.attempted, 5);
    assert_eq!(receiver.count(), sent_before + 5);
    let r = app
        .get(&format!(
            "/api/v1/webhook_endpoints/{endpoint}/deliveries?limit=100"
        ))
        .send()
        .await;
    for d in items(&r) {
        assert_eq!(
            (&d["status"], &d["generation"]),
            (&json!("succeeded"), &json!(2)),
            "{d}"
        );
    }
    // Listed newest first.
    let listed = items(&app.get(JOBS).send().await);
    assert_eq!(listed[0]["redrive_job_ref"], real["redrive_job_ref"]);
    assert_eq!(listed[1]["redrive_job_ref"], dry["redrive_job_ref"]);
}

async fn two_runners_and_a_crash_redrive_each_delivery_once(app: TestApp) {
    let receiver = TestReceiver::start(Behaviour::Status(204)).await;
    let endpoint = failed_deliveries(&app, &receiver, 6).await;
    let j = create(&app, failed_of(&endpoint)).await;
    let now = Timestamp::now();
    // Runner A counts, then redrives one delivery per round (5/s), then
    // "crashes": it takes no more steps, its lease runs.
    dispatcher::redrive_jobs::run_once(&app.store, "runner-a", 5, now)
        .await
        .unwrap();
    dispatcher::redrive_jobs::run_once(&app.store, "runner-a", 5, now)
        .await
        .unwrap();
    assert_eq!(job(&app, &j).await["redriven"], 1);
    // Runner B cannot take it while A's lease lasts...
    let (b, c) = tokio::join!(
        dispatcher::redrive_jobs::run_once(&app.store, "runner-b", 500, now),
        dispatcher::redrive_jobs::run_once(&app.store, "runner-c", 500, now),
    );
    assert_eq!((b.unwrap(), c.unwrap()), (0, 0));
    // ...and takes it over once it has run out; runner C races it.
    let later = now.plus_seconds(11);
    let (b, c) = tokio::join!(
        dispatcher::redrive_jobs::run_once(&app.store, "runner-b", 500, later),
        dispatcher::redrive_jobs::run_once(&app.store, "runner-c", 500, later),
    );
    b.unwrap();
    c.unwrap();
    let done = run_to_end(&app, "runner-b", later, &j).await;
    assert_eq!(
        (&done["matched"], &done["redriven"], &done["skipped"]),
        (&json!(6), &json!(6), &json!(0))
    );
    let r = app
        .get(&format!(
            "/api/v1/webhook_endpoints/{endpoint}/deliveries?limit=100"
        ))
        .send()
        .await;
    for d in items(&r) {
        assert_eq!(d["generation"], 2, "redriven exactly once: {d}");
    }
}

async fn a_cancel_stops_an_open_job(app: TestApp) {
    let receiver = TestReceiver::start(Behaviour::Status(204)).await;
    let endpoint = failed_deliveries(&app, &receiver, 2).await;
    let j = create(&app, failed_of(&endpoint)).await;
    let cancel = format!("{JOBS}/{}/cancel", j["redrive_job_ref"].as_str().unwrap());
    let r = app.post(&cancel, json!({})).send().await;
    r.expect(200);
    assert_eq!(r.data()["status"], "canceled");
    assert!(r.data()["finished_at"].is_string());
    app.post(&cancel, json!({}))
        .send()
        .await
        .expect_error(422, "semantic_error");
    dispatcher::redrive_jobs::run_once(&app.store, "runner-a", 500, Timestamp::now())
        .await
        .unwrap();
    assert_eq!(
        failed(&app, &endpoint).await.len(),
        2,
        "nothing was redriven"
    );
}

async fn bad_requests_are_refused_by_name(app: TestApp) {
    let ok_filter = json!({"status": "failed"});
    app.req("POST", JOBS)
        .json(&json!({"reason": "r", "filter": ok_filter}))
        .send()
        .await
        .expect_error(400, "idempotency_key_required");
    for (body, field) in [
        (json!({"reason": "", "filter": ok_filter}), "reason"),
        (
            json!({"reason": "r", "filter": {"status": "pending"}}),
            "filter.status",
        ),
        (
            json!({"reason": "r", "filter": {"status": "failed", "last_response_class": "2xx"}}),
            "filter.last_response_class",
        ),
        (
            json!({"reason": "r", "filter": {"status": "failed", "public_event_type": "x.y"}}),
            "filter.public_event_type",
        ),
        (
            json!({"reason": "r", "filter": {"status": "failed", "created_after": "soon"}}),
            "filter.created_after",
        ),
        (
            json!({"reason": "r", "filter": {"status": "failed", "endpoint_ref": "whep_x"}}),
            "filter.endpoint_ref",
        ),
    ] {
        let r = app.post(JOBS, body).send().await;
        invalid(&r, field);
    }
    app.post(
        JOBS,
        json!({"reason": "r", "filter": {"status": "failed", "endpoint_ref": "whep_AAAAAAAAAAAA"}}),
    )
    .send()
    .await
    .expect_error(404, "not_found");
    app.get(&format!("{JOBS}/rdj_AAAAAAAAAAAA"))
        .send()
        .await
        .expect_error(404, "not_found");
}

backend_tests!(
    a_dry_run_counts_and_a_job_redrives_each_once,
    two_runners_and_a_crash_redrive_each_delivery_once,
    a_cancel_stops_an_open_job,
    bad_requests_are_refused_by_name,
);
