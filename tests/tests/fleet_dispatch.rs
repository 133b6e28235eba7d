//! Fleet mode end to end: PostgreSQL, the Redis schedule and two
//! dispatchers. Runs only with BILLING_TEST_FLEET=1; then Redis and
//! PostgreSQL must be up.

use billing_tests::receiver::{Behaviour, TestReceiver};
use billing_tests::TestApp;
use serde_json::json;
use std::collections::HashSet;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_dispatchers_over_redis_survive_losing_its_data() {
    let Some(app) = TestApp::spawn_fleet().await else {
        return;
    };
    let (schedule, prefix) = billing_tests::redis::fresh_schedule(&app.store).await;
    let receiver = TestReceiver::start(Behaviour::Status(200)).await;
    app.subscribed_endpoint(&receiver.url(), "order.created", 1)
        .await;
    const N: usize = 400;
    for _ in 0..N / 2 {
        app.publish("order.created", json!({})).await;
    }
    let a = app.start_redis_dispatcher(app.dispatch_settings("0s"), schedule.clone());
    let b = app.start_redis_dispatcher(app.dispatch_settings("0s"), schedule.clone());
    app.eventually(30, || async { (receiver.count() >= N / 4).then_some(()) })
        .await;
    billing_tests::redis::delete_prefix(&prefix).await;
    for _ in 0..N / 2 {
        app.publish("order.created", json!({})).await;
    }
    let ids = app.all_received(&receiver, N, 60, vec![a, b]).await;
    let unique: HashSet<&String> = ids.iter().collect();
    assert_eq!(unique.len(), N, "every event delivered");
    assert_eq!(ids.len(), N, "no delivery attempted twice");
    assert_eq!(app.due_within_an_hour().await, 0);
    billing_tests::redis::delete_prefix(&prefix).await;
}
