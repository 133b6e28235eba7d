//! The checks made after an outage: the answers, the writes, the events.

use super::shop::Hook;
use super::{Api, Hooks, Paid, Seen};
use crate::common::poll::Poll;
use crate::common::say;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

/// Counts of answers by kind.
#[derive(Debug, Default)]
pub struct Tally {
    pub ok: usize,
    pub unavailable: usize,
    pub slowest: Duration,
}

/// Checks every answer: a success, or `503 dependency_unavailable` with
/// `Retry-After`; never a 500, never anything else, never no answer; each
/// within `answer_within`. Returns the tallies of all answers and of those
/// sent in `window` (the outage).
pub fn check_answers(
    seen: &[Seen],
    answer_within: Duration,
    window: (Instant, Instant),
    context: impl Fn() -> String,
) -> (Tally, BTreeMap<&'static str, Tally>) {
    let mut bad = Vec::new();
    let mut all = Tally::default();
    let mut during: BTreeMap<&'static str, Tally> = BTreeMap::new();
    for s in seen {
        let a = &s.answer;
        if !(a.ok() || a.unavailable()) {
            bad.push(format!("{}: {}", s.what, a.short()));
        } else if a.took > answer_within {
            bad.push(format!(
                "{} answered after more than {} ms: {}",
                s.what,
                answer_within.as_millis(),
                a.short()
            ));
        }
        let count = |t: &mut Tally| {
            if a.ok() {
                t.ok += 1;
            } else if a.unavailable() {
                t.unavailable += 1;
            }
            t.slowest = t.slowest.max(a.took);
        };
        count(&mut all);
        if s.at >= window.0 && s.at <= window.1 {
            count(during.entry(s.what).or_default());
        }
    }
    bad.truncate(20);
    assert!(
        bad.is_empty(),
        "answers that break the contract of an outage (a success, or 503 dependency_unavailable with Retry-After, in time):\n{}\n{}",
        bad.join("\n"),
        context()
    );
    (all, during)
}

/// Checks that every session paid exists, with its payment succeeded.
pub async fn check_committed(api: &Api, paid: &[Paid]) {
    for p in paid {
        let session = api
            .get(&format!("/api/v1/checkout-sessions/{}", p.session_ref))
            .await;
        assert_eq!(
            session.status,
            200,
            "session of {}: {}",
            p.key,
            session.short()
        );
        assert_eq!(session.data()["status"], "complete", "{}", session.short());
        let payment = api
            .get(&format!("/api/v1/payments/{}", p.payment_ref))
            .await;
        assert_eq!(
            payment.status,
            200,
            "payment of {}: {}",
            p.key,
            payment.short()
        );
        assert_eq!(payment.data()["status"], "succeeded", "{}", payment.short());
    }
}

/// Waits (within `within`) until the receiver has the `payment.succeeded`
/// event of every payment in `paid`, then a little longer for duplicates,
/// and checks that each arrived exactly once and that no other payment's
/// event arrived.
pub async fn check_events(
    hooks: &Hooks,
    paid: &[Paid],
    within: Duration,
    context: impl Fn() -> String,
) {
    let wanted: HashMap<&str, &Paid> = paid.iter().map(|p| (p.payment_ref.as_str(), p)).collect();
    let poll = Poll::within(within).every(Duration::from_millis(100));
    loop {
        let got: std::collections::HashSet<String> = hooks
            .all()
            .into_iter()
            .filter(|h| h.event_type == "payment.succeeded")
            .map(|h| h.payment_ref)
            .collect();
        let missing = wanted.keys().filter(|r| !got.contains(**r)).count();
        if missing == 0 {
            break;
        }
        poll.tick(|| {
            format!(
                "{missing} of {} paid payments' events never reached the receiver\n{}",
                wanted.len(),
                context()
            )
        })
        .await;
    }
    // Past any redelivery a lost record would cause soon: the real server
    // is given the time, as nothing outside it tells that a record was
    // lost.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut by_payment: HashMap<String, Vec<Hook>> = HashMap::new();
    for h in hooks.all() {
        by_payment.entry(h.payment_ref.clone()).or_default().push(h);
    }
    let mut problems = Vec::new();
    for (payment_ref, got) in &by_payment {
        if !wanted.contains_key(payment_ref.as_str()) {
            problems.push(format!(
                "an event of a payment no write answered 2xx for: {payment_ref} {got:?}"
            ));
        } else if got.len() != 1 {
            problems.push(format!(
                "payment {payment_ref}'s event arrived {} times: {got:?}",
                got.len()
            ));
        }
    }
    problems.truncate(20);
    assert!(
        problems.is_empty(),
        "events not delivered exactly once:\n{}\n{}",
        problems.join("\n"),
        context()
    );
    say(&format!(
        "{} payments, each event delivered once",
        wanted.len()
    ));
}
