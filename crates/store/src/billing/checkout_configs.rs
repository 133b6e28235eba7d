//! Checkout configs and their versions. A version's content is written
//! once (`checkout_config_versions`, JSON) and never changed; the config row
//! says which version is the newest (`current_version`) and which one
//! sessions use (`published_version`). Versions count from 1 without gaps.

use super::Billing;
use crate::db::tx::{int, single, text, Columns, WriteTx};
use crate::webhooks::{json_col, to_json};
use crate::StoreError;
use domain::catalogue::checkout_config::{ConfigMode, CustomField};
use domain::catalogue::ConfigStatus;
use domain::{Prefix, Ref, Timestamp};
use serde::{Deserialize, Serialize};

/// What a version holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigContent {
    pub name: String,
    pub line_items: Vec<LineItem>,
    pub success_url: String,
    pub cancel_url: Option<String>,
    pub custom_fields: Vec<CustomField>,
    /// Derived from the line items' prices when the version was made.
    #[serde(with = "mode_text")]
    pub mode: ConfigMode,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LineItem {
    pub offer_ref: String,
    pub quantity: u32,
}

mod mode_text {
    use domain::catalogue::checkout_config::ConfigMode;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(mode: &ConfigMode, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(mode.as_str())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<ConfigMode, D::Error> {
        let text = String::deserialize(d)?;
        ConfigMode::parse(&text).ok_or_else(|| serde::de::Error::custom(format!("mode {text}")))
    }
}

#[derive(Debug, Clone)]
pub struct ConfigRecord {
    pub config_ref: Ref,
    pub environment_ref: Ref,
    pub status: ConfigStatus,
    pub current_version: u32,
    pub published_version: Option<u32>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub version: i64,
    /// The content of `current_version`.
    pub content: ConfigContent,
}

fn version_number(v: i64) -> Result<u32, StoreError> {
    u32::try_from(v).map_err(|_| StoreError::Corrupt(format!("config version {v}")))
}

/// A config row joined with its newest version's content.
fn from_row(row: &dyn Columns) -> Result<ConfigRecord, StoreError> {
    let status = text(row, "status")?;
    Ok(ConfigRecord {
        config_ref: Ref::from_trusted(text(row, "config_ref")?),
        environment_ref: Ref::from_trusted(text(row, "environment_ref")?),
        status: ConfigStatus::parse(&status).ok_or(StoreError::Corrupt(status))?,
        current_version: version_number(int(row, "current_version")?)?,
        published_version: row
            .int("published_version")?
            .map(version_number)
            .transpose()?,
        created_at: Timestamp::from_millis(int(row, "created_at")?),
        updated_at: Timestamp::from_millis(int(row, "updated_at")?),
        version: int(row, "version")?,
        content: json_col(row, "body")?,
    })
}

const WITH_CONTENT: &str = "SELECT c.*, v.body FROM checkout_configs c \
     JOIN checkout_config_versions v \
     ON v.config_ref = c.config_ref AND v.version = c.current_version";

async fn insert_version(
    tx: &mut WriteTx,
    config_ref: &Ref,
    version: u32,
    content: &ConfigContent,
    now: i64,
) -> Result<(), StoreError> {
    tx.execute(
        "INSERT INTO checkout_config_versions (config_ref, version, body, created_at) \
         VALUES ($1, $2, $3, $4)",
        &[
            config_ref.as_str().into(),
            i64::from(version).into(),
            to_json(content).as_str().into(),
            now.into(),
        ],
    )
    .await?;
    Ok(())
}

async fn reread(tx: &mut WriteTx, config_ref: &Ref) -> Result<ConfigRecord, StoreError> {
    let rows = tx
        .fetch(
            &format!("{WITH_CONTENT} WHERE c.config_ref = $1"),
            &[config_ref.as_str().into()],
        )
        .await?;
    from_row(single(&rows)?)
}

/// Creates a draft config with `content` as version 1.
pub async fn create(
    tx: &mut WriteTx,
    environment_ref: &Ref,
    content: &ConfigContent,
) -> Result<ConfigRecord, StoreError> {
    let config_ref = Ref::generate(Prefix::CheckoutConfig);
    let now = Timestamp::now().millis();
    tx.execute(
        "INSERT INTO checkout_configs (config_ref, environment_ref, status, current_version, \
         created_at, updated_at) VALUES ($1, $2, $3, 1, $4, $4)",
        &[
            config_ref.as_str().into(),
            environment_ref.as_str().into(),
            ConfigStatus::Draft.as_str().into(),
            now.into(),
        ],
    )
    .await?;
    insert_version(tx, &config_ref, 1, content, now).await?;
    reread(tx, &config_ref).await
}

/// Adds `content` as the next version if the config is still at its read
/// version.
pub async fn add_version(
    tx: &mut WriteTx,
    current: &ConfigRecord,
    content: &ConfigContent,
) -> Result<ConfigRecord, StoreError> {
    let now = Timestamp::now().millis();
    let next = current.current_version + 1;
    let changed = tx
        .execute(
            "UPDATE checkout_configs SET current_version = $1, updated_at = $2, \
             version = version + 1 WHERE config_ref = $3 AND version = $4",
            &[
                i64::from(next).into(),
                now.into(),
                current.config_ref.as_str().into(),
                current.version.into(),
            ],
        )
        .await?;
    if changed == 0 {
        return Err(StoreError::Conflict);
    }
    insert_version(tx, &current.config_ref, next, content, now).await?;
    reread(tx, &current.config_ref).await
}

/// Publishes version `version` (an existing one) if the config is still at
/// its read version.
pub async fn publish(
    tx: &mut WriteTx,
    current: &ConfigRecord,
    version: u32,
) -> Result<ConfigRecord, StoreError> {
    let changed = tx
        .execute(
            "UPDATE checkout_configs SET status = $1, published_version = $2, updated_at = $3, \
             version = version + 1 WHERE config_ref = $4 AND version = $5",
            &[
                current.status.publish().as_str().into(),
                i64::from(version).into(),
                Timestamp::now().millis().into(),
                current.config_ref.as_str().into(),
                current.version.into(),
            ],
        )
        .await?;
    if changed == 0 {
        return Err(StoreError::Conflict);
    }
    reread(tx, &current.config_ref).await
}

impl Billing<'_> {
    pub async fn checkout_config(
        &self,
        environment_ref: &Ref,
        config_ref: &Ref,
    ) -> Result<ConfigRecord, StoreError> {
        self.source()
            .one(
                &format!("{WITH_CONTENT} WHERE c.config_ref = $1 AND c.environment_ref = $2"),
                &[config_ref.as_str().into(), environment_ref.as_str().into()],
                from_row,
            )
            .await
    }

    /// The content of version `version` of a config of the environment.
    pub async fn checkout_config_version(
        &self,
        environment_ref: &Ref,
        config_ref: &Ref,
        version: u32,
    ) -> Result<ConfigContent, StoreError> {
        self.source()
            .one(
                "SELECT v.body FROM checkout_config_versions v JOIN checkout_configs c \
                 ON c.config_ref = v.config_ref \
                 WHERE v.config_ref = $1 AND v.version = $2 AND c.environment_ref = $3",
                &[
                    config_ref.as_str().into(),
                    i64::from(version).into(),
                    environment_ref.as_str().into(),
                ],
                |row| json_col(row, "body"),
            )
            .await
    }
}
