-- Order per key (contract 13.1).
--
-- An event's ordering key and its sequence among the key's events; the
-- outbox carries both from the unit of work that numbered them.
ALTER TABLE events ADD COLUMN ordering_key TEXT;
ALTER TABLE events ADD COLUMN sequence BIGINT;
CREATE INDEX events_by_key ON events (environment_ref, ordering_key, sequence) WHERE ordering_key IS NOT NULL;
ALTER TABLE outbox ADD COLUMN ordering_key TEXT;
ALTER TABLE outbox ADD COLUMN sequence BIGINT;

-- Each key's counter: the last sequence given out (by an emitting unit of
-- work or the intake), and how far the key's events were accepted without
-- a gap. A delivery of a later sequence waits until the gap is filled.
CREATE TABLE ordering_keys (
    environment_ref  TEXT NOT NULL,
    ordering_key     TEXT NOT NULL,
    last_sequence    BIGINT NOT NULL,
    accepted_through BIGINT NOT NULL,
    PRIMARY KEY (environment_ref, ordering_key)
);

-- An endpoint's ordering: 'none' or 'per_key'.
ALTER TABLE webhook_endpoints ADD COLUMN ordering TEXT NOT NULL DEFAULT 'none';

-- A delivery carries its event's key and sequence (for the body), and,
-- on a per_key endpoint, the key again as `ordered_key`. A waiting
-- delivery is pending with no due time. The release rule walks the open
-- and blocking ordered deliveries only: settled ones leave the index, so
-- its cost follows a key's live work, not its history, and unordered
-- deliveries are never in it.
ALTER TABLE webhook_deliveries ADD COLUMN ordering_key TEXT;
ALTER TABLE webhook_deliveries ADD COLUMN sequence BIGINT;
ALTER TABLE webhook_deliveries ADD COLUMN ordered_key TEXT;
ALTER TABLE webhook_deliveries ADD COLUMN skipped_at BIGINT;
ALTER TABLE webhook_deliveries ADD COLUMN skip_reason TEXT;
CREATE INDEX webhook_deliveries_open_by_key ON webhook_deliveries (ordered_key, endpoint_ref, sequence) WHERE ordered_key IS NOT NULL AND (status IN ('pending', 'held') OR (status = 'failed' AND skipped_at IS NULL));
-- The failed heads that block their keys (health's blocked_keys).
CREATE INDEX webhook_deliveries_blocking ON webhook_deliveries (endpoint_ref, ordered_key) WHERE ordered_key IS NOT NULL AND status = 'failed' AND skipped_at IS NULL;
