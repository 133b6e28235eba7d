-- The immutable half of a split delivery row, shared by designs B and C
-- (`split.webhook_deliveries`): what never changes after the insert, with
-- the primary key, the unique key and the two list indexes.
CREATE SCHEMA split;
CREATE TABLE split.webhook_deliveries (
  delivery_ref      text   NOT NULL PRIMARY KEY,
  environment_ref   text   NOT NULL,
  endpoint_ref      text   NOT NULL REFERENCES public.webhook_endpoints(endpoint_ref),
  event_ref         text   NOT NULL,
  public_event_type text   NOT NULL,
  dto_version       bigint NOT NULL,
  diagnostic        bigint NOT NULL,
  occurred_at       bigint NOT NULL,
  event_data        text   NOT NULL,
  match_reasons     text   NOT NULL,
  created_at        bigint NOT NULL,
  ordering_key      text,
  sequence          bigint,
  ordered_key       text,
  UNIQUE (event_ref, endpoint_ref, dto_version)
) WITH (fillfactor = 100);
CREATE INDEX webhook_deliveries_by_endpoint ON split.webhook_deliveries (endpoint_ref, created_at DESC, delivery_ref DESC);
CREATE INDEX webhook_deliveries_by_env      ON split.webhook_deliveries (environment_ref, created_at DESC, delivery_ref DESC);
