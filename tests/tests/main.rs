//! The black-box suite of the service, one test binary: each module is an
//! area of behaviour (its own docs say which), and each starts the real
//! router or dispatcher over a real store per test (`billing_tests`). One
//! binary links once and shares the per-process fixtures (the migrated
//! PostgreSQL template) across every area.
//!
//! Run one area with `cargo test -p billing-tests --test suite <module>::`.

mod admin;
mod architecture;
mod born_settled;
mod catalogue;
mod checkout;
mod checkout_events;
mod claim_plans;
mod console;
mod console_plans;
mod contract;
mod dead_letters;
mod delivery_filters;
mod dispatch;
mod endpoint_settings;
mod event_data_once;
mod event_queue;
mod filters;
mod fleet_amqp;
mod fleet_dispatch;
mod fleet_rabbitmq_restart;
mod fleet_redis;
mod fleet_redis_outage;
mod fuzz_regressions;
mod hostile_clients;
mod hostile_receivers;
mod import_circles;
mod kept_responses;
mod kept_successes;
mod operational_events;
mod ordering;
mod projection;
mod rate_limit;
mod receiver_limits;
mod redrive_jobs;
mod refund_events;
mod refunds;
mod retention;
mod smoke;
mod sqlite_wal;
mod subscription_changes;
mod subscription_timeline;
mod subscriptions;
mod trials;
mod unit_of_work;
mod upgrade;
mod webhooks;
