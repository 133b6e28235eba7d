//! The claim loop's state: deliveries kept for their endpoint's next free
//! slot (`Carried`) and the size of the next claim (`ClaimSize`).
//!
//! Its windows are measured on tokio's clock (`tokio::time::Instant`), as
//! are the claim loop's, so a test that pauses or advances that clock
//! moves them.

use domain::webhook::EndpointStatus;
use std::time::Duration;
use store::{DeliveryRecord, Store};
use tokio::time::Instant;

/// Longest a claimed delivery waits here for its endpoint's next free slot
/// (`Carried`) before it is given back: far inside its lease.
pub(super) const CARRY_FOR: Duration = Duration::from_secs(1);

/// Oldest the endpoint versions a carried delivery starts with may be: a
/// pause, a revoked grant or a rotated secret seen by a write this long ago
/// applies to it (`Carried::refresh`), as it does to a claimed one.
pub(super) const CARRIED_FRESH: Duration = Duration::from_millis(50);

/// Claimed deliveries whose endpoint was at its limit, kept (leased) for
/// its next free slot instead of being given back: under load a claim of a
/// whole batch finds most endpoints busy, and each delivery given back
/// costs a write, a delay and another claim. At most half a claim batch
/// per endpoint (at least its limit), and at most a claim batch in all, so
/// a slow endpoint holds back at most half of each claim for the others,
/// and for at most `CARRY_FOR`.
#[derive(Default)]
pub(super) struct Carried {
    waiting: std::collections::VecDeque<(DeliveryRecord, i64, Instant)>,
    per_endpoint: std::collections::HashMap<String, usize>,
    /// When the carried deliveries' endpoint versions were last read.
    read_at: Option<Instant>,
}

impl Carried {
    pub(super) fn len(&self) -> usize {
        self.waiting.len()
    }

    /// Brings the carried deliveries' endpoint versions up to date if they
    /// were read more than `CARRIED_FRESH` ago: the deliveries carried for
    /// an endpoint that is no longer active are taken out and returned (to
    /// be given back held), and the others take the newest version. A failed read leaves them
    /// as they are; the next round tries again.
    pub(super) async fn refresh(&mut self, store: &Store) -> Vec<domain::Ref> {
        if self.waiting.is_empty() || self.read_at.is_some_and(|t| t.elapsed() < CARRIED_FRESH) {
            return Vec::new();
        }
        let refs: Vec<&domain::Ref> = self
            .waiting
            .iter()
            .map(|(d, _, _)| &d.endpoint_ref)
            .collect();
        let versions = match store.webhooks().endpoint_versions(&refs).await {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(error = %e, "reading carried deliveries' endpoint versions failed");
                return Vec::new();
            }
        };
        self.read_at = Some(Instant::now());
        let mut inactive = Vec::new();
        let mut kept = std::collections::VecDeque::with_capacity(self.waiting.len());
        for (delivery, version, since) in self.waiting.drain(..) {
            match versions.get(delivery.endpoint_ref.as_str()) {
                Some(&(current, EndpointStatus::Active)) => {
                    kept.push_back((delivery, version.max(current), since));
                }
                _ => {
                    if let Some(n) = self.per_endpoint.get_mut(delivery.endpoint_ref.as_str()) {
                        *n = n.saturating_sub(1);
                    }
                    inactive.push(delivery.delivery_ref);
                }
            }
        }
        self.waiting = kept;
        inactive
    }

    /// Keeps `delivery` if there is room for it; otherwise returns its
    /// reference, to be given back.
    pub(super) fn keep(
        &mut self,
        delivery: DeliveryRecord,
        version: i64,
        limits: (usize, usize),
    ) -> Result<(), domain::Ref> {
        let (per_endpoint, total) = limits;
        let count = self
            .per_endpoint
            .entry(delivery.endpoint_ref.to_string())
            .or_default();
        if *count >= per_endpoint || self.waiting.len() >= total {
            return Err(delivery.delivery_ref);
        }
        *count += 1;
        self.waiting.push_back((delivery, version, Instant::now()));
        // A delivery kept here was just claimed with its endpoint's version
        // read, or was refreshed within `CARRIED_FRESH`.
        self.read_at.get_or_insert_with(Instant::now);
        Ok(())
    }

    /// How many more deliveries each endpoint with deliveries kept here
    /// has room for, up to `per_endpoint` kept: an endpoint has some kept
    /// only while its slots are full, so a claim may take no more of its
    /// deliveries than that. Endpoints with none kept are not named.
    pub(super) fn room(&self, per_endpoint: usize) -> std::collections::HashMap<String, usize> {
        self.per_endpoint
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(e, n)| (e.clone(), per_endpoint.saturating_sub(*n)))
            .collect()
    }

    pub(super) fn take_all(&mut self) -> Vec<(DeliveryRecord, i64, Instant)> {
        self.per_endpoint.clear();
        if self.waiting.is_empty() {
            // The next carried ones were read with their claim.
            self.read_at = None;
        }
        self.waiting.drain(..).collect()
    }
}

/// How many deliveries the next claim takes: a whole batch while claims
/// find room for what they take, half as many after a claim that had to
/// give most of its deliveries back because their endpoints were busy and
/// their carry was full, growing back as soon as a claim gives none back.
/// So one saturated endpoint does not have most of every claim written
/// back and claimed again.
pub(super) struct ClaimSize {
    current: usize,
    batch: usize,
}

impl ClaimSize {
    /// The smallest claim: below it a claim costs more than it carries.
    pub(super) const MIN: usize = 16;

    pub(super) fn new(batch: usize) -> ClaimSize {
        ClaimSize {
            current: batch,
            batch,
        }
    }

    pub(super) fn get(&self) -> usize {
        self.current
    }

    /// After a claim of `taken` deliveries of which `busy` went back.
    pub(super) fn after(&mut self, taken: usize, busy: usize) {
        if busy * 2 > taken {
            self.current = (self.current / 2).max(Self::MIN.min(self.batch));
        } else if busy == 0 {
            self.current = (self.current * 2).min(self.batch);
        }
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn claims_shrink_while_most_go_back_and_grow_back() {
        let mut size = ClaimSize::new(256);
        size.after(256, 200);
        assert_eq!(size.get(), 128);
        for _ in 0..10 {
            size.after(size.get(), size.get());
        }
        assert_eq!(size.get(), ClaimSize::MIN);
        size.after(16, 3);
        assert_eq!(size.get(), 16, "some went back: hold");
        size.after(16, 0);
        assert_eq!(size.get(), 32);
        for _ in 0..10 {
            size.after(size.get(), 0);
        }
        assert_eq!(size.get(), 256);
    }

    use super::*;
    use domain::webhook::{BodyStatus, DeliveryStatus};
    use domain::{Prefix, Ref, Timestamp};

    fn delivery(endpoint_ref: &Ref) -> DeliveryRecord {
        let now = Timestamp::now();
        DeliveryRecord {
            delivery_ref: Ref::generate(Prefix::WebhookDelivery),
            environment_ref: Ref::generate(Prefix::Environment),
            endpoint_ref: endpoint_ref.clone(),
            event_ref: Ref::generate(Prefix::Event),
            public_event_type: "payment.succeeded".to_owned(),
            dto_version: 1,
            status: DeliveryStatus::Pending,
            diagnostic: false,
            generation: 1,
            attempt_count: 0,
            next_attempt_at: Some(now),
            last_attempt_at: None,
            occurred_at: now,
            event_data: "{}".to_owned(),
            match_reasons: "[]".to_owned(),
            body_status: BodyStatus::Available,
            payload: store::Payload::Absent,
            created_at: now,
            updated_at: now,
            version: 1,
            order: None,
            ordered: false,
            skipped_at: None,
            skip_reason: None,
            kept_success: None,
        }
    }

    /// On tokio's paused clock: a carried delivery is due back exactly
    /// when `CARRY_FOR` has passed, with no real wait.
    #[tokio::test(start_paused = true)]
    async fn a_carried_delivery_goes_back_once_carry_for_has_passed() {
        let endpoint = Ref::generate(Prefix::WebhookEndpoint);
        let mut carried = Carried::default();
        carried.keep(delivery(&endpoint), 1, (2, 4)).expect("room");
        tokio::time::advance(CARRY_FOR).await;
        let (d, version, since) = carried.take_all().remove(0);
        assert_eq!(since.elapsed(), CARRY_FOR, "not past it yet");
        carried.keep(d, version, (2, 4)).expect("room");
        tokio::time::advance(Duration::from_millis(1)).await;
        let (_, _, since) = carried.take_all().remove(0);
        assert!(since.elapsed() < CARRY_FOR, "kept again, it starts over");
    }

    /// A claim may take as many of an endpoint's deliveries as it has room
    /// kept for; an endpoint with none kept is not limited here.
    #[tokio::test(start_paused = true)]
    async fn room_is_what_each_endpoint_may_still_keep() {
        let (a, b) = (
            Ref::generate(Prefix::WebhookEndpoint),
            Ref::generate(Prefix::WebhookEndpoint),
        );
        let mut carried = Carried::default();
        assert!(carried.room(3).is_empty());
        for _ in 0..2 {
            carried.keep(delivery(&a), 1, (3, 10)).expect("room for a");
        }
        carried.keep(delivery(&b), 1, (3, 10)).expect("room for b");
        carried.keep(delivery(&b), 1, (3, 10)).expect("room for b");
        carried.keep(delivery(&b), 1, (3, 10)).expect("room for b");
        let room = carried.room(3);
        assert_eq!(room.get(a.as_str()), Some(&1));
        assert_eq!(room.get(b.as_str()), Some(&0));
        assert_eq!(room.len(), 2);
        carried.take_all();
        assert!(carried.room(3).is_empty(), "none kept, none limited");
    }

    #[tokio::test(start_paused = true)]
    async fn it_keeps_at_most_its_limits() {
        let (a, b) = (
            Ref::generate(Prefix::WebhookEndpoint),
            Ref::generate(Prefix::WebhookEndpoint),
        );
        let mut carried = Carried::default();
        for _ in 0..2 {
            carried.keep(delivery(&a), 1, (2, 3)).expect("room for a");
        }
        let refused = delivery(&a);
        let refused_ref = refused.delivery_ref.clone();
        assert_eq!(carried.keep(refused, 1, (2, 3)), Err(refused_ref));
        carried.keep(delivery(&b), 1, (2, 3)).expect("room for b");
        assert!(carried.keep(delivery(&b), 1, (2, 3)).is_err(), "3 in all");
        assert_eq!(carried.len(), 3);
        assert_eq!(carried.take_all().len(), 3);
        carried.keep(delivery(&a), 1, (2, 3)).expect("emptied");
    }
}
