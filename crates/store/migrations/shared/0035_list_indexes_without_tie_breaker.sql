-- The two indexes that order every delivery for the lists (an endpoint's,
-- listWebhookDeliveries; an environment's, the console's deliveries page)
-- keep the list's order by `created_at` alone, without `delivery_ref`.
-- The list still orders ties by `delivery_ref`: the rows of one
-- millisecond are sorted as they are read, a few at a time (PostgreSQL's
-- incremental sort, SQLite's sort of the ORDER BY's right part), and the
-- page cursor bounds the range by `created_at` as before.
--
-- Without the reference every key is shared: by the two versions of a
-- delivery (its settle is not a HOT update, so it adds an entry beside
-- the one its insert made), and by the deliveries of one endpoint or
-- environment created in the same millisecond. PostgreSQL keeps equal
-- keys once, with a list of row pointers (B-tree deduplication, which
-- never applies to an index whose every key is unique), so a delivery
-- costs each index a few bytes, not two whole entries on pages that
-- split in half (every new key lands at the newest edge of a descending
-- order).
--
-- The indexes are built in this migration's transaction, which holds
-- writes to `webhook_deliveries` while it reads the table once for each.
DROP INDEX IF EXISTS webhook_deliveries_by_endpoint;
DROP INDEX IF EXISTS webhook_deliveries_by_env;
CREATE INDEX webhook_deliveries_by_endpoint ON webhook_deliveries (endpoint_ref, created_at DESC);
CREATE INDEX webhook_deliveries_by_env ON webhook_deliveries (environment_ref, created_at DESC);
