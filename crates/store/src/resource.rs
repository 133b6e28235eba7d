//! The one way the store reads a record by reference and lists records of
//! an environment, newest first: a record kept in one table of its own is a
//! `Resource` (its table, reference column, order, scope and list filters),
//! and `Store::get`, `Store::list` (a keyset page) and `Store::list_all`
//! (every row: the lists the contract does not page) build their
//! statements from it. Billing records, webhook endpoints, subscriptions,
//! data profile grants, attempts, redrive jobs, service accounts,
//! credentials, grants, request logs and dead letters are all listed here.
//!
//! It owns those statements and nothing else: what a record carries beside
//! its row (an endpoint's secret versions, an offer's promotions) is read
//! by the domain's repository and attached after the generic read, which
//! is why such a record is listed through its repository
//! (`Webhooks::list_endpoints`). It never writes, never decides a rule, and
//! never reads a list whose statement must say more than equality on
//! columns: an endpoint's filtered deliveries keep their own statement
//! (`webhooks::deliveries::list_deliveries_sql`, for its partial indexes).
//!
//! Every list is a conjunction of equalities: the scope first
//! (`environment_ref`, then the parent's column), then one per filter
//! given (a filter not given is not in the statement, rather than an
//! `OR` that would hide the column from the planner; a status the clock
//! changes adds its moment, `Expiry`), ordered by
//! `(CREATED_COLUMN, REF_COLUMN)` descending: the columns the tables'
//! list indexes were made for.

use crate::db::page::{all_sql, fetch_page, Order, Page, PageRequest};
use crate::db::read;
use crate::db::tx::{Arg, Columns};
use crate::{Store, StoreError};
use domain::{Ref, Timestamp};

/// A record kept in one table of its own: read by reference
/// (`Store::get`) and listed newest first (`Store::list`,
/// `Store::list_all`), with the list filters of contract 10.1.
pub trait Resource: Sized {
    const TABLE: &'static str;
    const REF_COLUMN: &'static str;
    /// The moment a record was made, first key of the newest-first order
    /// and of a page's cursor: `created_at` unless the table keeps it
    /// under another name (a grant's `granted_at`, a dead letter's
    /// `received_at`).
    const CREATED_COLUMN: &'static str = "created_at";
    /// Which rows an environment sees.
    const VISIBILITY: Visibility = Visibility::Environment;
    /// For a record listed under another (an endpoint's subscriptions, an
    /// account's credentials): the column of that record's reference,
    /// which a list's `Scope` must then give.
    const PARENT_COLUMN: Option<&'static str> = None;
    /// The list filters: `(query parameter, column)`.
    const FILTERS: &'static [(&'static str, &'static str)] = &[];
    /// For a status the clock changes: the stored status that reads as
    /// another once a moment has passed (a session expires, a journey is
    /// abandoned).
    const EXPIRY: Option<Expiry> = None;
    fn decode(row: &dyn Columns) -> Result<Self, StoreError>;
}

/// Which rows of a table an environment reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Visibility {
    /// Its own (`environment_ref = …`): every resource row carries one.
    Environment,
    /// Its own and those of no environment (`environment_ref IS NULL`): a
    /// dead letter whose envelope named none is every environment's.
    EnvironmentOrNone,
}

/// A stored status that reads as `reads_as` from the moment in `column` on.
pub struct Expiry {
    pub column: &'static str,
    pub stored: &'static str,
    pub reads_as: &'static str,
}

/// The records a list reads: an environment's, and for a record with a
/// `Resource::PARENT_COLUMN`, of one parent.
#[derive(Debug, Clone, Copy)]
pub struct Scope<'a> {
    environment_ref: &'a Ref,
    parent_ref: Option<&'a Ref>,
}

impl<'a> Scope<'a> {
    /// The records of an environment.
    pub fn environment(environment_ref: &'a Ref) -> Scope<'a> {
        Scope {
            environment_ref,
            parent_ref: None,
        }
    }

    /// The records of an environment kept under `parent_ref`.
    pub fn under(environment_ref: &'a Ref, parent_ref: &'a Ref) -> Scope<'a> {
        Scope {
            environment_ref,
            parent_ref: Some(parent_ref),
        }
    }
}

/// The value of a list filter, bound as its column's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value<'a> {
    Text(&'a str),
    Int(i64),
}

impl<'a> From<&'a str> for Value<'a> {
    fn from(v: &'a str) -> Self {
        Value::Text(v)
    }
}

impl From<i64> for Value<'_> {
    fn from(v: i64) -> Self {
        Value::Int(v)
    }
}

impl<'a> From<Value<'a>> for Arg<'a> {
    fn from(v: Value<'a>) -> Self {
        match v {
            Value::Text(v) => Arg::from(v),
            Value::Int(v) => Arg::from(v),
        }
    }
}

/// A list filter: `(query parameter of T::FILTERS, value if given)`.
pub type Filter<'a> = (&'a str, Option<Value<'a>>);

impl Store {
    /// The record `reference` of the environment; `NotFound` otherwise.
    pub async fn get<T: Resource>(
        &self,
        environment_ref: &Ref,
        reference: &Ref,
    ) -> Result<T, StoreError> {
        let sql = format!(
            "SELECT * FROM {} WHERE {} = $1 AND {}",
            T::TABLE,
            T::REF_COLUMN,
            visible::<T>(2)
        );
        read::one(
            self.pool(),
            &sql,
            &[reference.as_str().into(), environment_ref.as_str().into()],
            T::decode,
        )
        .await
    }

    /// A page of the scope's records that meet every filter given, newest
    /// first.
    pub async fn list<T: Resource>(
        &self,
        scope: Scope<'_>,
        filters: &[Filter<'_>],
        page: &PageRequest,
    ) -> Result<Page<T>, StoreError> {
        let (filter, args) = conditions::<T>(scope, filters)?;
        fetch_page(
            self.pool(),
            T::TABLE,
            order::<T>(),
            &filter,
            &args,
            page,
            T::decode,
        )
        .await
    }

    /// Every record of the scope that meets every filter given, newest
    /// first: for the lists the contract does not page (an endpoint's
    /// subscriptions, an account's credentials).
    pub async fn list_all<T: Resource>(
        &self,
        scope: Scope<'_>,
        filters: &[Filter<'_>],
    ) -> Result<Vec<T>, StoreError> {
        let (filter, args) = conditions::<T>(scope, filters)?;
        let sql = all_sql(T::TABLE, order::<T>(), &filter);
        read::all(self.pool(), &sql, &args, T::decode).await
    }
}

fn order<T: Resource>() -> Order<'static> {
    Order {
        at: T::CREATED_COLUMN,
        key: T::REF_COLUMN,
    }
}

/// The environment condition of `T`, its value bound at mark `$mark`.
fn visible<T: Resource>(mark: usize) -> String {
    match T::VISIBILITY {
        Visibility::Environment => format!("environment_ref = ${mark}"),
        Visibility::EnvironmentOrNone => {
            format!("(environment_ref = ${mark} OR environment_ref IS NULL)")
        }
    }
}

/// The condition of a list of `T` and the values its marks bind: the
/// scope, then each filter given, in the order given.
fn conditions<'a, T: Resource>(
    scope: Scope<'a>,
    filters: &[Filter<'a>],
) -> Result<(String, Vec<Arg<'a>>), StoreError> {
    let mut sql = visible::<T>(1);
    let mut args: Vec<Arg<'a>> = vec![scope.environment_ref.as_str().into()];
    let mut add = |column: &str, op: &str, value: Arg<'a>| {
        args.push(value);
        sql.push_str(&format!(" AND {column} {op} ${}", args.len()));
    };
    match (T::PARENT_COLUMN, scope.parent_ref) {
        (Some(column), Some(parent)) => add(column, "=", parent.as_str().into()),
        (None, None) => {}
        _ => {
            return Err(StoreError::Config(format!(
                "{} is listed {} a parent",
                T::TABLE,
                if T::PARENT_COLUMN.is_some() {
                    "under"
                } else {
                    "without"
                }
            )))
        }
    }
    let now = Timestamp::now().millis();
    for (name, value) in filters {
        let column = T::FILTERS
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, c)| *c)
            .ok_or_else(|| StoreError::Config(format!("{} has no filter {name}", T::TABLE)))?;
        let Some(value) = *value else { continue };
        match (T::EXPIRY.as_ref().filter(|_| *name == "status"), value) {
            (Some(e), Value::Text(v)) if v == e.stored => {
                add(column, "=", e.stored.into());
                add(e.column, ">", now.into());
            }
            (Some(e), Value::Text(v)) if v == e.reads_as => {
                add(column, "=", e.stored.into());
                add(e.column, "<=", now.into());
            }
            _ => add(column, "=", value.into()),
        }
    }
    Ok((sql, args))
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::Prefix;

    struct Child;
    impl Resource for Child {
        const TABLE: &'static str = "children";
        const REF_COLUMN: &'static str = "child_ref";
        const PARENT_COLUMN: Option<&'static str> = Some("parent_ref");
        const FILTERS: &'static [(&'static str, &'static str)] =
            &[("status", "status"), ("code", "code_column")];
        const EXPIRY: Option<Expiry> = Some(Expiry {
            column: "expires_at",
            stored: "open",
            reads_as: "expired",
        });
        fn decode(_: &dyn Columns) -> Result<Self, StoreError> {
            Ok(Child)
        }
    }

    struct Letter;
    impl Resource for Letter {
        const TABLE: &'static str = "letters";
        const REF_COLUMN: &'static str = "letter_id";
        const CREATED_COLUMN: &'static str = "received_at";
        const VISIBILITY: Visibility = Visibility::EnvironmentOrNone;
        fn decode(_: &dyn Columns) -> Result<Self, StoreError> {
            Ok(Letter)
        }
    }

    #[test]
    fn a_list_is_its_scope_then_each_filter_given() {
        let (env, parent) = (
            Ref::generate(Prefix::Environment),
            Ref::generate(Prefix::WebhookEndpoint),
        );
        let (sql, args) = conditions::<Child>(
            Scope::under(&env, &parent),
            &[("status", None), ("code", Some(Value::Int(7)))],
        )
        .unwrap();
        assert_eq!(
            sql,
            "environment_ref = $1 AND parent_ref = $2 AND code_column = $3"
        );
        assert_eq!(args.len(), 3);
        assert!(matches!(args[2], Arg::Int(Some(7))));
        let (sql, _) = conditions::<Child>(
            Scope::under(&env, &parent),
            &[("status", Some("expired".into()))],
        )
        .unwrap();
        assert_eq!(
            sql,
            "environment_ref = $1 AND parent_ref = $2 AND status = $3 AND expires_at <= $4"
        );
        let (sql, _) = conditions::<Letter>(Scope::environment(&env), &[]).unwrap();
        assert_eq!(sql, "(environment_ref = $1 OR environment_ref IS NULL)");
        assert_eq!(
            all_sql(Letter::TABLE, order::<Letter>(), &sql),
            "SELECT * FROM letters WHERE (environment_ref = $1 OR environment_ref IS NULL) \
             ORDER BY received_at DESC, letter_id DESC"
        );
    }

    #[test]
    fn a_scope_or_filter_the_record_lacks_is_refused() {
        let env = Ref::generate(Prefix::Environment);
        assert!(matches!(
            conditions::<Child>(Scope::environment(&env), &[]),
            Err(StoreError::Config(_))
        ));
        assert!(matches!(
            conditions::<Letter>(Scope::under(&env, &env), &[]),
            Err(StoreError::Config(_))
        ));
        assert!(matches!(
            conditions::<Letter>(Scope::environment(&env), &[("reason", None)]),
            Err(StoreError::Config(_))
        ));
    }
}
