//! `billing_dependency_up`: whether the process reaches its store, queue
//! and scheduler, looked at as `/readyz` does, every few seconds. It sits
//! apart from `crate::metrics` (names and the exporter), because looking
//! at RabbitMQ needs `crate::amqp`, and the AMQP consumer counts its events
//! under `crate::metrics`' names. It must never change what it looks at.

use crate::metrics::DEPENDENCY_UP;
use crate::redis_schedule::RedisSchedule;
use std::sync::Arc;
use std::time::Duration;
use store::Store;
use tokio_util::sync::CancellationToken;

/// How often `billing_dependency_up` is refreshed.
const DEPENDENCY_EVERY: Duration = Duration::from_secs(10);
/// How long one look waits for a service's answer; longer reads as down.
const DEPENDENCY_WITHIN: Duration = Duration::from_secs(5);

/// The backing services a process depends on, looked at as `/readyz`
/// does (the store answers a query, RabbitMQ opens a connection with the
/// configured credentials and virtual host, Redis answers `PING`), for
/// `billing_dependency_up`.
pub struct Dependencies {
    store: Store,
    queue: Option<String>,
    scheduler: Option<Arc<RedisSchedule>>,
}

impl Dependencies {
    /// The store, and RabbitMQ (its URL) and Redis when configured; their
    /// series are registered at 0 until the first look.
    pub fn new(
        store: Store,
        queue: Option<&str>,
        scheduler: Option<Arc<RedisSchedule>>,
    ) -> Dependencies {
        let dependencies = Dependencies {
            store,
            queue: queue.map(str::to_owned),
            scheduler,
        };
        for name in dependencies.names() {
            metrics::gauge!(DEPENDENCY_UP, "dependency" => name).set(0.0);
        }
        dependencies
    }

    fn names(&self) -> Vec<&'static str> {
        let mut names = vec!["store"];
        if self.queue.is_some() {
            names.push("queue");
        }
        if self.scheduler.is_some() {
            names.push("scheduler");
        }
        names
    }

    /// Whether each service answered, all asked at once.
    async fn look(&self) -> Vec<(&'static str, bool)> {
        let store = answered(self.store.ping());
        let queue = async {
            match &self.queue {
                Some(url) => Some(answered(crate::amqp::reachable(url)).await),
                None => None,
            }
        };
        let scheduler = async {
            match &self.scheduler {
                Some(redis) => Some(answered(redis.ping()).await),
                None => None,
            }
        };
        let (store, queue, scheduler) = tokio::join!(store, queue, scheduler);
        let mut seen = vec![("store", store)];
        seen.extend(queue.map(|up| ("queue", up)));
        seen.extend(scheduler.map(|up| ("scheduler", up)));
        seen
    }

    /// Sets `billing_dependency_up` now and every `DEPENDENCY_EVERY` until
    /// `shutdown`; says in the log when a service stops or starts
    /// answering.
    pub async fn watch(self, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(DEPENDENCY_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut was_up: std::collections::HashMap<&'static str, bool> = Default::default();
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            let seen = tokio::select! {
                _ = shutdown.cancelled() => return,
                seen = self.look() => seen,
            };
            for (name, up) in seen {
                metrics::gauge!(DEPENDENCY_UP, "dependency" => name).set(f64::from(u8::from(up)));
                match (was_up.insert(name, up), up) {
                    (Some(true) | None, false) => {
                        tracing::warn!(dependency = name, "backing service unreachable");
                    }
                    (Some(false), true) => {
                        tracing::info!(dependency = name, "backing service reachable again");
                    }
                    _ => {}
                }
            }
        }
    }
}

/// Whether `probe` succeeded within `DEPENDENCY_WITHIN`.
async fn answered<E>(probe: impl std::future::Future<Output = Result<(), E>>) -> bool {
    matches!(
        tokio::time::timeout(DEPENDENCY_WITHIN, probe).await,
        Ok(Ok(()))
    )
}
