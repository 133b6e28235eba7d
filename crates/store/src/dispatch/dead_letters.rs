//! Dead letters: messages the intake could not parse or validate, kept
//! with why, and listed through the API (`listDeadLetters`, contract
//! 12.3) in the environment their envelope names, or in every environment
//! when it names none.

use super::Dispatch;
use crate::db::read;
use crate::db::tx::{int, text, Columns};
use crate::resource::{Resource, Scope, Value, Visibility};
use crate::{Page, PageRequest, Store, StoreError};
use domain::{Prefix, Ref, Timestamp};

/// The most of a message a dead letter keeps: the contract's 64 KiB.
pub const KEPT_BYTES: usize = 64 * 1024;

/// A message the intake refused, as kept.
#[derive(Debug, Clone)]
pub struct DeadLetterRecord {
    pub dead_letter_ref: Ref,
    pub reason: String,
    pub received_at: Timestamp,
    /// The message as received, cut at `KEPT_BYTES` (on a character
    /// boundary).
    pub envelope: String,
}

impl Resource for DeadLetterRecord {
    const TABLE: &'static str = "dead_events";
    const REF_COLUMN: &'static str = "dead_event_id";
    const CREATED_COLUMN: &'static str = "received_at";
    const VISIBILITY: Visibility = Visibility::EnvironmentOrNone;
    const FILTERS: &'static [(&'static str, &'static str)] = &[("reason", "reason")];

    fn decode(row: &dyn Columns) -> Result<Self, StoreError> {
        from_row(row)
    }
}

fn from_row(row: &dyn Columns) -> Result<DeadLetterRecord, StoreError> {
    Ok(DeadLetterRecord {
        dead_letter_ref: Ref::from_trusted(text(row, "dead_event_id")?),
        reason: text(row, "reason")?,
        received_at: Timestamp::from_millis(int(row, "received_at")?),
        envelope: text(row, "body")?,
    })
}

/// `body` cut at `KEPT_BYTES`, on a character boundary.
fn kept(body: &str) -> &str {
    if body.len() <= KEPT_BYTES {
        return body;
    }
    let mut end = KEPT_BYTES;
    while !body.is_char_boundary(end) {
        end -= 1;
    }
    &body[..end]
}

/// The environment an envelope names, when it is JSON with a well-formed
/// `environment_ref`.
fn named_environment(body: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(body).ok()?;
    let named = value.get("environment_ref")?.as_str()?;
    Ref::parse(Prefix::Environment, named)
        .ok()
        .map(Ref::into_string)
}

impl Dispatch<'_> {
    /// Keeps a message that could not be parsed or validated, with why.
    pub async fn dead_letter(&self, body: &str, reason: &str) -> Result<(), StoreError> {
        let dead_letter_ref = Ref::generate(Prefix::DeadLetter);
        let environment_ref = named_environment(body);
        self.0.write_alone(
            "INSERT INTO dead_events (dead_event_id, environment_ref, body, reason, received_at) \
             VALUES ($1, $2, $3, $4, $5)",
            &[
                dead_letter_ref.as_str().into(),
                environment_ref.as_deref().into(),
                kept(body).into(),
                reason.into(),
                Timestamp::now().millis().into(),
            ],
        )
        .await?;
        Ok(())
    }

    pub async fn dead_letter_count(&self) -> Result<i64, StoreError> {
        read::scalar_int(self.pool(), "SELECT COUNT(*) FROM dead_events", &[])
            .await?
            .ok_or_else(|| StoreError::Corrupt("COUNT(*) was null".into()))
    }
}

impl Store {
    /// A page of the dead letters of `environment_ref` (and of those that
    /// name no environment), newest first, of `reason` when given.
    pub async fn list_dead_letters(
        &self,
        environment_ref: &Ref,
        reason: Option<&str>,
        page: &PageRequest,
    ) -> Result<Page<DeadLetterRecord>, StoreError> {
        self.list(
            Scope::environment(environment_ref),
            &[("reason", reason.map(Value::from))],
            page,
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_kept_up_to_64_kib_on_a_character_boundary() {
        let long = "é".repeat(KEPT_BYTES);
        let cut = kept(&long);
        assert!(cut.len() <= KEPT_BYTES && cut.len() > KEPT_BYTES - 2);
        assert!(cut.chars().all(|c| c == 'é'));
        assert_eq!(kept("{}"), "{}");
    }

    #[test]
    fn the_environment_is_the_one_a_well_formed_envelope_names() {
        let env = Ref::generate(Prefix::Environment).into_string();
        assert_eq!(
            named_environment(&format!(r#"{{"environment_ref": "{env}"}}"#)),
            Some(env)
        );
        assert_eq!(named_environment(r#"{"environment_ref": "nope"}"#), None);
        assert_eq!(named_environment("not json"), None);
    }
}
