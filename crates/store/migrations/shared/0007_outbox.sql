-- The transactional outbox: events emitted by a write are inserted here in
-- the write's own transaction, then relayed (to RabbitMQ's billing.events in
-- a fleet, into the events queue in the embedded mode) and deleted. A
-- committed write's event therefore survives any crash before the relay.
CREATE TABLE outbox (
    event_ref         TEXT PRIMARY KEY,
    environment_ref   TEXT NOT NULL,
    public_event_type TEXT NOT NULL,
    occurred_at       BIGINT NOT NULL,
    scope             TEXT NOT NULL,
    data              TEXT NOT NULL,
    created_at        BIGINT NOT NULL
);
CREATE INDEX outbox_by_age ON outbox (created_at, event_ref);
