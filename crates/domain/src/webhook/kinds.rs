//! Closed sets of webhook values, with their wire names and transitions.

use crate::principal::wire_enum;
use crate::reference::Prefix;

wire_enum!(
    /// Data classes of personal fields; a payload field of a class is
    /// delivered only when the endpoint's active grant covers the class.
    DataClass {
        Contact => "contact",
        BillingAddress => "billing_address",
        PaymentInstrument => "payment_instrument",
        TaxId => "tax_id",
    }
);

wire_enum!(
    /// Why an endpoint may receive personal data.
    Purpose {
        Fulfillment => "fulfillment",
        Accounting => "accounting",
        Support => "support",
        Analytics => "analytics",
        FraudPrevention => "fraud_prevention",
    }
);

wire_enum!(
    /// What a subscription's `scope_ref` names.
    ScopeType {
        Environment => "environment",
        Product => "product",
        Buyer => "buyer",
        BeneficiaryBusiness => "beneficiary_business",
    }
);

impl ScopeType {
    /// The reference kind of a `scope_ref` of this scope type.
    pub fn ref_prefix(self) -> Prefix {
        match self {
            ScopeType::Environment => Prefix::Environment,
            ScopeType::Product => Prefix::Product,
            ScopeType::Buyer => Prefix::Buyer,
            ScopeType::BeneficiaryBusiness => Prefix::BeneficiaryBusiness,
        }
    }
}

wire_enum!(EndpointStatus { Active => "active", Paused => "paused", Disabled => "disabled" });

wire_enum!(DataProfileGrantStatus { Active => "active", Revoked => "revoked" });

wire_enum!(
    /// `pending` and `held` are open; `succeeded` and `failed` are final
    /// until a redrive starts a new generation.
    DeliveryStatus { Pending => "pending", Held => "held", Succeeded => "succeeded", Failed => "failed" }
);

wire_enum!(AttemptStatus { Succeeded => "succeeded", Failed => "failed" });

wire_enum!(BodyStatus { Available => "available", Redacted => "redacted", Expired => "expired" });

wire_enum!(
    /// The class of a delivery's last response: its HTTP status class, or
    /// `none` when the attempt got no answer (time-out, refused, reset).
    /// A delivery never attempted has none of these.
    ResponseClass {
        Success => "2xx",
        Redirect => "3xx",
        ClientError => "4xx",
        ServerError => "5xx",
        NoResponse => "none",
    }
);

impl ResponseClass {
    /// The class of an attempt that got `status` (or no answer). A status
    /// outside 200..=599 counts as no usable answer.
    pub fn of(status: Option<u16>) -> ResponseClass {
        match status {
            Some(200..=299) => ResponseClass::Success,
            Some(300..=399) => ResponseClass::Redirect,
            Some(400..=499) => ResponseClass::ClientError,
            Some(500..=599) => ResponseClass::ServerError,
            _ => ResponseClass::NoResponse,
        }
    }

    /// The classes a filter of failures names (contract 12.2).
    pub const FAILURES: [ResponseClass; 3] = [
        ResponseClass::ClientError,
        ResponseClass::ServerError,
        ResponseClass::NoResponse,
    ];
}

wire_enum!(
    RedriveOutcome {
        Queued => "queued",
        Held => "held",
        AlreadyPending => "already_pending",
        NotFound => "not_found",
        PreconditionFailed => "precondition_failed",
    }
);

impl RedriveOutcome {
    /// The status a redrive with this outcome starts the delivery's new
    /// generation in; `None` when it starts none.
    pub fn next_status(self) -> Option<DeliveryStatus> {
        match self {
            RedriveOutcome::Queued => Some(DeliveryStatus::Pending),
            RedriveOutcome::Held => Some(DeliveryStatus::Held),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("cannot {action} an endpoint that is {from}")]
pub struct EndpointTransitionError {
    pub action: &'static str,
    pub from: &'static str,
}

impl EndpointStatus {
    pub fn pause(self) -> Result<EndpointStatus, EndpointTransitionError> {
        match self {
            EndpointStatus::Active => Ok(EndpointStatus::Paused),
            from => Err(EndpointTransitionError {
                action: "pause",
                from: from.as_str(),
            }),
        }
    }

    pub fn resume(self) -> Result<EndpointStatus, EndpointTransitionError> {
        match self {
            EndpointStatus::Paused | EndpointStatus::Disabled => Ok(EndpointStatus::Active),
            from => Err(EndpointTransitionError {
                action: "resume",
                from: from.as_str(),
            }),
        }
    }

    /// New deliveries to an endpoint in this state are held, not sent.
    pub fn holds_deliveries(self) -> bool {
        self != EndpointStatus::Active
    }
}

impl DeliveryStatus {
    /// What a redrive does from this state, given the endpoint's state.
    pub fn redrive(self, endpoint: EndpointStatus) -> RedriveOutcome {
        match self {
            DeliveryStatus::Pending | DeliveryStatus::Held => RedriveOutcome::AlreadyPending,
            DeliveryStatus::Succeeded | DeliveryStatus::Failed if endpoint.holds_deliveries() => {
                RedriveOutcome::Held
            }
            DeliveryStatus::Succeeded | DeliveryStatus::Failed => RedriveOutcome::Queued,
        }
    }

    /// The status a new generation starts in.
    pub fn initial(endpoint: EndpointStatus) -> DeliveryStatus {
        if endpoint.holds_deliveries() {
            DeliveryStatus::Held
        } else {
            DeliveryStatus::Pending
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_transitions() {
        use EndpointStatus::*;
        assert_eq!(Active.pause(), Ok(Paused));
        assert!(Paused.pause().is_err() && Disabled.pause().is_err());
        assert_eq!(Paused.resume(), Ok(Active));
        assert_eq!(Disabled.resume(), Ok(Active));
        assert!(Active.resume().is_err());
    }

    #[test]
    fn redrive_outcomes() {
        use DeliveryStatus::*;
        for open in [Pending, Held] {
            for e in EndpointStatus::ALL {
                assert_eq!(open.redrive(*e), RedriveOutcome::AlreadyPending);
            }
        }
        assert_eq!(
            Failed.redrive(EndpointStatus::Active),
            RedriveOutcome::Queued
        );
        assert_eq!(
            Succeeded.redrive(EndpointStatus::Paused),
            RedriveOutcome::Held
        );
        assert_eq!(DeliveryStatus::initial(EndpointStatus::Disabled), Held);
    }
}
