//! The OpenAPI 3.1 document, built from the operation table (its rows and
//! the wire schemas of their handlers), so it cannot drift from the routes.

use crate::error::ErrorBody;
use crate::handlers::schema;
use crate::operations::{Method, OPERATIONS};
use serde_json::{json, Map, Value};
use std::sync::OnceLock;

/// The document, built once.
pub fn document() -> &'static Value {
    static DOC: OnceLock<Value> = OnceLock::new();
    DOC.get_or_init(build)
}

fn build() -> Value {
    let mut schemas = Map::new();
    let mut add = |list: Vec<(
        String,
        utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>,
    )>| {
        for (name, s) in list {
            schemas.insert(name, serde_json::to_value(s).unwrap_or(Value::Null));
        }
    };
    let (error_name, error_schemas) = schema::<ErrorBody>();
    add(error_schemas);
    let mut paths = Map::new();
    for op in OPERATIONS {
        let Some(b) = &op.binding else { continue };
        let (resp_name, resp_schemas) = (b.response)();
        add(resp_schemas);
        let item = json!({"$ref": format!("#/components/schemas/{resp_name}")});
        let data = if op.id.starts_with("list") {
            json!({"type": "object", "required": ["items", "next_cursor", "has_more"], "properties": {
                "items": {"type": "array", "items": item},
                "next_cursor": {"type": ["string", "null"]},
                "has_more": {"type": "boolean"}}})
        } else {
            item
        };
        let mut parameters: Vec<Value> = path_params(op.path)
            .into_iter()
            .map(|p| json!({"name": p, "in": "path", "required": true, "schema": {"type": "string"}}))
            .collect();
        if op.cursor {
            parameters.push(json!({"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20}}));
            parameters.push(json!({"name": "cursor", "in": "query", "schema": {"type": "string"}}));
        }
        if op.idempotent {
            parameters.push(
                json!({"name": "Idempotency-Key", "in": "header", "required": true,
                "schema": {"type": "string", "minLength": 1, "maxLength": 255}}),
            );
        }
        if op.if_match {
            parameters.push(json!({"name": "If-Match", "in": "header", "required": true,
                "description": "The resource's ETag, or `*`.", "schema": {"type": "string"}}));
        }
        let mut responses = Map::new();
        responses.insert(
            op.success_status.to_string(),
            json!({"description": "Success", "content": {"application/json": {"schema": {
                "type": "object", "required": ["data"], "properties": {"data": data}}}}}),
        );
        for code in op.errors.codes() {
            let status = status_of(code);
            responses.entry(status.to_string()).or_insert_with(|| json!({
                "description": code,
                "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{error_name}")}}}
            }));
        }
        let mut operation = json!({
            "operationId": op.id,
            "summary": op.id,
            "description": format!("Requires the permission `{}`. Error codes: {}.", op.permission, op.errors.codes().join(", ")),
            "security": [{"bearer": []}],
            "parameters": parameters,
            "responses": responses,
        });
        if let Some(req) = b.request {
            let (req_name, req_schemas) = req();
            add(req_schemas);
            operation["requestBody"] = json!({"required": true, "content": {"application/json": {
                "schema": {"$ref": format!("#/components/schemas/{req_name}")}}}});
        }
        let method = match op.method {
            Method::Get => "get",
            Method::Post => "post",
        };
        let entry = paths.entry(op.path.to_owned()).or_insert_with(|| json!({}));
        entry[method] = operation;
    }
    json!({
        "openapi": "3.1.0",
        "info": {"title": "Commerce and billing service", "version": env!("CARGO_PKG_VERSION")},
        "servers": [{"url": "/"}],
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
                "description": "`sk_test_…` (sandbox) or `sk_live_…` (live) credential secret"}}
        }
    })
}

fn path_params(path: &str) -> Vec<&str> {
    path.split('/')
        .filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
        .collect()
}

fn status_of(code: &str) -> u16 {
    match code {
        "authentication_failed" => 401,
        "forbidden" => 403,
        "not_found" => 404,
        "validation_failed" | "idempotency_key_required" => 400,
        "idempotency_mismatch" | "semantic_error" => 422,
        "precondition_required" => 428,
        "precondition_failed" => 412,
        "version_conflict" => 409,
        "dependency_unavailable" => 503,
        _ => 500,
    }
}
