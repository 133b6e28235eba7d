//! The query of a paged list (contract 6 and 10.1 "Lists"): `limit`,
//! `cursor`, a `status` filter on resources that have one, and reference
//! filters. Anything else is `validation_failed`; the cursor's scope covers
//! every filter, so a cursor minted under other filters is refused.

use crate::error::ApiError;
use crate::handlers::Ctx;
use crate::input::Input;
use crate::operation::{find, Operation};
use domain::cursor::scope;
use domain::{Prefix, Ref};
use store::PageRequest;

/// One query filter of a list operation besides `limit` and `cursor`, as
/// its row of the operation table binds it (`bind!(…, filters: …)`).
#[derive(Debug, Clone, Copy)]
pub struct Filter {
    pub name: &'static str,
    pub kind: FilterKind,
}

/// What a filter's value may be.
#[derive(Debug, Clone, Copy)]
pub enum FilterKind {
    /// One of these values (a resource's states).
    OneOf(fn() -> Vec<&'static str>),
    /// A reference of this kind.
    Ref(Prefix),
    /// An HTTP status from 100 to 599.
    HttpStatus,
    /// An operation id of the table.
    OperationId,
    /// Any text of 1 to 500 characters, matched exactly.
    Text,
    /// A moment, RFC 3339.
    Timestamp,
}

impl Filter {
    pub const fn one_of(name: &'static str, values: fn() -> Vec<&'static str>) -> Filter {
        Filter {
            name,
            kind: FilterKind::OneOf(values),
        }
    }

    pub const fn of(name: &'static str, kind: FilterKind) -> Filter {
        Filter { name, kind }
    }

    pub const fn reference(name: &'static str, prefix: Prefix) -> Filter {
        Filter {
            name,
            kind: FilterKind::Ref(prefix),
        }
    }

    /// `value` if this filter takes it; otherwise `validation_failed` on
    /// the filter's name.
    fn check(&self, value: &str, table: &'static [Operation]) -> Result<(), ApiError> {
        let invalid = |issue: String| ApiError::validation(self.name, issue);
        match self.kind {
            FilterKind::OneOf(values) => {
                let values = values();
                if !values.contains(&value) {
                    return Err(invalid(format!("must be one of {}", values.join(", "))));
                }
            }
            FilterKind::Ref(prefix) => {
                Ref::parse(prefix, value).map_err(|e| invalid(e.to_string()))?;
            }
            FilterKind::HttpStatus => {
                value
                    .parse::<u16>()
                    .ok()
                    .filter(|s| (100..=599).contains(s))
                    .ok_or_else(|| invalid("must be an HTTP status from 100 to 599".into()))?;
            }
            FilterKind::OperationId => {
                find(table, value).ok_or_else(|| invalid("unknown operation_id".into()))?;
            }
            FilterKind::Text => {
                if value.is_empty() || value.chars().count() > 500 {
                    return Err(invalid("must be 1 to 500 characters".into()));
                }
            }
            FilterKind::Timestamp => {
                domain::Timestamp::parse(value)
                    .ok_or_else(|| invalid("must be an RFC 3339 timestamp".into()))?;
            }
        }
        Ok(())
    }
}

/// A checked list query.
pub(crate) struct ListQuery<'a> {
    input: &'a Input,
    pub page: PageRequest,
    /// The cursor scope the next page's cursor is minted for.
    pub scope: String,
}

impl<'a> ListQuery<'a> {
    /// Checks the query of the request's operation against the filters
    /// its row binds: no other parameter, each value of the filter's kind.
    pub(crate) fn parse(ctx: &Ctx, input: &'a Input) -> Result<ListQuery<'a>, ApiError> {
        ListQuery::parse_within(ctx, input, &[])
    }

    /// `parse` for a list within a parent (`within`: the parent's path
    /// parameters), whose cursors are bound to that parent too.
    pub(crate) fn parse_within(
        ctx: &Ctx,
        input: &'a Input,
        within: &[(&'static str, Option<&'a str>)],
    ) -> Result<ListQuery<'a>, ApiError> {
        let op = ctx.op;
        let filters = op.binding.map(|b| (b.filters)()).unwrap_or_default();
        let mut allowed = vec!["limit", "cursor"];
        allowed.extend(filters.iter().map(|f| f.name));
        input.query_params(&allowed)?;
        let mut values = within.to_vec();
        for f in &filters {
            let value = input.query_value(f.name);
            if let Some(v) = value {
                f.check(v, ctx.table)?;
            }
            values.push((f.name, value));
        }
        let scope = scope(op.id, &values);
        let page = input.page(&scope)?;
        Ok(ListQuery { input, page, scope })
    }

    /// The `status` filter, parsed by the resource's state type.
    pub(crate) fn status<T>(
        &self,
        parse: fn(&str) -> Option<T>,
        values: &str,
    ) -> Result<Option<T>, ApiError> {
        self.input
            .query_value("status")
            .map(|s| {
                parse(s).ok_or_else(|| ApiError::validation("status", format!("must be {values}")))
            })
            .transpose()
    }

    /// A filter's value as given (checked by `parse`).
    pub(crate) fn value(&self, name: &str) -> Option<&'a str> {
        self.input.query_value(name)
    }

    /// A timestamp filter's value (checked by `parse`).
    pub(crate) fn timestamp(&self, name: &str) -> Option<domain::Timestamp> {
        self.input
            .query_value(name)
            .and_then(domain::Timestamp::parse)
    }

    /// A reference filter's value (its shape checked by `parse`).
    pub(crate) fn reference(&self, name: &str) -> Option<Ref> {
        self.input
            .query_value(name)
            .map(|r| Ref::from_trusted(r.to_owned()))
    }
}
