//! Checkout configs: create (version 1, draft), retrieve (the newest
//! version), new versions (fields carried over from the newest), and
//! publish (any existing version: a rollback is a publish).

use crate::error::{ApiError, Detail};
use crate::handlers::{distinct_refs, Ctx};
use crate::input::Input;
use crate::reply::Reply;
use crate::wire::check_text;
use crate::wire::found;
use crate::wire::ts;
use domain::catalogue::checkout_config::{
    check_custom_fields, check_trial_period_days, derive_mode, ConfigMode, CustomField, FieldError,
    ItemPrice, TrialError, MAX_LINE_ITEMS,
};
use domain::etag::etag;
use domain::Prefix;
use serde::{Deserialize, Serialize};
use store::billing::checkout_configs::{self, ConfigContent, ConfigRecord, LineItem};
use utoipa::ToSchema;

const MAX_URL_LEN: usize = 2000;

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = ConfigLineItemDto)]
pub struct LineItemDto {
    pub offer_ref: String,
    /// 1 to 1,000.
    pub quantity: u64,
}

/// A custom field as a config answers it: its definition and its
/// reference.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CustomFieldDto {
    /// `cf_…`, the same for this `key` in every version of the config; data
    /// profile grants name the field by it.
    pub custom_field_ref: String,
    /// `[a-z0-9_]{1,40}`, unique in the config.
    pub key: String,
    pub label: String,
    /// `text`, `numeric` or `dropdown`.
    #[serde(rename = "type")]
    pub field_type: String,
    pub required: bool,
    /// The options of a `dropdown`, else null.
    pub options: Option<Vec<String>>,
}

/// A custom field as a body defines it. Its `custom_field_ref` is the
/// service's to assign: a body that sends one is refused like any unknown
/// field.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CustomFieldInput {
    /// `[a-z0-9_]{1,40}`, unique in the config.
    pub key: String,
    /// 1 to 100 characters.
    pub label: String,
    /// `text`, `numeric` or `dropdown`.
    #[serde(rename = "type")]
    pub field_type: String,
    /// Defaults to false.
    #[serde(default)]
    pub required: bool,
    /// 1 to 20 distinct strings, for `dropdown` only.
    #[serde(default)]
    pub options: Option<Vec<String>>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ConfigDto {
    pub config_ref: String,
    pub name: String,
    /// `draft` or `published`.
    pub status: String,
    /// The newest version, whose fields this shows.
    pub current_version: u32,
    /// The version sessions use; null until published.
    pub published_version: Option<u32>,
    pub line_items: Vec<LineItemDto>,
    /// `payment` or `subscription`, derived from the line items' prices.
    pub mode: String,
    pub success_url: String,
    pub cancel_url: Option<String>,
    pub custom_fields: Vec<CustomFieldDto>,
    /// Days of trial a subscription paid through it starts with; 0 for
    /// none.
    pub trial_period_days: u32,
    pub created_at: String,
    pub updated_at: String,
    pub etag: String,
}

fn config_etag(c: &ConfigRecord) -> String {
    etag(c.config_ref.as_str(), c.version)
}

fn dto(c: &ConfigRecord) -> ConfigDto {
    ConfigDto {
        config_ref: c.config_ref.to_string(),
        name: c.content.name.clone(),
        status: c.status.as_str().to_owned(),
        current_version: c.current_version,
        published_version: c.published_version,
        line_items: c
            .content
            .line_items
            .iter()
            .map(|i| LineItemDto {
                offer_ref: i.offer_ref.clone(),
                quantity: u64::from(i.quantity),
            })
            .collect(),
        mode: c.content.mode.as_str().to_owned(),
        success_url: c.content.success_url.clone(),
        cancel_url: c.content.cancel_url.clone(),
        custom_fields: c
            .content
            .custom_fields
            .iter()
            .map(|f| CustomFieldDto {
                // The store gives every field it reads back its reference.
                custom_field_ref: f.custom_field_ref.clone().unwrap_or_default(),
                key: f.key.clone(),
                label: f.label.clone(),
                field_type: f.field_type.clone(),
                required: f.required,
                options: f.options.clone(),
            })
            .collect(),
        trial_period_days: c.content.trial_period_days,
        created_at: ts(c.created_at),
        updated_at: ts(c.updated_at),
        etag: config_etag(c),
    }
}

fn reply(c: &ConfigRecord) -> Reply {
    Reply::one(dto(c), Some(config_etag(c)))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateCheckoutConfig {
    /// 1 to 200 characters.
    pub name: String,
    /// 1 to 20 items, one currency, at most one recurring interval.
    pub line_items: Vec<LineItemDto>,
    /// Absolute http or https URL.
    pub success_url: String,
    pub cancel_url: Option<String>,
    /// At most 3.
    pub custom_fields: Option<Vec<CustomFieldInput>>,
    /// Derived; when given it must agree.
    pub mode: Option<String>,
    /// 0 to 730 (default 0); more than 0 only in subscription mode.
    pub trial_period_days: Option<i64>,
}

/// Any of create's fields; the rest are carried over from the newest
/// version.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateCheckoutConfigVersion {
    pub name: Option<String>,
    pub line_items: Option<Vec<LineItemDto>>,
    pub success_url: Option<String>,
    pub cancel_url: Option<String>,
    pub custom_fields: Option<Vec<CustomFieldInput>>,
    pub mode: Option<String>,
    pub trial_period_days: Option<i64>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PublishCheckoutConfig {
    /// Defaults to the newest version.
    pub version: Option<u64>,
}

fn check_url(field: &str, value: &str) -> Result<(), ApiError> {
    let ok = value.len() <= MAX_URL_LEN
        && url::Url::parse(value)
            .is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some());
    if ok {
        Ok(())
    } else {
        Err(ApiError::validation(
            field,
            format!("must be an absolute http or https URL of at most {MAX_URL_LEN} characters"),
        ))
    }
}

fn field_error(e: FieldError) -> ApiError {
    let e = e.under("custom_fields");
    ApiError::Validation(vec![Detail::new(e.field, e.issue)])
}

fn custom_fields(defs: &[CustomFieldInput]) -> Result<Vec<CustomField>, ApiError> {
    let fields = defs
        .iter()
        .enumerate()
        .map(|(i, d)| {
            CustomField::new(
                &d.key,
                &d.label,
                &d.field_type,
                d.required,
                d.options.clone(),
            )
            .map_err(|e| field_error(e.under(&i.to_string())))
        })
        .collect::<Result<Vec<_>, _>>()?;
    check_custom_fields(&fields).map_err(field_error)?;
    Ok(fields)
}

/// Checks the line items' shape (400), that their offers exist (404) and
/// that the catalogue can sell them together (422); returns them with the
/// mode they imply.
async fn line_items(
    ctx: &Ctx,
    items: &[LineItemDto],
) -> Result<(Vec<LineItem>, ConfigMode), ApiError> {
    if items.is_empty() || items.len() > MAX_LINE_ITEMS {
        return Err(ApiError::validation(
            "line_items",
            format!("must hold 1 to {MAX_LINE_ITEMS} line items"),
        ));
    }
    let refs: Vec<String> = items.iter().map(|i| i.offer_ref.clone()).collect();
    let refs = distinct_refs("line_items", Prefix::Offer, &refs).map_err(|e| match e {
        // `offer_refs` names the item; the reference is its `offer_ref`.
        ApiError::Validation(mut d) => {
            for detail in &mut d {
                detail.field = format!("{}.offer_ref", detail.field);
            }
            ApiError::Validation(d)
        }
        e => e,
    })?;
    let quantity = |i: usize, q: u64| {
        u32::try_from(q)
            .ok()
            .filter(|q| (1..=domain::catalogue::checkout_config::MAX_QUANTITY).contains(q))
            .ok_or_else(|| {
                ApiError::validation(
                    format!("line_items.{i}.quantity"),
                    "must be an integer from 1 to 1000",
                )
            })
    };
    let quantities = items
        .iter()
        .enumerate()
        .map(|(i, item)| quantity(i, item.quantity))
        .collect::<Result<Vec<_>, _>>()?;
    let offers = ctx.store().billing().offers(ctx.env(), &refs).await?;
    let mut priced = Vec::with_capacity(refs.len());
    for (r, q) in refs.iter().zip(&quantities) {
        let offer = offers
            .iter()
            .find(|o| o.offer.offer_ref.as_str() == r)
            .ok_or_else(|| ApiError::not_found("offer"))?;
        priced.push(ItemPrice {
            quantity: *q,
            currency: offer.price.amount.currency(),
            recurrence: offer.price.recurrence,
        });
    }
    let mode = derive_mode(&priced).map_err(|e| {
        if e.is_semantic() {
            ApiError::semantic(e.to_string())
        } else {
            ApiError::validation(e.field(), e.to_string())
        }
    })?;
    let items = refs
        .into_iter()
        .zip(quantities)
        .map(|(offer_ref, quantity)| LineItem {
            offer_ref,
            quantity,
        })
        .collect();
    Ok((items, mode))
}

/// A config's trial (contract 14.3): out of range is `validation_failed`,
/// a trial on a payment-mode config `semantic_error`.
fn trial(days: i64, mode: ConfigMode) -> Result<u32, ApiError> {
    check_trial_period_days(days, mode).map_err(|e| match e {
        TrialError::OutOfRange => ApiError::validation("trial_period_days", e.to_string()),
        TrialError::NotSubscription => ApiError::semantic(e.to_string()),
    })
}

/// A body's `mode`, which must name the derived one.
fn agree(given: Option<&str>, derived: ConfigMode) -> Result<(), ApiError> {
    match given {
        None => Ok(()),
        Some(m) if ConfigMode::parse(m).is_none() => Err(ApiError::validation(
            "mode",
            "must be payment or subscription",
        )),
        Some(m) if m == derived.as_str() => Ok(()),
        Some(m) => Err(ApiError::semantic(format!(
            "mode {m} disagrees with the line items, which make a {} config",
            derived.as_str()
        ))),
    }
}

/// The parts of a body checked without reading the store.
fn check_texts(
    name: Option<&str>,
    success_url: Option<&str>,
    cancel_url: Option<&str>,
) -> Result<(), ApiError> {
    if let Some(n) = name {
        check_text("name", n, 1, 200)?;
    }
    if let Some(u) = success_url {
        check_url("success_url", u)?;
    }
    if let Some(u) = cancel_url {
        check_url("cancel_url", u)?;
    }
    Ok(())
}

pub async fn create(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let body: CreateCheckoutConfig = input.body()?;
    check_texts(
        Some(&body.name),
        Some(&body.success_url),
        body.cancel_url.as_deref(),
    )?;
    let fields = custom_fields(body.custom_fields.as_deref().unwrap_or_default())?;
    // Its range is checked before the store is read, its mode after.
    let days = body.trial_period_days.unwrap_or(0);
    trial(days, ConfigMode::Subscription)?;
    let (items, mode) = line_items(ctx, &body.line_items).await?;
    agree(body.mode.as_deref(), mode)?;
    let trial_period_days = trial(days, mode)?;
    let content = ConfigContent {
        name: body.name,
        line_items: items,
        success_url: body.success_url,
        cancel_url: body.cancel_url,
        custom_fields: fields,
        mode,
        trial_period_days,
    };
    let env = ctx.env().clone();
    let row = checkout_configs::create(ctx.tx().await?, &env, &content).await?;
    Ok(reply(&row))
}

async fn load(ctx: &Ctx, input: &Input) -> Result<ConfigRecord, ApiError> {
    let config_ref = input.path_ref("config_ref", Prefix::CheckoutConfig)?;
    found(
        ctx.store()
            .billing()
            .checkout_config(ctx.env(), &config_ref)
            .await,
        "checkout config",
    )
}

pub async fn retrieve(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    input.query_params(&[])?;
    Ok(reply(&load(ctx, &input).await?))
}

pub async fn create_version(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let body: CreateCheckoutConfigVersion = input.body()?;
    check_texts(
        body.name.as_deref(),
        body.success_url.as_deref(),
        body.cancel_url.as_deref(),
    )?;
    let fields = body
        .custom_fields
        .as_deref()
        .map(custom_fields)
        .transpose()?;
    if let Some(days) = body.trial_period_days {
        trial(days, ConfigMode::Subscription)?;
    }
    let current = load(ctx, &input).await?;
    let mut content = current.content.clone();
    if let Some(items) = &body.line_items {
        let (items, mode) = line_items(ctx, items).await?;
        content.line_items = items;
        content.mode = mode;
    }
    agree(body.mode.as_deref(), content.mode)?;
    let days = body
        .trial_period_days
        .unwrap_or(i64::from(content.trial_period_days));
    content.trial_period_days = trial(days, content.mode)?;
    if let Some(name) = body.name {
        content.name = name;
    }
    if let Some(url) = body.success_url {
        content.success_url = url;
    }
    if body.cancel_url.is_some() {
        content.cancel_url = body.cancel_url;
    }
    if let Some(fields) = fields {
        content.custom_fields = fields;
    }
    let row = checkout_configs::add_version(ctx.tx().await?, &current, &content).await?;
    Ok(reply(&row))
}

pub async fn publish(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let body: PublishCheckoutConfig = input.body()?;
    let asked =
        body.version
            .map(|v| {
                u32::try_from(v).ok().filter(|v| *v >= 1).ok_or_else(|| {
                    ApiError::validation("version", "must be an integer of at least 1")
                })
            })
            .transpose()?;
    let current = load(ctx, &input).await?;
    let version = asked.unwrap_or(current.current_version);
    if version > current.current_version {
        return Err(ApiError::semantic(format!(
            "the checkout config has no version {version}; its newest is {}",
            current.current_version
        )));
    }
    let row = checkout_configs::publish(ctx.tx().await?, &current, version).await?;
    Ok(reply(&row))
}
