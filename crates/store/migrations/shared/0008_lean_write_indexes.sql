-- Fewer index writes per event and per attempt on the dispatcher's hot path.
--
-- Events are accepted already processed (the intake fans them out in the
-- same transaction), so only the rare pending ones need the queue's index.
DROP INDEX IF EXISTS events_pending;
CREATE INDEX events_pending ON events (status, received_at) WHERE status = 'pending';
-- A delivery's attempts are found through the unique key
-- (delivery_ref, generation, attempt_number); a delivery has a handful of
-- attempts, sorted in memory for a page.
DROP INDEX IF EXISTS webhook_attempts_by_delivery;
