-- B: split. psql vars: state_ff (100|60), state_fk (0|1: FK states.delivery_ref -> deliveries)
\ir immutable.sql

-- fixed-width columns first (avoids alignment padding); copied-in immutable columns last
CREATE TABLE split.webhook_delivery_states (
  generation          bigint NOT NULL,
  attempt_count       bigint NOT NULL DEFAULT 0,
  next_attempt_at     bigint,
  last_attempt_at     bigint,
  updated_at          bigint NOT NULL,
  version             bigint NOT NULL DEFAULT 1,
  lease_until         bigint,
  skipped_at          bigint,
  created_at          bigint NOT NULL,        -- copy (failed_* keys)
  sequence            bigint,                 -- copy (open_by_key)
  delivery_ref        text   NOT NULL PRIMARY KEY,
  status              text   NOT NULL CHECK (status IN ('pending','held','succeeded','failed')),
  body_status         text   NOT NULL CHECK (body_status IN ('available','redacted','expired')),
  payload             text,
  lease_owner         text,
  last_response_class text,
  skip_reason         text,
  endpoint_ref        text   NOT NULL,        -- copy
  environment_ref     text   NOT NULL,        -- copy
  public_event_type   text   NOT NULL,        -- copy
  ordered_key         text                    -- copy (open_by_key, blocking)
) WITH (fillfactor = :state_ff);
\if :state_fk
ALTER TABLE split.webhook_delivery_states ADD CONSTRAINT states_delivery_fk
  FOREIGN KEY (delivery_ref) REFERENCES split.webhook_deliveries(delivery_ref);
\endif
CREATE INDEX states_due_at  ON split.webhook_delivery_states (next_attempt_at) WHERE status = 'pending';
CREATE INDEX states_settled ON split.webhook_delivery_states (updated_at) WHERE status IN ('succeeded','failed');
CREATE INDEX states_failed_by_endpoint ON split.webhook_delivery_states (endpoint_ref, created_at, delivery_ref) WHERE status = 'failed';
CREATE INDEX states_failed_by_endpoint_response ON split.webhook_delivery_states (endpoint_ref, last_response_class, created_at, delivery_ref) WHERE status = 'failed';
CREATE INDEX states_failed_by_endpoint_type ON split.webhook_delivery_states (endpoint_ref, public_event_type, created_at, delivery_ref) WHERE status = 'failed';
CREATE INDEX states_failed_by_env ON split.webhook_delivery_states (environment_ref, created_at, delivery_ref) WHERE status = 'failed';
CREATE INDEX states_open_by_key ON split.webhook_delivery_states (ordered_key, endpoint_ref, sequence)
  WHERE ordered_key IS NOT NULL AND (status IN ('pending','held') OR (status = 'failed' AND skipped_at IS NULL));
CREATE INDEX states_blocking ON split.webhook_delivery_states (endpoint_ref, ordered_key)
  WHERE ordered_key IS NOT NULL AND status = 'failed' AND skipped_at IS NULL;
