//! Signals that deliveries were made due by a write other than the
//! dispatcher's own hot path (a redrive, a resume, a test send, a fan-out
//! of pending events, an intake with no dispatcher to hand them to), for a
//! dispatcher whose schedule lives outside the store (Redis in a fleet).
//!
//! Within a process the signal is a `Notify`; across processes it is
//! PostgreSQL's `NOTIFY` on [`CHANNEL`], sent inside the write's
//! transaction (`signal_due`), so it is delivered exactly when
//! the write commits. SQLite
//! has only the in-process signal (one process owns the file).
//!
//! A signal carries nothing: it asks for a pass over the store, which is
//! the source of truth. A lost listener connection counts as a signal
//! (notifications may have been missed meanwhile).

use crate::{Backend, Store, StoreError, WriteTx};
use sqlx::postgres::PgListener;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// The PostgreSQL notification channel of deliveries made due.
pub const CHANNEL: &str = "billing_deliveries_due";

/// What a commit of the store wakes in its process. The process that
/// wires its parts makes one and gives it to its store (`Store::waking`,
/// `billing::app::open_store`); the store attaches it to each of its
/// `WriteTx`s (`Store::signals`, read back with `WriteTx::signals`), and a
/// write asks for one with `WriteTx::wake_on_commit`. A store given none
/// wakes nobody: its relay and dispatchers find the work at their next
/// poll.
#[derive(Default)]
pub struct Wakeups {
    /// Events were emitted into the outbox (`super::outbox::Emit`): the
    /// relay starts at once instead of at its next poll.
    pub(crate) outbox: Arc<Notify>,
    /// Deliveries were made due outside the dispatcher's hot path
    /// (`signal_due`).
    pub(crate) due: Arc<Notify>,
}

/// Records that `tx` makes deliveries due: PostgreSQL delivers its
/// `NOTIFY` on `CHANNEL` when the transaction commits, and the commit
/// wakes this process's dispatcher. A transaction sends one `NOTIFY`
/// however many writes make deliveries due (without the store's `Wakeups`,
/// only tests' transactions, each call sends one; PostgreSQL folds them
/// into one at the commit).
pub(crate) async fn signal_due(tx: &mut WriteTx) -> Result<(), StoreError> {
    let due = tx.signals::<Wakeups>().map(|wake| wake.due.clone());
    if due.as_ref().is_some_and(|due| tx.wakes_on_commit(due)) {
        return Ok(());
    }
    if tx.backend() == Backend::Postgres {
        tx.execute(&format!("NOTIFY {CHANNEL}"), &[]).await?;
    }
    if let Some(due) = due {
        tx.wake_on_commit(&due);
    }
    Ok(())
}

/// Waits for the next signal: see the module docs.
pub struct DueSignals {
    local: Arc<Notify>,
    listener: Option<PgListener>,
    url: Option<String>,
}

impl DueSignals {
    /// Resolves at the next signal, from this process or (PostgreSQL)
    /// another one.
    pub async fn next(&mut self) {
        let Some(listener) = self.listener.as_mut() else {
            let Some(url) = &self.url else {
                self.local.notified().await;
                return;
            };
            // The listener lost its connection or never had one: try again
            // every second, and count getting it back as a signal
            // (something may have been missed meanwhile).
            loop {
                tokio::select! {
                    _ = self.local.notified() => return,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {
                        if let Ok(l) = listen(url).await {
                            self.listener = Some(l);
                            return;
                        }
                    }
                }
            }
        };
        tokio::select! {
            _ = self.local.notified() => {}
            received = listener.try_recv() => match received {
                Ok(Some(_)) => {}
                // The connection dropped: it is re-established on the
                // next call.
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "listening for due deliveries failed; retrying");
                    self.listener = None;
                }
            },
        }
    }
}

async fn listen(url: &str) -> Result<PgListener, StoreError> {
    let mut listener = PgListener::connect(url).await?;
    listener.listen(CHANNEL).await?;
    Ok(listener)
}

impl Store {
    /// The signals of deliveries made due (module docs). With PostgreSQL
    /// it holds a connection of its own, opened now (or, if the server
    /// cannot be reached now, later).
    pub async fn due_signals(&self) -> DueSignals {
        let url = self.pg_url.as_deref().map(str::to_owned);
        let listener = match &url {
            Some(url) => match listen(url).await {
                Ok(l) => Some(l),
                Err(e) => {
                    tracing::warn!(error = %e, "listening for due deliveries failed; retrying");
                    None
                }
            },
            None => None,
        };
        DueSignals {
            local: self
                .wake
                .as_ref()
                .map_or_else(Arc::default, |wake| wake.due.clone()),
            listener,
            url,
        }
    }

    /// The in-process half of the signal, after the write committed; also
    /// for a dispatcher that failed to index deliveries it was told of and
    /// wants the next pass over the store to find them.
    pub fn due_signalled(&self) {
        if let Some(wake) = &self.wake {
            wake.due.notify_one();
        }
    }
}
