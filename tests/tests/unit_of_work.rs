//! The unit of work (`store::WriteTx`) on both engines: what a transaction
//! writes and the events it emits appear together when it commits, and
//! neither appears when it is dropped or taken back to its mark.

use billing_tests::{backend_tests, TestApp};
use domain::webhook::shaping::Scope;
use domain::{Prefix, Ref, Timestamp};
use store::{Claim, EventData, EventRecord, IdempotencyScope, StoredResponse};

backend_tests!(
    a_commit_keeps_rows_and_events_together,
    a_dropped_transaction_keeps_neither,
    undoing_to_the_mark_keeps_what_came_before,
    a_claimed_key_is_in_flight_until_its_transaction_ends,
);

const RETENTION_MS: i64 = 24 * 3_600_000;

fn scope(app: &TestApp) -> IdempotencyScope {
    IdempotencyScope {
        environment_ref: app.sandbox.environment_ref.clone(),
        principal_ref: "sa_unitofwork".to_owned(),
        operation_id: "createServiceAccount".to_owned(),
        key: billing_tests::unique_key(),
    }
}

fn event(app: &TestApp) -> EventRecord {
    EventRecord {
        event_ref: Ref::generate(Prefix::Event),
        environment_ref: Ref::parse(Prefix::Environment, &app.sandbox.environment_ref).expect("environment ref"),
        public_event_type: "payment.succeeded".to_owned(),
        occurred_at: Timestamp::now(),
        scope: Scope::default(),
        data: EventData::parse(r#"{"amount": 1}"#.to_owned()).expect("an object"),
    }
}

fn response() -> StoredResponse {
    StoredResponse {
        status: 201,
        body: r#"{"data":{"name":"kept"}}"#.to_owned(),
        etag: Some("\"v1\"".to_owned()),
    }
}

/// Claims `scope` and says whether a result was kept for it (and gives
/// the key back).
async fn kept(app: &TestApp, scope: &IdempotencyScope) -> Option<StoredResponse> {
    match app
        .store
        .claim_idempotency_key(scope, "fp", Timestamp::now(), RETENTION_MS)
        .await
        .expect("claim")
    {
        Claim::Replay(stored) => Some(stored),
        Claim::Owned(_) => None,
        Claim::InFlight => panic!("the key is still claimed"),
        Claim::Mismatch => panic!("fingerprint mismatch"),
    }
}

async fn in_outbox(app: &TestApp, event: &EventRecord) -> bool {
    app.store
        .outbox_batch(10_000)
        .await
        .expect("outbox")
        .iter()
        .any(|e| e.event_ref == event.event_ref)
}

/// Opens the key's unit of work and writes its result and an event in it.
async fn write(app: &TestApp, scope: &IdempotencyScope, event: &EventRecord) -> store::WriteTx {
    let Claim::Owned(mut tx) = app
        .store
        .claim_idempotency_key(scope, "fp", Timestamp::now(), RETENTION_MS)
        .await
        .expect("claim")
    else {
        panic!("a fresh key is owned");
    };
    tx.keep_result(scope, "fp", Timestamp::now(), &response())
        .await
        .expect("keep");
    tx.emit(event).await.expect("emit");
    tx
}

async fn a_commit_keeps_rows_and_events_together(app: TestApp) {
    let (scope, event) = (scope(&app), event(&app));
    let tx = write(&app, &scope, &event).await;
    assert!(!in_outbox(&app, &event).await, "not visible before commit");
    tx.commit().await.expect("commit");
    assert_eq!(kept(&app, &scope).await, Some(response()));
    assert!(in_outbox(&app, &event).await);
}

async fn a_dropped_transaction_keeps_neither(app: TestApp) {
    let (scope, event) = (scope(&app), event(&app));
    let tx = write(&app, &scope, &event).await;
    drop(tx);
    assert_eq!(kept(&app, &scope).await, None);
    assert!(!in_outbox(&app, &event).await);
}

async fn undoing_to_the_mark_keeps_what_came_before(app: TestApp) {
    let (scope, before, after) = (scope(&app), event(&app), event(&app));
    let mut tx = write(&app, &scope, &before).await;
    tx.mark().await.expect("mark");
    tx.emit(&after).await.expect("emit");
    tx.undo_to_mark().await.expect("undo");
    tx.commit().await.expect("commit");
    assert_eq!(kept(&app, &scope).await, Some(response()));
    assert!(in_outbox(&app, &before).await);
    assert!(!in_outbox(&app, &after).await);
}

async fn a_claimed_key_is_in_flight_until_its_transaction_ends(app: TestApp) {
    let (scope, event) = (scope(&app), event(&app));
    let claim = |store: store::Store, scope: IdempotencyScope| async move {
        store
            .claim_idempotency_key(&scope, "fp", Timestamp::now(), RETENTION_MS)
            .await
            .expect("claim")
    };
    let tx = write(&app, &scope, &event).await;
    assert!(matches!(
        claim(app.store.clone(), scope.clone()).await,
        Claim::InFlight
    ));
    // Another process (PostgreSQL: another API process of the fleet). With
    // SQLite one process owns the file and its writer waits its turn.
    if app.backend == billing_tests::Backend::Postgres {
        let other = store::Store::connect(&app.database_url)
            .await
            .expect("second store");
        assert!(matches!(
            claim(other.clone(), scope.clone()).await,
            Claim::InFlight
        ));
        drop(tx);
        assert!(matches!(claim(other, scope.clone()).await, Claim::Owned(_)));
    } else {
        drop(tx);
    }
    assert!(matches!(claim(app.store.clone(), scope).await, Claim::Owned(_)));
}
