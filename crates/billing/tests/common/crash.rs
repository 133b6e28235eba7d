//! The crash tests' kit (`pay_crash.rs`, `jobs_crash.rs`,
//! `renewal_crash.rs`, `idempotency_crash.rs`): the store a scenario runs
//! over (embedded or fleet), a [`Site`] that starts the binary on its own
//! ports, and the replay scaffolding of the idempotency crashes: keyed
//! POSTs and their [`Answer`]s, two waves fired at once with a SIGKILL once
//! enough of the second is in the store ([`fire_and_kill`]), every key
//! replayed after the restart ([`replay_all`]) and the checks each replayed
//! key shares ([`check_replay`]).

use super::poll::Poll;
use super::{billing, bootstrap, fleet, fleet_env, free_port, fresh_redis_schedule, wait_ready};
use super::{FreshDatabase, Process, Sandbox, REDIS_URL};
use sqlx::Connection;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The variables of a process: its name and value.
pub type Envs = Vec<(&'static str, String)>;

/// `billing <command>` (`serve`, `api`, `dispatcher`) with its stderr in
/// `log_name` (in `dir`); killed (SIGKILL) if the test ends early.
pub fn role(dir: &Path, envs: &[(&str, String)], command: &str, log_name: &str) -> Process {
    Process::spawn_logged(
        billing(dir, envs).arg(command).env("RUST_LOG", "warn"),
        dir.join(log_name),
    )
}

/// The HTTP client of the crash tests: a request may wait on a busy store,
/// not forever.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .connect_timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}

/// A store's processes in `dir`, with the variables `envs` that name the
/// store, and one API port that outlives a restart.
pub struct Site {
    pub dir: PathBuf,
    envs: Envs,
    api_port: u16,
    /// The API's base URL.
    pub api: String,
}

impl Site {
    pub fn new(dir: &Path, envs: Envs) -> Site {
        let api_port = free_port();
        Site {
            dir: dir.to_owned(),
            envs,
            api_port,
            api: format!("http://127.0.0.1:{api_port}"),
        }
    }

    /// The store's variables and a fresh metrics port.
    pub fn without_api(&self) -> Envs {
        let mut e = self.envs.clone();
        e.push((
            "BILLING_METRICS__LISTEN",
            format!("127.0.0.1:{}", free_port()),
        ));
        e
    }

    /// The store's variables, the API port and a fresh metrics port.
    pub fn envs(&self) -> Envs {
        let mut e = self.without_api();
        e.push((
            "BILLING_API__LISTEN",
            format!("127.0.0.1:{}", self.api_port),
        ));
        e
    }

    /// `billing admin bootstrap` on the store.
    pub fn bootstrap(&self) -> Sandbox {
        bootstrap(&self.dir, &self.envs())
    }

    /// `billing <command>` on the store, with the API port.
    pub fn role(&self, command: &str, log_name: &str) -> Process {
        role(&self.dir, &self.envs(), command, log_name)
    }

    /// `billing serve`, once its `/readyz` answers 200.
    pub async fn serve(&self, log_name: &str) -> Process {
        let p = self.role("serve", log_name);
        wait_ready(&client(), &self.api, || p.log_tail()).await;
        p
    }
}

/// A connection that reads the store at `url` beside the server.
pub async fn probe(url: &str) -> sqlx::AnyConnection {
    sqlx::any::install_default_drivers();
    sqlx::AnyConnection::connect(url)
        .await
        .expect("the store can be read beside the server")
}

/// `COUNT(*)` by `sql` (no parameter) on `db`.
pub async fn count(db: &mut sqlx::AnyConnection, sql: &str) -> i64 {
    sqlx::query_scalar::<_, i64>(sql)
        .fetch_one(&mut *db)
        .await
        .unwrap()
}

/// JSON text as a value (`null` when it is not JSON).
pub fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or(serde_json::Value::Null)
}

/// An event's scope as a value with every field: the events queue stores
/// only the fields that name something, and each of `Scope`'s defaults
/// (`null` when it is not a scope).
pub fn full_scope(text: &str) -> serde_json::Value {
    serde_json::from_str::<domain::webhook::shaping::Scope>(text)
        .ok()
        .and_then(|s| serde_json::to_value(s).ok())
        .unwrap_or(serde_json::Value::Null)
}

/// One event, wherever it was found.
pub struct Event {
    pub event_type: String,
    pub scope: serde_json::Value,
    pub data: Option<serde_json::Value>,
}

/// How many of the events were found where.
#[derive(Default, Debug)]
pub struct EventSources {
    pub outbox: usize,
    pub queued_pending: usize,
    pub queued_processed: usize,
    pub in_both: usize,
    /// The endpoint's deliveries.
    pub deliveries: usize,
}

/// Every event of the store, each event_ref once: from the outbox and the
/// events queue, with its data from the outbox, the queue (while not fanned
/// out), or else the delivery of it to `endpoint` (a paused endpoint
/// subscribed to them all holds one of each). A delivery of an event not
/// found, one that disagrees with it, or a second delivery of one event is
/// a problem.
pub async fn read_events(
    db: &mut sqlx::AnyConnection,
    endpoint: &str,
    problems: &mut Vec<String>,
) -> (BTreeMap<String, Event>, EventSources) {
    let mut events: BTreeMap<String, Event> = BTreeMap::new();
    let mut sources = EventSources::default();
    let outbox: Vec<(String, String, String, String)> = sqlx::query_as(
        "SELECT event_ref, public_event_type, scope, data FROM outbox ORDER BY event_ref",
    )
    .fetch_all(&mut *db)
    .await
    .unwrap();
    for (event_ref, event_type, scope, data) in outbox {
        sources.outbox += 1;
        events.insert(
            event_ref,
            Event {
                event_type,
                scope: full_scope(&scope),
                data: Some(json(&data)),
            },
        );
    }
    let queued: Vec<(String, String, String, Option<String>, String)> = sqlx::query_as(
        "SELECT event_ref, public_event_type, scope, data, status FROM events ORDER BY event_ref",
    )
    .fetch_all(&mut *db)
    .await
    .unwrap();
    for (event_ref, event_type, scope, data, status) in queued {
        if status == "pending" {
            sources.queued_pending += 1;
        } else {
            sources.queued_processed += 1;
        }
        let data = data.map(|d| json(&d));
        match events.get_mut(&event_ref) {
            Some(e) => {
                sources.in_both += 1;
                if e.event_type != event_type || e.scope != full_scope(&scope) {
                    problems.push(format!(
                        "event {event_ref} differs between the outbox and the queue"
                    ));
                }
                if data.is_some() && e.data != data {
                    problems.push(format!(
                        "event {event_ref}'s data differs between the outbox and the queue"
                    ));
                }
            }
            None => {
                events.insert(
                    event_ref,
                    Event {
                        event_type,
                        scope: full_scope(&scope),
                        data,
                    },
                );
            }
        }
    }
    let sql = format!(
        "SELECT event_ref, public_event_type, {} AS event_data FROM webhook_deliveries \
         WHERE endpoint_ref = $1 ORDER BY event_ref",
        store::dispatch::EVENT_DATA_OF_ROW
    );
    let deliveries: Vec<(String, String, String)> = sqlx::query_as(&sql)
        .bind(endpoint)
        .fetch_all(&mut *db)
        .await
        .unwrap();
    sources.deliveries = deliveries.len();
    let mut delivered: HashMap<String, usize> = HashMap::new();
    for (event_ref, event_type, data) in deliveries {
        *delivered.entry(event_ref.clone()).or_default() += 1;
        let data = json(&store::packed::unpack(&data));
        match events.get_mut(&event_ref) {
            None => problems.push(format!(
                "a delivery of event {event_ref} ({event_type}), which is neither in the outbox nor in the queue"
            )),
            Some(e) if e.event_type != event_type => problems.push(format!(
                "event {event_ref} is {} but its delivery says {event_type}",
                e.event_type
            )),
            Some(e) => match &e.data {
                None => e.data = Some(data),
                Some(d) if *d != data => problems.push(format!(
                    "event {event_ref}'s delivery carries other data than the event"
                )),
                Some(_) => {}
            },
        }
    }
    for (event_ref, n) in delivered {
        if n > 1 {
            problems.push(format!(
                "event {event_ref} has {n} deliveries to one endpoint"
            ));
        }
    }
    (events, sources)
}

/// One answer to a keyed POST.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub replayed: bool,
    pub raw: String,
    pub body: serde_json::Value,
}

impl Answer {
    pub fn data(&self) -> &serde_json::Value {
        &self.body["data"]
    }

    /// The answer in a line, for a failure message.
    pub fn short(&self) -> String {
        let mut raw = self.raw.clone();
        raw.truncate(300);
        format!("{} replayed={} {raw}", self.status, self.replayed)
    }
}

/// A POST of `body` to `url` as `secret` with `Idempotency-Key: key` (and
/// `If-Match` when given); `Err` when no answer came.
pub async fn post(
    client: &reqwest::Client,
    url: &str,
    secret: &str,
    key: &str,
    if_match: Option<&str>,
    body: &serde_json::Value,
) -> Result<Answer, String> {
    let mut req = client
        .post(url)
        .bearer_auth(secret)
        .header("Idempotency-Key", key)
        .json(body);
    if let Some(tag) = if_match {
        req = req.header("If-Match", tag);
    }
    let r = req.send().await.map_err(|e| format!("{e:?}"))?;
    let status = r.status().as_u16();
    let replayed = r
        .headers()
        .get("idempotent-replayed")
        .is_some_and(|v| v.as_bytes() == b"true");
    let raw = r.text().await.map_err(|e| format!("{e:?}"))?;
    Ok(Answer {
        status,
        replayed,
        body: json(&raw),
        raw,
    })
}

/// What one keyed request answered, if it answered.
pub type Sent = Result<Answer, String>;

/// A keyed request after the restart: a 409 (the key still executing) or
/// 503 (a backing service busy) keeps nothing (contract section 4), so a
/// client retries it; anything else is the key's answer. Retries for up to
/// 15 s; the number of retries taken is returned beside the answer.
pub async fn settled<F, Fut>(send: F) -> (Sent, usize)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Sent>,
{
    // The restarted server finishes what it holds meanwhile.
    let poll = Poll::within(Duration::from_secs(15)).every(Duration::from_millis(200));
    let mut retries = 0;
    loop {
        let a = send().await;
        let retry = matches!(&a, Ok(a) if a.status == 409 || a.status == 503);
        if !retry || !poll.next().await {
            return (a, retries);
        }
        retries += 1;
    }
}

/// Request `i` of `n`, for [`replay_all`] and [`fire_and_kill`].
pub trait Keyed: Fn(usize) -> Self::Fut + Clone + Send + Sync + 'static {
    type Fut: Future<Output = Sent> + Send;
}

impl<F, Fut> Keyed for F
where
    F: Fn(usize) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Sent> + Send,
{
    type Fut = Fut;
}

/// Requests `0..n` by `send`, all at once, each [`settled`]: the answers
/// by request number, and the retries taken in all.
pub async fn replay_all(n: usize, send: impl Keyed) -> (BTreeMap<usize, Sent>, usize) {
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let send = send.clone();
            tokio::spawn(async move { settled(|| send(i)).await })
        })
        .collect();
    let mut answers = BTreeMap::new();
    let mut retries = 0;
    for (i, t) in tasks.into_iter().enumerate() {
        let (a, r) = t.await.unwrap();
        retries += r;
        answers.insert(i, a);
    }
    (answers, retries)
}

/// Two waves of keyed requests and the SIGKILL in their midst.
pub struct Waves<'a> {
    /// The requests are `0..n`; wave A is `0..wave_a`, wave B the rest.
    pub n: usize,
    pub wave_a: usize,
    /// What a request does, for messages ("create", "pay").
    pub what: &'a str,
    /// Counts wave B's rows in the store, with `$1` bound to `b_pattern`.
    pub count_b: &'a str,
    pub b_pattern: String,
    /// Reads the store beside the server.
    pub probe_url: &'a str,
    /// The kill is decided once this many of wave B's rows are in the
    /// store.
    pub kill_at: i64,
}

impl Waves<'_> {
    /// When to decide the kill so that it lands while wave B is being
    /// written: on PostgreSQL (`fleet`), where wave B's requests commit one
    /// by one, at half of wave B; on SQLite at its first commit, because
    /// requests that arrive together commit as one group, and half of wave
    /// B in the store can be all of it, with nothing uncommitted left to
    /// cut off.
    pub fn amid_b(n: usize, wave_a: usize, fleet: bool) -> i64 {
        if fleet {
            ((n - wave_a) / 2) as i64
        } else {
            1
        }
    }
}

/// What the kill left: the answers that came before it and the requests
/// it cut off.
pub struct Killed {
    /// Answers complete before the kill, by request number.
    pub before: BTreeMap<usize, Answer>,
    /// Requests that ended with a transport error after the kill.
    pub lost: BTreeMap<usize, String>,
    /// How many answers had been seen when the kill was decided.
    pub at_decision: usize,
    /// Wave B's rows in the store at the kill.
    pub b_in_store: i64,
    /// Wave B was fired this long after wave A.
    pub b_fired_after: Duration,
    /// The SIGKILL came this long after wave A was fired.
    pub killed_after: Duration,
    pub killed: Instant,
    pub pid: u32,
    /// The killed server's log.
    pub log: String,
}

/// Fires wave A (`waves.wave_a` requests by `send`) at once, then wave B
/// (the rest) at once as soon as wave A starts answering, and SIGKILLs
/// `server` once `waves.kill_at` of wave B are in the store. A request
/// that failed while the server was up fails the test, and so does a kill
/// that cut off nothing.
///
/// A kill decided by answers alone finds nothing in flight with SQLite:
/// the requests of one burst take the single writer in turn, and each
/// answers only after its request log, written after every other
/// request's unit of work, so all of them have committed before the first
/// answer comes out. Watching the store instead, the kill lands with wave
/// A answered or answering, part of wave B committed but not answered, and
/// the rest of wave B not committed.
pub async fn fire_and_kill(server: &mut Process, waves: Waves<'_>, send: impl Keyed) -> Killed {
    let mut probe = probe(waves.probe_url).await;
    let (go_b, go_b_rx) = tokio::sync::watch::channel(false);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for i in 0..waves.n {
        let (send, mut go, tx) = (send.clone(), go_b_rx.clone(), tx.clone());
        tokio::spawn(async move {
            if i >= waves.wave_a && go.wait_for(|go| *go).await.is_err() {
                return;
            }
            let a = send(i).await;
            let _ = tx.send((i, a, Instant::now()));
        });
    }
    drop(tx);
    let fired = Instant::now();
    let mut before: BTreeMap<usize, Answer> = BTreeMap::new();
    let mut failed_before_kill: Vec<String> = Vec::new();
    let mut b_in_store = 0;
    let mut b_fired_after = None;
    // The store is looked at every millisecond: the kill must land while
    // wave B is being written.
    let poll = Poll::within(Duration::from_secs(30)).every(Duration::from_millis(1));
    loop {
        while let Ok((i, a, _)) = rx.try_recv() {
            match a {
                Ok(a) => {
                    before.insert(i, a);
                }
                Err(e) => failed_before_kill.push(format!("key {i}: {e}")),
            }
            if b_fired_after.is_none() {
                go_b.send_replace(true);
                b_fired_after = Some(fired.elapsed());
            }
        }
        if b_fired_after.is_some() {
            b_in_store = sqlx::query_scalar::<_, i64>(waves.count_b)
                .bind(&waves.b_pattern)
                .fetch_one(&mut probe)
                .await
                .unwrap();
            if b_in_store >= waves.kill_at {
                break;
            }
        }
        poll.tick(|| {
            format!(
                "{} {}s answered and {b_in_store} of wave B are in the store; no kill yet\n{}",
                before.len(),
                waves.what,
                server.log_tail()
            )
        })
        .await;
    }
    let pid = server.pid();
    let killed = Instant::now();
    server.kill_hard();
    let at_decision = before.len();
    drop(probe.close().await);
    // Answers that were complete before the kill may still be in the
    // channel; everything else ends with a transport error.
    let mut lost: BTreeMap<usize, String> = BTreeMap::new();
    while let Some((i, a, at)) = rx.recv().await {
        match a {
            Ok(a) => {
                before.insert(i, a);
            }
            Err(e) if at < killed => failed_before_kill.push(format!("key {i}: {e}")),
            Err(e) => {
                lost.insert(i, e);
            }
        }
    }
    let log = server.log_tail();
    assert!(
        failed_before_kill.is_empty(),
        "{}s failed before the kill (the server was up):\n{}\n{log}",
        waves.what,
        failed_before_kill.join("\n")
    );
    assert!(
        !lost.is_empty(),
        "every {} answered before the kill landed; the test killed nothing in flight",
        waves.what
    );
    Killed {
        before,
        lost,
        at_decision,
        b_in_store,
        b_fired_after: b_fired_after.unwrap_or_default(),
        killed_after: killed - fired,
        killed,
        pid,
        log,
    }
}

/// The answers to each key across the kill: how many of the keys cut off
/// replayed (they had committed) and how many ran after the restart.
#[derive(Default)]
pub struct Replays {
    pub replayed_lost: usize,
    pub ran_lost: usize,
}

impl Replays {
    /// Request `i`'s first answer after the restart, when it is `expect`;
    /// otherwise a problem, and `None`.
    pub fn after<'a>(
        i: usize,
        after: &'a BTreeMap<usize, Sent>,
        expect: u16,
        problems: &mut Vec<String>,
    ) -> Option<&'a Answer> {
        match &after[&i] {
            Ok(a) if a.status == expect => Some(a),
            Ok(a) => {
                problems.push(format!("key {i}: after the restart {}", a.short()));
                None
            }
            Err(e) => {
                problems.push(format!("key {i}: no answer after the restart: {e}"));
                None
            }
        }
    }

    /// The checks every key shares: `now` (its first answer after the
    /// restart) replays its answer from before the kill, if it had one
    /// (`reference` names what that answer made); and the second replay
    /// `again` repeats `now`.
    pub fn check(
        &mut self,
        i: usize,
        original: Option<&Answer>,
        now: &Answer,
        again: &Sent,
        reference: impl Fn(&Answer) -> Option<&str>,
        problems: &mut Vec<String>,
    ) {
        if let Some(original) = original {
            if !now.replayed {
                problems.push(format!(
                    "key {i}: answered {} before the kill, but ran again after it (no Idempotent-Replayed): {}",
                    reference(original).unwrap_or("?"),
                    now.short()
                ));
            }
            if now.status != original.status || now.body != original.body {
                problems.push(format!(
                    "key {i}: replay differs from the original answer\n  before: {}\n  after:  {}",
                    original.short(),
                    now.short()
                ));
            }
        } else if now.replayed {
            self.replayed_lost += 1;
        } else {
            self.ran_lost += 1;
        }
        match again {
            Ok(a) if a.status == now.status && a.replayed && a.body == now.body => {}
            Ok(a) => problems.push(format!(
                "key {i}: second replay differs\n  first:  {}\n  second: {}",
                now.short(),
                a.short()
            )),
            Err(e) => problems.push(format!("key {i}: no answer to the second replay: {e}")),
        }
    }
}

/// The end of a crash scenario `[label]`: no problem (`what` says after
/// what, the logs follow), and the restarted server exited cleanly.
pub fn verdict(label: &str, what: &str, problems: &[String], logs: &str, clean_exit: bool) {
    assert!(
        problems.is_empty(),
        "[{label}] {} problems {what}:\n{}\n{logs}",
        problems.len(),
        problems.join("\n")
    );
    assert!(
        clean_exit,
        "[{label}] the restarted server did not exit cleanly on SIGTERM\n{logs}"
    );
}

/// Runs a crash scenario `scenario(label, dir, envs, probe)` over the
/// embedded store: a SQLite file in a fresh folder `dir`, the variables
/// `envs` that name it, and `probe`, a read-only URL of the same file for
/// the scenario's own checks.
pub async fn on_embedded_store<F, Fut>(scenario: F)
where
    F: FnOnce(&'static str, PathBuf, Envs, String) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("data/billing.db");
    let store = format!("sqlite://{}", file.display());
    let probe = format!("sqlite://{}?mode=ro", file.display());
    scenario(
        "embedded",
        dir.path().to_owned(),
        vec![("BILLING_STORE__URL", store)],
        probe,
    )
    .await;
}

/// Runs a crash scenario over a fleet store (only with
/// `BILLING_TEST_FLEET=1`; `what` names it otherwise): a fresh PostgreSQL
/// database (named after `db_prefix`, dropped whatever the outcome; the
/// scenario's panic is the test's) and Redis database `redis_db`, emptied
/// and marked as fed for it. The events queue stays in the store, so that
/// the server joins no broker queue and its events can be counted there.
pub async fn on_fleet_store<F, Fut>(what: &str, db_prefix: &str, redis_db: u8, scenario: F)
where
    F: FnOnce(&'static str, PathBuf, Envs, String) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    if !fleet(what) {
        return;
    }
    let db = FreshDatabase::create(db_prefix).await;
    let scheduler = format!("{REDIS_URL}/{redis_db}");
    fresh_redis_schedule(&scheduler, &db.url).await;
    let dir = tempfile::tempdir().unwrap();
    let envs = fleet_env(&db.url, "embedded", &scheduler);
    let outcome = tokio::spawn(scenario(
        "fleet",
        dir.path().to_owned(),
        envs,
        db.url.clone(),
    ))
    .await;
    db.remove().await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

/// The two tests of a crash scenario: `$embedded` over the embedded store
/// (always), `$fleet` over a fleet store (`on_fleet_store` with `$what`,
/// `$db_prefix` and Redis database `$redis_db`; only with
/// BILLING_TEST_FLEET=1). The scenario is `$body`, with `$label`, `$dir`
/// (`&Path`), `$envs`, `$url` (`&str`, the probe of the store) and `$fleet`
/// (which of the two runs) bound.
macro_rules! crash_tests {
    (
        $embedded:ident, $fleet_test:ident,
        on_fleet_store($what:literal, $db_prefix:literal, $redis_db:literal),
        |$label:ident, $dir:ident, $envs:ident, $url:ident, $fleet:ident| $body:expr
    ) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $embedded() {
            $crate::common::crash::on_embedded_store(|$label, dir, $envs, url| async move {
                let ($dir, $url, $fleet) = (dir.as_path(), url.as_str(), false);
                $body.await
            })
            .await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $fleet_test() {
            // Redis database `$redis_db` is this test's alone.
            $crate::common::crash::on_fleet_store(
                $what,
                $db_prefix,
                $redis_db,
                |$label, dir, $envs, url| async move {
                    let ($dir, $url, $fleet) = (dir.as_path(), url.as_str(), true);
                    $body.await
                },
            )
            .await;
        }
    };
}
pub(crate) use crash_tests;
