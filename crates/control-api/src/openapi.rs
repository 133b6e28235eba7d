//! The OpenAPI 3.1 document, built from the operation table (its rows and
//! the wire schemas of their handlers), so it cannot drift from the routes.
//!
//! Beyond the handlers' schemas it states the contract's rules that a
//! client (or a fuzzer generating requests from the document) needs: the
//! shape of every reference (contract 7) by the name of the field or path
//! parameter that holds it, the permission names, money (contract 8), the
//! `Idempotency-Key` and `If-Match` headers (contracts 4 and 5), every
//! error status with its codes and the one error body (contract 2), and
//! the headers every response carries.

use crate::error::ErrorBody;
use crate::operation::schema;
use crate::operations::{permissions, OPERATIONS};
use domain::checkout::lines::LineKind;
use domain::Prefix;
use serde_json::{json, Map, Value};
use std::sync::OnceLock;

/// The document, built once.
pub fn document() -> &'static Value {
    static DOC: OnceLock<Value> = OnceLock::new();
    DOC.get_or_init(|| build().0)
}

/// Every error code of contract 2 with its HTTP status.
const ERROR_STATUSES: &[(&str, u16)] = &[
    ("validation_failed", 400),
    ("idempotency_key_required", 400),
    ("authentication_failed", 401),
    ("forbidden", 403),
    ("not_found", 404),
    ("version_conflict", 409),
    ("precondition_failed", 412),
    ("validation_failed", 413),
    ("idempotency_mismatch", 422),
    ("semantic_error", 422),
    ("precondition_required", 428),
    ("rate_limited", 429),
    ("internal_error", 500),
    ("dependency_unavailable", 503),
];

/// `Idempotency-Key`: 1 to 255 printable ASCII characters (contract 4).
const IDEMPOTENCY_KEY_PATTERN: &str = "^[ -~]{1,255}$";

/// `If-Match`: `*` or a list of quoted ETags (RFC 9110; contract 5).
const IF_MATCH_PATTERN: &str = r#"^\s*(\*|(W/)?"[^"]*"(\s*,\s*(W/)?"[^"]*")*)\s*$"#;

/// The document, and the names of component schemas that two different
/// wire types claimed (one would silently replace the other: a test keeps
/// this empty; rename one with `#[schema(as = …)]`).
fn build() -> (Value, Vec<String>) {
    let mut schemas = Map::new();
    let mut collisions = Vec::new();
    let mut add = |list: Vec<(
        String,
        utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>,
    )>| {
        for (name, s) in list {
            let s = serde_json::to_value(s).unwrap_or(Value::Null);
            if schemas.get(&name).is_some_and(|old| *old != s) && !collisions.contains(&name) {
                collisions.push(name.clone());
            }
            schemas.insert(name, s);
        }
    };
    let (error_name, error_schemas) = schema::<ErrorBody>();
    add(error_schemas);
    let error_ref = json!({"$ref": format!("#/components/schemas/{error_name}")});
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
            .map(|p| json!({"name": p, "in": "path", "required": true, "schema": path_param_schema(p)}))
            .collect();
        if op.cursor {
            parameters.push(json!({"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20}}));
            parameters.push(json!({"name": "cursor", "in": "query",
                "description": "Opaque: the `next_cursor` of the previous page of the same list and filters.",
                "schema": {"type": "string"}}));
        }
        parameters.extend((b.filters)().iter().map(filter_param));
        if op.idempotent {
            parameters.push(json!({"name": "Idempotency-Key", "in": "header", "required": true,
                "description": "1 to 255 printable ASCII characters; a replay answers the kept result.",
                "schema": {"type": "string", "minLength": 1, "maxLength": 255,
                    "pattern": IDEMPOTENCY_KEY_PATTERN}}));
        }
        if op.if_match {
            parameters.push(json!({"name": "If-Match", "in": "header", "required": true,
                "description": "The resource's ETag, or `*`.",
                "schema": {"type": "string", "pattern": IF_MATCH_PATTERN}}));
        }
        let mut success_headers = json!({"Request-Id": request_id_header()});
        if !op.id.starts_with("list") {
            success_headers["ETag"] = json!({"description": "The resource's strong ETag.",
                "schema": {"type": "string"}});
        }
        if op.idempotent {
            success_headers["Idempotent-Replayed"] = json!({
                "description": "`true` on the replay of a kept result.",
                "schema": {"type": "string", "enum": ["true"]}});
        }
        let mut responses = Map::new();
        responses.insert(
            op.success_status.to_string(),
            json!({"description": "Success", "headers": success_headers,
                "content": {"application/json": {"schema": {
                "type": "object", "required": ["data"], "properties": {"data": data}}}}}),
        );
        let mut codes: Vec<&str> = op.errors.codes().to_vec();
        // Every operation is rate limited (contract 2), and a body can be
        // too large wherever one is read.
        codes.push("rate_limited");
        for (code, status) in ERROR_STATUSES {
            let listed =
                codes.contains(code) && (*status != 413 || op.method.has_body()) && *status != 500;
            if !listed {
                continue;
            }
            let entry = responses.entry(status.to_string()).or_insert_with(|| {
                json!({"description": "", "headers": error_headers(*status),
                    "content": {"application/json": {"schema": error_ref.clone()}}})
            });
            let description = match entry["description"].as_str() {
                Some("") | None => (*code).to_owned(),
                Some(d) => format!("{d}, {code}"),
            };
            entry["description"] = Value::String(description);
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
        let entry = paths.entry(op.path.to_owned()).or_insert_with(|| json!({}));
        entry[op.method.lower()] = operation;
    }
    for (name, s) in schemas.iter_mut() {
        refine(name, s);
    }
    let doc = json!({
        "openapi": "3.1.0",
        "info": {"title": "Commerce and billing service", "version": env!("CARGO_PKG_VERSION")},
        "servers": [{"url": "/"}],
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
                "description": "`sk_test_…` (sandbox) or `sk_live_…` (live) credential secret"}}
        }
    });
    (doc, collisions)
}

fn path_params(path: &str) -> Vec<&str> {
    path.split('/')
        .filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
        .collect()
}

/// A path parameter: a reference of its kind, or a permission name.
fn path_param_schema(name: &str) -> Value {
    if name == "permission_action" {
        return json!({"type": "string", "enum": permissions()});
    }
    match reference_kind(name) {
        Some(prefix) => json!({"type": "string", "pattern": ref_pattern(prefix)}),
        None => json!({"type": "string"}),
    }
}

/// The kind of reference held by a field or path parameter named `name`:
/// a resource's own reference is named like its path parameter, references
/// to other resources use the names of `interface.md` (contract 1 and 7).
/// `scope_ref` names a reference of several kinds and is not listed.
pub fn reference_kind(name: &str) -> Option<Prefix> {
    let name = name
        .strip_suffix('s')
        .filter(|n| n.ends_with("_ref"))
        .unwrap_or(name);
    Some(match name {
        "buyer_ref" => Prefix::Buyer,
        "capture_ref" => Prefix::Capture,
        "config_ref" => Prefix::CheckoutConfig,
        "checkout_session_ref" => Prefix::CheckoutSession,
        "credential_ref" => Prefix::Credential,
        "custom_field_ref" => Prefix::CustomField,
        "dispute_ref" => Prefix::Dispute,
        "entitlement_ref" => Prefix::Entitlement,
        "environment_ref" => Prefix::Environment,
        "event_ref" => Prefix::Event,
        "beneficiary_business_ref" => Prefix::BeneficiaryBusiness,
        "invoice_ref" => Prefix::Invoice,
        "journey_ref" => Prefix::Journey,
        "offer_ref" => Prefix::Offer,
        "order_ref" => Prefix::Order,
        "participation_ref" => Prefix::Participation,
        "payment_ref" | "payment_intent_ref" => Prefix::Payment,
        "payout_ref" => Prefix::Payout,
        "price_ref" | "from_price_ref" | "to_price_ref" => Prefix::Price,
        "product_ref" => Prefix::Product,
        "promotion_ref" => Prefix::Promotion,
        "refund_ref" => Prefix::Refund,
        "request_log_ref" | "request_id" => Prefix::RequestLog,
        "principal_ref" => Prefix::ServiceAccount,
        "stored_payment_method_ref" => Prefix::StoredPaymentMethod,
        "subscription_ref" => Prefix::Subscription,
        "subscription_change_ref" => Prefix::SubscriptionChange,
        "endpoint_ref" => Prefix::WebhookEndpoint,
        "attempt_ref" => Prefix::DeliveryAttempt,
        "delivery_ref" => Prefix::WebhookDelivery,
        "redrive_job_ref" => Prefix::RedriveJob,
        "dead_letter_ref" => Prefix::DeadLetter,
        "test_clock_ref" => Prefix::TestClock,
        _ => return None,
    })
}

/// `<prefix>_` and 12 letters or digits (contract 7).
fn ref_pattern(prefix: Prefix) -> String {
    format!("^{}_[A-Za-z0-9]{{12}}$", prefix.as_str())
}

/// Adds the contract's rules to a component schema generated from a wire
/// type: reference shapes and permission names by field name, money, and
/// the error body's codes.
fn refine(name: &str, schema: &mut Value) {
    let Some(properties) = schema.get_mut("properties").and_then(Value::as_object_mut) else {
        return;
    };
    for (field, property) in properties.iter_mut() {
        let rule = if field == "permission_action" {
            json!({"enum": permissions()})
        } else if let Some(prefix) = reference_kind(field) {
            json!({"pattern": ref_pattern(prefix)})
        } else {
            continue;
        };
        constrain_strings(property, &rule);
    }
    // The error body is closed: exactly the fields of contract 2.
    let closed = matches!(name, "ErrorBody" | "ErrorObject" | "Detail");
    match name {
        "MoneyDto" => {
            properties["currency"]["pattern"] = json!("^[A-Z]{3}$");
            properties["unit"]["enum"] = json!(["minor"]);
            properties["value"]["pattern"] = json!("^(0|[1-9][0-9]{0,17})$");
        }
        // An invoice line's amount: Money whose value is negative on a
        // credit (contract 14.1).
        "LineAmountDto" => {
            properties["currency"]["pattern"] = json!("^[A-Z]{3}$");
            properties["unit"]["enum"] = json!(["minor"]);
            properties["value"]["pattern"] = json!("^(0|-?[1-9][0-9]{0,17})$");
        }
        "InvoiceLineDto" => {
            let kinds: Vec<&str> = LineKind::ALL.iter().map(|k| k.as_str()).collect();
            properties["kind"]["enum"] = json!(kinds);
        }
        "ErrorObject" => {
            let mut codes: Vec<&str> = ERROR_STATUSES.iter().map(|(c, _)| *c).collect();
            codes.sort_unstable();
            codes.dedup();
            properties["code"]["enum"] = json!(codes);
        }
        _ => {}
    }
    if closed {
        schema["additionalProperties"] = Value::Bool(false);
    }
}

/// Applies `rule` (keywords for a string) to `property` if it is a string,
/// a nullable string, or an array of strings.
fn constrain_strings(property: &mut Value, rule: &Value) {
    let types: Vec<&str> = match &property["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => return,
    };
    let target = if types.contains(&"string") {
        property
    } else if types.contains(&"array") && property["items"]["type"] == "string" {
        &mut property["items"]
    } else {
        return;
    };
    if let (Some(target), Some(rule)) = (target.as_object_mut(), rule.as_object()) {
        for (k, v) in rule {
            target.insert(k.clone(), v.clone());
        }
    }
}

/// `Request-Id`, on every response (contract 1).
fn request_id_header() -> Value {
    json!({"required": true, "description": "The `request_log_ref` of this request's log.",
        "schema": {"type": "string", "pattern": ref_pattern(Prefix::RequestLog)}})
}

/// The headers of an error response with `status` (contract 2).
fn error_headers(status: u16) -> Value {
    let mut headers = json!({"Request-Id": request_id_header()});
    match status {
        401 => {
            headers["WWW-Authenticate"] = json!({"required": true,
                "schema": {"type": "string", "const": "Bearer"}});
        }
        409 | 429 | 503 => {
            headers["Retry-After"] = json!({"required": true,
                "description": "Seconds to wait before retrying.",
                "schema": {"type": "string", "pattern": "^[0-9]+$"}});
        }
        _ => {}
    }
    headers
}

/// The query parameter of a list filter, as its row binds it.
fn filter_param(f: &crate::handlers::lists::Filter) -> Value {
    use crate::handlers::lists::FilterKind;
    let schema = match f.kind {
        FilterKind::OneOf(values) => json!({"type": "string", "enum": values()}),
        FilterKind::Ref(prefix) => json!({"type": "string",
            "pattern": format!("^{}_[A-Za-z0-9]{{12}}$", prefix.as_str())}),
        FilterKind::HttpStatus => json!({"type": "integer", "minimum": 100, "maximum": 599}),
        FilterKind::OperationId => {
            json!({"type": "string", "enum": OPERATIONS.iter().map(|o| o.id).collect::<Vec<_>>()})
        }
        FilterKind::Text => json!({"type": "string", "minLength": 1, "maxLength": 500}),
        FilterKind::Timestamp => json!({"type": "string", "format": "date-time"}),
    };
    json!({"name": f.name, "in": "query", "schema": schema})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reference_path_parameter_has_its_shape() {
        for op in OPERATIONS {
            for p in path_params(op.path) {
                let s = path_param_schema(p);
                assert!(
                    s.get("pattern").is_some() || s.get("enum").is_some(),
                    "{} {p}",
                    op.id
                );
            }
        }
        assert_eq!(
            path_param_schema("config_ref")["pattern"],
            "^cco_[A-Za-z0-9]{12}$"
        );
        assert_eq!(
            reference_kind("delivery_refs"),
            Some(Prefix::WebhookDelivery)
        );
        assert_eq!(reference_kind("scope_ref"), None);
    }

    #[test]
    fn no_two_wire_types_share_a_schema_name() {
        let (_, collisions) = build();
        assert!(
            collisions.is_empty(),
            "schema names claimed twice: {collisions:?}"
        );
    }

    #[test]
    fn errors_reference_one_schema_with_their_codes() {
        let doc = document();
        let error = &doc["components"]["schemas"]["ErrorObject"];
        for field in ["code", "message", "request_id", "details"] {
            assert!(error["required"]
                .as_array()
                .is_some_and(|r| r.contains(&json!(field))));
        }
        let create = &doc["paths"]["/api/v1/prices"]["post"]["responses"];
        assert_eq!(
            create["400"]["description"],
            "validation_failed, idempotency_key_required"
        );
        assert_eq!(
            create["400"]["content"]["application/json"]["schema"]["$ref"],
            "#/components/schemas/ErrorBody"
        );
        assert!(create["413"].is_object());
        assert!(create["429"]["headers"]["Retry-After"].is_object());
        let list = &doc["paths"]["/api/v1/disputes"]["get"]["responses"];
        assert!(list["413"].is_null() && list["503"].is_null());
    }

    #[test]
    fn the_update_of_an_endpoint_is_a_patch_of_optional_fields() {
        let doc = document();
        let patch = &doc["paths"]["/api/v1/webhook_endpoints/{endpoint_ref}"]["patch"];
        assert_eq!(patch["operationId"], "updateWebhookEndpoint");
        assert!(patch["responses"]["413"].is_object(), "it reads a body");
        let body = &doc["components"]["schemas"]["UpdateEndpoint"];
        assert!(
            body["required"].as_array().is_none_or(Vec::is_empty),
            "every field may be left out: {body}"
        );
        let rate = &body["properties"]["rate_limit"];
        assert_eq!(rate["type"], json!(["integer", "null"]), "{rate}");
        assert_eq!(
            (&rate["minimum"], &rate["maximum"]),
            (&json!(1), &json!(10000))
        );
        let endpoint = &doc["components"]["schemas"]["EndpointDto"]["properties"];
        assert_eq!(endpoint["rate_limit"]["type"], json!(["integer", "null"]));
        assert_eq!(endpoint["max_in_flight"]["maximum"], 1000);
    }

    /// The query parameters the document lists for `path`'s GET.
    fn query_params(path: &str) -> Vec<(String, Value)> {
        document()["paths"][path]["get"]["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["in"] == "query")
            .map(|p| (p["name"].as_str().unwrap().to_owned(), p["schema"].clone()))
            .collect()
    }

    #[test]
    fn list_filters_are_in_the_document() {
        let payments = query_params("/api/v1/payments");
        let names: Vec<&str> = payments.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["limit", "cursor", "status", "buyer_ref"]);
        assert!(payments[2].1["enum"]
            .as_array()
            .unwrap()
            .contains(&json!("succeeded")));
        assert_eq!(payments[3].1["pattern"], "^buy_[A-Za-z0-9]{12}$");
        let logs = query_params("/api/v1/request_logs");
        let names: Vec<&str> = logs.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["limit", "cursor", "operation_id", "status"]);
        assert_eq!(logs[3].1["maximum"], 599);
        let endpoints = query_params("/api/v1/webhook_endpoints");
        assert_eq!(
            endpoints[2].1["enum"],
            json!(["active", "paused", "disabled"])
        );
        // Every list that pages and filters says so.
        let filtered = OPERATIONS
            .iter()
            .filter(|o| o.binding.is_some_and(|b| !(b.filters)().is_empty()))
            .count();
        assert!(filtered >= 19, "{filtered}");
    }
}
