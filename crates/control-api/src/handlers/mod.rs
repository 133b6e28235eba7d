//! Operation handlers (bound to the rows of the operation table in
//! `operations`, by `operation::bind!`) and the `Ctx` each receives.
//!
//! A handler receives an authenticated, authorised `Ctx` and a parsed
//! `Input`; the pipeline has already checked headers and parsed the body as
//! JSON. Handlers do existence, precondition match and semantics, in that
//! order, and never build HTTP responses themselves.

pub mod admin;
pub mod catalogue;
pub mod checkout;
pub(crate) mod lists;
pub mod money;
pub mod reads;
pub mod webhooks;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::operation::Operation;
use crate::state::AppState;
use sync_wrapper::SyncWrapper;

/// Everything a handler may use besides its input.
pub struct Ctx {
    pub state: AppState,
    pub caller: Caller,
    pub op: &'static Operation,
    /// The whole operation table (`operations::OPERATIONS`), for the rules
    /// that read every row: grantable permissions, `operation_id` filters.
    pub table: &'static [Operation],
    /// How the request's unit of work opens, if it may write.
    pub(crate) unit: Unit,
    /// The request's unit of work once opened (`tx`). Only ever used
    /// through `&mut`, so the wrapper lets handlers share `&Ctx` across
    /// await points although a transaction is not `Sync`.
    pub(crate) tx: Option<SyncWrapper<store::WriteTx>>,
}

/// How a request's unit of work opens (`pipeline`).
pub(crate) enum Unit {
    /// A read operation: it never writes.
    Read,
    /// A write without an idempotency key.
    Plain,
    /// A write under a key this process claimed.
    Keyed(Box<store::KeyClaim>),
}

/// Opens the unit of work of a claimed key. `Conflict` there means that
/// another process claimed or decided the same key meanwhile: a request
/// still executing, for the client (contract section 4).
pub(crate) async fn open_keyed(claim: &store::KeyClaim) -> Result<store::WriteTx, ApiError> {
    claim.begin().await.map_err(|e| match e {
        store::StoreError::Conflict => ApiError::key_in_flight(),
        e => e.into(),
    })
}

impl Ctx {
    /// The request's write transaction, opened at the first call: every
    /// write of a handler goes through it, so that the request's rows,
    /// events and idempotent result commit together. A handler checks its
    /// input (reads, a DNS lookup) before it calls this, so that no write
    /// turn is held meanwhile.
    pub async fn tx(&mut self) -> Result<&mut store::WriteTx, ApiError> {
        if self.tx.is_none() {
            let tx = match &self.unit {
                Unit::Read => {
                    return Err(ApiError::Internal("a read operation tried to write".into()))
                }
                Unit::Plain => self.state.store.begin().await?,
                Unit::Keyed(claim) => open_keyed(claim).await?,
            };
            self.tx = Some(SyncWrapper::new(tx));
        }
        match self.tx.as_mut() {
            Some(tx) => Ok(tx.get_mut()),
            None => Err(ApiError::Internal("the unit of work was lost".into())),
        }
    }

    /// Every permission an operation of the table needs.
    pub fn permissions(&self) -> Vec<&'static str> {
        crate::operation::permissions_of(self.table)
    }

    pub fn store(&self) -> &store::Store {
        &self.state.store
    }

    pub fn env(&self) -> &domain::Ref {
        &self.caller.environment_ref
    }

    /// "Now" for the request's rules (`ApiSettings::clock`).
    pub fn now(&self) -> domain::Timestamp {
        self.state.settings.clock.now()
    }
}

/// The references of kind `prefix` listed at `field`: each well-formed,
/// none twice.
pub(crate) fn distinct_refs(
    field: &str,
    prefix: domain::Prefix,
    refs: &[String],
) -> Result<Vec<String>, ApiError> {
    let mut out: Vec<String> = Vec::with_capacity(refs.len());
    for (i, r) in refs.iter().enumerate() {
        domain::Ref::parse(prefix, r)
            .map_err(|e| ApiError::validation(format!("{field}.{i}"), e.to_string()))?;
        if out.contains(r) {
            return Err(ApiError::validation(format!("{field}.{i}"), "listed twice"));
        }
        out.push(r.clone());
    }
    Ok(out)
}
