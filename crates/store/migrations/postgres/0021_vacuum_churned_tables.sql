-- Vacuum keeps pace with retention on the tables it churns (contract
-- 12.1). Every delivery is inserted, updated as it is leased and settled,
-- then deleted by the sweep, so each leaves two or three dead versions in
-- `webhook_deliveries` and one in `webhook_attempts`, and every event one
-- in `events`. Autovacuum's defaults wait for 20 % of a table to be dead
-- and then pace the vacuum at 200 cost units every 2 ms, about 40 MB/s of
-- pages it dirties: slower than a busy store churns these tables, so the
-- space the sweep frees waits for a vacuum while the files grow (the
-- fleet soak in docs/performance.md measures both paces). These tables
-- start at 2 % dead (or inserted) rows and pace at 1,000. A table's own
-- setting wins over the server's; no other table changes.
ALTER TABLE webhook_deliveries SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_insert_scale_factor = 0.02,
    autovacuum_vacuum_cost_limit = 1000
);
ALTER TABLE webhook_attempts SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_insert_scale_factor = 0.02,
    autovacuum_vacuum_cost_limit = 1000
);
ALTER TABLE events SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_insert_scale_factor = 0.02,
    autovacuum_vacuum_cost_limit = 1000
);
