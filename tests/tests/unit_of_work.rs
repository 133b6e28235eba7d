//! The unit of work (`store::WriteTx`) on both engines: what a transaction
//! writes (here an idempotency key's result) and the events it emits
//! appear together when it commits, and neither appears when it is
//! dropped; a claimed key is in flight for everyone else until then.

use billing_tests::{backend_tests, TestApp};
use domain::webhook::shaping::Scope;
use domain::{Prefix, Ref, Timestamp};
use store::dispatch::outbox::Emit;
use store::{Claim, EventData, EventRecord, IdempotencyScope, KeyClaim, StoredResponse};

backend_tests!(
    a_commit_keeps_rows_and_events_together,
    a_dropped_transaction_keeps_neither,
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
        environment_ref: Ref::parse(Prefix::Environment, &app.sandbox.environment_ref)
            .expect("environment ref"),
        public_event_type: "payment.succeeded".to_owned(),
        occurred_at: Timestamp::now(),
        scope: Scope::default(),
        data: EventData::parse(r#"{"amount": 1}"#.to_owned()).expect("an object"),
        order: None,
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

/// Claims the key, opens its unit of work and writes its result and an
/// event in it.
async fn write(
    app: &TestApp,
    scope: &IdempotencyScope,
    event: &EventRecord,
) -> (KeyClaim, store::WriteTx) {
    let Claim::Owned(claim) = app
        .store
        .claim_idempotency_key(scope, "fp", Timestamp::now(), RETENTION_MS)
        .await
        .expect("claim")
    else {
        panic!("a fresh key is owned");
    };
    let mut tx = claim.begin().await.expect("begin");
    claim.keep(&mut tx, &response()).await.expect("keep");
    tx.emit(event).await.expect("emit");
    (claim, tx)
}

async fn a_commit_keeps_rows_and_events_together(app: TestApp) {
    let (scope, event) = (scope(&app), event(&app));
    let (claim, tx) = write(&app, &scope, &event).await;
    assert!(!in_outbox(&app, &event).await, "not visible before commit");
    tx.commit().await.expect("commit");
    drop(claim);
    assert_eq!(kept(&app, &scope).await, Some(response()));
    assert!(in_outbox(&app, &event).await);
}

async fn a_dropped_transaction_keeps_neither(app: TestApp) {
    let (scope, event) = (scope(&app), event(&app));
    let (claim, tx) = write(&app, &scope, &event).await;
    drop((claim, tx));
    assert_eq!(kept(&app, &scope).await, None);
    assert!(!in_outbox(&app, &event).await);
}

async fn a_claimed_key_is_in_flight_until_its_transaction_ends(app: TestApp) {
    let (scope, event) = (scope(&app), event(&app));
    let claim = |store: store::Store, scope: IdempotencyScope| async move {
        store
            .claim_idempotency_key(&scope, "fp", Timestamp::now(), RETENTION_MS)
            .await
            .expect("claim")
    };
    let (held, tx) = write(&app, &scope, &event).await;
    assert!(matches!(
        claim(app.store.clone(), scope.clone()).await,
        Claim::InFlight
    ));
    // Another process (PostgreSQL: another API process of the fleet) may
    // claim the key in its memory, but not open its unit of work. With
    // SQLite one process owns the file and its writer waits its turn.
    if app.backend == billing_tests::Backend::Postgres {
        let other = store::Store::connect(&app.database_url)
            .await
            .expect("second store");
        let Claim::Owned(theirs) = claim(other.clone(), scope.clone()).await else {
            panic!("the other process sees no decided result");
        };
        assert!(matches!(
            theirs.begin().await,
            Err(store::StoreError::Conflict)
        ));
        tx.rollback().await.expect("rollback");
        drop(held);
        assert!(theirs.begin().await.is_ok());
    } else {
        drop((held, tx));
    }
    assert!(matches!(
        claim(app.store.clone(), scope).await,
        Claim::Owned(_)
    ));
}
