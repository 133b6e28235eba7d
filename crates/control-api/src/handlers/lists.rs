//! The query of a paged list (contract 6 and 10.1 "Lists"): `limit`,
//! `cursor`, a `status` filter on resources that have one, and reference
//! filters. Anything else is `validation_failed`; the cursor's scope covers
//! every filter, so a cursor minted under other filters is refused.

use crate::error::ApiError;
use crate::input::Input;
use domain::cursor::scope;
use domain::{Prefix, Ref};
use store::PageRequest;

/// A checked list query.
pub(crate) struct ListQuery<'a> {
    input: &'a Input,
    pub page: PageRequest,
    /// The cursor scope the next page's cursor is minted for.
    pub scope: String,
}

impl<'a> ListQuery<'a> {
    /// Checks the query of `op_id`: its `status` (if `status` names the
    /// resource's values) and the reference filters `refs`.
    pub(crate) fn parse(
        op_id: &str,
        input: &'a Input,
        status: Option<&str>,
        refs: &[(&str, Prefix)],
    ) -> Result<ListQuery<'a>, ApiError> {
        let mut allowed = vec!["limit", "cursor"];
        allowed.extend(status.map(|_| "status"));
        allowed.extend(refs.iter().map(|(name, _)| *name));
        input.query_params(&allowed)?;
        let mut filters = Vec::with_capacity(refs.len() + 1);
        if status.is_some() {
            filters.push(("status", input.query_value("status")));
        }
        for (name, prefix) in refs {
            let value = input.query_value(name);
            if let Some(v) = value {
                Ref::parse(*prefix, v).map_err(|e| ApiError::validation(*name, e.to_string()))?;
            }
            filters.push((name, value));
        }
        let scope = scope(op_id, &filters);
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

    /// A reference filter's value (its shape checked by `parse`).
    pub(crate) fn reference(&self, name: &str) -> Option<Ref> {
        self.input
            .query_value(name)
            .map(|r| Ref::from_trusted(r.to_owned()))
    }
}
