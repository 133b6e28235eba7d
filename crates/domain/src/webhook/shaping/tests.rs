use super::*;
use crate::webhook::catalogue::{self, example};
use proptest::prelude::*;
use serde_json::json;

fn grant(classes: &[DataClass], cfs: &[&str]) -> GrantView {
    GrantView {
        data_classes: classes.to_vec(),
        custom_field_refs: cfs.iter().map(|s| s.to_string()).collect(),
    }
}

const CF: &str = "cf_K1lZ4xC7vB3n";

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
    let buyer = out["buyer"].as_object().unwrap();
    assert_eq!(buyer.keys().collect::<Vec<_>>(), ["buyer_ref"]);
    assert!(out.get("custom_fields").is_none());
    assert_eq!(out["amount_total"], data["amount_total"]);
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
    let g = grant(&[DataClass::Contact], &[CF]);
    let out = shape("checkout_session.completed", 1, &data, Some(&g));
    assert_eq!(out["buyer"]["email"], "ada@example.com");
    assert!(out["buyer"].get("billing_address").is_none());
    assert!(out["buyer"].get("tax_id").is_none());
    assert_eq!(out["custom_fields"], data["custom_fields"]);
    assert!(!holds_uncovered(
        "checkout_session.completed",
        1,
        &out,
        Some(&g)
    ));
    let all = grant(DataClass::ALL, &[CF]);
    assert_eq!(
        shape("checkout_session.completed", 1, &data, Some(&all)),
        data
    );
}

#[test]
fn custom_fields_filtered_per_entry() {
    let data = json!({"order_ref": "ord_aaaaaaaaaaaa",
        "custom_fields": {CF: "a", "cf_bbbbbbbbbbbb": "b"}});
    let out = shape("order.created", 1, &data, Some(&grant(&[], &[CF])));
    assert_eq!(out["custom_fields"], json!({CF: "a"}));
    let none = shape(
        "order.created",
        1,
        &data,
        Some(&grant(&[], &["cf_cccccccccccc"])),
    );
    assert_eq!(none, json!({"order_ref": "ord_aaaaaaaaaaaa"}));
    let null = shape("order.created", 1, &json!({"custom_fields": null}), None);
    assert_eq!(null, json!({}));
    assert!(!holds_uncovered(
        "order.created",
        1,
        &json!({"custom_fields": {}}),
        None
    ));
}

#[test]
fn payment_v1_and_v2_fields_are_removed() {
    let g = grant(&[DataClass::Contact], &[]);
    let v1 = shape(
        "payment.succeeded",
        1,
        &example("payment.succeeded", 1).unwrap(),
        Some(&g),
    );
    assert!(v1.get("card_brand").is_none() && v1.get("card_last4").is_none());
    assert_eq!(v1["buyer_name"], "Ada Lovelace");
    let v2 = shape(
        "payment.succeeded",
        2,
        &example("payment.succeeded", 2).unwrap(),
        Some(&g),
    );
    assert_eq!(v2["payment_method"], json!({}));
    assert_eq!(v2["buyer"]["email"], "ada@example.com");
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
fn payment_conversion_round_trips() {
    let v1 = example("payment.succeeded", 1).unwrap();
    let v2 = example("payment.succeeded", 2).unwrap();
    assert_eq!(convert("payment.succeeded", 2, 1, &v2), v1);
    assert_eq!(
        convert("payment.succeeded", 1, 2, &v1).get("payment"),
        v2.get("payment")
    );
    assert_eq!(
        convert(
            "payment.succeeded",
            2,
            1,
            &convert("payment.succeeded", 1, 2, &v1)
        ),
        v1
    );
    let mut no_expiry = v2.clone();
    let card = no_expiry["payment_method"]["card"].as_object_mut().unwrap();
    card.remove("exp_month");
    card.remove("exp_year");
    assert_eq!(convert("payment.succeeded", 1, 2, &v1), no_expiry);
    let refund = example("refund.created", 1).unwrap();
    assert_eq!(convert("refund.created", 1, 2, &refund), refund);
    assert_eq!(convert("payment.succeeded", 1, 1, &v1), v1);
}

#[test]
fn conversion_keeps_unknown_fields_and_omits_missing_ones() {
    let v1 = json!({"payment_ref": "pay_aaaaaaaaaaaa", "extra": true});
    let v2 = convert("payment.succeeded", 1, 2, &v1);
    assert_eq!(
        v2,
        json!({"payment": {"payment_ref": "pay_aaaaaaaaaaaa"}, "extra": true})
    );
    assert_eq!(convert("payment.succeeded", 2, 1, &v2), v1);
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
    (
        proptest::sample::subsequence(DataClass::ALL.to_vec(), 0..=4),
        proptest::sample::subsequence(vec![CF.to_string(), "cf_zzzzzzzzzzzz".into()], 0..=2),
    )
        .prop_map(|(data_classes, custom_field_refs)| GrantView {
            data_classes,
            custom_field_refs,
        })
}

proptest! {
    /// Shaping leaves nothing uncovered, is idempotent, never adds fields,
    /// and never touches references, amounts or statuses.
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
        for (k, val) in out.as_object().unwrap() {
            prop_assert!(data.get(k).is_some());
            if k.ends_with("_ref") || k.ends_with("_refs") || k == "status" || k.starts_with("amount") {
                prop_assert_eq!(Some(val), data.get(k));
            }
        }
    }
}
