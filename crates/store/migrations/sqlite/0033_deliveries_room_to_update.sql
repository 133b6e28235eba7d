-- PostgreSQL's fillfactor for webhook_deliveries (postgres/0033). SQLite
-- rewrites a row in place and has no such setting: this version changes
-- nothing here.
SELECT 1;
