//! The billing domain's rows: the catalogue (products, prices, offers,
//! promotions) and checkout configs with their versions.
//!
//! Like the other domains, writes are free functions of the caller's unit
//! of work (`products::create(tx, …)`) and reads are methods of `Billing`,
//! the domain's read repository (`store.billing()`); a record served as it
//! is kept (a product, a payment, a session) is a `crate::resource::Resource`,
//! read by `Store::get` and listed by `Store::list`. The writes that must
//! see the state they are about to change (an offer's promotions when a
//! promotion is applied, a product's published price when another is
//! published) read it inside the unit of work, after taking the row lock
//! that orders them (`products::lock`, `offers::lock`); those reads run on
//! either side through `Source`.
//!
//! It never decides a rule of the catalogue (which transition is allowed,
//! what a discount is): those are `domain::catalogue`'s. It keeps rows, the
//! conditional writes that guard them, and the unique indexes that back the
//! rules one row at a time (one published price per product, one offer per
//! product).

pub mod checkout;
pub mod checkout_configs;
pub mod jobs;
pub mod offers;
pub mod outside;
pub mod prices;
pub mod products;
pub mod promotions;
pub mod refunds;
pub mod test_clocks;

use crate::db::read;
use crate::db::tx::{int, text, Columns, WriteTx};
use crate::{Store, StoreError};
use domain::{Currency, Money};
use sqlx::AnyPool;

/// The billing domain's read repository, borrowing the store
/// (`Store::billing`).
#[derive(Clone, Copy)]
pub struct Billing<'a>(&'a Store);

impl Store {
    /// The billing domain's reads (`Billing`).
    pub fn billing(&self) -> Billing<'_> {
        Billing(self)
    }
}

impl<'a> Billing<'a> {
    fn source(&self) -> Source<'a> {
        Source::Pool(self.0.pool(), self.0.backend())
    }
}

/// Where a read runs: on the read pool, or inside a unit of work (which
/// sees its own writes, and rows committed after its locks were taken).
pub(crate) enum Source<'a> {
    Pool(&'a AnyPool, crate::Backend),
    Tx(&'a mut WriteTx),
}

impl Source<'_> {
    /// The marks of a statement run here (`db::marks`).
    pub(crate) fn marks(&self) -> crate::db::marks::Marks {
        crate::db::marks::Marks::new(match self {
            Source::Pool(_, backend) => *backend,
            Source::Tx(tx) => tx.backend(),
        })
    }

    pub(crate) async fn all<T>(
        &mut self,
        sql: &str,
        args: &[crate::db::tx::Arg<'_>],
        decode: impl Fn(&dyn Columns) -> Result<T, StoreError>,
    ) -> Result<Vec<T>, StoreError> {
        match self {
            Source::Pool(pool, _) => read::all(*pool, sql, args, |row| decode(row)).await,
            Source::Tx(tx) => tx
                .fetch(sql, args)
                .await?
                .iter()
                .map(|row| decode(row))
                .collect(),
        }
    }

    pub(crate) async fn one<T>(
        &mut self,
        sql: &str,
        args: &[crate::db::tx::Arg<'_>],
        decode: impl Fn(&dyn Columns) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.all(sql, args, decode)
            .await?
            .into_iter()
            .next()
            .ok_or(StoreError::NotFound)
    }
}

/// Money kept as a currency column and a minor-units column.
pub(crate) fn money(row: &dyn Columns, currency: &str, minor: &str) -> Result<Money, StoreError> {
    let code = text(row, currency)?;
    let currency = Currency::parse(&code).map_err(|_| StoreError::Corrupt(code))?;
    money_in(row, currency, minor)
}

/// Minor units kept in `minor`, of a currency another column gave (what a
/// capture or payment has refunded or reserved, in its amount's currency).
pub(crate) fn money_in(
    row: &dyn Columns,
    currency: Currency,
    minor: &str,
) -> Result<Money, StoreError> {
    let value = u64::try_from(int(row, minor)?)
        .map_err(|_| StoreError::Corrupt(format!("{minor} is negative")))?;
    Money::new(currency, value).map_err(|e| StoreError::Corrupt(format!("{minor}: {e}")))
}

/// A money amount as a column value. Amounts are at most 18 digits
/// (`domain::money::MAX_VALUE`), so they always fit.
pub(crate) fn minor(m: Money) -> i64 {
    i64::try_from(m.minor()).unwrap_or(i64::MAX)
}
