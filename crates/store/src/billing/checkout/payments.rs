//! Payments (one per pay call) and captures (one per succeeded payment).

use super::{at, opt_reference, reference, state};
use crate::billing::{minor, money, money_in};
use crate::db::codec::opt_ts;
use crate::db::codec::{json_col, to_json};
use crate::db::tx::{int, single, text, Columns, WriteTx};
use crate::resource::Resource;
use crate::StoreError;
use domain::checkout::sandbox::Card;
use domain::checkout::states::{FailureCode, PaymentStatus};
use domain::{Money, Prefix, Ref, Timestamp};

#[derive(Debug, Clone)]
pub struct PaymentRecord {
    pub payment_intent_ref: Ref,
    pub environment_ref: Ref,
    pub checkout_session_ref: Ref,
    pub buyer_ref: Option<Ref>,
    pub buyer_email: String,
    pub buyer_name: Option<String>,
    pub amount: Money,
    pub amount_refunded: Money,
    pub status: PaymentStatus,
    pub failure_code: Option<FailureCode>,
    /// The payment method as given: a sandbox card (`pm_card_…`) or a
    /// stored method (`spm_…`).
    pub method: String,
    pub card: Card,
    pub save_method: bool,
    pub stored_payment_method_ref: Option<Ref>,
    pub product_refs: Vec<String>,
    /// While `requires_action`: until when authentication may finish it.
    pub action_expires_at: Option<Timestamp>,
    pub captured_at: Option<Timestamp>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub version: i64,
}

impl Resource for PaymentRecord {
    const TABLE: &'static str = "payments";
    const REF_COLUMN: &'static str = "payment_intent_ref";
    const FILTERS: &'static [(&'static str, &'static str)] =
        &[("status", "status"), ("buyer_ref", "buyer_ref")];

    fn decode(row: &dyn Columns) -> Result<Self, StoreError> {
        let failure_code = row
            .text("failure_code")?
            .map(|c| FailureCode::parse(&c).ok_or(StoreError::Corrupt(c)))
            .transpose()?;
        let amount = money(row, "currency", "amount_minor")?;
        Ok(PaymentRecord {
            payment_intent_ref: reference(row, "payment_intent_ref")?,
            environment_ref: reference(row, "environment_ref")?,
            checkout_session_ref: reference(row, "checkout_session_ref")?,
            buyer_ref: opt_reference(row, "buyer_ref")?,
            buyer_email: text(row, "buyer_email")?,
            buyer_name: row.text("buyer_name")?,
            amount,
            amount_refunded: money_in(row, amount.currency(), "amount_refunded_minor")?,
            status: state(row, "status", PaymentStatus::parse)?,
            failure_code,
            method: text(row, "method")?,
            card: json_col(row, "card")?,
            save_method: int(row, "save_method")? != 0,
            stored_payment_method_ref: opt_reference(row, "stored_payment_method_ref")?,
            product_refs: json_col(row, "product_refs")?,
            action_expires_at: opt_ts(row, "action_expires_at")?,
            captured_at: opt_ts(row, "captured_at")?,
            created_at: at(row, "created_at")?,
            updated_at: at(row, "updated_at")?,
            version: int(row, "version")?,
        })
    }
}

/// A payment to record, as the processor answered.
pub struct NewPayment<'a> {
    pub checkout_session_ref: &'a Ref,
    pub buyer_ref: Option<&'a Ref>,
    pub buyer_email: &'a str,
    pub buyer_name: Option<&'a str>,
    pub amount: Money,
    pub status: PaymentStatus,
    pub failure_code: Option<FailureCode>,
    pub method: &'a str,
    pub card: &'a Card,
    pub save_method: bool,
    pub stored_payment_method_ref: Option<&'a Ref>,
    pub product_refs: &'a [String],
    pub action_expires_at: Option<Timestamp>,
    pub captured_at: Option<Timestamp>,
    /// When it is written: the wall clock, or its test clock's time.
    pub at: Timestamp,
}

pub async fn create(
    tx: &mut WriteTx,
    environment_ref: &Ref,
    new: NewPayment<'_>,
) -> Result<PaymentRecord, StoreError> {
    let now = new.at.millis();
    let rows = tx
        .fetch(
            "INSERT INTO payments (payment_intent_ref, environment_ref, checkout_session_ref, \
             buyer_ref, buyer_email, buyer_name, currency, amount_minor, status, failure_code, \
             method, card, save_method, stored_payment_method_ref, product_refs, \
             action_expires_at, captured_at, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, \
             $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $18) RETURNING *",
            &[
                Ref::generate(Prefix::Payment).as_str().into(),
                environment_ref.as_str().into(),
                new.checkout_session_ref.as_str().into(),
                new.buyer_ref.map(Ref::as_str).into(),
                new.buyer_email.into(),
                new.buyer_name.into(),
                new.amount.currency().as_str().into(),
                minor(new.amount).into(),
                new.status.as_str().into(),
                new.failure_code.map(|c| c.as_str()).into(),
                new.method.into(),
                to_json(new.card).as_str().into(),
                i64::from(new.save_method).into(),
                new.stored_payment_method_ref.map(Ref::as_str).into(),
                to_json(&new.product_refs).as_str().into(),
                new.action_expires_at.map(Timestamp::millis).into(),
                new.captured_at.map(Timestamp::millis).into(),
                now.into(),
            ],
        )
        .await?;
    PaymentRecord::decode(single(&rows)?)
}

/// How authentication finished a payment that required it.
pub struct Finish<'a> {
    pub status: PaymentStatus,
    pub failure_code: Option<FailureCode>,
    pub buyer_ref: Option<&'a Ref>,
    pub stored_payment_method_ref: Option<&'a Ref>,
    pub captured_at: Option<Timestamp>,
    pub at: Timestamp,
}

/// Finishes a `requires_action` payment still at its read version.
pub async fn finish(
    tx: &mut WriteTx,
    current: &PaymentRecord,
    finish: Finish<'_>,
) -> Result<PaymentRecord, StoreError> {
    let rows = tx
        .fetch(
            "UPDATE payments SET status = $1, failure_code = $2, buyer_ref = $3, \
             stored_payment_method_ref = $4, captured_at = $5, action_expires_at = NULL, \
             updated_at = $6, version = version + 1 \
             WHERE payment_intent_ref = $7 AND version = $8 RETURNING *",
            &[
                finish.status.as_str().into(),
                finish.failure_code.map(|c| c.as_str()).into(),
                finish.buyer_ref.map(Ref::as_str).into(),
                finish.stored_payment_method_ref.map(Ref::as_str).into(),
                finish.captured_at.map(Timestamp::millis).into(),
                finish.at.millis().into(),
                current.payment_intent_ref.as_str().into(),
                current.version.into(),
            ],
        )
        .await?;
    PaymentRecord::decode(rows.first().ok_or(StoreError::Conflict)?)
}

#[derive(Debug, Clone)]
pub struct CaptureRecord {
    pub capture_ref: Ref,
    pub environment_ref: Ref,
    pub payment_intent_ref: Ref,
    pub amount: Money,
    pub amount_refunded: Money,
    pub captured_at: Timestamp,
    pub created_at: Timestamp,
    pub version: i64,
}

impl Resource for CaptureRecord {
    const TABLE: &'static str = "captures";
    const REF_COLUMN: &'static str = "capture_ref";
    const FILTERS: &'static [(&'static str, &'static str)] =
        &[("payment_intent_ref", "payment_intent_ref")];

    fn decode(row: &dyn Columns) -> Result<Self, StoreError> {
        let amount = money(row, "currency", "amount_minor")?;
        Ok(CaptureRecord {
            capture_ref: reference(row, "capture_ref")?,
            environment_ref: reference(row, "environment_ref")?,
            payment_intent_ref: reference(row, "payment_intent_ref")?,
            amount,
            amount_refunded: money_in(row, amount.currency(), "amount_refunded_minor")?,
            captured_at: at(row, "captured_at")?,
            created_at: at(row, "created_at")?,
            version: int(row, "version")?,
        })
    }
}

/// Captures a succeeded payment's whole amount.
pub async fn capture(
    tx: &mut WriteTx,
    payment: &PaymentRecord,
    captured_at: Timestamp,
) -> Result<CaptureRecord, StoreError> {
    let rows = tx
        .fetch(
            "INSERT INTO captures (capture_ref, environment_ref, payment_intent_ref, currency, \
             amount_minor, captured_at, created_at) VALUES ($1, $2, $3, $4, $5, $6, $6) \
             RETURNING *",
            &[
                Ref::generate(Prefix::Capture).as_str().into(),
                payment.environment_ref.as_str().into(),
                payment.payment_intent_ref.as_str().into(),
                payment.amount.currency().as_str().into(),
                minor(payment.amount).into(),
                captured_at.millis().into(),
            ],
        )
        .await?;
    CaptureRecord::decode(single(&rows)?)
}
