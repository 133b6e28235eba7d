//! Start-up and shutdown of the roles: `serve` (API and background work in
//! one process), `api`, and `dispatcher`.
//!
//! Shutdown protocol: SIGTERM or Ctrl-C cancels one token; the API stops
//! accepting connections and finishes in-flight requests; background loops
//! finish their current step; the process ends within `SHUTDOWN_GRACE`
//! (25 s), with status 0 unless the first task to end had failed.

use crate::config::Config;
use anyhow::Context;
use control_api::rate_limit::SharedBuckets;
use control_api::state::{Probe, WebhookSettings};
use control_api::{ApiSettings, AppState};
use dispatcher::announce::Announcer;
use dispatcher::redis_schedule::RedisSchedule;
use dispatcher::{DispatchSettings, Dispatcher};
use domain::webhook::cipher::SecretCipher;
use domain::webhook::retry::RetrySchedule;
use std::sync::Arc;
use std::time::Duration;
use store::Store;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// How long shutdown may take before the process gives up waiting.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(25);
/// How long the API waits at start for the AMQP intake to bind its queue.
const BIND_WAIT: Duration = Duration::from_secs(5);

/// Which parts a process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// API and background work in one process (embedded default).
    All,
    Api,
    Dispatcher,
}

/// Opens the store and applies pending migrations. Its commits wake this
/// process's relay and dispatchers (`store::Wakeups`).
pub async fn open_store(config: &Config) -> anyhow::Result<Store> {
    let options = store::StoreOptions {
        synchronous: store::Synchronous::parse(&config.store.synchronous).unwrap_or_default(),
    };
    let store = Store::connect_with(&config.store.url, options)
        .await
        .with_context(|| {
            format!(
                "failed to open the store at {}",
                crate::config::redact_url(&config.store.url)
            )
        })?;
    store
        .migrate()
        .await
        .context("failed to migrate the store")?;
    Ok(store.waking(Arc::default()))
}

pub fn api_settings(config: &Config) -> anyhow::Result<ApiSettings> {
    let key = crate::secret_key::load(&config.secrets)?;
    let webhooks = WebhookSettings {
        allow_http: config.delivery.allow_http,
        allow_private_networks: config.delivery.allow_private_networks,
        secret_grace: Config::duration(&config.delivery.secret_grace),
        body_retention: Config::duration(&config.delivery.body_retention),
        endpoint_max_in_flight: config.delivery.endpoint_max_in_flight,
        ..WebhookSettings::with_cipher(SecretCipher::new(key))
    };
    Ok(ApiSettings {
        idempotency_retention: config.idempotency_retention(),
        rate_limit: config.api.rate_limit,
        ..ApiSettings::new(webhooks)
    })
}

pub fn dispatch_settings(config: &Config) -> anyhow::Result<DispatchSettings> {
    let schedule = RetrySchedule::parse(&config.delivery.retry_schedule)
        .context("delivery.retry_schedule must be a list of durations")?;
    let key = crate::secret_key::load(&config.secrets)?;
    Ok(DispatchSettings {
        timeout: Config::duration(&config.delivery.timeout),
        allow_private_networks: config.delivery.allow_private_networks,
        disable_after: Config::duration(&config.delivery.disable_after),
        endpoint_max_in_flight: config.delivery.endpoint_max_in_flight,
        announce: Arc::new(Announcer::new(config.delivery.endpoint_max_in_flight)),
        ..DispatchSettings::new(schedule, SecretCipher::new(key))
    })
}

/// The API listener's router: the API's (`control_api::router`) and, when
/// `console.enabled`, the operator console's (`console::router`), whose
/// sessions are keyed from the secrets key so that every API process of a
/// fleet accepts them.
pub fn api_router(config: &Config, state: &AppState) -> anyhow::Result<axum::Router> {
    let router = control_api::router(state.clone());
    if !config.console.enabled {
        return Ok(router);
    }
    let key = crate::secret_key::load(&config.secrets)?;
    let listen: std::net::SocketAddr = config.api.listen.parse()?;
    let settings = console::ConsoleSettings::new(&key, listen);
    Ok(router.merge(console::router(state.clone(), settings)))
}

/// Rate-limit buckets kept in the fleet's Redis.
pub fn shared_buckets(schedule: Arc<RedisSchedule>) -> SharedBuckets {
    Arc::new(move |credential, rate| {
        let schedule = schedule.clone();
        Box::pin(async move {
            schedule
                .take_token(&credential, rate)
                .await
                .map_err(|e| e.to_string())
        })
    })
}

/// The event queue of this process's intake: other systems' events
/// reaching it (or `publish-event` in the embedded mode) are projected onto
/// the resources they name by the billing surface.
pub fn event_queue(store: &Store) -> dispatcher::EventQueue {
    dispatcher::EventQueue::with_projector(
        store.clone(),
        commerce::projection::projector(store.clone()),
    )
}

/// Runs `role` until `shutdown` is cancelled.
pub async fn run(config: Config, role: Role, shutdown: CancellationToken) -> anyhow::Result<()> {
    let store = open_store(&config).await?;
    let metrics_addr: std::net::SocketAddr = config.metrics.listen.parse()?;
    dispatcher::metrics::install(metrics_addr)
        .map_err(|e| anyhow::anyhow!("failed to serve metrics on {metrics_addr}: {e}"))?;
    // A fleet is its store: what it keeps in Redis and RabbitMQ is named
    // after the store's identity unless configured otherwise.
    let identity = store
        .identity()
        .await
        .context("failed to read the store's identity")?;
    let redis = match config.redis_url() {
        Some(url) => Some(Arc::new(
            RedisSchedule::connect(url, config.redis_keys(identity.clone()))
                .await
                .map_err(|e| {
                    anyhow::anyhow!(
                        "failed to reach Redis at {}: {e}",
                        crate::config::redact_url(url)
                    )
                })?,
        )),
        None => None,
    };
    // One queue per process: the events its writes emit and those other
    // systems publish come in the same way.
    let queue = event_queue(&store);
    if matches!(role, Role::All | Role::Dispatcher) {
        // Before the outbox relay and the AMQP intake start: an event
        // attempted before a write that a crash stopped must be written
        // again under its keyed reference (`dispatcher::queue`).
        queue.await_dispatcher();
    }
    // This process's AMQP intake, if it has one.
    let intake = match config.amqp_url() {
        Some(url) if matches!(role, Role::All | Role::Dispatcher) => {
            Some(dispatcher::amqp::AmqpSettings {
                queue: config.queue_name(&identity),
                ..dispatcher::amqp::AmqpSettings::new(url)
            })
        }
        _ => None,
    };
    let mut tasks = tokio::task::JoinSet::new();
    // `billing_dependency_up`: what `/readyz` asks, asked every few seconds.
    let dependencies = dispatcher::dependencies::Dependencies::new(
        store.clone(),
        config.amqp_url(),
        redis.clone(),
    );
    let token = shutdown.clone();
    tasks.spawn(async move {
        dependencies.watch(token).await;
        Ok("dependency gauge")
    });
    if let Some(settings) = intake.clone() {
        let (queue, token) = (queue.clone(), shutdown.clone());
        tasks.spawn(async move {
            dispatcher::amqp::consume(queue, settings, token).await;
            Ok("amqp intake")
        });
    }
    if matches!(role, Role::All | Role::Api) {
        // The API answers once the intake's queue is bound, unless the
        // broker keeps it waiting: then `/readyz` says so meanwhile.
        if let Some(intake) = &intake {
            let _ = tokio::time::timeout(BIND_WAIT, intake.bound.wait()).await;
        }
        let listener = TcpListener::bind(&config.api.listen)
            .await
            .with_context(|| format!("failed to listen on {}", config.api.listen))?;
        let addr = listener.local_addr()?;
        println!("billing API listening on http://{addr}/api/v1 (OpenAPI at http://{addr}/api/v1/openapi.json)");
        println!("get an admin credential with: billing admin bootstrap --json");
        println!("metrics at http://{metrics_addr}/metrics");
        let mut state = AppState::new(store.clone(), api_settings(&config)?);
        if let Some(url) = config.amqp_url() {
            let url = url.to_owned();
            // Events published before this process's own intake has bound
            // its queue never reach the store, so it is not ready before.
            let bound = intake.as_ref().map(|i| i.bound.clone());
            let probe: Probe = Arc::new(move || {
                let (url, bound) = (url.clone(), bound.clone());
                Box::pin(async move {
                    if bound.is_some_and(|b| !b.is_bound()) {
                        return Err("the event queue is not bound yet".to_owned());
                    }
                    dispatcher::amqp::reachable(&url)
                        .await
                        .map_err(|e| e.to_string())
                })
            });
            state = state.with_probe("queue", probe);
        }
        if let Some(schedule) = &redis {
            let probed = schedule.clone();
            let probe: Probe = Arc::new(move || {
                let schedule = probed.clone();
                Box::pin(async move { schedule.ping().await.map_err(|e| e.to_string()) })
            });
            state = state.with_probe("scheduler", probe);
            // The fleet's API processes share each credential's bucket.
            let buckets = shared_buckets(schedule.clone());
            state = state.with_shared_rate_limit(buckets);
        }
        // The events this process's writes emit leave through its outbox.
        let target = match config.amqp_url() {
            Some(url) => dispatcher::outbox::Target::Amqp(url.to_owned()),
            None => dispatcher::outbox::Target::Queue(queue.clone()),
        };
        let (relay_store, token) = (store.clone(), shutdown.clone());
        tasks.spawn(async move {
            dispatcher::outbox::relay(relay_store, target, token).await;
            Ok("outbox relay")
        });
        let token = shutdown.clone();
        let limits = control_api::ServeLimits {
            max_connections: config.api.max_connections as usize,
            read_timeout: Config::duration(&config.api.read_timeout),
            max_header_bytes: config.api.max_header_bytes as usize,
        };
        let router = api_router(&config, &state)?;
        if config.console.enabled {
            println!("operator console at http://{addr}/console");
        }
        tasks.spawn(async move {
            control_api::run_router(router, state, listener, limits, token)
                .await
                .context("API server failed")
                .map(|()| "api")
        });
    }
    if matches!(role, Role::All | Role::Dispatcher) {
        let policy = config
            .retention_policy()
            .context("invalid retention settings")?;
        let every = Config::duration(&config.retention.sweep_every);
        let (sweep_store, token) = (store.clone(), shutdown.clone());
        tasks.spawn(async move {
            dispatcher::retention::run(sweep_store, policy, every, token).await;
            Ok("retention sweep")
        });
        let (redrive_store, token, rate) = (store.clone(), shutdown.clone(), config.redrive.rate);
        tasks.spawn(async move {
            dispatcher::redrive_jobs::run(redrive_store, rate, token).await;
            Ok("redrive jobs")
        });
        let (jobs_store, token) = (store.clone(), shutdown.clone());
        let rules = commerce::jobs::Rules {
            dunning: config
                .dunning_schedule()
                .context("invalid billing.dunning_schedule")?,
        };
        tasks.spawn(async move {
            commerce::jobs::run(jobs_store, rules, token).await;
            Ok("timed work")
        });
        let mut dispatcher = Dispatcher::new(queue.clone(), dispatch_settings(&config)?);
        if let Some(schedule) = &redis {
            dispatcher = dispatcher.with_redis(schedule.clone());
        }
        let token = shutdown.clone();
        tasks.spawn(async move {
            dispatcher.run(token).await;
            Ok("dispatcher")
        });
    }
    // The first task to end ends the process: a crash of one part must not
    // leave the other running alone.
    let first = tasks.join_next().await;
    shutdown.cancel();
    let rest = async {
        while let Some(r) = tasks.join_next().await {
            report(r);
        }
    };
    if tokio::time::timeout(SHUTDOWN_GRACE, rest).await.is_err() {
        tracing::warn!("shutdown grace elapsed; exiting with work in flight");
    }
    store.close().await;
    match first {
        Some(Ok(Err(e))) => Err(e),
        Some(r) => {
            report(r);
            Ok(())
        }
        None => Ok(()),
    }
}

fn report(r: Result<anyhow::Result<&'static str>, tokio::task::JoinError>) {
    match r {
        Ok(Ok(name)) => tracing::info!(task = name, "stopped"),
        Ok(Err(e)) => tracing::error!(error = format!("{e:#}"), "task failed"),
        Err(e) => tracing::error!(error = %e, "task panicked"),
    }
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn termination_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The service's store wakes its relay when a write emits events
    /// (`store::Wakeups`): a store opened without them would leave the
    /// events to the relay's next poll.
    #[tokio::test]
    async fn the_services_store_wakes_its_relay() {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let mut config = Config::default();
        config.store.url = format!("sqlite://{}/billing.db", dir.path().display());
        let store = open_store(&config).await.expect("the store opens");
        let written = store.outbox_written();
        let body = serde_json::json!({
            "event_ref": domain::Ref::generate(domain::Prefix::Event).into_string(),
            "public_event_type": "order.created",
            "environment_ref": domain::Ref::generate(domain::Prefix::Environment).into_string(),
            "occurred_at": domain::Timestamp::now().to_rfc3339(),
            "data": {"order_ref": "ord_AAAAAAAAAAAA"},
        });
        let event = dispatcher::intake::parse(body.to_string().as_bytes()).expect("an event");
        let mut tx = store.begin().await.expect("a unit of work");
        store::dispatch::outbox::Emit::emit(&mut tx, &event)
            .await
            .expect("emitted");
        tx.commit().await.expect("emitted");
        tokio::time::timeout(Duration::from_secs(5), written.notified())
            .await
            .expect("the commit woke the relay");
    }
}
