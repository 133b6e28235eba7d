//! The process-level tests of the `billing` binary, one test binary: each
//! module starts the real binary (`CARGO_BIN_EXE_billing`) over real
//! stores and brokers, and its docs say what it shows. `common` holds the
//! shared kit (starting, bootstrapping, killing, receivers, fresh
//! databases, virtual hosts and Redis schedules; `common::crash` the crash
//! tests' kit, `common::poll` the polling), `outage` the outage tests' load
//! and checks.
//!
//! Run one with `cargo test -p billing --test process <module>::`.

mod common;
mod outage;

mod change_crash;
mod cli;
mod first_sale;
mod fleet_cli;
mod fleet_two_stores;
mod idempotency_crash;
mod jobs_crash;
mod kill;
mod metrics_at_start;
mod ordered_kill;
mod outage_postgres;
mod outage_rabbitmq;
mod outage_redis;
mod outage_sqlite_full;
mod pay_crash;
mod prewrite_kill;
mod renewal_crash;
mod retention;
mod secrets_leak;
