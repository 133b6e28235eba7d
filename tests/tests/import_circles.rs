//! No crate keeps an import circle of more than `MOST_FILES` files: files
//! whose `crate::` and `super::` paths lead from each to every other. A
//! circle that large means no file of it can be read, changed or tested
//! without the others; the cure is to move what the lower files take from
//! the upper ones into a file below both (as `commerce::timed` holds the
//! job kinds the use cases schedule and the runner runs).
//!
//! The graph is read from the source text: a path names the deepest file
//! it reaches (`crate::a::b::C` is `a/b.rs` when that file exists, else
//! `a.rs`), comments and `#[cfg(test)]` modules aside; the crate's root
//! file re-exports everything and counts as no one's import.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The largest circle a crate may keep.
const MOST_FILES: usize = 4;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a readable folder") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `text` without `//` comments and from its first `#[cfg(test)]` on
/// (tests sit at a file's end, and may import anything of their file's).
fn code_of(text: &str) -> String {
    let text = text.split("#[cfg(test)]").next().unwrap_or_default();
    text.lines()
        .map(|l| l.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The module path of `file` under `src` (`a/mod.rs` and `a.rs` are `[a]`).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("a file of the crate");
    let mut parts: Vec<String> = rel
        .with_extension("")
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The deepest file under `src` that `parts` reach, if any.
fn file_of(src: &Path, parts: &[String]) -> Option<PathBuf> {
    (1..=parts.len()).rev().find_map(|n| {
        let base = parts[..n].iter().fold(src.to_path_buf(), |p, s| p.join(s));
        [base.with_extension("rs"), base.join("mod.rs")]
            .into_iter()
            .find(|f| f.is_file())
    })
}

/// The paths `code` names after `crate::` or `super::`, as module paths
/// from the crate's root; a braced group (`crate::{a::B, c}`) gives one
/// path per member.
fn paths_named(code: &str, module: &[String]) -> Vec<Vec<String>> {
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut out = Vec::new();
    for head in ["crate::", "super::"] {
        for (at, _) in code.match_indices(head) {
            let before = &code[..at];
            if before.ends_with("::") || before.chars().next_back().is_some_and(is_ident) {
                continue;
            }
            let mut rest = &code[at + head.len()..];
            let mut base = if head == "crate::" {
                Vec::new()
            } else {
                parent(module)
            };
            // `super::super::…` climbs once per step.
            while let Some(up) = rest.strip_prefix("super::") {
                base = parent(&base);
                rest = up;
            }
            if let Some(group) = rest.strip_prefix('{') {
                let group = &group[..group.find('}').unwrap_or(group.len())];
                for member in group.split(',') {
                    out.push(chain(&base, member.trim(), is_ident));
                }
            } else {
                out.push(chain(&base, rest, is_ident));
            }
        }
    }
    out
}

fn parent(module: &[String]) -> Vec<String> {
    module[..module.len().saturating_sub(1)].to_vec()
}

/// `base` followed by the `a::b::c` chain that `text` starts with.
fn chain(base: &[String], text: &str, is_ident: impl Fn(char) -> bool) -> Vec<String> {
    let mut parts = base.to_vec();
    for segment in text.split("::") {
        let ident: String = segment.chars().take_while(|c| is_ident(*c)).collect();
        if ident.is_empty() {
            break;
        }
        parts.push(ident.clone());
        if ident.len() != segment.len() {
            break;
        }
    }
    parts
}

/// Each crate's import graph: file → the files it takes from.
fn graphs() -> BTreeMap<String, BTreeMap<PathBuf, BTreeSet<PathBuf>>> {
    let crates = workspace().join("crates");
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(&crates).expect("crates/") {
        let src = entry.expect("an entry").path().join("src");
        if !src.is_dir() {
            continue;
        }
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        let roots = [src.join("lib.rs"), src.join("main.rs")];
        let mut graph = BTreeMap::new();
        for file in &files {
            let text = std::fs::read_to_string(file).expect("a readable file");
            let module = module_of(&src, file);
            let takes: BTreeSet<PathBuf> = paths_named(&code_of(&text), &module)
                .iter()
                .filter_map(|p| file_of(&src, p))
                .filter(|t| t != file && !roots.contains(t))
                .collect();
            graph.insert(file.clone(), takes);
        }
        let name = src.parent().unwrap().file_name().unwrap();
        out.insert(name.to_string_lossy().into_owned(), graph);
    }
    out
}

/// The circles of `graph` (strongly connected sets of two files or more),
/// by Tarjan's algorithm.
fn circles(graph: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Vec<Vec<PathBuf>> {
    struct Walk<'g> {
        graph: &'g BTreeMap<PathBuf, BTreeSet<PathBuf>>,
        index: BTreeMap<&'g PathBuf, (usize, usize)>,
        stack: Vec<&'g PathBuf>,
        on_stack: BTreeSet<&'g PathBuf>,
        found: Vec<Vec<PathBuf>>,
    }
    impl<'g> Walk<'g> {
        fn visit(&mut self, v: &'g PathBuf) {
            let n = self.index.len();
            self.index.insert(v, (n, n));
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in &self.graph[v] {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.index[w].1.min(self.index[v].1);
                    self.index.get_mut(v).unwrap().1 = low;
                } else if self.on_stack.contains(w) {
                    let low = self.index[w].0.min(self.index[v].1);
                    self.index.get_mut(v).unwrap().1 = low;
                }
            }
            let (index, low) = self.index[v];
            if index == low {
                let mut circle = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    circle.push(w.clone());
                    if w == v {
                        break;
                    }
                }
                if circle.len() > 1 {
                    self.found.push(circle);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v) {
            walk.visit(v);
        }
    }
    walk.found
}

#[test]
fn no_crate_keeps_a_circle_of_more_than_four_files() {
    let mut too_large = Vec::new();
    for (krate, graph) in graphs() {
        for circle in circles(&graph) {
            if circle.len() > MOST_FILES {
                let names: Vec<String> = circle
                    .iter()
                    .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
                    .collect();
                too_large.push(format!("{krate}: {}", names.join(", ")));
            }
        }
    }
    assert!(
        too_large.is_empty(),
        "import circles of more than {MOST_FILES} files:\n{}",
        too_large.join("\n")
    );
}

/// The reading finds a circle it is shown, and only that one.
#[test]
fn the_reading_finds_a_circle() {
    let dir = std::env::temp_dir().join(format!("circles-{}", std::process::id()));
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("b")).unwrap();
    let write = |name: &str, text: &str| std::fs::write(src.join(name), text).unwrap();
    write("lib.rs", "pub mod a; pub mod b; pub mod c;");
    write(
        "a.rs",
        "use crate::b::x::Thing; use crate::b::Y; // crate::c is only a comment",
    );
    write("b/mod.rs", "pub mod x; use crate::{c::Other, a};");
    write("b/x.rs", "use super::super::a::f;");
    write(
        "c.rs",
        "pub struct Other;\n#[cfg(test)]\nmod tests { use crate::a; }",
    );
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut graph = BTreeMap::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let takes: BTreeSet<PathBuf> = paths_named(&code_of(&text), &module_of(&src, file))
            .iter()
            .filter_map(|p| file_of(&src, p))
            .filter(|t| t != file && *t != src.join("lib.rs"))
            .collect();
        graph.insert(file.clone(), takes);
    }
    let found = circles(&graph);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    let mut names: Vec<String> = found[0]
        .iter()
        .map(|f| f.strip_prefix(&src).unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["a.rs", "b/mod.rs", "b/x.rs"]);
}
