-- Events of other systems projected onto the resources they name (disputes,
-- payouts, participations): one row per event_ref, written in the
-- projection's transaction with the data and scope subscribers receive, so
-- a redelivered event is projected once and delivered as it was.
CREATE TABLE projected_events (
    event_ref       TEXT PRIMARY KEY,
    environment_ref TEXT NOT NULL,
    data            TEXT NOT NULL,
    scope           TEXT NOT NULL,
    created_at      BIGINT NOT NULL
);
