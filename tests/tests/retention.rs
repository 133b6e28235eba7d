//! Retention (contract 12.1) on every backend, driven by the sweep's clock
//! seam (`dispatcher::retention::sweep` at a `now` the test chooses), so no
//! test waits for a retention to pass: settled deliveries and their events
//! go, live work and billing records stay, bodies are emptied on disk,
//! finished redrive jobs go with the request logs (open ones stay), a
//! duplicate is recognised while its event is kept, two sweepers delete
//! each row once, and on PostgreSQL every scan is an index range at a
//! million rows.

use billing_tests::kit::{deliveries, get, items, set_paused};
use billing_tests::receiver::{Behaviour, TestReceiver};
use billing_tests::{backend_tests, TestApp};
use domain::retention::{RetentionKind, RetentionPolicy};
use domain::Timestamp;
use serde_json::{json, Value};
use std::time::Duration;

const HOUR: Duration = Duration::from_secs(3_600);
const DAY: Duration = Duration::from_secs(86_400);

fn payment() -> Value {
    domain::webhook::catalogue::example("payment.succeeded", 2).expect("example")
}

/// Deliveries kept `deliveries`, bodies `bodies`, logs a day.
fn policy(deliveries: Duration, bodies: Duration) -> RetentionPolicy {
    RetentionPolicy::new(deliveries, bodies, DAY, DAY).expect("a valid policy")
}

/// `now` moved `by` into the future.
fn after(by: Duration) -> Timestamp {
    Timestamp::now().plus_millis(by.as_millis() as i64)
}

async fn sweep_at(app: &TestApp, policy: &RetentionPolicy, now: Timestamp) -> Vec<(String, u64)> {
    dispatcher::retention::sweep(&app.store, policy, now)
        .await
        .expect("the sweep runs")
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(kind, n)| (kind.as_str().to_owned(), n))
        .collect()
}

/// Waits until the endpoint has a delivery in `status`; returns it.
async fn one_in(app: &TestApp, endpoint: &str, status: &str) -> Value {
    deliveries(app, endpoint)
        .await
        .into_iter()
        .find(|d| d["status"] == status)
        .unwrap_or_else(|| panic!("no {status} delivery to {endpoint}"))
}

async fn settled_deliveries_and_their_events_go_while_live_work_and_billing_stay(app: TestApp) {
    let ok = TestReceiver::start(Behaviour::Status(204)).await;
    let failing = TestReceiver::start(Behaviour::Status(500)).await;
    let paused = TestReceiver::start(Behaviour::Status(204)).await;
    let (ok_ep, _) = app
        .subscribed_endpoint(&ok.url(), "payment.succeeded", 2)
        .await;
    let (failing_ep, _) = app
        .subscribed_endpoint(&failing.url(), "payment.succeeded", 2)
        .await;
    let (held_ep, _) = app
        .subscribed_endpoint(&paused.url(), "payment.succeeded", 2)
        .await;
    set_paused(&app, &held_ep, "pause").await;
    // One attempt each: the failing receiver's delivery fails at once.
    let first = app.publish("payment.succeeded", payment()).await;
    app.dispatch_due("0s").await;
    let succeeded = one_in(&app, &ok_ep, "succeeded").await;
    let failed = one_in(&app, &failing_ep, "failed").await;
    let held = one_in(&app, &held_ep, "held").await;
    // Not dispatched, the next event's deliveries stay pending.
    let live = app.publish("payment.succeeded", payment()).await;
    let pending = one_in(&app, &ok_ep, "pending").await;
    let unsubscribed = app.publish("invoice.paid", json!({})).await;
    let product = app
        .post("/api/v1/products", json!({"name": "Kept"}))
        .send()
        .await;
    product.expect(201);
    let product_ref = product.data()["product_ref"].as_str().unwrap().to_owned();
    app.store
        .dispatch()
        .dead_letter("{}", "not an event")
        .await
        .unwrap();

    // Within retention nothing goes.
    assert_eq!(sweep_at(&app, &policy(DAY, DAY), after(HOUR)).await, []);
    // Two days on, with deliveries kept a day.
    let swept = sweep_at(&app, &policy(DAY, DAY), after(2 * DAY)).await;
    let of = |kind: RetentionKind| {
        swept
            .iter()
            .find(|(k, _)| k == kind.as_str())
            .map_or(0, |(_, n)| *n)
    };
    assert_eq!(of(RetentionKind::Deliveries), 2, "{swept:?}");
    assert_eq!(
        of(RetentionKind::Events),
        1,
        "only the unsubscribed event: {swept:?}"
    );
    assert_eq!(of(RetentionKind::DeadLetters), 1, "{swept:?}");
    assert!(of(RetentionKind::RequestLogs) > 0, "{swept:?}");

    for gone in [&succeeded, &failed] {
        let d = gone["delivery_ref"].as_str().unwrap();
        app.get(&format!("/api/v1/webhook_deliveries/{d}"))
            .send()
            .await
            .expect_error(404, "not_found");
        let attempts = format!("SELECT COUNT(*) FROM webhook_attempts WHERE delivery_ref = '{d}'");
        assert_eq!(app.count(&attempts).await, 0, "its attempts went with it");
    }
    let listed: Vec<Value> = deliveries(&app, &ok_ep).await;
    assert_eq!(
        listed.len(),
        1,
        "only the pending delivery is listed: {listed:?}"
    );
    assert_eq!(listed[0]["delivery_ref"], pending["delivery_ref"]);
    assert!(deliveries(&app, &failing_ep)
        .await
        .iter()
        .all(|d| d["status"] == "pending"));
    for kept in [&held, &pending] {
        let d = kept["delivery_ref"].as_str().unwrap();
        let r = app
            .get(&format!("/api/v1/webhook_deliveries/{d}"))
            .send()
            .await;
        r.expect(200);
        assert_eq!(r.data()["status"], kept["status"]);
    }
    let events = |e: &str| format!("SELECT COUNT(*) FROM events WHERE event_ref = '{e}'");
    assert_eq!(
        app.count(&events(&first)).await,
        1,
        "its held delivery keeps it"
    );
    assert_eq!(app.count(&events(&live)).await, 1, "live work keeps it");
    assert_eq!(app.count(&events(&unsubscribed)).await, 0);
    app.get(&format!("/api/v1/products/{product_ref}"))
        .send()
        .await
        .expect(200);
    // A second pass finds nothing more but the request logs of the
    // requests made since.
    let again = sweep_at(&app, &policy(DAY, DAY), after(2 * DAY)).await;
    assert!(
        again.iter().all(|(kind, _)| kind == "request_logs"),
        "{again:?}"
    );
}

async fn a_duplicate_is_recognised_while_its_event_is_kept(app: TestApp) {
    let (_, envelope) = app.envelope("invoice.paid", json!({}));
    let accept = || async {
        dispatcher::intake::accept(&app.queue, envelope.as_bytes(), "test")
            .await
            .expect("store reachable")
    };
    assert_eq!(accept().await, dispatcher::intake::Accepted::New);
    sweep_at(&app, &policy(DAY, DAY), after(12 * HOUR)).await;
    assert_eq!(accept().await, dispatcher::intake::Accepted::Duplicate);
    // Once its event is gone, the reference is new again.
    sweep_at(&app, &policy(DAY, DAY), after(2 * DAY)).await;
    assert_eq!(accept().await, dispatcher::intake::Accepted::New);
}

async fn bodies_past_their_retention_are_gone_from_disk(app: TestApp) {
    let receiver = TestReceiver::start(Behaviour::Status(204)).await;
    let (endpoint, _) = app
        .subscribed_endpoint(&receiver.url(), "payment.succeeded", 2)
        .await;
    app.publish("payment.succeeded", payment()).await;
    app.dispatch_due("0s").await;
    let delivery = one_in(&app, &endpoint, "succeeded").await;
    let d = delivery["delivery_ref"].as_str().unwrap().to_owned();
    let body = get(&app, &format!("/api/v1/webhook_deliveries/{d}/body")).await;
    assert_eq!(body.data()["body_status"], "available");
    let stored = format!("SELECT COUNT(*) FROM webhook_deliveries WHERE delivery_ref = '{d}' AND payload IS NOT NULL");
    assert_eq!(app.count(&stored).await, 1);

    let swept = sweep_at(&app, &policy(DAY, HOUR), after(2 * HOUR)).await;
    assert_eq!(swept, [("bodies".to_owned(), 1)]);
    assert_eq!(app.count(&stored).await, 0, "the payload's bytes are gone");
    let body = get(&app, &format!("/api/v1/webhook_deliveries/{d}/body")).await;
    assert_eq!(body.data()["body_status"], "expired");
    assert_eq!(body.data()["payload"], Value::Null);
    get(&app, &format!("/api/v1/webhook_deliveries/{d}")).await;
    // Its mark moved on: the next pass neither re-reads nor re-counts it.
    assert_eq!(
        sweep_at(&app, &policy(DAY, HOUR), after(3 * HOUR)).await,
        []
    );
}

/// Inserts `n` settled deliveries of `endpoint` (settled at `at`) with
/// their events, and `n` events nobody subscribed to.
async fn plant_settled(app: &TestApp, endpoint: &str, n: u32, at: i64) {
    let env = &app.sandbox.environment_ref;
    let pool = app.raw_pool().await;
    let series =
        format!("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {n})");
    sqlx::query(&format!(
        "{series} INSERT INTO webhook_deliveries (delivery_ref, environment_ref, endpoint_ref, \
         event_ref, public_event_type, dto_version, status, diagnostic, generation, attempt_count, \
         occurred_at, event_data, match_reasons, body_status, payload, created_at, updated_at) \
         SELECT 'whd_planted' || i, '{env}', '{endpoint}', 'evt_planted' || i, 'payment.succeeded', \
         2, 'succeeded', 0, 1, 1, {at}, '{{}}', '[]', 'available', '{{}}', {at}, {at} FROM n"
    ))
    .execute(&pool)
    .await
    .unwrap();
    for (prefix, event_type) in [
        ("evt_planted", "payment.succeeded"),
        ("evt_lonely", "invoice.paid"),
    ] {
        sqlx::query(&format!(
            "{series} INSERT INTO events (event_ref, environment_ref, public_event_type, \
             occurred_at, scope, status, received_at, processed_at) SELECT '{prefix}' || i, \
             '{env}', '{event_type}', {at}, '{{}}', 'processed', {at}, {at} FROM n"
        ))
        .execute(&pool)
        .await
        .unwrap();
    }
    pool.close().await;
}

async fn two_sweepers_delete_each_row_once(app: TestApp) {
    let (endpoint, _) = app
        .subscribed_endpoint("https://example.com/hook", "payment.succeeded", 2)
        .await;
    let n = 1_200;
    plant_settled(&app, &endpoint, n, Timestamp::now().millis()).await;
    // Another process's store on the same database (SQLite: one file, one
    // writer at a time).
    let other = store::Store::connect_with(&app.database_url, billing_tests::store_options())
        .await
        .expect("a second store");
    let policy = policy(DAY, DAY);
    let now = after(2 * DAY);
    let (a, b) = tokio::join!(
        dispatcher::retention::sweep(&app.store, &policy, now),
        dispatcher::retention::sweep(&other, &policy, now),
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    let total = |kind| a.get(&kind).copied().unwrap_or(0) + b.get(&kind).copied().unwrap_or(0);
    assert_eq!(
        total(RetentionKind::Deliveries),
        u64::from(n),
        "{a:?} {b:?}"
    );
    assert_eq!(
        total(RetentionKind::Events),
        2 * u64::from(n),
        "{a:?} {b:?}"
    );
    assert_eq!(
        app.count("SELECT COUNT(*) FROM webhook_deliveries").await,
        0
    );
    assert_eq!(app.count("SELECT COUNT(*) FROM events").await, 0);
    other.close().await;
}

/// A batch of deliveries takes only those settled at its `from` or later,
/// and says where it reached, so a pass's next batch starts there.
async fn a_pass_goes_on_from_where_its_last_batch_reached(app: TestApp) {
    let (endpoint, _) = app
        .subscribed_endpoint("https://example.com/hook", "payment.succeeded", 2)
        .await;
    let at = Timestamp::now().millis();
    plant_settled(&app, &endpoint, 6, at).await;
    let retention = app.store.retention();
    let cutoff = after(2 * DAY);
    let first = retention
        .sweep(RetentionKind::Deliveries, 0, cutoff, 4)
        .await
        .unwrap();
    assert_eq!(first.deleted[0], (RetentionKind::Deliveries, 4));
    assert!(first.full);
    assert_eq!(first.reached, Some(at));
    let past = retention
        .sweep(RetentionKind::Deliveries, at + 1, cutoff, 4)
        .await
        .unwrap();
    assert_eq!(past.deleted[0], (RetentionKind::Deliveries, 0));
    assert!(!past.full && past.reached.is_none());
    let rest = retention
        .sweep(RetentionKind::Deliveries, at, cutoff, 4)
        .await
        .unwrap();
    assert_eq!(rest.deleted[0], (RetentionKind::Deliveries, 2));
    assert!(!rest.full);
    assert_eq!(
        app.count("SELECT COUNT(*) FROM webhook_deliveries").await,
        0
    );
}

const REDRIVE_JOBS: &str = "/api/v1/webhook_redrive_jobs";

/// Creates a redrive job of `body` (202); the job.
async fn redrive_job(app: &TestApp, body: Value) -> Value {
    let r = app.post(REDRIVE_JOBS, body).send().await;
    r.expect(202);
    r.data().clone()
}

/// The redrive job `job` as retrieved now, or `None` when it answers 404.
async fn redrive_job_now(app: &TestApp, job: &Value) -> Option<Value> {
    let path = format!(
        "{REDRIVE_JOBS}/{}",
        job["redrive_job_ref"].as_str().unwrap()
    );
    let r = app.get(&path).send().await;
    if r.status == 404 {
        r.expect_error(404, "not_found");
        return None;
    }
    r.expect(200);
    Some(r.data().clone())
}

/// Finished redrive jobs (`succeeded`, `canceled`) go as long after they
/// finished as request logs are kept (contract 12.1); an open one stays,
/// however old.
async fn finished_redrive_jobs_go_with_the_request_logs(app: TestApp) {
    let filter = json!({"status": "failed"});
    let succeeded = redrive_job(
        &app,
        json!({"reason": "count", "filter": filter, "dry_run": true}),
    )
    .await;
    for _ in 0..10 {
        dispatcher::redrive_jobs::run_once(&app.store, "runner", 500, Timestamp::now())
            .await
            .unwrap();
    }
    let succeeded = redrive_job_now(&app, &succeeded).await.unwrap();
    assert_eq!(succeeded["status"], "succeeded", "{succeeded}");
    let canceled = redrive_job(&app, json!({"reason": "stop", "filter": filter})).await;
    let cancel = format!(
        "{REDRIVE_JOBS}/{}/cancel",
        canceled["redrive_job_ref"].as_str().unwrap()
    );
    let r = app.post(&cancel, json!({})).send().await;
    r.expect(200);
    assert_eq!(r.data()["status"], "canceled");
    // Never run: it stays `counting`.
    let open = redrive_job(&app, json!({"reason": "later", "filter": filter})).await;

    // Request logs are kept a day: within it, no job goes.
    let swept = sweep_at(&app, &policy(DAY, DAY), after(HOUR)).await;
    assert!(
        swept.iter().all(|(kind, _)| kind != "redrive_jobs"),
        "{swept:?}"
    );
    assert!(redrive_job_now(&app, &succeeded).await.is_some());
    let swept = sweep_at(&app, &policy(DAY, DAY), after(2 * DAY)).await;
    assert!(
        swept.contains(&("redrive_jobs".to_owned(), 2)),
        "the two finished jobs: {swept:?}"
    );
    for gone in [&succeeded, &canceled] {
        assert_eq!(redrive_job_now(&app, gone).await, None, "{gone}");
    }
    let kept = redrive_job_now(&app, &open)
        .await
        .expect("the open job stays");
    assert_eq!(kept["status"], "counting");
    let listed: Vec<Value> = items(&app.get(REDRIVE_JOBS).send().await);
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["redrive_job_ref"], open["redrive_job_ref"]);
    // A later pass finds nothing more of the kind.
    let swept = sweep_at(&app, &policy(DAY, DAY), after(3 * DAY)).await;
    assert!(
        swept.iter().all(|(kind, _)| kind != "redrive_jobs"),
        "{swept:?}"
    );
}

backend_tests!(
    finished_redrive_jobs_go_with_the_request_logs,
    a_pass_goes_on_from_where_its_last_batch_reached,
    settled_deliveries_and_their_events_go_while_live_work_and_billing_stay,
    a_duplicate_is_recognised_while_its_event_is_kept,
    bodies_past_their_retention_are_gone_from_disk,
    two_sweepers_delete_each_row_once,
);

/// On PostgreSQL with a million settled deliveries and a million events
/// (and dead letters, request logs, idempotency records and redrive jobs),
/// ANALYZEd, every scan of the sweep is an index range: no sequential
/// scan of a large table, whatever its size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_sweeps_scan_indexes_at_a_million_rows() {
    let Some(app) = TestApp::spawn_fleet().await else {
        return;
    };
    let (endpoint, _) = app
        .subscribed_endpoint("https://example.com/hook", "payment.succeeded", 2)
        .await;
    let now = Timestamp::now().millis();
    let env = &app.sandbox.environment_ref;
    let pool = app.raw_pool().await;
    // The secondary indexes are built once the rows are in, as a bulk
    // load does: the same definitions, read back from the catalogue, at a
    // fraction of the cost of keeping them up row by row.
    let tables = "'webhook_deliveries', 'events', 'dead_events', 'request_logs', \
         'idempotency_keys', 'webhook_redrive_jobs'";
    let secondary: Vec<(String, String)> = sqlx::query_as(&format!(
        "SELECT indexname::text, indexdef FROM pg_indexes WHERE tablename IN ({tables}) \
         AND indexname NOT IN (SELECT conname::text FROM pg_constraint)"
    ))
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(secondary.len() >= 4, "the sweep's indexes: {secondary:?}");
    for (name, _) in &secondary {
        sqlx::query(&format!("DROP INDEX {name}"))
            .execute(&pool)
            .await
            .unwrap();
    }
    let rebuild = secondary.iter().map(|(_, definition)| definition.clone());
    for sql in [
        format!(
            "INSERT INTO webhook_deliveries (delivery_ref, environment_ref, endpoint_ref, event_ref, \
             public_event_type, dto_version, status, diagnostic, generation, attempt_count, \
             occurred_at, event_data, match_reasons, body_status, payload, created_at, updated_at, \
             last_response_class) \
             SELECT 'whd_' || i, '{env}', '{endpoint}', 'evt_' || i, \
             CASE WHEN i % 4 = 0 THEN 'refund.created' ELSE 'payment.succeeded' END, 2, \
             CASE WHEN i % 10 = 0 THEN 'pending' WHEN i % 3 = 0 THEN 'failed' ELSE 'succeeded' END, \
             0, 1, 1, {now} - i, '{{}}', '[]', 'available', '{{}}', {now} - i, {now} - i, \
             CASE WHEN i % 10 = 0 THEN NULL WHEN i % 3 = 0 THEN '5xx' ELSE '2xx' END \
             FROM generate_series(1, 1000000) AS i"
        ),
        format!(
            "INSERT INTO events (event_ref, environment_ref, public_event_type, occurred_at, scope, \
             status, received_at, processed_at) SELECT 'evt_' || i, '{env}', 'payment.succeeded', \
             {now} - i, '{{}}', 'processed', {now} - i, {now} - i FROM generate_series(1, 1000000) AS i"
        ),
        format!(
            "INSERT INTO dead_events (dead_event_id, body, reason, received_at) SELECT 'dead_' || i, \
             '{{}}', 'test', {now} - i FROM generate_series(1, 200000) AS i"
        ),
        format!(
            "INSERT INTO request_logs (request_log_ref, method, path, status, duration_ms, created_at) \
             SELECT 'req_' || i, 'GET', '/', 200, 1, {now} - i FROM generate_series(1, 200000) AS i"
        ),
        format!(
            "INSERT INTO idempotency_keys (environment_ref, principal_ref, operation_id, idem_key, \
             fingerprint, state, created_at, locked_at) SELECT '{env}', 'sa_x', 'createProduct', \
             'key_' || i, 'f', 'done', {now} - i, {now} - i FROM generate_series(1, 200000) AS i"
        ),
        // Redrive jobs: one in ten still open (no finish time).
        format!(
            "INSERT INTO webhook_redrive_jobs (redrive_job_ref, environment_ref, status, filter, \
             reason, dry_run, created_at, updated_at, finished_at) SELECT 'rdj_' || i, '{env}', \
             CASE WHEN i % 10 = 0 THEN 'running' ELSE 'succeeded' END, '{{}}', 'r', 0, \
             {now} - i, {now} - i, CASE WHEN i % 10 = 0 THEN NULL ELSE {now} - i END \
             FROM generate_series(1, 200000) AS i"
        ),
    ]
    .into_iter()
    .chain(rebuild)
    {
        sqlx::query(&sql).execute(&pool).await.unwrap();
    }
    // Before any ANALYZE, as in a store's first minute: the planner has no
    // statistics of the million deliveries.
    delivery_filters_read_an_index_in_order(&pool, env, &endpoint, now).await;
    sqlx::query("ANALYZE").execute(&pool).await.unwrap();
    // A cut-off that leaves most rows kept, as a sweep that keeps up sees.
    let cutoff = (now - 900_000).to_string();
    for kind in RetentionKind::ALL {
        let sql = store::retention::candidates(kind, store::Backend::Postgres, 500);
        let bound = match kind {
            RetentionKind::Bodies | RetentionKind::Events | RetentionKind::Deliveries => {
                sql.replace("$1", "0").replace("$2", &cutoff)
            }
            _ => sql.replace("$1", &cutoff),
        };
        let plan = plan_of(&pool, &bound).await;
        assert!(
            !plan.contains("Seq Scan"),
            "{kind:?} scans a table:\n{plan}"
        );
        assert!(plan.contains("Index"), "{kind:?} uses no index:\n{plan}");
    }
    // The batch's question of which events deliveries remain of.
    let batch: Vec<String> = (1..=500).map(|i| format!("'evt_{}'", i * 997)).collect();
    let mut sql = store::retention::with_deliveries(store::Backend::Postgres, batch.len());
    for (i, literal) in batch.iter().enumerate().rev() {
        sql = sql.replace(&format!("${}", i + 1), literal);
    }
    let plan = plan_of(&pool, &sql).await;
    assert!(
        !plan.contains("Seq Scan"),
        "the delivery check scans a table:\n{plan}"
    );
    delivery_filters_read_an_index_in_order(&pool, env, &endpoint, now).await;
    redrive_steps_start_at_their_cursor(&pool, env, &endpoint, now).await;
    pool.close().await;
}

/// A redrive job's counting step deep in its deliveries reads the index
/// from its cursor on: the cursor's `created_at` bounds the range, so a
/// step costs the same at the millionth delivery as at the first.
async fn redrive_steps_start_at_their_cursor(
    pool: &sqlx::AnyPool,
    env: &str,
    endpoint: &str,
    now: i64,
) {
    use domain::webhook::redrive_job::RedriveJobStatus;
    use store::webhooks::redrive_jobs::{step_sql, JobFilter, RedriveJobRecord};
    for (status, endpoint_ref) in [("failed", None), ("succeeded", Some(endpoint.to_owned()))] {
        let job = RedriveJobRecord {
            redrive_job_ref: domain::Ref::from_trusted("rdj_planned".to_owned()),
            environment_ref: domain::Ref::from_trusted(env.to_owned()),
            status: RedriveJobStatus::Counting,
            filter: JobFilter {
                status: status.to_owned(),
                endpoint_ref,
                public_event_type: None,
                created_after: None,
                created_before: None,
                last_response_class: None,
            },
            reason: "planned".to_owned(),
            dry_run: true,
            matched: 0,
            redriven: 0,
            skipped: 0,
            cursor: Some((now - 500_000, format!("whd_{}", 500_000))),
            created_at: Timestamp::from_millis(now),
            finished_at: None,
            version: 1,
        };
        let (mut sql, values) = step_sql(&job, 500);
        for (i, value) in values.iter().enumerate().rev() {
            sql = sql.replace(&format!("${}", i + 1), value);
        }
        let plan = plan_of(pool, &sql).await;
        assert!(
            plan.lines()
                .any(|l| l.contains("Index Cond") && l.contains("created_at >=")),
            "a {status} step starts at its cursor:\n{plan}"
        );
        assert!(!plan.contains("Seq Scan"), "{status}:\n{plan}");
    }
}

/// Every filter of `listWebhookDeliveries` (contract 12.2), alone and
/// combined, on the first page and a later one, reads an index in the
/// list's order: no sequential scan, no bitmap and no sort of the
/// matches, so a page costs the same at a million deliveries as at a
/// hundred, with statistics or without (each plan is taken as the list
/// reads, after `IN_INDEX_ORDER`). An incremental
/// sort is not one: it puts the rows of one millisecond in `delivery_ref`
/// order as the index yields them (`webhook_deliveries_by_endpoint` and
/// `_by_env` order by `created_at` alone, migration 0035).
async fn delivery_filters_read_an_index_in_order(
    pool: &sqlx::AnyPool,
    env: &str,
    endpoint: &str,
    now: i64,
) {
    use domain::webhook::{DeliveryStatus, ResponseClass};
    use store::DeliveryFilter;
    let hour_ago = Some(Timestamp::from_millis(now - 3_600_000));
    let minute_ago = Some(Timestamp::from_millis(now - 60_000));
    let event_type = Some("refund.created".to_owned());
    let filters = [
        DeliveryFilter::default(),
        DeliveryFilter {
            status: Some(DeliveryStatus::Failed),
            ..DeliveryFilter::default()
        },
        DeliveryFilter {
            status: Some(DeliveryStatus::Pending),
            ..DeliveryFilter::default()
        },
        DeliveryFilter {
            public_event_type: event_type.clone(),
            ..DeliveryFilter::default()
        },
        DeliveryFilter {
            last_response_class: Some(ResponseClass::ServerError),
            ..DeliveryFilter::default()
        },
        DeliveryFilter {
            created_after: hour_ago,
            created_before: minute_ago,
            ..DeliveryFilter::default()
        },
        DeliveryFilter {
            status: Some(DeliveryStatus::Failed),
            public_event_type: event_type,
            created_after: hour_ago,
            last_response_class: Some(ResponseClass::ServerError),
            created_before: minute_ago,
        },
    ];
    let pages = [
        store::PageRequest {
            limit: 50,
            after: None,
        },
        store::PageRequest {
            limit: 50,
            after: Some((now - 500_000, format!("whd_{}", 500_000))),
        },
    ];
    for filter in &filters {
        for page in &pages {
            let (mut sql, values) =
                store::webhooks::deliveries::list_deliveries_sql(env, endpoint, filter, page);
            for (i, value) in values.iter().enumerate().rev() {
                sql = sql.replace(&format!("${}", i + 1), value);
            }
            let plan = plan_in_index_order(pool, &sql).await;
            // A node line reads "Sort  (cost=…"; "Sort Key:" lines belong to
            // an incremental sort too.
            let sorts_matches = plan.lines().any(|l| {
                l.trim_start()
                    .trim_start_matches("->")
                    .trim_start()
                    .starts_with("Sort  (")
            });
            assert!(
                !plan.contains("Seq Scan on webhook_deliveries")
                    && !plan.contains("Bitmap")
                    && !sorts_matches,
                "{filter:?} {page:?} reads no index in order:\n{plan}"
            );
            assert!(
                !plan.contains("webhook_deliveries_by_env"),
                "{filter:?} {page:?} reads the environment's deliveries:\n{plan}"
            );
            assert!(plan.contains("Index"), "{filter:?}: no index:\n{plan}");
        }
    }
}

/// PostgreSQL's plan of `sql` in a transaction that begins as a page read
/// in index order does (`store::db::page::IN_INDEX_ORDER`), as text.
async fn plan_in_index_order(pool: &sqlx::AnyPool, sql: &str) -> String {
    let mut tx = pool.begin().await.unwrap();
    sqlx::query(store::db::page::IN_INDEX_ORDER)
        .execute(&mut *tx)
        .await
        .unwrap();
    let plan: Vec<String> = sqlx::query_scalar(&format!("EXPLAIN {sql}"))
        .fetch_all(&mut *tx)
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    plan.join("\n")
}

/// PostgreSQL's plan of `sql`, as text.
async fn plan_of(pool: &sqlx::AnyPool, sql: &str) -> String {
    let plan: Vec<String> = sqlx::query_scalar(&format!("EXPLAIN {sql}"))
        .fetch_all(pool)
        .await
        .unwrap();
    plan.join("\n")
}
