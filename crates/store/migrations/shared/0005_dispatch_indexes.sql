-- Lookups the dispatcher makes per failed attempt (when did this endpoint's
-- current run of failures begin?) stay index seeks however many attempts an
-- endpoint has: without it they scanned every attempt of the endpoint.
CREATE INDEX webhook_attempts_by_endpoint_status ON webhook_attempts (endpoint_ref, status, started_at);
