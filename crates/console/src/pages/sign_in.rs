//! Sign-in and sign-out. The secret of an API credential is exchanged for
//! a session cookie: it is checked exactly as a bearer secret is
//! (`control_api::auth::authenticate`), then forgotten; the cookie names
//! the credential only. The sign-in form carries a CSRF token of its own
//! (the MAC of a nonce in a short-lived cookie), so that no other site can
//! sign a browser in to an account of its choosing.

use super::Fields;
use crate::api::Signed;
use crate::error::PageError;
use crate::html;
use crate::session::{self, Session, COOKIE, LIFETIME_SECS, SIGN_IN_COOKIE, SIGN_IN_SECS};
use crate::Console;
use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use control_api::auth::authenticate;
use domain::Timestamp;
use maud::html;

pub async fn form(State(console): State<Console>, RawQuery(query): RawQuery) -> Response {
    let ended = Fields::query(query).is_ok_and(|q| q.get("ended").is_some());
    let message = ended.then_some("Your session has ended: sign in again.");
    sign_in_page(&console, StatusCode::OK, message)
}

fn sign_in_page(console: &Console, status: StatusCode, message: Option<&str>) -> Response {
    let nonce = session::nonce();
    let token = console.settings.key.sign_in_token(&nonce);
    let body = html! {
        section.sign-in {
            h1 { "Sign in" }
            p { "Sign in with the secret of an API credential (" code { "sk_test_…" } " or "
                code { "sk_live_…" } "). The console then acts as that credential, with its "
                "permissions and environment, for 12 hours or until the credential is revoked." }
            @if let Some(m) = message {
                p.notice.warn role="alert" { (m) }
            }
            form method="post" action="/console/sign-in" {
                input type="hidden" name="csrf" value=(token);
                label for="secret" { "Credential secret" }
                input type="password" id="secret" name="secret" autocomplete="off" required;
                button type="submit" { "Sign in" }
            }
        }
    };
    let cookie = session::set_cookie(
        SIGN_IN_COOKIE,
        &nonce,
        SIGN_IN_SECS,
        console.settings.secure_cookies,
    );
    let mut response = (status, html::bare("Sign in", body)).into_response();
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        response.headers_mut().append(header::SET_COOKIE, v);
    }
    response
}

pub async fn submit(State(console): State<Console>, headers: HeaderMap, body: Bytes) -> Response {
    let fields = match Fields::parse(&body) {
        Ok(f) => f,
        Err(e) => return e.into_response(),
    };
    let presented = fields.value("csrf");
    let form_ok = session::cookies(&headers, SIGN_IN_COOKIE)
        .into_iter()
        .any(|nonce| console.settings.key.check_sign_in_token(nonce, presented));
    if !form_ok {
        return PageError::Csrf.into_response();
    }
    let Some(secret) = fields.get("secret") else {
        return sign_in_page(
            &console,
            StatusCode::BAD_REQUEST,
            Some("Enter a credential secret."),
        );
    };
    // Checked exactly as a bearer secret is.
    let mut bearer = HeaderMap::new();
    let Ok(value) = HeaderValue::from_str(&format!("Bearer {secret}")) else {
        return refused(&console);
    };
    bearer.insert(header::AUTHORIZATION, value);
    let caller = match authenticate(&console.app, &bearer).await {
        Ok(caller) => caller,
        Err(control_api::error::ApiError::AuthenticationFailed) => return refused(&console),
        Err(e) => return PageError::from(e).into_response(),
    };
    tracing::info!(
        credential.r#ref = caller.credential_ref.as_str(),
        principal.r#ref = caller.principal_ref.as_str(),
        "console sign-in"
    );
    let session = Session::new(
        caller.credential_ref,
        caller.environment_ref,
        Timestamp::now(),
    );
    let secure = console.settings.secure_cookies;
    let cookie = session::set_cookie(
        COOKIE,
        &session.encode(&console.settings.key),
        LIFETIME_SECS,
        secure,
    );
    let used = session::set_cookie(SIGN_IN_COOKIE, "", 0, secure);
    let mut response = (StatusCode::SEE_OTHER, [(header::LOCATION, "/console")]).into_response();
    for c in [cookie, used] {
        if let Ok(v) = HeaderValue::from_str(&c) {
            response.headers_mut().append(header::SET_COOKIE, v);
        }
    }
    response
}

/// One answer for every refused secret, as the API's 401.
fn refused(console: &Console) -> Response {
    sign_in_page(
        console,
        StatusCode::UNAUTHORIZED,
        Some("That secret does not sign in: it is unknown, revoked or expired, or its account is not active."),
    )
}

pub async fn sign_out(
    State(console): State<Console>,
    signed: Signed,
    body: Bytes,
) -> Result<Response, PageError> {
    let fields = Fields::parse(&body)?;
    signed.check_csrf(&console, fields.get("csrf"))?;
    let cleared = session::set_cookie(COOKIE, "", 0, console.settings.secure_cookies);
    let mut response = (
        StatusCode::SEE_OTHER,
        [(header::LOCATION, "/console/sign-in")],
    )
        .into_response();
    if let Ok(v) = HeaderValue::from_str(&cleared) {
        response.headers_mut().append(header::SET_COOKIE, v);
    }
    Ok(response)
}
