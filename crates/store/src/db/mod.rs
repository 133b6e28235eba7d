//! The shared layer every domain module of the store reads and writes
//! through: the write transaction (`tx`: arguments, rows, columns, the
//! outbox's `emit`), the statements outside it (`read`: the read pool's,
//! bound with the same arguments), bind marks, keyset paging, SQLite's
//! write lane and its checkpoints, and the embedded migrations.
//!
//! Nothing here knows a table of a domain; it only runs statements.

pub(crate) mod checkpoint;
pub(crate) mod lane;
pub(crate) mod marks;
pub mod migrations;
pub mod page;
pub(crate) mod read;
pub mod tx;
