-- PostgreSQL's autovacuum settings for the tables retention churns
-- (postgres/0021). SQLite has no vacuum to pace: the sweep's freed pages
-- are reused by the next inserts, so this version changes nothing here.
SELECT 1;
