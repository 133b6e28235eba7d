//! The event catalogue: every public event type, its DTO versions, the scope
//! types a subscription to it may use, where its personal fields sit (their
//! data classes) and a realistic example `data` object (contract section 9).
//!
//! # Shapes
//!
//! An event's `data` is the resource it names, as its retrieve answers it
//! at that moment (contract 10.1, "Events are the resource"; the shapes are
//! those of `docs/checkout.md` and `interface.md`, with the fields the
//! control API adds), every field present and null where empty, with its
//! `etag`. References are `<prefix>_` + 12 characters, amounts Money
//! objects, times RFC 3339 UTC. The exceptions, which carry no `etag`:
//! `payment.succeeded` version 1 (below), `subscription.changed` (its
//! earlier shape), and `webhook.test`
//! (`{message, sent_at}`, no resource).
//!
//! | type | `data` |
//! |---|---|
//! | `payment.succeeded` (version 2), `payment.failed` | the payment (with `payment_ref` beside `payment_intent_ref`) |
//! | `checkout_session.completed` | the checkout session |
//! | `order.created` | the order (with `updated_at`) |
//! | `subscription.changed` | the subscription after the change, with `from_price_ref` and `to_price_ref` (contract 14.2) |
//! | `invoice.paid`, `invoice.payment_failed` | the invoice with its `lines` (contract 14.1), `paid`, or `open` after a declined renewal |
//! | `entitlement.granted`, `entitlement.revoked` | the entitlement, `active`, or `revoked` with `revoked_at` |
//! | `subscription.started`, `subscription.renewed`, `subscription.past_due`, `subscription.trial_will_end`, `subscription.canceled` | the subscription |
//! | `refund.created`, `refund.succeeded`, `refund.failed`, `refund.canceled` | the refund |
//! | `dispute.opened`, `dispute.closed` | the dispute |
//! | `payout.paid`, `payout.failed` | the payout |
//! | `participation.invited`, `participation.accepted` | the participation |
//!
//! The refund is `{refund_ref, payment_intent_ref, capture_ref, status,
//! scope, amount, reason, access_effect, cancelable, requested_at,
//! scheduled_at, executed_at, canceled_at, created_at, updated_at, etag}`:
//! `pending` (or `scheduled`) after `refund.created`, `succeeded` or
//! `failed` with `executed_at` after settlement, `canceled` with
//! `canceled_at`; `cancelable` only while `scheduled`.
//!
//! The dispute is `{dispute_ref, payment_intent_ref, amount, kind, status,
//! reason_safe, opened_at, evidence_due_at, resolved_at, etag}`:
//! `needs_response` when opened, `won` or `lost` with `resolved_at` when
//! closed; `evidence_due_at` is `opened_at` + 7 days; subscribers get the
//! upstream reason only as `reason_safe`.
//!
//! The payout is `{payout_ref, beneficiary_business_ref, status, amount,
//! fee, net, method_key, destination_label, destination_last4,
//! requested_at, completed_at, etag}` (`net` = `amount` − `fee`, one
//! currency; `destination_last4` four digits).
//!
//! The participation is `{participation_ref, beneficiary_business_ref,
//! status, invited_at, accepted_at, terms_version, terms_digest, etag}`
//! (`terms_digest` the SHA-256, 64 lower-case hex digits, of the accepted
//! terms; null, like `accepted_at`, while `invited`).
//!
//! `subscription.changed` keeps its earlier shape, with `product_refs` and
//! `buyer: {buyer_ref, email, name}` (`contact`).
//!
//! Personal fields carry a data class, given as a dotted path within
//! `data`; references, amounts and statuses are never classified:
//!
//! | type, version | path | class |
//! |---|---|---|
//! | `payment.succeeded` 2, `payment.failed` 1 | `buyer.email`, `buyer.name` | `contact` |
//! | | `payment_method` (brand, last four, expiry) | `payment_instrument` |
//! | `payment.succeeded` 1 | `buyer_email`, `buyer_name` | `contact` |
//! | | `card_brand`, `card_last4` | `payment_instrument` |
//! | `checkout_session.completed` 1 | `buyer.email`, `buyer.name` | `contact` |
//! | orders, invoices, entitlements, subscriptions | none: they name the buyer by `buyer_ref` only | |
//! | refunds, disputes | none: they name the payment by `payment_intent_ref` only (no buyer, no card) | |
//! | payouts, participations, `webhook.test` | none | |
//!
//! A payout's `destination_label` and `destination_last4` describe the
//! beneficiary business's account, not a person, and are not classified.
//! No type carries a `billing_address` or `tax_id` field at present.
//!
//! A checkout session also carries its `custom_fields`, `{key: value}` keyed
//! by the config's field `key`. Each field a config defines has a
//! `custom_field_ref` (`cf_`), the same for its key in every version of the
//! config, and grants name fields by those references (contract 9). The
//! `custom_fields` object is always delivered; an entry stays in it only
//! for an endpoint whose grant names the field of the session's
//! `config_ref` with that key (the caller resolves the grant's references
//! to `(config_ref, key)`: [`crate::webhook::shaping::GrantView`]), so an
//! endpoint without a grant receives `{}`.
//!
//! # `payment.succeeded`, versions 1 and 2
//!
//! Version 2 is the payment resource: `{payment_ref, payment_intent_ref,
//! checkout_session_ref, buyer_ref, buyer: {email, name}, amount,
//! amount_refunded, status, failure_code, payment_method: {type, brand,
//! last4, exp_month, exp_year}, stored_payment_method_ref, product_refs,
//! next_action, captured_at, created_at, etag}`.
//!
//! Version 1 is its older flat shape: `{payment_ref, amount, status,
//! captured_at, buyer_ref, buyer_email, buyer_name, card_brand, card_last4,
//! product_refs}`, derived from version 2 by
//! [`crate::webhook::shaping::convert`] (`payment_ref` is the
//! `payment_intent_ref`, which the payment resource also answers as its
//! `payment_ref`; the card's expiry and the other fields are not in
//! version 1).
//!
//! Every other type has only version 1.

mod examples;

use super::kinds::{DataClass, ScopeType};
use DataClass::{Contact, PaymentInstrument};
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
    business("refund.failed", "A refund failed.", PRODUCT_BUYER),
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
        "invoice.payment_failed",
        "A renewal's charge was declined; its invoice stays open while it is retried.",
        PRODUCT_BUYER,
    ),
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
        "subscription.renewed",
        "A subscription was charged for its next period.",
        PRODUCT_BUYER,
    ),
    business(
        "subscription.past_due",
        "A subscription's renewal was declined; it is retried on the dunning schedule.",
        PRODUCT_BUYER,
    ),
    business(
        "subscription.trial_will_end",
        "A subscription's trial ends in 3 days (at once when the trial is shorter); it is then charged for its first period.",
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
    business(
        "webhook_endpoint.failing",
        "An endpoint's health became failing (its last 5 attempts failed); it is disabled at disable_at if nothing succeeds by then.",
        &[Env],
    ),
    business(
        "webhook_endpoint.recovered",
        "An attempt to an endpoint succeeded while its health was failing.",
        &[Env],
    ),
    business(
        "webhook_endpoint.disabled",
        "An endpoint was disabled: failing for too long, or gone (it answered 410).",
        &[Env],
    ),
    business(
        "webhook_delivery.failed",
        "A delivery ran out of retries.",
        &[Env],
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

/// The service's operational events (contract 13.4): each is about an
/// endpoint (`data.endpoint_ref`), and is never delivered to it.
pub const OPERATIONAL: &[&str] = &[
    "webhook_endpoint.failing",
    "webhook_endpoint.recovered",
    "webhook_endpoint.disabled",
    "webhook_delivery.failed",
];

/// Whether events of this type are about an endpoint (`OPERATIONAL`).
pub fn is_operational(name: &str) -> bool {
    OPERATIONAL.contains(&name)
}

/// Every event type, in catalogue order.
pub fn all() -> &'static [EventType] {
    CATALOGUE
}

/// The types other systems own (disputes, payouts, participations): when
/// they publish one, the service projects it onto the resource it names
/// before accepting it (contract 10.1, "Events from other systems").
pub const PROJECTED: &[&str] = &[
    "dispute.opened",
    "dispute.closed",
    "payout.paid",
    "payout.failed",
    "participation.invited",
    "participation.accepted",
];

/// Whether another system's event of this type is projected (`PROJECTED`).
pub fn is_projected(name: &str) -> bool {
    PROJECTED.contains(&name)
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

/// The buyer's contact fields, nested: the checkout session resource
/// (`buyer: {email, name}`).
const BUYER_CONTACT: Classes = &[("buyer.email", Contact), ("buyer.name", Contact)];
/// The payment resource: the buyer's contact fields and the card.
const PAYMENT: Classes = &[
    ("buyer.email", Contact),
    ("buyer.name", Contact),
    ("payment_method", PaymentInstrument),
];

fn classes(name: &str, dto_version: u32) -> Classes {
    match (name, dto_version) {
        ("payment.succeeded", 1) => &[
            ("buyer_email", Contact),
            ("buyer_name", Contact),
            ("card_brand", PaymentInstrument),
            ("card_last4", PaymentInstrument),
        ],
        ("payment.succeeded", 2) | ("payment.failed", 1) => PAYMENT,
        ("checkout_session.completed", 1) => BUYER_CONTACT,
        // The order, invoice, entitlement and subscription resources name
        // the buyer by reference only, refunds and disputes the payment;
        // payouts, participations and the test event hold no personal
        // field.
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
