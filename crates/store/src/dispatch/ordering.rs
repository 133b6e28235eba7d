//! Order per key (contract 13.1) in the store: numbering events, and the
//! release of a key's waiting deliveries, which is `domain::webhook::
//! ordering::may_start` in SQL (`statements::release`).
//!
//! - **Numbering.** An event's `sequence` comes from its key's counter row
//!   (`ordering_keys.last_sequence`), moved in the unit of work that emits
//!   the event (`number`, through the outbox) or, for an event from a queue,
//!   in the intake's transaction that accepts it (`accept`). The row stays
//!   locked until that transaction ends, so concurrent writers of one key
//!   take consecutive numbers in commit order, and a rolled-back one gives
//!   its numbers back: no duplicate, no gap.
//! - **Acceptance.** Events of one key may reach the intake out of order (a
//!   fleet's relays and consumers race). `accepted_through` is how far the
//!   key's events were accepted without a gap (`advance`); a delivery of a
//!   later sequence waits until the gap is filled.
//! - **Waiting.** On a `per_key` endpoint a delivery is written waiting:
//!   `pending` with no due time, so no claim, schedule read or Redis feed
//!   ever sees it, and the claim path of unordered endpoints is untouched.
//!   `release` gives a due time (now) to each waiting delivery of the keys
//!   it is asked about that may start; every writer that can let one start
//!   calls it in its own transaction: the intake, the recorder (a success),
//!   a skip, a redrive, a resume.
//! - **Fleet.** The writers of a key serialise on its counter row
//!   (`lock_keys`, or the intake's numbering), so a release never misses a
//!   delivery that a concurrent transaction was writing.
//!
//! This module never reads event data and knows no endpoint setting but
//! what the fan-out wrote into `ordered_key`.

use crate::db::marks::Marks;
use crate::db::tx::{int, text, Arg, Columns};

/// The inner transaction: numbering also runs at a commit (`invoice_numbers`).
type WriteTx = store_db::WriteTx;
use crate::dispatch::fanout::EventRow;
use crate::{Backend, StoreError};
use domain::webhook::event::EventOrder;
use domain::webhook::ordering::accepted_through;
use domain::{Ref, Timestamp};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// An ordering key within its environment.
pub type KeyOf = (String, String);

/// The counter upsert: `n` more sequences for a key (marks: environment,
/// key, n, n); returns the last one given out and how far the key was
/// accepted.
fn take_sequences(marks: &mut Marks) -> String {
    let (env, key, n, m) = (marks.next(), marks.next(), marks.next(), marks.next());
    format!(
        "INSERT INTO ordering_keys (environment_ref, ordering_key, last_sequence, accepted_through) \
         VALUES ({env}, {key}, {n}, 0) ON CONFLICT (environment_ref, ordering_key) DO UPDATE \
         SET last_sequence = ordering_keys.last_sequence + {m} \
         RETURNING last_sequence, accepted_through"
    )
}

/// Takes `n` sequences of `key` (`n` may be 0: the row is then only
/// locked, and made if it was missing); returns the last one given out
/// and `accepted_through`.
async fn take(tx: &mut WriteTx, key: &KeyOf, n: usize) -> Result<(i64, i64), StoreError> {
    let sql = take_sequences(&mut Marks::new(tx.backend()));
    let n = n as i64;
    let rows = tx
        .fetch(
            &sql,
            &[
                key.0.as_str().into(),
                key.1.as_str().into(),
                n.into(),
                n.into(),
            ],
        )
        .await?;
    let row = crate::db::tx::single(&rows)?;
    Ok((int(row, "last_sequence")?, int(row, "accepted_through")?))
}

/// Numbers the events of an emitting unit of work that have a key and no
/// sequence yet, in their order, keys taken in a fixed order (two units
/// of work never wait on each other's keys in a circle).
pub(crate) async fn number(
    tx: &mut WriteTx,
    events: &mut [crate::EventRecord],
) -> Result<(), StoreError> {
    let mut by_key: BTreeMap<KeyOf, Vec<usize>> = BTreeMap::new();
    for (i, e) in events.iter().enumerate() {
        if let Some(order) = e.order.as_ref().filter(|o| o.sequence.is_none()) {
            by_key
                .entry((e.environment_ref.to_string(), order.key.to_string()))
                .or_default()
                .push(i);
        }
    }
    for (key, indexes) in by_key {
        let (last, _) = take(tx, &key, indexes.len()).await?;
        let first = last - indexes.len() as i64 + 1;
        for (n, i) in indexes.into_iter().enumerate() {
            if let Some(order) = events[i].order.as_mut() {
                order.sequence = Some(first + n as i64);
            }
        }
    }
    Ok(())
}

/// What the intake's numbering did: every key of the batch (for the
/// release), and those whose acceptance may have a gap to walk
/// (`advance`), with how far each was accepted.
pub(crate) struct Accepted {
    pub keys: Vec<KeyOf>,
    pub to_walk: Vec<(KeyOf, i64)>,
}

/// The intake's numbering, first in its transaction, one statement for
/// the whole batch (`statements::number_batch`): locks the batch's keys in
/// a fixed order, gives each new event without a trusted sequence the next
/// of its key (one the service emitted keeps its own, if its key gave it
/// out), and moves a key's `accepted_through` with them when nothing was
/// missing before. An event accepted before gets its stored sequence; the
/// numbers it was given back (rare: a concurrent redelivery) are returned
/// to the counter at once.
pub(crate) async fn accept(
    tx: &mut WriteTx,
    events: &mut [EventRow],
) -> Result<Accepted, StoreError> {
    let mut by_key: BTreeMap<KeyOf, Vec<usize>> = BTreeMap::new();
    for (i, e) in events.iter().enumerate() {
        if let Some(order) = &e.order {
            by_key
                .entry((e.environment_ref.to_string(), order.key.to_string()))
                .or_default()
                .push(i);
        }
    }
    if by_key.is_empty() {
        return Ok(Accepted {
            keys: Vec::new(),
            to_walk: Vec::new(),
        });
    }
    // What each key asks: numbers for its events without a sequence (each
    // event once), and whether all its events are such.
    let asks: Vec<(i64, bool)> = by_key
        .values()
        .map(|indexes| {
            let mut seen = std::collections::HashSet::new();
            let wanted = indexes
                .iter()
                .filter(|i| {
                    let e = &events[**i];
                    e.order.as_ref().is_some_and(|o| o.sequence.is_none())
                        && seen.insert(e.event_ref.as_str())
                })
                .count() as i64;
            let all_new = indexes.iter().all(|i| {
                events[*i]
                    .order
                    .as_ref()
                    .is_some_and(|o| o.sequence.is_none())
            });
            (wanted, all_new)
        })
        .collect();
    let mut marks = Marks::new(tx.backend());
    let sql = statements::number_batch(&mut marks, by_key.len());
    let mut args: Vec<Arg> = Vec::with_capacity(by_key.len() * 4);
    for ((key, _), (wanted, all_new)) in by_key.iter().zip(&asks) {
        args.push(key.0.as_str().into());
        args.push(key.1.as_str().into());
        args.push((*wanted).into());
        args.push((if *all_new { *wanted } else { 0 }).into());
    }
    let mut counters: HashMap<KeyOf, (i64, i64)> = HashMap::new();
    for row in tx.fetch(&sql, &args).await? {
        let key = (text(&row, "environment_ref")?, text(&row, "ordering_key")?);
        counters.insert(
            key,
            (int(&row, "last_sequence")?, int(&row, "accepted_through")?),
        );
    }
    // Read after the keys are locked: a concurrent intake of the same
    // event has committed by now, and its number is found, not taken again.
    let refs: Vec<&str> = by_key
        .values()
        .flatten()
        .map(|i| events[*i].event_ref.as_str())
        .collect();
    let before = accepted_before(tx, &refs).await?;
    let mut to_walk = Vec::new();
    for ((key, indexes), (wanted, all_new)) in by_key.iter().zip(&asks) {
        let (last, through) = counters
            .get(key)
            .copied()
            .ok_or_else(|| StoreError::Corrupt(format!("the counter of ordering key {}", key.1)))?;
        let top = last - wanted;
        let mut next = top;
        let mut given: HashMap<String, i64> = HashMap::new();
        for i in indexes {
            let e = &mut events[*i];
            let event_ref = e.event_ref.to_string();
            let Some(order) = e.order.as_mut() else {
                continue;
            };
            let sequence = if let Some(s) = before.get(&event_ref) {
                *s
            } else if let Some(s) = given.get(&event_ref) {
                *s
            } else {
                let s = match order.sequence {
                    Some(s) if s <= top => s,
                    _ => {
                        next += 1;
                        next
                    }
                };
                given.insert(event_ref, s);
                s
            };
            order.sequence = Some(sequence);
        }
        if next == last && *all_new && through == last {
            continue;
        }
        // Not all numbers were used (an event accepted before), or more
        // were needed (a sequence its key never gave out), or the key had
        // a gap: the counter takes what was used, and acceptance is
        // walked again from where it was surely contiguous.
        let through = through.min(top);
        if next != last {
            tx.execute(
                "UPDATE ordering_keys SET last_sequence = $1, accepted_through = $2 \
                 WHERE environment_ref = $3 AND ordering_key = $4",
                &[
                    next.into(),
                    through.into(),
                    key.0.as_str().into(),
                    key.1.as_str().into(),
                ],
            )
            .await?;
        }
        to_walk.push((key.clone(), through));
    }
    Ok(Accepted {
        keys: by_key.into_keys().collect(),
        to_walk,
    })
}

/// The sequences of those of `refs` accepted before.
async fn accepted_before(
    tx: &mut WriteTx,
    refs: &[&str],
) -> Result<HashMap<String, i64>, StoreError> {
    let mut found = HashMap::new();
    for chunk in refs.chunks(500) {
        let sql = format!(
            "SELECT event_ref, sequence FROM events WHERE event_ref IN ({})",
            Marks::new(tx.backend()).list(chunk.len())
        );
        let args: Vec<Arg> = chunk.iter().map(|r| Arg::from(*r)).collect();
        for row in tx.fetch(&sql, &args).await? {
            if let Some(s) = row.int("sequence")? {
                found.insert(text(&row, "event_ref")?, s);
            }
        }
    }
    Ok(found)
}

/// After the intake wrote its events: moves each key's `accepted_through`
/// (from where it was surely contiguous) over the sequences now accepted
/// without a gap. Its row is locked already (`accept`).
pub(crate) async fn advance(tx: &mut WriteTx, keys: &[(KeyOf, i64)]) -> Result<(), StoreError> {
    for (key, through) in keys {
        let through = *through;
        let sql = "SELECT sequence FROM events WHERE environment_ref = $1 AND ordering_key = $2 \
             AND sequence > $3 ORDER BY sequence LIMIT 1000";
        let rows = tx
            .fetch(
                sql,
                &[key.0.as_str().into(), key.1.as_str().into(), through.into()],
            )
            .await?;
        let accepted: Vec<i64> = rows
            .iter()
            .map(|r| int(r, "sequence"))
            .collect::<Result<_, _>>()?;
        let now_through = accepted_through(through, &accepted);
        let sql = "UPDATE ordering_keys SET accepted_through = $1 \
             WHERE environment_ref = $2 AND ordering_key = $3 AND accepted_through <> $1";
        tx.execute(
            sql,
            &[
                now_through.into(),
                key.0.as_str().into(),
                key.1.as_str().into(),
            ],
        )
        .await?;
    }
    Ok(())
}

/// Locks the counter rows of `keys` (PostgreSQL; SQLite's one writer
/// holds them all already), in a fixed order, so that a release here and
/// a concurrent intake of the same keys take turns (module docs).
pub(crate) async fn lock_keys(tx: &mut WriteTx, keys: &BTreeSet<KeyOf>) -> Result<(), StoreError> {
    if tx.backend() != Backend::Postgres || keys.is_empty() {
        return Ok(());
    }
    let names: BTreeSet<&str> = keys.iter().map(|(_, k)| k.as_str()).collect();
    let sql = format!(
        "SELECT environment_ref FROM ordering_keys WHERE ordering_key IN ({}) \
         ORDER BY environment_ref, ordering_key FOR UPDATE",
        Marks::new(tx.backend()).list(names.len())
    );
    let args: Vec<Arg> = names.iter().map(|k| Arg::from(*k)).collect();
    tx.fetch(&sql, &args).await?;
    Ok(())
}

/// Gives a due time (`now`) to every waiting delivery of `keys` that may
/// start (`statements::release`); returns them.
pub(crate) async fn release(
    tx: &mut WriteTx,
    keys: &BTreeSet<KeyOf>,
    now: Timestamp,
) -> Result<Vec<Ref>, StoreError> {
    let names: BTreeSet<&str> = keys.iter().map(|(_, k)| k.as_str()).collect();
    let mut released = Vec::new();
    let names: Vec<&str> = names.into_iter().collect();
    for chunk in names.chunks(500) {
        let mut marks = Marks::new(tx.backend());
        let at = marks.next();
        let scope = format!("ordered_key IN ({})", marks.list(chunk.len()));
        let sql = statements::release(&at, &scope);
        let mut args: Vec<Arg> = vec![now.millis().into()];
        args.extend(chunk.iter().map(|k| Arg::from(*k)));
        for row in tx.fetch(&sql, &args).await? {
            released.push(Ref::from_trusted(text(&row, "delivery_ref")?));
        }
    }
    Ok(released)
}

/// Releases what may start among the waiting deliveries of an endpoint
/// (its resume).
pub(crate) async fn release_endpoint(
    tx: &mut WriteTx,
    endpoint_ref: &Ref,
    now: Timestamp,
) -> Result<Vec<Ref>, StoreError> {
    let mut marks = Marks::new(tx.backend());
    let at = marks.next();
    let scope = format!(
        "endpoint_ref = {} AND ordered_key IS NOT NULL",
        marks.next()
    );
    let rows = tx
        .fetch(
            &statements::release(&at, &scope),
            &[now.millis().into(), endpoint_ref.as_str().into()],
        )
        .await?;
    rows.iter()
        .map(|r| Ok(Ref::from_trusted(text(r, "delivery_ref")?)))
        .collect()
}

/// Makes the pending, unleased deliveries of `key` on `endpoint_ref` after
/// `sequence` wait again: a redrive made the delivery of `sequence` open
/// again, and they must not start before it settles.
pub(crate) async fn wait_behind(
    tx: &mut WriteTx,
    endpoint_ref: &Ref,
    key: &str,
    sequence: i64,
    now: Timestamp,
) -> Result<(), StoreError> {
    let sql = "UPDATE webhook_deliveries SET next_attempt_at = NULL, version = version + 1 \
         WHERE ordered_key = $1 AND endpoint_ref = $2 AND sequence > $3 \
         AND status = 'pending' AND next_attempt_at IS NOT NULL \
         AND (lease_until IS NULL OR lease_until < $4)";
    tx.execute(
        sql,
        &[
            key.into(),
            endpoint_ref.as_str().into(),
            sequence.into(),
            now.millis().into(),
        ],
    )
    .await?;
    Ok(())
}

/// The key of an ordered delivery, as `release` and `lock_keys` take it.
pub(crate) fn key_of(environment_ref: &Ref, order: &EventOrder) -> KeyOf {
    (environment_ref.to_string(), order.key.to_string())
}

/// The statements of order per key, public so that tests check them
/// against the domain's rule with the very text that runs.
pub mod statements {
    use crate::db::marks::Marks;
    use domain::webhook::DeliveryStatus;

    /// The intake's numbering of `n` keys (marks: environment, key, the
    /// numbers wanted, and the same again when every event of the key in the
    /// batch wanted one, else 0), in the order given (sorted: rows are
    /// locked in that order): each key's counter moves by its numbers, and
    /// its `accepted_through` with it when the key had no gap and all its
    /// events were numbered here. Returns each key's counter after.
    pub fn number_batch(marks: &mut Marks, n: usize) -> String {
        let rows: Vec<String> = (0..n).map(|_| format!("({})", marks.list(4))).collect();
        format!(
            "INSERT INTO ordering_keys (environment_ref, ordering_key, last_sequence, \
             accepted_through) VALUES {} ON CONFLICT (environment_ref, ordering_key) DO UPDATE \
             SET last_sequence = ordering_keys.last_sequence + excluded.last_sequence, \
             accepted_through = CASE WHEN excluded.accepted_through > 0 \
             AND ordering_keys.accepted_through = ordering_keys.last_sequence \
             THEN ordering_keys.last_sequence + excluded.last_sequence \
             ELSE ordering_keys.accepted_through END \
             RETURNING environment_ref, ordering_key, last_sequence, accepted_through",
            rows.join(", ")
        )
    }

    /// Whether the delivery row `alias` keeps the later ones of its key
    /// waiting: `domain::webhook::ordering::blocks` in SQL.
    pub fn blocks(alias: &str) -> String {
        format!(
            "({alias}.status IN ('{}', '{}') OR ({alias}.status = '{}' AND {alias}.skipped_at IS NULL))",
            DeliveryStatus::Pending.as_str(),
            DeliveryStatus::Held.as_str(),
            DeliveryStatus::Failed.as_str(),
        )
    }

    /// Gives the due time `at` to every waiting delivery matching `scope`
    /// (a condition on `webhook_deliveries`' own columns) that may start:
    /// its key's events are accepted through its sequence, and no delivery
    /// of its key on its endpoint with a lower sequence blocks. Returns
    /// the references released.
    pub fn release(at: &str, scope: &str) -> String {
        format!(
            "UPDATE webhook_deliveries SET next_attempt_at = {at}, version = version + 1 \
             WHERE {scope} AND status = '{pending}' AND next_attempt_at IS NULL \
             AND ordered_key IS NOT NULL \
             AND sequence <= (SELECT k.accepted_through FROM ordering_keys k \
             WHERE k.environment_ref = webhook_deliveries.environment_ref \
             AND k.ordering_key = webhook_deliveries.ordered_key) \
             AND NOT EXISTS (SELECT 1 FROM webhook_deliveries p \
             WHERE p.ordered_key = webhook_deliveries.ordered_key \
             AND p.endpoint_ref = webhook_deliveries.endpoint_ref \
             AND p.environment_ref = webhook_deliveries.environment_ref \
             AND p.sequence < webhook_deliveries.sequence AND {blocks}) \
             RETURNING delivery_ref",
            pending = DeliveryStatus::Pending.as_str(),
            blocks = blocks("p"),
        )
    }

    /// The delivery that `$1` (a waiting delivery's reference) waits for:
    /// the blocking one of its key and endpoint with the highest sequence
    /// below its own.
    pub fn waiting_for() -> String {
        format!(
            "SELECT p.delivery_ref FROM webhook_deliveries d JOIN webhook_deliveries p \
             ON p.ordered_key = d.ordered_key AND p.endpoint_ref = d.endpoint_ref \
             AND p.environment_ref = d.environment_ref AND p.sequence < d.sequence \
             WHERE d.delivery_ref = $1 AND d.ordered_key IS NOT NULL AND {} \
             ORDER BY p.sequence DESC LIMIT 1",
            blocks("p")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::statements;
    use domain::webhook::ordering::{blocks, may_start, Standing};
    use domain::webhook::DeliveryStatus;
    use proptest::prelude::*;

    /// A delivery of one key, as the property test writes it.
    #[derive(Debug, Clone)]
    struct Row {
        endpoint: usize,
        sequence: i64,
        status: DeliveryStatus,
        skipped: bool,
        waiting: bool,
    }

    fn row() -> impl Strategy<Value = Row> {
        (0usize..2, 1i64..12, 0usize..4, any::<bool>(), any::<bool>()).prop_map(
            |(endpoint, sequence, s, skipped, waiting)| Row {
                endpoint,
                sequence,
                status: DeliveryStatus::ALL[s],
                skipped,
                waiting,
            },
        )
    }

    fn database(rows: &[Row], accepted_through: i64) -> rusqlite::Connection {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE webhook_deliveries (delivery_ref TEXT PRIMARY KEY, \
             environment_ref TEXT, endpoint_ref TEXT, ordered_key TEXT, sequence BIGINT, \
             status TEXT, skipped_at BIGINT, next_attempt_at BIGINT, version BIGINT); \
             CREATE TABLE ordering_keys (environment_ref TEXT, ordering_key TEXT, \
             last_sequence BIGINT, accepted_through BIGINT);",
        )
        .unwrap();
        conn.execute(
            "INSERT INTO ordering_keys VALUES ('env', 'k', 100, ?1)",
            [accepted_through],
        )
        .unwrap();
        for (i, r) in rows.iter().enumerate() {
            conn.execute(
                "INSERT INTO webhook_deliveries VALUES (?1, 'env', ?2, 'k', ?3, ?4, ?5, ?6, 1)",
                rusqlite::params![
                    format!("d{i}"),
                    format!("e{}", r.endpoint),
                    r.sequence,
                    r.status.as_str(),
                    r.skipped.then_some(1),
                    (!r.waiting).then_some(1),
                ],
            )
            .unwrap();
        }
        conn
    }

    /// The index the release walks holds exactly the blocking rows.
    #[test]
    fn the_open_index_is_the_blocking_predicate() {
        let migration = include_str!("../../migrations/shared/0022_order_per_key.sql");
        let index = migration
            .lines()
            .find(|l| l.contains("INDEX webhook_deliveries_open_by_key "))
            .expect("the index");
        let predicate = format!(
            "WHERE ordered_key IS NOT NULL AND {};",
            statements::blocks("p").replace("p.", "")
        );
        assert!(index.ends_with(&predicate), "{index}");
    }

    /// The SQL predicate and the domain's agree, status by status.
    #[test]
    fn blocking_in_sql_and_in_rust_agree() {
        for &status in DeliveryStatus::ALL {
            for skipped in [false, true] {
                let r = Row {
                    endpoint: 0,
                    sequence: 1,
                    status,
                    skipped,
                    waiting: false,
                };
                let conn = database(&[r], 0);
                let sql = format!(
                    "SELECT COUNT(*) FROM webhook_deliveries p WHERE {}",
                    statements::blocks("p")
                );
                let n: i64 = conn.query_row(&sql, [], |row| row.get(0)).unwrap();
                assert_eq!(n == 1, blocks(status, skipped), "{status:?} {skipped}");
            }
        }
    }

    proptest! {
        /// The release statement releases exactly the waiting deliveries the
        /// domain's rule lets start (`may_start`), each against the others
        /// of its key on its own endpoint, and no other row.
        #[test]
        fn release_is_the_domains_rule(
            rows in proptest::collection::vec(row(), 0..14),
            accepted_through in 0i64..14,
        ) {
            // One delivery per (endpoint, sequence), as one per event.
            let mut seen = std::collections::HashSet::new();
            let rows: Vec<Row> = rows
                .into_iter()
                .filter(|r| seen.insert((r.endpoint, r.sequence)))
                .collect();
            let conn = database(&rows, accepted_through);
            let sql = statements::release("?1", "ordered_key = 'k'").replace("$", "?");
            let mut stmt = conn.prepare(&sql).unwrap();
            let released: std::collections::HashSet<String> = stmt
                .query_map([5_000i64], |row| row.get(0))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            for (i, r) in rows.iter().enumerate() {
                let others: Vec<Standing> = rows
                    .iter()
                    .filter(|o| o.endpoint == r.endpoint)
                    .map(|o| Standing { sequence: o.sequence, status: o.status, skipped: o.skipped })
                    .collect();
                let expected = r.waiting
                    && r.status == DeliveryStatus::Pending
                    && may_start(r.sequence, accepted_through, &others);
                prop_assert_eq!(released.contains(&format!("d{i}")), expected, "{:?}", r);
            }
        }
    }
}
