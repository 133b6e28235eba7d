//! Fan-out planning (contract section 9, "Subscriptions and the event
//! catalogue"): which deliveries an event gets among the subscriptions of
//! its environment and type.
//!
//! The rule: a subscription matches when the event's scope holds its scope
//! ref ([`scope_holds`]); the matches become one delivery per (endpoint,
//! dto_version), in that order, and each delivery lists every subscription
//! that matched it as a match reason. Pure: the store reads the
//! subscriptions and writes the deliveries; nothing here reads or writes.

use super::kinds::ScopeType;
use super::shaping::{scope_holds, Scope};
use crate::Ref;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// A subscription as the fan-out reads it (one of the event's environment
/// and type).
#[derive(Debug, Clone, Copy)]
pub struct Subscribed<'a> {
    pub endpoint_ref: &'a Ref,
    pub public_event_type: &'a str,
    pub scope_type: ScopeType,
    pub scope_ref: &'a str,
    pub dto_version: u32,
}

impl Subscribed<'_> {
    /// Its match reason as a delivery lists it.
    fn reason(&self) -> Value {
        reason(
            self.public_event_type,
            self.scope_type,
            self.scope_ref,
            self.dto_version,
        )
    }
}

fn reason(
    public_event_type: &str,
    scope_type: ScopeType,
    scope_ref: &str,
    dto_version: u32,
) -> Value {
    json!({
        "kind": "subscription",
        "public_event_type": public_event_type,
        "scope_type": scope_type.as_str(),
        "scope_ref": scope_ref,
        "dto_version": dto_version,
    })
}

/// The match reasons of a delivery that one subscription matched: to its
/// event's type, over the whole of its environment, in its dto version.
/// Most deliveries have exactly these, and everything in them is the
/// delivery's own, so a store need not keep them (`Planned::only_environment`).
pub fn environment_reasons(
    public_event_type: &str,
    environment_ref: &str,
    dto_version: u32,
) -> Value {
    Value::Array(vec![reason(
        public_event_type,
        ScopeType::Environment,
        environment_ref,
        dto_version,
    )])
}

/// One delivery an event gets.
#[derive(Debug, Clone, PartialEq)]
pub struct Planned<'a> {
    pub endpoint_ref: &'a Ref,
    pub dto_version: u32,
    /// Every matching subscription's reason, in the order given (a JSON
    /// array).
    pub match_reasons: Value,
}

impl Planned<'_> {
    /// Whether its reasons are `environment_reasons` of an event of
    /// `public_event_type` in `environment_ref`.
    pub fn only_environment(&self, public_event_type: &str, environment_ref: &str) -> bool {
        self.match_reasons
            == environment_reasons(public_event_type, environment_ref, self.dto_version)
    }
}

/// The deliveries of an event with `scope` in `environment_ref` among
/// `subscriptions` (those of its environment and type), ordered by
/// endpoint reference, then dto version.
pub fn plan<'a>(
    scope: &Scope,
    environment_ref: &str,
    subscriptions: impl IntoIterator<Item = Subscribed<'a>>,
) -> Vec<Planned<'a>> {
    let mut groups: BTreeMap<(&'a str, u32), (&'a Ref, Vec<Value>)> = BTreeMap::new();
    for s in subscriptions {
        if scope_holds(scope, environment_ref, s.scope_type, s.scope_ref) {
            groups
                .entry((s.endpoint_ref.as_str(), s.dto_version))
                .or_insert_with(|| (s.endpoint_ref, Vec::new()))
                .1
                .push(s.reason());
        }
    }
    groups
        .into_iter()
        .map(|((_, dto_version), (endpoint_ref, reasons))| Planned {
            endpoint_ref,
            dto_version,
            match_reasons: Value::Array(reasons),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Prefix;
    use proptest::prelude::*;

    const ENV: &str = "env_AAAAAAAAAAAA";

    fn scope(products: &[&str]) -> Scope {
        Scope {
            product_refs: products.iter().map(|p| (*p).to_owned()).collect(),
            ..Scope::default()
        }
    }

    #[test]
    fn one_delivery_per_endpoint_and_version_with_every_reason() {
        let (a, b) = (
            Ref::generate(Prefix::WebhookEndpoint),
            Ref::generate(Prefix::WebhookEndpoint),
        );
        let sub = |endpoint_ref, scope_type, scope_ref, dto_version| Subscribed {
            endpoint_ref,
            public_event_type: "order.created",
            scope_type,
            scope_ref,
            dto_version,
        };
        let subs = [
            sub(&a, ScopeType::Environment, ENV, 1),
            sub(&a, ScopeType::Product, "prd_AAAAAAAAAAAA", 1),
            sub(&a, ScopeType::Product, "prd_BBBBBBBBBBBB", 1),
            sub(&a, ScopeType::Environment, ENV, 2),
            sub(&b, ScopeType::Environment, "env_BBBBBBBBBBBB", 1),
        ];
        let planned = plan(&scope(&["prd_AAAAAAAAAAAA"]), ENV, subs);
        assert_eq!(planned.len(), 2, "b's scope does not hold; a twice");
        assert_eq!((planned[0].endpoint_ref, planned[0].dto_version), (&a, 1));
        assert_eq!(planned[0].match_reasons.as_array().unwrap().len(), 2);
        assert_eq!(
            planned[0].match_reasons[1],
            json!({"kind": "subscription", "public_event_type": "order.created",
                   "scope_type": "product", "scope_ref": "prd_AAAAAAAAAAAA", "dto_version": 1})
        );
        assert_eq!((planned[1].endpoint_ref, planned[1].dto_version), (&a, 2));
    }

    #[test]
    fn only_one_environment_wide_subscription_needs_no_stored_reasons() {
        let a = Ref::generate(Prefix::WebhookEndpoint);
        let sub = |scope_type, scope_ref| Subscribed {
            endpoint_ref: &a,
            public_event_type: "order.created",
            scope_type,
            scope_ref,
            dto_version: 2,
        };
        let only = plan(&scope(&[]), ENV, [sub(ScopeType::Environment, ENV)]);
        assert!(only[0].only_environment("order.created", ENV));
        assert_eq!(
            only[0].match_reasons,
            environment_reasons("order.created", ENV, 2),
            "built again from the delivery's own type, environment and version"
        );
        let product = sub(ScopeType::Product, "prd_AAAAAAAAAAAA");
        let with_product = plan(
            &scope(&["prd_AAAAAAAAAAAA"]),
            ENV,
            [sub(ScopeType::Environment, ENV), product],
        );
        assert!(!with_product[0].only_environment("order.created", ENV));
        let by_product = plan(&scope(&["prd_AAAAAAAAAAAA"]), ENV, [product]);
        assert!(!by_product[0].only_environment("order.created", ENV));
    }

    proptest! {
        /// Whatever the subscriptions: each (endpoint, version) at most
        /// once, in order; a delivery exactly where some subscription's
        /// scope holds, with one reason per such subscription.
        #[test]
        fn deliveries_are_the_matches_grouped(
            subs in proptest::collection::vec((0..4usize, 0..3usize, 1..3u32), 0..40),
            products in proptest::collection::vec(0..3usize, 0..3),
        ) {
            let endpoints: Vec<Ref> =
                (0..4).map(|_| Ref::generate(Prefix::WebhookEndpoint)).collect();
            let product_refs = ["prd_AAAAAAAAAAAA", "prd_BBBBBBBBBBBB", "prd_CCCCCCCCCCCC"];
            let event_products: Vec<&str> = products.iter().map(|&i| product_refs[i]).collect();
            let subscribed: Vec<Subscribed> = subs
                .iter()
                .map(|&(e, p, v)| Subscribed {
                    endpoint_ref: &endpoints[e],
                    public_event_type: "order.created",
                    scope_type: ScopeType::Product,
                    scope_ref: product_refs[p],
                    dto_version: v,
                })
                .collect();
            let planned = plan(&scope(&event_products), ENV, subscribed.iter().copied());
            let keys: Vec<(&str, u32)> =
                planned.iter().map(|p| (p.endpoint_ref.as_str(), p.dto_version)).collect();
            let mut sorted = keys.clone();
            sorted.sort();
            sorted.dedup();
            prop_assert_eq!(&keys, &sorted);
            let mut expected: BTreeMap<(&str, u32), usize> = BTreeMap::new();
            for s in &subscribed {
                if event_products.contains(&s.scope_ref) {
                    *expected.entry((s.endpoint_ref.as_str(), s.dto_version)).or_default() += 1;
                }
            }
            let got: BTreeMap<(&str, u32), usize> = planned
                .iter()
                .map(|p| {
                    ((p.endpoint_ref.as_str(), p.dto_version),
                     p.match_reasons.as_array().map_or(0, Vec::len))
                })
                .collect();
            prop_assert_eq!(got, expected);
        }
    }
}
