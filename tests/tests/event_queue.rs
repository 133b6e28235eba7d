//! The event queue on every backend: the dispatcher's group commit
//! (`dispatcher::queue`) answers each concurrent caller once its own event
//! is committed, new exactly once per `event_ref`; and the store's plain
//! write under it (`Dispatch::write_events`) leases to a dispatcher exactly
//! the fresh deliveries that were given room, leaving the others due.

use billing_tests::{backend_tests, TestApp};
use domain::{Prefix, Ref, Timestamp};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use store::fanout::EventRow;
use store::{EventData, EventRecord, Leasing};

fn event(app: &TestApp, event_type: &str) -> EventRecord {
    EventRecord {
        event_ref: Ref::generate(Prefix::Event),
        environment_ref: Ref::parse(Prefix::Environment, &app.sandbox.environment_ref)
            .expect("the sandbox's reference"),
        public_event_type: event_type.into(),
        occurred_at: Timestamp::now(),
        scope: Default::default(),
        data: EventData::parse(r#"{"refund_ref": "ref_AAAAAAAAAAAA"}"#.to_owned()).unwrap(),
        order: None,
    }
}

/// Each delivery's `(endpoint_ref, lease_owner)`, of the event `event_ref`,
/// read straight from the store (no API shows leases).
async fn leases(app: &TestApp, event_ref: &str) -> HashMap<String, Option<String>> {
    let pool = app.raw_pool().await;
    let rows: Vec<(String, Option<String>)> = sqlx::query_as(
        "SELECT endpoint_ref, lease_owner FROM webhook_deliveries WHERE event_ref = $1",
    )
    .bind(event_ref)
    .fetch_all(&pool)
    .await
    .expect("deliveries");
    pool.close().await;
    rows.into_iter().collect()
}

/// `write_events` of the one event `e`.
async fn write_one<T: Send + 'static>(
    app: &TestApp,
    e: &EventRecord,
    leasing: Option<Leasing<T>>,
) -> store::EventsWritten<T> {
    app.store
        .dispatch()
        .write_events(vec![EventRow::from(e)], leasing)
        .await
        .unwrap()
}

/// 300 concurrent callers, each of 100 events sent three times: every
/// caller is answered, each event is new for exactly one of its callers,
/// and each is stored once with its one delivery.
async fn concurrent_callers_are_each_answered_once_committed(app: TestApp) {
    let (endpoint, _) = app
        .subscribed_endpoint("https://example.com/hook", "refund.created", 1)
        .await;
    let events: Vec<EventRecord> = (0..100).map(|_| event(&app, "refund.created")).collect();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..3 {
        for e in &events {
            let (queue, e) = (app.queue.clone(), e.clone());
            tasks.spawn(async move { (e.event_ref.clone(), queue.enqueue(&e).await) });
        }
    }
    let mut new: HashMap<Ref, usize> = HashMap::new();
    while let Some(joined) = tasks.join_next().await {
        let (event_ref, answer) = joined.expect("the caller's task");
        let is_new = answer.expect("the group write commits");
        *new.entry(event_ref).or_default() += usize::from(is_new);
    }
    assert_eq!(new.len(), 100);
    assert!(new.values().all(|n| *n == 1), "{new:?}");
    assert_eq!(app.count("SELECT COUNT(*) FROM events").await, 100);
    let deliveries = format!(
        "SELECT COUNT(*) FROM webhook_deliveries WHERE endpoint_ref = '{endpoint}' \
         AND status = 'pending' AND lease_owner IS NULL"
    );
    assert_eq!(app.count(&deliveries).await, 100);
}

/// A room that counts its return (its drop), as a dispatcher's slots do.
struct Room {
    id: u8,
    returned: Arc<AtomicUsize>,
}

impl Drop for Room {
    fn drop(&mut self) {
        self.returned.fetch_add(1, Ordering::SeqCst);
    }
}

/// With a `Leasing`, the deliveries given room are born leased to its owner
/// and returned with their room; the others are left due, unleased. A
/// repeated event writes nothing and keeps no room (on PostgreSQL a batch
/// written by one statement asks before it knows, and gives it back).
/// The first event fixes the endpoints' urls, so on PostgreSQL the next
/// ones are written by one statement (`intake::one_statement`), the
/// first by the transaction: both are checked.
async fn only_deliveries_given_room_are_born_leased(app: TestApp) {
    let (roomy, _) = app
        .subscribed_endpoint("https://example.com/a", "refund.created", 1)
        .await;
    let (busy, _) = app
        .subscribed_endpoint("https://example.com/b", "refund.created", 1)
        .await;
    let asked = Arc::new(AtomicUsize::new(0));
    let given = Arc::new(AtomicUsize::new(0));
    let returned = Arc::new(AtomicUsize::new(0));
    let leasing = || {
        let (asked, given, returned) = (asked.clone(), given.clone(), returned.clone());
        let roomy = roomy.clone();
        Some(Leasing {
            owner: "worker-1".to_owned(),
            lease: Duration::from_secs(30),
            reference_key: None,
            room: Box::new(move |endpoint: &Ref| {
                asked.fetch_add(1, Ordering::SeqCst);
                (endpoint.as_str() == roomy).then(|| {
                    given.fetch_add(1, Ordering::SeqCst);
                    Room {
                        id: 7,
                        returned: returned.clone(),
                    }
                })
            }),
        })
    };
    let held = || given.load(Ordering::SeqCst) - returned.load(Ordering::SeqCst);
    for round in 0..2 {
        let asked_before = asked.load(Ordering::SeqCst);
        let e = event(&app, "refund.created");
        let written = write_one(&app, &e, leasing()).await;
        assert!(written.new.contains(e.event_ref.as_str()), "round {round}");
        assert_eq!(
            asked.load(Ordering::SeqCst) - asked_before,
            2,
            "once per pending delivery"
        );
        assert_eq!(written.leased.len(), 1);
        let leased = &written.leased[0];
        assert_eq!(leased.delivery.endpoint_ref.as_str(), roomy);
        assert_eq!(leased.room.id, 7);
        assert!(leased.endpoint_version >= 1);
        assert_eq!(written.left_due.len(), 1);
        let by_endpoint = leases(&app, e.event_ref.as_str()).await;
        assert_eq!(by_endpoint[&roomy].as_deref(), Some("worker-1"));
        assert_eq!(by_endpoint[&busy], None);
        assert_ne!(written.left_due[0].0, leased.delivery.delivery_ref);
        assert_eq!(held(), 1, "the leased delivery's room alone is held");
        // Either way, its data is stored once, and a claim reads it back.
        let copies = format!(
            "SELECT COUNT(*) FROM ({}) copies WHERE copy_on_event = 1",
            billing_tests::event_copies_sql(e.event_ref.as_str())
        );
        assert_eq!(app.count(&copies).await, 1, "round {round}: on its row");
        let apart = format!(
            "SELECT COUNT(*) FROM webhook_event_data WHERE event_ref = '{}'",
            e.event_ref
        );
        assert_eq!(app.count(&apart).await, 0, "round {round}: none apart");
        let now = domain::Timestamp::now();
        let claimed = app
            .store
            .dispatch()
            .claim_deliveries_by_ref(
                "worker-2",
                &[written.left_due[0].0.to_string()],
                now,
                now.plus_seconds(30),
            )
            .await
            .expect("the claim");
        assert_eq!(claimed.len(), 1, "round {round}");
        let data: serde_json::Value =
            serde_json::from_str(&claimed[0].event_data).expect("its event's data");
        assert!(data.is_object(), "round {round}: {data}");

        let again = write_one(&app, &e, leasing()).await;
        assert!(again.new.is_empty() && again.leased.is_empty() && again.left_due.is_empty());
        assert_eq!(held(), 1, "no room kept for a duplicate");
        assert_eq!(
            app.count(&format!(
                "SELECT COUNT(*) FROM webhook_deliveries WHERE event_ref = '{}'",
                e.event_ref
            ))
            .await,
            2
        );
        drop(written);
        assert_eq!(held(), 0);
    }

    // Without a dispatcher, every fresh delivery is left due.
    let other = event(&app, "refund.created");
    let written = write_one::<()>(&app, &other, None).await;
    assert!(written.leased.is_empty());
    assert_eq!(written.left_due.len(), 2);
    let by_endpoint = leases(&app, other.event_ref.as_str()).await;
    assert!(by_endpoint.values().all(Option::is_none), "{by_endpoint:?}");
}

backend_tests!(
    concurrent_callers_are_each_answered_once_committed,
    only_deliveries_given_room_are_born_leased,
);
