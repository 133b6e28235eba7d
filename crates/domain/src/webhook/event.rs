//! A domain event: its record (`EventRecord`, with its `data` kept as the
//! text it arrived in) and its envelope on the queue (contract section 9,
//! documented as a JSON Schema in `config/event-envelope.schema.json`):
//! `parse` applies exactly the envelope's rules and says which one a
//! message breaks; `envelope` writes an event the service emits.
//!
//! Pure: no queue, store or clock here. The intake (`dispatcher::intake`)
//! decides what becomes of a parsed event.

use crate::webhook::catalogue;
use crate::webhook::ordering::{OrderingKey, OrderingKeyError};
use crate::webhook::shaping::Scope;
use crate::{Prefix, Ref, RefError, Timestamp};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// An event as received from a queue, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct EventRecord {
    pub event_ref: Ref,
    pub environment_ref: Ref,
    pub public_event_type: String,
    pub occurred_at: Timestamp,
    pub scope: Scope,
    pub data: EventData,
    /// Its key and place in the key's order, if it has a key.
    pub order: Option<EventOrder>,
}

/// An event's place in the order of its key (contract 13.1). `sequence`
/// is assigned once: by the unit of work that emits one of the service's
/// own events, or by the intake when it accepts one from a queue; until
/// then it is `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventOrder {
    pub key: OrderingKey,
    pub sequence: Option<i64>,
}

impl EventOrder {
    /// A key whose sequence is still to be assigned.
    pub fn key(key: OrderingKey) -> EventOrder {
        EventOrder {
            key,
            sequence: None,
        }
    }
}

/// An event's `data`: a JSON object, kept as the text it arrived in. The
/// intake never builds a tree of it: it is stored and fanned out as text
/// and parsed only by each attempt, which shapes it (a tree built at
/// intake would only be serialised back).
#[derive(Debug, Clone)]
pub struct EventData(Box<serde_json::value::RawValue>);

impl EventData {
    /// `text` if it is a JSON object; otherwise why not.
    pub fn parse(text: String) -> Result<EventData, String> {
        let raw = serde_json::value::RawValue::from_string(text)
            .map_err(|e| format!("data is not JSON: {e}"))?;
        EventData::object(raw)
    }

    /// `raw` if it is a JSON object (as deserialised in a larger document).
    pub fn object(raw: Box<serde_json::value::RawValue>) -> Result<EventData, String> {
        // Valid JSON whose first token is `{` is an object.
        if raw.get().trim_start().starts_with('{') {
            Ok(EventData(raw))
        } else {
            Err("data must be a JSON object".to_owned())
        }
    }

    pub fn as_str(&self) -> &str {
        self.0.get()
    }
}

impl PartialEq for EventData {
    fn eq(&self, other: &EventData) -> bool {
        self.as_str() == other.as_str()
    }
}

impl serde::Serialize for EventData {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

#[derive(Debug, Deserialize)]
struct Envelope {
    event_ref: String,
    public_event_type: String,
    environment_ref: String,
    occurred_at: String,
    #[serde(default)]
    scope: ScopeWire,
    /// Who published it: `billing` for the service's own events, which are
    /// never projected again.
    #[serde(default)]
    producer: Option<String>,
    #[serde(default)]
    ordering_key: Option<String>,
    /// Read only from the service's own events; the intake numbers the
    /// others' (contract 13.1), so any value is accepted and ignored.
    #[serde(default)]
    sequence: Option<serde_json::Value>,
    /// Kept as text (`EventData`): checked to be an object, not parsed.
    data: Box<RawValue>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScopeWire {
    #[serde(default)]
    product_refs: Vec<String>,
    buyer_ref: Option<String>,
    beneficiary_business_ref: Option<String>,
}

/// Why a message is refused as an event: the reason it is dead-lettered
/// with (its text is the `x-dead-reason`).
#[derive(Debug, thiserror::Error)]
pub enum EnvelopeError {
    /// Not JSON, or not the envelope's shape.
    #[error("not a valid envelope: {0}")]
    Malformed(#[source] serde_json::Error),
    /// A reference of the envelope (`field`, a dotted path) is malformed.
    #[error("{field} {source}")]
    Reference {
        field: String,
        #[source]
        source: RefError,
    },
    /// Not a business event type of the catalogue.
    #[error("public_event_type `{0}` is not in the catalogue")]
    UnknownEventType(String),
    #[error("occurred_at must be an RFC 3339 timestamp")]
    OccurredAt,
    /// `data` is not a JSON object (`EventData::object`'s reason).
    #[error("{0}")]
    Data(String),
    #[error("{0}")]
    OrderingKey(#[from] OrderingKeyError),
    /// The projection refused the data (`store::projection`'s reason).
    #[error("{0}")]
    Projection(String),
}

/// The producer of the service's own events.
pub const PRODUCER: &str = "billing";

/// `text` as a reference of `prefix`, or why `field` is refused.
fn reference(prefix: Prefix, text: &str, field: impl Into<String>) -> Result<Ref, EnvelopeError> {
    Ref::parse(prefix, text).map_err(|source| EnvelopeError::Reference {
        field: field.into(),
        source,
    })
}

/// Parses and validates one message; the error says why it is refused.
pub fn parse(body: &[u8]) -> Result<EventRecord, EnvelopeError> {
    parse_with_producer(body).map(|(event, _)| event)
}

/// `parse`, with the envelope's `producer`.
pub fn parse_with_producer(body: &[u8]) -> Result<(EventRecord, Option<String>), EnvelopeError> {
    let e: Envelope = serde_json::from_slice(body).map_err(EnvelopeError::Malformed)?;
    let event_ref = reference(Prefix::Event, &e.event_ref, "event_ref")?;
    let environment_ref = reference(Prefix::Environment, &e.environment_ref, "environment_ref")?;
    let event_type = catalogue::find(&e.public_event_type)
        .filter(|t| !t.diagnostic)
        .ok_or_else(|| EnvelopeError::UnknownEventType(e.public_event_type.clone()))?;
    let occurred_at = Timestamp::parse(&e.occurred_at).ok_or(EnvelopeError::OccurredAt)?;
    let data = EventData::object(e.data).map_err(EnvelopeError::Data)?;
    for (i, p) in e.scope.product_refs.iter().enumerate() {
        // The field's name is built only for the error.
        Ref::parse(Prefix::Product, p).map_err(|source| EnvelopeError::Reference {
            field: format!("scope.product_refs.{i}"),
            source,
        })?;
    }
    if let Some(b) = &e.scope.buyer_ref {
        reference(Prefix::Buyer, b, "scope.buyer_ref")?;
    }
    if let Some(b) = &e.scope.beneficiary_business_ref {
        reference(
            Prefix::BeneficiaryBusiness,
            b,
            "scope.beneficiary_business_ref",
        )?;
    }
    let own = e.producer.as_deref() == Some(PRODUCER);
    let order = match e.ordering_key.as_deref() {
        None => None,
        Some(key) => Some(EventOrder {
            key: OrderingKey::parse(key)?,
            sequence: e
                .sequence
                .filter(|_| own)
                .and_then(|s| s.as_i64())
                .filter(|s| *s > 0),
        }),
    };
    let event = EventRecord {
        event_ref,
        environment_ref,
        public_event_type: event_type.name.to_owned(),
        occurred_at,
        scope: Scope {
            product_refs: e.scope.product_refs,
            buyer_ref: e.scope.buyer_ref,
            beneficiary_business_ref: e.scope.beneficiary_business_ref,
        },
        data,
        order,
    };
    Ok((event, e.producer))
}

/// The envelope of contract section 9 for an event the service emits:
/// what `parse` reads, with `producer` billing.
pub fn envelope(e: &EventRecord) -> String {
    #[derive(Serialize)]
    struct Out<'a> {
        producer: &'a str,
        event_ref: &'a str,
        public_event_type: &'a str,
        environment_ref: &'a str,
        occurred_at: String,
        scope: &'a Scope,
        #[serde(skip_serializing_if = "Option::is_none")]
        ordering_key: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        sequence: Option<i64>,
        data: &'a EventData,
    }
    serde_json::to_string(&Out {
        producer: PRODUCER,
        ordering_key: e.order.as_ref().map(|o| o.key.as_str()),
        sequence: e.order.as_ref().and_then(|o| o.sequence),
        event_ref: e.event_ref.as_str(),
        public_event_type: &e.public_event_type,
        environment_ref: e.environment_ref.as_str(),
        occurred_at: e.occurred_at.to_rfc3339(),
        scope: &e.scope,
        data: &e.data,
    })
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelope() -> serde_json::Value {
        serde_json::json!({
            "event_ref": "evt_AAAAAAAAAAAA",
            "public_event_type": "payment.succeeded",
            "environment_ref": "env_AAAAAAAAAAAA",
            "occurred_at": "2026-11-22T10:04:05.123Z",
            "scope": {"product_refs": ["prd_AAAAAAAAAAAA"], "buyer_ref": "buy_AAAAAAAAAAAA", "beneficiary_business_ref": null},
            "data": {"payment": {"payment_ref": "pay_AAAAAAAAAAAA"}}
        })
    }

    #[test]
    fn a_valid_envelope_parses() {
        let e = parse(envelope().to_string().as_bytes()).unwrap();
        assert_eq!(e.scope.product_refs, vec!["prd_AAAAAAAAAAAA"]);
    }

    #[test]
    fn an_envelope_parses_back_to_its_event() {
        let e = parse(envelope().to_string().as_bytes()).unwrap();
        assert_eq!(parse(super::envelope(&e).as_bytes()).unwrap(), e);
    }

    #[test]
    fn data_is_kept_as_it_was_sent() {
        let mut e = envelope().to_string();
        let sent = r#"{"b": 1,  "a": "\u00e9", "n": 12345678901234567890}"#;
        e = e.replace(
            r#""data":{"payment":{"payment_ref":"pay_AAAAAAAAAAAA"}}"#,
            &format!(r#""data": {sent}"#),
        );
        assert_eq!(parse(e.as_bytes()).unwrap().data.as_str(), sent);
    }

    #[test]
    fn each_defect_is_named() {
        let cases = [
            ("event_ref", serde_json::json!("nope"), "event_ref"),
            (
                "public_event_type",
                serde_json::json!("no.such"),
                "catalogue",
            ),
            (
                "public_event_type",
                serde_json::json!("webhook.test"),
                "catalogue",
            ),
            ("occurred_at", serde_json::json!("yesterday"), "occurred_at"),
            ("data", serde_json::json!([1]), "data"),
            (
                "environment_ref",
                serde_json::json!("env_x"),
                "environment_ref",
            ),
        ];
        for (field, value, needle) in cases {
            let mut e = envelope();
            e[field] = value;
            let err = parse(e.to_string().as_bytes()).unwrap_err().to_string();
            assert!(err.contains(needle), "{field}: {err}");
        }
        assert!(parse(b"not json").is_err());
    }
}
