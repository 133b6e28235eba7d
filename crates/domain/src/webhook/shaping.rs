//! Payload shaping: which subscriptions an event's scope satisfies, the
//! conversion of an event's `data` between DTO versions, and the removal of
//! the personal and custom fields an endpoint's data profile grant does not
//! cover (contract section 9, "Data profile grants").
//!
//! Order of work for one delivery: [`convert`] the published `data` to the
//! subscription's DTO version, then [`shape`] it with the grant in force at
//! the time of the attempt.

use super::catalogue;
use super::kinds::{DataClass, ScopeType};
use serde_json::{Map, Value};

/// What an event concerns, as published with it on the queue.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Scope {
    #[serde(default)]
    pub product_refs: Vec<String>,
    #[serde(default)]
    pub buyer_ref: Option<String>,
    #[serde(default)]
    pub beneficiary_business_ref: Option<String>,
}

/// Does an event with `scope`, in environment `environment_ref`, fall within
/// a subscription's (`scope_type`, `scope_ref`)?
pub fn scope_holds(
    scope: &Scope,
    environment_ref: &str,
    scope_type: ScopeType,
    scope_ref: &str,
) -> bool {
    match scope_type {
        ScopeType::Environment => environment_ref == scope_ref,
        ScopeType::Product => scope.product_refs.iter().any(|p| p == scope_ref),
        ScopeType::Buyer => scope.buyer_ref.as_deref() == Some(scope_ref),
        ScopeType::BeneficiaryBusiness => {
            scope.beneficiary_business_ref.as_deref() == Some(scope_ref)
        }
    }
}

/// What an endpoint's active data profile grant covers.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GrantView {
    pub data_classes: Vec<DataClass>,
    pub custom_field_refs: Vec<String>,
}

fn covers_class(grant: Option<&GrantView>, class: DataClass) -> bool {
    grant.is_some_and(|g| g.data_classes.contains(&class))
}

fn covers_field(grant: Option<&GrantView>, cf_ref: &str) -> bool {
    grant.is_some_and(|g| g.custom_field_refs.iter().any(|r| r == cf_ref))
}

const CUSTOM_FIELDS: &str = "custom_fields";

/// The `data` to deliver: `data` (an event's data in the shape of
/// `dto_version`) with every classified field whose class `grant` does not
/// cover removed, and every `custom_fields` entry not in the grant removed
/// (the `custom_fields` key itself removed when empty or not an object).
/// `None` grant covers nothing.
pub fn shape(event_type: &str, dto_version: u32, data: &Value, grant: Option<&GrantView>) -> Value {
    shape_owned(event_type, dto_version, data.clone(), grant)
}

/// `shape`, in place: for a caller that owns the data (an attempt parsed
/// it for itself), without a copy.
pub fn shape_owned(
    event_type: &str,
    dto_version: u32,
    mut out: Value,
    grant: Option<&GrantView>,
) -> Value {
    for (path, class) in catalogue::data_classes(event_type, dto_version) {
        if !covers_class(grant, class) {
            let segments: Vec<&str> = path.split('.').collect();
            remove_path(&mut out, &segments);
        }
    }
    if let Some(obj) = out.as_object_mut() {
        let keep = match obj.get_mut(CUSTOM_FIELDS) {
            Some(Value::Object(fields)) => {
                fields.retain(|k, _| covers_field(grant, k));
                !fields.is_empty()
            }
            _ => false,
        };
        if !keep {
            obj.remove(CUSTOM_FIELDS);
        }
    }
    out
}

/// True when `payload_data` holds a classified field (with a non-null value)
/// or a custom field that `grant` does not cover (used to redact stored
/// bodies when a grant is revoked).
pub fn holds_uncovered(
    event_type: &str,
    dto_version: u32,
    payload_data: &Value,
    grant: Option<&GrantView>,
) -> bool {
    let classified = catalogue::data_classes(event_type, dto_version)
        .into_iter()
        .any(|(path, class)| {
            let segments: Vec<&str> = path.split('.').collect();
            !covers_class(grant, class) && holds_path(payload_data, &segments)
        });
    let custom = match payload_data.get(CUSTOM_FIELDS) {
        Some(Value::Object(fields)) => fields.keys().any(|k| !covers_field(grant, k)),
        _ => false,
    };
    classified || custom
}

/// Removes the field at `segments`; an array on the way applies the rest of
/// the path to each of its elements.
fn remove_path(v: &mut Value, segments: &[&str]) {
    match (v, segments) {
        (Value::Array(items), _) => items.iter_mut().for_each(|i| remove_path(i, segments)),
        (Value::Object(obj), [last]) => {
            obj.remove(*last);
        }
        (Value::Object(obj), [first, rest @ ..]) => {
            if let Some(child) = obj.get_mut(*first) {
                remove_path(child, rest);
            }
        }
        _ => {}
    }
}

/// Whether a non-null value sits at `segments` (in any element of an array
/// on the way).
fn holds_path(v: &Value, segments: &[&str]) -> bool {
    match (v, segments) {
        (Value::Array(items), _) => items.iter().any(|i| holds_path(i, segments)),
        (Value::Object(obj), [first, rest @ ..]) => obj.get(*first).is_some_and(|child| {
            if rest.is_empty() {
                !child.is_null()
            } else {
                holds_path(child, rest)
            }
        }),
        _ => false,
    }
}

/// Whether [`convert`] changes data of `event_type` going from
/// `from_version` to `to_version` (otherwise it returns it unchanged).
pub fn converts(event_type: &str, from_version: u32, to_version: u32) -> bool {
    event_type == "payment.succeeded" && matches!((from_version, to_version), (1, 2) | (2, 1))
}

/// Converts an event's `data` from one DTO version's shape to another's.
/// Only `payment.succeeded` has two versions (see the catalogue's module
/// doc); every other type, and an unknown pair of versions, is returned
/// unchanged. Fields a version does not know are carried over at the top
/// level untouched; the card expiry is lost going from 2 to 1.
pub fn convert(event_type: &str, from_version: u32, to_version: u32, data: &Value) -> Value {
    match (event_type, from_version, to_version, data) {
        ("payment.succeeded", 1, 2, Value::Object(v1)) => payment_v1_to_v2(v1),
        ("payment.succeeded", 2, 1, Value::Object(v2)) => payment_v2_to_v1(v2),
        _ => data.clone(),
    }
}

/// Moves the listed (from, to) keys of `src` into a new object.
fn take(src: &mut Map<String, Value>, keys: &[(&str, &str)]) -> Map<String, Value> {
    keys.iter()
        .filter_map(|(from, to)| src.remove(*from).map(|v| ((*to).to_owned(), v)))
        .collect()
}

const V1_PAYMENT: &[(&str, &str)] = &[
    ("payment_ref", "payment_ref"),
    ("amount", "amount"),
    ("status", "status"),
    ("captured_at", "captured_at"),
];
const V1_BUYER: &[(&str, &str)] = &[
    ("buyer_ref", "buyer_ref"),
    ("buyer_email", "email"),
    ("buyer_name", "name"),
];
const V1_CARD: &[(&str, &str)] = &[("card_brand", "brand"), ("card_last4", "last4")];

fn payment_v1_to_v2(v1: &Map<String, Value>) -> Value {
    let mut rest = v1.clone();
    let payment = take(&mut rest, V1_PAYMENT);
    let buyer = take(&mut rest, V1_BUYER);
    let card = take(&mut rest, V1_CARD);
    let mut out = Map::new();
    if !payment.is_empty() {
        out.insert("payment".into(), Value::Object(payment));
    }
    if !buyer.is_empty() {
        out.insert("buyer".into(), Value::Object(buyer));
    }
    if !card.is_empty() {
        let mut method = Map::new();
        method.insert("card".into(), Value::Object(card));
        out.insert("payment_method".into(), Value::Object(method));
    }
    out.extend(rest);
    Value::Object(out)
}

fn flip(keys: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
    keys.iter().map(|(a, b)| (*b, *a)).collect()
}

fn payment_v2_to_v1(v2: &Map<String, Value>) -> Value {
    let mut rest = v2.clone();
    let mut out = Map::new();
    let mut nested = |key: &str, keys: &[(&str, &str)], out: &mut Map<String, Value>| {
        if let Some(Value::Object(mut inner)) = rest.remove(key) {
            out.extend(take(&mut inner, keys));
        }
    };
    nested("payment", &flip(V1_PAYMENT), &mut out);
    nested("buyer", &flip(V1_BUYER), &mut out);
    if let Some(Value::Object(mut method)) = rest.remove("payment_method") {
        if let Some(Value::Object(mut card)) = method.remove("card") {
            out.extend(take(&mut card, &flip(V1_CARD)));
        }
    }
    out.extend(rest);
    Value::Object(out)
}

#[cfg(test)]
mod tests;
