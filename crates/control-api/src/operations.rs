//! The operation table of `interface.md`, as data.
//!
//! This is the one source of truth for each operation's method, path,
//! permission, idempotency, precondition, paging, error set, success status
//! and handler. Routing, authentication checks, the pipeline, the OpenAPI
//! document and the tests all read it. Generated once from `interface.md`;
//! edit it together with that file.
//!
//! Adding an operation is one row here plus its handler function (bound
//! with `bind!`). A row without a handler is an operation not built yet: it
//! is routed and checked, and answers `404 not_found`.

// Handler modules, abbreviated for the table.
use crate::handlers::admin::{
    credentials as cr, environments as env, grants as gr, request_logs as rl,
    service_accounts as sa,
};
use crate::handlers::catalogue::{
    checkout_configs as cc, offers as of, prices as pr, products as pd, promotions as pm,
};
use crate::handlers::checkout::{
    cancel as sc, change as chg, pay, sessions as cs, test_clocks as clk,
};
use crate::handlers::money::refunds as rf;
use crate::handlers::reads as read;
use crate::handlers::webhooks::{
    data_profiles as dp, dead_letters as dlq, deliveries as dl, endpoints as ep, event_types as et,
    health as hl, redrive as rd, redrive_jobs as rj, secrets as sec, skip as sk,
    subscriptions as sub, test_send as ts,
};
use crate::operation::{bind, find, permissions_of};
pub use crate::operation::{ErrorSet, Method, Operation};
use crate::wire;
use commerce::shapes::{catalogue as cat, checkout as rec, outside as os, refunds as refund};
use store::billing::checkout::{
    buyers::BuyerRecord, entitlements::EntitlementRecord, journeys::JourneyRecord,
    methods::StoredMethodRecord, orders::InvoiceRecord, orders::OrderRecord,
    payments::CaptureRecord, payments::PaymentRecord, sessions::SessionRecord,
    subscriptions::ChangeRecord, subscriptions::SubscriptionRecord,
};
use store::billing::outside::{DisputeRecord, ParticipationRecord, PayoutRecord};
use store::billing::prices::PriceRecord;
use store::billing::products::ProductRecord;
use store::billing::refunds::RefundRecord;
use store::billing::test_clocks::TestClockRecord;

/// One row: method, path, operation id, permission, idempotent, if-match,
/// cursor, error set, `=>` success status and, for built operations, the
/// `bind!` of the handler.
macro_rules! op {
    ($m:ident $path:literal $id:literal $perm:literal $idem:literal $ifm:literal $cur:literal $e:ident => $status:literal $($binding:expr)?) => {
        Operation {
            method: Method::$m,
            path: $path,
            id: $id,
            permission: $perm,
            idempotent: $idem,
            if_match: $ifm,
            cursor: $cur,
            errors: ErrorSet::$e,
            success_status: $status,
            binding: op!(@binding $($binding)?),
        }
    };
    (@binding) => { None };
    (@binding $binding:expr) => { Some($binding) };
}

/// Every operation of `interface.md`, in its order.
#[rustfmt::skip]
pub static OPERATIONS: &[Operation] = &[
    op!(Get "/api/v1/buyers" "listBuyers" "buyers:read_list" false false true E2 => 200 bind!(read::list::<BuyerRecord>, resp: rec::BuyerDto, filters: read::filters::<BuyerRecord>)),
    op!(Get "/api/v1/buyers/{buyer_ref}" "retrieveBuyer" "buyers:read_retrieve" false false false E2 => 200 bind!(read::retrieve::<BuyerRecord>, resp: rec::BuyerDto)),
    op!(Get "/api/v1/captures" "listCaptures" "captures:read_list" false false true E2 => 200 bind!(read::list::<CaptureRecord>, resp: rec::CaptureDto, filters: read::filters::<CaptureRecord>)),
    op!(Get "/api/v1/captures/{capture_ref}" "retrieveCapture" "captures:read_retrieve" false false false E2 => 200 bind!(read::retrieve::<CaptureRecord>, resp: rec::CaptureDto)),
    op!(Post "/api/v1/checkout-configs" "createCheckoutConfig" "checkout_configs:write_create" true false false E3 => 201 bind!(cc::create, req: cc::CreateCheckoutConfig, resp: cc::ConfigDto)),
    op!(Get "/api/v1/checkout-configs/{config_ref}" "retrieveCheckoutConfig" "checkout_configs:read_retrieve" false false false E2 => 200 bind!(cc::retrieve, resp: cc::ConfigDto)),
    op!(Post "/api/v1/checkout-configs/{config_ref}/publish" "publishCheckoutConfig" "checkout_configs:write_publish" true false false E3 => 200 bind!(cc::publish, req: cc::PublishCheckoutConfig, resp: cc::ConfigDto)),
    op!(Post "/api/v1/checkout-configs/{config_ref}/versions" "createCheckoutConfigVersion" "checkout_configs:write_create_version" true false false E3 => 201 bind!(cc::create_version, req: cc::CreateCheckoutConfigVersion, resp: cc::ConfigDto)),
    op!(Get "/api/v1/checkout-sessions" "listCheckoutSessions" "checkout_sessions:read_list" false false true E2 => 200 bind!(read::list::<SessionRecord>, resp: rec::SessionDto, filters: read::filters::<SessionRecord>)),
    op!(Post "/api/v1/checkout-sessions" "createCheckoutSession" "checkout_sessions:write_create" true false false E3 => 201 bind!(cs::create, req: cs::CreateCheckoutSession, resp: rec::SessionDto)),
    op!(Get "/api/v1/checkout-sessions/{checkout_session_ref}" "retrieveCheckoutSession" "checkout_sessions:read_retrieve" false false false E2 => 200 bind!(read::retrieve::<SessionRecord>, resp: rec::SessionDto)),
    op!(Post "/api/v1/checkout-sessions/{checkout_session_ref}/pay" "payCheckoutSession" "checkout_sessions:write_pay" true false false E3 => 200 bind!(pay::pay, req: pay::PayCheckoutSession, resp: pay::PayResultDto)),
    op!(Post "/api/v1/credentials/{credential_ref}/revoke" "revokeServiceAccountCredential" "credentials:manage_revoke" true true false E4 => 200 bind!(cr::revoke, req: cr::RevokeCredential, resp: cr::CredentialDto)),
    op!(Post "/api/v1/credentials/{credential_ref}/rotate" "rotateServiceAccountCredential" "credentials:manage_rotate" true true false E4 => 200 bind!(cr::rotate, req: cr::RotateCredential, resp: cr::CredentialDto)),
    op!(Get "/api/v1/dead_letters" "listDeadLetters" "events:read_dead_letters" false false true E1 => 200 bind!(dlq::list, resp: dlq::DeadLetterDto, filters: dlq::filters)),
    op!(Get "/api/v1/disputes" "listDisputes" "disputes:read_list" false false true E1 => 200 bind!(read::list::<DisputeRecord>, resp: os::DisputeDto, filters: read::filters::<DisputeRecord>)),
    op!(Get "/api/v1/disputes/{dispute_ref}" "retrieveDispute" "disputes:read" false false false E1 => 200 bind!(read::retrieve::<DisputeRecord>, resp: os::DisputeDto)),
    op!(Get "/api/v1/entitlements" "listEntitlements" "entitlements:read_list" false false true E2 => 200 bind!(read::list::<EntitlementRecord>, resp: rec::EntitlementDto, filters: read::filters::<EntitlementRecord>)),
    op!(Get "/api/v1/entitlements/{entitlement_ref}" "retrieveEntitlement" "entitlements:read_retrieve" false false false E2 => 200 bind!(read::retrieve::<EntitlementRecord>, resp: rec::EntitlementDto)),
    op!(Get "/api/v1/environments" "listEnvironments" "environments:read_list" false false false E2 => 200 bind!(env::list, resp: env::EnvironmentDto)),
    op!(Get "/api/v1/invoices" "listInvoices" "invoices:read_list" false false true E2 => 200 bind!(read::list::<InvoiceRecord>, resp: rec::InvoiceDto, filters: read::filters::<InvoiceRecord>)),
    op!(Get "/api/v1/invoices/{invoice_ref}" "retrieveInvoice" "invoices:read_retrieve" false false false E2 => 200 bind!(read::retrieve::<InvoiceRecord>, resp: rec::InvoiceDto)),
    op!(Get "/api/v1/journeys" "listJourneys" "journeys:read_list" false false true E2 => 200 bind!(read::list::<JourneyRecord>, resp: rec::JourneyDto, filters: read::filters::<JourneyRecord>)),
    op!(Get "/api/v1/journeys/{journey_ref}" "retrieveJourney" "journeys:read_retrieve" false false false E2 => 200 bind!(read::retrieve::<JourneyRecord>, resp: rec::JourneyDto)),
    op!(Get "/api/v1/offers" "listOffers" "offers:read_list" false false true E2 => 200 bind!(of::list, resp: of::OfferDto, filters: of::filters)),
    op!(Get "/api/v1/offers/{offer_ref}" "retrieveOffer" "offers:read_retrieve" false false false E2 => 200 bind!(of::retrieve, resp: of::OfferDto)),
    op!(Post "/api/v1/offers/{offer_ref}/reprice" "repriceOffer" "products:reprice" true false false E3 => 200 bind!(of::reprice, req: of::RepriceOffer, resp: of::OfferDto)),
    op!(Get "/api/v1/orders" "listOrders" "orders:read_list" false false true E2 => 200 bind!(read::list::<OrderRecord>, resp: rec::OrderDto, filters: read::filters::<OrderRecord>)),
    op!(Get "/api/v1/orders/{order_ref}" "retrieveOrder" "orders:read_retrieve" false false false E2 => 200 bind!(read::retrieve::<OrderRecord>, resp: rec::OrderDto)),
    op!(Get "/api/v1/participations" "listParticipations" "participations:read_list" false false true E1 => 200 bind!(read::list::<ParticipationRecord>, resp: os::ParticipationDto, filters: read::filters::<ParticipationRecord>)),
    op!(Get "/api/v1/participations/{participation_ref}" "retrieveParticipation" "participations:read" false false false E1 => 200 bind!(read::retrieve::<ParticipationRecord>, resp: os::ParticipationDto)),
    op!(Get "/api/v1/payment_methods" "listStoredPaymentMethods" "payment_methods:read_list" false false true E2 => 200 bind!(read::list::<StoredMethodRecord>, resp: rec::StoredMethodDto, filters: read::filters::<StoredMethodRecord>)),
    op!(Get "/api/v1/payment_methods/{stored_payment_method_ref}" "retrieveStoredPaymentMethod" "payment_methods:read_retrieve" false false false E2 => 200 bind!(read::retrieve::<StoredMethodRecord>, resp: rec::StoredMethodDto)),
    op!(Get "/api/v1/payments" "listPayments" "payments:read_list" false false true E2 => 200 bind!(read::list::<PaymentRecord>, resp: rec::PaymentDto, filters: read::filters::<PaymentRecord>)),
    op!(Get "/api/v1/payments/{payment_ref}" "retrievePayment" "payments:read_retrieve" false false false E2 => 200 bind!(read::retrieve::<PaymentRecord>, resp: rec::PaymentDto)),
    op!(Get "/api/v1/payouts" "listPayouts" "payouts:read_list" false false true E1 => 200 bind!(read::list::<PayoutRecord>, resp: os::PayoutDto, filters: read::filters::<PayoutRecord>)),
    op!(Get "/api/v1/payouts/{payout_ref}" "retrievePayout" "payouts:read" false false false E1 => 200 bind!(read::retrieve::<PayoutRecord>, resp: os::PayoutDto)),
    op!(Get "/api/v1/prices" "listPrices" "prices:read_list" false false true E2 => 200 bind!(read::list::<PriceRecord>, resp: cat::PriceDto, filters: read::filters::<PriceRecord>)),
    op!(Post "/api/v1/prices" "createPrice" "prices:write_create" true false false E3 => 201 bind!(pr::create, req: pr::CreatePrice, resp: cat::PriceDto)),
    op!(Get "/api/v1/prices/{price_ref}" "retrievePrice" "prices:read_retrieve" false false false E2 => 200 bind!(read::retrieve::<PriceRecord>, resp: cat::PriceDto)),
    op!(Post "/api/v1/prices/{price_ref}/publish" "publishPrice" "prices:write_publish" true false false E3 => 200 bind!(pr::publish, req: wire::EmptyBody, resp: cat::PriceDto)),
    op!(Get "/api/v1/products" "listProducts" "products:read_list" false false true E2 => 200 bind!(read::list::<ProductRecord>, resp: cat::ProductDto, filters: read::filters::<ProductRecord>)),
    op!(Post "/api/v1/products" "createProduct" "products:write_create" true false false E3 => 201 bind!(pd::create, req: pd::CreateProduct, resp: cat::ProductDto)),
    op!(Get "/api/v1/products/{product_ref}" "retrieveProduct" "products:read_retrieve" false false false E2 => 200 bind!(read::retrieve::<ProductRecord>, resp: cat::ProductDto)),
    op!(Post "/api/v1/products/{product_ref}/publish" "publishProduct" "products:write_publish" true false false E3 => 200 bind!(pd::publish, req: wire::EmptyBody, resp: cat::ProductDto)),
    op!(Post "/api/v1/promotions/apply" "applyPromotion" "promotion:manage_apply" true true false E3 => 200 bind!(pm::apply, req: pm::PromotionBody, resp: pm::PromotionDto)),
    op!(Post "/api/v1/promotions/plan" "planPromotion" "promotion:read_plan" false false false E5 => 200 bind!(pm::plan, req: pm::PromotionBody, resp: pm::PlanDto)),
    op!(Get "/api/v1/refunds" "listRefunds" "refunds:read_list" false false true E1 => 200 bind!(read::list::<RefundRecord>, resp: refund::RefundDto, filters: read::filters::<RefundRecord>)),
    op!(Post "/api/v1/refunds" "createRefund" "refunds:write_create" true false false E3 => 201 bind!(rf::create, req: rf::CreateRefund, resp: refund::RefundDto)),
    op!(Get "/api/v1/refunds/{refund_ref}" "retrieveRefund" "refunds:read" false false false E1 => 200 bind!(read::retrieve::<RefundRecord>, resp: refund::RefundDto)),
    op!(Get "/api/v1/request_logs" "listPublicRequestLogs" "request_logs:read_list" false false true E1 => 200 bind!(rl::list, resp: rl::RequestLogDto, filters: rl::filters)),
    op!(Get "/api/v1/service_accounts" "listServiceAccounts" "service_accounts:read_list" false false false E1 => 200 bind!(sa::list, resp: sa::ServiceAccountDto)),
    op!(Post "/api/v1/subscriptions/{subscription_ref}/cancel" "cancelSubscription" "subscriptions:manage_cancel" true true false E3 => 200 bind!(sc::cancel, req: sc::CancelSubscription, resp: rec::SubscriptionDto)),
    op!(Post "/api/v1/subscriptions/{subscription_ref}/change" "changeSubscription" "subscriptions:manage_change" true true false E3 => 200 bind!(chg::change, req: chg::ChangeSubscription, resp: rec::SubscriptionDto)),
    op!(Post "/api/v1/subscriptions/{subscription_ref}/change/preview" "previewSubscriptionChange" "subscriptions:read_retrieve" false false false E5 => 200 bind!(chg::preview, req: chg::ChangeSubscription, resp: chg::ChangePreviewDto)),
    op!(Post "/api/v1/test_clocks" "createTestClock" "test_clocks:manage" false false false E5 => 201 bind!(clk::create, req: clk::CreateTestClock, resp: rec::TestClockDto)),
    op!(Post "/api/v1/test_clocks/{test_clock_ref}/advance" "advanceTestClock" "test_clocks:manage" false false false E6 => 202 bind!(clk::advance, req: clk::AdvanceTestClock, resp: rec::TestClockDto)),
    op!(Post "/api/v1/service_accounts" "createServiceAccount" "service_accounts:manage_create" true false false E4 => 201 bind!(sa::create, req: sa::CreateServiceAccount, resp: sa::ServiceAccountDto)),
    op!(Get "/api/v1/service_accounts/{principal_ref}" "retrieveServiceAccount" "service_accounts:read_retrieve" false false false E1 => 200 bind!(sa::retrieve, resp: sa::ServiceAccountDto)),
    op!(Get "/api/v1/service_accounts/{principal_ref}/credentials" "listServiceAccountCredentials" "credentials:read_list" false false false E1 => 200 bind!(cr::list, resp: cr::CredentialDto)),
    op!(Post "/api/v1/service_accounts/{principal_ref}/credentials" "issueServiceAccountCredential" "credentials:manage_issue" true false false E4 => 201 bind!(cr::issue, req: cr::IssueCredential, resp: cr::CredentialDto)),
    op!(Get "/api/v1/service_accounts/{principal_ref}/grants" "listServiceAccountGrants" "grants:read_list" false false false E1 => 200 bind!(gr::list, resp: gr::GrantDto)),
    op!(Post "/api/v1/service_accounts/{principal_ref}/grants" "grantServiceAccountPermission" "grants:manage_grant" true false false E4 => 201 bind!(gr::grant, req: gr::GrantPermission, resp: gr::GrantDto)),
    op!(Post "/api/v1/service_accounts/{principal_ref}/grants/{permission_action}/revoke" "revokeServiceAccountPermission" "grants:manage_revoke" true true false E4 => 200 bind!(gr::revoke, req: sa::ReasonBody, resp: gr::GrantDto)),
    op!(Post "/api/v1/service_accounts/{principal_ref}/resume" "resumeServiceAccount" "service_accounts:manage_resume" true true false E4 => 200 bind!(sa::resume, req: sa::ReasonBody, resp: sa::ServiceAccountDto)),
    op!(Post "/api/v1/service_accounts/{principal_ref}/retire" "retireServiceAccount" "service_accounts:manage_retire" true true false E4 => 200 bind!(sa::retire, req: sa::ReasonBody, resp: sa::ServiceAccountDto)),
    op!(Post "/api/v1/service_accounts/{principal_ref}/suspend" "suspendServiceAccount" "service_accounts:manage_suspend" true true false E4 => 200 bind!(sa::suspend, req: sa::ReasonBody, resp: sa::ServiceAccountDto)),
    op!(Get "/api/v1/subscription-changes" "listSubscriptionChanges" "subscription_changes:read_list" false false true E2 => 200 bind!(read::list::<ChangeRecord>, resp: rec::ChangeDto, filters: read::filters::<ChangeRecord>)),
    op!(Get "/api/v1/subscription-changes/{subscription_change_ref}" "retrieveSubscriptionChange" "subscription_changes:read_retrieve" false false false E2 => 200 bind!(read::retrieve::<ChangeRecord>, resp: rec::ChangeDto)),
    op!(Get "/api/v1/test_clocks" "listTestClocks" "test_clocks:read" false false true E1 => 200 bind!(clk::list, resp: rec::TestClockDto, filters: read::filters::<TestClockRecord>)),
    op!(Get "/api/v1/test_clocks/{test_clock_ref}" "retrieveTestClock" "test_clocks:read" false false false E1 => 200 bind!(clk::retrieve, resp: rec::TestClockDto)),
    op!(Get "/api/v1/subscriptions" "listSubscriptions" "subscriptions:read_list" false false true E2 => 200 bind!(read::list::<SubscriptionRecord>, resp: rec::SubscriptionDto, filters: read::filters::<SubscriptionRecord>)),
    op!(Get "/api/v1/subscriptions/{subscription_ref}" "retrieveSubscription" "subscriptions:read_retrieve" false false false E2 => 200 bind!(read::retrieve::<SubscriptionRecord>, resp: rec::SubscriptionDto)),
    op!(Get "/api/v1/webhook_deliveries/{delivery_ref}" "retrieveWebhookDelivery" "webhooks:read_retrieve_delivery" false false false E1 => 200 bind!(dl::retrieve, resp: dl::DeliveryDto)),
    op!(Get "/api/v1/webhook_deliveries/{delivery_ref}/attempts" "listWebhookDeliveryAttempts" "webhooks:read_list_attempts" false false true E1 => 200 bind!(dl::attempts, resp: dl::AttemptDto)),
    op!(Get "/api/v1/webhook_deliveries/{delivery_ref}/body" "retrieveWebhookDeliveryBody" "webhooks:read_delivery_body" false false false E1 => 200 bind!(dl::body, resp: dl::DeliveryBodyDto)),
    op!(Post "/api/v1/webhook_deliveries/{delivery_ref}/redrive" "redriveWebhookDelivery" "webhooks:redrive_unit" true true false E3 => 200 bind!(rd::single, req: rd::Redrive, resp: rd::RedriveOutcomeDto)),
    op!(Post "/api/v1/webhook_deliveries/{delivery_ref}/skip" "skipWebhookDelivery" "webhooks:redrive_unit" true true false E3 => 200 bind!(sk::skip, req: sk::Skip, resp: dl::DeliveryDto)),
    op!(Post "/api/v1/webhook_deliveries/redrive" "batchRedriveWebhookDeliveries" "webhooks:redrive_batch" true true false E3 => 200 bind!(rd::batch, req: rd::BatchRedrive, resp: rd::BatchRedriveDto)),
    op!(Get "/api/v1/webhook_endpoints" "listWebhookEndpoints" "webhooks:read_list_endpoints" false false true E1 => 200 bind!(ep::list, resp: ep::EndpointDto, filters: ep::filters)),
    op!(Post "/api/v1/webhook_endpoints" "createWebhookEndpoint" "webhooks:manage_create_endpoint" true false false E3 => 201 bind!(ep::create, req: ep::CreateEndpoint, resp: ep::EndpointDto)),
    op!(Get "/api/v1/webhook_endpoints/{endpoint_ref}" "retrieveWebhookEndpoint" "webhooks:read_retrieve_endpoint" false false false E1 => 200 bind!(ep::retrieve, resp: ep::EndpointDto)),
    op!(Patch "/api/v1/webhook_endpoints/{endpoint_ref}" "updateWebhookEndpoint" "webhooks:manage_update_endpoint" true true false E3 => 200 bind!(ep::update, req: ep::UpdateEndpoint, resp: ep::EndpointDto)),
    op!(Get "/api/v1/webhook_endpoints/{endpoint_ref}/data_profile_grants" "listWebhookDataProfileGrants" "webhooks:read_list_data_profile" false false false E1 => 200 bind!(dp::list, resp: dp::DataProfileGrantDto)),
    op!(Post "/api/v1/webhook_endpoints/{endpoint_ref}/data_profile_grants" "createWebhookDataProfileGrant" "webhooks:manage_create_data_profile" true false false E3 => 201 bind!(dp::create, req: dp::CreateDataProfileGrant, resp: dp::DataProfileGrantDto)),
    op!(Post "/api/v1/webhook_endpoints/{endpoint_ref}/data_profile_grants/revoke" "revokeWebhookDataProfileGrant" "webhooks:manage_revoke_data_profile" true true false E3 => 200 bind!(dp::revoke, req: dp::RevokeDataProfileGrant, resp: dp::DataProfileGrantDto)),
    op!(Get "/api/v1/webhook_endpoints/{endpoint_ref}/deliveries" "listWebhookDeliveries" "webhooks:read_list_deliveries" false false true E1 => 200 bind!(dl::list, resp: dl::DeliveryDto, filters: dl::filters)),
    op!(Get "/api/v1/webhook_endpoints/{endpoint_ref}/health" "retrieveWebhookEndpointHealth" "webhooks:read_health" false false false E1 => 200 bind!(hl::retrieve, resp: hl::EndpointHealthDto)),
    op!(Post "/api/v1/webhook_endpoints/{endpoint_ref}/pause" "pauseWebhookEndpoint" "webhooks:manage_pause_endpoint" true true false E3 => 200 bind!(ep::pause, req: wire::EmptyBody, resp: ep::EndpointDto)),
    op!(Post "/api/v1/webhook_endpoints/{endpoint_ref}/resume" "resumeWebhookEndpoint" "webhooks:manage_resume_endpoint" true true false E3 => 200 bind!(ep::resume, req: wire::EmptyBody, resp: ep::EndpointDto)),
    op!(Post "/api/v1/webhook_endpoints/{endpoint_ref}/secret/confirm" "confirmWebhookSecret" "webhooks:rotate_confirm" true true false E3 => 200 bind!(sec::confirm, req: sec::SecretReason, resp: ep::EndpointDto)),
    op!(Post "/api/v1/webhook_endpoints/{endpoint_ref}/secret/revoke" "revokeWebhookSecret" "webhooks:rotate_revoke" true true false E3 => 200 bind!(sec::revoke, req: sec::SecretReason, resp: ep::EndpointDto)),
    op!(Post "/api/v1/webhook_endpoints/{endpoint_ref}/secret/rotate" "rotateWebhookSecret" "webhooks:rotate_secret" true true false E3 => 200 bind!(sec::rotate, req: sec::SecretReason, resp: ep::EndpointDto)),
    op!(Get "/api/v1/webhook_endpoints/{endpoint_ref}/subscriptions" "listWebhookSubscriptions" "webhooks:read_list_subscriptions" false false false E1 => 200 bind!(sub::list, resp: sub::SubscriptionDto)),
    op!(Post "/api/v1/webhook_endpoints/{endpoint_ref}/subscriptions/preview" "previewWebhookSubscription" "webhooks:read_list_subscriptions" false false false E2 => 200 bind!(sub::preview, req: sub::CreateSubscription, resp: sub::SubscriptionPreviewDto)),
    op!(Post "/api/v1/webhook_endpoints/{endpoint_ref}/subscriptions" "createWebhookSubscription" "webhooks:manage_create_subscription" true false false E3 => 201 bind!(sub::create, req: sub::CreateSubscription, resp: sub::SubscriptionDto)),
    op!(Post "/api/v1/webhook_endpoints/{endpoint_ref}/test_send" "sendWebhookTest" "webhooks:manage_test_send" true false false E3 => 201 bind!(ts::send, req: ts::SendTest, resp: dl::DeliveryDto)),
    op!(Get "/api/v1/webhook_event_types" "listWebhookEventTypes" "webhooks:read_event_catalog" false false false E1 => 200 bind!(et::list, resp: et::EventTypeDto)),
    op!(Post "/api/v1/webhook_redrive_jobs" "createWebhookRedriveJob" "webhooks:redrive_by_filter" true false false E3 => 202 bind!(rj::create, req: rj::CreateRedriveJob, resp: rj::RedriveJobDto)),
    op!(Get "/api/v1/webhook_redrive_jobs" "listWebhookRedriveJobs" "webhooks:read_redrive_jobs" false false true E1 => 200 bind!(rj::list, resp: rj::RedriveJobDto)),
    op!(Get "/api/v1/webhook_redrive_jobs/{redrive_job_ref}" "retrieveWebhookRedriveJob" "webhooks:read_redrive_jobs" false false false E1 => 200 bind!(rj::retrieve, resp: rj::RedriveJobDto)),
    op!(Post "/api/v1/webhook_redrive_jobs/{redrive_job_ref}/cancel" "cancelWebhookRedriveJob" "webhooks:redrive_by_filter" false false false E5 => 200 bind!(rj::cancel, req: rj::CancelRedriveJob, resp: rj::RedriveJobDto)),
];

/// The operation named `id`.
pub fn by_id(id: &str) -> Option<&'static Operation> {
    find(OPERATIONS, id)
}

/// Every permission name, sorted and unique.
pub fn permissions() -> Vec<&'static str> {
    permissions_of(OPERATIONS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_consistent() {
        for o in OPERATIONS {
            assert!(o.path.starts_with("/api/v1/"), "{}", o.id);
            assert!(by_id(o.id).is_some());
            // Idempotency and preconditions apply to writes only.
            if o.method == Method::Get {
                assert!(!o.idempotent && !o.if_match, "{}", o.id);
            }
            assert_eq!(
                o.idempotent,
                matches!(o.errors, ErrorSet::E3 | ErrorSet::E4),
                "{}",
                o.id
            );
            // Operations that create answer 201, those that start work in
            // the background 202 (contract 12.2), all others 200.
            let accepts = ["createWebhookRedriveJob", "advanceTestClock"].contains(&o.id);
            let creates = ["create", "issue", "grant"]
                .iter()
                .any(|p| o.id.starts_with(p))
                || o.id == "sendWebhookTest";
            let expected = match (accepts, creates) {
                (true, _) => 202,
                (false, true) => 201,
                (false, false) => 200,
            };
            assert_eq!(o.success_status, expected, "{}", o.id);
            // Writes take a body; reads do not.
            if let Some(b) = &o.binding {
                assert_eq!(b.request.is_some(), o.method.has_body(), "{}", o.id);
            }
        }
        let mut ids: Vec<&str> = OPERATIONS.iter().map(|o| o.id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), OPERATIONS.len(), "operation ids are unique");
    }

    #[test]
    fn every_operation_is_bound() {
        // A row is an operation of the contract: every one has its handler,
        // whatever the number of rows.
        let unbound: Vec<&str> = OPERATIONS
            .iter()
            .filter(|o| o.binding.is_none())
            .map(|o| o.id)
            .collect();
        assert!(!OPERATIONS.is_empty());
        assert!(unbound.is_empty(), "not built: {unbound:?}");
    }
}
