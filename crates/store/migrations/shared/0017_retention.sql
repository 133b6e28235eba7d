-- Retention (contract 12.1): every scan of the sweep is an index range
-- that starts at the oldest row of its kind, at any table size.
--
-- Settled deliveries by the time they settled: a delivery enters this
-- index when it settles and leaves it when it is redriven or deleted.
CREATE INDEX webhook_deliveries_settled ON webhook_deliveries (updated_at)
    WHERE status IN ('succeeded', 'failed');
CREATE INDEX events_by_received ON events (received_at);
CREATE INDEX dead_events_by_received ON dead_events (received_at);
CREATE INDEX request_logs_by_created ON request_logs (created_at);

-- How far a sweep whose scan passes rows it keeps (bodies already
-- emptied, events whose deliveries remain) has gone: the next scan starts
-- there instead of re-reading them. A mark only moves forward.
CREATE TABLE retention_marks (
    kind        TEXT PRIMARY KEY,
    swept_until BIGINT NOT NULL
);
