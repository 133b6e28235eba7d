-- Every due-time query asks for pending deliveries, which the partial index
-- webhook_deliveries_due_at (0003) serves; this one only cost the hot path
-- an index update per delivery inserted and two per attempt recorded.
DROP INDEX IF EXISTS webhook_deliveries_due;
