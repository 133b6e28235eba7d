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

use crate::common::{
    billing, bootstrap, free_port, on_embedded_store, on_fleet_store, rand_u32, say, wait_ready,
    Process,
};
use sqlx::Connection;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::time::{Duration, Instant};

const KEYS: usize = 200;
/// The creates go in two waves, each all at once: wave A (a quarter of the
/// keys) first, wave B (the rest) as soon as the first answer of wave A
/// arrives. The server is killed once half of wave B is in the store.
///
/// A kill decided by answers alone finds nothing in flight with SQLite: the
/// requests of one burst take the single writer in turn, and each answers
/// only after its request log, written after every other request's unit of
/// work, so all of them have committed before the first answer comes out.
/// Watching the store instead, the kill lands with wave A answered or
/// answering (at least one answer has come back before wave B starts),
/// part of wave B committed but not answered, and the rest of wave B not
/// committed (one of them, on PostgreSQL several, inside its transaction).
const WAVE_A: usize = KEYS / 4;
const WAVE_B: usize = KEYS - WAVE_A;

/// `billing serve` with its stderr in `log_name` (in `dir`); killed
/// (SIGKILL) if the test ends early.
fn serve(dir: &Path, envs: &[(&str, String)], log_name: &str) -> Process {
    Process::spawn_logged(
        billing(dir, envs).arg("serve").env("RUST_LOG", "warn"),
        dir.join(log_name),
    )
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .connect_timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}

/// One answer to a create.
#[derive(Debug, Clone)]
struct Answer {
    status: u16,
    replayed: bool,
    raw: String,
    body: serde_json::Value,
}

impl Answer {
    fn principal_ref(&self) -> Option<&str> {
        self.body["data"]["principal_ref"].as_str()
    }

    fn short(&self) -> String {
        let mut raw = self.raw.clone();
        raw.truncate(300);
        format!("{} replayed={} {raw}", self.status, self.replayed)
    }
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

async fn create(
    client: &reqwest::Client,
    api: &str,
    secret: &str,
    run: &str,
    i: usize,
) -> Result<Answer, String> {
    let r = client
        .post(format!("{api}/api/v1/service_accounts"))
        .bearer_auth(secret)
        .header("Idempotency-Key", key_of(run, i))
        .json(&body_of(run, i))
        .send()
        .await
        .map_err(|e| format!("{e:?}"))?;
    let status = r.status().as_u16();
    let replayed = r
        .headers()
        .get("idempotent-replayed")
        .is_some_and(|v| v.as_bytes() == b"true");
    let raw = r.text().await.map_err(|e| format!("{e:?}"))?;
    let body = serde_json::from_str(&raw).unwrap_or(serde_json::Value::Null);
    Ok(Answer {
        status,
        replayed,
        raw,
        body,
    })
}

/// A create after the restart: a 409 (the key still executing) or 503 (a
/// backing service busy) keeps nothing (contract section 4), so a client
/// retries it; anything else is the key's answer. Retries for up to 15 s;
/// the number of retries taken is returned beside the answer.
async fn create_settled(
    client: &reqwest::Client,
    api: &str,
    secret: &str,
    run: &str,
    i: usize,
) -> (Result<Answer, String>, usize) {
    let started = Instant::now();
    let mut retries = 0;
    loop {
        let a = create(client, api, secret, run, i).await;
        let retry = matches!(&a, Ok(a) if a.status == 409 || a.status == 503);
        if !retry || started.elapsed() > Duration::from_secs(15) {
            return (a, retries);
        }
        retries += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Every create of `run`, all at once; the answers by request number.
async fn replay_all(
    api: &str,
    secret: &str,
    run: &str,
) -> (BTreeMap<usize, Result<Answer, String>>, usize) {
    let client = client();
    let mut tasks = Vec::with_capacity(KEYS);
    for i in 0..KEYS {
        let (client, api, secret, run) = (
            client.clone(),
            api.to_owned(),
            secret.to_owned(),
            run.to_owned(),
        );
        tasks.push(tokio::spawn(async move {
            create_settled(&client, &api, &secret, &run, i).await
        }));
    }
    let mut answers = BTreeMap::new();
    let mut retries = 0;
    for (i, t) in tasks.into_iter().enumerate() {
        let (a, r) = t.await.unwrap();
        retries += r;
        answers.insert(i, a);
    }
    (answers, retries)
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
/// variables `envs` name, with the API on `api_port`. `run` makes the names
/// and keys unique.
async fn crash_and_replay(
    label: &str,
    dir: &Path,
    envs: Vec<(&'static str, String)>,
    probe_url: &str,
) {
    let run = format!("{label}-{:08x}", rand_u32());
    let api_port = free_port();
    let with_ports = || {
        let mut e = envs.clone();
        e.push(("BILLING_API__LISTEN", format!("127.0.0.1:{api_port}")));
        e.push((
            "BILLING_METRICS__LISTEN",
            format!("127.0.0.1:{}", free_port()),
        ));
        e
    };
    let api = format!("http://127.0.0.1:{api_port}");
    let secret = bootstrap(dir, &with_ports()).secret;

    // 1. Wave A (a quarter of the keys) at once, then wave B (the rest) at
    //    once as soon as wave A starts answering; SIGKILL once half of wave
    //    B is in the store.
    let started = Instant::now();
    let mut first = serve(dir, &with_ports(), "serve-1.log");
    wait_ready(&client(), &api, || first.log_tail()).await;
    let ready_after = started.elapsed();
    sqlx::any::install_default_drivers();
    let mut probe = sqlx::AnyConnection::connect(probe_url)
        .await
        .expect("the store can be read beside the server");
    let wave_b_names = format!("crash-{run}-b%");
    let client = client();
    let (go_b, go_b_rx) = tokio::sync::watch::channel(false);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for i in 0..KEYS {
        let (client, api, secret, run, mut go, tx) = (
            client.clone(),
            api.clone(),
            secret.clone(),
            run.clone(),
            go_b_rx.clone(),
            tx.clone(),
        );
        tokio::spawn(async move {
            if i >= WAVE_A && go.wait_for(|go| *go).await.is_err() {
                return;
            }
            let a = create(&client, &api, &secret, &run, i).await;
            let _ = tx.send((i, a, Instant::now()));
        });
    }
    drop(tx);
    let fired = Instant::now();
    let mut before: BTreeMap<usize, Answer> = BTreeMap::new();
    let mut failed_before_kill: Vec<String> = Vec::new();
    let mut b_in_store = 0;
    let mut b_fired_after = None;
    loop {
        while let Ok((i, a, _)) = rx.try_recv() {
            match a {
                Ok(a) => {
                    before.insert(i, a);
                }
                Err(e) => failed_before_kill.push(format!("key {i}: {e}")),
            }
            if b_fired_after.is_none() {
                go_b.send_replace(true);
                b_fired_after = Some(fired.elapsed());
            }
        }
        if b_fired_after.is_some() {
            b_in_store = sqlx::query_scalar::<_, i64>(
                "SELECT COUNT(*) FROM service_accounts WHERE name LIKE $1",
            )
            .bind(&wave_b_names)
            .fetch_one(&mut probe)
            .await
            .unwrap();
            if b_in_store >= (WAVE_B / 2) as i64 {
                break;
            }
        }
        assert!(
            fired.elapsed() < Duration::from_secs(30),
            "after 30 s, {} creates answered and {b_in_store} of wave B are in the store; no kill yet\n{}",
            before.len(),
            first.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let pid = first.pid();
    let killed = Instant::now();
    first.kill_hard();
    let at_decision = before.len();
    drop(probe.close().await);
    let killed_after = killed - fired;
    // Answers that were complete before the kill may still be in the
    // channel; everything else ends with a transport error.
    let mut lost: BTreeMap<usize, String> = BTreeMap::new();
    while let Some((i, a, at)) = rx.recv().await {
        match a {
            Ok(a) => {
                before.insert(i, a);
            }
            Err(e) if at < killed => failed_before_kill.push(format!("key {i}: {e}")),
            Err(e) => {
                lost.insert(i, e);
            }
        }
    }
    let log_1 = first.log_tail();
    drop(first);
    assert!(
        failed_before_kill.is_empty(),
        "creates failed before the kill (the server was up):\n{}\n{log_1}",
        failed_before_kill.join("\n")
    );
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
    assert!(
        !lost.is_empty(),
        "every create answered before the kill landed; the test killed nothing in flight"
    );

    // 2. The same store, a new process; every key again, with its body.
    let mut second = serve(dir, &with_ports(), "serve-2.log");
    wait_ready(&self::client(), &api, || second.log_tail()).await;
    let restarted_after = killed.elapsed();
    let (after, retries) = replay_all(&api, &secret, &run).await;
    // And once more: whatever ran after the restart is now a kept result.
    let (again, retries_again) = replay_all(&api, &secret, &run).await;

    let mut problems: Vec<String> = Vec::new();
    let (mut replayed_lost, mut ran_lost) = (0, 0);
    let mut answered_refs: HashMap<usize, String> = HashMap::new();
    for i in 0..KEYS {
        let now = match &after[&i] {
            Ok(a) => a,
            Err(e) => {
                problems.push(format!("key {i}: no answer after the restart: {e}"));
                continue;
            }
        };
        if now.status != 201 {
            problems.push(format!("key {i}: after the restart {}", now.short()));
            continue;
        }
        let Some(reference) = now.principal_ref() else {
            problems.push(format!("key {i}: no principal_ref in {}", now.short()));
            continue;
        };
        if now.body["data"]["name"] != name_of(&run, i).as_str() {
            problems.push(format!(
                "key {i}: answers an account of another name: {}",
                now.short()
            ));
        }
        if let Some(original) = before.get(&i) {
            if !now.replayed {
                problems.push(format!(
                    "key {i}: answered {} before the kill, but ran again after it (no Idempotent-Replayed): {}",
                    original.principal_ref().unwrap_or("?"),
                    now.short()
                ));
            }
            if now.status != original.status || now.body != original.body {
                problems.push(format!(
                    "key {i}: replay differs from the original answer\n  before: {}\n  after:  {}",
                    original.short(),
                    now.short()
                ));
            }
        } else if now.replayed {
            replayed_lost += 1;
        } else {
            ran_lost += 1;
        }
        match &again[&i] {
            Ok(a) if a.status == now.status && a.replayed && a.body == now.body => {}
            Ok(a) => problems.push(format!(
                "key {i}: second replay differs\n  first:  {}\n  second: {}",
                now.short(),
                a.short()
            )),
            Err(e) => problems.push(format!("key {i}: no answer to the second replay: {e}")),
        }
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
    let client = self::client();
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
        "idempotency crash [{label}]: server ready in {} ms; SIGKILL (pid {pid}) {} ms after firing {KEYS} creates, \
         wave B fired after {} ms, {b_in_store} of wave B in the store at the kill; {} answered (all 201; {at_decision} of them seen before the kill) and {} not; after the restart ({} ms to ready) {} of those replayed \
         (committed before the kill) and {} ran now; {} + {} retries on 409/503; {} accounts listed; \
         {} problems; total {} ms",
        ready_after.as_millis(),
        killed_after.as_millis(),
        b_fired_after.unwrap_or_default().as_millis(),
        before.len(),
        lost.len(),
        restarted_after.as_millis(),
        replayed_lost,
        ran_lost,
        retries,
        retries_again,
        accounts.len(),
        problems.len(),
        started.elapsed().as_millis(),
    ));
    assert!(
        problems.is_empty(),
        "[{label}] {} problems after a crash mid-flight:\n{}\n{log_1}\n{log_2}",
        problems.len(),
        problems.join("\n")
    );
    assert!(
        ran_lost > 0,
        "[{label}] every create had committed by the time of the kill: nothing uncommitted was in flight"
    );
    assert!(
        clean_exit,
        "[{label}] the restarted server did not exit cleanly on SIGTERM\n{log_2}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn embedded_crash_mid_flight_replays_every_key_once() {
    on_embedded_store(|label, dir, envs, probe| async move {
        crash_and_replay(label, &dir, envs, &probe).await
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fleet_crash_mid_flight_replays_every_key_once() {
    // Redis database 7 is this test's.
    on_fleet_store(
        "fleet idempotency crash test",
        "billing_idem",
        7,
        |label, dir, envs, store_url| async move {
            crash_and_replay(label, &dir, envs, &store_url).await
        },
    )
    .await;
}
