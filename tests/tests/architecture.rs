//! ARCHITECTURE.md stays a true map: every Rust path it names in
//! backticks (`store::dispatch::statements`, `redis_schedule::Keys::own`)
//! is a module of the workspace, or an item defined or re-exported in one,
//! and every file it names (`db/lane.rs`, `config/default.toml`) exists.
//! A path may start anywhere in a module chain (`intake::screen` is
//! `dispatcher::intake::screen`); a module re-exported from a crate's root
//! (`store::projection`) counts under both names.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Files the map names that live outside this repository: the shared
/// specification.
const OUTSIDE: &[&str] = &["contract.md", "interface.md"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

/// Every file of the repository, relative to its root, with `/`.
fn files(dir: &Path, root: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).expect("a readable folder") {
        let path = entry.expect("an entry").path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        // Hidden folders are git's and tools' own, but for the project's
        // cargo configuration, which the map names.
        let hidden = name.starts_with('.') && name != ".cargo";
        if hidden || name == "target" || name == "data" {
            continue;
        }
        if path.is_dir() {
            files(&path, root, out);
        } else {
            let rel = path.strip_prefix(root).unwrap();
            out.push(rel.to_string_lossy().replace('\\', "/"));
        }
    }
}

/// Module path (crate first) → the file that holds it.
fn modules(all: &[String], root: &Path) -> HashMap<Vec<String>, PathBuf> {
    let mut out = HashMap::new();
    for f in all.iter().filter(|f| f.ends_with(".rs")) {
        let (krate, rest) = if let Some(rest) = f.strip_prefix("tests/src/") {
            ("billing_tests".to_owned(), rest)
        } else if let Some(rest) = f.strip_prefix("crates/") {
            let Some((krate, rest)) = rest.split_once("/src/") else {
                continue;
            };
            (krate.replace('-', "_"), rest)
        } else {
            continue;
        };
        let mut path = vec![krate];
        let segments: Vec<&str> = rest.trim_end_matches(".rs").split('/').collect();
        for (i, s) in segments.iter().enumerate() {
            let last = i + 1 == segments.len();
            if !(last && ["lib", "main", "mod"].contains(s)) {
                path.push((*s).to_owned());
            }
        }
        let file = root.join(f);
        let text = std::fs::read_to_string(&file).unwrap();
        for line in text.lines() {
            // Inline modules: `mod name {`.
            let l = line.trim_start();
            let l = l.strip_prefix("pub ").unwrap_or(l);
            let l = l.strip_prefix("pub(crate) ").unwrap_or(l);
            if let Some(name) = l.strip_prefix("mod ").and_then(|r| r.strip_suffix(" {")) {
                let mut inner = path.clone();
                inner.push(name.to_owned());
                out.insert(inner, file.clone());
            }
        }
        out.insert(path, file);
    }
    // A crate root's `pub use a::b::{c, d};` names modules `c` and `d` at
    // the root too.
    let mut aliases = Vec::new();
    for (path, file) in &out {
        if path.len() != 1 {
            continue;
        }
        let text = std::fs::read_to_string(file).unwrap();
        for line in text.lines() {
            let Some(used) = line.trim().strip_prefix("pub use ") else {
                continue;
            };
            let used = used.trim_end_matches(';');
            let (base, names) = match used.split_once("::{") {
                Some((base, names)) => (base, names.trim_end_matches('}')),
                None => match used.rsplit_once("::") {
                    Some((base, name)) => (base, name),
                    None => continue,
                },
            };
            for name in names.split(',').map(str::trim) {
                let mut target = path.clone();
                target.extend(base.split("::").map(str::to_owned));
                target.push(name.to_owned());
                if let Some(file) = out.get(&target) {
                    aliases.push((vec![path[0].clone(), name.to_owned()], file.clone()));
                }
            }
        }
    }
    out.extend(aliases);
    out
}

/// Whether `file` defines or re-exports `name`.
fn defines(file: &Path, name: &str) -> bool {
    let text = std::fs::read_to_string(file).unwrap();
    let word = |s: &str| {
        s.split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .any(|w| w == name)
    };
    text.lines().any(|line| {
        let l = line.trim_start();
        let l = l.strip_prefix("pub(crate) ").unwrap_or(l);
        let l = l.strip_prefix("pub ").unwrap_or(l);
        let l = l.strip_prefix("async ").unwrap_or(l);
        let declared = [
            "fn ", "struct ", "enum ", "trait ", "const ", "static ", "type ", "mod ",
        ]
        .iter()
        .any(|kw| {
            l.strip_prefix(kw).is_some_and(|rest| {
                rest.split(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .next()
                    == Some(name)
            })
        });
        declared
            || l.strip_prefix("macro_rules! ") == Some(&format!("{name} {{"))
            || (line.trim_start().starts_with("pub") && l.starts_with("use ") && word(l))
    })
}

/// The backticked spans of `doc`.
fn spans(doc: &str) -> Vec<&str> {
    doc.split('`').skip(1).step_by(2).collect()
}

fn is_rust_path(s: &str) -> bool {
    s.contains("::")
        && s.starts_with(|c: char| c.is_ascii_lowercase())
        && s.split("::")
            .all(|seg| !seg.is_empty() && seg.chars().all(|c| c.is_alphanumeric() || c == '_'))
}

fn is_file(s: &str) -> bool {
    let ok_chars = s.chars().all(|c| c.is_alphanumeric() || "._/-".contains(c));
    ok_chars
        && !s.starts_with('/')
        && [".rs", ".md", ".sql", ".toml", ".json", ".sh"]
            .iter()
            .any(|e| s.ends_with(e))
}

#[test]
fn every_path_the_map_names_exists() {
    let root = root();
    let doc = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let mut all = Vec::new();
    files(&root, &root, &mut all);
    let modules = modules(&all, &root);
    let mut missing = Vec::new();
    for span in spans(&doc) {
        if is_rust_path(span) {
            let segs: Vec<&str> = span.split("::").collect();
            let found = (1..=segs.len()).rev().any(|k| {
                let (head, rest) = segs.split_at(k);
                modules.iter().any(|(path, file)| {
                    path.len() >= head.len()
                        && path[path.len() - head.len()..]
                            .iter()
                            .zip(head)
                            .all(|(a, b)| a == b)
                        && rest.iter().all(|item| defines(file, item))
                })
            });
            if !found {
                missing.push(span.to_owned());
            }
        } else if is_file(span) && !OUTSIDE.contains(&span) {
            let found = all
                .iter()
                .any(|f| f == span || f.ends_with(&format!("/{span}")));
            if !found {
                missing.push(span.to_owned());
            }
        }
    }
    missing.sort();
    missing.dedup();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names what does not exist: {missing:?}"
    );
}

#[test]
fn the_check_tells_a_stale_name() {
    let root = root();
    let mut all = Vec::new();
    files(&root, &root, &mut all);
    let modules = modules(&all, &root);
    let store = modules
        .get(&vec!["store".to_owned(), "projection".to_owned()])
        .expect("store::projection, re-exported at the root");
    assert!(defines(store, "Projector"));
    assert!(!defines(store, "undo_to_mark"));
    assert!(is_rust_path("store::outbox::emit") && !is_rust_path("sqlite::<name>"));
    assert!(is_file("db/lane.rs") && !is_file("/api/v1/openapi.json"));
}
