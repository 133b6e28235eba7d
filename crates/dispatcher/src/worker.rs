//! The dispatch loop: leases due deliveries from the store, keeps the
//! per-endpoint concurrency limits and circuit breakers, runs attempts
//! concurrently, and hands results to the recorder. Deliveries the intake
//! hands over start on a loop of their own beside it (`handed_loop`).
//!
//! Fairness: a delivery whose endpoint is behind an open circuit is given
//! back at once (due a little later); one whose endpoint is at its limit
//! waits here for that endpoint's next slot, for at most a second, at most
//! half a claim batch per endpoint and a claim batch in all (`Carried`),
//! then goes back. A slow or failing endpoint holds at most its own slots
//! and never delays healthy ones; a claim shrinks while most of what it
//! takes cannot start (`ClaimSize`).
//!
//! Shutdown: stop leasing, let in-flight attempts finish (their leases
//! expire if the process is killed first), flush the recorder.
//!
//! Here: the claim and hand-over loops. `carry` holds the claim loop's
//! state (`Carried`, `ClaimSize`), `upkeep` the gauges and the drain of
//! events an older version left pending.

use crate::breaker::{Gate, Outcome};
use crate::endpoints::EndpointCache;
use crate::governor::{Governor, Terms};
use crate::handoff::{self, HandedOver, Slots, Ticket};
use crate::metrics as m;
use crate::queue::EventQueue;
use crate::redis_schedule::{self, NoRoom, RedisSchedule};
use crate::sending::Sender;
use crate::settings::DispatchSettings;
use crate::{attempt, recorder, DispatchError};
use domain::webhook::EndpointStatus;
use domain::Timestamp;
use std::sync::Arc;
use std::time::Duration;
use store::{DeliveryRecord, Store};
use tokio::sync::{mpsc, Notify};
// The loop's windows are measured on tokio's clock, which a test can pause
// and advance; the breakers take its readings as `std` instants.
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

mod carry;
mod upkeep;

use carry::{Carried, ClaimSize, CARRY_FOR};
use upkeep::{drain_pending, gauge_loop};

/// How long the claim loop gathers new due work after it took all there was.
const CLAIM_WINDOW: Duration = Duration::from_millis(3);

/// How long a delivery waits when its endpoint is at its limit.
const BUSY_RETRY: Duration = Duration::from_millis(100);

/// While slow endpoints hold all the slots they share (`Slots::room`),
/// those slots free one by one as their attempts end: the claim loop
/// gathers them this long into one claim rather than claim (a write) for
/// each.
const GATHER_SHARED: Duration = Duration::from_millis(50);

pub struct Dispatcher {
    store: Store,
    /// The event queue this dispatcher takes fresh deliveries from.
    queue: EventQueue,
    settings: Arc<DispatchSettings>,
    sender: Sender,
    wake: Arc<Notify>,
    /// The fleet's shared schedule; `None` leases straight from the store.
    redis: Option<Arc<RedisSchedule>>,
    /// Admits attempts to endpoints with limits or back-pressure.
    governor: Arc<Governor>,
}

impl Dispatcher {
    /// A dispatcher over `queue`'s store; while it runs, `queue` hands it
    /// the fresh deliveries it has room for.
    pub fn new(queue: EventQueue, settings: DispatchSettings) -> Dispatcher {
        let sender = Sender::new(&settings);
        Dispatcher {
            store: queue.store().clone(),
            queue,
            settings: Arc::new(settings),
            sender,
            wake: Arc::new(Notify::new()),
            redis: None,
            governor: Arc::new(Governor::local()),
        }
    }

    /// Takes due work from the Redis schedule (fleet mode) instead of
    /// scanning the store; the store's lease still fences every claim.
    pub fn with_redis(mut self, schedule: Arc<RedisSchedule>) -> Dispatcher {
        self.governor = Arc::new(Governor::redis(schedule.clone()));
        self.redis = Some(schedule);
        self
    }

    /// Notifying it makes an idle dispatcher look for work at once (the
    /// embedded API pokes it after writes that create due deliveries).
    pub fn waker(&self) -> Arc<Notify> {
        self.wake.clone()
    }

    pub async fn run(self, shutdown: CancellationToken) {
        Arc::new(self).run_shared(shutdown).await
    }

    async fn run_shared(self: Arc<Self>, shutdown: CancellationToken) {
        let (results_tx, results_rx) = mpsc::channel(recorder::MAX_BATCH * 4);
        let recorder = tokio::spawn(recorder::run(
            self.store.clone(),
            self.settings.worker_id.clone(),
            results_rx,
            self.wake.clone(),
            self.redis.clone(),
            self.settings.announce.clone(),
        ));
        let feed = self.redis.clone().map(|r| {
            tokio::spawn(redis_schedule::feed(
                self.store.clone(),
                r,
                shutdown.clone(),
            ))
        });
        let gauges = tokio::spawn(gauge_loop(self.store.clone(), shutdown.clone()));
        let fanout = tokio::spawn(drain_pending(
            self.store.clone(),
            self.wake.clone(),
            shutdown.clone(),
        ));
        let slots = Arc::new(Slots::new(&self.settings));
        let (mut intake, mut handed) =
            handoff::Intake::new(&self.settings, slots.clone(), self.wake.clone());
        let mut indexer = None;
        if let Some(r) = &self.redis {
            let (left_tx, left_rx) = mpsc::unbounded_channel();
            intake = intake.forwarding_left_due(left_tx);
            indexer = Some(tokio::spawn(redis_schedule::index_left_due(
                self.store.clone(),
                r.clone(),
                left_rx,
                self.wake.clone(),
            )));
        }
        let intake = Arc::new(intake);
        self.queue.register(intake.clone());
        // Handed-over deliveries start on a task of their own, beside the
        // claim loop rather than inside it (`handed_loop`).
        let handed_task = {
            let (this, slots) = (self.clone(), slots.clone());
            let (results, shutdown) = (results_tx.clone(), shutdown.clone());
            tokio::spawn(async move {
                let left = this
                    .handed_loop(&mut handed, &slots, results, &shutdown)
                    .await;
                (handed, left)
            })
        };
        self.claim_loop(&slots, results_tx, &shutdown).await;
        // No more hand-overs; those not started go back to the store.
        self.queue.unregister(&intake);
        drop(intake);
        match handed_task.await {
            Ok((mut handed, left)) => {
                handed.close();
                let mut back = Vec::new();
                let mut left = left;
                while let Some(h) = handed.recv().await {
                    left.push(h);
                }
                for mut h in left {
                    // One attempted before its write waits for the write.
                    if h.room.written_leased(None).await {
                        back.push((h.delivery.delivery_ref, Some(Duration::ZERO)));
                    }
                }
                self.give_back_many(&self.settings.worker_id, &back).await;
            }
            // Those it held keep their leases until they expire.
            Err(e) => tracing::error!(error = %e, "the hand-over task failed"),
        }
        // Wait for in-flight attempts (each holds a global permit), then
        // for the results of those made before their write.
        let all = self.settings.max_in_flight as u32;
        let drained = tokio::time::Instant::now() + self.settings.timeout + Duration::from_secs(2);
        let _ = tokio::time::timeout_at(drained, slots.global.acquire_many(all)).await;
        slots.awaiting_write.close();
        let _ = tokio::time::timeout_at(drained, slots.awaiting_write.wait()).await;
        let _ = fanout.await;
        let _ = gauges.await;
        if let Some(mut indexer) = indexer {
            // Its sender went with the hand-off (cleared above); what it
            // could not index in time, the next feed pass finds.
            if tokio::time::timeout(Duration::from_secs(2), &mut indexer)
                .await
                .is_err()
            {
                indexer.abort();
            }
        }
        if let Some(feed) = feed {
            let _ = feed.await;
        }
        let _ = recorder.await;
    }

    async fn claim_loop(
        &self,
        slots: &Arc<Slots>,
        results: mpsc::Sender<store::AttemptResult>,
        shutdown: &CancellationToken,
    ) {
        let mut cache = EndpointCache::default();
        let owner = self.settings.worker_id.clone();
        let mut carried = Carried::default();
        let batch = self.settings.claim_batch as usize;
        let carry_limits = (
            (batch / 2).max(self.settings.max_in_flight_per_endpoint),
            batch,
        );
        let mut claim_size = ClaimSize::new(batch);
        let mut last_claim = Instant::now();
        loop {
            if shutdown.is_cancelled() {
                let back: Vec<_> = carried
                    .take_all()
                    .into_iter()
                    .map(|(d, _, _)| (d.delivery_ref, Some(Duration::ZERO)))
                    .collect();
                self.give_back_many(&owner, &back).await;
                return;
            }
            let mut back: Vec<_> = carried
                .refresh(&self.store)
                .await
                .into_iter()
                .map(|d| (d, None))
                .collect();
            for (delivery, version, since) in carried.take_all() {
                if since.elapsed() > CARRY_FOR {
                    back.push((delivery.delivery_ref, Some(Duration::ZERO)));
                } else if let Some(ticket) = slots.try_reserve(&delivery.endpoint_ref) {
                    self.start(delivery, version, ticket, &mut cache, slots, &results)
                        .await;
                } else if let Err(d) = carried.keep(delivery, version, carry_limits) {
                    back.push((d, Some(BUSY_RETRY)));
                }
            }
            self.give_back_many(&owner, &back).await;
            let free = slots
                .room()
                .min(batch)
                .saturating_sub(carried.len())
                .min(claim_size.get()) as u32;
            let gathering = slots.shared_full() && last_claim.elapsed() < GATHER_SHARED;
            if free == 0 || gathering {
                // On shutdown the loop's top gives the carried ones back.
                tokio::select! {
                    _ = shutdown.cancelled() => continue,
                    _ = tokio::time::sleep(Duration::from_millis(2)) => continue,
                }
            }
            let now = Timestamp::now();
            let lease_until = now.plus_millis(self.settings.lease().as_millis() as i64);
            last_claim = Instant::now();
            let no_room = NoRoom {
                room: carried.room(carry_limits.0),
                retry_after: BUSY_RETRY,
            };
            let lease = (owner.as_str(), now, lease_until);
            let (claimed, passed) = match self.claim(lease, free, &no_room).await {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "claiming due deliveries failed");
                    let wait = Duration::from_millis(500);
                    self.idle(shutdown, wait).await;
                    continue;
                }
            };
            if claimed.is_empty() {
                if passed > 0 {
                    claim_size.after(passed, passed);
                }
                // Carried deliveries start as soon as their endpoint has room.
                let wait = match carried.len() {
                    0 => self.settings.poll_interval,
                    _ => Duration::from_millis(2).min(self.settings.poll_interval),
                };
                self.idle(shutdown, wait).await;
                continue;
            }
            let drained = claimed.len() < free as usize;
            let refs: Vec<&domain::Ref> = claimed.iter().map(|d| &d.endpoint_ref).collect();
            let gates = match self.store.webhooks().endpoint_gates(&refs).await {
                Ok(v) => v,
                Err(e) => {
                    tracing::warn!(error = %e, "reading endpoint versions failed");
                    let back: Vec<_> = claimed
                        .into_iter()
                        .map(|d| (d.delivery_ref, Some(Duration::from_secs(1))))
                        .collect();
                    self.give_back_many(&owner, &back).await;
                    continue;
                }
            };
            let mut back = Vec::new();
            let (taken, mut busy) = (claimed.len(), 0);
            let at = Timestamp::now();
            for delivery in claimed {
                let Some(gate) = gates.get(delivery.endpoint_ref.as_str()) else {
                    continue;
                };
                let (version, status) = (gate.version, gate.status);
                if status != EndpointStatus::Active {
                    back.push((delivery.delivery_ref, None));
                    continue;
                }
                // Turned away by an open circuit: parked (`Breakers::park_for`).
                let now = Instant::now().into_std();
                let parked = match slots.breakers.lock() {
                    Ok(mut b) => match b.gate(delivery.endpoint_ref.as_str(), now) {
                        Gate::Closed => None,
                        Gate::Open(until) => {
                            let spread = 1.0 + rand::random::<f64>();
                            Some(b.park_for(delivery.endpoint_ref.as_str(), until, now, spread))
                        }
                    },
                    Err(_) => None,
                };
                if let Some(wait) = parked {
                    back.push((delivery.delivery_ref, Some(wait)));
                    continue;
                }
                if gate.protection.governs(at) {
                    let terms =
                        Terms::of(&gate.protection, self.settings.endpoint_max_in_flight, at);
                    // Admitted at the moment it starts, not the claim's.
                    let now = Timestamp::now();
                    match self.admit(&delivery, &terms, slots, now).await {
                        Ok(ticket) => {
                            self.start(delivery, version, ticket, &mut cache, slots, &results)
                                .await;
                        }
                        Err(wait) => back.push((delivery.delivery_ref, Some(wait))),
                    }
                    continue;
                }
                let Some(ticket) = slots.try_reserve(&delivery.endpoint_ref) else {
                    if let Err(d) = carried.keep(delivery, version, carry_limits) {
                        busy += 1;
                        back.push((d, Some(BUSY_RETRY)));
                    }
                    continue;
                };
                self.start(delivery, version, ticket, &mut cache, slots, &results)
                    .await;
            }
            claim_size.after(taken + passed, busy + passed);
            self.give_back_many(&owner, &back).await;
            if drained {
                // Everything due was taken: let new work gather for a moment
                // rather than claim it a few deliveries per transaction.
                tokio::select! {
                    _ = shutdown.cancelled() => continue,
                    _ = tokio::time::sleep(CLAIM_WINDOW) => {}
                }
            }
        }
    }

    /// Room for an attempt of `delivery`, whose endpoint its limits or its
    /// back-pressure govern: this process's slots, then the governor's
    /// admission (fleet wide). Without room, how long until the delivery
    /// comes back: it waits in the store (or Redis), never here, and the
    /// wait is not an attempt.
    async fn admit(
        &self,
        delivery: &DeliveryRecord,
        terms: &Terms,
        slots: &Slots,
        now: Timestamp,
    ) -> Result<Ticket, Duration> {
        let endpoint = delivery.endpoint_ref.as_str();
        // Due since it was written (a give-back or a retry leaves its row's
        // `updated_at` behind its due time).
        let fresh = delivery
            .next_attempt_at
            .is_none_or(|due| due <= delivery.updated_at);
        let back = |wait| {
            self.governor
                .come_back_in(endpoint, terms, wait, now, fresh)
        };
        let Some(mut ticket) = slots.try_reserve(&delivery.endpoint_ref) else {
            return Err(back(BUSY_RETRY));
        };
        let lease = self.settings.lease();
        let admitted = self
            .governor
            .admit_held(endpoint, delivery.delivery_ref.as_str(), terms, now, lease)
            .await;
        match admitted {
            Ok(Ok(room)) => {
                ticket.governed = Some(room);
                Ok(ticket)
            }
            Ok(Err(wait)) => Err(back(wait)),
            Err(e) => {
                tracing::warn!(error = %e, "admitting an attempt to a limited endpoint failed");
                Err(back(Duration::from_secs(1)))
            }
        }
    }

    /// Starts the deliveries the intake hands over (leased to us, with
    /// their slots), as they come, until shutdown or until the queue drops
    /// the hand-off; returns those it had not started yet at shutdown.
    ///
    /// A task of its own, with its own endpoint views: a handed-over
    /// delivery holds its slots and must start at once, never after the
    /// claim loop's work, which grows with the number of slow endpoints
    /// (claims, give-backs, endpoint views to read). Deliveries to quick
    /// endpoints start as soon as they arrive; the others (a fan-out to
    /// hundreds of new endpoints, each view to read) start one at a time
    /// in between, so a burst of them never holds up a quick one.
    async fn handed_loop(
        &self,
        handed: &mut mpsc::UnboundedReceiver<HandedOver>,
        slots: &Arc<Slots>,
        results: mpsc::Sender<store::AttemptResult>,
        shutdown: &CancellationToken,
    ) -> Vec<HandedOver> {
        let mut cache = EndpointCache::default();
        let mut others = std::collections::VecDeque::new();
        loop {
            // Everything handed over so far: quick endpoints' at once.
            loop {
                let h = if others.is_empty() {
                    tokio::select! {
                        _ = shutdown.cancelled() => return Vec::new(),
                        h = handed.recv() => match h {
                            Some(h) => h,
                            // The queue dropped the hand-off: the claim
                            // loop finds everything.
                            None => return Vec::new(),
                        },
                    }
                } else {
                    match handed.try_recv() {
                        Ok(h) => h,
                        Err(_) => break,
                    }
                };
                if slots.is_quick(&h.delivery.endpoint_ref) {
                    self.start_handed(h, &mut cache, slots, &results).await;
                } else {
                    others.push_back(h);
                }
            }
            if shutdown.is_cancelled() {
                return others.into();
            }
            if let Some(h) = others.pop_front() {
                self.start_handed(h, &mut cache, slots, &results).await;
            }
        }
    }

    /// Starts a delivery the intake handed over, unless its endpoint
    /// stopped being active since it was planned.
    async fn start_handed(
        &self,
        h: HandedOver,
        cache: &mut EndpointCache,
        slots: &Arc<Slots>,
        results: &mpsc::Sender<store::AttemptResult>,
    ) {
        self.start(
            h.delivery,
            h.endpoint_version,
            h.room,
            cache,
            slots,
            results,
        )
        .await;
    }

    /// Loads the endpoint's view for `version` and spawns the attempt; gives
    /// the delivery back when the view cannot be loaded or the endpoint is
    /// not active in it.
    async fn start(
        &self,
        delivery: DeliveryRecord,
        version: i64,
        mut ticket: Ticket,
        cache: &mut EndpointCache,
        slots: &Arc<Slots>,
        results: &mpsc::Sender<store::AttemptResult>,
    ) {
        let owner = &self.settings.worker_id;
        let view = match cache
            .get(
                &self.store,
                (&self.settings.cipher, &self.sender, &self.settings.clock),
                &delivery.environment_ref,
                &delivery.endpoint_ref,
                version,
            )
            .await
        {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(error = %e, "loading endpoint failed");
                if ticket.written_leased(None).await {
                    self.give_back(owner, &delivery, Some(Duration::from_secs(1)))
                        .await;
                }
                return;
            }
        };
        if view.status != EndpointStatus::Active {
            if ticket.written_leased(None).await {
                self.give_back(owner, &delivery, None).await;
            }
            return;
        }
        self.spawn_attempt(delivery, view, ticket, slots.clone(), results.clone());
    }

    fn spawn_attempt(
        &self,
        delivery: DeliveryRecord,
        view: Arc<crate::endpoints::EndpointView>,
        mut ticket: Ticket,
        slots: Arc<Slots>,
        results: mpsc::Sender<store::AttemptResult>,
    ) {
        let store = self.store.clone();
        let settings = self.settings.clone();
        let sender = self.sender.clone();
        tokio::spawn(async move {
            metrics::gauge!(m::IN_FLIGHT).increment(1.0);
            let endpoint = delivery.endpoint_ref.as_str();
            slots.recent.started(endpoint, Timestamp::now());
            let mut result =
                attempt::run(&store, &settings, &sender, &delivery, &view, &slots.failing).await;
            metrics::gauge!(m::IN_FLIGHT).decrement(1.0);
            if let Some(pushback) = result.pushback.as_mut().filter(|p| p.base_milli == 0) {
                pushback.base_milli = slots.recent.rate_milli(endpoint, Timestamp::now());
            }
            let took = Duration::from_millis(result.duration_ms.max(0) as u64);
            slots.paced(&delivery.endpoint_ref, took);
            if let Ok(mut b) = slots.breakers.lock() {
                b.record(
                    delivery.endpoint_ref.as_str(),
                    Outcome::of(result.response_status),
                    Instant::now().into_std(),
                );
            }
            // An attempt made before its delivery was written reports to
            // the write, and is recorded only if the write left its
            // delivery leased here (born settled, it is recorded already).
            // It leaves its slots now, not after the write; shutdown waits
            // for its result through `awaiting_write` instead (the token
            // is taken before the slots go, so no moment is uncovered).
            let _awaiting = ticket.before_write.is_some().then(|| {
                let token = slots.awaiting_write.token();
                ticket.free_slots();
                token
            });
            if ticket.written_leased(Some(&result)).await {
                let _ = results.send(result).await;
            }
            drop(ticket);
        });
    }

    /// Leases up to `limit` due deliveries; with them, how many were passed
    /// over because their endpoint has no more room here (`no_room`). Only the
    /// fleet's claim passes them over: it takes members from Redis and
    /// can put them back there without a write. The store's own claim
    /// leases them, and the claim loop gives them back.
    async fn claim(
        &self,
        (owner, now, lease_until): (&str, Timestamp, Timestamp),
        limit: u32,
        no_room: &NoRoom,
    ) -> Result<(Vec<DeliveryRecord>, usize), DispatchError> {
        match &self.redis {
            Some(r) => {
                let lease = (owner, now, lease_until);
                redis_schedule::claim(&self.store, r, lease, limit, no_room).await
            }
            None => Ok((
                self.store
                    .dispatch()
                    .claim_due_deliveries(owner, now, lease_until, limit)
                    .await?,
                0,
            )),
        }
    }

    /// Gives one leased delivery back (see `give_back_many`).
    async fn give_back(&self, owner: &str, d: &DeliveryRecord, after: Option<Duration>) {
        self.give_back_many(owner, &[(d.delivery_ref.clone(), after)])
            .await;
    }

    /// Gives leased deliveries back without an attempt, in one write: each
    /// due again after its delay, or held (`None`: its endpoint is not
    /// active). One write for all of them, never one per delivery: a claim
    /// that finds many endpoints at their limit gives back up to a whole
    /// batch.
    async fn give_back_many(&self, owner: &str, items: &[(domain::Ref, Option<Duration>)]) {
        if items.is_empty() {
            return;
        }
        let now = Timestamp::now();
        let releases: Vec<(domain::Ref, Option<Timestamp>)> = items
            .iter()
            .map(|(r, after)| {
                (
                    r.clone(),
                    after.map(|a| now.plus_millis(a.as_millis() as i64)),
                )
            })
            .collect();
        if let Err(e) = self
            .store
            .dispatch()
            .release_deliveries(owner, &releases)
            .await
        {
            tracing::warn!(error = %e, "giving deliveries back failed; their leases will expire");
        }
        if let Some(r) = &self.redis {
            let due: Vec<(String, i64)> = releases
                .iter()
                .filter_map(|(d, due)| due.map(|t| (d.to_string(), t.millis())))
                .collect();
            let held: Vec<String> = releases
                .iter()
                .filter(|(_, due)| due.is_none())
                .map(|(d, _)| d.to_string())
                .collect();
            let mut outcome = Ok(());
            if !due.is_empty() {
                outcome = outcome.and(r.give_back(&due).await);
            }
            if !held.is_empty() {
                outcome = outcome.and(r.release(&held).await);
            }
            if let Err(e) = outcome {
                tracing::warn!(error = %e, "returning deliveries to the Redis schedule failed; the feed will");
            }
        }
    }

    /// Waits for `wait`, a wake-up (work was left in the store) or
    /// shutdown. Hand-overs do not end it: they need no claim, and start on
    /// their own loop (`handed_loop`).
    async fn idle(&self, shutdown: &CancellationToken, wait: Duration) {
        tokio::select! {
            _ = shutdown.cancelled() => {}
            _ = self.wake.notified() => {}
            _ = tokio::time::sleep(wait) => {}
        }
    }
}
