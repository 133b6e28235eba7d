use super::*;
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
        if let Some(cf) = data.get("custom_fields") {
            for k in cf.as_object().unwrap().keys() {
                Ref::parse(Prefix::CustomField, k).unwrap();
            }
        }
    }
}

#[test]
fn custom_fields_in_checkout_and_order_examples() {
    for name in ["checkout_session.completed", "order.created"] {
        let cf = example(name, 1).unwrap()["custom_fields"].clone();
        assert_eq!(cf.as_object().map(|o| o.len()), Some(1), "{name}");
    }
}

#[test]
fn payment_succeeded_versions_differ_in_shape() {
    let v1 = example("payment.succeeded", 1).unwrap();
    let v2 = example("payment.succeeded", 2).unwrap();
    assert!(v1.get("buyer_email").is_some() && v1.get("payment").is_none());
    assert!(v2["payment"].get("payment_ref").is_some() && v2.get("buyer_email").is_none());
    assert_eq!(v2["payment_method"]["card"]["exp_year"], 2030);
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
