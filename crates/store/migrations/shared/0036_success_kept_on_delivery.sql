-- A delivery's successful attempt is kept on the delivery's row, not as a
-- row of `webhook_attempts` (issue 48's bytes). A success is the last
-- attempt of its generation, and nearly every delivery ends in one on its
-- first try: its attempt row, with that row's primary key, its unique key
-- and its entry in `webhook_attempts_by_endpoint_status`, cost about 315
-- bytes and 520 bytes of WAL per delivery. The settle that records the
-- success rewrites the delivery's row anyway; three more columns in it
-- cost a few bytes.
--
-- `success_duration_ms` is set exactly when the delivery's current
-- generation ended in a success kept here; the attempt's start is the
-- delivery's `last_attempt_at`, its number `attempt_count`, its
-- generation the delivery's. Redriving such a delivery first writes the
-- success out as a row of `webhook_attempts` and clears these columns
-- (`store::webhooks::deliveries::start_generation`), so a delivery keeps
-- at most one success here and every earlier attempt is a row.
--
-- Deliveries settled before this migration keep their success as a row
-- and these columns null: every reader of attempts reads both
-- (`store::webhooks::attempts`), so nothing is rewritten.
--
-- The index serves what reads an endpoint's successes by time: its
-- health, when its run of failures began, and the console's charts. It
-- holds the successes kept here only; failures stay rows, read by
-- `webhook_attempts_by_endpoint_status`.
ALTER TABLE webhook_deliveries ADD COLUMN success_status BIGINT;
ALTER TABLE webhook_deliveries ADD COLUMN success_duration_ms BIGINT;
ALTER TABLE webhook_deliveries ADD COLUMN success_excerpt TEXT;
CREATE INDEX webhook_deliveries_successes_by_endpoint
    ON webhook_deliveries (endpoint_ref, last_attempt_at)
    WHERE success_duration_ms IS NOT NULL;
