-- The filtered lists of deliveries (listWebhookDeliveries, the console,
-- redrive jobs; contract 12.2 and 12.3) keep an index of failed
-- deliveries only, in place of migration 0018's indexes of every settled
-- delivery. Failures are what operators filter for and what redrive jobs
-- select, and they are few; successes are nearly every delivery, and each
-- wrote an entry into four indexes that served only lists filtered by a
-- settled status (issue 48's bytes: about 460 bytes and 670 bytes of WAL
-- per delivery). A list of succeeded deliveries now reads the endpoint's
-- (or the environment's) deliveries newest first
-- (`webhook_deliveries_by_endpoint`, `webhook_deliveries_by_env`) and
-- keeps the succeeded ones, which are most of them; while an endpoint
-- fails for hours, such a list reads past its failures.
--
-- The status filter writes `status = 'failed'` into its statement's
-- text, which is these indexes' predicate word for word
-- (`store::webhooks::deliveries::DeliveryFilter`). The indexes are built
-- in this migration's transaction, which holds writes to
-- `webhook_deliveries` while it reads the table once for each.
DROP INDEX IF EXISTS webhook_deliveries_settled_by_endpoint_status;
DROP INDEX IF EXISTS webhook_deliveries_settled_by_endpoint_type;
DROP INDEX IF EXISTS webhook_deliveries_settled_by_endpoint_response;
DROP INDEX IF EXISTS webhook_deliveries_settled_by_env_status;
CREATE INDEX webhook_deliveries_failed_by_endpoint
    ON webhook_deliveries (endpoint_ref, created_at, delivery_ref)
    WHERE status = 'failed';
CREATE INDEX webhook_deliveries_failed_by_endpoint_type
    ON webhook_deliveries (endpoint_ref, public_event_type, created_at, delivery_ref)
    WHERE status = 'failed';
CREATE INDEX webhook_deliveries_failed_by_endpoint_response
    ON webhook_deliveries (endpoint_ref, last_response_class, created_at, delivery_ref)
    WHERE status = 'failed';
CREATE INDEX webhook_deliveries_failed_by_env
    ON webhook_deliveries (environment_ref, created_at, delivery_ref)
    WHERE status = 'failed';
