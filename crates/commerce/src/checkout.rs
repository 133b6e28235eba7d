//! Opening a checkout session: the config's published version is priced
//! now (each offer at the amount its live promotion makes), the buyer's
//! custom field values are checked against the version, and the session is
//! written with its journey's first step in the caller's unit of work.
//! Pay is `crate::pay`.

use crate::error::found;
use crate::shapes::checkout::step;
use crate::CommerceError;
use domain::catalogue::checkout_config::check_values;
use domain::catalogue::promotion::PromotionStatus;
use domain::checkout::buyer::{BuyerName, Email};
use domain::checkout::states::{StepKind, SESSION_TTL_SECONDS};
use domain::{Money, Ref, Timestamp};
use std::collections::BTreeMap;
use store::billing::checkout::journeys;
use store::billing::checkout::sessions::{self, NewSession, SessionRecord};
use store::billing::checkout::PricedItem;
use store::billing::checkout_configs::ConfigContent;
use store::billing::offers::OfferRecord;
use store::billing::promotions::PromotionRecord;
use store::{Store, WriteTx};

/// What the caller asks a session to be, checked for form.
pub struct SessionAsk {
    pub config_ref: Ref,
    pub email: Email,
    pub name: Option<BuyerName>,
    pub custom_fields: serde_json::Map<String, serde_json::Value>,
}

/// The config version a session will be made of, its custom field values
/// checked (`configured`).
pub struct Configured {
    version: u32,
    content: ConfigContent,
    values: BTreeMap<String, String>,
}

/// A session priced and checked, before anything is written (`price`).
pub struct Priced {
    configured: Configured,
    items: Vec<PricedItem>,
    total: Money,
}

/// The promotion active at `now` on offer `o`, and the amount it makes.
pub fn amount_at(o: &OfferRecord, now: Timestamp) -> (Money, Option<&PromotionRecord>) {
    let base = o.price.amount;
    o.promotions
        .iter()
        .find(|p| p.window.status_at(now) == PromotionStatus::Active)
        .and_then(|p| p.discount.apply(base).ok().map(|amount| (amount, Some(p))))
        .unwrap_or((base, None))
}

/// Reads the config's published version and checks the custom field
/// values against it.
pub async fn configured(
    store: &Store,
    env: &Ref,
    ask: &SessionAsk,
) -> Result<Configured, CommerceError> {
    let billing = store.billing();
    let config = found(
        billing.checkout_config(env, &ask.config_ref).await,
        "checkout config",
    )?;
    let Some(version) = config.published_version else {
        return Err(CommerceError::refused(format!(
            "cannot create a session for a {} checkout config; publish it first",
            config.status.as_str()
        )));
    };
    let content = billing
        .checkout_config_version(env, &ask.config_ref, version)
        .await?;
    let values = check_values(&content.custom_fields, &ask.custom_fields).map_err(|e| {
        let e = e.under("custom_fields");
        CommerceError::invalid(e.field, e.issue)
    })?;
    Ok(Configured {
        version,
        content,
        values,
    })
}

/// Prices the configured line items at `now` (the session's time).
pub async fn price(
    store: &Store,
    env: &Ref,
    configured: Configured,
    now: Timestamp,
) -> Result<Priced, CommerceError> {
    let refs: Vec<String> = configured
        .content
        .line_items
        .iter()
        .map(|i| i.offer_ref.clone())
        .collect();
    let offers = store.billing().offers(env, &refs).await?;
    let (items, total) = priced_items(&configured.content, &offers, now)?;
    Ok(Priced {
        configured,
        items,
        total,
    })
}

/// The version's line items priced at `now`, and their total.
fn priced_items(
    content: &ConfigContent,
    offers: &[OfferRecord],
    now: Timestamp,
) -> Result<(Vec<PricedItem>, Money), CommerceError> {
    let mut items = Vec::with_capacity(content.line_items.len());
    let mut total: Option<Money> = None;
    for line in &content.line_items {
        let offer = offers
            .iter()
            .find(|o| o.offer.offer_ref.as_str() == line.offer_ref)
            .ok_or_else(|| CommerceError::refused("an offer of the checkout config is gone"))?;
        let unit = amount_at(offer, now).0;
        let amount = unit.checked_mul(u64::from(line.quantity))?;
        total = Some(match total {
            None => amount,
            Some(t) => t.checked_add(amount)?,
        });
        let recurrence = &offer.price.recurrence;
        items.push(PricedItem {
            offer_ref: line.offer_ref.clone(),
            price_ref: offer.price.price_ref.to_string(),
            product_ref: offer.offer.product_ref.to_string(),
            quantity: line.quantity,
            unit_amount: unit.minor(),
            amount: amount.minor(),
            price_type: recurrence.price_type().as_str().to_owned(),
            interval: recurrence.interval().map(|i| i.as_str().to_owned()),
        });
    }
    let total =
        total.ok_or_else(|| CommerceError::refused("the checkout config has no line items"))?;
    Ok((items, total))
}

/// Writes the priced session in `tx` at `now` (on `clock` when it lives on
/// a test clock), open until its time to live runs out, with its journey
/// started.
pub async fn open(
    tx: &mut WriteTx,
    env: &Ref,
    ask: &SessionAsk,
    priced: Priced,
    clock: Option<&Ref>,
    now: Timestamp,
) -> Result<SessionRecord, CommerceError> {
    let journey_ref = journeys::new_ref();
    let Priced {
        configured,
        items,
        total,
    } = priced;
    let new = NewSession {
        config_ref: &ask.config_ref,
        config_version: configured.version,
        mode: configured.content.mode,
        buyer_email: ask.email.as_str(),
        buyer_name: ask.name.as_ref().map(BuyerName::as_str),
        journey_ref: &journey_ref,
        line_items: &items,
        amount_total: total,
        custom_fields: &configured.values,
        success_url: &configured.content.success_url,
        cancel_url: configured.content.cancel_url.as_deref(),
        created_at: now,
        expires_at: now.plus_seconds(SESSION_TTL_SECONDS),
        test_clock_ref: clock,
        trial_period_days: configured.content.trial_period_days,
    };
    let session = sessions::create(tx, env, new).await?;
    let first = step(StepKind::SessionCreated, now, None);
    journeys::start(
        tx,
        env,
        &journey_ref,
        &session.checkout_session_ref,
        first,
        now,
    )
    .await?;
    Ok(session)
}
