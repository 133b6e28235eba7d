//! The typed configuration tree: built-in defaults, then
//! `config/default.toml` (if present), then `--config FILE`, then
//! `BILLING_<SECTION>__<KEY>` variables. Validated once at start.

use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::Duration;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub api: ApiConfig,
    pub store: StoreConfig,
    pub queue: QueueConfig,
    pub scheduler: SchedulerConfig,
    pub metrics: MetricsConfig,
    pub delivery: DeliveryConfig,
    pub idempotency: IdempotencyConfig,
    pub retention: RetentionConfig,
    pub redrive: RedriveConfig,
    pub billing: BillingConfig,
    pub console: ConsoleConfig,
    pub secrets: SecretsConfig,
    pub log: LogConfig,
}

/// The operator console (contract 12.3).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsoleConfig {
    /// Serve `/console` on the API listener.
    pub enabled: bool,
}

/// The key that encrypts webhook signing secrets at rest.
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretsConfig {
    /// Base64 of 32 bytes. Every process of a fleet must share it.
    pub key: String,
    /// Used when `key` is empty: read, or created with a fresh key on first start.
    pub key_file: String,
}

impl std::fmt::Debug for SecretsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretsConfig")
            .field("key", &if self.key.is_empty() { "" } else { "***" })
            .field("key_file", &self.key_file)
            .finish()
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiConfig {
    pub listen: String,
    /// Requests per second per credential (a token bucket with bursts of
    /// twice as many); 0 turns the limit off.
    pub rate_limit: u32,
    /// Open connections one process accepts at once; more wait in the
    /// kernel's backlog.
    pub max_connections: u32,
    /// Time a client has to send a request's headers, and between two
    /// pieces of its body.
    pub read_timeout: String,
    /// Largest request head (request line and headers) in bytes.
    pub max_header_bytes: u32,
}

#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    pub url: String,
    /// SQLite only: `full` (every commit is on disk before it is
    /// acknowledged) or `normal` (a power loss may lose the last commits).
    pub synchronous: String,
}

impl std::fmt::Debug for StoreConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreConfig")
            .field("url", &redact_url(&self.url))
            .field("synchronous", &self.synchronous)
            .finish()
    }
}

#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueConfig {
    pub url: String,
    /// The RabbitMQ queue of this store's dispatchers; empty: the store's
    /// own (`dispatcher::amqp::queue_of`).
    pub name: String,
}

impl std::fmt::Debug for QueueConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueConfig")
            .field("url", &redact_url(&self.url))
            .field("name", &self.name)
            .finish()
    }
}

#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchedulerConfig {
    pub url: String,
    /// The prefix of this store's Redis keys; empty: the store's own
    /// (`dispatcher::redis_schedule::Keys::own`).
    pub key_prefix: String,
}

impl std::fmt::Debug for SchedulerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchedulerConfig")
            .field("url", &redact_url(&self.url))
            .field("key_prefix", &self.key_prefix)
            .finish()
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    pub listen: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeliveryConfig {
    pub allow_private_networks: bool,
    pub allow_http: bool,
    pub retry_schedule: String,
    pub timeout: String,
    pub secret_grace: String,
    pub disable_after: String,
    pub body_retention: String,
    /// An endpoint's `max_in_flight` when it sets none (contract 13.2):
    /// attempts open to it at once over the whole fleet, 1 to 1,000.
    pub endpoint_max_in_flight: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdempotencyConfig {
    pub retention: String,
}

/// How long settled webhook traffic and logs are kept (contract 12.1).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionConfig {
    pub deliveries: String,
    pub dead_letters: String,
    pub request_logs: String,
    pub sweep_every: String,
}

/// Redrive jobs (contract 12.2).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedriveConfig {
    /// Most deliveries a job redrives per second.
    pub rate: u32,
}

/// Subscriptions over time (contract 12.4).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BillingConfig {
    /// When a declined renewal is charged again, each delay counted from
    /// the declined renewal: `1d,3d,5d` retries on days 1, 3 and 5, then
    /// cancels the subscription for nonpayment.
    pub dunning_schedule: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    /// `text` or `json`.
    pub format: String,
    /// A tracing filter such as `info` or `billing=debug,info`.
    pub level: String,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            api: ApiConfig {
                listen: "127.0.0.1:8080".into(),
                rate_limit: 1000,
                max_connections: 1024,
                read_timeout: "10s".into(),
                max_header_bytes: 16 * 1024,
            },
            store: StoreConfig {
                url: "sqlite://data/billing.db".into(),
                synchronous: "full".into(),
            },
            queue: QueueConfig {
                url: "embedded".into(),
                name: String::new(),
            },
            scheduler: SchedulerConfig {
                url: "embedded".into(),
                key_prefix: String::new(),
            },
            metrics: MetricsConfig {
                listen: "127.0.0.1:9464".into(),
            },
            delivery: DeliveryConfig {
                allow_private_networks: false,
                allow_http: false,
                retry_schedule: "0s,5s,5m,30m,2h,5h,10h,10h".into(),
                timeout: "15s".into(),
                secret_grace: "24h".into(),
                disable_after: "5d".into(),
                body_retention: "30d".into(),
                endpoint_max_in_flight: 100,
            },
            idempotency: IdempotencyConfig {
                retention: "24h".into(),
            },
            retention: RetentionConfig {
                deliveries: "30d".into(),
                dead_letters: "30d".into(),
                request_logs: "30d".into(),
                sweep_every: "1m".into(),
            },
            redrive: RedriveConfig { rate: 500 },
            billing: BillingConfig {
                dunning_schedule: domain::checkout::renewal::DEFAULT_DUNNING_SCHEDULE.into(),
            },
            console: ConsoleConfig { enabled: true },
            secrets: SecretsConfig {
                key: String::new(),
                key_file: "data/secret.key".into(),
            },
            log: LogConfig {
                format: "text".into(),
                level: "info".into(),
            },
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("configuration could not be read: {0}")]
    Load(#[from] Box<figment::Error>),
    #[error("invalid configuration: {field}: {issue}")]
    Invalid { field: &'static str, issue: String },
}

impl Config {
    /// Loads the layers in order and validates the result.
    pub fn load(file: Option<&Path>) -> Result<Config, ConfigError> {
        let mut figment = Figment::from(Serialized::defaults(Config::default()))
            .merge(Toml::file("config/default.toml"));
        if let Some(f) = file {
            figment = figment.merge(Toml::file_exact(f));
        }
        // Only `SECTION__KEY` variables are configuration; others that share
        // the prefix (`BILLING_TEST_FLEET`) are not.
        figment = figment.merge(
            Env::prefixed("BILLING_")
                .filter(|k| k.as_str().contains("__"))
                .split("__"),
        );
        let config: Config = figment.extract().map_err(Box::new)?;
        config.validate()?;
        Ok(config)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |field, issue: &str| ConfigError::Invalid {
            field,
            issue: issue.to_owned(),
        };
        let durations = [
            ("delivery.timeout", &self.delivery.timeout),
            ("delivery.secret_grace", &self.delivery.secret_grace),
            ("delivery.disable_after", &self.delivery.disable_after),
            ("delivery.body_retention", &self.delivery.body_retention),
            ("idempotency.retention", &self.idempotency.retention),
            ("api.read_timeout", &self.api.read_timeout),
            ("retention.deliveries", &self.retention.deliveries),
            ("retention.dead_letters", &self.retention.dead_letters),
            ("retention.request_logs", &self.retention.request_logs),
            ("retention.sweep_every", &self.retention.sweep_every),
        ];
        for (field, value) in durations {
            domain::duration::parse(value)
                .ok_or_else(|| invalid(field, "must be a duration such as 15s, 5m, 24h or 5d"))?;
        }
        let schedule =
            domain::duration::parse_list(&self.delivery.retry_schedule).ok_or_else(|| {
                invalid(
                    "delivery.retry_schedule",
                    "must be a comma-separated list of durations",
                )
            })?;
        if schedule.is_empty() {
            return Err(invalid("delivery.retry_schedule", "must not be empty"));
        }
        if self.idempotency_retention() < Duration::from_secs(3600) {
            return Err(invalid("idempotency.retention", "must be at least 1h"));
        }
        if let Err(e) = self.retention_policy() {
            return Err(invalid(e.setting, "must be at least 1s"));
        }
        if Config::duration(&self.retention.sweep_every) < domain::retention::MIN_RETENTION {
            return Err(invalid("retention.sweep_every", "must be at least 1s"));
        }
        if domain::webhook::limits::MaxInFlight::parse(i64::from(
            self.delivery.endpoint_max_in_flight,
        ))
        .is_err()
        {
            return Err(invalid(
                "delivery.endpoint_max_in_flight",
                "must be an integer from 1 to 1000",
            ));
        }
        if self.redrive.rate == 0 {
            return Err(invalid("redrive.rate", "must be at least 1"));
        }
        if let Err(e) = self.dunning_schedule() {
            return Err(invalid("billing.dunning_schedule", &e.to_string()));
        }
        let store_ok = ["sqlite://", "postgres://", "postgresql://"]
            .iter()
            .any(|p| self.store.url.starts_with(p));
        if !store_ok {
            return Err(invalid(
                "store.url",
                "must start with sqlite:// or postgres://",
            ));
        }
        if self.queue.url != "embedded" {
            dispatcher::amqp::parse_url(&self.queue.url).map_err(|e| ConfigError::Invalid {
                field: "queue.url",
                issue: format!(
                    "must be `embedded` or an amqp:// or amqps:// URL ({})",
                    match e {
                        dispatcher::amqp::AmqpError::InvalidUrl(reason) => reason,
                        other => other.to_string(),
                    }
                    .replace(&self.queue.url, &redact_url(&self.queue.url))
                ),
            })?;
        }
        let scheduler_ok = self.scheduler.url == "embedded"
            || self.scheduler.url.starts_with("redis://")
            || self.scheduler.url.starts_with("rediss://");
        if !scheduler_ok {
            return Err(invalid(
                "scheduler.url",
                "must be `embedded` or a redis:// or rediss:// URL",
            ));
        }
        // RabbitMQ takes names up to 255 bytes and keeps `amq.` for itself.
        let name = &self.queue.name;
        if name.len() > 255 || name.starts_with("amq.") || name.chars().any(char::is_control) {
            return Err(invalid(
                "queue.name",
                "must be empty or a queue name of at most 255 bytes, not starting with amq.",
            ));
        }
        let prefix = &self.scheduler.key_prefix;
        if prefix.len() > 200 || prefix.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(invalid(
                "scheduler.key_prefix",
                "must be empty or at most 200 characters without spaces",
            ));
        }
        for (field, addr) in [
            ("api.listen", &self.api.listen),
            ("metrics.listen", &self.metrics.listen),
        ] {
            addr.parse::<std::net::SocketAddr>()
                .map_err(|_| invalid(field, "must be an address such as 127.0.0.1:8080"))?;
        }
        if !self.secrets.key.is_empty() && crate::secret_key::decode(&self.secrets.key).is_none() {
            return Err(invalid("secrets.key", "must be base64 of 32 bytes"));
        }
        if self.secrets.key.is_empty() && self.secrets.key_file.is_empty() {
            return Err(invalid(
                "secrets.key_file",
                "must be set when secrets.key is empty",
            ));
        }
        if Config::duration(&self.api.read_timeout).is_zero() {
            return Err(invalid("api.read_timeout", "must be longer than 0s"));
        }
        if self.api.max_connections == 0 {
            return Err(invalid("api.max_connections", "must be at least 1"));
        }
        // hyper's read buffer cannot be smaller than 8 KiB.
        if self.api.max_header_bytes < 8192 {
            return Err(invalid("api.max_header_bytes", "must be at least 8192"));
        }
        if store::Synchronous::parse(&self.store.synchronous).is_none() {
            return Err(invalid("store.synchronous", "must be `full` or `normal`"));
        }
        if !["text", "json"].contains(&self.log.format.as_str()) {
            return Err(invalid("log.format", "must be `text` or `json`"));
        }
        Ok(())
    }

    /// The Redis URL when `scheduler.url` names one (fleet mode).
    pub fn redis_url(&self) -> Option<&str> {
        (self.scheduler.url != "embedded").then_some(self.scheduler.url.as_str())
    }

    /// The RabbitMQ URL when `queue.url` names one (fleet mode).
    pub fn amqp_url(&self) -> Option<&str> {
        (self.queue.url != "embedded").then_some(self.queue.url.as_str())
    }

    /// The Redis keys of the store `owner`: under `scheduler.key_prefix`
    /// when it names one, else the store's own.
    pub fn redis_keys(&self, owner: domain::StoreId) -> dispatcher::redis_schedule::Keys {
        use dispatcher::redis_schedule::Keys;
        match self.scheduler.key_prefix.as_str() {
            "" => Keys::own(owner),
            named => Keys::named(named, owner),
        }
    }

    /// The RabbitMQ queue of the store `owner`: `queue.name` when it names
    /// one, else the store's own.
    pub fn queue_name(&self, owner: &domain::StoreId) -> String {
        match self.queue.name.as_str() {
            "" => dispatcher::amqp::queue_of(owner),
            named => named.to_owned(),
        }
    }

    /// A duration field already checked by `validate`.
    pub fn duration(value: &str) -> Duration {
        domain::duration::parse(value).unwrap_or_default()
    }

    /// `billing.dunning_schedule`, parsed.
    pub fn dunning_schedule(
        &self,
    ) -> Result<domain::checkout::DunningSchedule, domain::checkout::renewal::DunningScheduleError>
    {
        domain::checkout::DunningSchedule::parse(&self.billing.dunning_schedule)
    }

    /// The retention policy of `retention.*`, `delivery.body_retention`
    /// and `idempotency.retention`.
    pub fn retention_policy(
        &self,
    ) -> Result<domain::retention::RetentionPolicy, domain::retention::RetentionError> {
        domain::retention::RetentionPolicy::new(
            Config::duration(&self.retention.deliveries),
            Config::duration(&self.delivery.body_retention),
            Config::duration(&self.retention.dead_letters),
            Config::duration(&self.retention.request_logs),
        )?
        .keeping_idempotency_keys(self.idempotency_retention())
    }

    pub fn idempotency_retention(&self) -> Duration {
        domain::duration::parse(&self.idempotency.retention).unwrap_or(Duration::from_secs(86_400))
    }
}

/// Hides the password of a URL such as `postgres://user:pw@host/db`.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let creds = &url[s + 3..at];
            match creds.find(':') {
                Some(c) => format!("{}{}:***{}", &url[..s + 3], &creds[..c], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        Config::default().validate().unwrap();
    }

    #[test]
    fn retention_settings_are_durations_of_at_least_a_second() {
        type Spoil = fn(&mut Config);
        let cases: [(&str, Spoil); 5] = [
            ("retention.deliveries", |c| {
                c.retention.deliveries = "500ms".into()
            }),
            ("retention.dead_letters", |c| {
                c.retention.dead_letters = "0s".into()
            }),
            ("retention.request_logs", |c| {
                c.retention.request_logs = "soon".into()
            }),
            ("retention.sweep_every", |c| {
                c.retention.sweep_every = "10ms".into()
            }),
            ("delivery.body_retention", |c| {
                c.delivery.body_retention = "0d".into()
            }),
        ];
        for (name, spoil) in cases {
            let mut c = Config::default();
            spoil(&mut c);
            match c.validate() {
                Err(ConfigError::Invalid { field, .. }) => assert_eq!(field, name),
                other => panic!("{name}: {other:?}"),
            }
        }
        let mut c = Config::default();
        c.retention.deliveries = "1s".into();
        c.delivery.body_retention = "30d".into();
        c.validate().unwrap();
        let policy = c.retention_policy().unwrap();
        assert_eq!(
            policy.keep(domain::retention::RetentionKind::Bodies),
            Duration::from_secs(1),
            "a body never outlives its delivery"
        );
        assert_eq!(
            policy.keep(domain::retention::RetentionKind::IdempotencyKeys),
            c.idempotency_retention(),
            "idempotency records are swept after idempotency.retention"
        );
    }

    #[test]
    fn passwords_are_hidden() {
        assert_eq!(
            redact_url("postgres://u:secret@h/db"),
            "postgres://u:***@h/db"
        );
        assert_eq!(redact_url("sqlite://data/x.db"), "sqlite://data/x.db");
    }

    #[test]
    fn the_queue_is_embedded_or_rabbitmq() {
        let mut c = Config::default();
        assert_eq!(c.amqp_url(), None);
        c.queue.url = "amqp://guest:guest@127.0.0.1:5672/%2f".into();
        c.validate().unwrap();
        assert_eq!(c.amqp_url(), Some(c.queue.url.as_str()));
        for bad in ["kafka://h", "amqp://h:port/", "rabbit"] {
            c.queue.url = bad.into();
            assert!(
                matches!(
                    c.validate(),
                    Err(ConfigError::Invalid {
                        field: "queue.url",
                        ..
                    })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_fleet_names_its_keys_and_queue_after_its_store_unless_told() {
        let owner = domain::StoreId::parse("0123456789abcdef").unwrap();
        let mut c = Config::default();
        assert_eq!(
            c.redis_keys(owner.clone()).prefix(),
            "billing:0123456789abcdef"
        );
        assert_eq!(
            c.queue_name(&owner),
            "billing.events.dispatcher.0123456789abcdef"
        );
        c.scheduler.key_prefix = "billing".into();
        c.queue.name = "billing.events.dispatcher".into();
        c.validate().unwrap();
        assert_eq!(
            c.redis_keys(owner.clone()),
            dispatcher::redis_schedule::Keys::named("billing", owner.clone())
        );
        assert_eq!(c.queue_name(&owner), "billing.events.dispatcher");
        type Spoil = fn(&mut Config);
        let cases: [(&str, Spoil); 3] = [
            ("queue.name", |c| c.queue.name = "amq.mine".into()),
            ("queue.name", |c| c.queue.name = "q".repeat(256)),
            ("scheduler.key_prefix", |c| {
                c.scheduler.key_prefix = "two words".into()
            }),
        ];
        for (name, spoil) in cases {
            let mut c = Config::default();
            spoil(&mut c);
            assert!(
                matches!(c.validate(), Err(ConfigError::Invalid { field, .. }) if field == name),
                "{name}"
            );
        }
    }

    #[test]
    fn the_defaults_are_the_contracts() {
        let c = Config::default();
        assert_eq!(c.api.rate_limit, 1000);
        assert_eq!(c.delivery.endpoint_max_in_flight, 100);
        assert_eq!(
            store::Synchronous::parse(&c.store.synchronous),
            Some(store::Synchronous::Full)
        );
    }

    #[test]
    fn limits_and_durability_are_checked() {
        type Spoil = fn(&mut Config);
        let cases: [(&str, Spoil); 6] = [
            ("store.synchronous", |c| c.store.synchronous = "off".into()),
            ("delivery.endpoint_max_in_flight", |c| {
                c.delivery.endpoint_max_in_flight = 0
            }),
            ("delivery.endpoint_max_in_flight", |c| {
                c.delivery.endpoint_max_in_flight = 1001
            }),
            ("api.read_timeout", |c| c.api.read_timeout = "0s".into()),
            ("api.max_connections", |c| c.api.max_connections = 0),
            ("api.max_header_bytes", |c| c.api.max_header_bytes = 100),
        ];
        for (name, spoil) in cases {
            let mut c = Config::default();
            spoil(&mut c);
            assert!(
                matches!(c.validate(), Err(ConfigError::Invalid { field, .. }) if field == name),
                "{name}"
            );
        }
        let mut c = Config::default();
        c.store.synchronous = "normal".into();
        c.api.rate_limit = 0;
        c.delivery.endpoint_max_in_flight = 1000;
        c.validate().unwrap();
    }

    #[test]
    fn bad_values_are_named() {
        let mut c = Config::default();
        c.delivery.timeout = "soon".into();
        assert!(matches!(
            c.validate(),
            Err(ConfigError::Invalid {
                field: "delivery.timeout",
                ..
            })
        ));
    }
}
