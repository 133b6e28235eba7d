//! A delivery's body as the store keeps it: the `payload` column's three
//! meanings. A leaf: the deliveries' reads (`webhooks::deliveries`) and the
//! recorder's writes (`dispatch`) both use it, and it uses neither.

/// A delivery's body as the store keeps it (the `payload` column).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload {
    /// None: not attempted yet, an attempt that sent nothing, or a body
    /// redacted or expired (`body_status` says which).
    Absent,
    /// Not stored, because it is built again from what is: the delivery's
    /// event data in its dto version (its own, or its event's one copy)
    /// shaped for no grant, in the envelope of the delivery's own fields
    /// (`webhook_shapes::body::delivered`). What an endpoint without a
    /// grant is sent, which is most deliveries: each would otherwise keep
    /// its event's data a second time.
    Rebuilt,
    /// Exactly the bytes sent: a grant shaped them, or a test send wrote
    /// them.
    Verbatim(String),
}

/// The `payload` column's value for `Payload::Rebuilt`: the empty string,
/// which no JSON body is.
pub const REBUILT_PAYLOAD: &str = "";

impl Payload {
    pub(crate) fn from_column(column: Option<String>) -> Payload {
        match column {
            None => Payload::Absent,
            Some(s) if s == REBUILT_PAYLOAD => Payload::Rebuilt,
            Some(s) => Payload::Verbatim(s),
        }
    }

    /// The `payload` column's value.
    pub fn stored(&self) -> Option<&str> {
        match self {
            Payload::Absent => None,
            Payload::Rebuilt => Some(REBUILT_PAYLOAD),
            Payload::Verbatim(s) => Some(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_meaning_round_trips_through_the_column() {
        for p in [
            Payload::Absent,
            Payload::Rebuilt,
            Payload::Verbatim(r#"{"type":"order.created"}"#.to_owned()),
        ] {
            assert_eq!(Payload::from_column(p.stored().map(str::to_owned)), p);
        }
        assert!(
            serde_json::from_str::<serde_json::Value>(REBUILT_PAYLOAD).is_err(),
            "no body a receiver was sent reads as the sentinel"
        );
    }
}
