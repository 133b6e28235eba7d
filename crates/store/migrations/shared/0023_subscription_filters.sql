-- A subscription's filter (contract 13.3): a JSON object over the
-- delivered body, or NULL for none.
ALTER TABLE webhook_subscriptions ADD COLUMN filter TEXT;
