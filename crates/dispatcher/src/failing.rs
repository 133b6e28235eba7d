//! When each endpoint's current run of failures began, as the store last
//! said, so that deciding whether an endpoint has failed for
//! `delivery.disable_after` reads the store's attempt history once per run
//! of failures, not once per failed attempt.
//!
//! The store stays the authority. A cached start can be older than the
//! truth (another dispatcher's success moved it later), so a "too long" is
//! always confirmed by the store before the endpoint is disabled; or later
//! (another dispatcher failed first), which only says "not yet" for that
//! moment longer. One map entry per endpoint this process attempted.

use domain::{Ref, Timestamp};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use store::Store;

/// What is known of an endpoint's current run of failures.
#[derive(Clone, Copy)]
enum Run {
    /// This process saw it succeed last: a failure now starts a run.
    Succeeded,
    /// The run began then (the store's answer, or this process's first
    /// failure after a success it saw).
    Since(Timestamp),
}

#[derive(Default)]
pub struct FailingSince {
    runs: Mutex<HashMap<String, Run>>,
    /// Per endpoint: this process's attempts failed in a row, and whether
    /// it knows the endpoint announced failing (contract 13.4).
    streaks: Mutex<HashMap<String, Streak>>,
}

#[derive(Default, Clone, Copy)]
struct Streak {
    failed: u32,
    announced: Option<bool>,
}

/// What an attempt's outcome asks of the endpoint's announced health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealthChange {
    /// Nothing to announce.
    None,
    /// Its last attempts may all have failed: check, then announce failing.
    MaybeFailing,
    /// It succeeded while announced failing: announce recovered.
    Recovered,
}

impl FailingSince {
    /// A success ends the endpoint's run.
    pub fn succeeded(&self, endpoint_ref: &Ref) {
        self.lock().insert(endpoint_ref.to_string(), Run::Succeeded);
    }

    /// After a failed attempt started at `now`: true when every attempt to
    /// the endpoint has failed for at least `limit`.
    pub async fn too_long(
        &self,
        store: &Store,
        endpoint_ref: &Ref,
        now: Timestamp,
        limit: Duration,
    ) -> bool {
        let limit = limit.as_millis() as i64;
        let known = {
            let mut runs = self.lock();
            let run = runs.get(endpoint_ref.as_str()).copied();
            if let Some(Run::Succeeded) = run {
                // A run that starts now; another dispatcher's failures may
                // have started it a moment earlier, which only delays a
                // disable by that moment.
                runs.insert(endpoint_ref.to_string(), Run::Since(now));
            }
            run
        };
        match known {
            Some(Run::Succeeded) => return false,
            Some(Run::Since(since)) if now.millis() - since.millis() < limit => return false,
            _ => {}
        }
        let since = match store.dispatch().endpoint_failing_since(endpoint_ref).await {
            Ok(since) => since.unwrap_or(now),
            Err(e) => {
                tracing::warn!(error = %e, "could not read the endpoint's failure history");
                return false;
            }
        };
        self.lock()
            .insert(endpoint_ref.to_string(), Run::Since(since));
        now.millis() - since.millis() >= limit
    }

    /// Counts an attempt's outcome towards the endpoint's announced health:
    /// `announced` is what the endpoint's row said when its view was read.
    /// Asks for a check at `FAILING_STREAK` local failures in a row, once
    /// until the next success; and for a recovery once per success run.
    pub fn observe(&self, endpoint_ref: &Ref, success: bool, announced: bool) -> HealthChange {
        use domain::webhook::health::FAILING_STREAK;
        let mut streaks = self.streaks.lock().unwrap_or_else(|p| p.into_inner());
        // Called for every attempt: the key is copied only the first time.
        if !streaks.contains_key(endpoint_ref.as_str()) {
            streaks.insert(endpoint_ref.to_string(), Streak::default());
        }
        let Some(s) = streaks.get_mut(endpoint_ref.as_str()) else {
            return HealthChange::None;
        };
        let announced = s.announced.unwrap_or(announced);
        if success {
            s.failed = 0;
            s.announced = Some(false);
            return if announced {
                HealthChange::Recovered
            } else {
                HealthChange::None
            };
        }
        s.failed = s.failed.saturating_add(1);
        if !announced && s.failed >= FAILING_STREAK as u32 {
            return HealthChange::MaybeFailing;
        }
        HealthChange::None
    }

    /// The endpoint's failing health is announced (by this process or
    /// another): no more checks until a success.
    pub fn announced_failing(&self, endpoint_ref: &Ref) {
        let mut streaks = self.streaks.lock().unwrap_or_else(|p| p.into_inner());
        streaks
            .entry(endpoint_ref.to_string())
            .or_default()
            .announced = Some(true);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Run>> {
        self.runs.lock().unwrap_or_else(|p| p.into_inner())
    }
}
