//! The `billing` binary's library: configuration, start-up of each role,
//! and administration commands. `main.rs` only parses the command line.

pub mod app;
pub mod bootstrap;
pub mod config;
#[cfg(test)]
mod config_reference;
pub mod events;
pub mod secret_key;

pub use config::Config;
