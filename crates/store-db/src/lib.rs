//! The store's low layer: how statements run, on either engine, with
//! nothing of what they are about. `store` builds every domain repository
//! on it, and re-exports it as `store::db`.
//!
//! It owns:
//! - `tx`: `WriteTx`, the one write transaction (arguments `Arg`, rows
//!   `CellRow`, the `Columns` trait every record decoder reads through),
//!   with its owner's signals and the `Notify`s its commit wakes;
//! - `read`: statements on a pool, bound with the same `Arg`s;
//! - `marks`: bind marks of statements built at run time; `page`: keyset
//!   paging; `codec`: the column codecs (JSON text, optional moments);
//! - `lane`, `group` and `checkpoint`: SQLite's write lane, the group
//!   commit of the other units of work on its connection, and the WAL
//!   checkpoints,
//!   with the connection set-up they share (`SQLITE_PRAGMAS`,
//!   `Synchronous`, `BUSY_TIMEOUT`);
//! - `count`: how many statements the process sent, for benchmarks;
//! - `StoreError` (and `LaneError`), the error of every store operation.
//!
//! What it must never do: know a table, a column or a state of a domain
//! (the outbox, deliveries, events, …) or decide what to write; depend on
//! `store` (Cargo forbids the cycle, which is the point of this crate).
//! What a write means for the rest of the process (waking the relay, a
//! `NOTIFY`) is its caller's: `WriteTx` only runs the statements it is
//! given and wakes the `Notify`s it is asked to after its commit. Its
//! only domain dependency is `domain::Timestamp`, for `codec::opt_ts`.

pub mod checkpoint;
pub mod codec;
pub mod count;
mod error;
pub mod group;
pub mod lane;
pub mod marks;
pub mod page;
pub mod read;
pub mod tx;
pub mod write;

pub use error::{LaneError, StoreError};
pub use page::{Page, PageRequest};
pub use tx::WriteTx;

use std::time::Duration;

/// The database engine a store runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// How every SQLite connection of the store is set up (the pools' and the
/// write lane's): WAL, a busy timeout of `BUSY_TIMEOUT`, foreign keys, and
/// no automatic checkpoints (`checkpoint.rs` runs them). The durability
/// pragma follows (`Synchronous`).
pub const SQLITE_PRAGMAS: &str = "PRAGMA journal_mode = WAL; \
     PRAGMA busy_timeout = 15000; PRAGMA foreign_keys = ON; \
     PRAGMA temp_store = MEMORY; PRAGMA wal_autocheckpoint = 0;";

/// The busy timeout set by `SQLITE_PRAGMAS`.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(15);

/// When a SQLite commit counts as done (`store.synchronous`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Synchronous {
    /// The write-ahead log is synced at every commit: whatever the service
    /// confirmed (a 2xx, an ack, a recorded attempt) survives a power loss.
    #[default]
    Full,
    /// Synced at checkpoints only: a crash of the process loses nothing, a
    /// power loss may lose the last commits.
    Normal,
}

impl Synchronous {
    pub fn parse(s: &str) -> Option<Synchronous> {
        match s {
            "full" => Some(Synchronous::Full),
            "normal" => Some(Synchronous::Normal),
            _ => None,
        }
    }

    /// The pragma that sets it on a connection.
    pub fn pragma(self) -> &'static str {
        match self {
            Synchronous::Full => "PRAGMA synchronous = FULL;",
            Synchronous::Normal => "PRAGMA synchronous = NORMAL;",
        }
    }
}
