//! The catalogue's example `data` objects: one per type and version, with
//! well-formed references, Money objects and timestamps, and every
//! classified field present (the catalogue's tests hold them to that).
//!
//! The events a payment writes carry their resource as its retrieve answers
//! it (contract 10.1, `docs/checkout.md`); the examples tell one story: Ada
//! pays a one-time checkout session of one product with a visa card, which
//! makes a payment, an order, an invoice and an entitlement (and, for
//! `subscription.started`, a monthly subscription).

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
const CHANGE: &str = "sch_F4gH7jK1lZ5x";
const ENTITLEMENT: &str = "ent_C2vB5nM8qW3e";
const PARTICIPATION: &str = "ptc_R6tY9uI2oP4a";
const STORED_METHOD: &str = "spm_S7dF1gH4jK8l";
const PRICE: &str = "pri_Z3xC6vB9nM2q";
const NEW_PRICE: &str = "pri_W5eR8tY1uI4o";
const OFFER: &str = "ofr_P7aS2dF5gH8j";

/// The session was created a few minutes before it was paid; it would have
/// expired 24 hours later.
const SESSION_CREATED: &str = "2026-11-22T10:01:12.345Z";
const SESSION_EXPIRES: &str = "2026-11-23T10:01:12.345Z";
const CREATED: &str = "2026-11-22T10:04:05.123Z";
const CAPTURED: &str = "2026-11-22T10:04:07.456Z";
const PERIOD_END: &str = "2026-12-22T10:04:07.456Z";

fn money(value: &str) -> Value {
    json!({"currency": "EUR", "unit": "minor", "value": value})
}

/// The buyer as the session and the payment hold it (the `buy_` reference
/// sits beside it, as `buyer_ref`).
fn buyer_contact() -> Value {
    json!({"email": "ada@example.com", "name": "Ada Lovelace"})
}

/// Contact fields with the reference inside, as the types issue 17 left
/// alone (refunds, disputes, subscription changes, revocations) carry them.
fn buyer() -> Value {
    json!({"buyer_ref": BUYER, "email": "ada@example.com", "name": "Ada Lovelace"})
}

fn card() -> Value {
    json!({"brand": "visa", "last4": "4242", "exp_month": 12, "exp_year": 2030})
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
        ("refund.created" | "refund.succeeded" | "refund.canceled", 1) => {
            let (status, at) = match name {
                "refund.created" => ("pending", "created_at"),
                "refund.succeeded" => ("succeeded", "succeeded_at"),
                _ => ("canceled", "canceled_at"),
            };
            let mut r = json!({
                "refund_ref": REFUND, "payment_intent_ref": PAYMENT, "capture_ref": CAPTURE,
                "amount": money("999"), "scope": "partial", "reason": "requested_by_customer",
                "access_effect": "retain", "status": status, "cancelable": false,
                "scheduled_at": null, "product_refs": [PRODUCT], "buyer": buyer()
            });
            r[at] = json!(CAPTURED);
            r
        }
        ("dispute.opened" | "dispute.closed", 1) => {
            let closed = name == "dispute.closed";
            json!({
                "dispute_ref": DISPUTE, "payment_intent_ref": PAYMENT, "kind": "chargeback",
                "status": if closed { "won" } else { "needs_response" },
                "reason_safe": "fraudulent", "amount": money("1999"),
                "opened_at": CREATED, "evidence_due_at": "2026-11-29T10:04:05.123Z",
                "closed_at": if closed { json!(CAPTURED) } else { Value::Null },
                "buyer": buyer(), "payment_method": {"type": "card", "card": card()}
            })
        }
        ("payout.paid" | "payout.failed", 1) => {
            let paid = name == "payout.paid";
            json!({
                "payout_ref": PAYOUT, "beneficiary_business_ref": BUSINESS,
                "amount": money("100000"), "fee": money("250"), "net": money("99750"),
                "status": if paid { "paid" } else { "failed" },
                "destination_last4": "6789",
                "failure_code": if paid { Value::Null } else { json!("account_closed") },
                "created_at": CREATED,
                "arrived_at": if paid { json!(CAPTURED) } else { Value::Null }
            })
        }
        ("invoice.paid", 1) => json!({
            "invoice_ref": INVOICE, "number": "2026-000042", "order_ref": ORDER,
            "buyer_ref": BUYER, "subscription_ref": null, "amount_total": money("1999"),
            "status": "paid", "issued_at": CAPTURED, "paid_at": CAPTURED,
            "created_at": CAPTURED, "etag": etag(INVOICE, 1)
        }),
        ("order.created", 1) => json!({
            "order_ref": ORDER, "checkout_session_ref": SESSION, "buyer_ref": BUYER,
            "payment_intent_ref": PAYMENT, "line_items": line_items(),
            "amount_total": money("1999"), "status": "paid", "created_at": CAPTURED,
            "updated_at": CAPTURED, "etag": etag(ORDER, 1)
        }),
        ("subscription.started", 1) => json!({
            "subscription_ref": SUBSCRIPTION, "buyer_ref": BUYER, "price_ref": PRICE,
            "product_ref": PRODUCT, "status": "active", "current_period_start": CAPTURED,
            "current_period_end": PERIOD_END, "stored_payment_method_ref": STORED_METHOD,
            "started_at": CAPTURED, "canceled_at": null, "created_at": CAPTURED,
            "etag": etag(SUBSCRIPTION, 1)
        }),
        ("subscription.changed", 1) => json!({
            "subscription_ref": SUBSCRIPTION, "subscription_change_ref": CHANGE,
            "status": "active", "previous_price_ref": PRICE, "price_ref": NEW_PRICE,
            "amount": money("1499"), "interval": "month", "changed_at": CAPTURED,
            "product_refs": [PRODUCT], "buyer": buyer()
        }),
        ("subscription.canceled", 1) => json!({
            "subscription_ref": SUBSCRIPTION, "status": "canceled",
            "cancellation_reason": "requested_by_buyer", "canceled_at": CAPTURED,
            "product_refs": [PRODUCT], "buyer": buyer()
        }),
        ("entitlement.granted", 1) => json!({
            "entitlement_ref": ENTITLEMENT, "buyer_ref": BUYER, "product_ref": PRODUCT,
            "order_ref": ORDER, "status": "active", "granted_at": CAPTURED,
            "revoked_at": null, "created_at": CAPTURED, "etag": etag(ENTITLEMENT, 1)
        }),
        ("entitlement.revoked", 1) => json!({
            "entitlement_ref": ENTITLEMENT, "product_ref": PRODUCT,
            "product_refs": [PRODUCT], "order_ref": ORDER, "subscription_ref": null,
            "status": "revoked", "granted_at": CREATED, "revoked_at": CAPTURED,
            "buyer": buyer()
        }),
        ("participation.invited" | "participation.accepted", 1) => {
            let accepted = name == "participation.accepted";
            json!({
                "participation_ref": PARTICIPATION, "beneficiary_business_ref": BUSINESS,
                "status": if accepted { "accepted" } else { "invited" },
                "invited_at": CREATED,
                "accepted_at": if accepted { json!(CAPTURED) } else { Value::Null },
                "terms_digest": if accepted {
                    json!("9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08")
                } else { Value::Null },
                "invitee": {"email": "finance@example.org", "name": "Grace Hopper"}
            })
        }
        ("webhook.test", 1) => json!({
            "message": "This is a test delivery from the billing service.",
            "sent_at": CREATED
        }),
        _ => return None,
    })
}
