//! The service every outage test starts and ends the same way: `billing
//! serve` over the test's store (and, in a fleet, its queue and scheduler)
//! with the settings they share, its sandbox bootstrapped, a shop open and
//! pays going through under load; then, after the outage, the load stopped
//! and every answer, committed write and event checked, and a clean exit.

use super::{check_answers, check_committed, check_events, open_shop, tail};
use super::{checks::Tally, Api, Hooks, Load, Paid};
use crate::common::{billing, bootstrap, free_port, rand_u32, say, Process, Sandbox};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// `billing serve` with its API, the receiver of its events and its log.
pub struct Service {
    pub api: Api,
    pub hooks: Hooks,
    server: Process,
    serve_log: PathBuf,
    /// Another log whose tail failure messages show (a private server's).
    other_log: Option<PathBuf>,
    _dir: tempfile::TempDir,
}

impl Service {
    /// Starts `billing serve` with `backing` (the settings naming its store
    /// and services) and the settings every outage test shares, opens a shop
    /// whose references start with `run`, and starts the load; returns once
    /// 10 pays went through.
    pub async fn under_load(
        backing: Vec<(&'static str, String)>,
        run: &str,
        other_log: Option<PathBuf>,
    ) -> (Service, Load) {
        let dir = tempfile::tempdir().unwrap();
        let api_port = free_port();
        let mut envs = backing;
        envs.extend([
            ("BILLING_API__LISTEN", format!("127.0.0.1:{api_port}")),
            (
                "BILLING_METRICS__LISTEN",
                format!("127.0.0.1:{}", free_port()),
            ),
            (
                "BILLING_DELIVERY__ALLOW_PRIVATE_NETWORKS",
                "true".to_owned(),
            ),
            ("BILLING_DELIVERY__TIMEOUT", "5s".to_owned()),
            (
                "BILLING_DELIVERY__RETRY_SCHEDULE",
                "0s,1s,1s,1s,1s,1s".to_owned(),
            ),
        ]);
        let Sandbox {
            secret,
            environment_ref,
        } = bootstrap(dir.path(), &envs);
        let serve_log = dir.path().join("serve.log");
        let server = Process::spawn_logged(
            billing(dir.path(), &envs)
                .arg("serve")
                .env("RUST_LOG", "warn"),
            serve_log.clone(),
        );
        let (hooks, hook) = Hooks::start().await;
        let service = Service {
            api: Api::new(format!("http://127.0.0.1:{api_port}"), secret),
            hooks,
            server,
            serve_log,
            other_log,
            _dir: dir,
        };
        let logs = || service.logs();
        service.api.wait_ready(Duration::from_secs(30), logs).await;
        let run = format!("{run}{:08x}", rand_u32());
        let shop = open_shop(&service.api, &environment_ref, &hook, &run).await;
        let load = Load::start(&service.api, &shop, &run, 3);
        load.wait_paid(10, Duration::from_secs(30), logs).await;
        (service, load)
    }

    /// The tails of the service's log (and the other one), for failure
    /// messages.
    pub fn logs(&self) -> String {
        let serve = tail(&self.serve_log, 30);
        match &self.other_log {
            Some(other) => format!("{serve}\n{}", tail(other, 15)),
            None => serve,
        }
    }

    /// After an outage over `window`: waits for 10 more pays, stops the
    /// load and checks every answer (`check_answers`), printing the tallies
    /// with those sent in the window as `during`. Returns the sessions paid
    /// and the tallies of the window.
    pub async fn stop_load(
        &self,
        load: Load,
        window: (Instant, Instant),
        answer_within: Duration,
        during: &str,
    ) -> (Vec<Paid>, BTreeMap<&'static str, Tally>) {
        let logs = || self.logs();
        load.wait_paid(10, Duration::from_secs(30), logs).await;
        let (paid, seen) = load.finish(Duration::from_secs(30), logs).await;
        let (all, in_window) = check_answers(&seen, answer_within, window, logs);
        say(&format!("answers: {all:?}; {during}: {in_window:?}"));
        (paid, in_window)
    }

    /// Checks that every write that answered 2xx exists and that every paid
    /// payment's event arrived exactly once within `events_within`, then
    /// that SIGTERM stops the service cleanly.
    pub async fn check_and_stop(mut self, paid: &[Paid], events_within: Duration) {
        let logs = || self.logs();
        check_committed(&self.api, paid).await;
        check_events(&self.hooks, paid, events_within, logs).await;
        assert!(
            self.server.terminate_cleanly(),
            "SIGTERM exits cleanly\n{}",
            self.logs()
        );
    }
}
