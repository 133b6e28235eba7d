-- The operator's API (contract 12.2 and 12.3).
--
-- Dead letters through the API (listDeadLetters): each is listed in the
-- environment its envelope names, or in every environment when it names
-- none (or was kept before this column existed), newest first, under the
-- `dlq_` reference the API shows.
ALTER TABLE dead_events ADD COLUMN environment_ref TEXT;
UPDATE dead_events SET dead_event_id = 'dlq_' || substr(dead_event_id, 6)
    WHERE substr(dead_event_id, 1, 5) = 'dead_';
CREATE INDEX dead_events_by_env ON dead_events (environment_ref, received_at, dead_event_id);

-- The filters of listWebhookDeliveries and of redrive jobs. The class of a
-- delivery's last response ('2xx' … '5xx', or 'none' when its last
-- attempt got no answer; null before any attempt) is kept with it, written
-- with each attempt's result; deliveries attempted before this column
-- existed take their last attempt's.
ALTER TABLE webhook_deliveries ADD COLUMN last_response_class TEXT;
UPDATE webhook_deliveries SET last_response_class = (
    SELECT CASE
        WHEN a.response_status BETWEEN 200 AND 299 THEN '2xx'
        WHEN a.response_status BETWEEN 300 AND 399 THEN '3xx'
        WHEN a.response_status BETWEEN 400 AND 499 THEN '4xx'
        WHEN a.response_status BETWEEN 500 AND 599 THEN '5xx'
        ELSE 'none' END
    FROM webhook_attempts a WHERE a.delivery_ref = webhook_deliveries.delivery_ref
    ORDER BY a.generation DESC, a.attempt_number DESC LIMIT 1)
    WHERE last_attempt_at IS NOT NULL;
-- Each filter is served by an index whose order is the list's, newest
-- first within the filter's value; created_after and created_before are a
-- range of it. They hold settled deliveries only (what operators filter
-- after an outage, and all a redrive job selects): a delivery enters them
-- when it settles, so inserting and leasing one writes none of them. A
-- list of pending or held deliveries (live work, the newest) reads the
-- endpoint's deliveries in order (webhook_deliveries_by_endpoint).
CREATE INDEX webhook_deliveries_settled_by_endpoint_status
    ON webhook_deliveries (endpoint_ref, status, created_at, delivery_ref)
    WHERE status IN ('succeeded', 'failed');
CREATE INDEX webhook_deliveries_settled_by_endpoint_type
    ON webhook_deliveries (endpoint_ref, public_event_type, created_at, delivery_ref)
    WHERE status IN ('succeeded', 'failed');
CREATE INDEX webhook_deliveries_settled_by_endpoint_response
    ON webhook_deliveries (endpoint_ref, last_response_class, created_at, delivery_ref)
    WHERE status IN ('succeeded', 'failed');
CREATE INDEX webhook_deliveries_settled_by_env_status
    ON webhook_deliveries (environment_ref, status, created_at, delivery_ref)
    WHERE status IN ('succeeded', 'failed');
