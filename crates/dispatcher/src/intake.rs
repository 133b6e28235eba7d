//! Event intake: parses and validates the envelope of contract section 9
//! (documented as a JSON Schema in `config/event-envelope.schema.json`) and
//! accepts it into the event queue (`crate::queue`), once per `event_ref`.
//! A message that cannot be parsed or validated is kept as a dead letter
//! with its reason: never dropped, never a crash.
//!
//! A valid event that names an environment this store does not have is
//! another store's: every store's queue bound to `billing.events` sees
//! every event published there, so each store keeps only its own
//! environments' events and lets the rest pass (acknowledged, counted in
//! `billing_events_foreign_total`), neither stored nor dead-lettered.

use crate::metrics as m;
use crate::queue::EventQueue;
use crate::DispatchError;
use domain::webhook::catalogue;
use domain::webhook::shaping::Scope;
use domain::{Prefix, Ref, RefError, Timestamp};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use store::projection::Projection;
use store::{EventData, EventRecord, Store, StoreError};

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
    };
    Ok((event, e.producer))
}

/// Applies the queue's projector (`store::projection`) to an event of
/// another system: the event as subscribers receive it, or why it is
/// refused. The service's own events (`producer` billing) pass as they are.
pub async fn project(
    queue: &EventQueue,
    mut event: EventRecord,
    producer: Option<&str>,
) -> Result<Result<EventRecord, EnvelopeError>, StoreError> {
    let theirs = producer != Some(PRODUCER) && catalogue::is_projected(&event.public_event_type);
    let Some(projector) = queue.projector().filter(|_| theirs) else {
        return Ok(Ok(event));
    };
    Ok(match projector.project(&event).await? {
        Projection::Skip => Ok(event),
        Projection::Apply { data, scope } => {
            event.data = data;
            event.scope = scope;
            Ok(event)
        }
        Projection::Refuse(reason) => Err(EnvelopeError::Projection(reason)),
    })
}

/// The environments of a store, as far as its intake has seen them.
/// Environments are never deleted, so one found stays known; one not found
/// is asked of the store again next time (it may have been made since).
#[derive(Debug, Default)]
pub struct Environments {
    known: std::sync::RwLock<std::collections::HashSet<Ref>>,
}

impl Environments {
    /// Whether `store` has `environment_ref`.
    pub async fn holds(&self, store: &Store, environment_ref: &Ref) -> Result<bool, StoreError> {
        let known = {
            let known = self.known.read().unwrap_or_else(|p| p.into_inner());
            known.contains(environment_ref)
        };
        if known {
            return Ok(true);
        }
        match store.admin().environment(environment_ref).await {
            Ok(_) => {
                self.known
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(environment_ref.clone());
                Ok(true)
            }
            Err(StoreError::NotFound) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// What the intake makes of a parsed, valid event.
#[derive(Debug)]
pub enum Screened {
    /// This store's: to enqueue as it now is (projected if another system's).
    Accept(EventRecord),
    /// Another store's (its environment is not here): let it pass.
    Foreign,
    /// Refused (by the projection): to dead-letter with this reason.
    Refuse(EnvelopeError),
}

/// Screens a parsed event for `queue`'s store: another store's passes,
/// another system's is projected (`project`). A store error is returned as
/// such: the caller hands the message back.
pub async fn screen(
    queue: &EventQueue,
    event: EventRecord,
    producer: Option<&str>,
) -> Result<Screened, StoreError> {
    let store = queue.store();
    if !queue
        .environments()
        .holds(store, &event.environment_ref)
        .await?
    {
        return Ok(Screened::Foreign);
    }
    Ok(match project(queue, event, producer).await? {
        Ok(event) => Screened::Accept(event),
        Err(refused) => Screened::Refuse(refused),
    })
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
        data: &'a EventData,
    }
    serde_json::to_string(&Out {
        producer: PRODUCER,
        event_ref: e.event_ref.as_str(),
        public_event_type: &e.public_event_type,
        environment_ref: e.environment_ref.as_str(),
        occurred_at: e.occurred_at.to_rfc3339(),
        scope: &e.scope,
        data: &e.data,
    })
    .unwrap_or_default()
}

/// What became of a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Accepted {
    New,
    Duplicate,
    /// Another store's (its environment is not in this store): let pass.
    Foreign,
    /// Refused, with the reason it was dead-lettered for.
    Dead(String),
}

/// Accepts one message into the event queue (or the dead letters).
pub async fn accept(
    queue: &EventQueue,
    body: &[u8],
    source: &'static str,
) -> Result<Accepted, DispatchError> {
    let store = queue.store();
    let parsed = match parse_with_producer(body) {
        Ok((event, producer)) => screen(queue, event, producer.as_deref()).await?,
        Err(refused) => Screened::Refuse(refused),
    };
    match parsed {
        Screened::Foreign => {
            metrics::counter!(m::EVENTS_FOREIGN, "source" => source).increment(1);
            Ok(Accepted::Foreign)
        }
        Screened::Accept(event) => {
            metrics::counter!(m::EVENTS_CONSUMED, "source" => source).increment(1);
            Ok(if queue.enqueue(&event).await? {
                Accepted::New
            } else {
                Accepted::Duplicate
            })
        }
        Screened::Refuse(refused) => {
            metrics::counter!(m::EVENTS_DEAD, "source" => source).increment(1);
            let reason = refused.to_string();
            store
                .dead_letter(&String::from_utf8_lossy(body), &reason)
                .await?;
            Ok(Accepted::Dead(reason))
        }
    }
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
