//! Embeds the migrations, written once: `migrations/shared/` holds those
//! both engines accept as they are, `migrations/{sqlite,postgres}/` only
//! the versions whose SQL must differ (present in both folders).
//!
//! Generates `$OUT_DIR/migrations.rs`: for each engine, its files in
//! version order, as `(file name, SQL)` with the SQL embedded by
//! `include_str!`, so the bytes (and sqlx's SHA-384 of them) are exactly
//! the file's. A version found twice for one engine stops the build.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The `.sql` files of a folder, by version number.
fn files(dir: &Path) -> BTreeMap<i64, PathBuf> {
    let mut out = BTreeMap::new();
    // An engine folder holds only the versions that differ, and may be
    // absent; `main` checks that `shared/` gave some.
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries {
        let path = entry.expect("directory entry").path();
        if path.extension().is_none_or(|e| e != "sql") {
            continue;
        }
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let version: i64 = name
            .split('_')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{}: no version number", path.display()));
        if let Some(other) = out.insert(version, path.clone()) {
            panic!(
                "version {version} twice: {} and {}",
                other.display(),
                path.display()
            );
        }
    }
    out
}

fn main() {
    // Read when the script runs, not when it was compiled: a build script
    // compiled in another checkout (a copied target/) must still read this
    // one's migrations.
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR");
    let root = Path::new(&manifest).join("migrations");
    println!("cargo:rerun-if-changed={}", root.display());
    let shared = files(&root.join("shared"));
    assert!(
        !shared.is_empty(),
        "no migrations found in {}",
        root.join("shared").display()
    );
    let mut generated = String::new();
    for (engine, constant) in [("sqlite", "SQLITE"), ("postgres", "POSTGRES")] {
        println!("cargo:rerun-if-changed={}", root.join(engine).display());
        let mut all = shared.clone();
        for (version, path) in files(&root.join(engine)) {
            if let Some(common) = all.insert(version, path.clone()) {
                panic!(
                    "version {version} is in {} and in {}: a version is written once, \
                     in shared/ or in both engine folders",
                    common.display(),
                    path.display()
                );
            }
        }
        generated.push_str(&format!(
            "/// The {engine} migrations in version order: file name, SQL.\n\
             pub(crate) const {constant}: &[(&str, &str)] = &[\n"
        ));
        for path in all.values() {
            let name = path.file_name().unwrap().to_string_lossy();
            generated.push_str(&format!(
                "    ({name:?}, include_str!({:?})),\n",
                path.display().to_string()
            ));
        }
        generated.push_str("];\n");
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR")).join("migrations.rs");
    std::fs::write(out, generated).expect("write migrations.rs");
}
