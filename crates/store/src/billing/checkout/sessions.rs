//! Checkout sessions: priced at creation (`PricedItem`s, `amount_total`),
//! `open` until a payment completes them. Expiry is read from the clock
//! (`SessionStatus::effective`); the stored status is `open` or `complete`.

use super::{at, opt_reference, reference, state, PricedItem};
use crate::billing::{minor, money};
use crate::db::codec::opt_ts;
use crate::db::codec::{json_col, to_json};
use crate::db::tx::{int, single, text, Columns, WriteTx};
use crate::resource::{Expiry, Resource};
use crate::StoreError;
use domain::catalogue::checkout_config::ConfigMode;
use domain::checkout::states::SessionStatus;
use domain::{Money, Prefix, Ref, Timestamp};
use std::collections::BTreeMap;

#[derive(Debug, Clone)]
pub struct SessionRecord {
    pub checkout_session_ref: Ref,
    pub environment_ref: Ref,
    pub config_ref: Ref,
    pub config_version: u32,
    /// As stored: `Open` or `Complete` (`effective` reads expiry).
    pub status: SessionStatus,
    pub mode: ConfigMode,
    pub buyer_email: String,
    pub buyer_name: Option<String>,
    pub buyer_ref: Option<Ref>,
    pub journey_ref: Ref,
    pub line_items: Vec<PricedItem>,
    pub amount_total: Money,
    pub custom_fields: BTreeMap<String, String>,
    pub payment_intent_ref: Option<Ref>,
    pub subscription_ref: Option<Ref>,
    pub success_url: String,
    pub cancel_url: Option<String>,
    pub expires_at: Timestamp,
    pub completed_at: Option<Timestamp>,
    /// The test clock the session runs on (contract 12.4).
    pub test_clock_ref: Option<Ref>,
    /// The trial its config version offered when it was made; 0 for none
    /// (contract 14.3).
    pub trial_period_days: u32,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub version: i64,
}

impl SessionRecord {
    /// The status a reader sees at the wall time `now`. A session on a test
    /// clock expires by its clock's time, which moves only when the clock
    /// advances: a read shows its stored status, and pay checks it with
    /// [`SessionRecord::status_at`] at the clock's time.
    pub fn effective_status(&self, now: Timestamp) -> SessionStatus {
        match self.test_clock_ref {
            Some(_) => self.status,
            None => self.status.effective(self.expires_at, now),
        }
    }

    /// The status at `now` in the session's own time (its test clock's, or
    /// the wall clock's).
    pub fn status_at(&self, now: Timestamp) -> SessionStatus {
        self.status.effective(self.expires_at, now)
    }

    /// The distinct products of its line items, in order.
    pub fn product_refs(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for item in &self.line_items {
            if !out.contains(&item.product_ref) {
                out.push(item.product_ref.clone());
            }
        }
        out
    }
}

impl Resource for SessionRecord {
    const TABLE: &'static str = "checkout_sessions";
    const REF_COLUMN: &'static str = "checkout_session_ref";
    const FILTERS: &'static [(&'static str, &'static str)] =
        &[("status", "status"), ("config_ref", "config_ref")];
    const EXPIRY: Option<Expiry> = Some(Expiry {
        column: "expires_at",
        stored: SessionStatus::Open.as_str(),
        reads_as: SessionStatus::Expired.as_str(),
    });

    fn decode(row: &dyn Columns) -> Result<Self, StoreError> {
        let version = int(row, "config_version")?;
        Ok(SessionRecord {
            checkout_session_ref: reference(row, "checkout_session_ref")?,
            environment_ref: reference(row, "environment_ref")?,
            config_ref: reference(row, "config_ref")?,
            config_version: u32::try_from(version)
                .map_err(|_| StoreError::Corrupt(format!("config_version {version}")))?,
            status: state(row, "status", SessionStatus::parse)?,
            mode: state(row, "mode", ConfigMode::parse)?,
            buyer_email: text(row, "buyer_email")?,
            buyer_name: row.text("buyer_name")?,
            buyer_ref: opt_reference(row, "buyer_ref")?,
            journey_ref: reference(row, "journey_ref")?,
            line_items: json_col(row, "line_items")?,
            amount_total: money(row, "currency", "amount_total")?,
            custom_fields: json_col(row, "custom_fields")?,
            payment_intent_ref: opt_reference(row, "payment_intent_ref")?,
            subscription_ref: opt_reference(row, "subscription_ref")?,
            success_url: text(row, "success_url")?,
            cancel_url: row.text("cancel_url")?,
            expires_at: at(row, "expires_at")?,
            completed_at: opt_ts(row, "completed_at")?,
            created_at: at(row, "created_at")?,
            test_clock_ref: opt_reference(row, "test_clock_ref")?,
            trial_period_days: u32::try_from(int(row, "trial_period_days")?)
                .map_err(|_| StoreError::Corrupt("trial_period_days".into()))?,
            updated_at: at(row, "updated_at")?,
            version: int(row, "version")?,
        })
    }
}

/// A session to create.
pub struct NewSession<'a> {
    pub config_ref: &'a Ref,
    pub config_version: u32,
    pub mode: ConfigMode,
    pub buyer_email: &'a str,
    pub buyer_name: Option<&'a str>,
    pub journey_ref: &'a Ref,
    pub line_items: &'a [PricedItem],
    pub amount_total: Money,
    pub custom_fields: &'a BTreeMap<String, String>,
    pub success_url: &'a str,
    pub cancel_url: Option<&'a str>,
    pub created_at: Timestamp,
    pub expires_at: Timestamp,
    /// The test clock whose time the session and what its pay makes carry.
    pub test_clock_ref: Option<&'a Ref>,
    /// Its config version's `trial_period_days`.
    pub trial_period_days: u32,
}

pub async fn create(
    tx: &mut WriteTx,
    environment_ref: &Ref,
    new: NewSession<'_>,
) -> Result<SessionRecord, StoreError> {
    let rows = tx
        .fetch(
            "INSERT INTO checkout_sessions (checkout_session_ref, environment_ref, config_ref, \
             config_version, status, mode, buyer_email, buyer_name, journey_ref, line_items, \
             currency, amount_total, custom_fields, success_url, cancel_url, expires_at, \
             created_at, updated_at, test_clock_ref, trial_period_days) VALUES ($1, $2, $3, $4, \
             $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $17, $18, $19) \
             RETURNING *",
            &[
                Ref::generate(Prefix::CheckoutSession).as_str().into(),
                environment_ref.as_str().into(),
                new.config_ref.as_str().into(),
                i64::from(new.config_version).into(),
                SessionStatus::Open.as_str().into(),
                new.mode.as_str().into(),
                new.buyer_email.into(),
                new.buyer_name.into(),
                new.journey_ref.as_str().into(),
                to_json(&new.line_items).as_str().into(),
                new.amount_total.currency().as_str().into(),
                minor(new.amount_total).into(),
                to_json(new.custom_fields).as_str().into(),
                new.success_url.into(),
                new.cancel_url.into(),
                new.expires_at.millis().into(),
                new.created_at.millis().into(),
                new.test_clock_ref.map(Ref::as_str).into(),
                i64::from(new.trial_period_days).into(),
            ],
        )
        .await?;
    SessionRecord::decode(single(&rows)?)
}

/// Takes the session for a pay, first thing in its unit of work: bumps its
/// version if it is still open and at its read version, so that of
/// concurrent pays one goes on and the others stop here (`Conflict`) before
/// they write anything else. The row stays locked until the unit of work
/// ends.
pub async fn claim(tx: &mut WriteTx, current: &SessionRecord) -> Result<SessionRecord, StoreError> {
    let rows = tx
        .fetch(
            "UPDATE checkout_sessions SET version = version + 1 \
             WHERE checkout_session_ref = $1 AND version = $2 AND status = $3 RETURNING *",
            &[
                current.checkout_session_ref.as_str().into(),
                current.version.into(),
                SessionStatus::Open.as_str().into(),
            ],
        )
        .await?;
    SessionRecord::decode(rows.first().ok_or(StoreError::Conflict)?)
}

/// What a pay leaves on its session.
pub struct Attempt<'a> {
    pub payment_intent_ref: &'a Ref,
    /// Set when the payment completed the session.
    pub completed: Option<Completion<'a>>,
}

pub struct Completion<'a> {
    pub buyer_ref: &'a Ref,
    pub subscription_ref: Option<&'a Ref>,
}

/// Records a pay on a session that is still open and at its read version;
/// `Conflict` when another pay changed it meanwhile, so that of concurrent
/// pays exactly one goes on.
pub async fn record_pay(
    tx: &mut WriteTx,
    current: &SessionRecord,
    attempt: Attempt<'_>,
    now: Timestamp,
) -> Result<SessionRecord, StoreError> {
    let now = now.millis();
    let (status, buyer_ref, subscription_ref, completed_at) = match &attempt.completed {
        Some(c) => (
            SessionStatus::Complete,
            Some(c.buyer_ref.as_str()),
            c.subscription_ref.map(Ref::as_str),
            Some(now),
        ),
        None => (SessionStatus::Open, None, None, None),
    };
    let rows = tx
        .fetch(
            "UPDATE checkout_sessions SET status = $1, payment_intent_ref = $2, \
             buyer_ref = COALESCE($3, buyer_ref), subscription_ref = COALESCE($4, subscription_ref), \
             completed_at = $5, updated_at = $6, version = version + 1 \
             WHERE checkout_session_ref = $7 AND version = $8 AND status = $9 RETURNING *",
            &[
                status.as_str().into(),
                attempt.payment_intent_ref.as_str().into(),
                buyer_ref.into(),
                subscription_ref.into(),
                completed_at.into(),
                now.into(),
                current.checkout_session_ref.as_str().into(),
                current.version.into(),
                SessionStatus::Open.as_str().into(),
            ],
        )
        .await?;
    SessionRecord::decode(rows.first().ok_or(StoreError::Conflict)?)
}
