//! The console's deliveries page across endpoints (contract 12.3) costs
//! the same per page whatever the number of deliveries: with 50,000
//! deliveries of six endpoints in two environments, ANALYZEd, each page
//! of 50 the page reads (`store::webhooks::activity::environment_deliveries_sql`,
//! the very text the store runs) is one range of an index, read in the
//! list's order: `webhook_deliveries_by_env` (migrations 0024, 0035), or
//! `webhook_deliveries_failed_by_env` under the failed status (or,
//! under `pending`, the small live backlog from the index of due work);
//! never a sequential scan or a sort of the environment's deliveries, and
//! a bounded number of buffers, on the first page as on a page deep in
//! the list, with every filter, planned for its values or generically as
//! a prepared statement is after a few runs. `webhook_deliveries_by_env`
//! orders by `created_at` alone: the rows of one millisecond are put in
//! `delivery_ref` order as they are read (PostgreSQL's incremental sort,
//! SQLite's temporary b-tree for the ORDER BY's last term), which stops
//! with the page. The search by `event_ref` keeps to its unique key
//! beside the new index.
//!
//! The PostgreSQL checks run with `BILLING_TEST_FLEET=1` only; SQLite's
//! planner is checked on every run.

use billing_tests::{Backend, TestApp};
use domain::webhook::{DeliveryStatus, ResponseClass};
use domain::Timestamp;
use serde_json::{json, Value};
use sqlx::{Connection, Executor, PgConnection, Row, SqliteConnection};
use store::webhooks::activity::{environment_deliveries_sql, DELIVERIES_OF_EVENT};
use store::{DeliveryFilter, PageRequest};

/// Deliveries seeded; one in ten is of the other environment.
const DELIVERIES: i64 = 50_000;
/// The newest deliveries are pending; the rest settled, one in seven
/// failed.
const PENDING: i64 = 300;
/// Milliseconds between two seeded deliveries.
const STEP: i64 = 10;
/// A page, as the console reads it.
const PAGE: u32 = 50;
/// The indexes a page may read.
const INDEXES: [&str; 2] = [
    "webhook_deliveries_by_env",
    "webhook_deliveries_failed_by_env",
];

/// Every index a plan scans (a sequential scan as `Seq Scan`, a sort as
/// `Sort`), and its total shared buffers.
fn plan_facts(explained: &Value) -> (Vec<String>, u64) {
    fn walk(node: &Value, found: &mut Vec<String>) {
        if let Some(name) = node.get("Index Name").and_then(Value::as_str) {
            found.push(name.to_owned());
        }
        if let Some(kind @ ("Seq Scan" | "Sort" | "Incremental Sort")) =
            node.get("Node Type").and_then(Value::as_str)
        {
            found.push(kind.to_owned());
        }
        for child in node
            .get("Plans")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            walk(child, found);
        }
    }
    let plan = &explained[0]["Plan"];
    let mut found = Vec::new();
    walk(plan, &mut found);
    let buffers = ["Shared Hit Blocks", "Shared Read Blocks"]
        .iter()
        .filter_map(|k| plan.get(*k).and_then(Value::as_u64))
        .sum();
    (found, buffers)
}

/// `n` new endpoints of the environment of `secret`, as the API makes them.
async fn endpoints(app: &TestApp, secret: &str, n: usize) -> Vec<String> {
    let mut refs = Vec::new();
    for i in 0..n {
        let r = app
            .post(
                "/api/v1/webhook_endpoints",
                json!({ "url": format!("https://example.com/hook/{i}") }),
            )
            .auth(secret)
            .send()
            .await;
        r.expect(201);
        refs.push(r.data()["endpoint_ref"].as_str().unwrap().to_owned());
    }
    refs
}

/// The seed: delivery `i` (1 is the newest) was created `i * STEP` ms
/// before `now`, in the live environment when `i` is a multiple of ten,
/// else in the sandbox, spread over its endpoints; pending when among the
/// newest, else failed (5xx) one in seven and succeeded (2xx) otherwise;
/// one in four a `refund.created`. `series` is the engine's
/// `(i)` row source.
fn seed_sql(app: &TestApp, sandbox: &[String], live: &str, now: i64, series: &str) -> String {
    let endpoint = sandbox
        .iter()
        .enumerate()
        .map(|(k, e)| format!("WHEN {k} THEN '{e}'"))
        .collect::<Vec<_>>()
        .join(" ");
    format!(
        "INSERT INTO webhook_deliveries (delivery_ref, environment_ref, endpoint_ref, event_ref, \
         public_event_type, dto_version, status, diagnostic, generation, attempt_count, \
         occurred_at, event_data, match_reasons, body_status, payload, created_at, updated_at, \
         last_response_class) \
         SELECT 'whd_seed' || i, \
         CASE WHEN i % 10 = 0 THEN '{live_env}' ELSE '{sandbox_env}' END, \
         CASE WHEN i % 10 = 0 THEN '{live}' ELSE CASE i % {n} {endpoint} END END, \
         'evt_seed' || i, \
         CASE WHEN i % 4 = 0 THEN 'refund.created' ELSE 'payment.succeeded' END, 1, \
         CASE WHEN i <= {PENDING} THEN 'pending' WHEN i % 7 = 0 THEN 'failed' ELSE 'succeeded' END, \
         0, 1, 1, {now} - i * {STEP}, '{{\"amount\": \"12.00\", \"note\": \"' || i || '\"}}', '[]', \
         'available', '{{\"data\": {{\"amount\": \"12.00\"}}}}', {now} - i * {STEP}, {now} - i * {STEP}, \
         CASE WHEN i <= {PENDING} THEN NULL WHEN i % 7 = 0 THEN '5xx' ELSE '2xx' END \
         FROM {series}",
        live_env = app.live.environment_ref,
        sandbox_env = app.sandbox.environment_ref,
        n = sandbox.len(),
    )
}

/// The pages checked: `(what, filter, page)`, each of 50, the first and
/// one that starts 30,000 deliveries deep.
fn pages(now: i64) -> Vec<(&'static str, DeliveryFilter, PageRequest)> {
    let first = PageRequest {
        limit: PAGE,
        after: None,
    };
    let deep_at = now - 30_001 * STEP;
    let deep = PageRequest {
        limit: PAGE,
        after: Some((deep_at, "whd_seed30001".to_owned())),
    };
    let status = |s| DeliveryFilter {
        status: Some(s),
        ..DeliveryFilter::default()
    };
    let filters = [
        ("every delivery", DeliveryFilter::default()),
        ("failed", status(DeliveryStatus::Failed)),
        ("succeeded", status(DeliveryStatus::Succeeded)),
        (
            "refund.created",
            DeliveryFilter {
                public_event_type: Some("refund.created".to_owned()),
                ..DeliveryFilter::default()
            },
        ),
        (
            "5xx",
            DeliveryFilter {
                last_response_class: Some(ResponseClass::ServerError),
                ..DeliveryFilter::default()
            },
        ),
        (
            "failed within a window",
            DeliveryFilter {
                status: Some(DeliveryStatus::Failed),
                created_after: Some(Timestamp::from_millis(now - 45_000 * STEP)),
                created_before: Some(Timestamp::from_millis(now - 1_000 * STEP)),
                ..DeliveryFilter::default()
            },
        ),
    ];
    let mut out = vec![("pending", status(DeliveryStatus::Pending), first.clone())];
    for (what, filter) in filters {
        out.push((what, filter.clone(), first.clone()));
        out.push((what, filter, deep.clone()));
    }
    out
}

/// `EXPLAIN (ANALYZE, BUFFERS)` of `sql` with `values` (as
/// `environment_deliveries_sql` gives them) bound, in a transaction that
/// is rolled back; with `generic`, planned as a prepared statement whose
/// plan no longer depends on its values.
async fn explain(conn: &mut PgConnection, sql: &str, values: &[String], generic: bool) -> Value {
    let mut tx = conn.begin().await.expect("begin");
    let text = if generic {
        tx.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            .await
            .expect("generic plans");
        let types: Vec<&str> = values
            .iter()
            .map(|v| {
                if v.starts_with('\'') {
                    "text"
                } else {
                    "bigint"
                }
            })
            .collect();
        tx.execute(format!("PREPARE page ({}) AS {sql}", types.join(", ")).as_str())
            .await
            .expect("prepare");
        format!(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE page ({})",
            values.join(", ")
        )
    } else {
        let mut bound = sql.to_owned();
        for (i, value) in values.iter().enumerate().rev() {
            bound = bound.replace(&format!("${}", i + 1), value);
        }
        format!("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {bound}")
    };
    let plan: sqlx::types::Json<Value> = sqlx::query_scalar(&text)
        .fetch_one(&mut *tx)
        .await
        .expect("explain");
    if generic {
        // A prepared statement outlives the transaction.
        tx.execute("DEALLOCATE page").await.expect("deallocate");
    }
    tx.rollback().await.expect("rollback");
    plan.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_reads_a_page_across_endpoints_from_an_index() {
    let Some(app) = TestApp::spawn_fleet().await else {
        return;
    };
    let sandbox = endpoints(&app, &app.sandbox.secret, 5).await;
    let live = endpoints(&app, &app.live.secret, 1).await.remove(0);
    let mut conn = PgConnection::connect(&app.database_url)
        .await
        .expect("connect");
    let now: i64 = 1_800_000_000_000;
    let series = format!("generate_series(1, {DELIVERIES}) AS i");
    conn.execute(seed_sql(&app, &sandbox, &live, now, &series).as_str())
        .await
        .expect("seed");
    conn.execute("ANALYZE").await.expect("analyze");

    let table_pages: i32 =
        sqlx::query_scalar("SELECT relpages FROM pg_class WHERE relname = 'webhook_deliveries'")
            .fetch_one(&mut conn)
            .await
            .expect("the table's size");

    let env = app.sandbox.environment_ref.as_str();
    let mut report = Vec::new();
    for (what, filter, page) in pages(now) {
        let (sql, values) = environment_deliveries_sql(env, &filter, &page);
        let deep = if page.after.is_some() {
            "deep"
        } else {
            "first"
        };
        // Pending deliveries are the live backlog: when they are few, a
        // planner may rather take them all from the index of due work
        // and keep the newest 50 (a top-N sort of the backlog, not of
        // the environment's deliveries).
        let pending = filter.status == Some(DeliveryStatus::Pending);
        for generic in [false, true] {
            let plan = explain(&mut conn, &sql, &values, generic).await;
            let (found, buffers) = plan_facts(&plan);
            let rows = plan[0]["Plan"]["Actual Rows"].as_u64().unwrap_or(0);
            let allowed = |node: &String| {
                INDEXES.contains(&node.as_str())
                    || node == "Incremental Sort"
                    || (pending && ["webhook_deliveries_due_at", "Sort"].contains(&node.as_str()))
            };
            assert!(
                found
                    .iter()
                    .any(|n| INDEXES.contains(&n.as_str()) || n.ends_with("_due_at"))
                    && found.iter().all(allowed),
                "{what}, {deep} page (generic: {generic}) must read one index in order, \
                 not {found:?}: {plan}"
            );
            assert_eq!(
                rows,
                u64::from(PAGE) + 1,
                "{what}, {deep} page: a full page and one more: {plan}"
            );
            // A page's index range and its rows' heap pages, never more
            // than a small part of the table.
            assert!(
                buffers <= 100,
                "{what}, {deep} page (generic: {generic}) touched {buffers} buffers \
                 of a table of {table_pages} pages: {plan}"
            );
            report.push(format!(
                "{what} ({deep}{}): {buffers}",
                if generic { ", generic" } else { "" }
            ));
        }
    }
    eprintln!(
        "buffers per page of {PAGE} in a table of {table_pages} pages: {}",
        report.join("; ")
    );

    // The search by event keeps to the unique key that starts with it.
    let plan = explain(
        &mut conn,
        DELIVERIES_OF_EVENT,
        &[
            "'evt_seed123'".to_owned(),
            format!("'{env}'"),
            "100".to_owned(),
        ],
        false,
    )
    .await;
    let (found, buffers) = plan_facts(&plan);
    assert!(
        !found
            .iter()
            .any(|i| i == "Seq Scan" || INDEXES.contains(&i.as_str())),
        "an event's deliveries are found by its key: {plan}"
    );
    assert!(buffers <= 20, "{buffers} buffers: {plan}");
}

/// SQLite's planner reads the same pages from the same indexes, in order:
/// no table scan, no temporary b-tree to sort the matches (one for the
/// ORDER BY's last term sorts the rows of one millisecond at a time).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_reads_a_page_across_endpoints_from_an_index() {
    let app = TestApp::spawn(Backend::Sqlite).await;
    let sandbox = endpoints(&app, &app.sandbox.secret, 5).await;
    let live = endpoints(&app, &app.live.secret, 1).await.remove(0);
    let mut conn = SqliteConnection::connect(&app.database_url)
        .await
        .expect("connect");
    let now: i64 = 1_800_000_000_000;
    let series = format!(
        "(WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {DELIVERIES}) \
         SELECT i FROM n)"
    );
    conn.execute(seed_sql(&app, &sandbox, &live, now, &series).as_str())
        .await
        .expect("seed");
    conn.execute("ANALYZE").await.expect("analyze");
    let env = app.sandbox.environment_ref.as_str();
    let mut report = Vec::new();
    for (what, filter, page) in pages(now) {
        let (mut sql, values) = environment_deliveries_sql(env, &filter, &page);
        for (i, value) in values.iter().enumerate().rev() {
            sql = sql.replace(&format!("${}", i + 1), value);
        }
        let plan: Vec<String> = sqlx::query(&format!("EXPLAIN QUERY PLAN {sql}"))
            .fetch_all(&mut conn)
            .await
            .expect("explain")
            .iter()
            .map(|row| row.get::<String, _>("detail"))
            .collect();
        let plan = plan.join("\n");
        assert!(
            INDEXES
                .iter()
                .any(|i| plan.contains(&format!("USING INDEX {i} "))),
            "{what}, {page:?}: one of {INDEXES:?}:\n{plan}"
        );
        let sorts_one_millisecond = |l: &str| {
            l == "USE TEMP B-TREE FOR LAST TERM OF ORDER BY"
                || l == "USE TEMP B-TREE FOR RIGHT PART OF ORDER BY"
        };
        assert!(
            !plan
                .lines()
                .any(|l| (l.contains("TEMP B-TREE") && !sorts_one_millisecond(l))
                    || l == "SCAN webhook_deliveries"),
            "{what}, {page:?}: read in order:\n{plan}"
        );
        let deep = if page.after.is_some() {
            "deep"
        } else {
            "first"
        };
        report.push(format!("{what} ({deep}): {}", plan.replace('\n', " / ")));
    }
    eprintln!("SQLite's plans: {}", report.join("; "));
}
