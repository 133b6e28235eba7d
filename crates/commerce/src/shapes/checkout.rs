//! The shapes of every record a checkout and its payments make: sessions,
//! payments, captures, orders, invoices, entitlements, buyers, stored
//! methods, subscriptions and their changes, journeys, test clocks.

use super::{opt_ref, opt_ts, position, status_of, ts, MoneyDto, Served, StatusFilter};
use domain::checkout::lines::InvoiceLine;
use domain::checkout::renewal::TestClockStatus;
use domain::checkout::sandbox::Card;
use domain::checkout::states::{
    EntitlementStatus, InvoiceStatus, JourneyStatus, OrderStatus, PaymentStatus, SessionStatus,
    StepKind, StoredMethodStatus, SubscriptionStatus,
};
use domain::etag::etag;
use domain::{Currency, Money, Prefix, Ref, Timestamp};
use serde::Serialize;
use std::collections::BTreeMap;
use store::billing::checkout::buyers::BuyerRecord;
use store::billing::checkout::entitlements::EntitlementRecord;
use store::billing::checkout::journeys::{JourneyRecord, Step};
use store::billing::checkout::methods::StoredMethodRecord;
use store::billing::checkout::orders::{InvoiceRecord, OrderRecord};
use store::billing::checkout::payments::{CaptureRecord, PaymentRecord};
use store::billing::checkout::sessions::SessionRecord;
use store::billing::checkout::subscriptions::{ChangeRecord, SubscriptionRecord};
use store::billing::checkout::PricedItem;
use store::billing::test_clocks::TestClockRecord;
use utoipa::ToSchema;

#[derive(Debug, Serialize, ToSchema)]
pub struct BuyerContactDto {
    pub email: String,
    pub name: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PaymentMethodDto {
    /// Always `card`.
    #[serde(rename = "type")]
    pub method_type: String,
    pub brand: String,
    pub last4: String,
    pub exp_month: u32,
    pub exp_year: u32,
}

impl From<&Card> for PaymentMethodDto {
    fn from(c: &Card) -> Self {
        PaymentMethodDto {
            method_type: "card".to_owned(),
            brand: c.brand.clone(),
            last4: c.last4.clone(),
            exp_month: c.exp_month,
            exp_year: c.exp_year,
        }
    }
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct NextActionDto {
    /// Always `authenticate`.
    #[serde(rename = "type")]
    pub action_type: String,
    pub expires_at: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PaymentDto {
    /// The same value as `payment_intent_ref`.
    pub payment_ref: String,
    pub payment_intent_ref: String,
    pub checkout_session_ref: String,
    pub buyer_ref: Option<String>,
    pub buyer: BuyerContactDto,
    pub amount: MoneyDto,
    pub amount_refunded: MoneyDto,
    /// `succeeded`, `failed`, `requires_action` or `canceled`.
    pub status: String,
    /// `card_declined`, `insufficient_funds` or `authentication_failed`.
    pub failure_code: Option<String>,
    pub payment_method: PaymentMethodDto,
    pub stored_payment_method_ref: Option<String>,
    pub product_refs: Vec<String>,
    pub next_action: Option<NextActionDto>,
    pub captured_at: Option<String>,
    pub created_at: String,
    pub etag: String,
}

impl Served for PaymentRecord {
    type Dto = PaymentDto;
    const PREFIX: Prefix = Prefix::Payment;
    const WHAT: &'static str = "payment";
    const PATH_PARAM: &'static str = "payment_ref";
    const STATUS: Option<StatusFilter> = status_of!(PaymentStatus);
    const REF_FILTERS: &'static [(&'static str, Prefix)] = &[("buyer_ref", Prefix::Buyer)];

    fn dto(&self, now: Timestamp) -> PaymentDto {
        PaymentDto {
            payment_ref: self.payment_intent_ref.to_string(),
            payment_intent_ref: self.payment_intent_ref.to_string(),
            checkout_session_ref: self.checkout_session_ref.to_string(),
            buyer_ref: opt_ref(&self.buyer_ref),
            buyer: BuyerContactDto {
                email: self.buyer_email.clone(),
                name: self.buyer_name.clone(),
            },
            amount: self.amount.into(),
            amount_refunded: self.amount_refunded.into(),
            status: self.status.as_str().to_owned(),
            failure_code: self.failure_code.map(|c| c.as_str().to_owned()),
            payment_method: (&self.card).into(),
            stored_payment_method_ref: opt_ref(&self.stored_payment_method_ref),
            product_refs: self.product_refs.clone(),
            next_action: self
                .action_expires_at
                .filter(|_| self.status == PaymentStatus::RequiresAction)
                .map(|t| NextActionDto {
                    action_type: "authenticate".to_owned(),
                    expires_at: ts(t),
                }),
            captured_at: opt_ts(self.captured_at),
            created_at: ts(self.created_at),
            etag: Served::etag(self, now),
        }
    }

    fn etag(&self, _now: Timestamp) -> String {
        etag(self.payment_intent_ref.as_str(), self.version)
    }

    fn position(&self) -> (i64, String) {
        position(self.created_at, &self.payment_intent_ref)
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct CaptureDto {
    pub capture_ref: String,
    pub payment_intent_ref: String,
    pub amount: MoneyDto,
    pub amount_refunded: MoneyDto,
    pub captured_at: String,
    pub created_at: String,
    pub etag: String,
}

impl Served for CaptureRecord {
    type Dto = CaptureDto;
    const PREFIX: Prefix = Prefix::Capture;
    const WHAT: &'static str = "capture";
    const PATH_PARAM: &'static str = "capture_ref";
    const STATUS: Option<StatusFilter> = None;
    const REF_FILTERS: &'static [(&'static str, Prefix)] =
        &[("payment_intent_ref", Prefix::Payment)];

    fn dto(&self, now: Timestamp) -> CaptureDto {
        CaptureDto {
            capture_ref: self.capture_ref.to_string(),
            payment_intent_ref: self.payment_intent_ref.to_string(),
            amount: self.amount.into(),
            amount_refunded: self.amount_refunded.into(),
            captured_at: ts(self.captured_at),
            created_at: ts(self.created_at),
            etag: Served::etag(self, now),
        }
    }

    fn etag(&self, _now: Timestamp) -> String {
        etag(self.capture_ref.as_str(), self.version)
    }

    fn position(&self) -> (i64, String) {
        position(self.created_at, &self.capture_ref)
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct LineItemDto {
    pub offer_ref: String,
    pub price_ref: String,
    pub product_ref: String,
    pub quantity: u32,
    pub unit_amount: MoneyDto,
    pub amount: MoneyDto,
}

/// Line items priced in `currency`.
pub fn line_items(items: &[PricedItem], currency: Currency) -> Vec<LineItemDto> {
    let money =
        |minor: u64| MoneyDto::from(Money::new(currency, minor).unwrap_or(Money::zero(currency)));
    items
        .iter()
        .map(|i| LineItemDto {
            offer_ref: i.offer_ref.clone(),
            price_ref: i.price_ref.clone(),
            product_ref: i.product_ref.clone(),
            quantity: i.quantity,
            unit_amount: money(i.unit_amount),
            amount: money(i.amount),
        })
        .collect()
}

#[derive(Debug, Serialize, ToSchema)]
pub struct OrderDto {
    pub order_ref: String,
    pub checkout_session_ref: String,
    pub buyer_ref: String,
    pub payment_intent_ref: String,
    pub line_items: Vec<LineItemDto>,
    pub amount_total: MoneyDto,
    /// `paid`, `partially_refunded` or `refunded`.
    pub status: String,
    pub created_at: String,
    pub updated_at: String,
    pub etag: String,
}

impl Served for OrderRecord {
    type Dto = OrderDto;
    const PREFIX: Prefix = Prefix::Order;
    const WHAT: &'static str = "order";
    const PATH_PARAM: &'static str = "order_ref";
    const STATUS: Option<StatusFilter> = status_of!(OrderStatus);
    const REF_FILTERS: &'static [(&'static str, Prefix)] = &[("buyer_ref", Prefix::Buyer)];

    fn dto(&self, now: Timestamp) -> OrderDto {
        OrderDto {
            order_ref: self.order_ref.to_string(),
            checkout_session_ref: self.checkout_session_ref.to_string(),
            buyer_ref: self.buyer_ref.to_string(),
            payment_intent_ref: self.payment_intent_ref.to_string(),
            line_items: line_items(&self.line_items, self.amount_total.currency()),
            amount_total: self.amount_total.into(),
            status: self.status.as_str().to_owned(),
            created_at: ts(self.created_at),
            updated_at: ts(self.updated_at),
            etag: Served::etag(self, now),
        }
    }

    fn etag(&self, _now: Timestamp) -> String {
        etag(self.order_ref.as_str(), self.version)
    }

    fn position(&self) -> (i64, String) {
        position(self.created_at, &self.order_ref)
    }
}

/// An invoice line's amount: a Money object whose `value` is signed, `-`
/// before the digits of a credit (`proration_credit`, `credit_applied`).
#[derive(Debug, Serialize, ToSchema)]
pub struct LineAmountDto {
    /// ISO 4217 code, upper case: the invoice's.
    pub currency: String,
    /// Always `minor`.
    pub unit: String,
    /// 1 to 18 decimal digits, no leading zeros, `-` first on a credit.
    pub value: String,
}

/// One line of an invoice (contract 14.1).
#[derive(Debug, Serialize, ToSchema)]
pub struct InvoiceLineDto {
    /// `item` (a one-time checkout line), `period` (a subscription's
    /// period, the first one included), `proration_credit`,
    /// `proration_debit` or `credit_applied`.
    pub kind: String,
    /// Negative for `proration_credit` and `credit_applied`.
    pub amount: LineAmountDto,
    /// The price it bills; null for `credit_applied` (and on the one line
    /// of a one-time invoice issued before invoices had lines).
    pub price_ref: Option<String>,
    /// The period it bills, for `period` and proration lines; null for
    /// `item` and `credit_applied` (and on invoices issued before invoices
    /// had lines).
    pub period_start: Option<String>,
    pub period_end: Option<String>,
    pub description: String,
}

impl From<&InvoiceLine> for InvoiceLineDto {
    fn from(l: &InvoiceLine) -> InvoiceLineDto {
        let period = l.period();
        InvoiceLineDto {
            kind: l.kind().as_str().to_owned(),
            amount: LineAmountDto {
                currency: l.currency().as_str().to_owned(),
                unit: "minor".to_owned(),
                value: l.amount_value(),
            },
            price_ref: l.price_ref().map(Ref::to_string),
            period_start: period.map(|p| ts(p.start())),
            period_end: period.map(|p| ts(p.end())),
            description: l.description().to_owned(),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct InvoiceDto {
    pub invoice_ref: String,
    /// `<year>-<6 digits>`, per environment and year, without gaps.
    pub number: String,
    pub order_ref: String,
    pub buyer_ref: String,
    pub subscription_ref: Option<String>,
    /// What it charges, line by line; at least one.
    pub lines: Vec<InvoiceLineDto>,
    /// The sum of `lines`; never below zero.
    pub amount_total: MoneyDto,
    /// `paid`; a renewal's invoice is `open` while dunning retries its
    /// charge, then `paid` or `uncollectible`.
    pub status: String,
    pub issued_at: String,
    pub paid_at: Option<String>,
    /// The payment that paid it; null while unpaid.
    pub payment_intent_ref: Option<String>,
    /// How many times its charge was tried.
    pub attempt_count: u32,
    pub created_at: String,
    pub etag: String,
}

impl Served for InvoiceRecord {
    type Dto = InvoiceDto;
    const PREFIX: Prefix = Prefix::Invoice;
    const WHAT: &'static str = "invoice";
    const PATH_PARAM: &'static str = "invoice_ref";
    const STATUS: Option<StatusFilter> = status_of!(InvoiceStatus);
    const REF_FILTERS: &'static [(&'static str, Prefix)] = &[("buyer_ref", Prefix::Buyer)];

    fn dto(&self, now: Timestamp) -> InvoiceDto {
        InvoiceDto {
            invoice_ref: self.invoice_ref.to_string(),
            number: self.number.clone(),
            order_ref: self.order_ref.to_string(),
            buyer_ref: self.buyer_ref.to_string(),
            subscription_ref: opt_ref(&self.subscription_ref),
            lines: self
                .lines
                .lines()
                .iter()
                .map(InvoiceLineDto::from)
                .collect(),
            amount_total: self.amount_total.into(),
            status: self.status.as_str().to_owned(),
            issued_at: ts(self.issued_at),
            paid_at: opt_ts(self.paid_at),
            payment_intent_ref: opt_ref(&self.payment_intent_ref),
            attempt_count: self.attempt_count,
            created_at: ts(self.created_at),
            etag: Served::etag(self, now),
        }
    }

    fn etag(&self, _now: Timestamp) -> String {
        etag(self.invoice_ref.as_str(), self.version)
    }

    fn position(&self) -> (i64, String) {
        position(self.created_at, &self.invoice_ref)
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct EntitlementDto {
    pub entitlement_ref: String,
    pub buyer_ref: String,
    pub product_ref: String,
    pub order_ref: String,
    /// `active` or `revoked`.
    pub status: String,
    pub granted_at: String,
    pub revoked_at: Option<String>,
    pub created_at: String,
    pub etag: String,
}

impl Served for EntitlementRecord {
    type Dto = EntitlementDto;
    const PREFIX: Prefix = Prefix::Entitlement;
    const WHAT: &'static str = "entitlement";
    const PATH_PARAM: &'static str = "entitlement_ref";
    const STATUS: Option<StatusFilter> = status_of!(EntitlementStatus);
    const REF_FILTERS: &'static [(&'static str, Prefix)] = &[
        ("product_ref", Prefix::Product),
        ("buyer_ref", Prefix::Buyer),
    ];

    fn dto(&self, now: Timestamp) -> EntitlementDto {
        EntitlementDto {
            entitlement_ref: self.entitlement_ref.to_string(),
            buyer_ref: self.buyer_ref.to_string(),
            product_ref: self.product_ref.to_string(),
            order_ref: self.order_ref.to_string(),
            status: self.status.as_str().to_owned(),
            granted_at: ts(self.granted_at),
            revoked_at: opt_ts(self.revoked_at),
            created_at: ts(self.created_at),
            etag: Served::etag(self, now),
        }
    }

    fn etag(&self, _now: Timestamp) -> String {
        etag(self.entitlement_ref.as_str(), self.version)
    }

    fn position(&self) -> (i64, String) {
        position(self.created_at, &self.entitlement_ref)
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct BuyerDto {
    pub buyer_ref: String,
    pub email: String,
    pub name: Option<String>,
    /// The test clock the buyer lives on; null when none.
    pub test_clock_ref: Option<String>,
    /// What price changes gave back, used first by later invoices
    /// (contract 14.2): in the buyer's currency (its first order's), zero
    /// when none; null only while the buyer has no currency.
    pub credit_balance: Option<MoneyDto>,
    pub created_at: String,
    pub etag: String,
}

impl Served for BuyerRecord {
    type Dto = BuyerDto;
    const PREFIX: Prefix = Prefix::Buyer;
    const WHAT: &'static str = "buyer";
    const PATH_PARAM: &'static str = "buyer_ref";
    const STATUS: Option<StatusFilter> = None;
    const REF_FILTERS: &'static [(&'static str, Prefix)] = &[];

    fn dto(&self, now: Timestamp) -> BuyerDto {
        BuyerDto {
            buyer_ref: self.buyer_ref.to_string(),
            email: self.email.clone(),
            name: self.name.clone(),
            test_clock_ref: opt_ref(&self.test_clock_ref),
            credit_balance: self.credit_balance.map(MoneyDto::from),
            created_at: ts(self.created_at),
            etag: Served::etag(self, now),
        }
    }

    fn etag(&self, _now: Timestamp) -> String {
        etag(self.buyer_ref.as_str(), self.version)
    }

    fn position(&self) -> (i64, String) {
        position(self.created_at, &self.buyer_ref)
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct StoredMethodDto {
    pub stored_payment_method_ref: String,
    pub buyer_ref: String,
    pub brand: String,
    pub last4: String,
    pub exp_month: u32,
    pub exp_year: u32,
    /// `active` or `detached`.
    pub status: String,
    pub created_at: String,
    pub etag: String,
}

impl Served for StoredMethodRecord {
    type Dto = StoredMethodDto;
    const PREFIX: Prefix = Prefix::StoredPaymentMethod;
    const WHAT: &'static str = "stored payment method";
    const PATH_PARAM: &'static str = "stored_payment_method_ref";
    const STATUS: Option<StatusFilter> = status_of!(StoredMethodStatus);
    const REF_FILTERS: &'static [(&'static str, Prefix)] = &[("buyer_ref", Prefix::Buyer)];

    fn dto(&self, now: Timestamp) -> StoredMethodDto {
        StoredMethodDto {
            stored_payment_method_ref: self.stored_payment_method_ref.to_string(),
            buyer_ref: self.buyer_ref.to_string(),
            brand: self.card.brand.clone(),
            last4: self.card.last4.clone(),
            exp_month: self.card.exp_month,
            exp_year: self.card.exp_year,
            status: self.status.as_str().to_owned(),
            created_at: ts(self.created_at),
            etag: Served::etag(self, now),
        }
    }

    fn etag(&self, _now: Timestamp) -> String {
        etag(self.stored_payment_method_ref.as_str(), self.version)
    }

    fn position(&self) -> (i64, String) {
        position(self.created_at, &self.stored_payment_method_ref)
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SubscriptionDto {
    pub subscription_ref: String,
    pub buyer_ref: Option<String>,
    pub price_ref: String,
    pub product_ref: String,
    /// `incomplete`, `trialing`, `active`, `past_due` or `canceled`.
    pub status: String,
    pub current_period_start: Option<String>,
    pub current_period_end: Option<String>,
    pub stored_payment_method_ref: Option<String>,
    pub started_at: Option<String>,
    pub canceled_at: Option<String>,
    /// Cancels at the end of the current period instead of renewing.
    pub cancel_at_period_end: bool,
    /// `requested` or `nonpayment`; null unless canceled.
    pub cancel_reason: Option<String>,
    /// The test clock it lives on; null when none.
    pub test_clock_ref: Option<String>,
    /// When its trial ends (contract 14.3); null without a trial.
    pub trial_end: Option<String>,
    /// A `next_invoice` price change's proration lines, waiting for the
    /// next renewal's invoice (contract 14.2); empty when none wait.
    pub pending_invoice_lines: Vec<InvoiceLineDto>,
    pub created_at: String,
    pub etag: String,
}

impl Served for SubscriptionRecord {
    type Dto = SubscriptionDto;
    const PREFIX: Prefix = Prefix::Subscription;
    const WHAT: &'static str = "subscription";
    const PATH_PARAM: &'static str = "subscription_ref";
    const STATUS: Option<StatusFilter> = status_of!(SubscriptionStatus);
    const REF_FILTERS: &'static [(&'static str, Prefix)] = &[
        ("product_ref", Prefix::Product),
        ("buyer_ref", Prefix::Buyer),
    ];

    fn dto(&self, now: Timestamp) -> SubscriptionDto {
        SubscriptionDto {
            subscription_ref: self.subscription_ref.to_string(),
            buyer_ref: opt_ref(&self.buyer_ref),
            price_ref: self.price_ref.to_string(),
            product_ref: self.product_ref.to_string(),
            status: self.status.as_str().to_owned(),
            current_period_start: opt_ts(self.current_period_start),
            current_period_end: opt_ts(self.current_period_end),
            stored_payment_method_ref: opt_ref(&self.stored_payment_method_ref),
            started_at: opt_ts(self.started_at),
            canceled_at: opt_ts(self.canceled_at),
            cancel_at_period_end: self.cancel_at_period_end,
            cancel_reason: self.cancel_reason.map(|r| r.as_str().to_owned()),
            test_clock_ref: opt_ref(&self.test_clock_ref),
            trial_end: opt_ts(self.trial_end),
            pending_invoice_lines: self
                .pending_invoice_lines
                .iter()
                .map(InvoiceLineDto::from)
                .collect(),
            created_at: ts(self.created_at),
            etag: Served::etag(self, now),
        }
    }

    fn etag(&self, _now: Timestamp) -> String {
        etag(self.subscription_ref.as_str(), self.version)
    }

    fn position(&self) -> (i64, String) {
        position(self.created_at, &self.subscription_ref)
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ChangeDto {
    pub subscription_change_ref: String,
    pub subscription_ref: String,
    /// `started`, `repriced`, `renewal`, `canceled` or `price_change`.
    pub kind: String,
    pub from_price_ref: Option<String>,
    pub to_price_ref: Option<String>,
    /// A `price_change`'s proration: `charge_now`, `next_invoice` or
    /// `none`; null for other kinds.
    pub proration: Option<String>,
    pub effective_at: String,
    pub created_at: String,
    pub etag: String,
}

impl Served for ChangeRecord {
    type Dto = ChangeDto;
    const PREFIX: Prefix = Prefix::SubscriptionChange;
    const WHAT: &'static str = "subscription change";
    const PATH_PARAM: &'static str = "subscription_change_ref";
    const STATUS: Option<StatusFilter> = None;
    const REF_FILTERS: &'static [(&'static str, Prefix)] =
        &[("subscription_ref", Prefix::Subscription)];

    fn dto(&self, now: Timestamp) -> ChangeDto {
        ChangeDto {
            subscription_change_ref: self.subscription_change_ref.to_string(),
            subscription_ref: self.subscription_ref.to_string(),
            kind: self.kind.as_str().to_owned(),
            from_price_ref: opt_ref(&self.from_price_ref),
            to_price_ref: opt_ref(&self.to_price_ref),
            proration: self.proration.map(|p| p.as_str().to_owned()),
            effective_at: ts(self.effective_at),
            created_at: ts(self.created_at),
            etag: Served::etag(self, now),
        }
    }

    fn etag(&self, _now: Timestamp) -> String {
        etag(self.subscription_change_ref.as_str(), self.version)
    }

    fn position(&self) -> (i64, String) {
        position(self.created_at, &self.subscription_change_ref)
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct StepDto {
    /// `session_created`, `payment_attempted`, `action_required`,
    /// `payment_failed`, `payment_succeeded` or `subscription_started`.
    pub kind: String,
    pub at: String,
    pub payment_intent_ref: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct JourneyDto {
    pub journey_ref: String,
    pub checkout_session_ref: String,
    pub buyer_ref: Option<String>,
    /// `open`, `converted` or `abandoned` (once its session expired).
    pub status: String,
    pub steps: Vec<StepDto>,
    pub created_at: String,
    pub updated_at: String,
    pub etag: String,
}

impl Served for JourneyRecord {
    type Dto = JourneyDto;
    const PREFIX: Prefix = Prefix::Journey;
    const WHAT: &'static str = "journey";
    const PATH_PARAM: &'static str = "journey_ref";
    const STATUS: Option<StatusFilter> = status_of!(JourneyStatus);
    const REF_FILTERS: &'static [(&'static str, Prefix)] = &[("buyer_ref", Prefix::Buyer)];

    fn dto(&self, now: Timestamp) -> JourneyDto {
        JourneyDto {
            journey_ref: self.journey_ref.to_string(),
            checkout_session_ref: self.checkout_session_ref.to_string(),
            buyer_ref: opt_ref(&self.buyer_ref),
            status: self
                .status
                .effective(now >= self.expires_at)
                .as_str()
                .to_owned(),
            steps: self
                .steps
                .iter()
                .map(|s: &Step| StepDto {
                    kind: s.kind.clone(),
                    at: s.at.clone(),
                    payment_intent_ref: s.payment_intent_ref.clone(),
                })
                .collect(),
            created_at: ts(self.created_at),
            updated_at: ts(self.updated_at),
            etag: Served::etag(self, now),
        }
    }

    fn etag(&self, _now: Timestamp) -> String {
        etag(self.journey_ref.as_str(), self.version)
    }

    fn position(&self) -> (i64, String) {
        position(self.created_at, &self.journey_ref)
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SessionDto {
    pub checkout_session_ref: String,
    pub config_ref: String,
    pub config_version: u32,
    /// `open`, `complete` or `expired`.
    pub status: String,
    /// `payment` or `subscription`.
    pub mode: String,
    pub buyer: BuyerContactDto,
    /// Null until a payment succeeds.
    pub buyer_ref: Option<String>,
    pub journey_ref: String,
    pub line_items: Vec<LineItemDto>,
    pub amount_total: MoneyDto,
    /// Values by custom field key.
    pub custom_fields: BTreeMap<String, String>,
    /// The newest payment.
    pub payment_intent_ref: Option<String>,
    pub subscription_ref: Option<String>,
    pub success_url: String,
    pub cancel_url: Option<String>,
    pub expires_at: String,
    pub completed_at: Option<String>,
    /// The test clock the session runs on; null when none.
    pub test_clock_ref: Option<String>,
    pub created_at: String,
    pub etag: String,
}

impl Served for SessionRecord {
    type Dto = SessionDto;
    const PREFIX: Prefix = Prefix::CheckoutSession;
    const WHAT: &'static str = "checkout session";
    const PATH_PARAM: &'static str = "checkout_session_ref";
    const STATUS: Option<StatusFilter> = status_of!(SessionStatus);
    const REF_FILTERS: &'static [(&'static str, Prefix)] =
        &[("config_ref", Prefix::CheckoutConfig)];

    fn dto(&self, now: Timestamp) -> SessionDto {
        SessionDto {
            checkout_session_ref: self.checkout_session_ref.to_string(),
            config_ref: self.config_ref.to_string(),
            config_version: self.config_version,
            status: self.effective_status(now).as_str().to_owned(),
            mode: self.mode.as_str().to_owned(),
            buyer: BuyerContactDto {
                email: self.buyer_email.clone(),
                name: self.buyer_name.clone(),
            },
            buyer_ref: self.buyer_ref.as_ref().map(Ref::to_string),
            journey_ref: self.journey_ref.to_string(),
            line_items: line_items(&self.line_items, self.amount_total.currency()),
            amount_total: self.amount_total.into(),
            custom_fields: self.custom_fields.clone(),
            payment_intent_ref: self.payment_intent_ref.as_ref().map(Ref::to_string),
            subscription_ref: self.subscription_ref.as_ref().map(Ref::to_string),
            success_url: self.success_url.clone(),
            cancel_url: self.cancel_url.clone(),
            expires_at: ts(self.expires_at),
            completed_at: opt_ts(self.completed_at),
            test_clock_ref: self.test_clock_ref.as_ref().map(Ref::to_string),
            created_at: ts(self.created_at),
            etag: Served::etag(self, now),
        }
    }

    fn etag(&self, now: Timestamp) -> String {
        // Expiry changes what the session shows without a write.
        let expired = self.effective_status(now) == SessionStatus::Expired;
        etag(
            &format!("{}:{expired}", self.checkout_session_ref),
            self.version,
        )
    }

    fn position(&self) -> (i64, String) {
        (
            self.created_at.millis(),
            self.checkout_session_ref.to_string(),
        )
    }
}

/// The steps' wire form of `kind` at `at`.
pub fn step(kind: StepKind, at: Timestamp, payment: Option<&Ref>) -> Step {
    Step {
        kind: kind.as_str().to_owned(),
        at: ts(at),
        payment_intent_ref: payment.map(Ref::to_string),
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TestClockDto {
    pub test_clock_ref: String,
    pub name: Option<String>,
    /// The clock's time (RFC 3339, UTC).
    pub frozen_time: String,
    /// `ready` or `advancing`.
    pub status: String,
    /// Where the running advance goes; null when ready.
    pub advancing_to: Option<String>,
    /// Jobs of the clock (a renewal, a dunning retry, …) that failed for
    /// good during its advances, each left undone; 0 when none. The
    /// advance still ends `ready`.
    pub failed_jobs: i64,
    pub created_at: String,
    pub etag: String,
}

impl Served for TestClockRecord {
    type Dto = TestClockDto;
    const PREFIX: Prefix = Prefix::TestClock;
    const WHAT: &'static str = "test clock";
    const PATH_PARAM: &'static str = "test_clock_ref";
    const STATUS: Option<StatusFilter> = status_of!(TestClockStatus);
    const REF_FILTERS: &'static [(&'static str, Prefix)] = &[];

    fn dto(&self, now: Timestamp) -> TestClockDto {
        TestClockDto {
            test_clock_ref: self.test_clock_ref.to_string(),
            name: self.name.clone(),
            frozen_time: ts(self.frozen_time),
            status: self.status.as_str().to_owned(),
            advancing_to: opt_ts(self.advance_to),
            failed_jobs: self.failed_jobs,
            created_at: ts(self.created_at),
            etag: Served::etag(self, now),
        }
    }

    fn etag(&self, _now: Timestamp) -> String {
        etag(self.test_clock_ref.as_str(), self.version)
    }

    fn position(&self) -> (i64, String) {
        (self.created_at.millis(), self.test_clock_ref.to_string())
    }
}
