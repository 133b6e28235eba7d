//! Money going back and what other systems own: refunds (create, list,
//! retrieve), and the projected disputes, payouts and participations (list,
//! retrieve; contract 10.1).

pub mod refunds;
