-- C: state table holds only mutable columns (+PK); failed-list indexes live on the
-- immutable table, keyed/filtered by columns written only when a delivery fails
-- (failed_at, failed_response_class). A success never touches the immutable row.
-- open_by_key/blocking are omitted (they would need status or an "open" flag; ordered_key
-- is NULL for every row of this workload, so in A/B they hold no entries either).
\ir immutable.sql
-- Set only when the delivery ends failed (appended, as declared last).
ALTER TABLE split.webhook_deliveries ADD COLUMN failed_at bigint;
ALTER TABLE split.webhook_deliveries ADD COLUMN failed_response_class text;
CREATE INDEX webhook_deliveries_failed_by_endpoint ON split.webhook_deliveries (endpoint_ref, created_at, delivery_ref) WHERE failed_at IS NOT NULL;
CREATE INDEX webhook_deliveries_failed_by_endpoint_response ON split.webhook_deliveries (endpoint_ref, failed_response_class, created_at, delivery_ref) WHERE failed_at IS NOT NULL;
CREATE INDEX webhook_deliveries_failed_by_endpoint_type ON split.webhook_deliveries (endpoint_ref, public_event_type, created_at, delivery_ref) WHERE failed_at IS NOT NULL;
CREATE INDEX webhook_deliveries_failed_by_env ON split.webhook_deliveries (environment_ref, created_at, delivery_ref) WHERE failed_at IS NOT NULL;

CREATE TABLE split.webhook_delivery_states (
  generation          bigint NOT NULL,
  attempt_count       bigint NOT NULL DEFAULT 0,
  next_attempt_at     bigint,
  last_attempt_at     bigint,
  updated_at          bigint NOT NULL,
  version             bigint NOT NULL DEFAULT 1,
  lease_until         bigint,
  skipped_at          bigint,
  delivery_ref        text   NOT NULL PRIMARY KEY,
  status              text   NOT NULL CHECK (status IN ('pending','held','succeeded','failed')),
  body_status         text   NOT NULL CHECK (body_status IN ('available','redacted','expired')),
  payload             text,
  lease_owner         text,
  last_response_class text,
  skip_reason         text
) WITH (fillfactor = :state_ff);
CREATE INDEX states_due_at  ON split.webhook_delivery_states (next_attempt_at) WHERE status = 'pending';
CREATE INDEX states_settled ON split.webhook_delivery_states (updated_at) WHERE status IN ('succeeded','failed');
