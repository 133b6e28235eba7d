-- psql vars: label, kind, outcome, nb, bs, outdir
\set ON_ERROR_STOP on
\pset footer off
SET enable_seqscan = off;   -- the service finds rows by pkey; keep tiny fresh tables from seq-scanning
CREATE TEMP TABLE steplog(batch int, step text, start_lsn pg_lsn, end_lsn pg_lsn, xid xid8);

CREATE TEMP TABLE rels AS
WITH t AS (
  SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
  WHERE c.relkind = 'r' AND (
        (:'kind' IN ('single', 'born') AND n.nspname = 'public' AND c.relname = 'webhook_deliveries')
     OR (:'kind' NOT IN ('single', 'born') AND n.nspname = 'split'))
), r AS (
  SELECT oid, 'heap' AS role, 0 AS ord FROM t
  UNION ALL SELECT i.indexrelid, 'index', 1 FROM pg_index i JOIN t ON t.oid = i.indrelid
  UNION ALL SELECT c.reltoastrelid, 'toast', 2 FROM pg_class c JOIN t USING (oid) WHERE c.reltoastrelid <> 0
  UNION ALL SELECT 'public.webhook_endpoints'::regclass::oid, 'FK target', 3
)
SELECT r.oid, r.oid::regclass::text AS relname, r.role, r.ord,
       (SELECT CASE WHEN i.indrelid IS NULL THEN r.oid ELSE i.indrelid END::regclass::text
          FROM pg_class c LEFT JOIN pg_index i ON i.indexrelid = c.oid WHERE c.oid = r.oid) AS tbl,
       pg_relation_filenode(r.oid)::bigint AS filenode,
       pg_relation_size(r.oid, 'main') AS size_before
FROM r;

CREATE TEMP TABLE runinfo AS
SELECT pg_current_wal_insert_lsn() AS start_lsn, NULL::pg_lsn AS end_lsn,
       (pg_control_checkpoint()).redo_lsn AS redo_before, NULL::pg_lsn AS redo_after,
       clock_timestamp() AS t0, NULL::timestamptz AS t1,
       (SELECT oid FROM pg_database WHERE datname = current_database()) AS dboid;

CALL run_lifecycle(:'kind', :'outcome', :nb, :bs);

UPDATE runinfo SET end_lsn = (SELECT max(end_lsn) FROM steplog), t1 = clock_timestamp(),
                   redo_after = (pg_control_checkpoint()).redo_lsn;

-- sizes before ANALYZE/VACUUM
ALTER TABLE rels ADD COLUMN size_after bigint;
UPDATE rels SET size_after = pg_relation_size(oid, 'main');

SELECT format('ANALYZE %s', relname) FROM rels WHERE role = 'heap' \gexec
SELECT pg_stat_force_next_flush();
SELECT pg_sleep(1.5);
SELECT pg_stat_clear_snapshot();

-- WAL records of this run that belong to this database (block refs) or are our commits
CREATE TEMP TABLE wal AS
SELECT w.* FROM runinfo ri,
  LATERAL pg_get_wal_records_info(ri.start_lsn, least(ri.end_lsn, pg_current_wal_flush_lsn())) w
WHERE w.block_ref LIKE '%/' || ri.dboid || '/%' OR w.resource_manager = 'Transaction';

CREATE TEMP TABLE walblk AS
SELECT DISTINCT w.start_lsn, m[3]::bigint AS filenode
FROM wal w, runinfo ri, LATERAL regexp_matches(w.block_ref, 'rel (\d+)/(\d+)/(\d+) fork', 'g') m
WHERE m[2]::bigint = ri.dboid;

CREATE TEMP TABLE walrel AS
SELECT r.relname, w.start_lsn, w.record_length, w.fpi_length,
       (SELECT s.step FROM steplog s WHERE w.start_lsn >= s.start_lsn AND w.start_lsn < s.end_lsn LIMIT 1) AS step
FROM walblk b JOIN rels r ON r.filenode = b.filenode JOIN wal w ON w.start_lsn = b.start_lsn;

-- VACUUM phase (reported separately; not part of the lifecycle numbers)
CREATE TEMP TABLE vacinfo AS SELECT pg_current_wal_insert_lsn() AS start_lsn, NULL::pg_lsn AS end_lsn;
SELECT format('VACUUM %s', relname) FROM rels WHERE role = 'heap' \gexec
UPDATE vacinfo SET end_lsn = pg_current_wal_insert_lsn();
ALTER TABLE rels ADD COLUMN size_after_vacuum bigint;
UPDATE rels SET size_after_vacuum = pg_relation_size(oid, 'main');
-- (a record touching several blocks of one relation appears once per match: dedupe)
CREATE TEMP TABLE vacrel2 AS
SELECT relname, count(*) AS recs, sum(record_length) AS bytes, sum(fpi_length) AS fpi FROM (
  SELECT DISTINCT r.relname, w.start_lsn, w.record_length, w.fpi_length
  FROM vacinfo vi, runinfo ri,
    LATERAL pg_get_wal_records_info(vi.start_lsn, least(vi.end_lsn, pg_current_wal_flush_lsn())) w,
    LATERAL regexp_matches(w.block_ref, 'rel (\d+)/(\d+)/(\d+) fork', 'g') m
    JOIN rels r ON r.filenode = m[3]::bigint
  WHERE m[2]::bigint = ri.dboid) s
GROUP BY relname;

-- compacted size: VACUUM FULL rewrites heap (at its fillfactor) and rebuilds indexes
SELECT format('VACUUM FULL %s', relname) FROM rels WHERE role = 'heap' \gexec
ALTER TABLE rels ADD COLUMN size_compact bigint;
UPDATE rels SET size_compact = pg_relation_size(oid, 'main');

\pset format csv
\o :outdir/:label.rels.csv
SELECT :'label' AS label, r.relname, r.role, r.tbl, r.ord, r.size_before, r.size_after,
       r.size_after - r.size_before AS growth, r.size_after_vacuum, r.size_compact,
       count(w.start_lsn) AS wal_records, coalesce(sum(w.record_length), 0) AS wal_bytes,
       coalesce(sum(w.fpi_length), 0) AS fpi_bytes,
       coalesce(sum(w.record_length) FILTER (WHERE w.step = '1_insert'), 0) AS insert_bytes,
       coalesce(sum(w.record_length) FILTER (WHERE w.step = '2_lease'), 0)  AS lease_bytes,
       coalesce(sum(w.record_length) FILTER (WHERE w.step = '3_settle'), 0) AS settle_bytes,
       count(w.start_lsn) FILTER (WHERE w.step IS NULL) AS unattributed_records,
       coalesce(max(v.recs), 0) AS vacuum_records, coalesce(max(v.bytes), 0) AS vacuum_bytes, coalesce(max(v.fpi), 0) AS vacuum_fpi_bytes
FROM rels r LEFT JOIN walrel w ON w.relname = r.relname LEFT JOIN vacrel2 v ON v.relname = r.relname
GROUP BY r.relname, r.role, r.tbl, r.ord, r.size_before, r.size_after, r.size_after_vacuum, r.size_compact
ORDER BY r.ord, r.tbl, r.relname;

\o :outdir/:label.summary.csv
WITH dl AS (   -- distinct records touching the delivery relations (not the FK target)
  SELECT DISTINCT w.start_lsn, w.record_length, w.fpi_length FROM walrel w JOIN rels r USING (relname)
  WHERE r.role <> 'FK target'),
st AS (SELECT sum(n_tup_ins) ins, sum(n_tup_upd) upd, sum(n_tup_hot_upd) hot,
              string_agg(format('%s:%s/%s', relname, n_tup_hot_upd, n_tup_upd), ' ') AS per_table
       FROM pg_stat_user_tables WHERE relid IN (SELECT oid FROM rels WHERE role = 'heap')),
cm AS (SELECT count(*) n, coalesce(sum(record_length), 0) bytes FROM wal
       WHERE resource_manager = 'Transaction' AND xid::text::bigint IN (SELECT (xid::text::bigint) FROM steplog)),
fk AS (SELECT count(*) n, coalesce(sum(record_length), 0) bytes FROM walrel w JOIN rels r USING (relname) WHERE r.role = 'FK target'),
alldb AS (SELECT count(*) n, sum(record_length) bytes FROM wal WHERE block_ref LIKE '%/' || (SELECT dboid FROM runinfo) || '/%')
SELECT :'label' AS label, :nb * :bs AS deliveries,
       (SELECT count(*) FROM dl) AS records, (SELECT sum(record_length) FROM dl) AS wal_bytes,
       (SELECT sum(fpi_length) FROM dl) AS fpi_bytes,
       (SELECT sum(size_after - size_before) FROM rels WHERE role <> 'FK target') AS growth,
       (SELECT sum(size_after_vacuum - size_before) FROM rels WHERE role <> 'FK target') AS growth_after_vacuum,
       fk.n AS fk_lock_records, fk.bytes AS fk_lock_bytes, cm.n AS commit_records, cm.bytes AS commit_bytes,
       alldb.n AS all_db_records, alldb.bytes AS all_db_bytes,
       st.ins AS n_tup_ins, st.upd AS n_tup_upd, st.hot AS n_tup_hot_upd, st.per_table AS hot_per_table,
       (SELECT coalesce(sum(bytes), 0) FROM vacrel2 v JOIN rels r USING (relname) WHERE r.role <> 'FK target') AS vacuum_bytes_upper,
       (SELECT coalesce(sum(fpi), 0) FROM vacrel2 v JOIN rels r USING (relname) WHERE r.role <> 'FK target') AS vacuum_fpi_bytes,
       (SELECT sum(size_compact) FROM rels WHERE role <> 'FK target') AS size_compact,
       (SELECT count(*) FROM wal w WHERE w.block_ref LIKE '%/' || (SELECT dboid FROM runinfo) || '/%'
          AND NOT EXISTS (SELECT 1 FROM walrel x WHERE x.start_lsn = w.start_lsn)) AS other_db_records,
       (SELECT string_agg(DISTINCT w.resource_manager || '/' || w.record_type || ' ' || w.block_ref, '; ') FROM wal w
          WHERE w.block_ref LIKE '%/' || (SELECT dboid FROM runinfo) || '/%'
          AND NOT EXISTS (SELECT 1 FROM walrel x WHERE x.start_lsn = w.start_lsn)) AS other_db_detail,
       ri.redo_before <> ri.redo_after AS checkpoint_during_run,
       round(extract(epoch FROM ri.t1 - ri.t0)::numeric, 2) AS seconds
FROM st, cm, fk, alldb, runinfo ri;
\o
