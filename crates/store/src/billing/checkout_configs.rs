//! Checkout configs and their versions. A version's content is written
//! once (`checkout_config_versions`, JSON) and never changed; the config row
//! says which version is the newest (`current_version`) and which one
//! sessions use (`published_version`). Versions count from 1 without gaps.
//!
//! Each custom field a config defines has a `cf_` reference, one per
//! (config, key) in `checkout_custom_fields`: writing a version gives each
//! of its fields the reference already recorded for its key, or records a
//! new one, in the same unit of work, and the version's content keeps it
//! too (so reads need no other row). Data profile grants name fields by
//! these references; `Billing::custom_fields` resolves them to the
//! (config, key) shaping compares a session's `custom_fields` with.
//! Versions written before migration 0016 get theirs when the store is
//! migrated (`assign_missing_refs`).

use super::{Billing, Source};
use crate::db::codec::{json_col, state, to_json};
use crate::db::marks::Marks;
use crate::db::tx::{int, single, text, Arg, Columns, WriteTx};
use crate::{Store, StoreError};
use domain::catalogue::checkout_config::{ConfigMode, CustomField};
use domain::catalogue::ConfigStatus;
use domain::webhook::shaping::GrantedField;
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
    /// Days of trial a subscription paid through it starts with (contract
    /// 14.3); absent from versions without one, which read 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub trial_period_days: u32,
}

fn is_zero(days: &u32) -> bool {
    *days == 0
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
    Ok(ConfigRecord {
        config_ref: Ref::from_trusted(text(row, "config_ref")?),
        environment_ref: Ref::from_trusted(text(row, "environment_ref")?),
        status: state(row, "status", ConfigStatus::parse)?,
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

/// A custom field's reference and what it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CustomFieldRecord {
    pub custom_field_ref: Ref,
    pub config_ref: Ref,
    pub key: String,
}

/// What a grant naming the field covers: its config and key (shaping
/// finds the field in a session's `custom_fields` by these).
impl From<CustomFieldRecord> for GrantedField {
    fn from(f: CustomFieldRecord) -> GrantedField {
        GrantedField {
            config_ref: f.config_ref.into_string(),
            key: f.key,
        }
    }
}

/// `fields` (of a version of `config_ref` about to be written), each with
/// the reference recorded for its key, recorded now for a key that has
/// none. The recorded one always wins: a key keeps its reference across
/// versions, also when a version dropped it and a later one brings it
/// back, and two writers of one key (a version and `assign_missing_refs`)
/// end with the same reference.
async fn with_refs(
    tx: &mut WriteTx,
    environment_ref: &Ref,
    config_ref: &Ref,
    fields: &[CustomField],
    now: i64,
) -> Result<Vec<CustomField>, StoreError> {
    if fields.is_empty() {
        return Ok(Vec::new());
    }
    let fresh: Vec<Ref> = fields
        .iter()
        .map(|_| Ref::generate(Prefix::CustomField))
        .collect();
    let mut marks = Marks::new(tx.backend());
    let values = (0..fields.len())
        .map(|_| format!("({})", marks.list(5)))
        .collect::<Vec<_>>()
        .join(", ");
    let mut args: Vec<Arg> = Vec::with_capacity(5 * fields.len());
    for (field, r) in fields.iter().zip(&fresh) {
        args.extend::<[Arg; 5]>([
            r.as_str().into(),
            environment_ref.as_str().into(),
            config_ref.as_str().into(),
            field.key.as_str().into(),
            now.into(),
        ]);
    }
    tx.execute(
        &format!(
            "INSERT INTO checkout_custom_fields \
             (custom_field_ref, environment_ref, config_ref, key, created_at) \
             VALUES {values} ON CONFLICT (config_ref, key) DO NOTHING"
        ),
        &args,
    )
    .await?;
    let recorded = recorded_refs(&mut Source::Tx(tx), config_ref).await?;
    fields
        .iter()
        .map(|f| {
            let r = recorded.iter().find(|r| r.key == f.key).ok_or_else(|| {
                StoreError::Corrupt(format!(
                    "custom field {} of {config_ref}: no reference",
                    f.key
                ))
            })?;
            Ok(f.clone().with_ref(&r.custom_field_ref))
        })
        .collect()
}

/// Every reference recorded for a key of `config_ref`.
async fn recorded_refs(
    source: &mut Source<'_>,
    config_ref: &Ref,
) -> Result<Vec<CustomFieldRecord>, StoreError> {
    source
        .all(
            "SELECT custom_field_ref, config_ref, key FROM checkout_custom_fields \
             WHERE config_ref = $1",
            &[config_ref.as_str().into()],
            field_from_row,
        )
        .await
}

fn field_from_row(row: &dyn Columns) -> Result<CustomFieldRecord, StoreError> {
    Ok(CustomFieldRecord {
        custom_field_ref: Ref::from_trusted(text(row, "custom_field_ref")?),
        config_ref: Ref::from_trusted(text(row, "config_ref")?),
        key: text(row, "key")?,
    })
}

/// A config read back, each of its fields with its reference. The content
/// holds them; one written without them (by a binary older than migration
/// 0016, after this one migrated) takes them from `checkout_custom_fields`,
/// which has them for every key a version of the config defined when the
/// store was last migrated (`assign_missing_refs`).
async fn complete(
    source: &mut Source<'_>,
    mut record: ConfigRecord,
) -> Result<ConfigRecord, StoreError> {
    let fields = &mut record.content.custom_fields;
    if fields.iter().all(|f| f.custom_field_ref.is_some()) {
        return Ok(record);
    }
    let recorded = recorded_refs(source, &record.config_ref).await?;
    for f in fields.iter_mut().filter(|f| f.custom_field_ref.is_none()) {
        let r = recorded.iter().find(|r| r.key == f.key).ok_or_else(|| {
            StoreError::Corrupt(format!(
                "custom field {} of {} has no reference: migrate the store",
                f.key, record.config_ref
            ))
        })?;
        *f = f.clone().with_ref(&r.custom_field_ref);
    }
    Ok(record)
}

/// Writes version `version` of `config_ref`, giving its custom fields
/// their references.
async fn insert_version(
    tx: &mut WriteTx,
    environment_ref: &Ref,
    config_ref: &Ref,
    version: u32,
    content: &ConfigContent,
    now: i64,
) -> Result<(), StoreError> {
    let content = ConfigContent {
        custom_fields: with_refs(tx, environment_ref, config_ref, &content.custom_fields, now)
            .await?,
        ..content.clone()
    };
    tx.execute(
        "INSERT INTO checkout_config_versions (config_ref, version, body, created_at) \
         VALUES ($1, $2, $3, $4)",
        &[
            config_ref.as_str().into(),
            i64::from(version).into(),
            to_json(&content).as_str().into(),
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
    let record = from_row(single(&rows)?)?;
    complete(&mut Source::Tx(tx), record).await
}

/// What a version written before migration 0016 looks like: its first
/// custom field has no reference (a version's fields are given theirs all
/// at once, and `CustomField` writes `custom_field_ref` first). A `LIKE`
/// pattern (`_` matches any character; the text is checked again after
/// parsing), over the compact JSON `to_json` writes, where these quotes
/// can only be the JSON's own (a quote inside a string is escaped).
const WITHOUT_REFS: &str = r#"%"custom_fields":[{"key":%"#;

/// Gives the custom fields of every version written before migration 0016
/// their references (recorded in `checkout_custom_fields` and written into
/// the version's content, which is otherwise unchanged), in one unit of
/// work. Idempotent, and one read when there is nothing to do. Answers how
/// many versions it completed.
pub(crate) async fn assign_missing_refs(store: &Store) -> Result<usize, StoreError> {
    let mut tx = store.begin().await?;
    let rows = tx
        .fetch(
            "SELECT v.config_ref, v.version, v.body, v.created_at, c.environment_ref \
             FROM checkout_config_versions v \
             JOIN checkout_configs c ON c.config_ref = v.config_ref \
             WHERE v.body LIKE $1 ORDER BY v.config_ref, v.version",
            &[WITHOUT_REFS.into()],
        )
        .await?;
    let mut completed = 0;
    for row in &rows {
        let config_ref = Ref::from_trusted(text(row, "config_ref")?);
        let version = int(row, "version")?;
        let content: ConfigContent = match json_col(row, "body") {
            Ok(c) => c,
            Err(e) => {
                // Reads of this version fail the same way; starting the
                // service must not.
                tracing::warn!(config.ref = %config_ref, version, error = %e,
                    "checkout config version unreadable; its custom fields get no reference");
                continue;
            }
        };
        if content
            .custom_fields
            .iter()
            .all(|f| f.custom_field_ref.is_some())
        {
            continue;
        }
        let environment_ref = Ref::from_trusted(text(row, "environment_ref")?);
        let fields = with_refs(
            &mut tx,
            &environment_ref,
            &config_ref,
            &content.custom_fields,
            int(row, "created_at")?,
        )
        .await?;
        let content = ConfigContent {
            custom_fields: fields,
            ..content
        };
        tx.execute(
            "UPDATE checkout_config_versions SET body = $1 WHERE config_ref = $2 AND version = $3",
            &[
                to_json(&content).as_str().into(),
                config_ref.as_str().into(),
                version.into(),
            ],
        )
        .await?;
        completed += 1;
    }
    tx.commit().await?;
    Ok(completed)
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
    insert_version(tx, environment_ref, &config_ref, 1, content, now).await?;
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
    insert_version(
        tx,
        &current.environment_ref,
        &current.config_ref,
        next,
        content,
        now,
    )
    .await?;
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
        let mut source = self.source();
        let record = source
            .one(
                &format!("{WITH_CONTENT} WHERE c.config_ref = $1 AND c.environment_ref = $2"),
                &[config_ref.as_str().into(), environment_ref.as_str().into()],
                from_row,
            )
            .await?;
        complete(&mut source, record).await
    }

    /// The custom fields of the environment among `custom_field_refs` (a
    /// data profile grant's), in one read; a reference of no field of the
    /// environment is left out.
    pub async fn custom_fields(
        &self,
        environment_ref: &Ref,
        custom_field_refs: &[String],
    ) -> Result<Vec<CustomFieldRecord>, StoreError> {
        if custom_field_refs.is_empty() {
            return Ok(Vec::new());
        }
        let mut source = self.source();
        let mut marks = source.marks();
        let sql = format!(
            "SELECT custom_field_ref, config_ref, key FROM checkout_custom_fields \
             WHERE environment_ref = {} AND custom_field_ref IN ({})",
            marks.next(),
            marks.list(custom_field_refs.len())
        );
        let mut args: Vec<Arg> = vec![environment_ref.as_str().into()];
        args.extend(custom_field_refs.iter().map(|r| Arg::from(r.as_str())));
        source.all(&sql, &args, field_from_row).await
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
