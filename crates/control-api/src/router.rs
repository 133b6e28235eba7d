//! The axum router: one route per row of the operation table, plus health,
//! readiness, the OpenAPI document and a JSON 404 for everything else.

use crate::error::ApiError;
use crate::operations::{Method, OPERATIONS};
use crate::pipeline;
use crate::state::AppState;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, MethodFilter, MethodRouter};
use axum::{Json, Router};
use domain::{Prefix, Ref, Timestamp};
use std::collections::BTreeMap;
use store::RequestLogRecord;

pub fn router(state: AppState) -> Router {
    let mut routes: BTreeMap<&'static str, MethodRouter<AppState>> = BTreeMap::new();
    for op in OPERATIONS {
        let filter = match op.method {
            Method::Get => MethodFilter::GET,
            Method::Post => MethodFilter::POST,
            Method::Patch => MethodFilter::PATCH,
        };
        let handler =
            move |State(state): State<AppState>, req: Request| pipeline::run(op, state, req);
        let entry = routes.remove(op.path).unwrap_or_default();
        routes.insert(op.path, entry.on(filter, handler));
    }
    let mut router = Router::new();
    for (path, method_router) in routes {
        router = router.route(path, method_router);
    }
    router
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/api/v1/openapi.json", get(openapi))
        .fallback(unknown_route)
        .method_not_allowed_fallback(unknown_route)
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(
            panic_response,
        ))
        .with_state(state)
}

async fn healthz() -> Json<serde_json::Value> {
    Json(serde_json::json!({"status": "ok"}))
}

/// How long `/readyz` waits for each backing service.
const PROBE_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);

/// Ready when the store and every configured backing service (RabbitMQ,
/// Redis) answer; otherwise 503 with `Retry-After`, and `checks` names
/// each service with `ok` or `unreachable`. The services are asked at
/// once, each for at most `PROBE_WITHIN`, so the answer comes within that
/// however many are down. In the embedded mode the queue and scheduler
/// live in the store, so its answer covers them.
async fn readyz(State(state): State<AppState>) -> Response {
    let store = async {
        let ping = tokio::time::timeout(PROBE_WITHIN, state.store.ping()).await;
        ("store", matches!(ping, Ok(Ok(()))))
    };
    let others = state.probes.iter().map(|(name, probe)| async move {
        let outcome = tokio::time::timeout(PROBE_WITHIN, probe()).await;
        (*name, matches!(outcome, Ok(Ok(()))))
    });
    let (store, others) = tokio::join!(store, futures::future::join_all(others));
    let mut checks = serde_json::Map::new();
    let mut ready = true;
    for (name, ok) in std::iter::once(store).chain(others) {
        if !ok {
            tracing::warn!(service = name, "not ready");
        }
        ready &= ok;
        checks.insert(name.into(), (if ok { "ok" } else { "unreachable" }).into());
    }
    let status = if ready { "ready" } else { "unavailable" };
    let body = Json(serde_json::json!({"status": status, "checks": checks}));
    if ready {
        return body.into_response();
    }
    let mut r = (StatusCode::SERVICE_UNAVAILABLE, body).into_response();
    r.headers_mut()
        .insert("retry-after", HeaderValue::from_static("5"));
    r
}

async fn openapi() -> Json<serde_json::Value> {
    Json(crate::openapi::document().clone())
}

async fn unknown_route(State(state): State<AppState>, req: Request) -> Response {
    let request_id = Ref::generate(Prefix::RequestLog);
    let response =
        ApiError::NotFound("no such route".into()).into_response_for(request_id.as_str());
    let log = RequestLogRecord {
        request_log_ref: request_id,
        environment_ref: None,
        operation_id: None,
        method: req.method().to_string(),
        path: req.uri().path().to_owned(),
        status: 404,
        error_code: Some("not_found".into()),
        principal_ref: None,
        credential_ref: None,
        idempotency_key: None,
        duration_ms: 0,
        created_at: Timestamp::now(),
    };
    pipeline::finish(
        &state,
        response,
        pipeline::Log::Write(log),
        pipeline::UNKNOWN_ROUTE,
    )
    .await
}

fn panic_response(_: Box<dyn std::any::Any + Send + 'static>) -> Response {
    let request_id = Ref::generate(Prefix::RequestLog);
    let mut r = ApiError::Internal("panic".into()).into_response_for(request_id.as_str());
    if let Ok(v) = HeaderValue::from_str(request_id.as_str()) {
        r.headers_mut().insert("request-id", v);
    }
    r
}
