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
    "refund.failed",
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
    for name in [
        "refund.created",
        "refund.succeeded",
        "refund.failed",
        "refund.canceled",
    ] {
        let r = find(name).unwrap();
        assert_eq!(r.scope_types, [Env, Product, Buyer], "{name}");
        assert_eq!(r.dto_versions, [1], "{name}");
    }
    assert_eq!(
        find("refund.failed").unwrap().description,
        "A refund failed."
    );
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
    "lines",
    "amount_total",
    "status",
    "issued_at",
    "paid_at",
    "payment_intent_ref",
    "attempt_count",
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
    "cancel_at_period_end",
    "cancel_reason",
    "test_clock_ref",
    "trial_end",
    "pending_invoice_lines",
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
const INVOICE_LINE_FIELDS: &[&str] = &[
    "kind",
    "amount",
    "price_ref",
    "period_start",
    "period_end",
    "description",
];

#[test]
fn the_events_a_payment_writes_carry_their_resource() {
    for (name, v, fields) in [
        ("payment.succeeded", 2, PAYMENT_FIELDS),
        ("payment.failed", 1, PAYMENT_FIELDS),
        ("checkout_session.completed", 1, SESSION_FIELDS),
        ("order.created", 1, ORDER_FIELDS),
        ("invoice.paid", 1, INVOICE_FIELDS),
        ("invoice.payment_failed", 1, INVOICE_FIELDS),
        ("entitlement.granted", 1, ENTITLEMENT_FIELDS),
        ("subscription.started", 1, SUBSCRIPTION_FIELDS),
        ("subscription.renewed", 1, SUBSCRIPTION_FIELDS),
        ("subscription.past_due", 1, SUBSCRIPTION_FIELDS),
        ("subscription.canceled", 1, SUBSCRIPTION_FIELDS),
        ("subscription.trial_will_end", 1, SUBSCRIPTION_FIELDS),
    ] {
        let data = example(name, v).unwrap();
        assert_eq!(keys(&data), sorted(fields), "{name} v{v}");
        if let Some(items) = data.get("line_items") {
            for item in items.as_array().unwrap() {
                assert_eq!(keys(item), sorted(LINE_ITEM_FIELDS), "{name}");
            }
        }
        // An invoice's lines (contract 14.1) sum to its total.
        if let Some(lines) = data.get("lines") {
            let lines = lines.as_array().unwrap();
            assert!(!lines.is_empty(), "{name}");
            let mut sum = 0i128;
            for line in lines {
                assert_eq!(keys(line), sorted(INVOICE_LINE_FIELDS), "{name}");
                assert!(
                    crate::checkout::lines::LineKind::parse(line["kind"].as_str().unwrap())
                        .is_some(),
                    "{name}"
                );
                sum += line["amount"]["value"]
                    .as_str()
                    .unwrap()
                    .parse::<i128>()
                    .unwrap();
            }
            let total: i128 = data["amount_total"]["value"]
                .as_str()
                .unwrap()
                .parse()
                .unwrap();
            assert_eq!(sum, total, "{name}");
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

/// The resources of `interface.md` (with `created_at`, `updated_at` and
/// `etag` of a refund as the control API answers it).
const REFUND_FIELDS: &[&str] = &[
    "refund_ref",
    "payment_intent_ref",
    "capture_ref",
    "status",
    "scope",
    "amount",
    "reason",
    "access_effect",
    "cancelable",
    "requested_at",
    "scheduled_at",
    "executed_at",
    "canceled_at",
    "created_at",
    "updated_at",
    "etag",
];
const DISPUTE_FIELDS: &[&str] = &[
    "dispute_ref",
    "payment_intent_ref",
    "amount",
    "kind",
    "status",
    "reason_safe",
    "opened_at",
    "evidence_due_at",
    "resolved_at",
    "etag",
];
const PAYOUT_FIELDS: &[&str] = &[
    "payout_ref",
    "beneficiary_business_ref",
    "status",
    "amount",
    "fee",
    "net",
    "method_key",
    "destination_label",
    "destination_last4",
    "requested_at",
    "completed_at",
    "etag",
];
const PARTICIPATION_FIELDS: &[&str] = &[
    "participation_ref",
    "beneficiary_business_ref",
    "status",
    "invited_at",
    "accepted_at",
    "terms_version",
    "terms_digest",
    "etag",
];

fn at(v: &Value, field: &str) -> Timestamp {
    Timestamp::parse(v[field].as_str().unwrap_or_else(|| panic!("{field}: {v}")))
        .unwrap_or_else(|| panic!("{field}: {v}"))
}

fn minor(v: &Value) -> (String, u64) {
    let w: MoneyWire = serde_json::from_value(v.clone()).unwrap();
    (w.currency, w.value.parse().unwrap())
}

#[test]
fn refund_events_carry_the_refund() {
    for (name, status) in [
        ("refund.created", "pending"),
        ("refund.succeeded", "succeeded"),
        ("refund.failed", "failed"),
        ("refund.canceled", "canceled"),
    ] {
        let r = example(name, 1).unwrap();
        assert_eq!(keys(&r), sorted(REFUND_FIELDS), "{name}");
        assert_eq!(r["status"], status, "{name}");
        assert_eq!(r["cancelable"], status == "scheduled", "{name}");
        assert!(["full", "partial"].contains(&r["scope"].as_str().unwrap()));
        assert!(["revoke", "retain"].contains(&r["access_effect"].as_str().unwrap()));
        assert!(
            ["requested_by_customer", "duplicate", "fraudulent", "other"]
                .contains(&r["reason"].as_str().unwrap()),
            "{name}"
        );
        // Settled refunds say when; only a canceled one says when it was
        // canceled, and only a scheduled one can be.
        let settled = matches!(status, "succeeded" | "failed");
        assert_eq!(r["executed_at"].is_string(), settled, "{name}");
        assert_eq!(r["canceled_at"].is_string(), status == "canceled", "{name}");
        if status == "canceled" {
            assert!(at(&r, "scheduled_at") > at(&r, "canceled_at"), "{name}");
        }
        if settled {
            assert!(at(&r, "executed_at") >= at(&r, "requested_at"), "{name}");
            assert_eq!(r["updated_at"], r["executed_at"], "{name}");
        }
        assert!(at(&r, "updated_at") >= at(&r, "created_at"), "{name}");
        // The refund is of Ada's payment, and no more than it.
        let paid = example("payment.succeeded", 2).unwrap();
        assert_eq!(
            r["payment_intent_ref"], paid["payment_intent_ref"],
            "{name}"
        );
        let (currency, amount) = minor(&r["amount"]);
        let (paid_currency, paid_amount) = minor(&paid["amount"]);
        assert!(currency == paid_currency && (1..=paid_amount).contains(&amount));
        assert_eq!(r["scope"] == "full", amount == paid_amount, "{name}");
        assert!(at(&r, "requested_at") > at(&paid, "captured_at"), "{name}");
    }
}

#[test]
fn dispute_events_carry_the_dispute() {
    for (name, closed) in [("dispute.opened", false), ("dispute.closed", true)] {
        let d = example(name, 1).unwrap();
        assert_eq!(keys(&d), sorted(DISPUTE_FIELDS), "{name}");
        assert!(["chargeback", "inquiry"].contains(&d["kind"].as_str().unwrap()));
        let status = d["status"].as_str().unwrap();
        if closed {
            assert!(["won", "lost"].contains(&status), "{name}");
            assert!(at(&d, "resolved_at") > at(&d, "opened_at"), "{name}");
        } else {
            assert_eq!(status, "needs_response", "{name}");
            assert!(d["resolved_at"].is_null(), "{name}");
        }
        assert_eq!(
            at(&d, "evidence_due_at").millis() - at(&d, "opened_at").millis(),
            7 * 86_400_000,
            "{name}"
        );
        let reason = d["reason_safe"].as_str().unwrap();
        assert!(reason.chars().count() <= 200 && !reason.chars().any(char::is_control));
        assert!(!reason.contains('<') && !reason.contains('>'), "{name}");
        assert!(d.get("reason").is_none(), "{name}: never the raw reason");
    }
    // The dispute opening is what canceled the scheduled refund.
    let canceled = example("refund.canceled", 1).unwrap();
    let opened = example("dispute.opened", 1).unwrap();
    assert_eq!(canceled["payment_intent_ref"], opened["payment_intent_ref"]);
    assert_eq!(canceled["canceled_at"], opened["opened_at"]);
}

#[test]
fn payout_events_carry_the_payout() {
    for (name, status) in [("payout.paid", "paid"), ("payout.failed", "failed")] {
        let p = example(name, 1).unwrap();
        assert_eq!(keys(&p), sorted(PAYOUT_FIELDS), "{name}");
        assert_eq!(p["status"], status, "{name}");
        let (currency, amount) = minor(&p["amount"]);
        assert_eq!(minor(&p["fee"]).0, currency, "{name}");
        assert_eq!(
            minor(&p["net"]),
            (currency, amount - minor(&p["fee"]).1),
            "{name}: net = amount - fee"
        );
        let last4 = p["destination_last4"].as_str().unwrap();
        assert!(last4.len() == 4 && last4.bytes().all(|b| b.is_ascii_digit()));
        assert!(p["method_key"].is_string() && p["destination_label"].is_string());
        assert_eq!(p["completed_at"].is_string(), status == "paid", "{name}");
        if status == "paid" {
            assert!(at(&p, "completed_at") > at(&p, "requested_at"));
        }
    }
}

#[test]
fn participation_events_carry_the_participation() {
    for (name, accepted) in [
        ("participation.invited", false),
        ("participation.accepted", true),
    ] {
        let p = example(name, 1).unwrap();
        assert_eq!(keys(&p), sorted(PARTICIPATION_FIELDS), "{name}");
        assert!(
            p["terms_version"].as_u64().is_some_and(|v| v >= 1),
            "{name}"
        );
        if accepted {
            assert_eq!(p["status"], "accepted");
            assert!(at(&p, "accepted_at") > at(&p, "invited_at"));
            let digest = p["terms_digest"].as_str().unwrap();
            assert!(
                digest.len() == 64
                    && digest
                        .bytes()
                        .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
                "{digest}"
            );
        } else {
            assert_eq!(p["status"], "invited");
            assert!(p["accepted_at"].is_null() && p["terms_digest"].is_null());
        }
    }
}

/// `entitlement.revoked` carries the entitlement `entitlement.granted`
/// carried, revoked: when the refund that revokes access succeeded.
#[test]
fn entitlement_revoked_carries_the_revoked_entitlement() {
    let granted = example("entitlement.granted", 1).unwrap();
    let revoked = example("entitlement.revoked", 1).unwrap();
    assert_eq!(keys(&revoked), sorted(ENTITLEMENT_FIELDS));
    assert_eq!(revoked["status"], "revoked");
    assert!(granted["revoked_at"].is_null());
    assert!(at(&revoked, "revoked_at") > at(&revoked, "granted_at"));
    assert_ne!(revoked["etag"], granted["etag"]);
    for (k, v) in granted.as_object().unwrap() {
        if !["status", "revoked_at", "etag"].contains(&k.as_str()) {
            assert_eq!(&revoked[k], v, "{k}");
        }
    }
    let refund = example("refund.succeeded", 1).unwrap();
    assert_eq!(refund["access_effect"], "revoke");
    assert_eq!(revoked["revoked_at"], refund["executed_at"]);
}

/// Every event that carries a resource carries its `etag`; only the older
/// shapes and the test event have none.
#[test]
fn every_resource_example_has_its_etag() {
    for (name, v, data) in examples() {
        let older = matches!((name, v), ("payment.succeeded", 1) | ("webhook.test", 1));
        assert_eq!(data.get("etag").is_none(), older, "{name} v{v}");
    }
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

/// Refunds and disputes name the payment by reference only, entitlements
/// the buyer; payouts and participations concern a business. None carries
/// a personal field, so none has a data class.
#[test]
fn the_other_resources_have_no_data_classes() {
    for name in [
        "refund.created",
        "refund.succeeded",
        "refund.failed",
        "refund.canceled",
        "dispute.opened",
        "dispute.closed",
        "entitlement.revoked",
        "invoice.payment_failed",
        "subscription.renewed",
        "subscription.past_due",
        "subscription.trial_will_end",
        "subscription.changed",
        "subscription.canceled",
        "payout.paid",
        "payout.failed",
        "participation.invited",
        "participation.accepted",
        "webhook.test",
    ] {
        assert!(data_classes(name, 1).is_empty(), "{name}");
        let data = example(name, 1).unwrap();
        walk_paths(&data, "", &mut |key, path| {
            let personal =
                PERSONAL.contains(&key) || ["buyer", "invitee", "payment_method"].contains(&key);
            assert!(!personal, "{name}: {path}");
        });
        let text = data.to_string();
        assert!(!text.contains("ada@example.com") && !text.contains("Ada Lovelace"));
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
