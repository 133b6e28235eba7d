//! The digest of a promotion plan: what ties an apply to the plan it was
//! shown (contract 10.1, `docs/catalogue.md`).
//!
//! It covers the plan body as parsed JSON (key order and white space do not
//! matter) and the version of every offer and price the plan read (their
//! order does not matter). Apply recomputes it in its own transaction; any
//! difference means something moved since the plan, and the caller answers
//! `412`. The module only hashes: reading the versions is the store's job.

use crate::idempotency::canonical_json;
use sha2::{Digest, Sha256};

/// Lowercase hex SHA-256 (64 characters) of the canonical body and the
/// reads, each `ref:version`, sorted by reference.
pub fn plan_digest(body: &serde_json::Value, reads: &[(String, i64)]) -> String {
    let mut h = Sha256::new();
    // A label keeps this digest apart from any other SHA-256 of JSON the
    // service computes (e.g. idempotency fingerprints).
    h.update(b"plan-digest-v1\n");
    h.update(canonical_json(body).as_bytes());
    // Canonical JSON escapes every newline, so this separator is unambiguous.
    h.update(b"\n");
    let mut sorted: Vec<&(String, i64)> = reads.iter().collect();
    sorted.sort();
    for (reference, version) in sorted {
        h.update(format!("{reference}:{version}\n").as_bytes());
    }
    hex::encode(h.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{json, Value};

    fn reads(r: &[(&str, i64)]) -> Vec<(String, i64)> {
        r.iter().map(|(s, v)| (s.to_string(), *v)).collect()
    }

    #[test]
    fn shape_and_examples() {
        let body = json!({"offer_refs": ["ofr_a"], "discount": {"percent_off": 10}});
        let d = plan_digest(&body, &reads(&[("ofr_a", 3), ("pri_b", 1)]));
        assert_eq!(d.len(), 64);
        assert!(d
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        let spaced: Value = serde_json::from_str(
            "{ \"discount\" : {\"percent_off\": 10},\n \"offer_refs\": [\"ofr_a\"] }",
        )
        .unwrap();
        assert_eq!(
            d,
            plan_digest(&spaced, &reads(&[("pri_b", 1), ("ofr_a", 3)]))
        );
        assert_ne!(d, plan_digest(&body, &reads(&[("ofr_a", 4), ("pri_b", 1)])));
        assert_ne!(d, plan_digest(&body, &reads(&[("ofr_a", 3)])));
        assert_ne!(
            d,
            plan_digest(&json!({}), &reads(&[("ofr_a", 3), ("pri_b", 1)]))
        );
        assert_eq!(
            canonical_json(&json!({"b": [1, {"d": null, "c": "x"}], "a": true})),
            r#"{"a":true,"b":[1,{"c":"x","d":null}]}"#
        );
    }

    fn leaf() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            "[a-z\"\\\\\n ]{0,6}".prop_map(Value::String),
        ]
    }

    fn json_value() -> impl Strategy<Value = Value> {
        leaf().prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map("[a-z]{1,3}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// Writes `v` as JSON text with every object's keys in reverse order, so
    /// that parsing it back exercises a different insertion order.
    fn reversed_text(v: &Value) -> String {
        match v {
            Value::Object(m) => {
                let mut entries: Vec<_> = m.iter().collect();
                entries.sort_by(|a, b| b.0.cmp(a.0));
                let parts: Vec<String> = entries
                    .into_iter()
                    .map(|(k, v)| format!("{} : {}", Value::String(k.clone()), reversed_text(v)))
                    .collect();
                format!("{{ {} }}", parts.join(" ,\n"))
            }
            Value::Array(items) => {
                let parts: Vec<String> = items.iter().map(reversed_text).collect();
                format!("[ {} ]", parts.join(", "))
            }
            other => other.to_string(),
        }
    }

    fn read_list() -> impl Strategy<Value = Vec<(String, i64)>> {
        proptest::collection::btree_map("(ofr|pri)_[a-z0-9]{1,4}", 1i64..100, 0..6)
            .prop_map(|m| m.into_iter().collect())
    }

    proptest! {
        #[test]
        fn key_order_does_not_matter(v in json_value(), r in read_list()) {
            let reparsed: Value = serde_json::from_str(&reversed_text(&v)).unwrap();
            prop_assert_eq!(&reparsed, &v);
            prop_assert_eq!(plan_digest(&v, &r), plan_digest(&reparsed, &r));
            prop_assert_eq!(canonical_json(&v), canonical_json(&reparsed));
        }

        #[test]
        fn read_order_does_not_matter(v in json_value(), r in read_list(), seed in any::<u64>()) {
            let mut shuffled = r.clone();
            // A deterministic permutation from the seed.
            let n = shuffled.len();
            if n > 1 {
                for i in (1..n).rev() {
                    let j = (seed.wrapping_mul(i as u64 + 7) % (i as u64 + 1)) as usize;
                    shuffled.swap(i, j);
                }
            }
            prop_assert_eq!(plan_digest(&v, &r), plan_digest(&v, &shuffled));
        }

        #[test]
        fn a_moved_version_changes_the_digest(v in json_value(), r in read_list(), which in any::<prop::sample::Index>(), bump in 1i64..5) {
            prop_assume!(!r.is_empty());
            let mut moved = r.clone();
            let i = which.index(moved.len());
            moved[i].1 += bump;
            prop_assert_ne!(plan_digest(&v, &r), plan_digest(&v, &moved));
        }

        #[test]
        fn a_different_body_changes_the_digest(a in json_value(), b in json_value(), r in read_list()) {
            prop_assume!(a != b);
            prop_assert_ne!(plan_digest(&a, &r), plan_digest(&b, &r));
        }
    }
}
