//! Checkout config rules (contract 10.1, `docs/catalogue.md`): line items
//! and the mode they imply, custom field definitions, and the values a
//! checkout session gives those fields.
//!
//! It owns the checks that need nothing but the body and the prices the
//! caller already read; whether an offer exists, and the config's versions,
//! belong to the store. Errors name the offending field by a path relative
//! to what was checked, so the caller can prefix it (`custom_fields.0.key`).

use std::collections::{BTreeMap, HashSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use super::states::{Interval, Recurrence};
use crate::money::Currency;
use crate::principal::wire_enum;
use crate::reference::Ref;

pub const MAX_LINE_ITEMS: usize = 20;
pub const MAX_QUANTITY: u32 = 1000;
pub const MAX_CUSTOM_FIELDS: usize = 3;
pub const MAX_KEY_LEN: usize = 40;
pub const MAX_LABEL_CHARS: usize = 100;
pub const MAX_OPTIONS: usize = 20;
pub const MAX_OPTION_CHARS: usize = 100;
/// Longest value a session may give a text (or numeric) field.
pub const MAX_VALUE_CHARS: usize = 500;
/// Longest trial a subscription config offers, in days (contract 14.3).
pub const MAX_TRIAL_PERIOD_DAYS: u32 = 730;

/// Why a config's `trial_period_days` was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TrialError {
    /// Not an integer from 0 to 730: `validation_failed`.
    #[error("must be an integer from 0 to 730")]
    OutOfRange,
    /// A trial on a config without recurring items: `semantic_error`.
    #[error("a trial needs a subscription config; this one is in payment mode")]
    NotSubscription,
}

/// Checks a config's `trial_period_days` against the mode its line items
/// make: 0 to 730 days, and more than 0 only in subscription mode.
pub fn check_trial_period_days(days: i64, mode: ConfigMode) -> Result<u32, TrialError> {
    let days = u32::try_from(days)
        .ok()
        .filter(|d| *d <= MAX_TRIAL_PERIOD_DAYS)
        .ok_or(TrialError::OutOfRange)?;
    if days > 0 && mode != ConfigMode::Subscription {
        return Err(TrialError::NotSubscription);
    }
    Ok(days)
}

wire_enum!(
    /// Derived from the line items, never chosen: a body's `mode` may only
    /// agree with it.
    ConfigMode { Payment => "payment", Subscription => "subscription" }
);

wire_enum!(FieldType { Text => "text", Numeric => "numeric", Dropdown => "dropdown" });

/// A rule broken by a custom field definition or value. `field` is a dotted
/// path relative to what was checked (`""` is the whole list).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub issue: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, issue: impl Into<String>) -> FieldError {
        FieldError {
            field: field.into(),
            issue: issue.into(),
        }
    }

    /// The same error under `prefix`: `"0.key"` under `"custom_fields"` is
    /// `"custom_fields.0.key"`; the whole-list path `""` becomes `prefix`.
    pub fn under(self, prefix: &str) -> FieldError {
        let field = match (prefix.is_empty(), self.field.is_empty()) {
            (true, _) => self.field,
            (false, true) => prefix.to_owned(),
            (false, false) => format!("{prefix}.{}", self.field),
        };
        FieldError { field, ..self }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            f.write_str(&self.issue)
        } else {
            write!(f, "{} {}", self.field, self.issue)
        }
    }
}

impl std::error::Error for FieldError {}

/// A custom field definition in its wire shape
/// `{custom_field_ref, key, label, type, required, options}`. Build it with
/// [`CustomField::new`]; a deserialised one (a stored version or a body) is
/// checked by [`check_custom_fields`], which applies the same rules.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CustomField {
    /// The field's `cf_` reference (contract 9, "Data profile grants"): the
    /// same for its `key` in every version of its config, so that a grant
    /// naming it keeps covering the field. The store assigns it when it
    /// writes a version ([`CustomField::with_ref`]); `None` only in a
    /// definition not yet written (built from a body, which never carries
    /// one). First, so that a stored version shows whether its fields have
    /// their references from its first bytes on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_field_ref: Option<String>,
    pub key: String,
    pub label: String,
    /// The wire name of a [`FieldType`].
    #[serde(rename = "type")]
    pub field_type: String,
    /// Optional on the wire, `false` when absent.
    #[serde(default)]
    pub required: bool,
    /// Always present on the wire: `null` unless the type is dropdown.
    #[serde(default)]
    pub options: Option<Vec<String>>,
}

fn chars_within(s: &str, min: usize, max: usize) -> bool {
    // Counting stops after max + 1 so a huge string costs no more than that.
    let n = s.chars().take(max + 1).count();
    (min..=max).contains(&n)
}

fn valid_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= MAX_KEY_LEN
        && key
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

impl CustomField {
    pub fn new(
        key: &str,
        label: &str,
        field_type: &str,
        required: bool,
        options: Option<Vec<String>>,
    ) -> Result<CustomField, FieldError> {
        let field = CustomField {
            custom_field_ref: None,
            key: key.to_owned(),
            label: label.to_owned(),
            field_type: field_type.to_owned(),
            required,
            options,
        };
        field.check()?;
        Ok(field)
    }

    /// The same definition with the reference its config gives its key.
    pub fn with_ref(self, custom_field_ref: &Ref) -> CustomField {
        CustomField {
            custom_field_ref: Some(custom_field_ref.to_string()),
            ..self
        }
    }

    /// The field's type; `None` only for a definition that bypassed the
    /// checks (e.g. deserialised and not yet checked).
    pub fn kind(&self) -> Option<FieldType> {
        FieldType::parse(&self.field_type)
    }

    /// The rules of one definition; paths are relative to the field.
    pub fn check(&self) -> Result<(), FieldError> {
        if !valid_key(&self.key) {
            return Err(FieldError::new(
                "key",
                "must be 1 to 40 characters of a-z, 0-9 and _",
            ));
        }
        if !chars_within(&self.label, 1, MAX_LABEL_CHARS) {
            return Err(FieldError::new("label", "must be 1 to 100 characters"));
        }
        let kind = self
            .kind()
            .ok_or_else(|| FieldError::new("type", "must be text, numeric or dropdown"))?;
        match (kind, &self.options) {
            (FieldType::Dropdown, None) => Err(FieldError::new(
                "options",
                "is required for a dropdown field",
            )),
            (FieldType::Dropdown, Some(options)) => check_options(options),
            (_, Some(_)) => Err(FieldError::new(
                "options",
                "must be absent or null unless type is dropdown",
            )),
            (_, None) => Ok(()),
        }
    }
}

fn check_options(options: &[String]) -> Result<(), FieldError> {
    if options.is_empty() || options.len() > MAX_OPTIONS {
        return Err(FieldError::new("options", "must hold 1 to 20 options"));
    }
    let mut seen = HashSet::new();
    for (i, o) in options.iter().enumerate() {
        if !chars_within(o, 1, MAX_OPTION_CHARS) {
            return Err(FieldError::new(
                format!("options.{i}"),
                "must be 1 to 100 characters",
            ));
        }
        if !seen.insert(o.as_str()) {
            return Err(FieldError::new(format!("options.{i}"), "must be distinct"));
        }
    }
    Ok(())
}

/// The rules of a config's whole list: at most three definitions, each
/// valid (paths `"<index>.<field>"`), keys unique (`"<index>.key"` of the
/// repeat). `""` names the list itself.
pub fn check_custom_fields(fields: &[CustomField]) -> Result<(), FieldError> {
    if fields.len() > MAX_CUSTOM_FIELDS {
        return Err(FieldError::new("", "must hold at most 3 custom fields"));
    }
    let mut keys = HashSet::new();
    for (i, f) in fields.iter().enumerate() {
        f.check().map_err(|e| e.under(&i.to_string()))?;
        if !keys.insert(f.key.as_str()) {
            return Err(FieldError::new(format!("{i}.key"), "must be unique"));
        }
    }
    Ok(())
}

/// `-?digits(.digits)?`: what a person types into a number box, without
/// exponents, so the stored text reads back as written.
fn is_decimal(s: &str) -> bool {
    let unsigned = s.strip_prefix('-').unwrap_or(s);
    let (int, frac) = match unsigned.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (unsigned, None),
    };
    let digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    digits(int) && frac.is_none_or(digits)
}

/// Checks a checkout session's `custom_fields` values against the config's
/// definitions and answers them normalised (every value as text, absent and
/// `null` values left out). Paths are the field's key.
pub fn check_values(
    defs: &[CustomField],
    values: &serde_json::Map<String, serde_json::Value>,
) -> Result<BTreeMap<String, String>, FieldError> {
    for key in values.keys() {
        if !defs.iter().any(|d| &d.key == key) {
            return Err(FieldError::new(key.as_str(), "unknown custom field"));
        }
    }
    let mut out = BTreeMap::new();
    for def in defs {
        let value = match values.get(&def.key) {
            None | Some(serde_json::Value::Null) if def.required => {
                return Err(FieldError::new(def.key.as_str(), "is required"));
            }
            None | Some(serde_json::Value::Null) => continue,
            Some(v) => v,
        };
        let err = |issue: &str| FieldError::new(def.key.as_str(), issue);
        let text = match (def.kind(), value) {
            (Some(FieldType::Text), serde_json::Value::String(s)) => {
                if !chars_within(s, 1, MAX_VALUE_CHARS) {
                    return Err(err("must be 1 to 500 characters"));
                }
                s.clone()
            }
            (Some(FieldType::Numeric), serde_json::Value::String(s)) => s.clone(),
            (Some(FieldType::Numeric), serde_json::Value::Number(n)) => n.to_string(),
            (Some(FieldType::Dropdown), serde_json::Value::String(s)) => {
                let listed = def.options.as_deref().unwrap_or_default();
                if !listed.contains(s) {
                    return Err(err("must be one of the field's options"));
                }
                s.clone()
            }
            (Some(FieldType::Numeric), _) => return Err(err("must be a number")),
            (Some(_), _) => return Err(err("must be a string")),
            // A definition that was never checked: refuse rather than guess.
            (None, _) => return Err(err("has no valid definition")),
        };
        if def.kind() == Some(FieldType::Numeric)
            && !(text.len() <= MAX_VALUE_CHARS && is_decimal(&text))
        {
            return Err(err("must be a number"));
        }
        out.insert(def.key.clone(), text);
    }
    Ok(out)
}

/// What [`derive_mode`] needs of a line item: its quantity and its price's
/// currency and recurrence, as the caller read them.
#[derive(Debug, Clone, Copy)]
pub struct ItemPrice {
    pub quantity: u32,
    pub currency: Currency,
    pub recurrence: Recurrence,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LineItemError {
    #[error("must hold 1 to 20 line items")]
    Count,
    /// The index of the offending item.
    #[error("quantity must be an integer from 1 to 1000")]
    Quantity(usize),
    #[error("all line items must be in one currency")]
    MixedCurrencies,
    #[error("line items may have at most one recurring interval")]
    MixedIntervals,
}

impl LineItemError {
    /// Mixed currencies or intervals are well-formed bodies the catalogue
    /// cannot sell (`422 semantic_error`); the rest are malformed (`400`).
    pub fn is_semantic(&self) -> bool {
        matches!(
            self,
            LineItemError::MixedCurrencies | LineItemError::MixedIntervals
        )
    }

    /// The body field the error is about.
    pub fn field(&self) -> String {
        match self {
            LineItemError::Quantity(i) => format!("line_items.{i}.quantity"),
            _ => "line_items".to_owned(),
        }
    }
}

/// The mode a config's line items imply: `Subscription` when any item is
/// recurring, else `Payment`. Shape errors (count, quantity) come before
/// the semantic ones so a malformed body is always `400`.
pub fn derive_mode(items: &[ItemPrice]) -> Result<ConfigMode, LineItemError> {
    if items.is_empty() || items.len() > MAX_LINE_ITEMS {
        return Err(LineItemError::Count);
    }
    if let Some(i) = items
        .iter()
        .position(|it| !(1..=MAX_QUANTITY).contains(&it.quantity))
    {
        return Err(LineItemError::Quantity(i));
    }
    let currency = items[0].currency;
    if items.iter().any(|it| it.currency != currency) {
        return Err(LineItemError::MixedCurrencies);
    }
    let mut interval: Option<Interval> = None;
    for it in items {
        if let Some(i) = it.recurrence.interval() {
            match interval {
                Some(seen) if seen != i => return Err(LineItemError::MixedIntervals),
                _ => interval = Some(i),
            }
        }
    }
    Ok(match interval {
        Some(_) => ConfigMode::Subscription,
        None => ConfigMode::Payment,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn opts(o: &[&str]) -> Option<Vec<String>> {
        Some(o.iter().map(|s| s.to_string()).collect())
    }

    fn issue_at(r: Result<CustomField, FieldError>) -> String {
        r.unwrap_err().field
    }

    #[test]
    fn field_keys() {
        for ok in ["a", "po_number", "x9", &"k".repeat(40)] {
            assert!(
                CustomField::new(ok, "L", "text", false, None).is_ok(),
                "{ok}"
            );
        }
        for bad in ["", "A", "po-number", "é", " a", &"k".repeat(41)] {
            assert_eq!(
                issue_at(CustomField::new(bad, "L", "text", false, None)),
                "key"
            );
        }
    }

    #[test]
    fn field_labels_count_characters() {
        assert!(CustomField::new("k", &"é".repeat(100), "text", false, None).is_ok());
        assert_eq!(
            issue_at(CustomField::new("k", &"é".repeat(101), "text", false, None)),
            "label"
        );
        assert_eq!(
            issue_at(CustomField::new("k", "", "text", false, None)),
            "label"
        );
    }

    #[test]
    fn field_types_and_options() {
        assert_eq!(
            issue_at(CustomField::new("k", "L", "date", false, None)),
            "type"
        );
        assert_eq!(
            issue_at(CustomField::new("k", "L", "Text", false, None)),
            "type"
        );
        assert!(CustomField::new("k", "L", "numeric", true, None).is_ok());
        assert!(CustomField::new("k", "L", "dropdown", true, opts(&["a", "b"])).is_ok());
        assert_eq!(
            issue_at(CustomField::new("k", "L", "dropdown", false, None)),
            "options"
        );
        assert_eq!(
            issue_at(CustomField::new("k", "L", "dropdown", false, opts(&[]))),
            "options"
        );
        let twenty_one: Vec<String> = (0..21).map(|i| i.to_string()).collect();
        assert_eq!(
            issue_at(CustomField::new(
                "k",
                "L",
                "dropdown",
                false,
                Some(twenty_one)
            )),
            "options"
        );
        let twenty: Vec<String> = (0..20).map(|i| i.to_string()).collect();
        assert!(CustomField::new("k", "L", "dropdown", false, Some(twenty)).is_ok());
        assert_eq!(
            issue_at(CustomField::new(
                "k",
                "L",
                "dropdown",
                false,
                opts(&["a", "b", "a"])
            )),
            "options.2"
        );
        assert_eq!(
            issue_at(CustomField::new(
                "k",
                "L",
                "dropdown",
                false,
                opts(&["a", ""])
            )),
            "options.1"
        );
        let long = "o".repeat(101);
        assert_eq!(
            issue_at(CustomField::new(
                "k",
                "L",
                "dropdown",
                false,
                opts(&[&long])
            )),
            "options.0"
        );
        assert_eq!(
            issue_at(CustomField::new("k", "L", "text", false, opts(&["a"]))),
            "options"
        );
        assert_eq!(
            issue_at(CustomField::new("k", "L", "numeric", false, opts(&[]))),
            "options"
        );
    }

    #[test]
    fn wire_shape_round_trips() {
        let f = CustomField::new("size", "Size", "dropdown", true, opts(&["S", "M"])).unwrap();
        let v = serde_json::to_value(&f).unwrap();
        assert_eq!(
            v,
            json!({"key": "size", "label": "Size", "type": "dropdown", "required": true, "options": ["S", "M"]})
        );
        assert_eq!(serde_json::from_value::<CustomField>(v).unwrap(), f);
        let t = CustomField::new("po", "PO", "text", false, None).unwrap();
        let v = serde_json::to_value(&t).unwrap();
        assert_eq!(v["options"], serde_json::Value::Null);
        assert_eq!(serde_json::from_value::<CustomField>(v).unwrap(), t);
        // `required` and `options` may be left out of a body.
        let short: CustomField =
            serde_json::from_value(json!({"key": "po", "label": "PO", "type": "text"})).unwrap();
        assert_eq!(short, t);
        assert_eq!(t.kind(), Some(FieldType::Text));
        // A written definition carries its reference, first.
        let cf = Ref::parse(crate::Prefix::CustomField, "cf_K1lZ4xC7vB3n").unwrap();
        let written = t.clone().with_ref(&cf);
        let text = serde_json::to_string(&written).unwrap();
        assert!(
            text.starts_with(r#"{"custom_field_ref":"cf_K1lZ4xC7vB3n","key":"po""#),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<CustomField>(&text).unwrap(), written);
        assert_eq!(written.custom_field_ref.as_deref(), Some(cf.as_str()));
        assert!(written.check().is_ok());
    }

    #[test]
    fn lists() {
        let f = |k: &str| CustomField::new(k, "L", "text", false, None).unwrap();
        assert!(check_custom_fields(&[]).is_ok());
        assert!(check_custom_fields(&[f("a"), f("b"), f("c")]).is_ok());
        assert_eq!(
            check_custom_fields(&[f("a"), f("b"), f("c"), f("d")]),
            Err(FieldError::new("", "must hold at most 3 custom fields"))
        );
        assert_eq!(
            check_custom_fields(&[f("a"), f("b"), f("a")]),
            Err(FieldError::new("2.key", "must be unique"))
        );
        // A deserialised definition is held to the same rules.
        let mut bad = f("c");
        bad.field_type = "date".into();
        assert_eq!(
            check_custom_fields(&[f("a"), bad]).unwrap_err().field,
            "1.type"
        );
    }

    #[test]
    fn error_paths_and_display() {
        let e = FieldError::new("0.key", "must be unique");
        assert_eq!(e.to_string(), "0.key must be unique");
        assert_eq!(
            e.clone().under("custom_fields").field,
            "custom_fields.0.key"
        );
        assert_eq!(
            FieldError::new("", "x").under("custom_fields").field,
            "custom_fields"
        );
        assert_eq!(e.clone().under("").field, "0.key");
        assert_eq!(FieldError::new("", "too many").to_string(), "too many");
    }

    fn defs() -> Vec<CustomField> {
        vec![
            CustomField::new("po", "PO number", "text", true, None).unwrap(),
            CustomField::new("seats", "Seats", "numeric", false, None).unwrap(),
            CustomField::new("size", "Size", "dropdown", false, opts(&["S", "M"])).unwrap(),
        ]
    }

    fn values(v: serde_json::Value) -> Result<BTreeMap<String, String>, FieldError> {
        check_values(&defs(), v.as_object().unwrap())
    }

    #[test]
    fn session_values() {
        let ok = values(json!({"po": "A-1", "seats": 12, "size": "M"})).unwrap();
        assert_eq!(ok["po"], "A-1");
        assert_eq!(ok["seats"], "12");
        assert_eq!(ok["size"], "M");
        let ok = values(json!({"po": "A-1", "seats": "-3.5", "size": null})).unwrap();
        assert_eq!(ok.get("seats").map(String::as_str), Some("-3.5"));
        assert!(!ok.contains_key("size"));
        assert_eq!(
            values(json!({"po": "x", "seats": 2.5})).unwrap()["seats"],
            "2.5"
        );

        let field = |v| values(v).unwrap_err();
        assert_eq!(
            field(json!({"po": "x", "colour": "red"})),
            FieldError::new("colour", "unknown custom field")
        );
        assert_eq!(field(json!({})), FieldError::new("po", "is required"));
        assert_eq!(
            field(json!({"po": null})),
            FieldError::new("po", "is required")
        );
        assert_eq!(field(json!({"po": ""})).field, "po");
        assert_eq!(field(json!({"po": "x".repeat(501)})).field, "po");
        assert!(values(json!({"po": "é".repeat(500)})).is_ok());
        assert_eq!(field(json!({"po": 5})).issue, "must be a string");
        for bad in [
            json!("twelve"),
            json!("1e3"),
            json!(""),
            json!("1."),
            json!(".5"),
            json!("+1"),
            json!(true),
            json!(1e300),
        ] {
            assert_eq!(
                field(json!({"po": "x", "seats": bad})),
                FieldError::new("seats", "must be a number")
            );
        }
        assert_eq!(field(json!({"po": "x", "size": "L"})).field, "size");
        assert_eq!(
            field(json!({"po": "x", "size": ["S"]})).issue,
            "must be a string"
        );
    }

    fn item(quantity: u32, currency: &str, recurrence: Recurrence) -> ItemPrice {
        ItemPrice {
            quantity,
            currency: Currency::parse(currency).unwrap(),
            recurrence,
        }
    }

    #[test]
    fn line_item_rules() {
        use LineItemError::*;
        use Recurrence::*;
        let month = Recurring(Interval::Month);
        let year = Recurring(Interval::Year);
        assert_eq!(derive_mode(&[]), Err(Count));
        assert_eq!(derive_mode(&[item(1, "EUR", OneTime); 21]), Err(Count));
        assert_eq!(
            derive_mode(&[item(1, "EUR", OneTime); 20]),
            Ok(ConfigMode::Payment)
        );
        assert_eq!(
            derive_mode(&[item(1, "EUR", OneTime), item(0, "EUR", OneTime)]),
            Err(Quantity(1))
        );
        assert_eq!(derive_mode(&[item(1001, "EUR", OneTime)]), Err(Quantity(0)));
        assert_eq!(
            derive_mode(&[item(1000, "EUR", OneTime)]),
            Ok(ConfigMode::Payment)
        );
        assert_eq!(
            derive_mode(&[item(1, "EUR", OneTime), item(1, "USD", OneTime)]),
            Err(MixedCurrencies)
        );
        assert_eq!(
            derive_mode(&[item(1, "EUR", month), item(1, "EUR", year)]),
            Err(MixedIntervals)
        );
        assert_eq!(
            derive_mode(&[
                item(1, "EUR", OneTime),
                item(2, "EUR", month),
                item(1, "EUR", month)
            ]),
            Ok(ConfigMode::Subscription)
        );
        // Shape errors win over semantic ones.
        assert_eq!(
            derive_mode(&[item(1, "EUR", month), item(0, "USD", year)]),
            Err(Quantity(1))
        );
        assert!(MixedCurrencies.is_semantic() && MixedIntervals.is_semantic());
        assert!(!Count.is_semantic() && !Quantity(0).is_semantic());
        assert_eq!(Quantity(3).field(), "line_items.3.quantity");
        assert_eq!(MixedIntervals.field(), "line_items");
        assert_eq!(
            Quantity(3).to_string(),
            "quantity must be an integer from 1 to 1000"
        );
    }

    fn recurrence() -> impl Strategy<Value = Recurrence> {
        prop_oneof![
            Just(Recurrence::OneTime),
            Just(Recurrence::Recurring(Interval::Month)),
            Just(Recurrence::Recurring(Interval::Year)),
        ]
    }

    fn items() -> impl Strategy<Value = Vec<ItemPrice>> {
        proptest::collection::vec(
            (
                0u32..1100,
                prop::sample::select(vec!["EUR", "USD"]),
                recurrence(),
            )
                .prop_map(|(q, c, r)| item(q, c, r)),
            0..24,
        )
    }

    proptest! {
        #[test]
        fn mode_follows_recurrence(items in items()) {
            let currencies: HashSet<&str> = items.iter().map(|i| i.currency.as_str()).collect();
            let intervals: HashSet<Interval> = items.iter().filter_map(|i| i.recurrence.interval()).collect();
            match derive_mode(&items) {
                Ok(mode) => {
                    prop_assert_eq!(
                        mode == ConfigMode::Subscription,
                        items.iter().any(|i| i.recurrence.is_recurring())
                    );
                    prop_assert_eq!(currencies.len(), 1);
                    prop_assert!(intervals.len() <= 1);
                    prop_assert!((1..=MAX_LINE_ITEMS).contains(&items.len()));
                    prop_assert!(items.iter().all(|i| (1..=MAX_QUANTITY).contains(&i.quantity)));
                }
                Err(LineItemError::MixedCurrencies) => prop_assert!(currencies.len() > 1),
                Err(LineItemError::MixedIntervals) => prop_assert!(intervals.len() > 1),
                Err(LineItemError::Count) => prop_assert!(items.is_empty() || items.len() > MAX_LINE_ITEMS),
                Err(LineItemError::Quantity(i)) => prop_assert!(!(1..=MAX_QUANTITY).contains(&items[i].quantity)),
            }
        }

        #[test]
        fn keys_follow_the_pattern(key in "[a-zA-Z0-9_\\-é ]{0,45}") {
            let ok = CustomField::new(&key, "L", "text", false, None).is_ok();
            let expected = (1..=40).contains(&key.len())
                && key.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            prop_assert_eq!(ok, expected);
        }

        #[test]
        fn decimal_strings_are_numbers(int in 0u64..1_000_000, frac in proptest::option::of(0u32..1000), neg in any::<bool>()) {
            let mut s = format!("{}{int}", if neg { "-" } else { "" });
            if let Some(f) = frac { s.push_str(&format!(".{f}")); }
            let got = values(json!({"po": "x", "seats": s.clone()})).unwrap();
            prop_assert_eq!(&got["seats"], &s);
        }

        #[test]
        fn dropdown_values_must_be_listed(v in "[A-Z]{1,2}") {
            let r = values(json!({"po": "x", "size": v.clone()}));
            prop_assert_eq!(r.is_ok(), v == "S" || v == "M");
        }
    }

    #[test]
    fn trial_period_days_bounds() {
        use ConfigMode::*;
        assert_eq!(check_trial_period_days(0, Payment), Ok(0));
        assert_eq!(check_trial_period_days(0, Subscription), Ok(0));
        assert_eq!(check_trial_period_days(730, Subscription), Ok(730));
        assert_eq!(
            check_trial_period_days(731, Subscription),
            Err(TrialError::OutOfRange)
        );
        assert_eq!(
            check_trial_period_days(-1, Subscription),
            Err(TrialError::OutOfRange)
        );
        assert_eq!(
            check_trial_period_days(14, Payment),
            Err(TrialError::NotSubscription)
        );
    }
}
