//! A console visitor over plain HTTP (`ConsoleVisitor`): signs in through
//! the sign-in form as a browser would (its cookie and CSRF token), keeps
//! the session cookie, and reads each page's CSRF token and forms, for the
//! console's HTTP-level tests (`tests/tests/console.rs`).

use crate::TestApp;
use reqwest::header::{HeaderMap, COOKIE, SET_COOKIE};

/// A response of the console, fully read.
#[derive(Debug)]
pub struct Page {
    pub status: u16,
    pub headers: HeaderMap,
    pub html: String,
}

impl Page {
    /// The `Location` of a redirect.
    pub fn location(&self) -> &str {
        self.headers
            .get("location")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    /// Every `Set-Cookie` value.
    pub fn set_cookies(&self) -> Vec<String> {
        self.headers
            .get_all(SET_COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok().map(str::to_owned))
            .collect()
    }

    /// The first hidden field `name`'s value in the page.
    pub fn hidden(&self, name: &str) -> Option<String> {
        let marker = format!("name=\"{name}\" value=\"");
        let start = self.html.find(&marker)? + marker.len();
        let len = self.html[start..].find('"')?;
        Some(unescape(&self.html[start..start + len]))
    }

    /// The page's CSRF token.
    pub fn csrf(&self) -> String {
        self.hidden("csrf")
            .expect("the page has a form with a CSRF token")
    }
}

/// A browser's view of the console over HTTP, redirects not followed.
pub struct ConsoleVisitor {
    pub base: String,
    client: reqwest::Client,
    /// `name=value` of the session cookie, once signed in.
    pub session: Option<String>,
}

impl ConsoleVisitor {
    pub fn new(app: &TestApp) -> ConsoleVisitor {
        ConsoleVisitor {
            base: app.base.clone(),
            client: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .expect("a client"),
            session: None,
        }
    }

    async fn read(r: reqwest::Response) -> Page {
        let status = r.status().as_u16();
        let headers = r.headers().clone();
        let html = r.text().await.expect("a body");
        Page {
            status,
            headers,
            html,
        }
    }

    pub async fn get(&self, path: &str) -> Page {
        let mut req = self.client.get(format!("{}{path}", self.base));
        if let Some(c) = &self.session {
            req = req.header(COOKIE, c);
        }
        ConsoleVisitor::read(req.send().await.expect("sent")).await
    }

    /// A form POST with `fields` and the session cookie.
    pub async fn post(&self, path: &str, fields: &[(&str, &str)]) -> Page {
        let mut req = self
            .client
            .post(format!("{}{path}", self.base))
            .form(fields);
        if let Some(c) = &self.session {
            req = req.header(COOKIE, c);
        }
        ConsoleVisitor::read(req.send().await.expect("sent")).await
    }

    /// Signs in with `secret` through the form; returns the answer to the
    /// form's POST (a redirect with the session cookie when it worked).
    pub async fn sign_in(&mut self, secret: &str) -> Page {
        let form = self.get("/console/sign-in").await;
        assert_eq!(form.status, 200, "{}", form.html);
        let nonce_cookie = form
            .set_cookies()
            .into_iter()
            .find(|c| c.starts_with("billing_console_sign_in="))
            .expect("the sign-in form sets its cookie");
        let pair = nonce_cookie.split(';').next().unwrap().to_owned();
        let answer = ConsoleVisitor::read(
            self.client
                .post(format!("{}/console/sign-in", self.base))
                .header(COOKIE, pair)
                .form(&[("csrf", form.csrf().as_str()), ("secret", secret)])
                .send()
                .await
                .expect("sent"),
        )
        .await;
        if let Some(c) = answer
            .set_cookies()
            .into_iter()
            .find(|c| c.starts_with("billing_console="))
        {
            self.session = Some(c.split(';').next().unwrap().to_owned());
        }
        answer
    }
}

/// An attribute value as a browser reads it.
pub fn unescape(v: &str) -> String {
    v.replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}
