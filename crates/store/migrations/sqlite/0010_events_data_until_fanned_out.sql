-- An event's data is kept only while the event waits for its fan-out.
--
-- Once fanned out, every delivery carries the data it needs (its own copy,
-- converted to its dto version), and nothing reads the event's copy again:
-- keeping it cost a second write of every payload on the intake's hot path
-- and kept personal data the data profile grants never see (a revoked
-- grant redacts the deliveries' bodies, not this copy).
--
-- SQLite cannot drop a NOT NULL constraint in place: the table is rebuilt,
-- with the rule as a CHECK. No other table references `events`.
CREATE TABLE events_next (
    event_ref         TEXT PRIMARY KEY,
    environment_ref   TEXT NOT NULL,
    public_event_type TEXT NOT NULL,
    occurred_at       BIGINT NOT NULL,
    scope             TEXT NOT NULL,
    data              TEXT,
    status            TEXT NOT NULL CHECK (status IN ('pending', 'processed')),
    received_at       BIGINT NOT NULL,
    processed_at      BIGINT,
    CHECK ((status = 'pending') = (data IS NOT NULL))
);
INSERT INTO events_next (event_ref, environment_ref, public_event_type, occurred_at, scope, data,
                         status, received_at, processed_at)
SELECT event_ref, environment_ref, public_event_type, occurred_at, scope,
       CASE WHEN status = 'pending' THEN data END, status, received_at, processed_at
FROM events;
DROP TABLE events;
ALTER TABLE events_next RENAME TO events;
CREATE INDEX events_pending ON events (status, received_at) WHERE status = 'pending';
