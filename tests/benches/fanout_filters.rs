//! Benchmark of the fan-out with filtered subscriptions (issue 46, contract
//! 13.3): how many events per second the intake accepts and fans out
//! (`Dispatch::write_events`, the write the event queue's group commit
//! makes, with the plan of `store::fanout` inside it) when every
//! subscription carries a filter, beside the same subscriptions without.
//!
//! Per backend, four runs alternated A, B, A, B, each over a fresh store
//! (`TestApp`) with `FANOUT_SUBSCRIPTIONS` (default 100) endpoints, each
//! subscribed to `refund.created` for the whole sandbox through the API
//! (`POST /api/v1/webhook_endpoints/{ref}/subscriptions`):
//! - A: no filter: every event makes one delivery per endpoint;
//! - B: each subscription with a filter on the delivered body: a range of
//!   `data.amount.value` (`$gte`/`$lt` over two thirds of the amounts, its
//!   start different per subscription) and `data.amount.currency` `$in`
//!   three of the four currencies the events use, so that about half the
//!   subscriptions match each event.
//!
//! A run writes `FANOUT_EVENTS` (default 2,000) `refund.created` events
//! (about 500 bytes of data: the catalogue's refund with its own reference
//! and an amount Money object `{"currency","unit","value"}` drawn from a
//! fixed seed, so both configurations get the same events) in batches of
//! `FANOUT_BATCH` (default 64) through `write_events` without leasing: no
//! dispatcher runs, the deliveries are only written. One call at a time;
//! the events are built before the clock starts and one untimed batch warms
//! the store first. Measured: the calls' wall time, as events/s and
//! deliveries/s, and this process's CPU time (on PostgreSQL the server's is
//! not counted).
//!
//! Checked: every event new, and each run's delivery count the expected
//! one (A: events x subscriptions; B: computed here from the amounts and
//! the ranges, not with the filter's code). A wrong count fails the binary;
//! a missed goal does not (`bench_summary`).
//!
//! `FANOUT_MATCH_ALL=1` widens B's filters (the same keys and operators,
//! the ranges over every amount, `$in` all four currencies) so that they
//! admit every event: B then writes A's deliveries, and B/A is the filters'
//! cost alone.
//!
//! Goal (issue 46): B/A >= 0.8 in events/s, over the totals of the runs
//! (each pair's ratio is printed too).
//!
//! Then, with no store, the filters' own work for one batch, timed
//! in-process (the fastest of repeated rounds) with the functions the plan
//! uses: parsing the stored filters (once per batch), building the body
//! each filter is evaluated on (`store::fanout::filter_body`, with its
//! parts: the data parsed, the body made a tree) and evaluating them, per
//! event, as a share of B's time per event.
//!
//! Backends: `FANOUT_BACKEND` = `sqlite`, `postgres` or `both`; unset,
//! SQLite alone, or both when `BILLING_TEST_FLEET=1` (PostgreSQL: the
//! harness's server, `BILLING_TEST_PG_URL`, a fresh database per run,
//! `ANALYZE`d after its setup).
//!
//! Run with `cargo bench -p billing-tests --bench fanout_filters` (and
//! `BILLING_TEST_FLEET=1` for PostgreSQL too); a quick run:
//! `FANOUT_EVENTS=256 cargo bench -p billing-tests --bench fanout_filters`.

/// The allocator of the `billing` binary, so that the figures are its own.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use billing_tests::{bench_summary, env_num, Backend, TestApp};
use domain::webhook::body::DeliveredBody;
use domain::webhook::catalogue;
use domain::webhook::filter::Filter;
use domain::webhook::shaping::Scope;
use domain::{Prefix, Ref, Timestamp};
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use std::process::ExitCode;
use std::time::{Duration, Instant};
use store::fanout::{filter_body, EventRow};

const EVENT_TYPE: &str = "refund.created";
const DTO_VERSION: u32 = 1;
/// The goal: filtered over unfiltered events/s.
const TARGET_RATIO: f64 = 0.8;
/// The events' currencies, drawn evenly; a filter leaves one out.
const CURRENCIES: [&str; 4] = ["EUR", "USD", "GBP", "CHF"];
/// Amounts are drawn from `0..MAX_VALUE` minor units; a filter's range
/// spans `WIDTH` of them (two thirds).
const MAX_VALUE: u64 = 20_000;
const WIDTH: u64 = 13_334;
/// The seed of the amounts: every run gets the same events.
const SEED: u64 = 46;
/// How long each step of the in-process costs is repeated.
const COST_TIME: Duration = Duration::from_millis(400);

struct Config {
    events: usize,
    batch: usize,
    subscriptions: usize,
    backends: Vec<Backend>,
    /// B's filters admit every event (`FANOUT_MATCH_ALL=1`).
    match_all: bool,
}

fn config() -> Result<Config, String> {
    let backends = match std::env::var("FANOUT_BACKEND").as_deref().map(str::trim) {
        Ok("sqlite") => vec![Backend::Sqlite],
        Ok("postgres") => vec![Backend::Postgres],
        Ok("both") => vec![Backend::Sqlite, Backend::Postgres],
        Ok(other) => {
            return Err(format!(
                "FANOUT_BACKEND must be sqlite, postgres or both, got {other:?}"
            ))
        }
        Err(_) if billing_tests::fleet_enabled() => vec![Backend::Sqlite, Backend::Postgres],
        Err(_) => vec![Backend::Sqlite],
    };
    Ok(Config {
        events: env_num("FANOUT_EVENTS", 2_000)?,
        batch: env_num("FANOUT_BATCH", 64)?,
        subscriptions: env_num("FANOUT_SUBSCRIPTIONS", 100)?,
        backends,
        match_all: std::env::var("FANOUT_MATCH_ALL").is_ok_and(|v| v.trim() == "1"),
    })
}

fn backend_name(backend: Backend) -> &'static str {
    match backend {
        Backend::Sqlite => "SQLite",
        Backend::Postgres => "PostgreSQL",
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// A: no filter.
    Plain,
    /// B: a filter on every subscription.
    Filtered,
}

impl Mode {
    fn label(self) -> &'static str {
        match self {
            Mode::Plain => "A unfiltered",
            Mode::Filtered => "B filtered  ",
        }
    }
}

// ------------------------------------------------------------ the workload

/// An event's amount: minor units and an index into `CURRENCIES`.
struct Amount {
    value: u64,
    currency: usize,
}

/// `n` amounts drawn from `SEED`.
fn amounts(n: usize) -> Vec<Amount> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(SEED);
    (0..n)
        .map(|_| Amount {
            value: rng.gen_range(0..MAX_VALUE),
            currency: rng.gen_range(0..CURRENCIES.len()),
        })
        .collect()
}

/// What subscription `i` of B admits: `lo <= value < hi`, any currency
/// but `without`.
struct Window {
    lo: u64,
    hi: u64,
    without: Option<usize>,
}

impl Window {
    /// Subscription `i`'s, or one admitting every event (`all`).
    fn of(i: usize, all: bool) -> Window {
        if all {
            return Window {
                lo: 0,
                hi: MAX_VALUE,
                without: None,
            };
        }
        // Starts spread over 0..=(MAX_VALUE - WIDTH), in a shuffled order.
        let lo = (i as u64 * 37 % 100) * (MAX_VALUE - WIDTH) / 99;
        Window {
            lo,
            hi: lo + WIDTH,
            without: Some(i % CURRENCIES.len()),
        }
    }

    /// The filter as the API takes it (contract 13.3): Money values,
    /// strings of digits, compare as numbers with the bounds.
    fn filter(&self) -> Value {
        let currencies: Vec<&str> = CURRENCIES
            .iter()
            .enumerate()
            .filter(|(c, _)| Some(*c) != self.without)
            .map(|(_, name)| *name)
            .collect();
        json!({
            "data.amount.value": {"$gte": self.lo, "$lt": self.hi},
            "data.amount.currency": {"$in": currencies},
        })
    }

    /// Whether the filter admits an event of `amount`, worked out here
    /// without the filter's code.
    fn admits(&self, amount: &Amount) -> bool {
        (self.lo..self.hi).contains(&amount.value) && Some(amount.currency) != self.without
    }
}

/// The event rows of `amounts` in `environment`, in batches of `batch`:
/// the catalogue's refund with its own reference and amount.
fn batches(environment: &Ref, amounts: &[Amount], batch: usize) -> Vec<Vec<EventRow>> {
    let example = catalogue::example(EVENT_TYPE, DTO_VERSION).expect("a catalogue example");
    let scope = Scope {
        product_refs: vec![Ref::generate(Prefix::Product).into_string()],
        buyer_ref: Some(Ref::generate(Prefix::Buyer).into_string()),
        beneficiary_business_ref: None,
    };
    let scope_json = serde_json::to_string(&scope).expect("a scope");
    let row = |a: &Amount| {
        let mut data = example.clone();
        data["refund_ref"] = json!(Ref::generate(Prefix::Refund).as_str());
        data["amount"] = json!({
            "currency": CURRENCIES[a.currency], "unit": "minor", "value": a.value.to_string(),
        });
        EventRow {
            event_ref: Ref::generate(Prefix::Event),
            environment_ref: environment.clone(),
            public_event_type: EVENT_TYPE.to_owned(),
            occurred_at: Timestamp::now(),
            scope: scope.clone(),
            scope_json: scope_json.clone(),
            data_packed: Some(store::packed::pack(&data.to_string()).into_owned()),
            data_json: data.to_string(),
            order: None,
        }
    };
    amounts
        .chunks(batch)
        .map(|chunk| chunk.iter().map(row).collect())
        .collect()
}

/// The deliveries `mode` makes for `amounts` among `cfg`'s subscriptions.
fn expected(mode: Mode, amounts: &[Amount], cfg: &Config) -> usize {
    let n = cfg.subscriptions;
    match mode {
        Mode::Plain => amounts.len() * n,
        Mode::Filtered => (0..n)
            .map(|i| Window::of(i, cfg.match_all))
            .map(|w| amounts.iter().filter(|a| w.admits(a)).count())
            .sum(),
    }
}

/// The process's CPU time so far (user and system, from `/proc/self/stat`,
/// in ticks of 10 ms).
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after_name = stat.rsplit(')').next().unwrap_or_default();
    let ticks: u64 = after_name
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|t| t.parse::<u64>().ok())
        .sum();
    Duration::from_millis(ticks * 10)
}

// ------------------------------------------------------------------- a run

/// What one run measured.
struct Run {
    mode: Mode,
    events: usize,
    deliveries: usize,
    wall: Duration,
    cpu: Duration,
}

impl Run {
    fn events_per_s(&self) -> f64 {
        self.events as f64 / self.wall.as_secs_f64()
    }

    fn deliveries_per_s(&self) -> f64 {
        self.deliveries as f64 / self.wall.as_secs_f64()
    }

    fn us_per_event(&self) -> f64 {
        self.wall.as_secs_f64() * 1e6 / self.events as f64
    }
}

/// `cfg`'s endpoints each subscribed to `EVENT_TYPE` (with `mode`'s
/// filter) through the API.
async fn subscribe(app: &TestApp, mode: Mode, cfg: &Config) {
    for i in 0..cfg.subscriptions {
        let url = format!("http://127.0.0.1:9/fanout/{i}");
        let r = app
            .post("/api/v1/webhook_endpoints", json!({ "url": url }))
            .send()
            .await;
        r.expect(201);
        let endpoint = r.data()["endpoint_ref"].as_str().expect("a reference");
        let mut body = json!({
            "public_event_type": EVENT_TYPE, "scope_type": "environment",
            "scope_ref": app.sandbox.environment_ref, "dto_version": DTO_VERSION,
        });
        if mode == Mode::Filtered {
            body["filter"] = Window::of(i, cfg.match_all).filter();
        }
        let r = app
            .post(
                &format!("/api/v1/webhook_endpoints/{endpoint}/subscriptions"),
                body,
            )
            .send()
            .await;
        r.expect(201);
    }
}

/// One run of `mode` over a fresh store: the first batch of `amounts`
/// warms it, the others are timed.
async fn run(
    backend: Backend,
    mode: Mode,
    cfg: &Config,
    amounts: &[Amount],
) -> Result<Run, String> {
    let app = TestApp::spawn(backend).await;
    subscribe(&app, mode, cfg).await;
    if backend == Backend::Postgres {
        // The harness's server runs without autovacuum.
        sqlx::query("ANALYZE")
            .execute(&app.raw_pool().await)
            .await
            .map_err(|e| format!("ANALYZE: {e}"))?;
    }
    let environment = Ref::from_trusted(app.sandbox.environment_ref.clone());
    let mut batches = batches(&environment, amounts, cfg.batch).into_iter();
    let dispatch = app.store.dispatch();
    let warm = batches.next().unwrap_or_default();
    let warm_len = warm.len();
    dispatch
        .write_events::<()>(warm, None)
        .await
        .map_err(|e| format!("the warm-up batch: {e}"))?;
    let (mut events, mut deliveries, mut new) = (0, 0, 0);
    let (cpu, started) = (cpu_time(), Instant::now());
    for batch in batches {
        events += batch.len();
        let written = dispatch
            .write_events::<()>(batch, None)
            .await
            .map_err(|e| format!("write_events: {e}"))?;
        new += written.new.len();
        deliveries += written.left_due.len();
    }
    let (wall, cpu) = (started.elapsed(), cpu_time().saturating_sub(cpu));
    app.store.close().await;
    let want = expected(mode, &amounts[warm_len..], cfg);
    if new != events || deliveries != want {
        return Err(format!(
            "{}: {new} of {events} events new, {deliveries} deliveries where {want} were expected",
            mode.label().trim_end()
        ));
    }
    Ok(Run {
        mode,
        events,
        deliveries,
        wall,
        cpu,
    })
}

fn print_run(round: usize, r: &Run, subscriptions: usize) {
    println!(
        "   {} #{round}: {} events in {:.2} s: {:.0} events/s, {:.0} deliveries/s ({:.1} of {subscriptions} subscriptions per event); {:.0} us per event; CPU {:.2} cores, {:.0} us per event",
        r.mode.label(),
        r.events,
        r.wall.as_secs_f64(),
        r.events_per_s(),
        r.deliveries_per_s(),
        r.deliveries as f64 / r.events as f64,
        r.us_per_event(),
        r.cpu.as_secs_f64() / r.wall.as_secs_f64(),
        r.cpu.as_secs_f64() * 1e6 / r.events as f64,
    );
}

/// Events/s and microseconds per event over the totals of `runs` of
/// `mode`.
fn total_rate(runs: &[Run], mode: Mode) -> (f64, f64) {
    let of: Vec<&Run> = runs.iter().filter(|r| r.mode == mode).collect();
    let events: usize = of.iter().map(|r| r.events).sum();
    let wall: f64 = of.iter().map(|r| r.wall.as_secs_f64()).sum();
    (events as f64 / wall, wall * 1e6 / events as f64)
}

// ---------------------------------------------------- in-process filter work

/// The filters' work per event, in microseconds, by step.
struct FilterWork {
    parse: f64,
    body: f64,
    data_parse: f64,
    to_value: f64,
    holds: f64,
}

impl FilterWork {
    fn total(&self) -> f64 {
        self.parse + self.body + self.holds
    }
}

/// Microseconds per call of `step`, which makes `calls` calls: its
/// fastest round of those repeated for `COST_TIME` (the fastest, as the
/// machine's other work only adds).
fn per_call(calls: usize, mut step: impl FnMut()) -> f64 {
    let started = Instant::now();
    let mut fastest = Duration::MAX;
    while fastest == Duration::MAX || started.elapsed() < COST_TIME {
        let round = Instant::now();
        step();
        fastest = fastest.min(round.elapsed());
    }
    fastest.as_secs_f64() * 1e6 / calls as f64
}

/// Times, with no store, the work the plan does for B's filters on one
/// batch: each stored filter parsed (once per batch), then per event and
/// subscription the body built (`filter_body`) and the filter evaluated.
fn filter_work(cfg: &Config, amounts: &[Amount]) -> FilterWork {
    let environment = Ref::generate(Prefix::Environment);
    let n = cfg.subscriptions;
    let batch = &batches(
        &environment,
        &amounts[..cfg.batch.min(amounts.len())],
        cfg.batch,
    )[0];
    let texts: Vec<String> = (0..n)
        .map(|i| Window::of(i, cfg.match_all).filter().to_string())
        .collect();
    let filters: Vec<Filter> = texts
        .iter()
        .map(|t| Filter::parse(&serde_json::from_str(t).expect("json")).expect("a filter"))
        .collect();
    let pairs = batch.len() * n;
    let parse = per_call(n, || {
        for t in &texts {
            let v: Value = serde_json::from_str(t).unwrap_or_default();
            std::hint::black_box(Filter::parse(&v).ok());
        }
    }) * n as f64
        / batch.len() as f64;
    let per_pair = |f: &mut dyn FnMut(&EventRow)| {
        per_call(pairs, || {
            for e in batch {
                for _ in 0..n {
                    f(e);
                }
            }
        }) * n as f64
    };
    let body = per_pair(&mut |e| {
        std::hint::black_box(filter_body(e, DTO_VERSION, DTO_VERSION, None));
    });
    let data_parse = per_pair(&mut |e| {
        std::hint::black_box(serde_json::from_str::<Value>(&e.data_json).ok());
    });
    let data: Vec<Value> = batch
        .iter()
        .map(|e| serde_json::from_str(&e.data_json).unwrap_or_default())
        .collect();
    let to_value = per_call(pairs, || {
        for (e, d) in batch.iter().zip(&data) {
            for _ in 0..n {
                let b = DeliveredBody::new(
                    e.event_ref.as_str(),
                    &e.public_event_type,
                    DTO_VERSION,
                    e.occurred_at,
                    e.environment_ref.as_str(),
                    d,
                );
                std::hint::black_box(serde_json::to_value(&b).ok());
            }
        }
    }) * n as f64;
    let bodies: Vec<Value> = batch
        .iter()
        .map(|e| filter_body(e, DTO_VERSION, DTO_VERSION, None))
        .collect();
    let holds = per_call(pairs, || {
        for b in &bodies {
            for f in &filters {
                std::hint::black_box(f.holds(b));
            }
        }
    }) * n as f64;
    FilterWork {
        parse,
        body,
        data_parse,
        to_value,
        holds,
    }
}

// -------------------------------------------------------------------- main

async fn bench(cfg: Config) -> ExitCode {
    let amounts = amounts(cfg.batch + cfg.events);
    let sample = &batches(&Ref::generate(Prefix::Environment), &amounts[..1], 1)[0][0];
    let matched = expected(Mode::Filtered, &amounts[cfg.batch..], &cfg);
    println!(
        "fan-out intake with filtered subscriptions: {} events of {EVENT_TYPE} per run ({} bytes of data each) in batches of {} through write_events, no dispatcher; {} endpoints, one subscription each; B's filters admit {:.1} % of (event, subscription) pairs",
        cfg.events,
        sample.data_json.len(),
        cfg.batch,
        cfg.subscriptions,
        matched as f64 * 100.0 / (cfg.events * cfg.subscriptions) as f64,
    );
    println!(
        "   filter of B's subscription 0: {}",
        Window::of(0, cfg.match_all).filter()
    );
    let (mut verdicts, mut errors) = (Vec::new(), Vec::new());
    let mut b_times = Vec::new();
    for &backend in &cfg.backends {
        println!();
        println!("== {}", backend_name(backend));
        let mut runs = Vec::new();
        let modes = [Mode::Plain, Mode::Filtered, Mode::Plain, Mode::Filtered];
        for (i, mode) in modes.into_iter().enumerate() {
            match run(backend, mode, &cfg, &amounts).await {
                Ok(r) => {
                    print_run(i / 2 + 1, &r, cfg.subscriptions);
                    runs.push(r);
                }
                Err(e) => errors.push(format!("{}: {e}", backend_name(backend))),
            }
        }
        if runs.len() != modes.len() {
            continue;
        }
        let pairs: Vec<String> = runs
            .chunks(2)
            .map(|p| format!("{:.2}", p[1].events_per_s() / p[0].events_per_s()))
            .collect();
        let (a, a_us) = total_rate(&runs, Mode::Plain);
        let (b, b_us) = total_rate(&runs, Mode::Filtered);
        let ratio = b / a;
        println!(
            "   B/A events/s: {ratio:.2} over the totals ({b:.0} / {a:.0}); per pair {}",
            pairs.join(", ")
        );
        b_times.push((backend, a_us, b_us));
        verdicts.push(format!(
            "{}: filtered fan-out {b:.0} events/s, unfiltered {a:.0} events/s: B/A {ratio:.2} (goal >= {TARGET_RATIO}) {}",
            backend_name(backend),
            if ratio >= TARGET_RATIO { "PASS" } else { "MISS" }
        ));
    }
    println!();
    println!(
        "== the filters' own work, in-process, no store (one batch of {}, {} subscriptions)",
        cfg.batch, cfg.subscriptions
    );
    let w = filter_work(&cfg, &amounts);
    println!(
        "   per event: parse the stored filters {:.1} us (once per batch), build the bodies {:.1} us (filter_body; its data parsed {:.1} us, its body made a tree {:.1} us), evaluate {:.1} us; total {:.1} us ({:.2} us per subscription)",
        w.parse,
        w.body,
        w.data_parse,
        w.to_value,
        w.holds,
        w.total(),
        w.total() / cfg.subscriptions as f64
    );
    for (backend, a_us, b_us) in b_times {
        println!(
            "   {}: A {a_us:.0} us per event, B {b_us:.0} us per event; the filters' work is {:.0} % of B's",
            backend_name(backend),
            w.total() * 100.0 / b_us
        );
    }
    bench_summary(&verdicts, &errors)
}

fn main() -> ExitCode {
    let cfg = match config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime builds")
        .block_on(bench(cfg))
}
