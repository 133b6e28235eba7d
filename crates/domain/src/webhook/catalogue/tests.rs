use super::*;
use crate::catalogue::checkout_config::CustomField;
use crate::money::{Money, MoneyWire};
use crate::reference::{Prefix, Ref};
use crate::time::Timestamp;
use serde_json::Value;

const REQUIRED: &[&str] = &[
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
];

fn examples() -> Vec<(&'static str, u32, Value)> {
    all()
        .iter()
        .flat_map(|t| t.dto_versions.iter().map(move |v| (t.name, *v)))
        .map(|(n, v)| (n, v, example(n, v).unwrap_or_else(|| panic!("{n} v{v}"))))
        .collect()
}

fn get<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(v, |v, k| v.get(k))
}

/// Walks every key/value pair of a JSON tree.
fn walk(v: &Value, f: &mut dyn FnMut(&str, &Value)) {
    match v {
        Value::Object(m) => m.iter().for_each(|(k, v)| {
            f(k, v);
            walk(v, f)
        }),
        Value::Array(a) => a.iter().for_each(|v| walk(v, f)),
        _ => {}
    }
}

fn assert_ref(s: &str) {
    let ok = Prefix::ALL.iter().any(|p| Ref::parse(*p, s).is_ok());
    assert!(ok, "malformed reference {s}");
}

#[test]
fn catalogue_has_the_required_types_once_each() {
    for name in REQUIRED {
        assert!(find(name).is_some(), "{name}");
    }
    let mut names: Vec<_> = all().iter().map(|t| t.name).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), all().len());
    assert!(find("payment.unknown").is_none());
}

#[test]
fn versions_scopes_and_diagnostics() {
    for t in all() {
        assert!(t.has_scope_type(ScopeType::Environment), "{}", t.name);
        let expected: &[u32] = if t.name == "payment.succeeded" {
            &[1, 2]
        } else {
            &[1]
        };
        assert_eq!(t.dto_versions, expected, "{}", t.name);
        assert_eq!(t.diagnostic, t.name == "webhook.test");
        assert!(!t.description.is_empty());
    }
    let p = find("payout.paid").unwrap();
    assert!(p.has_scope_type(ScopeType::BeneficiaryBusiness) && !p.has_scope_type(Product));
    let c = find("checkout_session.completed").unwrap();
    assert!(c.has_scope_type(Product) && c.has_scope_type(Buyer));
    assert!(find("participation.accepted").unwrap().has_scope_type(Biz));
}

#[test]
fn unknown_versions_have_no_example_or_classes() {
    assert!(example("payment.succeeded", 3).is_none());
    assert!(example("refund.created", 2).is_none());
    assert!(example("nope", 1).is_none());
    assert!(data_classes("payment.succeeded", 3).is_empty());
}

#[test]
fn examples_hold_every_classified_field() {
    for (name, v, data) in examples() {
        assert!(data.is_object(), "{name}");
        for (path, _) in data_classes(name, v) {
            let field = get(&data, path);
            assert!(
                field.is_some_and(|f| !f.is_null()),
                "{name} v{v}: {path} missing"
            );
        }
    }
}

#[test]
fn examples_are_well_formed() {
    for (name, _, data) in examples() {
        walk(&data, &mut |k, v| {
            if k.ends_with("_ref") {
                if let Some(s) = v.as_str() {
                    assert_ref(s);
                } else {
                    assert!(v.is_null(), "{name}: {k}");
                }
            }
            if k.ends_with("_refs") {
                v.as_array()
                    .unwrap()
                    .iter()
                    .for_each(|r| assert_ref(r.as_str().unwrap()));
            }
            if k.ends_with("_at") || k.starts_with("current_period_") {
                if let Some(s) = v.as_str() {
                    assert!(
                        s.ends_with('Z') && Timestamp::parse(s).is_some(),
                        "{name}: {k}"
                    );
                }
            }
            if v.get("unit").is_some() {
                let w: MoneyWire = serde_json::from_value(v.clone()).unwrap();
                assert!(Money::from_wire(&w).is_ok(), "{name}: {k}");
            }
        });
        if let Some(etag) = data.get("etag") {
            let etag = etag.as_str().unwrap_or_else(|| panic!("{name}: etag"));
            assert!(
                etag.len() > 2 && etag.starts_with('"') && etag.ends_with('"'),
                "{name}: {etag}"
            );
        }
        // A checkout session's custom fields: `{key: value}`, keyed by the
        // config's field keys, values as strings.
        if let Some(cf) = data.get("custom_fields") {
            for (k, v) in cf.as_object().unwrap() {
                assert!(
                    CustomField::new(k, "Label", "text", false, None).is_ok(),
                    "{name}: custom field key {k}"
                );
                assert!(v.is_string(), "{name}: custom field {k}");
            }
        }
    }
}

fn keys(v: &Value) -> Vec<&str> {
    let mut k: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    k.sort_unstable();
    k
}

fn sorted<'a>(fields: &[&'a str]) -> Vec<&'a str> {
    let mut f = fields.to_vec();
    f.sort_unstable();
    f
}

/// The resources of `docs/checkout.md`, field for field, as the control
/// API answers them (a payment also names itself as `payment_ref`, contract
/// section 7; an order has `updated_at`).
const PAYMENT_FIELDS: &[&str] = &[
    "payment_ref",
    "payment_intent_ref",
    "checkout_session_ref",
    "buyer_ref",
    "buyer",
    "amount",
    "amount_refunded",
    "status",
    "failure_code",
    "payment_method",
    "stored_payment_method_ref",
    "product_refs",
    "next_action",
    "captured_at",
    "created_at",
    "etag",
];
const SESSION_FIELDS: &[&str] = &[
    "checkout_session_ref",
    "config_ref",
    "config_version",
    "status",
    "mode",
    "buyer",
    "buyer_ref",
    "journey_ref",
    "line_items",
    "amount_total",
    "custom_fields",
    "payment_intent_ref",
    "subscription_ref",
    "success_url",
    "cancel_url",
    "expires_at",
    "completed_at",
    "created_at",
    "etag",
];
const ORDER_FIELDS: &[&str] = &[
    "order_ref",
    "checkout_session_ref",
    "buyer_ref",
    "payment_intent_ref",
    "line_items",
    "amount_total",
    "status",
    "created_at",
    "updated_at",
    "etag",
];
const INVOICE_FIELDS: &[&str] = &[
    "invoice_ref",
    "number",
    "order_ref",
    "buyer_ref",
    "subscription_ref",
    "amount_total",
    "status",
    "issued_at",
    "paid_at",
    "created_at",
    "etag",
];
const ENTITLEMENT_FIELDS: &[&str] = &[
    "entitlement_ref",
    "buyer_ref",
    "product_ref",
    "order_ref",
    "status",
    "granted_at",
    "revoked_at",
    "created_at",
    "etag",
];
const SUBSCRIPTION_FIELDS: &[&str] = &[
    "subscription_ref",
    "buyer_ref",
    "price_ref",
    "product_ref",
    "status",
    "current_period_start",
    "current_period_end",
    "stored_payment_method_ref",
    "started_at",
    "canceled_at",
    "created_at",
    "etag",
];
const LINE_ITEM_FIELDS: &[&str] = &[
    "offer_ref",
    "price_ref",
    "product_ref",
    "quantity",
    "unit_amount",
    "amount",
];

#[test]
fn the_events_a_payment_writes_carry_their_resource() {
    for (name, v, fields) in [
        ("payment.succeeded", 2, PAYMENT_FIELDS),
        ("payment.failed", 1, PAYMENT_FIELDS),
        ("checkout_session.completed", 1, SESSION_FIELDS),
        ("order.created", 1, ORDER_FIELDS),
        ("invoice.paid", 1, INVOICE_FIELDS),
        ("entitlement.granted", 1, ENTITLEMENT_FIELDS),
        ("subscription.started", 1, SUBSCRIPTION_FIELDS),
    ] {
        let data = example(name, v).unwrap();
        assert_eq!(keys(&data), sorted(fields), "{name} v{v}");
        if let Some(items) = data.get("line_items") {
            for item in items.as_array().unwrap() {
                assert_eq!(keys(item), sorted(LINE_ITEM_FIELDS), "{name}");
            }
        }
    }
    for (name, v) in [("payment.succeeded", 2), ("payment.failed", 1)] {
        let p = example(name, v).unwrap();
        assert_eq!(keys(&p["buyer"]), ["email", "name"], "{name}");
        assert_eq!(
            keys(&p["payment_method"]),
            ["brand", "exp_month", "exp_year", "last4", "type"],
            "{name}"
        );
        assert_eq!(p["payment_method"]["type"], "card");
    }
    let failed = example("payment.failed", 1).unwrap();
    assert_eq!(failed["status"], "failed");
    assert_eq!(failed["failure_code"], "card_declined");
    assert!(failed["captured_at"].is_null());
    let paid = example("payment.succeeded", 2).unwrap();
    assert_eq!(paid["status"], "succeeded");
    assert!(paid["failure_code"].is_null() && paid["captured_at"].is_string());
    let session = example("checkout_session.completed", 1).unwrap();
    assert_eq!(keys(&session["buyer"]), ["email", "name"]);
    assert_eq!(session["status"], "complete");
    assert_eq!(session["payment_intent_ref"], paid["payment_intent_ref"]);
    assert_eq!(paid["payment_ref"], paid["payment_intent_ref"]);
    assert_eq!(
        example("invoice.paid", 1).unwrap()["number"]
            .as_str()
            .map(|n| n.len()),
        Some(11)
    );
}

#[test]
fn payment_succeeded_versions_differ_in_shape() {
    let v1 = example("payment.succeeded", 1).unwrap();
    let v2 = example("payment.succeeded", 2).unwrap();
    assert_eq!(
        keys(&v1),
        sorted(&[
            "payment_ref",
            "amount",
            "status",
            "captured_at",
            "buyer_ref",
            "buyer_email",
            "buyer_name",
            "card_brand",
            "card_last4",
            "product_refs",
        ])
    );
    assert_eq!(v1["payment_ref"], v2["payment_intent_ref"]);
    assert_eq!(v1["buyer_email"], v2["buyer"]["email"]);
    assert_eq!(v1["card_last4"], v2["payment_method"]["last4"]);
    assert!(v2.get("buyer_email").is_none() && v2.get("card_brand").is_none());
    assert_eq!(v2["payment_method"]["exp_year"], 2030);
}

#[test]
fn data_classes_of_the_payment_events() {
    let payment = vec![
        ("buyer.email", DataClass::Contact),
        ("buyer.name", DataClass::Contact),
        ("payment_method", DataClass::PaymentInstrument),
    ];
    assert_eq!(data_classes("payment.succeeded", 2), payment);
    assert_eq!(data_classes("payment.failed", 1), payment);
    assert_eq!(
        data_classes("payment.succeeded", 1),
        [
            ("buyer_email", DataClass::Contact),
            ("buyer_name", DataClass::Contact),
            ("card_brand", DataClass::PaymentInstrument),
            ("card_last4", DataClass::PaymentInstrument),
        ]
    );
    assert_eq!(
        data_classes("checkout_session.completed", 1),
        [
            ("buyer.email", DataClass::Contact),
            ("buyer.name", DataClass::Contact),
        ]
    );
    for name in [
        "order.created",
        "invoice.paid",
        "entitlement.granted",
        "subscription.started",
    ] {
        assert!(data_classes(name, 1).is_empty(), "{name}");
    }
}

/// Keys that hold a buyer's or an invitee's personal data wherever they sit.
const PERSONAL: &[&str] = &[
    "email",
    "name",
    "buyer_email",
    "buyer_name",
    "card_brand",
    "card_last4",
    "brand",
    "last4",
    "exp_month",
    "exp_year",
    "card",
    "billing_address",
    "tax_id",
];

/// Walks every key of a JSON tree with its dotted path (arrays add no
/// segment, as in the catalogue's paths).
fn walk_paths(v: &Value, prefix: &str, f: &mut dyn FnMut(&str, &str)) {
    match v {
        Value::Object(m) => m.iter().for_each(|(k, v)| {
            let path = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            f(k, &path);
            walk_paths(v, &path, f)
        }),
        Value::Array(a) => a.iter().for_each(|v| walk_paths(v, prefix, f)),
        _ => {}
    }
}

#[test]
fn every_personal_field_of_an_example_is_classified() {
    for (name, v, data) in examples() {
        let classes = data_classes(name, v);
        walk_paths(&data, "", &mut |key, path| {
            if PERSONAL.contains(&key) {
                let covered = classes
                    .iter()
                    .any(|(c, _)| path == *c || path.starts_with(&format!("{c}.")));
                assert!(covered, "{name} v{v}: {path} is not classified");
            }
        });
    }
}

#[test]
fn references_amounts_and_statuses_are_never_classified() {
    for t in all() {
        for v in t.dto_versions {
            for (path, _) in data_classes(t.name, *v) {
                let last = path.rsplit('.').next().unwrap();
                assert!(
                    !last.ends_with("_ref") && !last.ends_with("_refs"),
                    "{path}"
                );
                assert!(
                    !["amount", "status", "payment", "buyer"].contains(&last),
                    "{path}"
                );
            }
        }
    }
}
