//! The fleet tests' Redis: where it is, and how a test clears the keys it
//! made (every test keeps its schedule under a key prefix of its own and
//! deletes only that; other tests share the server).

use dispatcher::redis_schedule::redis;

/// `BILLING_TEST_REDIS_URL`, or the local server.
pub fn url() -> String {
    std::env::var("BILLING_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

/// Deletes every key under `prefix`: what a FLUSHALL does to a schedule.
pub async fn delete_prefix(prefix: &str) {
    let client = redis::Client::open(url()).expect("redis url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("redis reachable");
    let pattern = format!("{prefix}:*");
    let mut cursor: u64 = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await
            .expect("SCAN");
        if !keys.is_empty() {
            redis::cmd("DEL")
                .arg(&keys)
                .query_async::<()>(&mut conn)
                .await
                .expect("DEL");
        }
        if next == 0 {
            return;
        }
        cursor = next;
    }
}

/// A schedule of `store` under a fresh key prefix on the test Redis (its
/// alone), and the prefix (for `delete_prefix` at the end).
pub async fn fresh_schedule(
    store: &store::Store,
) -> (
    std::sync::Arc<dispatcher::redis_schedule::RedisSchedule>,
    String,
) {
    let prefix = format!("billing-test:{}", crate::unique_key());
    let owner = store
        .identity()
        .await
        .expect("a migrated store has an identity");
    let keys = dispatcher::redis_schedule::Keys::exclusive(prefix.clone(), owner);
    let schedule = dispatcher::redis_schedule::RedisSchedule::connect(&url(), keys)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "BILLING_TEST_FLEET=1 but Redis is not reachable at {}: {e}",
                url()
            )
        });
    (std::sync::Arc::new(schedule), prefix)
}
