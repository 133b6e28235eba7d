//! The operator console in a real browser (headless Chromium over
//! WebDriver, `billing_tests::browser`), on every backend, in a test binary
//! of its own (`cargo test -p billing-tests --test browser`): cargo runs
//! binaries one at a time, so Chromium never competes with the suite's
//! timing tests for the CPU. It runs against the real router over a real
//! store with the delivery pipeline and the redrive job runner running:
//! sign in; filter the failed deliveries of one endpoint; open one and see
//! its attempts; redrive it and see generation 2 succeed; create a redrive
//! job by filter whose dry run counts what the list shows, run it and watch
//! it finish; pause and resume the endpoint; rotate its secret. With
//! `CONSOLE_SCREENSHOTS=1` the SQLite run saves each page to
//! `docs/console/<page>.png`.

use billing_tests::browser::Browser;
use billing_tests::receiver::{Behaviour, TestReceiver};
use billing_tests::{backend_tests, Backend, EventPipeline, TestApp};
use futures::FutureExt;
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// The endpoint's deliveries of `status`, through the API.
async fn count(app: &TestApp, endpoint: &str, status: &str) -> usize {
    let r = app
        .get(&format!(
            "/api/v1/webhook_endpoints/{endpoint}/deliveries?limit=100&status={status}"
        ))
        .send()
        .await;
    r.expect(200);
    r.data()["items"].as_array().map_or(0, Vec::len)
}

async fn the_console_in_a_real_browser(app: TestApp) {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let outcome = std::panic::AssertUnwindSafe(walk(&app, &browser))
        .catch_unwind()
        .await;
    browser.finish(outcome).await;
}

async fn walk(app: &TestApp, browser: &Browser) {
    let shots = app.backend == Backend::Sqlite;
    let snap = |name: &'static str| async move {
        if shots {
            browser.screenshot(name).await;
        }
    };
    let receiver = TestReceiver::start(Behaviour::Status(500)).await;
    let (endpoint, _) = app
        .subscribed_endpoint(&receiver.url(), "payment.succeeded", 1)
        .await;
    let healthy = TestReceiver::start(Behaviour::Status(204)).await;
    app.subscribed_endpoint(&healthy.url(), "order.created", 1)
        .await;
    let pipeline = EventPipeline::embedded(app);
    let stop = CancellationToken::new();
    let runner = tokio::spawn(dispatcher::redrive_jobs::run(
        app.store.clone(),
        500,
        stop.clone(),
    ));
    for n in 0..3 {
        app.publish("payment.succeeded", json!({"n": n})).await;
        app.publish("order.created", json!({"n": n})).await;
    }
    // A message the intake refuses, for the dead letters page.
    let _ = dispatcher::intake::accept(&app.queue, b"{\"not\": \"an event\"}", "test").await;
    app.eventually(60, || async {
        (count(app, &endpoint, "failed").await == 3).then_some(())
    })
    .await;

    // Sign in.
    let base = &app.base;
    browser.go(&format!("{base}/console/sign-in")).await;
    snap("sign-in").await;
    browser.fill("#secret", &app.sandbox.secret).await;
    browser.click("form button[type=submit]").await;
    browser.at("/console/deliveries").await;
    assert!(browser
        .text("header .who")
        .await
        .contains(&app.sandbox.credential_ref));

    // Filter the failed deliveries of one endpoint.
    browser
        .choose("form.filters #endpoint_ref", &endpoint)
        .await;
    browser.choose("form.filters #status", "failed").await;
    browser.click("form.filters button[type=submit]").await;
    browser.at("status=failed").await;
    browser
        .reload_until(60, "three failed deliveries listed", || async {
            browser.count("tr.delivery[data-status=failed]").await == 3
        })
        .await;
    assert_eq!(browser.count("tr.delivery").await, 3);
    snap("deliveries").await;

    // Open one: its attempts (two, by the schedule `0s,1s`).
    browser.click("tr.delivery td a").await;
    browser.at("/console/deliveries/whd_").await;
    browser.find("table.attempts").await;
    assert_eq!(browser.count("tr.attempt[data-generation='1']").await, 2);
    assert_eq!(browser.count("tr.attempt[data-status=failed]").await, 2);
    snap("delivery").await;

    // Redrive it: generation 2 succeeds.
    receiver.set(Behaviour::Status(204));
    browser.fill("#reason", "receiver fixed").await;
    browser.click("#redrive").await;
    browser.at("notice=queued").await;
    assert!(browser.text("p.notice").await.contains("Redrive started"));
    browser
        .reload_until(60, "generation 2 succeeded", || async {
            // The page reads the delivery, then its attempts: both show it.
            browser.text("#status").await == "succeeded"
                && browser
                    .count("tr.attempt[data-generation='2'][data-status=succeeded]")
                    .await
                    == 1
        })
        .await;
    assert_eq!(browser.text("#generation").await, "2");
    assert_eq!(count(app, &endpoint, "failed").await, 2);

    // A redrive job by filter: the dry run counts what the list shows.
    browser
        .go(&format!(
            "{base}/console/deliveries?endpoint_ref={endpoint}&status=failed"
        ))
        .await;
    let listed = browser.count("tr.delivery").await;
    assert_eq!(listed, 2);
    browser.click("a.button").await;
    browser.at("/console/redrive-jobs?").await;
    browser.fill("#reason", "outage over").await;
    snap("redrive-jobs").await;
    browser.click("#dry-run").await;
    browser.at("/console/redrive-jobs/rdj_").await;
    browser
        .reload_until(60, "the dry run finished", || async {
            browser.attr("#job-status", "data-status").await == "succeeded"
        })
        .await;
    assert_eq!(browser.text("#matched").await, listed.to_string());
    assert_eq!(browser.text("#redriven").await, "0");
    snap("redrive-job-dry-run").await;

    // Run it and watch it finish.
    let dry_run = browser.url().await;
    browser.click("#run").await;
    browser
        .until(30, "the job's page", || async {
            let url = browser.url().await;
            url.contains("/console/redrive-jobs/rdj_") && url != dry_run
        })
        .await;
    browser
        .reload_until(60, "the job finished", || async {
            browser.attr("#job-status", "data-status").await == "succeeded"
        })
        .await;
    assert_eq!(browser.text("#matched").await, "2");
    assert_eq!(browser.text("#redriven").await, "2");
    snap("redrive-job").await;
    app.eventually(60, || async {
        (count(app, &endpoint, "succeeded").await == 3).then_some(())
    })
    .await;

    // Pause and resume the endpoint.
    browser
        .go(&format!("{base}/console/endpoints/{endpoint}"))
        .await;
    browser.click("#pause").await;
    browser.at("notice=paused").await;
    assert_eq!(
        browser.attr("#endpoint-status", "data-status").await,
        "paused"
    );
    assert!(browser.text("p.notice").await.contains("paused"));
    browser.click("#resume").await;
    browser.at("notice=resumed").await;
    assert_eq!(
        browser.attr("#endpoint-status", "data-status").await,
        "active"
    );
    assert_eq!(browser.count("svg.chart").await, 4);
    snap("endpoint").await;

    // Rotate its secret: shown once.
    browser
        .fill(
            "form[action$='/rotate'] input[name=reason]",
            "scheduled rotation",
        )
        .await;
    browser.click("#secret-rotate").await;
    let secret = browser.text("#new-secret").await;
    assert!(secret.starts_with("whsec_"), "{secret}");
    let r = app
        .get(&format!("/api/v1/webhook_endpoints/{endpoint}"))
        .send()
        .await;
    assert_eq!(r.data()["secret_versions"][1]["status"], "pending");
    browser
        .go(&format!("{base}/console/endpoints/{endpoint}"))
        .await;
    assert!(!browser.source().await.contains(&secret), "never again");
    assert_eq!(
        browser.count("table.secrets tr[data-status=pending]").await,
        1
    );

    // The other pages.
    for (path, name, expect) in [
        ("/console/endpoints", "endpoints", "table.endpoints"),
        ("/console/redrive-jobs", "redrive-job-list", "table.jobs"),
        ("/console/event-types", "event-types", "section.event-type"),
        (
            "/console/dead-letters",
            "dead-letters",
            "table.dead-letters",
        ),
        ("/console/request-logs", "request-logs", "table.logs"),
    ] {
        browser.go(&format!("{base}{path}")).await;
        browser.find(expect).await;
        snap(name).await;
    }

    // Signing out ends the session.
    browser.click("form.sign-out button").await;
    browser.at("/console/sign-in").await;
    browser.go(&format!("{base}/console/endpoints")).await;
    browser.at("/console/sign-in").await;

    stop.cancel();
    let _ = runner.await;
    pipeline.shutdown().await;
}

backend_tests!(the_console_in_a_real_browser);
