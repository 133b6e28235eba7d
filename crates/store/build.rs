//! Rebuilds the store when a migration is added: `sqlx::migrate!` embeds
//! the files of `migrations/`, but on stable Rust it only tracks the files
//! it already embedded, not new ones.

fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
