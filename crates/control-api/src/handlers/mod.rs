//! Operation handlers, and the registry binding each `operation_id` of the
//! table to its handler and its wire schemas.
//!
//! A handler receives an authenticated, authorised `Ctx` and a parsed
//! `Input`; the pipeline has already checked headers and parsed the body as
//! JSON. Handlers do existence, precondition match and semantics, in that
//! order, and never build HTTP responses themselves.

pub mod admin;
pub mod webhooks;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::input::Input;
use crate::operations::Operation;
use crate::reply::Reply;
use crate::state::AppState;
use futures::future::BoxFuture;
use sync_wrapper::SyncWrapper;

/// Everything a handler may use besides its input.
pub struct Ctx {
    pub state: AppState,
    pub caller: Caller,
    pub op: &'static Operation,
    /// The request's unit of work, for write operations (`pipeline`).
    /// Only ever used through `&mut`, so the wrapper lets handlers share
    /// `&Ctx` across await points although a transaction is not `Sync`.
    pub(crate) tx: Option<SyncWrapper<store::WriteTx>>,
}

impl Ctx {
    /// The request's write transaction: every write of a handler goes
    /// through it, so that the request's rows, events and idempotent
    /// result commit together.
    pub fn tx(&mut self) -> Result<&mut store::WriteTx, ApiError> {
        self.tx
            .as_mut()
            .map(SyncWrapper::get_mut)
            .ok_or_else(|| ApiError::Internal("a read operation tried to write".into()))
    }

    pub fn store(&self) -> &store::Store {
        &self.state.store
    }

    pub fn env(&self) -> &domain::Ref {
        &self.caller.environment_ref
    }
}

pub type HandlerFn = for<'a> fn(&'a mut Ctx, Input) -> BoxFuture<'a, Result<Reply, ApiError>>;

/// A schema for the OpenAPI document: its name and the component schemas
/// it needs (itself included).
pub type SchemaFn = fn() -> (
    String,
    Vec<(
        String,
        utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>,
    )>,
);

/// How an operation is served and described.
pub struct Binding {
    pub handler: HandlerFn,
    /// Request body schema, for operations that take one.
    pub request: Option<SchemaFn>,
    /// Schema of `data`, or of one item for lists.
    pub response: SchemaFn,
}

/// The schema function of a `ToSchema` type.
pub fn schema<T: utoipa::ToSchema>() -> (
    String,
    Vec<(
        String,
        utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>,
    )>,
) {
    let mut all = Vec::new();
    <T as utoipa::ToSchema>::schemas(&mut all);
    let name = <T as utoipa::ToSchema>::name().into_owned();
    all.push((name.clone(), <T as utoipa::PartialSchema>::schema()));
    (name, all)
}

macro_rules! bind {
    ($f:path, req: $req:ty, resp: $resp:ty) => {
        Binding {
            handler: |ctx, input| Box::pin($f(ctx, input)),
            request: Some(schema::<$req>),
            response: schema::<$resp>,
        }
    };
    ($f:path, resp: $resp:ty) => {
        Binding {
            handler: |ctx, input| Box::pin($f(ctx, input)),
            request: None,
            response: schema::<$resp>,
        }
    };
}

/// The binding of `operation_id`, or `None` for operations not built yet.
pub fn binding(operation_id: &str) -> Option<Binding> {
    use admin::{
        credentials as cr, environments as env, grants as gr, request_logs as rl,
        service_accounts as sa,
    };
    use webhooks::{
        data_profiles as dp, deliveries as dl, endpoints as ep, event_types as et, health as hl,
        redrive as rd, secrets as sec, subscriptions as sub, test_send as ts,
    };
    Some(match operation_id {
        "listEnvironments" => bind!(env::list, resp: env::EnvironmentDto),
        "listServiceAccounts" => bind!(sa::list, resp: sa::ServiceAccountDto),
        "createServiceAccount" => {
            bind!(sa::create, req: sa::CreateServiceAccount, resp: sa::ServiceAccountDto)
        }
        "retrieveServiceAccount" => bind!(sa::retrieve, resp: sa::ServiceAccountDto),
        "suspendServiceAccount" => {
            bind!(sa::suspend, req: sa::ReasonBody, resp: sa::ServiceAccountDto)
        }
        "resumeServiceAccount" => {
            bind!(sa::resume, req: sa::ReasonBody, resp: sa::ServiceAccountDto)
        }
        "retireServiceAccount" => {
            bind!(sa::retire, req: sa::ReasonBody, resp: sa::ServiceAccountDto)
        }
        "listServiceAccountCredentials" => bind!(cr::list, resp: cr::CredentialDto),
        "issueServiceAccountCredential" => {
            bind!(cr::issue, req: cr::IssueCredential, resp: cr::CredentialDto)
        }
        "rotateServiceAccountCredential" => {
            bind!(cr::rotate, req: cr::RotateCredential, resp: cr::CredentialDto)
        }
        "revokeServiceAccountCredential" => {
            bind!(cr::revoke, req: cr::RevokeCredential, resp: cr::CredentialDto)
        }
        "listServiceAccountGrants" => bind!(gr::list, resp: gr::GrantDto),
        "grantServiceAccountPermission" => {
            bind!(gr::grant, req: gr::GrantPermission, resp: gr::GrantDto)
        }
        "revokeServiceAccountPermission" => {
            bind!(gr::revoke, req: sa::ReasonBody, resp: gr::GrantDto)
        }
        "listPublicRequestLogs" => bind!(rl::list, resp: rl::RequestLogDto),
        "listWebhookEndpoints" => bind!(ep::list, resp: ep::EndpointDto),
        "createWebhookEndpoint" => {
            bind!(ep::create, req: ep::CreateEndpoint, resp: ep::EndpointDto)
        }
        "retrieveWebhookEndpoint" => bind!(ep::retrieve, resp: ep::EndpointDto),
        "pauseWebhookEndpoint" => bind!(ep::pause, req: ep::EmptyBody, resp: ep::EndpointDto),
        "resumeWebhookEndpoint" => bind!(ep::resume, req: ep::EmptyBody, resp: ep::EndpointDto),
        "rotateWebhookSecret" => bind!(sec::rotate, req: sec::SecretReason, resp: ep::EndpointDto),
        "confirmWebhookSecret" => {
            bind!(sec::confirm, req: sec::SecretReason, resp: ep::EndpointDto)
        }
        "revokeWebhookSecret" => bind!(sec::revoke, req: sec::SecretReason, resp: ep::EndpointDto),
        "listWebhookSubscriptions" => bind!(sub::list, resp: sub::SubscriptionDto),
        "createWebhookSubscription" => {
            bind!(sub::create, req: sub::CreateSubscription, resp: sub::SubscriptionDto)
        }
        "listWebhookDataProfileGrants" => bind!(dp::list, resp: dp::DataProfileGrantDto),
        "createWebhookDataProfileGrant" => {
            bind!(dp::create, req: dp::CreateDataProfileGrant, resp: dp::DataProfileGrantDto)
        }
        "revokeWebhookDataProfileGrant" => {
            bind!(dp::revoke, req: dp::RevokeDataProfileGrant, resp: dp::DataProfileGrantDto)
        }
        "listWebhookDeliveries" => bind!(dl::list, resp: dl::DeliveryDto),
        "retrieveWebhookDelivery" => bind!(dl::retrieve, resp: dl::DeliveryDto),
        "retrieveWebhookDeliveryBody" => bind!(dl::body, resp: dl::DeliveryBodyDto),
        "listWebhookDeliveryAttempts" => bind!(dl::attempts, resp: dl::AttemptDto),
        "retrieveWebhookEndpointHealth" => bind!(hl::retrieve, resp: hl::EndpointHealthDto),
        "redriveWebhookDelivery" => {
            bind!(rd::single, req: rd::Redrive, resp: rd::RedriveOutcomeDto)
        }
        "batchRedriveWebhookDeliveries" => {
            bind!(rd::batch, req: rd::BatchRedrive, resp: rd::BatchRedriveDto)
        }
        "sendWebhookTest" => bind!(ts::send, req: ts::SendTest, resp: dl::DeliveryDto),
        "listWebhookEventTypes" => bind!(et::list, resp: et::EventTypeDto),
        _ => return None,
    })
}

pub fn handler(operation_id: &str) -> Option<HandlerFn> {
    binding(operation_id).map(|b| b.handler)
}
