//! The catalogue's example `data` objects: one per type and version, with
//! well-formed references, Money objects and timestamps, and every
//! classified field present (the catalogue's tests hold them to that).
//!
//! Each event carries its resource as its retrieve answers it (contract
//! 10.1, "Events are the resource"; `docs/checkout.md`, `interface.md`),
//! every field present, null where empty. The examples tell one story: Ada
//! pays a one-time checkout session of one product with a visa card, which
//! makes a payment, an order, an invoice and an entitlement (and, for
//! `subscription.started`, a monthly subscription). Three days later she
//! asks for her money back: a full refund that revokes her access, created
//! `pending` and then settled (`refund.succeeded`, or `refund.failed`; its
//! `entitlement.revoked` follows the success). A refund scheduled instead
//! is canceled when her bank opens a chargeback on the payment the next
//! day (`refund.canceled`, `dispute.opened`), which the merchant later wins
//! (`dispute.closed`). Apart from her, a beneficiary business is invited to
//! participate, accepts its terms and is paid out (or its payout fails).

use crate::etag::etag;
use serde_json::{json, Value};

const BUYER: &str = "buy_7Rk2Wd9Lq4Zs";
const PRODUCT: &str = "prd_N5xP3cV8bT1m";
const PAYMENT: &str = "pay_X8mB2nQ5wE7r";
const FAILED_PAYMENT: &str = "pay_G3hJ6kL9zX2c";
const SESSION: &str = "cs_T4yU1iO9pA3s";
const CONFIG: &str = "cco_L6kJ8hG2fD5s";
const JOURNEY: &str = "jrn_Z1xC4vB7nM9q";
const ORDER: &str = "ord_W3eR6tY9uI2o";
const INVOICE: &str = "inv_P5aS8dF1gH4j";
const CAPTURE: &str = "cap_K7lZ3xC6vB9n";
const REFUND: &str = "ref_M2qW5eR8tY1u";
const DISPUTE: &str = "dsp_I4oP7aS1dF3g";
const PAYOUT: &str = "wd_H6jK9lZ2xC5v";
const BUSINESS: &str = "biz_B8nM1qW4eR7t";
const SUBSCRIPTION: &str = "sub_Y9uI3oP6aS2d";
const ENTITLEMENT: &str = "ent_C2vB5nM8qW3e";
const PARTICIPATION: &str = "ptc_R6tY9uI2oP4a";
const STORED_METHOD: &str = "spm_S7dF1gH4jK8l";
const PRICE: &str = "pri_Z3xC6vB9nM2q";
const NEW_PRICE: &str = "pri_W5eR8tY1uI4o";
const OFFER: &str = "ofr_P7aS2dF5gH8j";
const ENDPOINT: &str = "whep_D3fG6hJ9kL2z";
const DELIVERY: &str = "whd_X5cV8bN1mQ4w";
const EVENT: &str = "evt_E7rT2yU5iO8p";

/// The session was created a few minutes before it was paid; it would have
/// expired 24 hours later.
const SESSION_CREATED: &str = "2026-11-22T10:01:12.345Z";
const SESSION_EXPIRES: &str = "2026-11-23T10:01:12.345Z";
const CREATED: &str = "2026-11-22T10:04:05.123Z";
const CAPTURED: &str = "2026-11-22T10:04:07.456Z";
const PERIOD_END: &str = "2026-12-22T10:04:07.456Z";
/// The renewal a month later, and the period it starts.
const NEXT_PERIOD_END: &str = "2027-01-22T10:04:07.456Z";
const RENEWAL_INVOICE: &str = "inv_Q2wE4rT6yU8i";
/// The refund: requested three days later, settled by the processor
/// within two seconds; the scheduled variant would have run on
/// `REFUND_SCHEDULED`, but the dispute opening canceled it.
const REFUND_REQUESTED: &str = "2026-11-25T09:15:30.000Z";
const REFUND_EXECUTED: &str = "2026-11-25T09:15:31.789Z";
const REFUND_SCHEDULED: &str = "2026-12-01T09:00:00.000Z";
/// The dispute: evidence is due seven days after it opened.
const DISPUTE_OPENED: &str = "2026-11-26T16:20:45.000Z";
const EVIDENCE_DUE: &str = "2026-12-03T16:20:45.000Z";
const DISPUTE_RESOLVED: &str = "2026-12-10T11:02:33.000Z";
const PAYOUT_REQUESTED: &str = "2026-11-30T08:00:00.000Z";
const PAYOUT_COMPLETED: &str = "2026-12-01T09:30:12.000Z";
const INVITED: &str = "2026-11-02T14:00:00.000Z";
const ACCEPTED: &str = "2026-11-03T08:45:19.000Z";

fn money(value: &str) -> Value {
    json!({"currency": "EUR", "unit": "minor", "value": value})
}

/// The buyer as the session and the payment hold it (the `buy_` reference
/// sits beside it, as `buyer_ref`).
fn buyer_contact() -> Value {
    json!({"email": "ada@example.com", "name": "Ada Lovelace"})
}

/// The session's line items, priced when it was created.
fn line_items() -> Value {
    json!([{
        "offer_ref": OFFER, "price_ref": PRICE, "product_ref": PRODUCT,
        "quantity": 1, "unit_amount": money("1999"), "amount": money("1999")
    }])
}

/// The payment resource (`retrievePayment`): `succeeded`, or `failed` with
/// the declined sandbox card.
fn payment(succeeded: bool) -> Value {
    let (reference, status, failure_code, last4, captured_at) = if succeeded {
        (PAYMENT, "succeeded", Value::Null, "4242", json!(CAPTURED))
    } else {
        (
            FAILED_PAYMENT,
            "failed",
            json!("card_declined"),
            "0002",
            Value::Null,
        )
    };
    json!({
        "payment_ref": reference, "payment_intent_ref": reference,
        "checkout_session_ref": SESSION,
        // A failed payment of a buyer not known yet names none.
        "buyer_ref": if succeeded { json!(BUYER) } else { Value::Null },
        "buyer": buyer_contact(),
        "amount": money("1999"), "amount_refunded": money("0"),
        "status": status, "failure_code": failure_code,
        "payment_method": {
            "type": "card", "brand": "visa", "last4": last4,
            "exp_month": 12, "exp_year": 2030
        },
        "stored_payment_method_ref": null, "product_refs": [PRODUCT],
        "next_action": null, "captured_at": captured_at, "created_at": CREATED,
        "etag": etag(reference, 1)
    })
}

/// The refund resource (`retrieveRefund`) of Ada's payment, in the state
/// each refund event leaves it: `refund.created` pending, settled as
/// `refund.succeeded` or `refund.failed`, or, scheduled, `refund.canceled`.
fn refund(name: &str) -> Value {
    let status = match name {
        "refund.created" => "pending",
        "refund.succeeded" => "succeeded",
        "refund.failed" => "failed",
        _ => "canceled",
    };
    let mut r = json!({
        "refund_ref": REFUND, "payment_intent_ref": PAYMENT, "capture_ref": CAPTURE,
        "status": status, "scope": "full", "amount": money("1999"),
        "reason": "requested_by_customer", "access_effect": "revoke",
        // Only a scheduled refund can still be canceled.
        "cancelable": status == "scheduled",
        "requested_at": REFUND_REQUESTED, "scheduled_at": null, "executed_at": null,
        "canceled_at": null, "created_at": REFUND_REQUESTED,
        "updated_at": REFUND_REQUESTED, "etag": etag(REFUND, 1)
    });
    match status {
        "pending" => {}
        "canceled" => {
            r["scheduled_at"] = json!(REFUND_SCHEDULED);
            r["canceled_at"] = json!(DISPUTE_OPENED);
            r["updated_at"] = json!(DISPUTE_OPENED);
            r["etag"] = json!(etag(REFUND, 2));
        }
        _ => {
            r["executed_at"] = json!(REFUND_EXECUTED);
            r["updated_at"] = json!(REFUND_EXECUTED);
            r["etag"] = json!(etag(REFUND, 2));
        }
    }
    r
}

/// The dispute resource (`retrieveDispute`) as projected from the
/// processor's event: opened, or closed (won). Its `reason_safe` is the
/// upstream reason made safe; the raw reason is never delivered.
fn dispute(closed: bool) -> Value {
    json!({
        "dispute_ref": DISPUTE, "payment_intent_ref": PAYMENT, "amount": money("1999"),
        "kind": "chargeback",
        "status": if closed { "won" } else { "needs_response" },
        "reason_safe": "The cardholder does not recognise this payment.",
        "opened_at": DISPUTE_OPENED, "evidence_due_at": EVIDENCE_DUE,
        "resolved_at": if closed { json!(DISPUTE_RESOLVED) } else { Value::Null },
        "etag": etag(DISPUTE, if closed { 2 } else { 1 })
    })
}

/// The payout resource (`retrievePayout`): paid, or failed (it never
/// completed).
fn payout(paid: bool) -> Value {
    json!({
        "payout_ref": PAYOUT, "beneficiary_business_ref": BUSINESS,
        "status": if paid { "paid" } else { "failed" },
        "amount": money("100000"), "fee": money("250"), "net": money("99750"),
        "method_key": "sepa_credit_transfer", "destination_label": "Main business account",
        "destination_last4": "6789", "requested_at": PAYOUT_REQUESTED,
        "completed_at": if paid { json!(PAYOUT_COMPLETED) } else { Value::Null },
        "etag": etag(PAYOUT, 1)
    })
}

/// The participation resource (`retrieveParticipation`): invited to terms
/// version 1, or having accepted them (`terms_digest`, the SHA-256 of the
/// accepted text, is set on acceptance).
fn participation(accepted: bool) -> Value {
    let digest = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
    json!({
        "participation_ref": PARTICIPATION, "beneficiary_business_ref": BUSINESS,
        "status": if accepted { "accepted" } else { "invited" },
        "invited_at": INVITED,
        "accepted_at": if accepted { json!(ACCEPTED) } else { Value::Null },
        "terms_version": 1,
        "terms_digest": if accepted { json!(digest) } else { Value::Null },
        "etag": etag(PARTICIPATION, if accepted { 2 } else { 1 })
    })
}

/// The entitlement resource (`retrieveEntitlement`): granted with the
/// payment, or revoked when the refund (`access_effect: revoke`) succeeded.
fn entitlement(revoked: bool) -> Value {
    json!({
        "entitlement_ref": ENTITLEMENT, "buyer_ref": BUYER, "product_ref": PRODUCT,
        "order_ref": ORDER, "status": if revoked { "revoked" } else { "active" },
        "granted_at": CAPTURED,
        "revoked_at": if revoked { json!(REFUND_EXECUTED) } else { Value::Null },
        "created_at": CAPTURED, "etag": etag(ENTITLEMENT, if revoked { 2 } else { 1 })
    })
}

/// Where Ada's monthly subscription is in its life.
enum Life {
    Started,
    /// Renewed a month later.
    Renewed,
    /// The renewal was declined.
    PastDue,
    /// She canceled it at once.
    Canceled,
    /// It started with a trial that ends at `PERIOD_END`, 3 days away.
    TrialWillEnd,
}

/// The subscription resource (`retrieveSubscription`) at each point of its
/// life.
fn subscription(life: Life) -> Value {
    let (status, start, end, canceled_at, reason, version) = match life {
        Life::Started => ("active", CAPTURED, PERIOD_END, Value::Null, Value::Null, 1),
        Life::Renewed => (
            "active",
            PERIOD_END,
            NEXT_PERIOD_END,
            Value::Null,
            Value::Null,
            2,
        ),
        Life::PastDue => (
            "past_due",
            PERIOD_END,
            NEXT_PERIOD_END,
            Value::Null,
            Value::Null,
            2,
        ),
        Life::Canceled => (
            "canceled",
            CAPTURED,
            PERIOD_END,
            json!(REFUND_REQUESTED),
            json!("requested"),
            2,
        ),
        Life::TrialWillEnd => (
            "trialing",
            CAPTURED,
            PERIOD_END,
            Value::Null,
            Value::Null,
            1,
        ),
    };
    let trial_end = match life {
        Life::TrialWillEnd => json!(PERIOD_END),
        _ => Value::Null,
    };
    json!({
        "subscription_ref": SUBSCRIPTION, "buyer_ref": BUYER, "price_ref": PRICE,
        "product_ref": PRODUCT, "status": status, "current_period_start": start,
        "current_period_end": end, "stored_payment_method_ref": STORED_METHOD,
        "started_at": CAPTURED, "canceled_at": canceled_at, "cancel_at_period_end": false,
        "cancel_reason": reason, "test_clock_ref": null, "trial_end": trial_end,
        "pending_invoice_lines": [],
        "created_at": CAPTURED, "etag": etag(SUBSCRIPTION, version)
    })
}

pub(super) fn example(name: &str, dto_version: u32) -> Option<Value> {
    Some(match (name, dto_version) {
        ("checkout_session.completed", 1) => json!({
            "checkout_session_ref": SESSION, "config_ref": CONFIG, "config_version": 3,
            "status": "complete", "mode": "payment", "buyer": buyer_contact(),
            "buyer_ref": BUYER, "journey_ref": JOURNEY, "line_items": line_items(),
            "amount_total": money("1999"),
            "custom_fields": {"delivery_note": "Please leave at the front desk"},
            "payment_intent_ref": PAYMENT, "subscription_ref": null,
            "success_url": "https://shop.example.com/thanks",
            "cancel_url": "https://shop.example.com/cart",
            "expires_at": SESSION_EXPIRES, "completed_at": CAPTURED,
            "created_at": SESSION_CREATED, "etag": etag(SESSION, 2)
        }),
        ("payment.succeeded", 1) => json!({
            "payment_ref": PAYMENT, "amount": money("1999"), "status": "succeeded",
            "captured_at": CAPTURED, "buyer_ref": BUYER, "buyer_email": "ada@example.com",
            "buyer_name": "Ada Lovelace", "card_brand": "visa", "card_last4": "4242",
            "product_refs": [PRODUCT]
        }),
        ("payment.succeeded", 2) => payment(true),
        ("payment.failed", 1) => payment(false),
        ("refund.created" | "refund.succeeded" | "refund.failed" | "refund.canceled", 1) => {
            refund(name)
        }
        ("dispute.opened" | "dispute.closed", 1) => dispute(name == "dispute.closed"),
        ("payout.paid" | "payout.failed", 1) => payout(name == "payout.paid"),
        ("invoice.paid", 1) => json!({
            "invoice_ref": INVOICE, "number": "2026-000042", "order_ref": ORDER,
            "buyer_ref": BUYER, "subscription_ref": null,
            "lines": [{
                "kind": "item", "amount": money("1999"), "price_ref": PRICE,
                "period_start": null, "period_end": null,
                "description": format!("1 × {PRODUCT}")
            }],
            "amount_total": money("1999"),
            "status": "paid", "issued_at": CAPTURED, "paid_at": CAPTURED,
            "payment_intent_ref": PAYMENT, "attempt_count": 1,
            "created_at": CAPTURED, "etag": etag(INVOICE, 1)
        }),
        ("invoice.payment_failed", 1) => json!({
            "invoice_ref": RENEWAL_INVOICE, "number": "2026-000043", "order_ref": ORDER,
            "buyer_ref": BUYER, "subscription_ref": SUBSCRIPTION,
            "lines": [{
                "kind": "period", "amount": money("1999"), "price_ref": PRICE,
                "period_start": PERIOD_END, "period_end": NEXT_PERIOD_END,
                "description": format!("1 × {PRODUCT} (monthly)")
            }],
            "amount_total": money("1999"),
            "status": "open", "issued_at": PERIOD_END, "paid_at": null,
            "payment_intent_ref": null, "attempt_count": 1,
            "created_at": PERIOD_END, "etag": etag(RENEWAL_INVOICE, 1)
        }),
        ("order.created", 1) => json!({
            "order_ref": ORDER, "checkout_session_ref": SESSION, "buyer_ref": BUYER,
            "payment_intent_ref": PAYMENT, "line_items": line_items(),
            "amount_total": money("1999"), "status": "paid", "created_at": CAPTURED,
            "updated_at": CAPTURED, "etag": etag(ORDER, 1)
        }),
        ("subscription.started", 1) => subscription(Life::Started),
        ("subscription.renewed", 1) => subscription(Life::Renewed),
        ("subscription.past_due", 1) => subscription(Life::PastDue),
        ("subscription.canceled", 1) => subscription(Life::Canceled),
        ("subscription.trial_will_end", 1) => subscription(Life::TrialWillEnd),
        ("subscription.changed", 1) => {
            // She moved to another price mid-period (contract 14.2).
            let mut data = subscription(Life::Started);
            data["price_ref"] = json!(NEW_PRICE);
            data["etag"] = json!(etag(SUBSCRIPTION, 2));
            data["from_price_ref"] = json!(PRICE);
            data["to_price_ref"] = json!(NEW_PRICE);
            data
        }
        ("entitlement.granted", 1) => entitlement(false),
        ("entitlement.revoked", 1) => entitlement(true),
        ("participation.invited" | "participation.accepted", 1) => {
            participation(name == "participation.accepted")
        }
        ("webhook_endpoint.failing", 1) => endpoint(json!({
            "health": "failing", "disable_at": "2026-11-27T10:04:07.456Z"
        })),
        ("webhook_endpoint.recovered", 1) => endpoint(json!({"health": "healthy"})),
        ("webhook_endpoint.disabled", 1) => endpoint(json!({
            "health": "disabled", "reason": "failing"
        })),
        ("webhook_delivery.failed", 1) => json!({
            "delivery_ref": DELIVERY, "endpoint_ref": ENDPOINT, "event_ref": EVENT,
            "ordering_key": SUBSCRIPTION, "sequence": 4,
            "public_event_type": "invoice.paid", "status": "failed", "waiting_for": null,
            "skipped_at": null, "skip_reason": null, "diagnostic": false, "dto_version": 1,
            "generation": 1, "attempt_count": 8, "next_attempt_at": null,
            "last_attempt_at": "2026-11-23T07:04:07.456Z", "created_at": CAPTURED,
            "updated_at": "2026-11-23T07:04:07.456Z", "etag": etag(DELIVERY, 9)
        }),
        ("webhook.test", 1) => json!({
            "message": "This is a test delivery from the billing service.",
            "sent_at": CREATED
        }),
        _ => return None,
    })
}

/// An endpoint as `retrieveWebhookEndpoint` shows it, with `extra` fields
/// (an operational event's health, `disable_at` or `reason`).
fn endpoint(extra: Value) -> Value {
    let mut e = json!({
        "endpoint_ref": ENDPOINT, "environment_ref": "env_A1sD4fG7hJ0k",
        "url": "https://hooks.example.com/billing", "description": "Fulfilment",
        "url_immutable": true, "ordering": "per_key", "rate_limit": null,
        "max_in_flight": 100, "status": "active",
        "secret_versions": [{"version": 1, "status": "active", "created_at": SESSION_CREATED,
            "expires_at": null, "secret_hint": "whsec_…k9Qz"}],
        "created_at": SESSION_CREATED, "updated_at": "2026-11-25T09:15:31.789Z",
        "etag": etag(ENDPOINT, 4)
    });
    if let (Some(e), Value::Object(extra)) = (e.as_object_mut(), extra) {
        e.extend(extra);
    }
    e
}
