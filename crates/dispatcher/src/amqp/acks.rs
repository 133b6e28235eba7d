//! The acknowledgements of one consuming channel, sent in bulk: a group
//! commit settles its messages together, and one `basic.ack` with
//! `multiple` then acknowledges all of them, where one frame per message
//! would cost the broker and this process a round of work each.
//!
//! The rule kept: an ack covers a delivery tag only once its handler said
//! so (its effect is durable). `multiple` acknowledges every outstanding
//! tag up to its own, so it is sent only for the highest tag of the run of
//! settled tags that starts at the channel's lowest unsettled one; a
//! handler's ack beyond a gap (a message still being written, or handed
//! back after a pause) is sent on its own, so no message waits for another
//! to be acknowledged. Nacks are the handlers' own, sent at once; here they
//! only close the gap they leave.
//!
//! This module must never decide whether a message is acknowledged: it
//! only batches what the handlers decided.

use lapin::options::BasicAckOptions;
use lapin::Channel;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The settled delivery tags of one channel not yet covered by a bulk ack.
/// Tags start at 1 on a channel and rise by one per message delivered on it.
#[derive(Debug)]
pub(crate) struct Window {
    /// The lowest tag not yet settled.
    floor: u64,
    /// Settled tags above `floor`: `true` while the tag's ack is still to
    /// send, `false` once sent (singly) or when the handler nacked it.
    above: BTreeMap<u64, bool>,
}

/// What a flush sends.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Flush {
    /// One `basic.ack` with `multiple` up to this tag.
    pub up_to: Option<u64>,
    /// Acks sent one by one: tags beyond a gap.
    pub single: Vec<u64>,
}

impl Default for Window {
    fn default() -> Self {
        Window {
            floor: 1,
            above: BTreeMap::new(),
        }
    }
}

impl Window {
    /// The handler of `tag` asks for its ack.
    pub fn ack(&mut self, tag: u64) {
        if tag >= self.floor {
            self.above.insert(tag, true);
        }
    }

    /// The handler of `tag` nacked it itself.
    pub fn nacked(&mut self, tag: u64) {
        if tag >= self.floor {
            self.above.insert(tag, false);
        }
    }

    /// The acks to send now; every ack asked for so far is in it once.
    pub fn flush(&mut self) -> Flush {
        let mut flush = Flush::default();
        while let Some(entry) = self.above.first_entry() {
            if *entry.key() != self.floor {
                break;
            }
            if entry.remove() {
                flush.up_to = Some(self.floor);
            }
            self.floor += 1;
        }
        for (tag, pending) in self.above.iter_mut() {
            if std::mem::take(pending) {
                flush.single.push(*tag);
            }
        }
        flush
    }
}

/// The handlers' side: asks for acks, which a task of the session sends.
#[derive(Clone)]
pub(crate) struct Acks {
    window: Arc<Mutex<Window>>,
    wake: Arc<Notify>,
}

impl Acks {
    /// Starts the task that sends `channel`'s acks; it sends the last of
    /// them once `done` is cancelled, then ends.
    pub fn start(channel: Channel, done: CancellationToken) -> (Acks, tokio::task::JoinHandle<()>) {
        let acks = Acks {
            window: Arc::default(),
            wake: Arc::new(Notify::new()),
        };
        let sender = acks.clone();
        let task = tokio::spawn(async move {
            loop {
                let last = tokio::select! {
                    _ = done.cancelled() => true,
                    _ = sender.wake.notified() => false,
                };
                // The handlers a group commit woke together ask in turn:
                // let them all ask before one flush answers them.
                tokio::task::yield_now().await;
                sender.send(&channel).await;
                if last {
                    break;
                }
            }
        });
        (acks, task)
    }

    pub fn ack(&self, tag: u64) {
        self.lock().ack(tag);
        self.wake.notify_one();
    }

    pub fn nacked(&self, tag: u64) {
        self.lock().nacked(tag);
        self.wake.notify_one();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Window> {
        self.window.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn send(&self, channel: &Channel) {
        let flush = self.lock().flush();
        let bulk = flush.up_to.map(|tag| (tag, true));
        let single = flush.single.into_iter().map(|tag| (tag, false));
        for (tag, multiple) in bulk.into_iter().chain(single) {
            if let Err(e) = channel.basic_ack(tag, BasicAckOptions { multiple }).await {
                tracing::warn!(error = %e, "ack failed; the broker will redeliver the messages");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_run_from_the_floor_is_one_bulk_ack() {
        let mut w = Window::default();
        for tag in [2, 1, 3] {
            w.ack(tag);
        }
        assert_eq!(
            w.flush(),
            Flush {
                up_to: Some(3),
                single: vec![]
            }
        );
        assert_eq!(w.flush(), Flush::default());
    }

    #[test]
    fn an_ack_beyond_a_gap_goes_alone_and_once() {
        let mut w = Window::default();
        w.ack(1);
        w.ack(3);
        assert_eq!(
            w.flush(),
            Flush {
                up_to: Some(1),
                single: vec![3]
            }
        );
        w.ack(2);
        assert_eq!(
            w.flush(),
            Flush {
                up_to: Some(2),
                single: vec![]
            }
        );
    }

    #[test]
    fn a_bulk_ack_never_ends_on_a_nacked_tag() {
        let mut w = Window::default();
        w.ack(1);
        w.nacked(2);
        assert_eq!(
            w.flush(),
            Flush {
                up_to: Some(1),
                single: vec![]
            }
        );
        w.nacked(3);
        w.ack(4);
        w.nacked(5);
        assert_eq!(
            w.flush(),
            Flush {
                up_to: Some(4),
                single: vec![]
            }
        );
    }

    #[derive(Debug, Clone, Copy)]
    enum Step {
        Ack,
        Nack,
        Flush,
    }

    proptest! {
        /// Whatever the order handlers settle in, the broker is asked to
        /// ack exactly the tags whose handlers acked, each once, and a
        /// bulk ack covers only settled tags and ends on an acked one.
        #[test]
        fn every_ack_is_sent_once_and_covers_only_settled_tags(
            order in Just((1..=40u64).collect::<Vec<_>>()).prop_shuffle(),
            steps in proptest::collection::vec(
                prop_oneof![3 => Just(Step::Ack), 1 => Just(Step::Nack), 2 => Just(Step::Flush)],
                40..120,
            ),
        ) {
            let mut w = Window::default();
            let mut settled = std::collections::BTreeSet::new();
            let mut acked = std::collections::BTreeSet::new();
            // What the broker holds unacknowledged.
            let mut outstanding: std::collections::BTreeSet<u64> = (1..=40).collect();
            let mut next = order.iter();
            let check = |w: &mut Window,
                             settled: &std::collections::BTreeSet<u64>,
                             acked: &std::collections::BTreeSet<u64>,
                             outstanding: &mut std::collections::BTreeSet<u64>| {
                let f = w.flush();
                if let Some(up_to) = f.up_to {
                    prop_assert!(acked.contains(&up_to) && outstanding.contains(&up_to));
                    let covered: Vec<u64> = outstanding.range(..=up_to).copied().collect();
                    for tag in covered {
                        prop_assert!(settled.contains(&tag), "{tag} not settled");
                        outstanding.remove(&tag);
                    }
                }
                for tag in f.single {
                    prop_assert!(acked.contains(&tag));
                    prop_assert!(outstanding.remove(&tag), "{tag} acked twice");
                }
                Ok(())
            };
            for step in steps {
                match step {
                    Step::Flush => check(&mut w, &settled, &acked, &mut outstanding)?,
                    Step::Ack | Step::Nack => {
                        let Some(&tag) = next.next() else { continue };
                        settled.insert(tag);
                        if matches!(step, Step::Ack) {
                            acked.insert(tag);
                            w.ack(tag);
                        } else {
                            outstanding.remove(&tag);
                            w.nacked(tag);
                        }
                    }
                }
            }
            for &tag in next {
                settled.insert(tag);
                acked.insert(tag);
                w.ack(tag);
            }
            check(&mut w, &settled, &acked, &mut outstanding)?;
            prop_assert!(outstanding.is_empty(), "never acked: {outstanding:?}");
        }
    }
}
