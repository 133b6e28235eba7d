use super::*;
use crate::webhook::catalogue::{self, example};
use proptest::prelude::*;
use serde_json::json;

/// A grant of `classes` and of the custom fields `fields`, each
/// `(cf_ reference, config_ref, key)` as the store resolves it.
fn grant(classes: &[DataClass], fields: &[(&str, &str, &str)]) -> GrantView {
    GrantView {
        data_classes: classes.to_vec(),
        custom_field_refs: fields.iter().map(|(r, _, _)| r.to_string()).collect(),
        custom_fields: fields
            .iter()
            .map(|(_, config_ref, key)| GrantedField {
                config_ref: config_ref.to_string(),
                key: key.to_string(),
            })
            .collect(),
    }
}

const CF: &str = "cf_K1lZ4xC7vB3n";
/// The config of the `checkout_session.completed` example and its one
/// custom field.
const CONFIG: &str = "cco_L6kJ8hG2fD5s";
const NOTE: &str = "delivery_note";
/// The example session's custom field, as a grant names it.
const NOTE_FIELD: (&str, &str, &str) = (CF, CONFIG, NOTE);

#[test]
fn scopes() {
    let s = Scope {
        product_refs: vec!["prd_aaaaaaaaaaaa".into(), "prd_bbbbbbbbbbbb".into()],
        buyer_ref: Some("buy_aaaaaaaaaaaa".into()),
        beneficiary_business_ref: None,
    };
    let env = "env_aaaaaaaaaaaa";
    assert!(scope_holds(&s, env, ScopeType::Environment, env));
    assert!(!scope_holds(
        &s,
        env,
        ScopeType::Environment,
        "env_bbbbbbbbbbbb"
    ));
    assert!(scope_holds(&s, env, ScopeType::Product, "prd_bbbbbbbbbbbb"));
    assert!(!scope_holds(
        &s,
        env,
        ScopeType::Product,
        "prd_cccccccccccc"
    ));
    assert!(scope_holds(&s, env, ScopeType::Buyer, "buy_aaaaaaaaaaaa"));
    assert!(!scope_holds(
        &s,
        env,
        ScopeType::BeneficiaryBusiness,
        "biz_aaaaaaaaaaaa"
    ));
    let parsed: Scope =
        serde_json::from_value(json!({"product_refs": [], "buyer_ref": null})).unwrap();
    assert_eq!(parsed, Scope::default());
}

#[test]
fn no_grant_keeps_only_unclassified_fields() {
    let data = example("checkout_session.completed", 1).unwrap();
    let out = shape("checkout_session.completed", 1, &data, None);
    assert_eq!(out["buyer"], json!({}));
    assert_eq!(out["buyer_ref"], data["buyer_ref"]);
    // The object is always delivered; without a grant, empty.
    assert_eq!(out["custom_fields"], json!({}));
    assert_eq!(out["amount_total"], data["amount_total"]);
    assert_eq!(out["line_items"], data["line_items"]);
    assert_eq!(out["status"], "complete");
    assert!(holds_uncovered(
        "checkout_session.completed",
        1,
        &data,
        None
    ));
    assert!(!holds_uncovered(
        "checkout_session.completed",
        1,
        &out,
        None
    ));
}

#[test]
fn grant_keeps_what_it_covers() {
    let data = example("checkout_session.completed", 1).unwrap();
    assert_eq!(data["config_ref"], CONFIG);
    assert!(data["custom_fields"][NOTE].is_string());
    let g = grant(&[DataClass::Contact], &[NOTE_FIELD]);
    let out = shape("checkout_session.completed", 1, &data, Some(&g));
    assert_eq!(
        out["buyer"],
        json!({"email": "ada@example.com", "name": "Ada Lovelace"})
    );
    assert_eq!(out["custom_fields"], data["custom_fields"]);
    assert!(!holds_uncovered(
        "checkout_session.completed",
        1,
        &out,
        Some(&g)
    ));
    let all = grant(DataClass::ALL, &[NOTE_FIELD]);
    assert_eq!(
        shape("checkout_session.completed", 1, &data, Some(&all)),
        data
    );
    assert!(!holds_uncovered(
        "checkout_session.completed",
        1,
        &data,
        Some(&all)
    ));
    // Every class but no field: the values go, the object stays.
    let classes_only = grant(DataClass::ALL, &[]);
    let out = shape("checkout_session.completed", 1, &data, Some(&classes_only));
    let mut without_values = data.clone();
    without_values["custom_fields"] = json!({});
    assert_eq!(out, without_values);
    assert!(holds_uncovered(
        "checkout_session.completed",
        1,
        &data,
        Some(&classes_only)
    ));
}

/// A grant covers a field by its config and key, never by the key alone
/// nor by a reference that happens to be written as a key.
#[test]
fn custom_fields_are_covered_by_config_and_key() {
    let other_config = "cco_Q2wE3rT4yU5i";
    let data = json!({"checkout_session_ref": "cs_aaaaaaaaaaaa", "config_ref": CONFIG,
        "custom_fields": {"gift_note": "a", "po_number": "b", CF: "c"}});
    let name = "checkout_session.completed";
    let one = grant(&[], &[(CF, CONFIG, "gift_note")]);
    let out = shape(name, 1, &data, Some(&one));
    assert_eq!(out["custom_fields"], json!({"gift_note": "a"}));
    assert!(holds_uncovered(name, 1, &data, Some(&one)));
    assert!(!holds_uncovered(name, 1, &out, Some(&one)));
    let both = grant(
        &[],
        &[
            (CF, CONFIG, "gift_note"),
            ("cf_bbbbbbbbbbbb", CONFIG, "po_number"),
        ],
    );
    assert_eq!(
        shape(name, 1, &data, Some(&both))["custom_fields"],
        json!({"gift_note": "a", "po_number": "b"})
    );
    // The same key of another config covers nothing here.
    let elsewhere = grant(&[], &[(CF, other_config, "gift_note")]);
    assert_eq!(
        shape(name, 1, &data, Some(&elsewhere))["custom_fields"],
        json!({})
    );
    // Names alone resolve nothing: a reference the store could not resolve
    // covers no field, whatever the data's keys.
    let unresolved = GrantView {
        data_classes: vec![],
        custom_field_refs: vec![CF.into()],
        custom_fields: vec![],
    };
    assert_eq!(
        shape(name, 1, &data, Some(&unresolved))["custom_fields"],
        json!({})
    );
    // Data that names no config: no entry is covered.
    let orphan = json!({"order_ref": "ord_aaaaaaaaaaaa", "custom_fields": {"gift_note": "a"}});
    assert_eq!(
        shape("order.created", 1, &orphan, Some(&one)),
        json!({"order_ref": "ord_aaaaaaaaaaaa", "custom_fields": {}})
    );
    // Not an object: removed; absent: not added; empty: holds nothing.
    let null = shape("order.created", 1, &json!({"custom_fields": null}), None);
    assert_eq!(null, json!({}));
    assert_eq!(
        shape("order.created", 1, &json!({"order_ref": "x"}), Some(&one)),
        json!({"order_ref": "x"})
    );
    assert!(!holds_uncovered(
        "order.created",
        1,
        &json!({"custom_fields": {}}),
        None
    ));
}

/// The payment resource (`payment.succeeded` 2, `payment.failed`) without a
/// grant, with `contact` only, with `payment_instrument` only and with both.
#[test]
fn payment_resource_fields_follow_the_grant() {
    for (name, v) in [("payment.succeeded", 2), ("payment.failed", 1)] {
        let data = example(name, v).unwrap();
        let bare = shape(name, v, &data, None);
        assert_eq!(bare["buyer"], json!({}), "{name}");
        assert!(bare.get("payment_method").is_none(), "{name}");
        for kept in [
            "payment_ref",
            "payment_intent_ref",
            "buyer_ref",
            "amount",
            "amount_refunded",
            "status",
            "failure_code",
            "product_refs",
            "captured_at",
            "etag",
        ] {
            assert_eq!(bare[kept], data[kept], "{name}: {kept}");
        }
        assert!(holds_uncovered(name, v, &data, None));
        assert!(!holds_uncovered(name, v, &bare, None));

        let contact = grant(&[DataClass::Contact], &[]);
        let out = shape(name, v, &data, Some(&contact));
        assert_eq!(out["buyer"], data["buyer"], "{name}");
        assert!(out.get("payment_method").is_none(), "{name}");
        assert!(holds_uncovered(name, v, &data, Some(&contact)));

        let card = grant(&[DataClass::PaymentInstrument], &[]);
        let out = shape(name, v, &data, Some(&card));
        assert_eq!(out["payment_method"], data["payment_method"], "{name}");
        assert_eq!(out["buyer"], json!({}), "{name}");

        let both = grant(&[DataClass::Contact, DataClass::PaymentInstrument], &[]);
        assert_eq!(shape(name, v, &data, Some(&both)), data, "{name}");
        assert!(!holds_uncovered(name, v, &data, Some(&both)));
    }
}

#[test]
fn payment_v1_fields_follow_the_grant() {
    let data = example("payment.succeeded", 1).unwrap();
    let bare = shape("payment.succeeded", 1, &data, None);
    for gone in ["buyer_email", "buyer_name", "card_brand", "card_last4"] {
        assert!(bare.get(gone).is_none(), "{gone}");
    }
    for kept in [
        "payment_ref",
        "amount",
        "status",
        "captured_at",
        "buyer_ref",
        "product_refs",
    ] {
        assert_eq!(bare[kept], data[kept], "{kept}");
    }
    let g = grant(&[DataClass::Contact], &[]);
    let v1 = shape("payment.succeeded", 1, &data, Some(&g));
    assert!(v1.get("card_brand").is_none() && v1.get("card_last4").is_none());
    assert_eq!(v1["buyer_name"], "Ada Lovelace");
    assert_eq!(v1["buyer_email"], "ada@example.com");
    let both = grant(&[DataClass::Contact, DataClass::PaymentInstrument], &[]);
    assert_eq!(shape("payment.succeeded", 1, &data, Some(&both)), data);
}

/// Records that name the buyer by reference only lose nothing without a
/// grant.
#[test]
fn resources_without_personal_fields_are_delivered_whole() {
    for name in [
        "order.created",
        "invoice.paid",
        "entitlement.granted",
        "subscription.started",
    ] {
        let data = example(name, 1).unwrap();
        assert_eq!(shape(name, 1, &data, None), data, "{name}");
        assert!(!holds_uncovered(name, 1, &data, None), "{name}");
    }
}

#[test]
fn paths_through_arrays_and_nulls() {
    let mut v = json!({"items": [{"buyer": {"email": "x", "id": 1}}, {"buyer": null}]});
    assert!(holds_path(&v, &["items", "buyer", "email"]));
    remove_path(&mut v, &["items", "buyer", "email"]);
    assert_eq!(v, json!({"items": [{"buyer": {"id": 1}}, {"buyer": null}]}));
    assert!(!holds_path(
        &json!({"buyer": {"email": null}}),
        &["buyer", "email"]
    ));
}

#[test]
fn payment_v2_converts_to_v1() {
    let v1 = example("payment.succeeded", 1).unwrap();
    let v2 = example("payment.succeeded", 2).unwrap();
    assert_eq!(convert("payment.succeeded", 2, 1, &v2), v1);
    // A failed payment: no capture, no buyer yet.
    let failed = example("payment.failed", 1).unwrap();
    assert_eq!(
        convert("payment.succeeded", 2, 1, &failed),
        json!({
            "payment_ref": failed["payment_intent_ref"], "amount": failed["amount"],
            "status": "failed", "captured_at": null, "buyer_ref": null,
            "buyer_email": "ada@example.com", "buyer_name": "Ada Lovelace",
            "card_brand": "visa", "card_last4": "0002", "product_refs": failed["product_refs"]
        })
    );
}

#[test]
fn payment_v1_converts_to_v2_as_best_it_can() {
    let v1 = example("payment.succeeded", 1).unwrap();
    let v2 = example("payment.succeeded", 2).unwrap();
    let mut expected = v2.clone();
    for lacking in [
        "checkout_session_ref",
        "stored_payment_method_ref",
        "next_action",
        "failure_code",
        "created_at",
        "etag",
    ] {
        expected[lacking] = Value::Null;
    }
    expected["payment_method"]["exp_month"] = Value::Null;
    expected["payment_method"]["exp_year"] = Value::Null;
    let converted = convert("payment.succeeded", 1, 2, &v1);
    assert_eq!(converted, expected);
    assert_eq!(converted["payment_method"]["type"], "card");
    assert_eq!(
        converted["amount_refunded"],
        json!({"currency": "EUR", "unit": "minor", "value": "0"})
    );
    // And back: version 1 loses nothing on the way.
    assert_eq!(convert("payment.succeeded", 2, 1, &converted), v1);
    // Another currency's zero.
    let mut usd = v1.clone();
    usd["amount"]["currency"] = json!("USD");
    assert_eq!(
        convert("payment.succeeded", 1, 2, &usd)["amount_refunded"],
        json!({"currency": "USD", "unit": "minor", "value": "0"})
    );
}

/// Other systems publish on the queue too: data already in the target
/// shape, or in the nested version 2 used before the payment resource,
/// converts without losing what it carries.
#[test]
fn conversion_reads_data_in_either_shape() {
    let v1 = example("payment.succeeded", 1).unwrap();
    let v2 = example("payment.succeeded", 2).unwrap();
    assert_eq!(convert("payment.succeeded", 2, 1, &v1), v1);
    assert_eq!(convert("payment.succeeded", 1, 2, &v2), v2);
    let nested = json!({
        "payment": {
            "payment_ref": v1["payment_ref"], "amount": v1["amount"],
            "status": "succeeded", "captured_at": v1["captured_at"]
        },
        "buyer": {"buyer_ref": v1["buyer_ref"], "email": "ada@example.com", "name": "Ada Lovelace"},
        "payment_method": {"card": {"brand": "visa", "last4": "4242", "exp_month": 12, "exp_year": 2030}},
        "product_refs": v1["product_refs"]
    });
    assert_eq!(convert("payment.succeeded", 2, 1, &nested), v1);
    let from_nested = convert("payment.succeeded", 1, 2, &nested);
    assert_eq!(from_nested["payment_intent_ref"], v2["payment_intent_ref"]);
    assert_eq!(from_nested["buyer"], v2["buyer"]);
    assert_eq!(from_nested["payment_method"], v2["payment_method"]);
}

#[test]
fn conversion_drops_unknown_fields_and_nulls_missing_ones() {
    // An unknown field could hold personal data the target version's data
    // classes do not name: it is not carried over.
    let v1 = json!({"payment_ref": "pay_aaaaaaaaaaaa", "extra": true,
        "buyer": {"email": "x@example.com", "phone": "+49 30 1234567"}});
    let v2 = convert("payment.succeeded", 1, 2, &v1);
    assert!(v2.get("extra").is_none());
    assert_eq!(v2["payment_intent_ref"], "pay_aaaaaaaaaaaa");
    assert_eq!(v2["payment_ref"], "pay_aaaaaaaaaaaa");
    assert_eq!(v2["buyer"], json!({"email": "x@example.com", "name": null}));
    assert!(v2["amount"].is_null() && v2["amount_refunded"].is_null());
    assert_eq!(
        v2["payment_method"],
        json!({"type": "card", "brand": null, "last4": null, "exp_month": null, "exp_year": null})
    );
    let back = convert("payment.succeeded", 2, 1, &v2);
    assert_eq!(back.as_object().unwrap().len(), 10);
    assert_eq!(back["payment_ref"], "pay_aaaaaaaaaaaa");
    assert_eq!(back["buyer_email"], "x@example.com");
    assert!(back["amount"].is_null() && back["card_brand"].is_null());
    let with_extra = json!({"payment_intent_ref": "pay_aaaaaaaaaaaa",
        "buyer": {"email": "x@example.com", "phone": "+49 30 1234567"}, "note": "x"});
    let v1 = convert("payment.succeeded", 2, 1, &with_extra);
    assert!(v1.get("note").is_none() && v1.get("buyer").is_none());
    assert!(!v1.to_string().contains("+49"));
    // Not an object, another type, the same version: unchanged.
    assert_eq!(
        convert("payment.succeeded", 2, 1, &json!(null)),
        json!(null)
    );
    let refund = example("refund.created", 1).unwrap();
    assert_eq!(convert("refund.created", 1, 2, &refund), refund);
    let v1 = example("payment.succeeded", 1).unwrap();
    assert_eq!(convert("payment.succeeded", 1, 1, &v1), v1);
    let v2 = example("payment.succeeded", 2).unwrap();
    assert_eq!(convert("payment.succeeded", 2, 2, &v2), v2);
}

/// Converting then shaping: without a grant, neither version carries the
/// buyer's contact or the card.
#[test]
fn converted_data_is_shaped_by_its_own_version() {
    let v2 = example("payment.succeeded", 2).unwrap();
    let v1 = shape(
        "payment.succeeded",
        1,
        &convert("payment.succeeded", 2, 1, &v2),
        None,
    );
    assert!(!holds_uncovered("payment.succeeded", 1, &v1, None));
    let text = v1.to_string();
    assert!(!text.contains("ada@example.com") && !text.contains("Ada Lovelace"));
    assert!(!text.contains("4242") && !text.contains("visa"));
    assert_eq!(v1["payment_ref"], v2["payment_intent_ref"]);
}

#[test]
fn convert_changes_data_only_where_converts_says() {
    for t in catalogue::all() {
        for &from in t.dto_versions {
            for &to in t.dto_versions {
                let data = example(t.name, from).expect("example");
                let same = convert(t.name, from, to, &data) == data;
                assert_eq!(
                    converts(t.name, from, to),
                    !same,
                    "{} {from} -> {to}",
                    t.name
                );
            }
        }
    }
}

fn any_grant() -> impl Strategy<Value = GrantView> {
    let fields = vec![
        NOTE_FIELD,
        ("cf_zzzzzzzzzzzz", CONFIG, "gift_note"),
        ("cf_yyyyyyyyyyyy", "cco_Q2wE3rT4yU5i", NOTE),
    ];
    (
        proptest::sample::subsequence(DataClass::ALL.to_vec(), 0..=4),
        proptest::sample::subsequence(fields, 0..=3),
    )
        .prop_map(|(data_classes, fields)| grant(&data_classes, &fields))
}

proptest! {
    /// Shaping leaves nothing uncovered, is idempotent, never adds fields,
    /// keeps `custom_fields`, and never touches references, amounts or
    /// statuses.
    #[test]
    fn shaping_is_sound(g in any_grant(), with_grant in any::<bool>(), pick in 0usize..64) {
        let types: Vec<_> = catalogue::all().iter()
            .flat_map(|t| t.dto_versions.iter().map(move |v| (t.name, *v))).collect();
        let (name, v) = types[pick % types.len()];
        let data = example(name, v).unwrap();
        let grant = with_grant.then_some(&g);
        let out = shape(name, v, &data, grant);
        prop_assert!(!holds_uncovered(name, v, &out, grant));
        prop_assert_eq!(&shape(name, v, &out, grant), &out);
        // A resource's `custom_fields` object is always delivered.
        prop_assert_eq!(out.get("custom_fields").is_some(), data.get("custom_fields").is_some());
        for (k, val) in out.as_object().unwrap() {
            prop_assert!(data.get(k).is_some());
            if k.ends_with("_ref") || k.ends_with("_refs") || k == "status" || k.starts_with("amount") {
                prop_assert_eq!(Some(val), data.get(k));
            }
        }
    }
}
