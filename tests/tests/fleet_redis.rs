//! The fleet schedule in Redis against a real Redis and PostgreSQL: the
//! feed copies the store's due deliveries into Redis; concurrent claimers
//! never share a delivery; a dead worker's leases come back; Redis losing
//! all its data loses no delivery; the store's lease fences every claim; a
//! claim passes over, unwritten, what an endpoint has no room for.
//!
//! Runs with `BILLING_TEST_FLEET=1` (then a missing Redis at
//! `redis://127.0.0.1:6379`, or `BILLING_TEST_REDIS_URL`, is a failure).
//! Each test keeps its keys under its own prefix and deletes only those:
//! other tests share the server.

use billing_tests::poll::Poll;
use billing_tests::TestApp;
use dispatcher::redis_schedule::{self as rs, RedisSchedule};
use domain::Timestamp;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// A store with `endpoints × events` pending deliveries, due now, and a
/// schedule under a fresh key prefix; `None` (said once) without
/// `BILLING_TEST_FLEET=1`.
struct Fixture {
    app: TestApp,
    schedule: Arc<RedisSchedule>,
    refs: Vec<String>,
}

async fn fixture(endpoints: usize, events: usize) -> Option<Fixture> {
    let app = TestApp::spawn_fleet().await?;
    let (schedule, _) = billing_tests::redis::fresh_schedule(&app.store).await;
    schedule.ping().await.expect("Redis answers PING");
    for i in 0..endpoints {
        app.subscribed_endpoint(&format!("http://127.0.0.1:9/hook{i}"), "refund.created", 1)
            .await;
    }
    let data = domain::webhook::catalogue::example("refund.created", 1).expect("example");
    for _ in 0..events {
        app.publish("refund.created", data.clone()).await;
    }
    // The intake fans each event out as it accepts it.
    let created = endpoints * events;
    let refs: Vec<String> = app
        .store
        .dispatch()
        .pending_due_refs(Timestamp::now().plus_seconds(60), 100_000)
        .await
        .expect("pending refs")
        .into_iter()
        .map(|(r, _)| r)
        .collect();
    assert_eq!(refs.len(), created);
    Some(Fixture {
        app,
        schedule,
        refs,
    })
}

fn lease(ms: i64) -> (Timestamp, Timestamp) {
    let now = Timestamp::now();
    (now, now.plus_millis(ms))
}

/// Claims until nothing is due; returns the references claimed.
async fn claim_all(f: &Fixture, owner: &str, batch: u32, lease_ms: i64) -> Vec<String> {
    claim_all_ahead(f, owner, batch, lease_ms, 0).await
}

/// As `claim_all`, at `ahead_ms` past the wall clock: a lease that ends
/// before then has ended.
async fn claim_all_ahead(
    f: &Fixture,
    owner: &str,
    batch: u32,
    lease_ms: i64,
    ahead_ms: i64,
) -> Vec<String> {
    let mut got = Vec::new();
    loop {
        let now = Timestamp::now().plus_millis(ahead_ms);
        let until = now.plus_millis(lease_ms);
        let claimed = claim(&f.app.store, &f.schedule, owner, (now, until), batch)
            .await
            .expect("claim");
        if claimed.is_empty() {
            return got;
        }
        got.extend(claimed.into_iter().map(|d| d.delivery_ref.into_string()));
    }
}

/// The worker's claim path with room for every endpoint: the records
/// leased (none is passed over).
async fn claim(
    store: &store::Store,
    schedule: &RedisSchedule,
    owner: &str,
    (now, until): (Timestamp, Timestamp),
    limit: u32,
) -> Result<Vec<store::DeliveryRecord>, dispatcher::DispatchError> {
    let (claimed, passed) = rs::claim(
        store,
        schedule,
        (owner, now, until),
        limit,
        &rs::NoRoom::default(),
    )
    .await?;
    assert_eq!(
        passed, 0,
        "nothing is passed over with room for every endpoint"
    );
    Ok(claimed)
}

fn set(v: &[String]) -> HashSet<String> {
    v.iter().cloned().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn feed_schedules_the_stores_due_deliveries() {
    let Some(f) = fixture(2, 10).await else {
        return;
    };
    assert_eq!(f.schedule.due_len().await.unwrap(), 0);

    // One delivery is moved an hour later in the store: not due soon, so
    // the feed leaves it out.
    let later = f.refs[0].clone();
    let (now, until) = lease(60_000);
    let held = f
        .app
        .store
        .dispatch()
        .claim_deliveries_by_ref("mover", std::slice::from_ref(&later), now, until)
        .await
        .unwrap();
    assert_eq!(held.len(), 1);
    let delivery_ref = held[0].delivery_ref.clone();
    f.app
        .store
        .dispatch()
        .release_delivery("mover", &delivery_ref, now.plus_seconds(3600), false)
        .await
        .unwrap();

    let pass = rs::feed_once(&f.app.store, &f.schedule, rs::FEED_HORIZON)
        .await
        .unwrap();
    assert_eq!(pass.scheduled, f.refs.len() - 1);
    assert_eq!(pass.reclaimed, 0);
    assert_eq!(f.schedule.due_len().await.unwrap(), f.refs.len() as u64 - 1);
    // Feeding again is idempotent.
    rs::feed_once(&f.app.store, &f.schedule, rs::FEED_HORIZON)
        .await
        .unwrap();
    assert_eq!(f.schedule.due_len().await.unwrap(), f.refs.len() as u64 - 1);

    let got = claim_all(&f, "w1", 7, 60_000).await;
    let expected: HashSet<String> = f.refs[1..].iter().cloned().collect();
    assert_eq!(set(&got), expected);
    assert_eq!(got.len(), expected.len());
    assert_eq!(f.schedule.leased_len().await.unwrap(), got.len() as u64);

    // Finishing drops the leases and counts an attempt per delivery with a
    // retry to come; a delivery that ended keeps no counter.
    let retry_at = now.plus_seconds(60).millis();
    f.schedule
        .finish(&got, &[(got[0].clone(), retry_at)])
        .await
        .unwrap();
    assert_eq!(f.schedule.leased_len().await.unwrap(), 0);
    assert_eq!(f.schedule.attempts(&got[0]).await.unwrap(), 1);
    assert_eq!(f.schedule.attempts(&got[1]).await.unwrap(), 0, "ended");
    assert_eq!(f.schedule.attempts(&later).await.unwrap(), 0);
    f.schedule.finish(&got[..1], &[]).await.unwrap();
    assert_eq!(f.schedule.attempts(&got[0]).await.unwrap(), 0, "ended");
    billing_tests::redis::delete_prefix(f.schedule.key_prefix()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_claimers_never_share_a_delivery() {
    let Some(f) = fixture(4, 50).await else {
        return;
    };
    assert_eq!(f.refs.len(), 200);
    rs::feed_once(&f.app.store, &f.schedule, rs::FEED_HORIZON)
        .await
        .unwrap();
    assert_eq!(f.schedule.due_len().await.unwrap(), 200);

    let f = Arc::new(f);
    let a = tokio::spawn({
        let f = f.clone();
        async move { claim_all(&f, "worker-a", 7, 60_000).await }
    });
    let b = tokio::spawn({
        let f = f.clone();
        async move { claim_all(&f, "worker-b", 7, 60_000).await }
    });
    let (a, b) = (a.await.unwrap(), b.await.unwrap());
    assert!(!a.is_empty() && !b.is_empty(), "both claimers got work");
    let (sa, sb) = (set(&a), set(&b));
    assert_eq!(sa.len(), a.len(), "no delivery twice to one claimer");
    assert_eq!(sb.len(), b.len(), "no delivery twice to one claimer");
    assert!(sa.is_disjoint(&sb), "no delivery to both claimers");
    assert_eq!(&sa | &sb, set(&f.refs), "every delivery claimed");
    assert_eq!(f.schedule.due_len().await.unwrap(), 0);
    assert_eq!(f.schedule.leased_len().await.unwrap(), 200);
    // The store agrees: everything is leased, nothing claimable.
    let (now, until) = lease(60_000);
    let again = f
        .app
        .store
        .dispatch()
        .claim_deliveries_by_ref("worker-c", &f.refs, now, until)
        .await
        .unwrap();
    assert!(again.is_empty());
    billing_tests::redis::delete_prefix(f.schedule.key_prefix()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_lease_returns_to_the_due_set() {
    let Some(f) = fixture(1, 5).await else { return };
    rs::feed_once(&f.app.store, &f.schedule, rs::FEED_HORIZON)
        .await
        .unwrap();
    // A worker takes everything, then dies before recording anything.
    let dead = claim_all(&f, "dead-worker", 100, 300).await;
    assert_eq!(set(&dead), set(&f.refs));
    assert_eq!(f.schedule.due_len().await.unwrap(), 0);
    assert_eq!(
        f.schedule
            .reclaim_expired(Timestamp::now().millis())
            .await
            .unwrap(),
        0,
        "a live lease stays"
    );
    // 400 ms on, past the 300 ms lease: reclaimed and claimed at that time.
    const LATER: i64 = 400;
    assert_eq!(
        f.schedule
            .reclaim_expired(Timestamp::now().millis() + LATER)
            .await
            .unwrap(),
        5
    );
    assert_eq!(f.schedule.due_len().await.unwrap(), 5);
    assert_eq!(f.schedule.leased_len().await.unwrap(), 0);
    // Another worker gets them: the store's lease expired too.
    let alive = claim_all_ahead(&f, "alive-worker", 100, 60_000, LATER).await;
    assert_eq!(set(&alive), set(&f.refs));
    billing_tests::redis::delete_prefix(f.schedule.key_prefix()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_all_redis_data_loses_no_delivery() {
    let Some(f) = fixture(3, 10).await else {
        return;
    };
    rs::feed_once(&f.app.store, &f.schedule, rs::FEED_HORIZON)
        .await
        .unwrap();
    // A worker holds ten deliveries (briefly) when Redis loses everything.
    let (now, until) = lease(800);
    let held = claim(&f.app.store, &f.schedule, "w1", (now, until), 10)
        .await
        .unwrap();
    assert_eq!(held.len(), 10);
    billing_tests::redis::delete_prefix(f.schedule.key_prefix()).await;
    assert_eq!(f.schedule.due_len().await.unwrap(), 0);
    assert_eq!(f.schedule.leased_len().await.unwrap(), 0);

    let stop = CancellationToken::new();
    let feeder = tokio::spawn(rs::feed(
        f.app.store.clone(),
        f.schedule.clone(),
        stop.clone(),
    ));
    // The feed rebuilds the due set from the store: the twenty unleased.
    f.app
        .eventually(10, || async {
            (f.schedule.due_len().await.unwrap() == 20).then_some(())
        })
        .await;
    let mut got = claim_all(&f, "w2", 8, 60_000).await;
    assert_eq!(got.len(), 20);
    // And once w1's store lease ends, its ten come back too, although
    // Redis forgot that lease.
    got.extend(
        f.app
            .eventually(10, || async {
                let c = claim_all(&f, "w2", 8, 60_000).await;
                (!c.is_empty()).then_some(c)
            })
            .await,
    );
    // The rest as the feeder (on the wall clock) brings them back.
    let poll = Poll::within(Duration::from_secs(5)).every(Duration::from_millis(60));
    while got.len() < f.refs.len() && poll.next().await {
        got.extend(claim_all(&f, "w2", 8, 60_000).await);
    }
    assert_eq!(got.len(), f.refs.len(), "each delivery claimed once");
    assert_eq!(
        set(&got),
        set(&f.refs),
        "every pending delivery is claimable again"
    );
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(5), feeder)
        .await
        .expect("the feed stops on shutdown")
        .unwrap();
    billing_tests::redis::delete_prefix(f.schedule.key_prefix()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_skips_what_the_store_leases_to_someone_else() {
    let Some(f) = fixture(1, 3).await else { return };
    rs::feed_once(&f.app.store, &f.schedule, rs::FEED_HORIZON)
        .await
        .unwrap();
    // Another worker holds the first delivery in the store (Redis never
    // heard of that lease), and Redis holds a member the store never had.
    let (now, until) = lease(60_000);
    let other = f
        .app
        .store
        .dispatch()
        .claim_deliveries_by_ref("other", &f.refs[..1], now, until)
        .await
        .unwrap();
    assert_eq!(other.len(), 1);
    f.schedule
        .schedule(&[("whd_does_not_exist".to_owned(), now.millis())])
        .await
        .unwrap();

    let (now, until) = lease(60_000);
    let mine = claim(&f.app.store, &f.schedule, "me", (now, until), 100)
        .await
        .unwrap();
    let mine: Vec<String> = mine
        .into_iter()
        .map(|d| {
            assert_eq!(d.status, domain::webhook::DeliveryStatus::Pending);
            d.delivery_ref.into_string()
        })
        .collect();
    assert_eq!(set(&mine), set(&f.refs[1..]));
    // The refused members are gone from Redis; only real leases remain.
    assert_eq!(f.schedule.due_len().await.unwrap(), 0);
    assert_eq!(f.schedule.leased_len().await.unwrap(), 2);
    // Everything is leased in the store, so the feed schedules nothing.
    let pass = rs::feed_once(&f.app.store, &f.schedule, rs::FEED_HORIZON)
        .await
        .unwrap();
    assert_eq!(pass.scheduled, 0);
    billing_tests::redis::delete_prefix(f.schedule.key_prefix()).await;
}

/// The score of `member` in the due set under `prefix`, if it is there.
async fn due_score(prefix: &str, member: &str) -> Option<i64> {
    let client = rs::redis::Client::open(billing_tests::redis::url()).expect("redis url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("redis reachable");
    let score: Option<f64> = rs::redis::cmd("ZSCORE")
        .arg(format!("{prefix}:due"))
        .arg(member)
        .query_async(&mut conn)
        .await
        .expect("ZSCORE");
    score.map(|s| s as i64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_prefix_shared_by_two_stores_loses_neither_ones_members() {
    // Store A with 3 due deliveries, store B with 2, both under one prefix
    // an operator named for each (a mistake the schedule must survive).
    let Some(a) = fixture(1, 3).await else { return };
    let Some(b) = fixture(1, 2).await else { return };
    let prefix = format!("billing-test-shared:{}", billing_tests::unique_key());
    let connect = |owner: domain::StoreId| {
        let prefix = prefix.clone();
        async move {
            Arc::new(
                RedisSchedule::connect(
                    &billing_tests::redis::url(),
                    rs::Keys::named(prefix, owner),
                )
                .await
                .expect("redis reachable"),
            )
        }
    };
    // Test stores are cloned from one template and share its identity; the
    // marker tells owners apart by the identity their schedules are given.
    let (id_a, id_b) = (domain::StoreId::generate(), domain::StoreId::generate());
    let (sa, sb) = (connect(id_a.clone()).await, connect(id_b.clone()).await);

    rs::feed_once(&a.app.store, &sa, rs::FEED_HORIZON)
        .await
        .unwrap();
    assert_eq!(sa.marker().await.unwrap(), rs::Marker::Ours);
    rs::feed_once(&b.app.store, &sb, rs::FEED_HORIZON)
        .await
        .unwrap();
    assert_eq!(
        sa.marker().await.unwrap(),
        rs::Marker::Foreign(id_b.to_string()),
        "B's pass marked the shared keys as B's: A's feed makes full passes"
    );
    assert_eq!(sa.due_len().await.unwrap(), 5);
    let planned: Vec<Option<i64>> = due_scores(&prefix, &b.refs).await;

    // A claims everything due: it leases its own three, and puts B's two
    // back where they were instead of deleting them.
    let (now, until) = lease(60_000);
    let mine = claim(&a.app.store, &sa, "a", (now, until), 100)
        .await
        .unwrap();
    let mine: Vec<String> = mine
        .into_iter()
        .map(|d| d.delivery_ref.into_string())
        .collect();
    assert_eq!(set(&mine), set(&a.refs));
    assert_eq!(due_scores(&prefix, &b.refs).await, planned);
    // Its next claims pass over them rather than take them again.
    let (now, until) = lease(60_000);
    assert!(claim(&a.app.store, &sa, "a", (now, until), 100)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(sa.due_len().await.unwrap(), 2);

    // B finds its own, due when they were.
    let (now, until) = lease(60_000);
    let theirs = claim(&b.app.store, &sb, "b", (now, until), 100)
        .await
        .unwrap();
    let theirs: Vec<String> = theirs
        .into_iter()
        .map(|d| d.delivery_ref.into_string())
        .collect();
    assert_eq!(set(&theirs), set(&b.refs));
    assert_eq!(sa.due_len().await.unwrap(), 0);
    billing_tests::redis::delete_prefix(&prefix).await;
    billing_tests::redis::delete_prefix(a.schedule.key_prefix()).await;
    billing_tests::redis::delete_prefix(b.schedule.key_prefix()).await;
}

/// The due scores of `refs` under `prefix`, in order.
async fn due_scores(prefix: &str, refs: &[String]) -> Vec<Option<i64>> {
    let mut out = Vec::new();
    for r in refs {
        out.push(due_score(prefix, r).await);
    }
    assert!(
        out.iter().all(Option::is_some),
        "every member is due: {out:?}"
    );
    out
}

/// A worker with room for two more deliveries of one endpoint takes two of
/// its five and every one of the other endpoint's: the other three stay
/// unleased and unwritten in the store, due again in Redis after the
/// wait it names, and are taken then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_passes_over_what_an_endpoint_has_no_room_for() {
    let Some(f) = fixture(2, 5).await else { return };
    rs::feed_once(&f.app.store, &f.schedule, rs::FEED_HORIZON)
        .await
        .unwrap();
    let endpoints = f
        .app
        .store
        .dispatch()
        .endpoints_of_deliveries(&f.refs)
        .await
        .unwrap();
    assert_eq!(endpoints.len(), 10);
    let full = endpoints[&f.refs[0]].clone();
    let of_full: HashSet<String> = f
        .refs
        .iter()
        .filter(|r| endpoints[*r] == full)
        .cloned()
        .collect();
    assert_eq!(of_full.len(), 5);
    let no_room = rs::NoRoom {
        room: [(full.clone(), 2)].into(),
        retry_after: Duration::from_secs(30),
    };

    let (now, until) = lease(60_000);
    let (claimed, passed) = rs::claim(&f.app.store, &f.schedule, ("w", now, until), 100, &no_room)
        .await
        .unwrap();
    assert_eq!((claimed.len(), passed), (7, 3));
    let taken: Vec<&str> = claimed
        .iter()
        .filter(|d| d.endpoint_ref.as_str() == full)
        .map(|d| d.delivery_ref.as_str())
        .collect();
    assert_eq!(taken.len(), 2, "as much as its room");
    let left: Vec<String> = of_full
        .iter()
        .filter(|r| !taken.contains(&r.as_str()))
        .cloned()
        .collect();
    // Passed over: due again in Redis after the wait, unleased in the store.
    for (r, score) in left
        .iter()
        .zip(due_scores(f.schedule.key_prefix(), &left).await)
    {
        let score = score.unwrap_or_else(|| panic!("{r} is back in the due set"));
        assert!(score >= now.millis() + 30_000, "{r} waits its turn");
    }
    assert_eq!(f.schedule.due_len().await.unwrap(), 3);
    let unleased = f
        .app
        .store
        .dispatch()
        .claim_deliveries_by_ref("someone else", &left, now, until)
        .await
        .unwrap();
    assert_eq!(unleased.len(), 3, "never leased, so free to lease");
    billing_tests::redis::delete_prefix(f.schedule.key_prefix()).await;
}
