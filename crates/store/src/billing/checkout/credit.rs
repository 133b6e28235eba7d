//! A buyer's credit balance, per currency (contract 14.2): what a price
//! change gave back, used first by later invoices (`credit_applied`).
//!
//! The balance never goes below zero, whatever runs concurrently for one
//! buyer: a use is one conditional update (`amount_minor >= $n`; zero rows
//! is `Conflict`, so the unit of work that lost the race answers 409 or is
//! run again), and the table's check holds whatever a statement does. The
//! buyer row mirrors the balance of its currency (`credit_currency`, the
//! currency of its first order or credit; `credit_minor`) in the same unit
//! of work, with its version bumped, so the buyer's ETag follows it.

use crate::billing::Source;
use crate::billing::{minor, Billing};
use crate::db::tx::{int, WriteTx};
use crate::StoreError;
use domain::{Currency, Money, Ref, Timestamp};

fn amount(currency: Currency, value: i64) -> Result<Money, StoreError> {
    let value = u64::try_from(value)
        .map_err(|_| StoreError::Corrupt("a negative credit balance".into()))?;
    Money::new(currency, value).map_err(|e| StoreError::Corrupt(format!("credit balance: {e}")))
}

const BALANCE: &str =
    "SELECT amount_minor FROM credit_balances WHERE buyer_ref = $1 AND currency = $2";

async fn read(
    mut source: Source<'_>,
    buyer_ref: &Ref,
    currency: Currency,
) -> Result<Money, StoreError> {
    let found = source
        .all(
            BALANCE,
            &[buyer_ref.as_str().into(), currency.as_str().into()],
            |row| int(row, "amount_minor"),
        )
        .await?;
    amount(currency, found.first().copied().unwrap_or(0))
}

/// The buyer's balance in `currency` (zero when none), read in the unit of
/// work that will use it.
pub async fn balance(
    tx: &mut WriteTx,
    buyer_ref: &Ref,
    currency: Currency,
) -> Result<Money, StoreError> {
    read(Source::Tx(tx), buyer_ref, currency).await
}

impl Billing<'_> {
    /// The buyer's balance in `currency` (zero when none), for a preview.
    pub async fn credit_balance(
        &self,
        buyer_ref: &Ref,
        currency: Currency,
    ) -> Result<Money, StoreError> {
        read(self.source(), buyer_ref, currency).await
    }
}

/// The buyer's currency, when it has none yet: the one its balance is
/// shown in.
pub(crate) async fn adopt_currency(
    tx: &mut WriteTx,
    buyer_ref: &Ref,
    currency: Currency,
) -> Result<(), StoreError> {
    tx.fetch(
        "UPDATE buyers SET credit_currency = $1 WHERE buyer_ref = $2 AND credit_currency IS NULL",
        &[currency.as_str().into(), buyer_ref.as_str().into()],
    )
    .await?;
    Ok(())
}

/// The buyer row's mirror of the balance `after` (in its currency).
async fn mirror(tx: &mut WriteTx, buyer_ref: &Ref, after: Money) -> Result<(), StoreError> {
    tx.fetch(
        "UPDATE buyers SET credit_currency = COALESCE(credit_currency, $1), \
         credit_minor = CASE WHEN COALESCE(credit_currency, $1) = $1 THEN $2 \
         ELSE credit_minor END, version = version + 1 WHERE buyer_ref = $3",
        &[
            after.currency().as_str().into(),
            minor(after).into(),
            buyer_ref.as_str().into(),
        ],
    )
    .await?;
    Ok(())
}

/// Adds `added` to the buyer's balance in its currency; the balance after.
pub async fn add(
    tx: &mut WriteTx,
    environment_ref: &Ref,
    buyer_ref: &Ref,
    added: Money,
    now: Timestamp,
) -> Result<Money, StoreError> {
    if added.minor() == 0 {
        return balance(tx, buyer_ref, added.currency()).await;
    }
    let rows = tx
        .fetch(
            "INSERT INTO credit_balances (buyer_ref, currency, environment_ref, amount_minor, \
             updated_at) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (buyer_ref, currency) \
             DO UPDATE SET amount_minor = credit_balances.amount_minor + excluded.amount_minor, \
             updated_at = excluded.updated_at, version = credit_balances.version + 1 \
             RETURNING amount_minor",
            &[
                buyer_ref.as_str().into(),
                added.currency().as_str().into(),
                environment_ref.as_str().into(),
                minor(added).into(),
                now.millis().into(),
            ],
        )
        .await?;
    let row = rows.first().ok_or(StoreError::Conflict)?;
    let after = amount(added.currency(), int(row, "amount_minor")?)?;
    mirror(tx, buyer_ref, after).await?;
    Ok(after)
}

/// Takes `used` from the buyer's balance in its currency; the balance
/// after. `Conflict` when the balance holds less (another unit of work
/// used it meanwhile): it never goes below zero.
pub async fn take(
    tx: &mut WriteTx,
    buyer_ref: &Ref,
    used: Money,
    now: Timestamp,
) -> Result<Money, StoreError> {
    if used.minor() == 0 {
        return balance(tx, buyer_ref, used.currency()).await;
    }
    let rows = tx
        .fetch(
            "UPDATE credit_balances SET amount_minor = amount_minor - $1, updated_at = $2, \
             version = version + 1 \
             WHERE buyer_ref = $3 AND currency = $4 AND amount_minor >= $1 \
             RETURNING amount_minor",
            &[
                minor(used).into(),
                now.millis().into(),
                buyer_ref.as_str().into(),
                used.currency().as_str().into(),
            ],
        )
        .await?;
    let row = rows.first().ok_or(StoreError::Conflict)?;
    let after = amount(used.currency(), int(row, "amount_minor")?)?;
    mirror(tx, buyer_ref, after).await?;
    Ok(after)
}
