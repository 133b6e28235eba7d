-- The console's deliveries page across endpoints (contract 12.3): the
-- newest deliveries of every endpoint of an environment, newest first,
-- a page at a time (`store::webhooks::activity`). Without this index a
-- page sorts every delivery of the environment (a million rows read for
-- fifty shown); with it, a page is a range of the index, whatever the
-- table's size or the number of endpoints. It costs one more index entry
-- per delivery written, appended at the index's newest edge (new rows
-- are the newest of their environment). A settled status filter reads
-- webhook_deliveries_settled_by_env_status instead (migration 0018).
CREATE INDEX webhook_deliveries_by_env ON webhook_deliveries (environment_ref, created_at DESC, delivery_ref DESC);
