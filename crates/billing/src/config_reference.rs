//! The configuration table of `docs/operations.md` stays true to
//! `config/default.toml`: one row per key, named as its environment
//! variable (`BILLING_<SECTION>__<KEY>`), with the file's default. The
//! file's comments stay the full reference; the table only summarises, and
//! this test fails on a key without a row, a row without a key, or a
//! default that differs. `config/default.toml` itself must hold exactly
//! `Config::default()`, as its header says.

use crate::Config;
use figment::providers::{Format, Toml};
use figment::Figment;
use std::collections::BTreeMap;

const DEFAULT_TOML: &str = include_str!("../../../config/default.toml");
const OPERATIONS_MD: &str = include_str!("../../../docs/operations.md");

/// The header row of the table in `docs/operations.md`.
const HEADER: &str = "| variable | default | meaning |";

/// `section.key` → the default as the table shows it (`""` for empty), for
/// every key of a TOML configuration file.
fn keys_of(toml: &str) -> Result<BTreeMap<String, String>, String> {
    let sections: BTreeMap<String, BTreeMap<String, serde_json::Value>> =
        Figment::from(Toml::string(toml))
            .extract()
            .map_err(|e| format!("config/default.toml does not parse: {e}"))?;
    let mut keys = BTreeMap::new();
    for (section, entries) in sections {
        for (key, value) in entries {
            let shown = match value {
                serde_json::Value::String(s) => s,
                serde_json::Value::Bool(_) | serde_json::Value::Number(_) => value.to_string(),
                other => {
                    return Err(format!(
                    "config/default.toml: {section}.{key} is {other}, which the table cannot show"
                ))
                }
            };
            keys.insert(format!("{section}.{key}"), shown);
        }
    }
    Ok(keys)
}

/// The environment variable of `section.key`.
fn variable(key: &str) -> String {
    format!("BILLING_{}", key.replacen('.', "__", 1).to_uppercase())
}

/// One row of the table: its line number in the document, the variable and
/// the default cell as written (`` `30d` `` or `empty`).
struct Row {
    line: usize,
    variable: String,
    default: String,
}

/// The rows of the table under [`HEADER`] in `doc`.
fn rows_of(doc: &str) -> Result<Vec<Row>, String> {
    let mut lines = doc.lines().enumerate();
    lines
        .by_ref()
        .find(|(_, l)| l.trim() == HEADER)
        .ok_or_else(|| format!("docs/operations.md: no table headed `{HEADER}`"))?;
    let mut rows = Vec::new();
    for (i, line) in lines.skip(1) {
        let Some(inner) = line.trim().strip_prefix('|') else {
            break;
        };
        let cells: Vec<&str> = inner.splitn(3, '|').map(str::trim).collect();
        let [variable, default, _meaning] = cells[..] else {
            return Err(format!(
                "docs/operations.md:{}: a row needs three cells: {line}",
                i + 1
            ));
        };
        rows.push(Row {
            line: i + 1,
            variable: variable.trim_matches('`').to_owned(),
            default: default.to_owned(),
        });
    }
    Ok(rows)
}

/// What the table shows for a default: `empty`, or the value in backticks.
fn cell(default: &str) -> String {
    if default.is_empty() {
        "empty".to_owned()
    } else {
        format!("`{default}`")
    }
}

/// Every disagreement between the table of `doc` and the keys of `toml`,
/// one line each, naming the row or key and what to write instead.
fn problems(toml: &str, doc: &str) -> Vec<String> {
    let keys = match keys_of(toml) {
        Ok(keys) => keys,
        Err(e) => return vec![e],
    };
    let rows = match rows_of(doc) {
        Ok(rows) => rows,
        Err(e) => return vec![e],
    };
    let by_variable: BTreeMap<String, &str> = keys
        .iter()
        .map(|(key, default)| (variable(key), default.as_str()))
        .collect();
    let mut out = Vec::new();
    let mut seen = BTreeMap::new();
    for row in &rows {
        if let Some(first) = seen.insert(row.variable.as_str(), row.line) {
            out.push(format!(
                "docs/operations.md:{}: `{}` has a row already (line {first})",
                row.line, row.variable
            ));
        }
        match by_variable.get(&row.variable) {
            None => out.push(format!(
                "docs/operations.md:{}: stale row `{}`: config/default.toml has no such key",
                row.line, row.variable
            )),
            Some(default) if row.default != cell(default) => out.push(format!(
                "docs/operations.md:{}: `{}` shows default {}, config/default.toml has {}",
                row.line,
                row.variable,
                row.default,
                cell(default)
            )),
            Some(_) => {}
        }
    }
    for (key, default) in &keys {
        let name = variable(key);
        if !seen.contains_key(name.as_str()) {
            out.push(format!(
                "docs/operations.md: no row for config/default.toml's `{key}`: add `| `{name}` | {} | … |`",
                cell(default)
            ));
        }
    }
    out
}

#[test]
fn the_operations_table_matches_default_toml() {
    let problems = problems(DEFAULT_TOML, OPERATIONS_MD);
    assert!(
        problems.is_empty(),
        "the configuration table of docs/operations.md disagrees with config/default.toml:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn default_toml_holds_the_built_in_defaults() {
    let built_in = serde_json::to_value(Config::default()).unwrap();
    let file: serde_json::Value = Figment::from(Toml::string(DEFAULT_TOML))
        .extract::<Config>()
        .map(|c| serde_json::to_value(c).unwrap())
        .unwrap_or_else(|e| panic!("config/default.toml is not a whole configuration: {e}"));
    assert_eq!(
        file, built_in,
        "config/default.toml differs from Config::default()"
    );
}

#[test]
fn the_check_names_a_missing_stale_or_wrong_row() {
    let toml = "[api]\nlisten = \"127.0.0.1:8080\"\nrate_limit = 1000\n\
                [queue]\nname = \"\"\n[console]\nenabled = true\n";
    let doc = "intro\n\n| variable | default | meaning |\n|---|---|---|\n\
               | `BILLING_API__LISTEN` | `127.0.0.1:8080` | address |\n\
               | `BILLING_API__RATE_LIMIT` | `500` | a | b |\n\
               | `BILLING_QUEUE__NAME` | empty | queue |\n\
               | `BILLING_API__GONE` | `1` | stale |\n\nafter\n";
    assert_eq!(
        problems(toml, doc),
        [
            "docs/operations.md:6: `BILLING_API__RATE_LIMIT` shows default `500`, \
             config/default.toml has `1000`",
            "docs/operations.md:8: stale row `BILLING_API__GONE`: config/default.toml has no such key",
            "docs/operations.md: no row for config/default.toml's `console.enabled`: \
             add `| `BILLING_CONSOLE__ENABLED` | `true` | … |`",
        ]
    );
    assert_eq!(
        variable("delivery.allow_private_networks"),
        "BILLING_DELIVERY__ALLOW_PRIVATE_NETWORKS"
    );
}
