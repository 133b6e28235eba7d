//! Filters on subscriptions (contract 13.3): a small language over the
//! delivered body, parsed once (`Filter::parse`, which names every defect
//! by its path) and evaluated per event (`Filter::holds`).
//!
//! Total and bounded: parsing refuses a filter over `MAX_BYTES` or deeper
//! than `MAX_DEPTH`, so evaluation visits a bounded tree; evaluation never
//! fails and never panics, whatever the body. Pure: no I/O, no clock.

use serde_json::{Map, Value};
use std::cmp::Ordering;

/// The most bytes a filter has, as JSON.
pub const MAX_BYTES: usize = 4096;
/// The deepest nesting of filters (`$and`, `$or`, `$not`), the top one 1.
pub const MAX_DEPTH: usize = 8;

/// A parsed filter: every key of an object must hold.
#[derive(Debug, Clone, PartialEq)]
pub struct Filter(Vec<Clause>);

#[derive(Debug, Clone, PartialEq)]
enum Clause {
    And(Vec<Filter>),
    Or(Vec<Filter>),
    Not(Box<Filter>),
    /// A dotted path and the conditions its value must meet.
    Path(Vec<String>, Vec<Condition>),
}

#[derive(Debug, Clone, PartialEq)]
enum Condition {
    Eq(Value),
    Neq(Value),
    Cmp(Ordering, bool, Value),
    In(Vec<Value>),
    Nin(Vec<Value>),
    Exists(bool),
    StartsWith(String),
}

/// A defect of a filter: where (`filter.<path>`) and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterError {
    pub field: String,
    pub issue: String,
}

impl FilterError {
    fn at(field: &str, issue: impl Into<String>) -> FilterError {
        FilterError {
            field: field.to_owned(),
            issue: issue.into(),
        }
    }
}

impl Filter {
    /// The filter `value` describes, or every defect found in it.
    pub fn parse(value: &Value) -> Result<Filter, Vec<FilterError>> {
        let size = serde_json::to_string(value).map_or(usize::MAX, |s| s.len());
        if size > MAX_BYTES {
            return Err(vec![FilterError::at(
                "filter",
                format!("must be at most {MAX_BYTES} bytes as JSON"),
            )]);
        }
        let mut errors = Vec::new();
        let filter = parse_filter(value, "filter", 1, &mut errors);
        match filter {
            Some(f) if errors.is_empty() => Ok(f),
            _ => Err(errors),
        }
    }

    /// Whether `body` (the delivered body) meets the filter.
    pub fn holds(&self, body: &Value) -> bool {
        self.0.iter().all(|c| c.holds(body))
    }
}

fn parse_filter(
    value: &Value,
    at: &str,
    depth: usize,
    errors: &mut Vec<FilterError>,
) -> Option<Filter> {
    if depth > MAX_DEPTH {
        errors.push(FilterError::at(
            at,
            format!("filters nest at most {MAX_DEPTH} deep"),
        ));
        return None;
    }
    let Value::Object(map) = value else {
        errors.push(FilterError::at(at, "must be an object"));
        return None;
    };
    let mut clauses = Vec::with_capacity(map.len());
    for (key, v) in map {
        let here = format!("{at}.{key}");
        let clause = match key.as_str() {
            "$and" | "$or" => parse_list(v, &here, depth, errors).map(|fs| {
                if key == "$and" {
                    Clause::And(fs)
                } else {
                    Clause::Or(fs)
                }
            }),
            "$not" => parse_filter(v, &here, depth + 1, errors).map(|f| Clause::Not(Box::new(f))),
            k if k.starts_with('$') => {
                errors.push(FilterError::at(&here, format!("unknown operator {k}")));
                None
            }
            path => parse_path(path, v, &here, errors),
        };
        clauses.extend(clause);
    }
    Some(Filter(clauses))
}

fn parse_list(
    v: &Value,
    at: &str,
    depth: usize,
    errors: &mut Vec<FilterError>,
) -> Option<Vec<Filter>> {
    match v {
        Value::Array(items) if !items.is_empty() => {
            let parsed: Vec<Option<Filter>> = items
                .iter()
                .enumerate()
                .map(|(i, f)| parse_filter(f, &format!("{at}.{i}"), depth + 1, errors))
                .collect();
            parsed.into_iter().collect()
        }
        _ => {
            errors.push(FilterError::at(at, "must be a non-empty array of filters"));
            None
        }
    }
}

fn parse_path(path: &str, v: &Value, at: &str, errors: &mut Vec<FilterError>) -> Option<Clause> {
    let segments: Vec<String> = path.split('.').map(str::to_owned).collect();
    if segments.iter().any(String::is_empty) {
        errors.push(FilterError::at(at, "a path is dotted names, none empty"));
        return None;
    }
    let conditions = match v {
        Value::Object(ops) => parse_operators(ops, at, errors)?,
        literal => vec![Condition::Eq(literal.clone())],
    };
    Some(Clause::Path(segments, conditions))
}

fn parse_operators(
    ops: &Map<String, Value>,
    at: &str,
    errors: &mut Vec<FilterError>,
) -> Option<Vec<Condition>> {
    let mut conditions = Vec::with_capacity(ops.len());
    let before = errors.len();
    for (op, operand) in ops {
        let here = format!("{at}.{op}");
        let condition = match (op.as_str(), operand) {
            ("$eq", v) => Some(Condition::Eq(v.clone())),
            ("$neq", v) => Some(Condition::Neq(v.clone())),
            ("$gt", v) => Some(Condition::Cmp(Ordering::Greater, false, v.clone())),
            ("$gte", v) => Some(Condition::Cmp(Ordering::Greater, true, v.clone())),
            ("$lt", v) => Some(Condition::Cmp(Ordering::Less, false, v.clone())),
            ("$lte", v) => Some(Condition::Cmp(Ordering::Less, true, v.clone())),
            ("$in", Value::Array(vs)) => Some(Condition::In(vs.clone())),
            ("$nin", Value::Array(vs)) => Some(Condition::Nin(vs.clone())),
            ("$exists", Value::Bool(b)) => Some(Condition::Exists(*b)),
            ("$startsWith", Value::String(s)) => Some(Condition::StartsWith(s.clone())),
            ("$in" | "$nin", _) => {
                errors.push(FilterError::at(&here, "must be an array"));
                None
            }
            ("$exists", _) => {
                errors.push(FilterError::at(&here, "must be true or false"));
                None
            }
            ("$startsWith", _) => {
                errors.push(FilterError::at(&here, "must be a string"));
                None
            }
            (other, _) => {
                errors.push(FilterError::at(&here, format!("unknown operator {other}")));
                None
            }
        };
        conditions.extend(condition);
    }
    (errors.len() == before).then_some(conditions)
}

impl Clause {
    fn holds(&self, body: &Value) -> bool {
        match self {
            Clause::And(fs) => fs.iter().all(|f| f.holds(body)),
            Clause::Or(fs) => fs.iter().any(|f| f.holds(body)),
            Clause::Not(f) => !f.holds(body),
            Clause::Path(path, conditions) => {
                let found = lookup(body, path);
                conditions.iter().all(|c| c.holds(found))
            }
        }
    }
}

/// The value at `path` in `body`: object keys, or array indexes.
fn lookup<'a>(body: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(body, |v, segment| match v {
        Value::Object(map) => map.get(segment),
        Value::Array(items) => segment.parse::<usize>().ok().and_then(|i| items.get(i)),
        _ => None,
    })
}

impl Condition {
    /// Whether a field's value (`None` when it is missing) meets this.
    fn holds(&self, found: Option<&Value>) -> bool {
        let Some(v) = found else {
            return matches!(
                self,
                Condition::Exists(false) | Condition::Neq(_) | Condition::Nin(_)
            );
        };
        match self {
            Condition::Eq(want) => equal(v, want),
            Condition::Neq(want) => !equal(v, want),
            Condition::Cmp(side, or_equal, want) => match compare(v, want) {
                Some(Ordering::Equal) => *or_equal,
                Some(o) => o == *side,
                None => false,
            },
            Condition::In(set) => set.iter().any(|w| equal(v, w)),
            Condition::Nin(set) => !set.iter().any(|w| equal(v, w)),
            Condition::Exists(want) => *want,
            Condition::StartsWith(prefix) => v.as_str().is_some_and(|s| s.starts_with(prefix)),
        }
    }
}

/// Equality of the contract: numbers and digit strings as numbers; values
/// of other kinds equal only to the same value.
fn equal(a: &Value, b: &Value) -> bool {
    match (numeric(a), numeric(b)) {
        (Some(x), Some(y)) => x.cmp(&y) == Ordering::Equal,
        _ => a == b,
    }
}

/// Order of the contract: numbers and digit strings as numbers, other
/// strings by code point; anything else is unordered.
fn compare(a: &Value, b: &Value) -> Option<Ordering> {
    if let (Some(x), Some(y)) = (numeric(a), numeric(b)) {
        return Some(x.cmp(&y));
    }
    match (a, b) {
        (Value::String(x), Value::String(y)) => Some(x.chars().cmp(y.chars())),
        _ => None,
    }
}

/// A number exactly as written: sign, integer digits without leading
/// zeros, fraction digits without trailing zeros. Compared without
/// rounding, whatever its size.
#[derive(Debug, PartialEq, Eq)]
struct Decimal {
    negative: bool,
    int: String,
    frac: String,
}

impl Decimal {
    fn parse(text: &str) -> Option<Decimal> {
        let (negative, rest) = match text.strip_prefix('-') {
            Some(r) => (true, r),
            None => (false, text),
        };
        let (int, frac) = rest.split_once('.').unwrap_or((rest, ""));
        let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if int.is_empty() || !digits(int) || !digits(frac) {
            return None;
        }
        let int = int.trim_start_matches('0').to_owned();
        let frac = frac.trim_end_matches('0').to_owned();
        let zero = int.is_empty() && frac.is_empty();
        Some(Decimal {
            negative: negative && !zero,
            int,
            frac,
        })
    }

    fn magnitude(&self, other: &Decimal) -> Ordering {
        self.int
            .len()
            .cmp(&other.int.len())
            .then_with(|| self.int.cmp(&other.int))
            .then_with(|| self.frac.cmp(&other.frac))
    }
}

impl Ord for Decimal {
    fn cmp(&self, other: &Decimal) -> Ordering {
        match (self.negative, other.negative) {
            (false, true) => Ordering::Greater,
            (true, false) => Ordering::Less,
            (false, false) => self.magnitude(other),
            (true, true) => other.magnitude(self),
        }
    }
}

impl PartialOrd for Decimal {
    fn partial_cmp(&self, other: &Decimal) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// A JSON number (one in exponent form is written out first), or a string
/// of decimal digits (a Money value), as a number.
fn numeric(v: &Value) -> Option<Decimal> {
    match v {
        Value::Number(n) => {
            let text = n.to_string();
            if text.contains(['e', 'E']) {
                // Exponent form: only floats far from Money's range.
                let f = n.as_f64()?;
                Decimal::parse(&format!("{f:.0}"))
            } else {
                Decimal::parse(&text)
            }
        }
        Value::String(s) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
            Decimal::parse(s)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn body() -> Value {
        json!({
            "event_ref": "evt_AAAAAAAAAAAA",
            "public_event_type": "payment.succeeded",
            "data": {
                "payment": {
                    "amount": {"value": "12500", "currency": "EUR"},
                    "status": "succeeded",
                    "tags": ["a", "b"],
                    "count": 3,
                    "ok": true,
                    "nothing": null
                }
            }
        })
    }

    fn holds(filter: Value) -> bool {
        Filter::parse(&filter)
            .expect("a valid filter")
            .holds(&body())
    }

    #[test]
    fn the_empty_filter_holds_for_everything() {
        assert!(holds(json!({})));
        assert!(Filter::parse(&json!({})).unwrap().holds(&json!(null)));
    }

    #[test]
    fn literals_and_operators() {
        assert!(holds(json!({"data.payment.status": "succeeded"})));
        assert!(!holds(json!({"data.payment.status": "failed"})));
        assert!(holds(
            json!({"data.payment.amount.value": {"$gte": 12500, "$lt": "20000"}})
        ));
        assert!(holds(json!({"data.payment.amount.value": {"$gt": "9999"}})));
        assert!(holds(json!({"data.payment.amount.value": 12500})));
        assert!(holds(json!({"data.payment.count": {"$in": ["3", 4]}})));
        assert!(holds(
            json!({"data.payment.amount.currency": {"$nin": ["USD"]}})
        ));
        assert!(holds(json!({"data.payment.tags.1": "b"})));
        assert!(holds(
            json!({"public_event_type": {"$startsWith": "payment."}})
        ));
        assert!(holds(
            json!({"data.payment.ok": true, "data.payment.nothing": null})
        ));
        // Other strings by code point; kinds never order against each other.
        assert!(holds(json!({"data.payment.status": {"$gt": "pending"}})));
        assert!(!holds(json!({"data.payment.ok": {"$gt": 0}})));
        assert!(!holds(json!({"data.payment.ok": {"$lt": 0}})));
    }

    #[test]
    fn a_missing_field_meets_only_exists_false_neq_and_nin() {
        assert!(holds(json!({"data.missing": {"$exists": false}})));
        assert!(holds(json!({"data.missing": {"$neq": 1}})));
        assert!(holds(json!({"data.missing": {"$nin": [1]}})));
        for op in ["$eq", "$gt", "$gte", "$lt", "$lte"] {
            assert!(!holds(json!({"data.missing": {op: 1}})), "{op}");
        }
        assert!(!holds(json!({"data.missing": {"$in": [null]}})));
        assert!(!holds(json!({"data.missing": {"$exists": true}})));
        assert!(!holds(json!({"data.missing": {"$startsWith": ""}})));
    }

    #[test]
    fn combinators() {
        assert!(holds(
            json!({"$or": [{"data.payment.status": "x"}, {"data.payment.count": 3}]})
        ));
        assert!(!holds(
            json!({"$and": [{"data.payment.status": "x"}, {"data.payment.count": 3}]})
        ));
        assert!(holds(json!({"$not": {"data.payment.status": "x"}})));
    }

    #[test]
    fn numbers_compare_exactly() {
        let big = "123456789012345678";
        assert!(holds(json!({"data.payment.amount.value": {"$lt": big}})));
        assert_eq!(
            Decimal::parse("0010.50")
                .unwrap()
                .cmp(&Decimal::parse("10.5").unwrap()),
            Ordering::Equal
        );
        assert_eq!(
            Decimal::parse("-0")
                .unwrap()
                .cmp(&Decimal::parse("0").unwrap()),
            Ordering::Equal
        );
        assert_eq!(
            Decimal::parse("-2")
                .unwrap()
                .cmp(&Decimal::parse("-10").unwrap()),
            Ordering::Greater
        );
    }

    #[test]
    fn each_defect_is_named_by_its_path() {
        let fields = |f: Value| -> Vec<String> {
            Filter::parse(&f)
                .unwrap_err()
                .into_iter()
                .map(|e| e.field)
                .collect()
        };
        assert_eq!(fields(json!({"a": {"$near": 1}})), ["filter.a.$near"]);
        assert_eq!(fields(json!({"$xor": []})), ["filter.$xor"]);
        assert_eq!(fields(json!({"$and": []})), ["filter.$and"]);
        assert_eq!(
            fields(json!({"$or": [{"a": {"$in": 1}}]})),
            ["filter.$or.0.a.$in"]
        );
        assert_eq!(
            fields(json!({"a": {"$exists": "yes"}})),
            ["filter.a.$exists"]
        );
        assert_eq!(fields(json!({"a..b": 1})), ["filter.a..b"]);
        assert_eq!(fields(json!([])), ["filter"]);
        let mut deep = json!({"a": 1});
        for _ in 0..8 {
            deep = json!({ "$not": deep });
        }
        assert_eq!(fields(deep).len(), 1);
        let big = json!({ "a": "x".repeat(MAX_BYTES) });
        assert_eq!(fields(big), ["filter"]);
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>()
                .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
            "[a-z0-9$.]{0,6}".prop_map(Value::String),
        ];
        leaf.prop_recursive(5, 48, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map(
                    prop_oneof![
                        Just("$and".to_owned()),
                        Just("$or".to_owned()),
                        Just("$not".to_owned()),
                        Just("$gt".to_owned()),
                        Just("$in".to_owned()),
                        Just("$exists".to_owned()),
                        "[a-c]{1,2}(\\.[a-c0-9]{1,2})?",
                    ],
                    inner,
                    0..4
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Whatever the filter and the body, parsing and evaluation end
        /// without a panic, and a parsed filter is within its bounds.
        #[test]
        fn parsing_and_evaluation_are_total(filter in json_value(), body in json_value()) {
            if let Ok(f) = Filter::parse(&filter) {
                let _ = f.holds(&body);
                prop_assert!(serde_json::to_string(&filter).unwrap().len() <= MAX_BYTES);
                // One level more may pass a bound; within them, $not negates.
                if let Ok(negated) = Filter::parse(&json!({"$not": filter})) {
                    prop_assert_eq!(negated.holds(&body), !f.holds(&body));
                }
            }
        }

        /// Numbers and their digit strings are one value to every operator.
        #[test]
        fn a_digit_string_is_its_number(n in 0u64..u64::MAX, m in 0u64..u64::MAX) {
            let body = json!({"v": n.to_string()});
            for (op, expected) in [("$gt", n > m), ("$lt", n < m), ("$eq", n == m), ("$gte", n >= m)] {
                let f = Filter::parse(&json!({"v": {op: m}})).unwrap();
                prop_assert_eq!(f.holds(&body), expected, "{} {} {}", n, op, m);
            }
        }
    }
}
