//! Crash test for idempotency (contract section 4) with the real binary:
//! 200 concurrent `createServiceAccount` requests, each with its own
//! `Idempotency-Key` and name, and a SIGKILL of `billing serve` while they
//! are in flight: some have answered, some have committed without
//! answering, the others have not committed (see `WAVE_A`). The server
//! starts again on the same store and every key is replayed with the same
//! body, twice.
//!
//! A key, its account and its recorded result commit in one transaction, so:
//! every key answers 201 now; a key that answered before the kill replays its
//! original status and body with `Idempotent-Replayed: true`; a key that never
//! answered either replays (it committed before the kill) or runs now; the
//! store holds each of the 200 names exactly once; and every reference a key
//! answers can be retrieved.
//!
//! Embedded mode (a SQLite file) always runs; fleet mode (PostgreSQL, a fresh
//! database per run) runs only with BILLING_TEST_FLEET=1.

use crate::common::crash::{
    client, crash_tests, fire_and_kill, post, replay_all, verdict, Answer, Envs, Keyed, Replays,
    Site, Waves,
};
use crate::common::{rand_u32, say};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::time::Instant;

const KEYS: usize = 200;
/// The creates go in two waves, each all at once: wave A (a quarter of the
/// keys) first, wave B (the rest) as soon as the first answer of wave A
/// arrives. The server is killed while wave B is being written (on
/// PostgreSQL several of the rest inside their transactions): see
/// `common::crash::fire_and_kill` and `Waves::amid_b`.
const WAVE_A: usize = KEYS / 4;

fn principal_ref(a: &Answer) -> Option<&str> {
    a.data()["principal_ref"].as_str()
}

fn key_of(run: &str, i: usize) -> String {
    format!("idem-crash-{run}-{i:03}")
}

fn name_of(run: &str, i: usize) -> String {
    let wave = if i < WAVE_A { 'a' } else { 'b' };
    format!("crash-{run}-{wave}{i:03}")
}

fn body_of(run: &str, i: usize) -> serde_json::Value {
    serde_json::json!({
        "name": name_of(run, i),
        "description": format!("idempotency crash test, request {i}"),
    })
}

/// The create of key `i` of `run`, as a [`Keyed`] request.
fn creates(api: &str, secret: &str, run: &str) -> impl Keyed {
    let (client, url) = (client(), format!("{api}/api/v1/service_accounts"));
    let (secret, run) = (secret.to_owned(), run.to_owned());
    move |i| {
        let (client, url, secret, run) = (client.clone(), url.clone(), secret.clone(), run.clone());
        async move {
            post(
                &client,
                &url,
                &secret,
                &key_of(&run, i),
                None,
                &body_of(&run, i),
            )
            .await
        }
    }
}

/// Every service account of the sandbox, following `next_cursor` until
/// `has_more` is false.
async fn list_accounts(api: &str, secret: &str) -> Vec<serde_json::Value> {
    let client = client();
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..100 {
        let mut req = client
            .get(format!("{api}/api/v1/service_accounts"))
            .bearer_auth(secret);
        if let Some(c) = &cursor {
            req = req.query(&[("cursor", c)]);
        }
        let r = req.send().await.unwrap();
        let status = r.status();
        let page: serde_json::Value = r.json().await.unwrap();
        assert_eq!(status, 200, "listServiceAccounts: {page}");
        items.extend(page["data"]["items"].as_array().unwrap().iter().cloned());
        if page["data"]["has_more"] != true {
            return items;
        }
        cursor = Some(
            page["data"]["next_cursor"]
                .as_str()
                .expect("has_more with a next_cursor")
                .to_owned(),
        );
    }
    panic!("listServiceAccounts never reached has_more: false");
}

/// The scenario of the module docs against a store the environment
/// variables `envs` name (a fleet store if `fleet`); `probe_url` reads that
/// store beside the server.
async fn crash_and_replay(label: &str, dir: &Path, envs: Envs, probe_url: &str, fleet: bool) {
    let run = format!("{label}-{:08x}", rand_u32());
    let site = Site::new(dir, envs);
    let api = site.api.clone();
    let secret = site.bootstrap().secret;

    // 1. Wave A (a quarter of the keys) at once, then wave B (the rest) at
    //    once as soon as wave A starts answering; SIGKILL while wave B is
    //    being written.
    let started = Instant::now();
    let mut first = site.serve("serve-1.log").await;
    let ready_after = started.elapsed();
    let waves = Waves {
        n: KEYS,
        wave_a: WAVE_A,
        what: "create",
        count_b: "SELECT COUNT(*) FROM service_accounts WHERE name LIKE $1",
        b_pattern: format!("crash-{run}-b%"),
        probe_url,
        kill_at: Waves::amid_b(KEYS, WAVE_A, fleet),
    };
    let kill = fire_and_kill(&mut first, waves, creates(&api, &secret, &run)).await;
    drop(first);
    let (before, log_1) = (&kill.before, &kill.log);
    let statuses_before: BTreeMap<u16, usize> =
        before.values().fold(BTreeMap::new(), |mut m, a| {
            *m.entry(a.status).or_default() += 1;
            m
        });
    let not_created: Vec<String> = before
        .iter()
        .filter(|(_, a)| a.status != 201)
        .map(|(i, a)| format!("key {i}: {}", a.short()))
        .collect();
    assert!(
        not_created.is_empty(),
        "before the kill, {} of {} answered creates were not 201 ({statuses_before:?}):\n{}\n{log_1}",
        not_created.len(),
        before.len(),
        not_created.join("\n")
    );

    // 2. The same store, a new process; every key again, with its body.
    let mut second = site.serve("serve-2.log").await;
    let restarted_after = kill.killed.elapsed();
    let (after, retries) = replay_all(KEYS, creates(&api, &secret, &run)).await;
    // And once more: whatever ran after the restart is now a kept result.
    let (again, retries_again) = replay_all(KEYS, creates(&api, &secret, &run)).await;

    let mut problems: Vec<String> = Vec::new();
    let mut replays = Replays::default();
    let mut answered_refs: HashMap<usize, String> = HashMap::new();
    for i in 0..KEYS {
        let Some(now) = Replays::after(i, &after, 201, &mut problems) else {
            continue;
        };
        let Some(reference) = principal_ref(now) else {
            problems.push(format!("key {i}: no principal_ref in {}", now.short()));
            continue;
        };
        if now.data()["name"] != name_of(&run, i).as_str() {
            problems.push(format!(
                "key {i}: answers an account of another name: {}",
                now.short()
            ));
        }
        replays.check(
            i,
            before.get(&i),
            now,
            &again[&i],
            principal_ref,
            &mut problems,
        );
        answered_refs.insert(i, reference.to_owned());
    }

    // 3. The store: each name exactly once, and only the 200.
    let accounts = list_accounts(&api, &secret).await;
    let mut by_name: HashMap<String, Vec<String>> = HashMap::new();
    for a in &accounts {
        let name = a["name"].as_str().unwrap_or_default();
        if name.starts_with(&format!("crash-{run}-")) {
            by_name
                .entry(name.to_owned())
                .or_default()
                .push(a["principal_ref"].as_str().unwrap_or_default().to_owned());
        }
    }
    let expected: HashSet<String> = (0..KEYS).map(|i| name_of(&run, i)).collect();
    let mut twice: Vec<String> = by_name
        .iter()
        .filter(|(_, refs)| refs.len() > 1)
        .map(|(name, refs)| format!("{name} exists {} times: {refs:?}", refs.len()))
        .collect();
    twice.sort();
    problems.extend(twice.iter().cloned());
    let listed: HashSet<String> = by_name.keys().cloned().collect();
    let mut missing: Vec<&String> = expected.difference(&listed).collect();
    missing.sort();
    if !missing.is_empty() {
        problems.push(format!("names not in the store: {missing:?}"));
    }
    let mut extra: Vec<&String> = listed.difference(&expected).collect();
    extra.sort();
    if !extra.is_empty() {
        problems.push(format!(
            "names in the store that no key asked for: {extra:?}"
        ));
    }
    // Each key's answer is the listed account of its name, and can be
    // retrieved.
    let client = client();
    for (i, reference) in &answered_refs {
        let name = name_of(&run, *i);
        if let Some(refs) = by_name.get(&name) {
            if !refs.contains(reference) {
                problems.push(format!(
                    "key {i}: answers {reference}, but {name} is listed as {refs:?}"
                ));
            }
        }
        let r = client
            .get(format!("{api}/api/v1/service_accounts/{reference}"))
            .bearer_auth(&secret)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let got: serde_json::Value = r.json().await.unwrap_or_default();
        if status != 200 || got["data"]["name"] != name.as_str() {
            problems.push(format!(
                "key {i}: its account {reference} cannot be retrieved: {status} {got}"
            ));
        }
    }

    let log_2 = second.log_tail();
    let clean_exit = second.terminate_cleanly();
    say(&format!(
        "idempotency crash [{label}]: server ready in {} ms; SIGKILL (pid {}) {} ms after firing {KEYS} creates, \
         wave B fired after {} ms, {} of wave B in the store at the kill; {} answered (all 201; {} of them seen before the kill) and {} not; after the restart ({} ms to ready) {} of those replayed \
         (committed before the kill) and {} ran now; {} + {} retries on 409/503; {} accounts listed; \
         {} problems; total {} ms",
        ready_after.as_millis(),
        kill.pid,
        kill.killed_after.as_millis(),
        kill.b_fired_after.as_millis(),
        kill.b_in_store,
        before.len(),
        kill.at_decision,
        kill.lost.len(),
        restarted_after.as_millis(),
        replays.replayed_lost,
        replays.ran_lost,
        retries,
        retries_again,
        accounts.len(),
        problems.len(),
        started.elapsed().as_millis(),
    ));
    assert!(
        replays.ran_lost > 0,
        "[{label}] every create had committed by the time of the kill: nothing uncommitted was in flight"
    );
    verdict(
        label,
        "after a crash mid-flight",
        &problems,
        &format!("{log_1}\n{log_2}"),
        clean_exit,
    );
}

crash_tests!(
    embedded_crash_mid_flight_replays_every_key_once,
    fleet_crash_mid_flight_replays_every_key_once,
    on_fleet_store("fleet idempotency crash test", "billing_idem", 7),
    |label, dir, envs, url, fleet| crash_and_replay(label, dir, envs, url, fleet)
);
