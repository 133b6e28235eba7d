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
use serde_json::{json, Map, Value};

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
    /// The `cf_` references the grant names, as it names them.
    pub custom_field_refs: Vec<String>,
    /// The custom fields those references name, resolved by the caller
    /// (the store keeps which config and key each reference is): shaping
    /// decides by these, since a resource's `custom_fields` are keyed by
    /// the config's field keys. A reference of no field of the grant's
    /// environment resolves to nothing.
    pub custom_fields: Vec<GrantedField>,
}

/// A custom field a grant covers: the checkout config that defines it and
/// the field's `key` there (the same in every version of the config).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GrantedField {
    pub config_ref: String,
    pub key: String,
}

fn covers_class(grant: Option<&GrantView>, class: DataClass) -> bool {
    grant.is_some_and(|g| g.data_classes.contains(&class))
}

/// Whether `grant` covers the custom field `key` of the resource's config
/// (`None`: the resource names no config, so no field of it is covered).
fn covers_field(grant: Option<&GrantView>, config_ref: Option<&str>, key: &str) -> bool {
    match (grant, config_ref) {
        (Some(g), Some(config_ref)) => g
            .custom_fields
            .iter()
            .any(|f| f.config_ref == config_ref && f.key == key),
        _ => false,
    }
}

const CUSTOM_FIELDS: &str = "custom_fields";
const CONFIG_REF: &str = "config_ref";

/// The config whose fields a resource's `custom_fields` holds: its
/// `config_ref` (a checkout session's).
fn config_of(data: &Value) -> Option<&str> {
    data.get(CONFIG_REF).and_then(Value::as_str)
}

/// The `data` to deliver: `data` (an event's data in the shape of
/// `dto_version`) with every classified field whose class `grant` does not
/// cover removed, and every `custom_fields` entry whose field (the data's
/// `config_ref`, the entry's key) the grant does not cover removed. The
/// `custom_fields` object itself is always kept, `{}` when the grant covers
/// none of its entries (contract 9); a `custom_fields` that is not an
/// object is removed. `None` grant covers nothing.
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
        let config_ref = obj
            .get(CONFIG_REF)
            .and_then(Value::as_str)
            .map(str::to_owned);
        match obj.get_mut(CUSTOM_FIELDS) {
            Some(Value::Object(fields)) => {
                fields.retain(|k, _| covers_field(grant, config_ref.as_deref(), k));
            }
            Some(_) => {
                obj.remove(CUSTOM_FIELDS);
            }
            None => {}
        }
    }
    out
}

/// True when `payload_data` holds a classified field (with a non-null value)
/// or a custom field entry that `grant` does not cover (used to redact
/// stored bodies when a grant is revoked). An empty `custom_fields` object
/// holds nothing.
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
        Some(Value::Object(fields)) => fields
            .keys()
            .any(|k| !covers_field(grant, config_of(payload_data), k)),
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
/// doc): version 2 is the payment resource, version 1 its older flat shape.
/// Every other type, an unknown pair of versions and data that is not an
/// object are returned unchanged.
///
/// The result has exactly the fields of the target shape: a field the
/// source lacks is `null` (version 1 has no card expiry, no session, no
/// `created_at`, ...), and a field the target shape does not have is
/// dropped, so that nothing personal ends up where the target version's
/// data classes would not find it. Data published by other systems may come
/// in either shape whatever its version says, so each field is also read
/// from where the target shape (or the nested version 2 used before the
/// payment resource: `payment.payment_ref`, `payment_method.card.brand`)
/// keeps it: converting data already in the target shape leaves it as it
/// is.
pub fn convert(event_type: &str, from_version: u32, to_version: u32, data: &Value) -> Value {
    match (event_type, from_version, to_version, data) {
        ("payment.succeeded", 1, 2, Value::Object(_)) => payment_v1_to_v2(data),
        ("payment.succeeded", 2, 1, Value::Object(_)) => payment_v2_to_v1(data),
        _ => data.clone(),
    }
}

/// The first non-null value among `paths` (dotted, within `data`), or null.
fn pick(data: &Value, paths: &[&str]) -> Value {
    paths
        .iter()
        .filter_map(|p| p.split('.').try_fold(data, |v, k| v.get(k)))
        .find(|v| !v.is_null())
        .cloned()
        .unwrap_or(Value::Null)
}

/// Each field of version 1, in order, and where to read it: in version 2
/// first, then in version 1 itself, then in the earlier nested version 2.
const TO_V1: &[(&str, &[&str])] = &[
    (
        "payment_ref",
        &["payment_intent_ref", "payment_ref", "payment.payment_ref"],
    ),
    ("amount", &["amount", "payment.amount"]),
    ("status", &["status", "payment.status"]),
    ("captured_at", &["captured_at", "payment.captured_at"]),
    ("buyer_ref", &["buyer_ref", "buyer.buyer_ref"]),
    ("buyer_email", &["buyer.email", "buyer_email"]),
    ("buyer_name", &["buyer.name", "buyer_name"]),
    (
        "card_brand",
        &[
            "payment_method.brand",
            "card_brand",
            "payment_method.card.brand",
        ],
    ),
    (
        "card_last4",
        &[
            "payment_method.last4",
            "card_last4",
            "payment_method.card.last4",
        ],
    ),
    ("product_refs", &["product_refs"]),
];

fn payment_v2_to_v1(v2: &Value) -> Value {
    Value::Object(
        TO_V1
            .iter()
            .map(|(field, paths)| ((*field).to_owned(), pick(v2, paths)))
            .collect(),
    )
}

/// The plain fields of version 2 (all but `buyer`, `payment_method` and
/// `amount_refunded`, built apart) and where to read each: in version 1
/// first, then in version 2 itself, then in the earlier nested version 2.
/// The fields version 1 lacks are read from version 2 only.
const TO_V2: &[(&str, &[&str])] = &[
    (
        "payment_ref",
        &["payment_ref", "payment_intent_ref", "payment.payment_ref"],
    ),
    (
        "payment_intent_ref",
        &["payment_ref", "payment_intent_ref", "payment.payment_ref"],
    ),
    ("checkout_session_ref", &["checkout_session_ref"]),
    ("buyer_ref", &["buyer_ref", "buyer.buyer_ref"]),
    ("amount", &["amount", "payment.amount"]),
    ("status", &["status", "payment.status"]),
    ("failure_code", &["failure_code"]),
    ("stored_payment_method_ref", &["stored_payment_method_ref"]),
    ("product_refs", &["product_refs"]),
    ("next_action", &["next_action"]),
    ("captured_at", &["captured_at", "payment.captured_at"]),
    ("created_at", &["created_at"]),
    ("etag", &["etag"]),
];

/// Where each field of version 2's `payment_method` is read (its `type` is
/// always `card`).
const TO_V2_CARD: &[(&str, &[&str])] = &[
    (
        "brand",
        &[
            "card_brand",
            "payment_method.brand",
            "payment_method.card.brand",
        ],
    ),
    (
        "last4",
        &[
            "card_last4",
            "payment_method.last4",
            "payment_method.card.last4",
        ],
    ),
    (
        "exp_month",
        &["payment_method.exp_month", "payment_method.card.exp_month"],
    ),
    (
        "exp_year",
        &["payment_method.exp_year", "payment_method.card.exp_year"],
    ),
];

fn payment_v1_to_v2(v1: &Value) -> Value {
    let mut out: Map<String, Value> = TO_V2
        .iter()
        .map(|(field, paths)| ((*field).to_owned(), pick(v1, paths)))
        .collect();
    let buyer = json!({
        "email": pick(v1, &["buyer_email", "buyer.email"]),
        "name": pick(v1, &["buyer_name", "buyer.name"]),
    });
    out.insert("buyer".into(), buyer);
    let mut method = Map::new();
    method.insert("type".into(), json!("card"));
    method.extend(
        TO_V2_CARD
            .iter()
            .map(|(field, paths)| ((*field).to_owned(), pick(v1, paths))),
    );
    out.insert("payment_method".into(), Value::Object(method));
    // Version 1 tells of no refund: zero, in the amount's currency.
    let refunded = match (
        pick(v1, &["amount_refunded"]),
        out["amount"].get("currency"),
    ) {
        (Value::Null, Some(Value::String(c))) => {
            json!({"currency": c, "unit": "minor", "value": "0"})
        }
        (given, _) => given,
    };
    out.insert("amount_refunded".into(), refunded);
    Value::Object(out)
}

#[cfg(test)]
mod tests;
