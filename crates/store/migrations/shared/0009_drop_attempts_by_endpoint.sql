-- One index write fewer per attempt: an endpoint's newest attempts are read
-- (health, metrics) through (endpoint_ref, status, started_at), newest of
-- each status merged, so (endpoint_ref, started_at) is not needed.
DROP INDEX IF EXISTS webhook_attempts_by_endpoint;
