//! The delivered body: `{"event_ref", "ordering_key", "sequence",
//! "public_event_type", "dto_version", "occurred_at", "environment_ref",
//! "data"}`, with `data` already shaped for the endpoint's dto version and
//! grant; `ordering_key` and `sequence` are null for an event without a key.

use crate::Timestamp;
use serde::Serialize;

#[derive(Debug, Serialize)]
pub struct DeliveredBody<'a> {
    pub event_ref: &'a str,
    pub ordering_key: Option<&'a str>,
    pub sequence: Option<i64>,
    pub public_event_type: &'a str,
    pub dto_version: u32,
    pub occurred_at: String,
    pub environment_ref: &'a str,
    pub data: &'a serde_json::Value,
}

impl<'a> DeliveredBody<'a> {
    pub fn new(
        event_ref: &'a str,
        public_event_type: &'a str,
        dto_version: u32,
        occurred_at: Timestamp,
        environment_ref: &'a str,
        data: &'a serde_json::Value,
    ) -> Self {
        DeliveredBody {
            event_ref,
            ordering_key: None,
            sequence: None,
            public_event_type,
            dto_version,
            occurred_at: occurred_at.to_rfc3339(),
            environment_ref,
            data,
        }
    }

    /// The body of an event with an ordering key at `sequence`.
    pub fn ordered(mut self, key: Option<&'a str>, sequence: Option<i64>) -> Self {
        self.ordering_key = key;
        self.sequence = sequence;
        self
    }

    /// The exact bytes that are signed and sent.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_order_is_stable() {
        let data = serde_json::json!({"a": 1});
        let b = DeliveredBody::new(
            "evt_x",
            "payment.succeeded",
            2,
            Timestamp::from_millis(0),
            "env_x",
            &data,
        );
        assert_eq!(
            b.to_json(),
            r#"{"event_ref":"evt_x","ordering_key":null,"sequence":null,"public_event_type":"payment.succeeded","dto_version":2,"occurred_at":"1970-01-01T00:00:00.000Z","environment_ref":"env_x","data":{"a":1}}"#
        );
    }
}
