//! Every series the alert rules (`config/prometheus-alerts.yml`) and the
//! Grafana dashboard (`config/grafana-delivery-health.json`) read is on
//! `/metrics` of a `billing serve` that has just started (contract 13.5):
//! one look as soon as `/readyz` answers 200, nothing delivered, consumed
//! or requested yet. The metric names, and the label values the
//! expressions select with `=`, are read out of the two files, so the test
//! follows the rules and panels as they change.
//!
//! Embedded (a fresh SQLite folder) always; in fleet mode (a fresh
//! PostgreSQL database, a fresh RabbitMQ virtual host, Redis) with
//! BILLING_TEST_FLEET=1. In both, `billing_dependency_up` soon reads 1 for
//! each backing service of the mode. And each alert's `runbook_url` names a
//! section of `docs/operations.md`.

use crate::common::poll::Poll;
use crate::common::{
    billing, fleet, fleet_env, free_port, wait_ready, FreshDatabase, FreshVhost, Process, REDIS_URL,
};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

const RULES: &str = include_str!("../../../config/prometheus-alerts.yml");
const DASHBOARD: &str = include_str!("../../../config/grafana-delivery-health.json");
const OPERATIONS: &str = include_str!("../../../docs/operations.md");

/// The service's own metrics; recording rules (`billing:…`) have a colon.
const PREFIX: &str = "billing_";

/// What an expression reads: a metric name, and the label values it
/// selects with `=` (`name{label="value"}`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Read {
    name: String,
    selected: Vec<(String, String)>,
}

/// The `expr` of every rule: on its line, or the indented block under an
/// `expr: |` (or `>`).
fn rule_exprs(yaml: &str) -> Vec<String> {
    let mut exprs = Vec::new();
    let mut lines = yaml.lines().peekable();
    while let Some(line) = lines.next() {
        let indent = line.len() - line.trim_start().len();
        let Some(rest) = line.trim_start().strip_prefix("expr:") else {
            continue;
        };
        let rest = rest.split(" #").next().unwrap_or("").trim();
        if !rest.starts_with('|') && !rest.starts_with('>') {
            exprs.push(rest.trim_matches(|c| c == '"' || c == '\'').to_owned());
            continue;
        }
        let mut block = String::new();
        while let Some(next) = lines.peek() {
            let deeper = next.len() - next.trim_start().len() > indent;
            if !deeper && !next.trim().is_empty() {
                break;
            }
            block.push_str(next.trim());
            block.push('\n');
            lines.next();
        }
        exprs.push(block);
    }
    exprs
}

/// The `expr` of every target of every panel, rows' panels included.
fn dashboard_exprs(value: &serde_json::Value, exprs: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, v) in map {
                match (key.as_str(), v) {
                    ("expr", serde_json::Value::String(expr)) => exprs.push(expr.clone()),
                    _ => dashboard_exprs(v, exprs),
                }
            }
        }
        serde_json::Value::Array(items) => {
            for v in items {
                dashboard_exprs(v, exprs);
            }
        }
        _ => {}
    }
}

/// The equality matchers of a selector's inside (`a="x", b=~"y"`).
fn equalities(inside: &str) -> Vec<(String, String)> {
    inside
        .split(',')
        .filter_map(|matcher| {
            let (label, value) = matcher.split_once('=')?;
            let label = label.trim();
            if label.ends_with('!') || value.starts_with('~') {
                return None;
            }
            Some((label.to_owned(), value.trim().trim_matches('"').to_owned()))
        })
        .collect()
}

/// The service's metrics `expr` reads, with what its selectors pick.
fn reads(expr: &str) -> Vec<Read> {
    let mut found = Vec::new();
    let bytes = expr.as_bytes();
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b':';
    let mut i = 0;
    while i < bytes.len() {
        if !word(bytes[i]) || (i > 0 && (word(bytes[i - 1]) || bytes[i - 1] == b'$')) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && word(bytes[i]) {
            i += 1;
        }
        let name = &expr[start..i];
        if !name.starts_with(PREFIX) || name.contains(':') {
            continue;
        }
        let mut selected = Vec::new();
        if bytes.get(i) == Some(&b'{') {
            let end = expr[i..].find('}').map_or(expr.len(), |n| i + n);
            selected = equalities(&expr[i + 1..end]);
            i = end;
        }
        found.push(Read {
            name: name.to_owned(),
            selected,
        });
    }
    found
}

/// Everything the rules and the dashboard read.
fn read_by_rules_and_dashboard() -> BTreeSet<Read> {
    let rules: Vec<Read> = rule_exprs(RULES).iter().flat_map(|e| reads(e)).collect();
    let dashboard: serde_json::Value = serde_json::from_str(DASHBOARD).expect("the dashboard");
    let mut exprs = Vec::new();
    dashboard_exprs(&dashboard, &mut exprs);
    let panels: Vec<Read> = exprs.iter().flat_map(|e| reads(e)).collect();
    // The parsing itself is checked: both files name a few metrics.
    for (file, found) in [("rules", &rules), ("dashboard", &panels)] {
        let names: BTreeSet<&str> = found.iter().map(|r| r.name.as_str()).collect();
        assert!(
            names.len() >= 5,
            "only {names:?} found in the {file}: the test no longer reads it"
        );
    }
    rules.into_iter().chain(panels).collect()
}

/// The series of a Prometheus text exposition: name → every label set.
fn exposition(text: &str) -> BTreeMap<String, Vec<BTreeMap<String, String>>> {
    let mut series: BTreeMap<String, Vec<BTreeMap<String, String>>> = BTreeMap::new();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let (name, labels) = match line.find(['{', ' ']) {
            Some(n) if line.as_bytes()[n] == b'{' => {
                let end = line.rfind('}').expect("a closed label set");
                (&line[..n], &line[n + 1..end])
            }
            Some(n) => (&line[..n], ""),
            None => (line, ""),
        };
        let labels = equalities(labels).into_iter().collect();
        series.entry(name.to_owned()).or_default().push(labels);
    }
    series
}

async fn scrape(metrics: &str) -> String {
    let r = reqwest::get(format!("{metrics}/metrics")).await.unwrap();
    assert_eq!(r.status(), 200);
    r.text().await.unwrap()
}

/// Checks one look at `/metrics` of a process that has just started:
/// every name read is there, with the label values selected (those of a
/// `dependency` the mode does not have aside).
fn assert_everything_read_is_exported(text: &str, dependencies: &[&str], mode: &str) {
    let series = exposition(text);
    let mut missing = Vec::new();
    for read in read_by_rules_and_dashboard() {
        let Some(sets) = series.get(&read.name) else {
            missing.push(read.name.clone());
            continue;
        };
        let wanted: Vec<&(String, String)> = read
            .selected
            .iter()
            .filter(|(label, value)| label != "dependency" || dependencies.contains(&&value[..]))
            .collect();
        let found = sets.iter().any(|set| {
            wanted
                .iter()
                .all(|(label, value)| set.get(label) == Some(value))
        });
        if !found {
            missing.push(format!("{}{:?}", read.name, read.selected));
        }
    }
    assert!(
        missing.is_empty(),
        "{mode}: read by the rules or the dashboard but not on /metrics at start: {missing:?}\n{text}"
    );
}

/// Polls `/metrics` until `billing_dependency_up` is 1 for each of
/// `dependencies` (it is looked at every few seconds, the first time at
/// start), and there for no other.
async fn assert_dependencies_up(metrics: &str, dependencies: &[&str], mode: &str) {
    let reported = |text: &str| -> BTreeMap<String, String> {
        text.lines()
            .filter_map(|l| l.strip_prefix("billing_dependency_up{dependency=\""))
            .filter_map(|l| l.split_once("\"} "))
            .map(|(name, value)| (name.to_owned(), value.trim().to_owned()))
            .collect()
    };
    let wanted: BTreeMap<String, String> = dependencies
        .iter()
        .map(|d| ((*d).to_owned(), "1".to_owned()))
        .collect();
    let poll = Poll::within(Duration::from_secs(20)).every(Duration::from_millis(100));
    loop {
        let now = reported(&scrape(metrics).await);
        if now == wanted {
            return;
        }
        assert!(
            poll.next().await,
            "{mode}: billing_dependency_up reads {now:?}, not {wanted:?}"
        );
    }
}

/// Starts `billing serve` with `envs` in `dir`, waits for `/readyz`, looks
/// once at its metrics, then at its dependency gauge; stops it.
async fn check_serve(dir: &std::path::Path, mut envs: Vec<(&str, String)>, mode: &str) {
    let (api_port, metrics_port) = (free_port(), free_port());
    envs.extend([
        ("BILLING_API__LISTEN", format!("127.0.0.1:{api_port}")),
        (
            "BILLING_METRICS__LISTEN",
            format!("127.0.0.1:{metrics_port}"),
        ),
    ]);
    let mut serve = Process::spawn_logged(
        billing(dir, &envs).arg("serve"),
        dir.join(format!("serve-{mode}.log")),
    );
    let api = format!("http://127.0.0.1:{api_port}");
    let metrics = format!("http://127.0.0.1:{metrics_port}");
    wait_ready(&reqwest::Client::new(), &api, || serve.log_tail()).await;
    let dependencies: &[&str] = if mode == "fleet" {
        &["store", "queue", "scheduler"]
    } else {
        &["store"]
    };
    assert_everything_read_is_exported(&scrape(&metrics).await, dependencies, mode);
    assert_dependencies_up(&metrics, dependencies, mode).await;
    assert!(serve.terminate_cleanly(), "{}", serve.log_tail());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedded_service_exports_every_series_read_from_the_start() {
    let dir = tempfile::tempdir().unwrap();
    check_serve(dir.path(), Vec::new(), "embedded").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_service_exports_every_series_read_from_the_start() {
    if !fleet("metrics at start, fleet mode") {
        return;
    }
    let db = FreshDatabase::create("billing_metrics").await;
    let vhost = FreshVhost::create("billing_metrics");
    let dir = tempfile::tempdir().unwrap();
    // Redis keys and queue names carry the fresh store's identity.
    let envs = fleet_env(&db.url, &vhost.url, REDIS_URL);
    check_serve(dir.path(), envs, "fleet").await;
    db.remove().await;
    vhost.remove();
}

/// GitHub's anchor of a Markdown heading: lower case, spaces to hyphens,
/// other punctuation dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

#[test]
fn every_alert_links_a_section_of_the_operations_guide() {
    let anchors: BTreeSet<String> = OPERATIONS
        .lines()
        .filter_map(|l| l.strip_prefix('#'))
        .map(|l| anchor(l.trim_start_matches('#')))
        .collect();
    let alerts = RULES
        .lines()
        .filter(|l| l.trim_start().starts_with("- alert:"))
        .count();
    let links: Vec<&str> = RULES
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("runbook_url:"))
        .map(|l| l.trim().trim_matches('"'))
        .collect();
    assert!(alerts >= 6, "only {alerts} alerts in the rules");
    assert_eq!(links.len(), alerts, "an alert without a runbook_url");
    for link in links {
        let section = link
            .strip_prefix("docs/operations.md#")
            .unwrap_or_else(|| panic!("{link} is not a section of docs/operations.md"));
        assert!(
            anchors.contains(section),
            "{link}: docs/operations.md has no such section"
        );
    }
}

#[test]
fn the_reads_are_parsed_out_of_expressions() {
    let read = reads(
        "sum(rate(billing_webhook_deliveries_total{outcome=\"succeeded\", job=~\"x\"}[5m])) \
         / max by (job) (billing:retention_seconds + $billing_x) > billing_webhook_due_backlog",
    );
    assert_eq!(
        read,
        vec![
            Read {
                name: "billing_webhook_deliveries_total".into(),
                selected: vec![("outcome".into(), "succeeded".into())],
            },
            Read {
                name: "billing_webhook_due_backlog".into(),
                selected: vec![],
            },
        ]
    );
    let exprs = rule_exprs(
        "  - alert: A\n    expr: |\n      a_b > 0\n      and c\n    for: 1m\n  - record: r\n    expr: vector(1) # note\n",
    );
    assert_eq!(
        exprs,
        vec!["a_b > 0\nand c\n".to_owned(), "vector(1)".to_owned()]
    );
}
