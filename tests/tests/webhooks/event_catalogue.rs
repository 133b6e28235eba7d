//! Event catalogue.

use super::*;

pub(super) async fn event_catalogue(app: TestApp) {
    let r = get(&app, "/api/v1/webhook_event_types").await;
    assert_eq!(r.data()["has_more"], false);
    assert!(r.data()["next_cursor"].is_null());
    let list = items(&r);
    let names: Vec<String> = list.iter().map(|t| text(&t["public_event_type"])).collect();
    for required in [
        "checkout_session.completed",
        "payment.succeeded",
        "payment.failed",
        "refund.created",
        "refund.succeeded",
        "refund.canceled",
        "dispute.opened",
        "dispute.closed",
        "payout.paid",
        "payout.failed",
        "invoice.paid",
        "order.created",
        "subscription.started",
        "subscription.changed",
        "subscription.canceled",
        "entitlement.granted",
        "entitlement.revoked",
        "participation.invited",
        "participation.accepted",
        "webhook.test",
    ] {
        assert!(names.iter().any(|n| n == required), "{required} missing");
    }
    for t in &list {
        assert!(!text(&t["description"]).is_empty());
        let versions = t["dto_versions"].as_array().expect("dto_versions");
        assert!(!versions.is_empty() && versions.iter().all(Value::is_u64));
        let scopes = t["scope_types"].as_array().expect("scope_types");
        assert!(!scopes.is_empty());
        assert!(scopes.iter().all(|s| {
            ["environment", "product", "buyer", "beneficiary_business"]
                .contains(&s.as_str().unwrap())
        }));
        assert!(!t["data_classes"].is_null());
        assert!(t["example"].is_object(), "{t}");
        let diagnostic = t["public_event_type"] == "webhook.test";
        assert_eq!(t["diagnostic"], diagnostic);
    }
    let paid = list
        .iter()
        .find(|t| t["public_event_type"] == "payment.succeeded")
        .unwrap();
    assert_eq!(paid["dto_versions"], json!([1, 2]));
    assert!(paid["data_classes"].to_string().contains("contact"));
    invalid(
        &app.get("/api/v1/webhook_event_types?limit=5").send().await,
        "limit",
    );
}
