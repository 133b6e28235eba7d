//! The catalogue's example `data` objects: one per type and version, with
//! well-formed references, Money objects and timestamps, and every
//! classified field present (the catalogue's tests hold them to that).

use serde_json::{json, Value};

const BUYER: &str = "buy_7Rk2Wd9Lq4Zs";
const PRODUCT: &str = "prd_N5xP3cV8bT1m";
const PAYMENT: &str = "pay_X8mB2nQ5wE7r";
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
const CUSTOM_FIELD: &str = "cf_K1lZ4xC7vB3n";

const CREATED: &str = "2026-11-22T10:04:05.123Z";
const CAPTURED: &str = "2026-11-22T10:04:07.456Z";

fn money(value: &str) -> Value {
    json!({"currency": "EUR", "unit": "minor", "value": value})
}

fn buyer() -> Value {
    json!({"buyer_ref": BUYER, "email": "ada@example.com", "name": "Ada Lovelace"})
}

fn buyer_full() -> Value {
    let mut b = buyer();
    b["billing_address"] = json!({
        "line1": "12 Market Street", "line2": null, "city": "Berlin",
        "postal_code": "10115", "region": null, "country": "DE"
    });
    b["tax_id"] = json!("DE123456789");
    b
}

fn card() -> Value {
    json!({"brand": "visa", "last4": "4242", "exp_month": 12, "exp_year": 2030})
}

fn custom_fields() -> Value {
    json!({ CUSTOM_FIELD: "Please leave at the front desk" })
}

pub(super) fn example(name: &str, dto_version: u32) -> Option<Value> {
    Some(match (name, dto_version) {
        ("checkout_session.completed", 1) => json!({
            "checkout_session_ref": SESSION, "config_ref": CONFIG, "config_version": 3,
            "status": "complete", "amount_total": money("1999"),
            "payment_intent_ref": PAYMENT, "subscription_ref": null, "journey_ref": JOURNEY,
            "product_refs": [PRODUCT], "buyer": buyer_full(),
            "completed_at": CAPTURED, "custom_fields": custom_fields()
        }),
        ("payment.succeeded", 1) => json!({
            "payment_ref": PAYMENT, "amount": money("1999"), "status": "succeeded",
            "captured_at": CAPTURED, "buyer_ref": BUYER, "buyer_email": "ada@example.com",
            "buyer_name": "Ada Lovelace", "card_brand": "visa", "card_last4": "4242",
            "product_refs": [PRODUCT]
        }),
        ("payment.succeeded", 2) => json!({
            "payment": {
                "payment_ref": PAYMENT, "amount": money("1999"), "status": "succeeded",
                "captured_at": CAPTURED
            },
            "buyer": buyer(),
            "payment_method": {"card": card()},
            "product_refs": [PRODUCT]
        }),
        ("payment.failed", 1) => json!({
            "payment_ref": PAYMENT, "checkout_session_ref": SESSION, "amount": money("1999"),
            "status": "failed", "failure_code": "card_declined",
            "failure_message": "The card was declined.", "failed_at": CAPTURED,
            "product_refs": [PRODUCT], "buyer": buyer(),
            "payment_method": {"type": "card", "card": card()}
        }),
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
            "payment_intent_ref": PAYMENT, "subscription_ref": SUBSCRIPTION,
            "amount_due": money("1999"), "amount_paid": money("1999"), "status": "paid",
            "paid_at": CAPTURED, "product_refs": [PRODUCT], "buyer": buyer_full()
        }),
        ("order.created", 1) => {
            let mut b = buyer_full();
            if let Some(o) = b.as_object_mut() {
                o.remove("tax_id");
            }
            json!({
                "order_ref": ORDER, "checkout_session_ref": SESSION,
                "payment_intent_ref": PAYMENT, "status": "paid",
                "amount_total": money("1999"),
                "line_items": [{
                    "product_ref": PRODUCT, "price_ref": PRICE, "offer_ref": OFFER,
                    "quantity": 1, "amount": money("1999")
                }],
                "product_refs": [PRODUCT], "buyer": b, "created_at": CAPTURED,
                "custom_fields": custom_fields()
            })
        }
        ("subscription.started", 1) => json!({
            "subscription_ref": SUBSCRIPTION, "subscription_change_ref": CHANGE,
            "status": "active", "product_refs": [PRODUCT], "price_ref": PRICE,
            "offer_ref": OFFER, "amount": money("999"), "interval": "month",
            "current_period_start": CAPTURED, "current_period_end": "2026-12-22T10:04:07.456Z",
            "started_at": CAPTURED, "buyer": buyer(),
            "payment_method": {"stored_payment_method_ref": STORED_METHOD, "card": card()}
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
        ("entitlement.granted" | "entitlement.revoked", 1) => {
            let granted = name == "entitlement.granted";
            json!({
                "entitlement_ref": ENTITLEMENT, "product_ref": PRODUCT,
                "product_refs": [PRODUCT], "order_ref": ORDER, "subscription_ref": null,
                "status": if granted { "active" } else { "revoked" },
                "granted_at": CREATED,
                "revoked_at": if granted { Value::Null } else { json!(CAPTURED) },
                "buyer": buyer()
            })
        }
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
