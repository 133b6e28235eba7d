-- An event's data is kept only while the event waits for its fan-out.
--
-- Once fanned out, every delivery carries the data it needs (its own copy,
-- converted to its dto version), and nothing reads the event's copy again:
-- keeping it cost a second write of every payload on the intake's hot path
-- and kept personal data the data profile grants never see (a revoked
-- grant redacts the deliveries' bodies, not this copy).
ALTER TABLE events ALTER COLUMN data DROP NOT NULL;
UPDATE events SET data = NULL WHERE status = 'processed';
ALTER TABLE events ADD CONSTRAINT events_data_until_fanned_out
    CHECK ((status = 'pending') = (data IS NOT NULL));
