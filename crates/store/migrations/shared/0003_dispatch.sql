-- The embedded queue (events received, once per event_ref), messages that
-- could not be processed, and delivery leases for the dispatcher.

CREATE TABLE events (
    event_ref         TEXT PRIMARY KEY,
    environment_ref   TEXT NOT NULL,
    public_event_type TEXT NOT NULL,
    occurred_at       BIGINT NOT NULL,
    scope             TEXT NOT NULL,
    data              TEXT NOT NULL,
    status            TEXT NOT NULL CHECK (status IN ('pending', 'processed')),
    received_at       BIGINT NOT NULL,
    processed_at      BIGINT
);
CREATE INDEX events_pending ON events (status, received_at);

CREATE TABLE dead_events (
    dead_event_id TEXT PRIMARY KEY,
    body          TEXT NOT NULL,
    reason        TEXT NOT NULL,
    received_at   BIGINT NOT NULL
);

ALTER TABLE webhook_deliveries ADD COLUMN lease_owner TEXT;
ALTER TABLE webhook_deliveries ADD COLUMN lease_until BIGINT;
CREATE INDEX webhook_deliveries_due_at ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';
