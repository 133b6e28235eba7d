//! The fleet's claim path keeps its cost per delivery whatever the size of
//! the due backlog, on a PostgreSQL that has planner statistics, as in
//! production (this machine's server runs with autovacuum off, so the
//! test runs `ANALYZE` itself). With 12,000 deliveries due, each statement
//! of the claim path is explained with the very text the store runs
//! (`store::dispatch::statements`), in a transaction set up as the store
//! sets up its own: the claim finds its rows by primary key, never walking
//! the due-time index nor scanning the table, and the feed's read stops at
//! its limit.
//!
//! The endpoint health gauge's read keeps to its index in the same way.
//!
//! Runs with `BILLING_TEST_FLEET=1` only (PostgreSQL).

use billing_tests::TestApp;
use serde_json::{json, Value};
use sqlx::{Connection, Executor, PgConnection};
use store::dispatch::statements;

/// Due deliveries seeded: the worst backlog the fleet benchmark builds.
const DUE: usize = 12_000;
/// Finished deliveries beside them: a table of 20,000 rows, where a
/// planner left to itself prefers a sequential scan to 256 key lookups.
const DONE: usize = 8_000;
/// References per claim, as the claim loop takes them.
const CLAIM: usize = 256;

/// Every index a plan scans (a sequential scan as `Seq Scan`), and its
/// total shared buffers.
fn plan_facts(explained: &Value) -> (Vec<String>, u64) {
    fn walk(node: &Value, indexes: &mut Vec<String>) {
        if let Some(name) = node.get("Index Name").and_then(Value::as_str) {
            indexes.push(name.to_owned());
        }
        if node.get("Node Type").and_then(Value::as_str) == Some("Seq Scan") {
            indexes.push("Seq Scan".to_owned());
        }
        for child in node
            .get("Plans")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            walk(child, indexes);
        }
    }
    let plan = &explained[0]["Plan"];
    let mut indexes = Vec::new();
    walk(plan, &mut indexes);
    let buffers = ["Shared Hit Blocks", "Shared Read Blocks"]
        .iter()
        .filter_map(|k| plan.get(*k).and_then(Value::as_u64))
        .sum();
    (indexes, buffers)
}

/// `EXPLAIN (ANALYZE, BUFFERS)` of `sql` with `args` bound, in a
/// transaction that is rolled back, set up as the store sets up its
/// claims' (`BY_PRIMARY_KEY`).
async fn explain(conn: &mut PgConnection, sql: &str, args: &[Value]) -> Value {
    explain_in(conn, Some(statements::BY_PRIMARY_KEY), sql, args).await
}

/// `explain` after `set_up`, if any.
async fn explain_in(
    conn: &mut PgConnection,
    set_up: Option<&str>,
    sql: &str,
    args: &[Value],
) -> Value {
    let mut tx = conn.begin().await.expect("begin");
    if let Some(set_up) = set_up {
        sqlx::query(set_up)
            .execute(&mut *tx)
            .await
            .expect("set up as the store does");
    }
    let text = format!("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}");
    let mut q = sqlx::query_scalar::<_, sqlx::types::Json<Value>>(&text);
    for a in args {
        q = match a {
            Value::String(s) => q.bind(s.clone()),
            Value::Number(n) => q.bind(n.as_i64().expect("integer")),
            other => panic!("unsupported argument {other}"),
        };
    }
    let plan = q.fetch_one(&mut *tx).await.expect("explain").0;
    tx.rollback().await.expect("rollback");
    plan
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_and_feed_cost_the_same_whatever_the_backlog() {
    let Some(app) = TestApp::spawn_fleet().await else {
        return;
    };
    let (endpoint, _) = app
        .subscribed_endpoint("http://127.0.0.1:9/hook", "order.created", 1)
        .await;
    let mut conn = PgConnection::connect(&app.database_url)
        .await
        .expect("connect");
    let now: i64 = 1_800_000_000_000;
    conn.execute(
        format!(
            "INSERT INTO webhook_deliveries (delivery_ref, environment_ref, endpoint_ref, event_ref, \
             public_event_type, dto_version, status, diagnostic, generation, attempt_count, \
             next_attempt_at, occurred_at, event_data, match_reasons, body_status, created_at, updated_at) \
             SELECT 'wdl_seed' || lpad(i::text, 8, '0'), '{env}', '{endpoint}', 'evt_seed' || i, \
             'order.created', 1, CASE WHEN i <= {DUE} THEN 'pending' ELSE 'succeeded' END, 0, 1, 1, \
             CASE WHEN i <= {DUE} THEN {now} - i ELSE NULL END, 0, '{{}}', '[]', 'available', 0, 0 \
             FROM generate_series(1, {total}) AS i",
            env = app.sandbox.environment_ref,
            total = DUE + DONE,
        )
        .as_str(),
    )
    .await
    .expect("seed");
    // Each delivery is written again twice, as its claim and its record
    // do: the dead versions weigh on the primary key index (there is no
    // autovacuum here) and make key lookups look dear to the planner.
    for _ in 0..2 {
        conn.execute("UPDATE webhook_deliveries SET version = version + 1")
            .await
            .expect("rewrite");
    }
    conn.execute("ANALYZE").await.expect("analyze");

    // A claim of 256 due deliveries spread over the backlog.
    let refs: Vec<Value> = (0..CLAIM)
        .map(|i| Value::from(format!("wdl_seed{:08}", 1 + i * (DUE / CLAIM))))
        .collect();
    let lock = explain(
        &mut conn,
        &statements::lock_by_ref(store::Backend::Postgres, CLAIM),
        &refs,
    )
    .await;
    let mut args = vec![Value::from("worker"), Value::from(now + 60_000)];
    args.extend(refs.iter().cloned());
    let lease = explain(
        &mut conn,
        &statements::lease_by_ref(store::Backend::Postgres, CLAIM),
        &args,
    )
    .await;
    // Per row: a primary-key lookup reads a handful of pages; the lease's
    // update also writes a new row version and its index entries (the
    // indexes of settled deliveries hold no pending one).
    for (name, plan, per_row) in [("lock", &lock, 12), ("lease", &lease, 32)] {
        let (indexes, buffers) = plan_facts(plan);
        assert!(
            indexes.iter().all(|i| i == "webhook_deliveries_pkey"),
            "the claim's {name} statement must find its rows by primary key, not scan {indexes:?}: {plan}"
        );
        assert!(
            buffers <= (CLAIM as u64) * per_row,
            "the claim's {name} statement touched {buffers} buffers for {CLAIM} rows: {plan}"
        );
    }

    // A small batch of results is recorded by one statement that the
    // planner answers by primary key without `BY_PRIMARY_KEY`.
    const RESULTS: usize = 8;
    let mut args = Vec::new();
    for i in 0..RESULTS {
        let delivery = format!("wdl_seed{:08}", 1 + i * (DUE / RESULTS));
        args.extend([
            Value::from(delivery),
            Value::from(1),
            Value::from("succeeded"),
            Value::from(2),
            Value::from(now),
            Value::from(now),
            Value::from("{}"),
            Value::from("2xx"),
            Value::from(200),
            Value::from(5),
            Value::from(""),
            Value::from(format!("wat_seed{i:08}")),
            Value::from(app.sandbox.environment_ref.as_str()),
            Value::from(endpoint.as_str()),
            Value::from(200),
            Value::from(""),
            Value::from(""),
            Value::from(5),
            Value::from("succeeded"),
        ]);
    }
    args.extend([
        Value::from("available"),
        Value::from(now),
        Value::from("worker"),
    ]);
    let record = explain_in(&mut conn, None, &statements::record_small(RESULTS), &args).await;
    let (indexes, buffers) = plan_facts(&record);
    assert!(
        indexes.contains(&"webhook_deliveries_pkey".to_owned())
            && !indexes.iter().any(|i| i == "Seq Scan"),
        "recording {RESULTS} results must find their deliveries by key, not scan {indexes:?}: {record}"
    );
    assert!(
        buffers <= (RESULTS as u64) * 32,
        "recording {RESULTS} results touched {buffers} buffers: {record}"
    );

    // The feed's read of the earliest due stops at its limit.
    let feed = explain(
        &mut conn,
        &statements::pending_due(CLAIM as u32),
        &[
            Value::from(now + 60_000),
            Value::from(now),
            Value::from(i64::MIN),
        ],
    )
    .await;
    let (_, buffers) = plan_facts(&feed);
    let text = feed.to_string();
    assert!(
        !text.contains("\"Sort\""),
        "the feed's read must not sort the backlog: {feed}"
    );
    assert!(
        buffers <= (CLAIM as u64) * 12,
        "the feed's read of {CLAIM} touched {buffers} buffers over a backlog of {DUE}: {feed}"
    );
    eprintln!(
        "claim lock {} buffers, lease {} buffers, feed {} buffers for {CLAIM} rows over {DUE} due",
        plan_facts(&lock).1,
        plan_facts(&lease).1,
        buffers
    );
}

/// The endpoint health gauge reads by index however the attempts are
/// spread: with a few endpoints holding most of them and many holding
/// none, a planner with statistics answers a correlated `EXISTS` with a
/// sequential scan per endpoint; the gauge's statement
/// on PostgreSQL (`recent_outcomes_lateral`), planned generically as a
/// prepared statement is after a few runs, scans
/// `webhook_attempts_by_endpoint_status` for rows and
/// `webhook_deliveries_successes_by_endpoint` for the successes kept on
/// deliveries (migration 0036) only, an endpoint without attempts
/// included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_health_gauge_reads_attempts_by_index_whatever_their_spread() {
    let Some(app) = TestApp::spawn_fleet().await else {
        return;
    };
    let mut conn = PgConnection::connect(&app.database_url)
        .await
        .expect("connect");
    // Attempts without their deliveries: only the attempts are read.
    conn.execute("SET session_replication_role = replica")
        .await
        .expect("no foreign keys for the seed");
    conn.execute(
        format!(
            "INSERT INTO webhook_attempts (attempt_ref, delivery_ref, environment_ref, endpoint_ref, \
             generation, attempt_number, status, duration_ms, started_at, created_at) \
             SELECT 'att_' || e || '_' || i, 'wdl_' || e || '_' || i, '{env}', 'we_hot' || e, 1, 1, \
             CASE WHEN i % 5 = 0 THEN 'failed' ELSE 'succeeded' END, 1, i, i \
             FROM generate_series(1, 20) AS e, generate_series(1, 5000) AS i",
            env = app.sandbox.environment_ref,
        )
        .as_str(),
    )
    .await
    .expect("seed");
    // As many successes again, kept on their deliveries' rows.
    conn.execute(
        format!(
            "INSERT INTO webhook_deliveries (delivery_ref, environment_ref, endpoint_ref, event_ref, \
             public_event_type, dto_version, status, diagnostic, generation, attempt_count, \
             last_attempt_at, occurred_at, event_data, match_reasons, body_status, created_at, \
             updated_at, success_status, success_duration_ms) \
             SELECT 'wdl_' || e || '_' || i, '{env}', 'we_hot' || e, 'evt_' || e || '_' || i, \
             'order.created', 1, 'succeeded', 0, 1, 1, 5000 + i, 0, '{{}}', '[]', 'available', \
             5000 + i, 5000 + i, 200, 1 \
             FROM generate_series(1, 20) AS e, generate_series(1, 5000) AS i",
            env = app.sandbox.environment_ref,
        )
        .as_str(),
    )
    .await
    .expect("seed kept successes");
    conn.execute("SET session_replication_role = DEFAULT")
        .await
        .expect("foreign keys again");
    conn.execute("ANALYZE").await.expect("analyze");
    let mut tx = conn.begin().await.expect("begin");
    tx.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        .await
        .expect("generic plans");
    let sql = store::webhooks::attempts::recent_outcomes_lateral(100);
    tx.execute(format!("PREPARE outcomes (text, text, text) AS {sql}").as_str())
        .await
        .expect("prepare");
    let plan: sqlx::types::Json<Value> = sqlx::query_scalar(
        "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) \
         EXECUTE outcomes ('succeeded', 'failed', '[\"we_hot7\", \"we_never_attempted\"]')",
    )
    .fetch_one(&mut *tx)
    .await
    .expect("explain");
    tx.rollback().await.expect("rollback");
    let (mut indexes, buffers) = plan_facts(&plan.0);
    indexes.sort();
    assert_eq!(
        indexes,
        [
            "webhook_attempts_by_endpoint_status",
            "webhook_attempts_by_endpoint_status",
            "webhook_deliveries_successes_by_endpoint",
        ],
        "three index scans, run once per endpoint, nothing else: {}",
        plan.0
    );
    assert!(
        buffers < 200,
        "a read of 100 attempts touched {buffers} buffers: {}",
        plan.0
    );

    // When the endpoint's run of failures began, and its successes per
    // chart bucket: the kept ones by their index too, never a scan.
    let failing_since = explain_in(
        &mut conn,
        None,
        store::webhooks::attempts::FAILING_SINCE,
        &[json!("we_hot7"), json!("failed"), json!("succeeded")],
    )
    .await;
    let activity = explain_in(
        &mut conn,
        None,
        store::webhooks::activity::KEPT_ACTIVITY,
        &[
            json!("we_hot7"),
            json!(9_900),
            json!(60_000),
            json!(app.sandbox.environment_ref.as_str()),
        ],
    )
    .await;
    for (name, plan, most) in [
        ("failing since", &failing_since, 40),
        ("activity", &activity, 40),
    ] {
        let (indexes, buffers) = plan_facts(plan);
        assert!(
            indexes.contains(&"webhook_deliveries_successes_by_endpoint".to_owned())
                && !indexes.iter().any(|i| i == "Seq Scan"),
            "{name} must read kept successes by their index: {indexes:?}: {plan}"
        );
        assert!(buffers <= most, "{name} touched {buffers} buffers: {plan}");
    }
}

/// The release of ordered deliveries (contract 13.1) reads a key's live
/// work, never its history: among 20,000 keys (one a subscription), with
/// 20,000 settled deliveries of 100 of them on
/// a `per_key` endpoint beside a few open ones per key, releasing 50 keys
/// walks the index of open and blocking ordered deliveries alone, and so
/// does the read of what a waiting delivery waits for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releasing_a_key_reads_its_open_deliveries_only() {
    const KEYS: usize = 100;
    const SETTLED_PER_KEY: usize = 200;
    const OPEN_PER_KEY: usize = 3;
    let Some(app) = TestApp::spawn_fleet().await else {
        return;
    };
    let (endpoint, _) = app
        .subscribed_endpoint("http://127.0.0.1:9/hook", "order.created", 1)
        .await;
    let mut conn = PgConnection::connect(&app.database_url)
        .await
        .expect("connect");
    let env = &app.sandbox.environment_ref;
    let per_key = SETTLED_PER_KEY + OPEN_PER_KEY;
    conn.execute(
        format!(
            "INSERT INTO webhook_deliveries (delivery_ref, environment_ref, endpoint_ref, event_ref, \
             public_event_type, dto_version, status, diagnostic, generation, attempt_count, \
             next_attempt_at, occurred_at, event_data, match_reasons, body_status, created_at, \
             updated_at, ordering_key, sequence, ordered_key) \
             SELECT 'wdl_ord' || lpad(i::text, 8, '0'), '{env}', '{endpoint}', 'evt_ord' || i, \
             'order.created', 1, CASE WHEN s <= {SETTLED_PER_KEY} THEN 'succeeded' ELSE 'pending' END, \
             0, 1, 1, NULL, 0, '{{}}', '[]', 'available', 0, 0, 'key-' || k, s, 'key-' || k \
             FROM (SELECT i, i % {KEYS} AS k, i / {KEYS} + 1 AS s \
             FROM generate_series(0, {total} - 1) AS i) AS g",
            total = KEYS * per_key,
        )
        .as_str(),
    )
    .await
    .expect("seed deliveries");
    conn.execute(
        format!(
            "INSERT INTO ordering_keys (environment_ref, ordering_key, last_sequence, accepted_through) \
             SELECT '{env}', 'key-' || k, {per_key}, {per_key} FROM generate_series(0, {KEYS} - 1) AS k \
             UNION ALL SELECT '{env}', 'other-' || k, 1, 1 FROM generate_series(1, 20000) AS k"
        )
        .as_str(),
    )
    .await
    .expect("seed keys");
    conn.execute("ANALYZE").await.expect("analyze");

    let keys: Vec<Value> = (0..50).map(|k| Value::from(format!("key-{k}"))).collect();
    let marks: Vec<String> = (0..keys.len()).map(|i| format!("${}", i + 2)).collect();
    let sql = store::dispatch::ordering::statements::release(
        "$1",
        &format!("ordered_key IN ({})", marks.join(", ")),
    );
    let mut args = vec![Value::from(1_800_000_000_000i64)];
    args.extend(keys);
    let release = explain_in(&mut conn, None, &sql, &args).await;
    let (indexes, buffers) = plan_facts(&release);
    assert!(!indexes.iter().any(|i| i == "Seq Scan"), "{release:#}");
    assert!(
        indexes
            .iter()
            .any(|i| i == "webhook_deliveries_open_by_key"),
        "{release:#}"
    );
    // 50 keys of 3 open deliveries each, not 50 × 203 rows.
    assert!(buffers < 2_500, "{buffers} buffers: {release:#}");

    let waiting = explain_in(
        &mut conn,
        None,
        &store::dispatch::ordering::statements::waiting_for(),
        &[Value::from(format!(
            "wdl_ord{:08}",
            (SETTLED_PER_KEY + 1) * KEYS + 7
        ))],
    )
    .await;
    let (indexes, _) = plan_facts(&waiting);
    assert!(!indexes.iter().any(|i| i == "Seq Scan"), "{waiting:#}");
}
