//! Regressions found by the property-based fuzzing of the whole API
//! (`.ci/fuzz`, schemathesis against the served OpenAPI document; issue
//! 19), black-box, on every backend. Each test keeps the failing example.
//!
//! - Three pairs of wire types shared a schema name (`LineItemDto`,
//!   `SubscriptionDto`, `ChangeDto`), so the document described one of each
//!   pair with the other's schema: a checkout config's line items, a billing
//!   subscription and a subscription change did not conform to their
//!   operations' documented responses.
//! - What the fuzzer relies on: every `Idempotency-Key` and `If-Match` the
//!   operation table requires is a declared header parameter, every path
//!   parameter has its reference shape, and every error response refers to
//!   the one error body of contract 2.
//! - A NUL in a query parameter reached PostgreSQL, which refuses it: 500.

use billing_tests::kit::api::*;
use billing_tests::kit::{create_endpoint, eur, get, pay, sellable, text};
use billing_tests::{backend_tests, Resp, TestApp};
use control_api::operations::OPERATIONS;
use serde_json::{json, Value};

async fn document(app: &TestApp) -> Value {
    let doc = app.anon("GET", "/api/v1/openapi.json").send().await;
    doc.expect(200);
    doc.json
}

/// The schema of `data` in the documented success response of the
/// operation `method path`.
fn data_schema(doc: &Value, method: &str, path: &str) -> Value {
    let responses = doc["paths"][path][method]["responses"]
        .as_object()
        .unwrap_or_else(|| panic!("{method} {path} is documented"));
    let (_, success) = responses
        .iter()
        .find(|(status, _)| status.starts_with('2'))
        .expect("a success response");
    success["content"]["application/json"]["schema"]["properties"]["data"].clone()
}

/// Where `value` breaks `schema` (types, `required`, closed objects,
/// `enum`, nested objects and arrays; `$ref` resolved in `doc`).
fn violations(doc: &Value, schema: &Value, value: &Value, at: &str, out: &mut Vec<String>) {
    if let Some(r) = schema["$ref"].as_str() {
        let name = r.rsplit('/').next().unwrap_or_default();
        return violations(doc, &doc["components"]["schemas"][name], value, at, out);
    }
    let types: Vec<&str> = match &schema["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    let kind = match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    let fits = types.is_empty()
        || types.contains(&kind)
        || (kind == "integer" && types.contains(&"number"));
    if !fits {
        out.push(format!("{at}: a {kind}, documented as {types:?}"));
        return;
    }
    if let Some(allowed) = schema["enum"].as_array() {
        if !allowed.contains(value) {
            out.push(format!("{at}: {value} is not one of {allowed:?}"));
        }
    }
    match value {
        Value::Object(fields) => {
            for name in schema["required"].as_array().into_iter().flatten() {
                let name = name.as_str().unwrap_or_default();
                if !fields.contains_key(name) {
                    out.push(format!("{at}: lacks the required `{name}`"));
                }
            }
            for (name, v) in fields {
                let property = &schema["properties"][name];
                if property.is_null() {
                    if schema["additionalProperties"] == json!(false) {
                        out.push(format!("{at}: `{name}` is not documented"));
                    }
                    continue;
                }
                violations(doc, property, v, &format!("{at}.{name}"), out);
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                violations(doc, &schema["items"], item, &format!("{at}.{i}"), out);
            }
        }
        _ => {}
    }
}

/// Asserts that `response` is what the document says `method path`
/// answers.
#[track_caller]
fn assert_conforms(doc: &Value, method: &str, path: &str, response: &Resp) {
    let mut out = Vec::new();
    violations(
        doc,
        &data_schema(doc, method, path),
        response.data(),
        "data",
        &mut out,
    );
    assert!(
        out.is_empty(),
        "{method} {path} does not conform to its documented response: {out:?}\nbody: {}",
        response.text
    );
}

/// A published product with a published price; returns its offer.
async fn offer(app: &TestApp, interval: Option<&str>) -> String {
    sellable(app, "Fuzz", eur("999"), interval).await.offer
}

/// A session of `config` (201) for `fuzz@example.com`.
async fn session_of(app: &TestApp, config: &str) -> Resp {
    let r = app
        .post(
            "/api/v1/checkout-sessions",
            json!({"config_ref": config, "buyer": {"email": "fuzz@example.com"}}),
        )
        .send()
        .await;
    r.expect(201);
    r
}

/// A checkout config of one `offer`, created and published; returns the
/// create's and the publish's responses.
async fn config(app: &TestApp, offer: &str) -> (Resp, Resp) {
    let created = app
        .post(
            "/api/v1/checkout-configs",
            json!({"name": "Fuzz", "line_items": [{"offer_ref": offer, "quantity": 1}],
                "success_url": OK_URL}),
        )
        .send()
        .await;
    created.expect(201);
    let config = text(&created.data()["config_ref"]);
    let published = app
        .post(
            &format!("/api/v1/checkout-configs/{config}/publish"),
            json!({}),
        )
        .send()
        .await;
    published.expect(200);
    (created, published)
}

/// Example of the fuzzer (`GET /api/v1/checkout-configs/{config_ref}`,
/// publish and versions): a config's line items `{offer_ref, quantity}`
/// were documented as a session's line items, with prices and amounts
/// required.
async fn checkout_config_line_items_conform(app: TestApp) {
    let doc = document(&app).await;
    let offer = offer(&app, None).await;
    let (created, published) = config(&app, &offer).await;
    assert_conforms(&doc, "post", "/api/v1/checkout-configs", &created);
    let path = "/api/v1/checkout-configs/{config_ref}";
    assert_conforms(&doc, "post", &format!("{path}/publish"), &published);
    let config = text(&created.data()["config_ref"]);
    let retrieved = app
        .get(&format!("/api/v1/checkout-configs/{config}"))
        .send()
        .await;
    retrieved.expect(200);
    assert_eq!(
        retrieved.data()["line_items"],
        json!([{"offer_ref": offer, "quantity": 1}])
    );
    assert_conforms(&doc, "get", path, &retrieved);
    let version = app
        .post(
            &format!("/api/v1/checkout-configs/{config}/versions"),
            json!({"name": "Fuzz 2", "line_items": [{"offer_ref": offer, "quantity": 2}],
                "success_url": OK_URL}),
        )
        .send()
        .await;
    version.expect(201);
    assert_conforms(&doc, "post", &format!("{path}/versions"), &version);
    // A session's line items keep their own, fuller schema.
    let session = session_of(&app, &config).await;
    assert_conforms(&doc, "post", "/api/v1/checkout-sessions", &session);
}

/// Example of the fuzzer (`GET /api/v1/subscriptions` and
/// `GET /api/v1/subscriptions/{subscription_ref}`): a billing subscription
/// was documented as a webhook subscription (`endpoint_ref`,
/// `public_event_type`, … required), and a subscription change as a
/// promotion's change.
async fn billing_and_webhook_subscriptions_conform(app: TestApp) {
    let doc = document(&app).await;
    let offer = offer(&app, Some("month")).await;
    let (created, _) = config(&app, &offer).await;
    let config = text(&created.data()["config_ref"]);
    let session = session_of(&app, &config).await;
    let session = text(&session.data()["checkout_session_ref"]);
    let paid = pay(&app, &session, "pm_card_visa").await;
    assert_eq!(
        paid.data()["result"],
        "subscription_started",
        "{}",
        paid.text
    );
    let subscription = text(&paid.data()["subscription"]["subscription_ref"]);

    let list = app.get("/api/v1/subscriptions").send().await;
    list.expect(200);
    assert_eq!(list.data()["items"].as_array().map(Vec::len), Some(1));
    assert_conforms(&doc, "get", "/api/v1/subscriptions", &list);
    let one = app
        .get(&format!("/api/v1/subscriptions/{subscription}"))
        .send()
        .await;
    one.expect(200);
    assert_conforms(
        &doc,
        "get",
        "/api/v1/subscriptions/{subscription_ref}",
        &one,
    );
    let changes = app.get("/api/v1/subscription-changes").send().await;
    changes.expect(200);
    assert_eq!(changes.data()["items"].as_array().map(Vec::len), Some(1));
    assert_conforms(&doc, "get", "/api/v1/subscription-changes", &changes);

    // The webhook subscription keeps its own schema.
    let (endpoint, _) = create_endpoint(&app, "https://example.com/hook").await;
    let path = "/api/v1/webhook_endpoints/{endpoint_ref}/subscriptions";
    let created = app
        .post(
            &format!("/api/v1/webhook_endpoints/{endpoint}/subscriptions"),
            json!({"public_event_type": "payment.succeeded", "scope_type": "environment",
                "scope_ref": app.sandbox.environment_ref, "dto_version": 1}),
        )
        .send()
        .await;
    created.expect(201);
    assert_conforms(&doc, "post", path, &created);
    let listed = get(
        &app,
        &format!("/api/v1/webhook_endpoints/{endpoint}/subscriptions"),
    )
    .await;
    assert_conforms(&doc, "get", path, &listed);
    // And a promotion plan its own changes.
    let plan = app
        .post(
            "/api/v1/promotions/plan",
            json!({"offer_refs": [offer], "discount": {"percent_off": 10}}),
        )
        .send()
        .await;
    plan.expect(200);
    assert_conforms(&doc, "post", "/api/v1/promotions/plan", &plan);
}

/// Requests the fuzzer generates from the document carry the headers the
/// operation table requires, references of the right shape, and meet one
/// error body whatever they break.
async fn the_document_declares_what_the_contract_requires(app: TestApp) {
    let doc = document(&app).await;
    for op in OPERATIONS {
        let operation = &doc["paths"][op.path][op.method.lower()];
        let parameters = operation["parameters"].as_array().expect("parameters");
        let header = |name: &str| {
            parameters
                .iter()
                .find(|p| p["in"] == "header" && p["name"] == name)
        };
        let idem = header("Idempotency-Key");
        assert_eq!(idem.is_some(), op.idempotent, "{}", op.id);
        if let Some(p) = idem {
            assert_eq!(p["required"], true, "{}", op.id);
            assert_eq!(p["schema"]["maxLength"], 255, "{}", op.id);
        }
        let if_match = header("If-Match");
        assert_eq!(if_match.is_some(), op.if_match, "{}", op.id);
        if let Some(p) = if_match {
            assert_eq!(p["required"], true, "{}", op.id);
        }
        for p in parameters.iter().filter(|p| p["in"] == "path") {
            let schema = &p["schema"];
            assert!(
                schema["pattern"].is_string() || schema["enum"].is_array(),
                "{} {}",
                op.id,
                p["name"]
            );
        }
        for (status, response) in operation["responses"].as_object().expect("responses") {
            if status.starts_with('2') {
                continue;
            }
            assert_eq!(
                response["content"]["application/json"]["schema"]["$ref"],
                "#/components/schemas/ErrorBody",
                "{} {status}",
                op.id
            );
            assert!(response["headers"]["Request-Id"].is_object());
        }
    }
    let error = &doc["components"]["schemas"]["ErrorObject"];
    assert_eq!(
        error["required"],
        json!(["code", "message", "request_id", "details"])
    );
    assert_eq!(error["additionalProperties"], false);

    // Values outside what the document declares are contract errors.
    let product_path = "/api/v1/products/{product_ref}/publish";
    let pattern = doc["paths"][product_path]["post"]["parameters"][0]["schema"]["pattern"]
        .as_str()
        .expect("a pattern")
        .to_owned();
    assert_eq!(pattern, "^prd_[A-Za-z0-9]{12}$");
    app.post("/api/v1/products/prd_short/publish", json!({}))
        .send()
        .await
        .expect_error(400, "validation_failed");
    app.req("POST", "/api/v1/products")
        .idem(&"k".repeat(256))
        .json(&json!({"name": "Fuzz"}))
        .send()
        .await
        .expect_error(400, "validation_failed");
    app.req("POST", "/api/v1/webhook_endpoints/whep_N5xP3cV8bT1m/pause")
        .idem("fuzz-if-match")
        .if_match("not a quoted tag")
        .json(&json!({}))
        .send()
        .await
        .expect_error(400, "validation_failed");
}

/// Example of the fuzzer (`GET /api/v1/dead_letters?reason=…%00…`): a NUL
/// in a text filter reached PostgreSQL, which refuses it, and the caller got
/// a 500. Every query parameter of every list now refuses a NUL by name.
async fn a_nul_in_any_query_parameter_is_refused(app: TestApp) {
    let doc = document(&app).await;
    for op in OPERATIONS
        .iter()
        .filter(|op| op.cursor && !op.path.contains('{'))
    {
        let parameters = doc["paths"][op.path][op.method.lower()]["parameters"]
            .as_array()
            .expect("parameters");
        for p in parameters.iter().filter(|p| p["in"] == "query") {
            let name = text(&p["name"]);
            let r = app.get(&format!("{}?{name}=a%00b", op.path)).send().await;
            r.expect_error(400, "validation_failed");
            assert_eq!(r.json["error"]["details"][0]["field"], name, "{}", op.id);
        }
    }
    app.get("/api/v1/dead_letters?reason=%C2%BC%F2%9E%A5%87%00jg%C3%B5%C2%B1D&limit=82")
        .send()
        .await
        .expect_error(400, "validation_failed");
}

backend_tests!(
    a_nul_in_any_query_parameter_is_refused,
    checkout_config_line_items_conform,
    billing_and_webhook_subscriptions_conform,
    the_document_declares_what_the_contract_requires,
);
