//! What the load pays for (a shop made through the API) and the receiver
//! of its `payment.succeeded` events.

use super::{text, Api};
use axum::extract::State;
use axum::http::HeaderMap;
use std::sync::{Arc, Mutex};

/// What the load pays for and where its events go.
#[derive(Clone)]
pub struct Shop {
    pub product_ref: String,
    pub config_ref: String,
    pub endpoint_ref: String,
}

/// Through the API: a published product with a published one-time price,
/// a published checkout config of its offer, and an active endpoint at
/// `hook` subscribed to `payment.succeeded` (dto version 2) environment-wide.
pub async fn open_shop(api: &Api, environment_ref: &str, hook: &str, run: &str) -> Shop {
    let key = |what: &str| format!("setup-{run}-{what}");
    let product = api
        .setup(
            "/api/v1/products",
            &key("product"),
            serde_json::json!({"name": "Outage-tested product"}),
        )
        .await;
    let product_ref = text(&product, "product_ref");
    api.setup(
        &format!("/api/v1/products/{product_ref}/publish"),
        &key("product-publish"),
        serde_json::json!({}),
    )
    .await;
    let price = api
        .setup(
            "/api/v1/prices",
            &key("price"),
            serde_json::json!({
                "product_ref": product_ref,
                "amount": {"currency": "EUR", "unit": "minor", "value": "1999"},
                "type": "one_time",
            }),
        )
        .await;
    let price_ref = text(&price, "price_ref");
    api.setup(
        &format!("/api/v1/prices/{price_ref}/publish"),
        &key("price-publish"),
        serde_json::json!({}),
    )
    .await;
    let offers = api
        .get(&format!("/api/v1/offers?product_ref={product_ref}"))
        .await;
    assert!(offers.ok(), "list offers: {}", offers.short());
    let offer_ref = text(&offers.data()["items"][0], "offer_ref");
    let config = api
        .setup(
            "/api/v1/checkout-configs",
            &key("config"),
            serde_json::json!({
                "name": "Outage checkout",
                "line_items": [{"offer_ref": offer_ref, "quantity": 1}],
                "success_url": "https://example.com/ok",
            }),
        )
        .await;
    let config_ref = text(&config, "config_ref");
    api.setup(
        &format!("/api/v1/checkout-configs/{config_ref}/publish"),
        &key("config-publish"),
        serde_json::json!({}),
    )
    .await;
    let endpoint = api
        .setup(
            "/api/v1/webhook_endpoints",
            &key("endpoint"),
            serde_json::json!({"url": hook}),
        )
        .await;
    let endpoint_ref = text(&endpoint, "endpoint_ref");
    api.setup(
        &format!("/api/v1/webhook_endpoints/{endpoint_ref}/subscriptions"),
        &key("subscription"),
        serde_json::json!({
            "public_event_type": "payment.succeeded",
            "scope_type": "environment",
            "scope_ref": environment_ref,
            "dto_version": 2,
        }),
    )
    .await;
    Shop {
        product_ref,
        config_ref,
        endpoint_ref,
    }
}

/// One webhook request the receiver got.
#[derive(Debug, Clone)]
pub struct Hook {
    pub webhook_id: String,
    pub event_ref: String,
    pub event_type: String,
    pub payment_ref: String,
}

/// A receiver on 127.0.0.1 answering every webhook 200 and keeping what
/// each carried.
#[derive(Clone, Default)]
pub struct Hooks(Arc<Mutex<Vec<Hook>>>);

impl Hooks {
    pub async fn start() -> (Hooks, String) {
        let hooks = Hooks::default();
        let app = axum::Router::new()
            .fallback(receive)
            .with_state(hooks.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (hooks, url)
    }

    pub fn all(&self) -> Vec<Hook> {
        self.0.lock().unwrap().clone()
    }
}

async fn receive(State(hooks): State<Hooks>, headers: HeaderMap, body: String) -> &'static str {
    let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    let field = |v: &serde_json::Value| v.as_str().unwrap_or("").to_owned();
    hooks.0.lock().unwrap().push(Hook {
        webhook_id: headers
            .get("webhook-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned(),
        event_ref: field(&v["event_ref"]),
        event_type: field(&v["public_event_type"]),
        payment_ref: field(&v["data"]["payment_intent_ref"]),
    });
    "ok"
}
