//! Benchmark: a year of subscriptions on one test clock (contract 12.4,
//! 14): one advance of a year over `BENCH_SUBSCRIPTIONS` monthly
//! subscriptions, some started with a trial and some changed to another
//! price before it, with the renewals' events delivered as they go.
//!
//! Per backend: the real router over a fresh store (`TestApp`), the
//! embedded event pipeline (`EventPipeline::embedded`: the outbox relay
//! into the store's queue and one dispatcher) and the timed-work runner
//! (`commerce::jobs::run`, as `billing serve` runs it). A local receiver
//! answering 204 is subscribed to `subscription.renewed`.
//!
//! Setup (untimed): two monthly prices, Basic (EUR 10.00) and Premium
//! (EUR 20.00), one test clock at `START`, and `BENCH_SUBSCRIPTIONS`
//! (default 1,000) checkout sessions paid with `pm_card_visa` through the
//! API by `BENCH_CONCURRENCY` client tasks (default 16), one buyer each.
//! Subscription `i` is, by `i % 4`:
//! - 0, plain: Basic from `START`;
//! - 1, trial: Basic with a 14-day trial (`trial_period_days`), which ends
//!   at `TRIAL_END`, inside the measured year;
//! - 2, upgrade: Basic, changed to Premium at `CHANGE_AT` with
//!   `charge_now` (an invoice of 678 at once: the worked example of
//!   `docs/subscriptions.md`, P = 31 days, r = 21 days);
//! - 3, downgrade: Premium, changed to Basic at `CHANGE_AT`, every other
//!   one with `next_invoice` (lines −1355 and +677 waiting for the first
//!   renewal) and the others with `charge_now` (678 into the buyer's
//!   credit balance, which the first renewal applies).
//!
//! The clock is advanced to `CHANGE_AT` for the changes (ten days into
//! the first month), then the setup's events are left to drain (outbox
//! and queue empty) and a PostgreSQL store is `ANALYZE`d (the machine's
//! server runs without autovacuum).
//!
//! Measured: ONE advance of the clock by a year, `CHANGE_AT` to `END`
//! (202), polled every `POLL` until `ready`: the seconds from the advance
//! request to `ready`, and renewals/s over them. Every subscription
//! renews 12 times in that year (a trial: its conversion at `TRIAL_END`,
//! then 11 renewals), so that is 12 × N renewals (and N/4
//! `trial_will_end` jobs). Delivery: when the first `subscription.renewed`
//! reached the receiver, how many had when the clock was ready, and how
//! long after the advance (and after `ready`) the last one arrived.
//!
//! Checked after (anything wrong fails the binary, `bench_summary`): the
//! clock `ready` at `END` with `failed_jobs` 0; every subscription
//! `active`, on the price it should be on, with the period it should have
//! after a year and no pending lines; its invoices: exactly the 12
//! renewal invoices of its kind (one per expected period start, issued
//! then, paid), the number and total of all its invoices (pay, proration,
//! renewals with pending lines or credit applied); the environment's
//! invoice numbers gapless per year (`2026-000001`…, `2027-000001`…),
//! without duplicate, each of the year it was issued in; 12
//! `subscription.renewed` events per subscription, one per expected
//! period start, none twice.
//!
//! Goal: the year's advance under 60 s for 1,000 subscriptions. A missed
//! goal is reported, not a failure.
//!
//! Backends: `BENCH_BACKEND` = `sqlite`, `postgres` or `both`; unset, SQLite
//! alone, or both when `BILLING_TEST_FLEET=1`. PostgreSQL is the harness's
//! server (`BILLING_TEST_PG_URL`), a fresh database cloned from the
//! migrated template. `BENCH_PIPELINE=0` runs without the event pipeline.
//!
//! Run with `cargo bench -p billing-tests --bench subscription_year`; a
//! quick run: `BENCH_SUBSCRIPTIONS=100 cargo bench -p billing-tests --bench
//! subscription_year`.

/// The allocator of the `billing` binary, so that the figures are its own.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use billing_tests::clocks::{self, CLOCKS};
use billing_tests::kit::api::{INVOICES, SUBSCRIPTIONS};
use billing_tests::kit::{at, eur, published_config, sellable};
use billing_tests::receiver::{Behaviour, TestReceiver};
use billing_tests::{bench_summary, env_num, Backend, EventPipeline, TestApp};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The clock's start (every pay), the changes (ten days later), a trial's
/// end (14 days after the start), and the end of the measured year.
const START: &str = "2026-01-05T09:00:00.000Z";
const CHANGE_AT: &str = "2026-01-15T09:00:00.000Z";
const TRIAL_END: &str = "2026-01-19T09:00:00.000Z";
const END: &str = "2027-01-15T09:00:00.000Z";
const TRIAL_DAYS: u32 = 14;
/// Renewals of each subscription in the measured year.
const RENEWALS: usize = 12;
/// The prices, in EUR minor units.
const BASIC: &str = "1000";
const PREMIUM: &str = "2000";
/// How often the clock and the receiver are looked at while measuring.
const POLL: Duration = Duration::from_millis(20);
/// The goal for the year's advance.
const GOAL: Duration = Duration::from_secs(60);
/// How long the setup's events may take to drain, and the renewals' events
/// to arrive after the clock is ready.
const DRAIN_WAIT: Duration = Duration::from_secs(300);
const DELIVERY_WAIT: Duration = Duration::from_secs(180);

struct Config {
    subscriptions: usize,
    concurrency: usize,
    backends: Vec<Backend>,
    /// Whether the event pipeline runs (`BENCH_PIPELINE=0` turns it off,
    /// to see what the year costs alone).
    pipeline: bool,
}

fn config() -> Result<Config, String> {
    let backends = billing_tests::bench_backends()?;
    Ok(Config {
        subscriptions: env_num("BENCH_SUBSCRIPTIONS", 1_000)?,
        concurrency: env_num("BENCH_CONCURRENCY", 16)?,
        backends,
        pipeline: std::env::var("BENCH_PIPELINE").map_or(true, |v| v.trim() != "0"),
    })
}

/// What a subscription is, by its index (module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Plain,
    Trial,
    Upgrade,
    DowngradeNextInvoice,
    DowngradeIntoCredit,
}

impl Kind {
    fn of(i: usize) -> Kind {
        match i % 4 {
            0 => Kind::Plain,
            1 => Kind::Trial,
            2 => Kind::Upgrade,
            _ if (i / 4).is_multiple_of(2) => Kind::DowngradeNextInvoice,
            _ => Kind::DowngradeIntoCredit,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Kind::Plain => "plain",
            Kind::Trial => "trial",
            Kind::Upgrade => "upgrade charge_now",
            Kind::DowngradeNextInvoice => "downgrade next_invoice",
            Kind::DowngradeIntoCredit => "downgrade charge_now (credit)",
        }
    }

    /// Whether it starts on Premium (else Basic).
    fn starts_premium(self) -> bool {
        matches!(self, Kind::DowngradeNextInvoice | Kind::DowngradeIntoCredit)
    }

    /// Whether it ends on Premium (else Basic).
    fn ends_premium(self) -> bool {
        self == Kind::Upgrade
    }

    /// The change made at `CHANGE_AT`, `proration`, if any.
    fn proration(self) -> Option<&'static str> {
        match self {
            Kind::Plain | Kind::Trial => None,
            Kind::Upgrade | Kind::DowngradeIntoCredit => Some("charge_now"),
            Kind::DowngradeNextInvoice => Some("next_invoice"),
        }
    }

    /// The day of the month its periods start on.
    fn day(self) -> u32 {
        if self == Kind::Trial {
            19
        } else {
            5
        }
    }

    /// The period starts of its 12 renewals in the year (a trial's first
    /// is its conversion at `TRIAL_END`).
    fn renewals(self) -> Vec<String> {
        let first = if self == Kind::Trial { 0 } else { 1 };
        (first..first + RENEWALS as u32)
            .map(|k| month(k, self.day()))
            .collect()
    }

    /// Its period at `END`.
    fn period_at_end(self) -> (String, String) {
        let last = if self == Kind::Trial { 11 } else { 12 };
        (month(last, self.day()), month(last + 1, self.day()))
    }

    /// All its invoices (pay, proration, renewals): how many and their
    /// total, in minor units. With P = 31 days and r = 21: the upgrade's
    /// invoice is 1355 − 677 = 678; a downgrade's first renewal is
    /// 1000 − 1355 + 677 = 322 (pending lines) or 1000 − 678 (credit).
    fn invoices(self) -> (usize, i64) {
        match self {
            Kind::Plain => (1 + RENEWALS, 1000 * 13),
            Kind::Trial => (RENEWALS, 1000 * 12),
            Kind::Upgrade => (2 + RENEWALS, 1000 + 678 + 2000 * 12),
            Kind::DowngradeNextInvoice | Kind::DowngradeIntoCredit => {
                (1 + RENEWALS, 2000 + 322 + 1000 * 11)
            }
        }
    }
}

/// 09:00 UTC on `day` of the `k`th month after January 2026.
fn month(k: u32, day: u32) -> String {
    let m = k % 12 + 1;
    let y = 2026 + k / 12;
    format!("{y:04}-{m:02}-{day:02}T09:00:00.000Z")
}

fn string(v: &Value) -> Result<String, String> {
    v.as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("a string, not {v}"))
}

fn minor(v: &Value) -> Result<i64, String> {
    v["value"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("an amount, not {v}"))
}

async fn get(app: &TestApp, path: &str) -> Result<Value, String> {
    let r = app.get(path).send().await;
    if r.status != 200 {
        return Err(format!("GET {path}: {}: {}", r.status, r.text));
    }
    Ok(r.data().clone())
}

/// Every item of the paged list at `path`, 100 a page.
async fn walk(app: &TestApp, path: &str) -> Result<Vec<Value>, String> {
    let sep = if path.contains('?') { '&' } else { '?' };
    let mut all = Vec::new();
    let mut cursor = String::new();
    loop {
        let page = get(app, &format!("{path}{sep}limit=100{cursor}")).await?;
        all.extend(page["items"].as_array().cloned().unwrap_or_default());
        match page["next_cursor"].as_str() {
            Some(c) => cursor = format!("&cursor={c}"),
            None => return Ok(all),
        }
    }
}

/// The catalogue: the configs selling Basic, Basic with a trial, and
/// Premium, and the two prices.
struct Shop {
    basic_config: String,
    trial_config: String,
    premium_config: String,
    basic: String,
    premium: String,
}

async fn shop(app: &TestApp) -> Shop {
    let basic = sellable(app, "Basic", eur(BASIC), Some("month")).await;
    let premium = sellable(app, "Premium", eur(PREMIUM), Some("month")).await;
    let config = |offer: &str, trial: u32| {
        json!({"name": "Bench subscription", "success_url": "https://example.com/ok",
            "line_items": [{"offer_ref": offer, "quantity": 1}],
            "trial_period_days": trial})
    };
    Shop {
        basic_config: published_config(app, config(&basic.offer, 0)).await,
        trial_config: published_config(app, config(&basic.offer, TRIAL_DAYS)).await,
        premium_config: published_config(app, config(&premium.offer, 0)).await,
        basic: basic.price,
        premium: premium.price,
    }
}

/// Runs `work(i)` for every `i < n` on `concurrency` client tasks; the
/// results in the order of `i`.
async fn on_tasks<T, F, Fut>(n: usize, concurrency: usize, work: F) -> Result<Vec<T>, String>
where
    T: Send + 'static,
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<T, String>> + Send,
{
    let next = Arc::new(AtomicUsize::new(0));
    let work = Arc::new(work);
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| {
            let (next, work) = (next.clone(), work.clone());
            tokio::spawn(async move {
                let mut done = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        return Ok::<_, String>(done);
                    }
                    done.push((i, work(i).await?));
                }
            })
        })
        .collect();
    let mut all = Vec::with_capacity(n);
    for t in futures::future::join_all(tasks).await {
        all.extend(t.map_err(|e| format!("a setup task panicked: {e}"))??);
    }
    all.sort_by_key(|(i, _)| *i);
    Ok(all.into_iter().map(|(_, t)| t).collect())
}

/// Subscription `i` paid on `clock` (its kind's config); its reference.
async fn subscribe(app: &TestApp, shop: &Shop, clock: &str, i: usize) -> Result<String, String> {
    let kind = Kind::of(i);
    let config = match kind {
        Kind::Trial => &shop.trial_config,
        k if k.starts_premium() => &shop.premium_config,
        _ => &shop.basic_config,
    };
    let email = format!("year-{i}@bench.example");
    let (_, paid) = clocks::pay_on(app, config, clock, &email, "pm_card_visa").await;
    let sub = &paid["subscription"];
    let (status, end) = match kind {
        Kind::Trial => ("trialing", TRIAL_END.to_owned()),
        _ => ("active", month(1, 5)),
    };
    if sub["status"] != status || sub["current_period_end"] != end.as_str() {
        return Err(format!(
            "{}: not a subscription {status} to {end}: {sub}",
            kind.label()
        ));
    }
    string(&sub["subscription_ref"])
}

/// The change of subscription `i` (`sub`) at `CHANGE_AT`, if its kind has
/// one.
async fn change(app: &TestApp, shop: &Shop, i: usize, sub: &str) -> Result<(), String> {
    let kind = Kind::of(i);
    let Some(proration) = kind.proration() else {
        return Ok(());
    };
    let to = if kind.ends_premium() {
        &shop.premium
    } else {
        &shop.basic
    };
    let now = get(app, &at(SUBSCRIPTIONS, sub, "")).await?;
    let r = app
        .post(
            &at(SUBSCRIPTIONS, sub, "/change"),
            json!({"price_ref": to, "proration": proration}),
        )
        .if_match(&string(&now["etag"])?)
        .send()
        .await;
    let changed = r.data();
    let pending = changed["pending_invoice_lines"]
        .as_array()
        .map_or(usize::MAX, Vec::len);
    let expected_pending = if kind == Kind::DowngradeNextInvoice {
        2
    } else {
        0
    };
    if r.status != 200 || changed["price_ref"] != to.as_str() || pending != expected_pending {
        return Err(format!(
            "{} of {sub}: {} {}",
            kind.label(),
            r.status,
            r.text
        ));
    }
    Ok(())
}

/// Polls `clock` until it is `ready`; the clock.
async fn ready(app: &TestApp, clock: &str, every: Duration) -> Result<Value, String> {
    let started = Instant::now();
    loop {
        let c = get(app, &at(CLOCKS, clock, "")).await?;
        if c["status"] == "ready" {
            return Ok(c);
        }
        if started.elapsed() > Duration::from_secs(3600) {
            return Err(format!("the clock was not ready within an hour: {c}"));
        }
        tokio::time::sleep(every).await;
    }
}

/// Events not yet relayed (outbox) or not yet fanned out (the queue).
async fn undrained(pool: &sqlx::AnyPool) -> Result<i64, String> {
    sqlx::query_scalar::<_, i64>(
        "SELECT (SELECT COUNT(*) FROM outbox) + \
         (SELECT COUNT(*) FROM events WHERE status = 'pending')",
    )
    .fetch_one(pool)
    .await
    .map_err(|e| format!("counting undrained events: {e}"))
}

/// Waits until the setup's events are relayed and fanned out; how long
/// that took.
async fn drain(app: &TestApp) -> Result<Duration, String> {
    let pool = app.raw_pool().await;
    let started = Instant::now();
    loop {
        let left = undrained(&pool).await?;
        if left == 0 {
            break;
        }
        if started.elapsed() > DRAIN_WAIT {
            return Err(format!(
                "{left} setup events still undrained after {DRAIN_WAIT:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    pool.close().await;
    Ok(started.elapsed())
}

async fn analyze(url: &str) -> Result<(), String> {
    use sqlx::{Connection, Executor};
    let mut conn = sqlx::PgConnection::connect(url)
        .await
        .map_err(|e| format!("connecting to ANALYZE failed: {e}"))?;
    conn.execute("ANALYZE")
        .await
        .map_err(|e| format!("ANALYZE failed: {e}"))?;
    let _ = conn.close().await;
    Ok(())
}

/// CPU time (user and system) of this process so far, in seconds.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // After the command name (which ends with the last `)`), utime and
    // stime are the 12th and 13th fields, in clock ticks (100 a second).
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    (ticks(11) + ticks(12)) / 100.0
}

/// What the measured advance gave.
struct Measured {
    /// From the advance request to the clock answering `ready`.
    advance: Duration,
    /// CPU time of this process (API, runner, pipeline, receiver) over
    /// `advance`, in seconds.
    cpu: f64,
    /// The clock once ready.
    clock: Value,
    /// The delivery of the renewals' events, when the pipeline ran.
    delivery: Option<Delivery>,
}

struct Delivery {
    first: Option<Duration>,
    at_ready: usize,
    all: Option<Duration>,
}

/// Advances `clock` from `CHANGE_AT` to `END` and waits until it is
/// ready, watching `receiver` (when the pipeline runs); then waits for
/// every renewal's event there (`events` of them).
async fn advance(
    app: &TestApp,
    clock: &str,
    receiver: Option<&TestReceiver>,
    events: usize,
) -> Result<Measured, String> {
    let received = || receiver.map_or(0, TestReceiver::count);
    let cpu_before = cpu_seconds();
    let asked = Instant::now();
    let c = clocks::ask_advance(app, clock, END).await;
    if c["status"] != "advancing" {
        return Err(format!("the advance was not accepted: {c}"));
    }
    let mut first = None;
    let (advance, clock) = loop {
        if first.is_none() && received() > 0 {
            first = Some(asked.elapsed());
        }
        let c = get(app, &at(CLOCKS, clock, "")).await?;
        if c["status"] == "ready" {
            break (asked.elapsed(), c);
        }
        if asked.elapsed() > Duration::from_secs(3600) {
            return Err(format!("the clock was not ready within an hour: {c}"));
        }
        tokio::time::sleep(POLL).await;
    };
    let cpu = cpu_seconds() - cpu_before;
    let Some(receiver) = receiver else {
        return Ok(Measured {
            advance,
            cpu,
            clock,
            delivery: None,
        });
    };
    let at_ready = receiver.count();
    let mut all = None;
    while asked.elapsed() < advance + DELIVERY_WAIT {
        let got = receiver.count();
        if first.is_none() && got > 0 {
            first = Some(asked.elapsed());
        }
        if got >= events && receiver.distinct_deliveries() >= events {
            all = Some(asked.elapsed());
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    Ok(Measured {
        advance,
        cpu,
        clock,
        delivery: Some(Delivery {
            first,
            at_ready,
            all,
        }),
    })
}

/// What the checks found: the problems, and the trials that converted
/// (`active` with their conversion invoice).
struct Checked {
    problems: Vec<String>,
    conversions: usize,
}

/// Keeps at most a few problems of one kind, and how many there were.
#[derive(Default)]
struct Problems {
    shown: Vec<String>,
    more: BTreeMap<&'static str, usize>,
}

impl Problems {
    fn add(&mut self, what: &'static str, detail: String) {
        let n = self.more.entry(what).or_default();
        *n += 1;
        if *n <= 3 {
            self.shown.push(format!("{what}: {detail}"));
        }
    }

    fn into_vec(self) -> Vec<String> {
        let mut out = self.shown;
        for (what, n) in self.more {
            if n > 3 {
                out.push(format!("{what}: {n} in all"));
            }
        }
        out
    }
}

/// The year as it should be (module doc): the clock, the subscriptions,
/// their invoices, the environment's invoice numbers, the renewal events.
async fn check(
    app: &TestApp,
    subs: &[String],
    clock: &Value,
    receiver: Option<&TestReceiver>,
    shop: &Shop,
) -> Checked {
    let mut p = Problems::default();
    if clock["status"] != "ready" || clock["frozen_time"] != END || clock["failed_jobs"] != 0 {
        p.add(
            "the clock",
            format!("not ready at {END} with failed_jobs 0: {clock}"),
        );
    }
    let listed = match walk(app, SUBSCRIPTIONS).await {
        Ok(l) => l,
        Err(e) => {
            return Checked {
                problems: vec![e],
                conversions: 0,
            }
        }
    };
    let by_ref: HashMap<String, &Value> = listed
        .iter()
        .filter_map(|s| Some((s["subscription_ref"].as_str()?.to_owned(), s)))
        .collect();
    if listed.len() != subs.len() {
        p.add(
            "subscriptions",
            format!("{} listed, {} made", listed.len(), subs.len()),
        );
    }
    let invoices = match walk(app, INVOICES).await {
        Ok(l) => l,
        Err(e) => {
            return Checked {
                problems: vec![e],
                conversions: 0,
            }
        }
    };
    let mut of_sub: HashMap<String, Vec<&Value>> = HashMap::new();
    for inv in &invoices {
        let sub = inv["subscription_ref"].as_str().unwrap_or("").to_owned();
        of_sub.entry(sub).or_default().push(inv);
    }

    let mut conversions = 0;
    for (i, sub) in subs.iter().enumerate() {
        let kind = Kind::of(i);
        let Some(s) = by_ref.get(sub) else {
            p.add("subscription not listed", sub.clone());
            continue;
        };
        let (start, end) = kind.period_at_end();
        let price = if kind.ends_premium() {
            &shop.premium
        } else {
            &shop.basic
        };
        if s["status"] != "active"
            || s["current_period_start"] != start.as_str()
            || s["current_period_end"] != end.as_str()
            || s["price_ref"] != price.as_str()
            || s["pending_invoice_lines"] != json!([])
        {
            p.add(
                "subscription not as a year makes it",
                format!(
                    "{} {sub}: expected active {start}..{end} on {price}, no pending lines: {s}",
                    kind.label()
                ),
            );
        }
        let theirs = of_sub.get(sub).map(Vec::as_slice).unwrap_or_default();
        let (count, total) = kind.invoices();
        let sum: Result<i64, String> = theirs.iter().map(|i| minor(&i["amount_total"])).sum();
        if theirs.len() != count || sum.as_ref().ok() != Some(&total) {
            p.add(
                "invoices of a subscription",
                format!(
                    "{} {sub}: {} invoices totalling {sum:?}, expected {count} totalling {total}",
                    kind.label(),
                    theirs.len()
                ),
            );
        }
        if theirs.iter().any(|i| i["status"] != "paid") {
            p.add("an invoice not paid", format!("{} {sub}", kind.label()));
        }
        // Renewal invoices: those issued in the measured year, each with a
        // `period` line starting when it was issued.
        let mut renewals = Vec::new();
        for inv in theirs
            .iter()
            .filter(|i| i["issued_at"].as_str().is_some_and(|t| t > CHANGE_AT))
        {
            let period = inv["lines"]
                .as_array()
                .and_then(|l| l.iter().find(|l| l["kind"] == "period"));
            match period {
                Some(l) if l["period_start"] == inv["issued_at"] => {
                    renewals.push(l["period_start"].as_str().unwrap_or("").to_owned())
                }
                _ => p.add(
                    "a renewal invoice without its period",
                    format!("{} {sub}: {inv}", kind.label()),
                ),
            }
        }
        renewals.sort();
        if renewals != kind.renewals() {
            p.add(
                "renewal invoices",
                format!(
                    "{} {sub}: {} renewal invoices {renewals:?}, expected {:?}",
                    kind.label(),
                    renewals.len(),
                    kind.renewals()
                ),
            );
        } else if kind == Kind::Trial && s["status"] == "active" {
            conversions += 1;
        }
    }

    // Invoice numbers: per year 1..=count, no duplicate, the year issued.
    let mut by_year: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
    let mut per_year: BTreeMap<String, usize> = BTreeMap::new();
    for inv in &invoices {
        let number = inv["number"].as_str().unwrap_or("");
        let issued = inv["issued_at"].as_str().unwrap_or("");
        let Some((year, seq)) = number
            .split_once('-')
            .and_then(|(y, s)| Some((y, s.parse::<u32>().ok()?)))
        else {
            p.add("an invoice number", format!("malformed: {inv}"));
            continue;
        };
        if !issued.starts_with(year) {
            p.add("an invoice number", format!("{number} issued at {issued}"));
        }
        *per_year.entry(year.to_owned()).or_default() += 1;
        if !by_year.entry(year.to_owned()).or_default().insert(seq) {
            p.add("an invoice number", format!("{number} twice"));
        }
    }
    for (year, seqs) in &by_year {
        let n = per_year[year];
        let gapless = seqs.len() == n
            && seqs.first() == Some(&1)
            && seqs.last() == Some(&u32::try_from(n).unwrap_or(u32::MAX));
        if !gapless {
            p.add(
                "invoice numbers",
                format!(
                    "{year}: {n} invoices numbered {:?}..{:?}, {} distinct: not gapless from 1",
                    seqs.first(),
                    seqs.last(),
                    seqs.len()
                ),
            );
        }
    }
    let expected: usize = (0..subs.len()).map(|i| Kind::of(i).invoices().0).sum();
    if invoices.len() != expected {
        p.add(
            "invoices of the environment",
            format!("{}, expected {expected}", invoices.len()),
        );
    }

    if let Some(receiver) = receiver {
        let mut renewed: HashMap<String, Vec<String>> = HashMap::new();
        for r in receiver.received() {
            let body = r.json();
            let data = &body["data"];
            if body["public_event_type"] != "subscription.renewed" {
                p.add("an event", format!("not subscription.renewed: {body}"));
                continue;
            }
            let sub = data["subscription_ref"].as_str().unwrap_or("").to_owned();
            let start = data["current_period_start"]
                .as_str()
                .unwrap_or("")
                .to_owned();
            renewed.entry(sub).or_default().push(start);
        }
        for (i, sub) in subs.iter().enumerate() {
            let mut got = renewed.remove(sub).unwrap_or_default();
            got.sort();
            let expected = Kind::of(i).renewals();
            if got != expected {
                p.add(
                    "subscription.renewed events",
                    format!(
                        "{} {sub}: {} events {got:?}, expected {:?}",
                        Kind::of(i).label(),
                        got.len(),
                        expected
                    ),
                );
            }
        }
        if !renewed.is_empty() {
            p.add(
                "subscription.renewed events",
                format!("{} of subscriptions not made here", renewed.len()),
            );
        }
    }
    Checked {
        problems: p.into_vec(),
        conversions,
    }
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

/// The benchmark on one backend: its verdicts, or what went wrong.
async fn run(backend: Backend, cfg: &Config) -> Result<Vec<String>, String> {
    let n = cfg.subscriptions;
    let label = backend.label();
    let app = Arc::new(TestApp::spawn(backend).await);
    let mut kinds: BTreeMap<Kind, usize> = BTreeMap::new();
    for i in 0..n {
        *kinds.entry(Kind::of(i)).or_default() += 1;
    }
    let mix: Vec<String> = kinds
        .iter()
        .map(|(k, c)| format!("{c} {}", k.label()))
        .collect();
    println!("{label}: {n} subscriptions ({})", mix.join(", "));
    let (mut receiver, mut pipeline) = (None, None);
    if cfg.pipeline {
        let r = TestReceiver::start(Behaviour::Status(204)).await;
        app.subscribed_endpoint(&r.url(), "subscription.renewed", 1)
            .await;
        receiver = Some(r);
        pipeline = Some(EventPipeline::embedded(&app));
    }
    let receiver = receiver.as_ref();
    let stop = tokio_util::sync::CancellationToken::new();
    let runner = {
        let stop = stop.clone();
        tokio::spawn(commerce::jobs::run(
            app.store.clone(),
            commerce::jobs::Rules::default(),
            stop,
        ))
    };

    let setup = Instant::now();
    let shop = Arc::new(shop(&app).await);
    let clock = clocks::clock(&app, START, Some("a year")).await;
    let subs = {
        let (app, shop, clock) = (app.clone(), shop.clone(), clock.clone());
        on_tasks(n, cfg.concurrency, move |i| {
            let (app, shop, clock) = (app.clone(), shop.clone(), clock.clone());
            async move { subscribe(&app, &shop, &clock, i).await }
        })
        .await?
    };
    let paid = setup.elapsed();
    clocks::ask_advance(&app, &clock, CHANGE_AT).await;
    let c = ready(&app, &clock, Duration::from_millis(50)).await?;
    if c["frozen_time"] != CHANGE_AT || c["failed_jobs"] != 0 {
        return Err(format!("{label}: the clock after the setup's advance: {c}"));
    }
    {
        let (app, shop, subs) = (app.clone(), shop.clone(), Arc::new(subs.clone()));
        on_tasks(n, cfg.concurrency, move |i| {
            let (app, shop, subs) = (app.clone(), shop.clone(), subs.clone());
            async move { change(&app, &shop, i, &subs[i]).await }
        })
        .await?;
    }
    let changed = setup.elapsed();
    let drained = match pipeline {
        Some(_) => format!(
            "events relayed and delivered as they went, drained {} after the last change",
            secs(drain(&app).await?)
        ),
        None => "no event pipeline: events stay in the outbox".to_owned(),
    };
    if backend == Backend::Postgres {
        analyze(&app.database_url).await?;
    }
    println!(
        "  setup: {n} sessions paid in {} ({} client tasks), clock to {CHANGE_AT} and {} changes by {}, \
         {} in all; {drained}{}",
        secs(paid),
        cfg.concurrency,
        n / 2,
        secs(changed),
        secs(setup.elapsed()),
        if backend == Backend::Postgres {
            "; ANALYZE"
        } else {
            ""
        },
    );

    let renewals = n * RENEWALS;
    let m = advance(&app, &clock, receiver, renewals).await?;
    let rate = renewals as f64 / m.advance.as_secs_f64();
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    println!(
        "  advance {CHANGE_AT} -> {END}: ready after {} = {rate:.0} renewals/s ({renewals} renewals, \
         {} of them trial conversions); this process used {:.2} s of CPU meanwhile \
         ({:.2} ms per renewal, {:.0} % of {cores} cores)",
        secs(m.advance),
        kinds.get(&Kind::Trial).copied().unwrap_or(0),
        m.cpu,
        m.cpu * 1000.0 / renewals as f64,
        m.cpu * 100.0 / (cores as f64 * m.advance.as_secs_f64()),
    );
    if let Some(d) = &m.delivery {
        println!(
            "  delivery of subscription.renewed: first after {}, {} of {renewals} by the time the clock was ready, all after {}{}",
            d.first.map_or("-".to_owned(), secs),
            d.at_ready,
            d.all.map_or("-".to_owned(), secs),
            d.all
                .map(|all| format!(
                    " ({} after ready; {:.0} deliveries/s over the whole)",
                    secs(all.saturating_sub(m.advance)),
                    renewals as f64 / all.as_secs_f64()
                ))
                .unwrap_or_default(),
        );
    }
    if let Some(pipeline) = pipeline {
        pipeline.shutdown().await;
    }
    stop.cancel();
    let _ = runner.await;

    let checked = check(&app, &subs, &m.clock, receiver, &shop).await;
    let mut errors = checked.problems;
    let trials = kinds.get(&Kind::Trial).copied().unwrap_or(0);
    let lag = match &m.delivery {
        Some(Delivery { all: Some(all), .. }) => Some(all.saturating_sub(m.advance)),
        Some(Delivery { all: None, .. }) => {
            errors.push(format!(
                "{} of {renewals} renewal events arrived within {DELIVERY_WAIT:?} of ready",
                receiver.map_or(0, TestReceiver::distinct_deliveries)
            ));
            None
        }
        None => None,
    };
    if !errors.is_empty() {
        return Err(format!("{label}: {}", errors.join("; ")));
    }
    let met = if m.advance < GOAL { "met" } else { "MISSED" };
    let mut verdicts = vec![format!(
        "{label}: a year over {n} subscriptions in {} = {rate:.0} renewals/s \
         ({renewals} renewals, {}/{trials} trials converted; goal < {}: {met}); checked: \
         every subscription active on its period, 12 renewal invoices each, invoice numbers gapless",
        secs(m.advance),
        checked.conversions,
        secs(GOAL),
    )];
    match lag {
        Some(lag) => verdicts.push(format!(
            "{label}: every renewal event delivered, the last {} after ready",
            secs(lag)
        )),
        None => verdicts.push(format!("{label}: no event pipeline (BENCH_PIPELINE=0)")),
    }
    Ok(verdicts)
}

async fn bench(cfg: Config) -> ExitCode {
    let mut verdicts = Vec::new();
    let mut errors = Vec::new();
    for backend in cfg.backends.clone() {
        match run(backend, &cfg).await {
            Ok(v) => verdicts.extend(v),
            Err(e) => errors.push(e),
        }
        println!();
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
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime builds");
    runtime.block_on(bench(cfg))
}
