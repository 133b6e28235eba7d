-- A subscription's filter (contract 13.3): a JSON object over the
-- delivered body, or NULL for none.
ALTER TABLE webhook_subscriptions ADD COLUMN filter TEXT;

-- Whether the endpoint's failing health was announced
-- (webhook_endpoint.failing, contract 13.4): 1 until an attempt succeeds
-- (webhook_endpoint.recovered). The conditional write that moves it is
-- what makes each announcement happen once, whatever the dispatchers.
ALTER TABLE webhook_endpoints ADD COLUMN reported_failing BIGINT NOT NULL DEFAULT 0;
