//! The event catalogue: every public event type, its DTO versions, the scope
//! types a subscription to it may use, where its personal fields sit (their
//! data classes) and a realistic example `data` object (contract section 9).
//!
//! # Shapes
//!
//! Data objects name resources by reference (`payment_ref`, `buyer_ref`,
//! ...), amounts as Money objects and times as RFC 3339 UTC. Personal fields
//! carry a data class, given as a dotted path within `data`:
//! the buyer's `email` and `name` are `contact`, `billing_address` is
//! `billing_address`, `tax_id` is `tax_id`, and the card's brand, last four
//! digits and expiry (`payment_method.card`) are `payment_instrument`.
//! References, amounts and statuses are never classified. Checkout session
//! and order events may carry a top-level `custom_fields` object keyed by
//! `cf_` references.
//!
//! # `payment.succeeded`, versions 1 and 2
//!
//! Version 1 is flat: `{payment_ref, amount, status, captured_at, buyer_ref,
//! buyer_email, buyer_name, card_brand, card_last4, product_refs}`, with
//! `buyer_email` and `buyer_name` `contact` and `card_brand` and `card_last4`
//! `payment_instrument`. It carries no card expiry.
//!
//! Version 2 nests: `{payment: {payment_ref, amount, status, captured_at},
//! buyer: {buyer_ref, email, name}, payment_method: {card: {brand, last4,
//! exp_month, exp_year}}, product_refs}`, with `buyer.email` and `buyer.name`
//! `contact` and the whole `payment_method.card` object
//! `payment_instrument`. [`crate::webhook::shaping::convert`] maps one to the
//! other (the expiry is lost going from 2 to 1).
//!
//! Every other type has only version 1.

mod examples;

use super::kinds::{DataClass, ScopeType};
use DataClass::{BillingAddress, Contact, PaymentInstrument, TaxId};
use ScopeType::{BeneficiaryBusiness as Biz, Buyer, Environment as Env, Product};

/// One public event type of the catalogue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventType {
    pub name: &'static str,
    pub description: &'static str,
    pub dto_versions: &'static [u32],
    pub scope_types: &'static [ScopeType],
    /// Diagnostic types exist for test sends, not for business events.
    pub diagnostic: bool,
}

const V1: &[u32] = &[1];
const PRODUCT_BUYER: &[ScopeType] = &[Env, Product, Buyer];

const fn business(
    name: &'static str,
    description: &'static str,
    scope_types: &'static [ScopeType],
) -> EventType {
    EventType {
        name,
        description,
        dto_versions: V1,
        scope_types,
        diagnostic: false,
    }
}

static CATALOGUE: &[EventType] = &[
    business(
        "checkout_session.completed",
        "A buyer completed a checkout session.",
        PRODUCT_BUYER,
    ),
    EventType {
        name: "payment.succeeded",
        description: "A payment succeeded and its amount was captured.",
        dto_versions: &[1, 2],
        scope_types: PRODUCT_BUYER,
        diagnostic: false,
    },
    business(
        "payment.failed",
        "A payment attempt failed (declined card, insufficient funds, ...).",
        PRODUCT_BUYER,
    ),
    business("refund.created", "A refund was created.", PRODUCT_BUYER),
    business("refund.succeeded", "A refund succeeded.", PRODUCT_BUYER),
    business(
        "refund.canceled",
        "A scheduled refund was canceled.",
        PRODUCT_BUYER,
    ),
    business(
        "dispute.opened",
        "A buyer disputed a payment.",
        &[Env, Buyer],
    ),
    business(
        "dispute.closed",
        "A dispute was won or lost.",
        &[Env, Buyer],
    ),
    business(
        "payout.paid",
        "A payout reached its destination.",
        &[Env, Biz],
    ),
    business("payout.failed", "A payout failed.", &[Env, Biz]),
    business("invoice.paid", "An invoice was paid.", PRODUCT_BUYER),
    business(
        "order.created",
        "An order was created from a payment.",
        PRODUCT_BUYER,
    ),
    business(
        "subscription.started",
        "A subscription started.",
        PRODUCT_BUYER,
    ),
    business(
        "subscription.changed",
        "A subscription changed price or plan.",
        PRODUCT_BUYER,
    ),
    business(
        "subscription.canceled",
        "A subscription was canceled.",
        PRODUCT_BUYER,
    ),
    business(
        "entitlement.granted",
        "A buyer was granted access to a product.",
        PRODUCT_BUYER,
    ),
    business(
        "entitlement.revoked",
        "A buyer's access to a product was revoked.",
        PRODUCT_BUYER,
    ),
    business(
        "participation.invited",
        "A beneficiary business was invited to participate.",
        &[Env, Biz],
    ),
    business(
        "participation.accepted",
        "A beneficiary business accepted its participation terms.",
        &[Env, Biz],
    ),
    EventType {
        name: "webhook.test",
        description:
            "A diagnostic event for checking that an endpoint receives and verifies deliveries.",
        dto_versions: V1,
        scope_types: &[Env],
        diagnostic: true,
    },
];

/// Every event type, in catalogue order.
pub fn all() -> &'static [EventType] {
    CATALOGUE
}

/// The event type of that name, if the catalogue has it.
pub fn find(name: &str) -> Option<&'static EventType> {
    CATALOGUE.iter().find(|t| t.name == name)
}

impl EventType {
    pub fn has_version(&self, dto_version: u32) -> bool {
        self.dto_versions.contains(&dto_version)
    }

    pub fn has_scope_type(&self, scope_type: ScopeType) -> bool {
        self.scope_types.contains(&scope_type)
    }
}

type Classes = &'static [(&'static str, DataClass)];

const BUYER_CONTACT: Classes = &[("buyer.email", Contact), ("buyer.name", Contact)];
const BUYER_CONTACT_CARD: Classes = &[
    ("buyer.email", Contact),
    ("buyer.name", Contact),
    ("payment_method.card", PaymentInstrument),
];
const BUYER_FULL: Classes = &[
    ("buyer.email", Contact),
    ("buyer.name", Contact),
    ("buyer.billing_address", BillingAddress),
    ("buyer.tax_id", TaxId),
];

fn classes(name: &str, dto_version: u32) -> Classes {
    match (name, dto_version) {
        ("payment.succeeded", 1) => &[
            ("buyer_email", Contact),
            ("buyer_name", Contact),
            ("card_brand", PaymentInstrument),
            ("card_last4", PaymentInstrument),
        ],
        ("payment.succeeded", 2)
        | ("payment.failed", 1)
        | ("dispute.opened", 1)
        | ("dispute.closed", 1)
        | ("subscription.started", 1) => BUYER_CONTACT_CARD,
        ("checkout_session.completed", 1) | ("invoice.paid", 1) => BUYER_FULL,
        ("order.created", 1) => &[
            ("buyer.email", Contact),
            ("buyer.name", Contact),
            ("buyer.billing_address", BillingAddress),
        ],
        ("refund.created", 1)
        | ("refund.succeeded", 1)
        | ("refund.canceled", 1)
        | ("subscription.changed", 1)
        | ("subscription.canceled", 1)
        | ("entitlement.granted", 1)
        | ("entitlement.revoked", 1) => BUYER_CONTACT,
        ("participation.invited", 1) | ("participation.accepted", 1) => {
            &[("invitee.email", Contact), ("invitee.name", Contact)]
        }
        _ => &[],
    }
}

/// Dotted paths (within `data`) of the classified fields of this type and
/// version, with their class. A path that crosses an array applies to each
/// of its elements. Empty for an unknown type or version.
pub fn data_classes(name: &str, dto_version: u32) -> Vec<(&'static str, DataClass)> {
    classes(name, dto_version).to_vec()
}

/// A realistic example `data` object in that version's shape, every
/// classified field present; `None` for an unknown type or version.
pub fn example(name: &str, dto_version: u32) -> Option<serde_json::Value> {
    let t = find(name)?;
    if !t.has_version(dto_version) {
        return None;
    }
    examples::example(t.name, dto_version)
}

#[cfg(test)]
mod tests;
