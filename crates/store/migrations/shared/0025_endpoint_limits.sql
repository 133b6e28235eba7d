-- Receiver protection (contract 13.2). An endpoint's own limits:
-- rate_limit (attempts a second, NULL for none) and max_in_flight (NULL
-- for the deployment's default).
ALTER TABLE webhook_endpoints ADD COLUMN rate_limit BIGINT;
ALTER TABLE webhook_endpoints ADD COLUMN max_in_flight BIGINT;

-- Its back-pressure, written by the dispatcher that got a 429 or 503 and
-- not a change of the resource (no version bump): the rate halved to
-- pressure_rate (thousandths a second) at pressure_at, climbing back to
-- pressure_base; and the Retry-After hold-off (Unix milliseconds).
ALTER TABLE webhook_endpoints ADD COLUMN pressure_base BIGINT;
ALTER TABLE webhook_endpoints ADD COLUMN pressure_rate BIGINT;
ALTER TABLE webhook_endpoints ADD COLUMN pressure_at BIGINT;
ALTER TABLE webhook_endpoints ADD COLUMN throttled_until BIGINT;
