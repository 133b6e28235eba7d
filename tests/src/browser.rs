//! A real browser for the console's tests: Debian's headless Chromium
//! (`chromium`, `chromium-driver`; `.ci/run` installs them) driven over
//! WebDriver by `fantoccini`. `Browser::start` runs its own `chromedriver`
//! on a free 127.0.0.1 port with a fresh profile; `quit` ends the browser
//! session (chromedriver closes Chromium), and dropping it ends
//! chromedriver, by its own process id only. `Browser::finish` quits even
//! after a failed step.
//!
//! Without the packages the browser tests say so once and pass, unless
//! the run is CI's (`BILLING_TEST_FLEET=1`), where a missing browser is a
//! failure, as a missing server is.

use crate::poll::Poll;
use fantoccini::{Client, ClientBuilder, Locator};
use std::process::{Child, Command, Stdio};
use std::sync::Once;
use std::time::Duration;

/// Where Debian's packages put them; `CHROMIUM` and `CHROMEDRIVER`
/// override.
fn paths() -> (String, String) {
    (
        std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into()),
        std::env::var("CHROMEDRIVER").unwrap_or_else(|_| "/usr/bin/chromedriver".into()),
    )
}

pub struct Browser {
    pub client: Client,
    driver: Child,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// A browser, or `None` (after saying so once) where the packages are
    /// missing and the run is not CI's.
    pub async fn start() -> Option<Browser> {
        static NOTICE: Once = Once::new();
        let (chromium, driver) = paths();
        let present =
            std::path::Path::new(&chromium).exists() && std::path::Path::new(&driver).exists();
        if !present {
            assert!(
                !crate::fleet_enabled(),
                "the browser tests need {chromium} and {driver}: apt-get install chromium chromium-driver (.ci/run does)"
            );
            NOTICE.call_once(|| {
                use std::io::Write;
                let _ = writeln!(
                    std::io::stderr(),
                    "browser tests not run: {driver} or {chromium} is missing (apt-get install chromium chromium-driver)"
                );
            });
            return None;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let mut command = Command::new(&driver);
        command
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut child = command.spawn().expect("chromedriver starts");
        let profile = tempfile::tempdir().expect("a profile folder");
        let mut browser = Browser::connect(port, &chromium, &profile).await;
        let client = match browser.take() {
            Some(c) => c,
            None => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("chromedriver did not answer on 127.0.0.1:{port} within 30 s");
            }
        };
        Some(Browser {
            client,
            driver: child,
            _profile: profile,
        })
    }

    async fn connect(port: u16, chromium: &str, profile: &tempfile::TempDir) -> Option<Client> {
        let caps = serde_json::json!({
            "goog:chromeOptions": {
                "binary": chromium,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--no-first-run", "--window-size=1360,1000",
                    format!("--user-data-dir={}", profile.path().display()),
                ],
            }
        });
        let caps = caps.as_object().cloned().unwrap_or_default();
        // chromedriver takes a moment to listen.
        let poll = Poll::within(Duration::from_secs(30)).every(Duration::from_millis(100));
        loop {
            let connector = hyper_util::client::legacy::connect::HttpConnector::new();
            let attempt = ClientBuilder::new(connector)
                .capabilities(caps.clone())
                .connect(&format!("http://127.0.0.1:{port}"))
                .await;
            match attempt {
                Ok(client) => return Some(client),
                Err(_) if poll.next().await => {}
                Err(e) => {
                    eprintln!("WebDriver session not opened: {e}");
                    return None;
                }
            }
        }
    }

    /// Ends the browser session (Chromium exits), then chromedriver.
    pub async fn quit(self) {
        let _ = self.client.clone().close().await;
        // `Drop` ends chromedriver.
    }

    /// Quits, then goes on with the panic of the steps that ran in it,
    /// if one failed: a test runs its steps under `catch_unwind` and ends
    /// with this, so that no browser outlives a failed test.
    pub async fn finish(self, outcome: std::thread::Result<()>) {
        self.quit().await;
        if let Err(panic) = outcome {
            std::panic::resume_unwind(panic);
        }
    }

    pub async fn go(&self, url: &str) {
        self.client.goto(url).await.expect("the page loads");
    }

    pub async fn find(&self, css: &str) -> fantoccini::elements::Element {
        let found = self
            .client
            .wait()
            .at_most(Duration::from_secs(30))
            .for_element(Locator::Css(css))
            .await;
        match found {
            Ok(e) => e,
            Err(e) => panic!(
                "no `{css}` on {}: {e}\n{}",
                self.url().await,
                self.source().await
            ),
        }
    }

    pub async fn count(&self, css: &str) -> usize {
        self.client
            .find_all(Locator::Css(css))
            .await
            .map(|v| v.len())
            .unwrap_or(0)
    }

    pub async fn click(&self, css: &str) {
        self.find(css).await.click().await.expect("clicked");
    }

    pub async fn fill(&self, css: &str, text: &str) {
        let field = self.find(css).await;
        field.clear().await.expect("cleared");
        field.send_keys(text).await.expect("typed");
    }

    pub async fn choose(&self, css: &str, value: &str) {
        self.find(css)
            .await
            .select_by_value(value)
            .await
            .unwrap_or_else(|e| panic!("`{css}` offers no `{value}`: {e}"));
    }

    /// An element's text. Found again if the page reloaded meanwhile (a
    /// job's page refreshes itself).
    pub async fn text(&self, css: &str) -> String {
        reread()
            .until(
                || format!("the text of `{css}` could not be read"),
                || async { self.find(css).await.text().await.ok() },
            )
            .await
    }

    /// An element's attribute (empty when absent), found again if the page
    /// reloaded meanwhile.
    pub async fn attr(&self, css: &str, name: &str) -> String {
        reread()
            .until(
                || format!("the attribute {name} of `{css}` could not be read"),
                || async { self.find(css).await.attr(name).await.ok() },
            )
            .await
            .unwrap_or_default()
    }

    pub async fn url(&self) -> String {
        self.client
            .current_url()
            .await
            .map(|u| u.to_string())
            .unwrap_or_default()
    }

    pub async fn source(&self) -> String {
        self.client.source().await.unwrap_or_default()
    }

    /// Waits until `check` holds (a click's navigation has landed), for
    /// at most `secs` seconds, without reloading.
    pub async fn until<F, Fut>(&self, secs: u64, what: &str, mut check: F)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let poll = Poll::within(Duration::from_secs(secs)).every(Duration::from_millis(50));
        while !check().await {
            if !poll.next().await {
                panic!(
                    "{what}: not within {secs} s; at {}: {}",
                    self.url().await,
                    self.source().await
                );
            }
        }
    }

    /// Waits until the page's address contains `part`.
    pub async fn at(&self, part: &str) {
        self.until(30, &format!("at {part}"), || async {
            self.url().await.contains(part)
        })
        .await;
    }

    /// Reloads the page until `check` holds, for at most `secs` seconds.
    pub async fn reload_until<F, Fut>(&self, secs: u64, what: &str, mut check: F)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let poll = Poll::within(Duration::from_secs(secs)).every(Duration::from_millis(200));
        while !check().await {
            if !poll.next().await {
                panic!("{what}: not within {secs} s; page: {}", self.source().await);
            }
            self.client.refresh().await.expect("reloaded");
        }
    }

    /// Saves the viewport as `docs/console/<name>.png` when
    /// `CONSOLE_SCREENSHOTS=1` (so that a test run leaves the tree alone).
    pub async fn screenshot(&self, name: &str) {
        if std::env::var("CONSOLE_SCREENSHOTS").as_deref() != Ok("1") {
            return;
        }
        let png = self.client.screenshot().await.expect("a screenshot");
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/console");
        std::fs::create_dir_all(&dir).expect("docs/console");
        std::fs::write(dir.join(format!("{name}.png")), png).expect("the screenshot is saved");
    }
}

impl Drop for Browser {
    /// Ends chromedriver, this kit's own child, by its process id.
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// How long an element is looked for again while its page reloads.
fn reread() -> Poll {
    Poll::within(Duration::from_millis(2500)).every(Duration::from_millis(50))
}
