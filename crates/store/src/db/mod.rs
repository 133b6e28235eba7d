//! The shared layer every domain module of the store reads and writes
//! through: the crate `store_db` (the write transaction, the statements
//! outside it, bind marks, keyset paging, the column codecs, SQLite's
//! write lane and its checkpoints, `StoreError`), re-exported here so that
//! `store::db::…` names it, and the embedded migrations, which are the
//! domain's schema and so stay in this crate.
//!
//! The one exception is the write transaction: `tx::WriteTx` wraps
//! `store_db`'s, so that its callers outside the store can pass it to the
//! store's writes and commit it, but never run a statement of their own.
//!
//! `store_db` knows no table of a domain; it only runs statements. What a
//! write means (the outbox, the due signal) is `crate::dispatch`'s.

pub use store_db::{checkpoint, codec, count, group, lane, marks, page, read, write};
pub use store_db::{
    Backend, LaneError, Page, PageRequest, StoreError, Synchronous, BUSY_TIMEOUT, SQLITE_PRAGMAS,
};
pub use tx::WriteTx;

pub mod migrations;
pub mod tx;
