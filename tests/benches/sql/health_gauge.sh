#!/bin/bash
# The endpoint health gauge's read on PostgreSQL, timed with pgbench: the
# newest 100 attempt outcomes of 100 endpoints, each endpoint's the merge
# of its newest succeeded rows, failed rows (`webhook_attempts`) and
# successes kept on its deliveries' rows (`webhook_deliveries`), as one
# statement per endpoint (`each`: the gauge's shape before 2026-11-26), as
# one statement whose text names the 100 endpoints (`together`:
# `recent_outcomes_sql`, the gauge until 2026-11-27, still SQLite's), and
# as the one statement whose text never changes, the endpoints in a JSON
# array (`lateral`: `recent_outcomes_lateral`, PostgreSQL's gauge now);
# each written out with literals in place of its bind marks. Each runs
# with pgbench's `simple` protocol (planned at every execution: a
# statement whose text changes, or a prepared one PostgreSQL keeps
# planning custom) and `prepared` (planned once per connection). A
# private database with the store's migrations, ENDPOINTS endpoints with
# ATTEMPTS deliveries each, one attempt a delivery: two thirds succeeded,
# kept on the delivery's row, the rest failed, rows of `webhook_attempts`;
# ANALYZEd; dropped at the end.
#
# Usage: tests/benches/sql/health_gauge.sh   (ENDPOINTS, ATTEMPTS, SECONDS_EACH)
set -euo pipefail
cd "$(dirname "$0")/../../.."
ENDPOINTS=${ENDPOINTS:-2000}
ATTEMPTS=${ATTEMPTS:-200}
SECONDS_EACH=${SECONDS_EACH:-20}
PG="psql -h 127.0.0.1 -U postgres -v ON_ERROR_STOP=1 -q"
PGBENCH=$(ls /usr/lib/postgresql/*/bin/pgbench 2>/dev/null | head -1)
PGBENCH=${PGBENCH:-pgbench}
DB=health_gauge_bench_$$
WORK=$(mktemp -d)
$PG -d postgres -c "CREATE DATABASE $DB"
trap '$PG -d postgres -c "DROP DATABASE IF EXISTS $DB"; rm -rf "$WORK"' EXIT
for f in $(ls crates/store/migrations/shared/*.sql crates/store/migrations/postgres/*.sql |
    awk -F/ '{print $NF" "$0}' | sort | cut -d" " -f2); do
    $PG -d "$DB" -f "$f"
done
$PG -d "$DB" <<SQL
SET session_replication_role = replica; -- no foreign keys for the seed
INSERT INTO webhook_deliveries (delivery_ref, environment_ref, endpoint_ref, event_ref,
    public_event_type, dto_version, status, diagnostic, generation, attempt_count,
    last_attempt_at, occurred_at, event_data, match_reasons, body_status, created_at,
    updated_at, success_status, success_duration_ms)
SELECT 'wdl_' || e || '_' || i, 'env_AAAAAAAAAAAA', 'we_' || e, 'evt_' || e || '_' || i,
    'order.created', 1, CASE WHEN i % 3 = 0 THEN 'failed' ELSE 'succeeded' END, 0, 1, 1,
    1700000000000 + i * 1000 + e, 1700000000000 + i * 1000 + e, '{}', '[]', 'available',
    1700000000000 + i * 1000 + e, 1700000000000 + i * 1000 + e,
    CASE WHEN i % 3 = 0 THEN NULL ELSE 204 END, CASE WHEN i % 3 = 0 THEN NULL ELSE 10 END
FROM generate_series(1, $ENDPOINTS) e, generate_series(1, $ATTEMPTS) i;
INSERT INTO webhook_attempts (attempt_ref, delivery_ref, environment_ref, endpoint_ref,
    generation, attempt_number, status, duration_ms, started_at, created_at)
SELECT 'att_' || e || '_' || i, 'wdl_' || e || '_' || i, 'env_AAAAAAAAAAAA', 'we_' || e,
    1, 1, 'failed', 10, 1700000000000 + i * 1000 + e, 1700000000000 + i * 1000 + e
FROM generate_series(1, $ENDPOINTS) e, generate_series(1, $ATTEMPTS) i WHERE i % 3 = 0;
ANALYZE;
SQL
python3 - "$WORK" "$ENDPOINTS" <<'PY'
import random, sys
work, endpoints = sys.argv[1], int(sys.argv[2])
eps = [f"we_{e}" for e in random.sample(range(1, endpoints + 1), 100)]
def newest(ep, status, alias, cols):
    return (f"SELECT * FROM (SELECT {cols} FROM webhook_attempts WHERE endpoint_ref = '{ep}' "
            f"AND status = '{status}' ORDER BY started_at DESC, attempt_ref DESC LIMIT 100) AS {alias}")
# `newest_kept`: the endpoint's (`ep`, SQL) newest successes kept on its
# deliveries' rows, `columns` first, `status` (SQL) as their outcome.
def newest_kept(columns, status, ep):
    return (f"SELECT {columns}{status} AS status, last_attempt_at AS started_at, "
            "delivery_ref AS attempt_ref FROM webhook_deliveries "
            f"WHERE endpoint_ref = {ep} AND success_duration_ms IS NOT NULL "
            "ORDER BY last_attempt_at DESC LIMIT 100")
def kept(ep, alias, cols):
    successes = newest_kept(cols, "'succeeded'", f"'{ep}'")
    return f"SELECT * FROM ({successes}) AS {alias}"
with open(f"{work}/each.sql", "w") as f:
    for ep in eps:
        cols = "status, started_at, attempt_ref"
        f.write(f"{newest(ep, 'succeeded', 'succeeded', cols)} UNION ALL "
                f"{newest(ep, 'failed', 'failed', cols)} UNION ALL {kept(ep, 'kept', '')} "
                "ORDER BY started_at DESC, attempt_ref DESC LIMIT 100;\n")
with open(f"{work}/together.sql", "w") as f:
    cols = "endpoint_ref, status, started_at, attempt_ref"
    f.write(" UNION ALL ".join(
        f"SELECT * FROM ({newest(ep, 'succeeded', f's{i}', cols)} UNION ALL "
        f"{newest(ep, 'failed', f'f{i}', cols)} UNION ALL {kept(ep, f'k{i}', 'endpoint_ref, ')} "
        f"ORDER BY started_at DESC, attempt_ref DESC LIMIT 100) AS e{i}"
        for i, ep in enumerate(eps)) + ";\n")
with open(f"{work}/lateral.sql", "w") as f:
    refs = "[" + ", ".join(f'"{ep}"' for ep in eps) + "]"
    def side(status):
        return (f"(SELECT status, started_at, attempt_ref FROM webhook_attempts "
                f"WHERE endpoint_ref = e.endpoint_ref AND status = '{status}' "
                "ORDER BY started_at DESC, attempt_ref DESC LIMIT 100)")
    successes = newest_kept("", "CAST('succeeded' AS TEXT)", "e.endpoint_ref")
    f.write("SELECT e.endpoint_ref, a.status, a.started_at, a.attempt_ref "
            f"FROM json_array_elements_text('{refs}'::json) AS e (endpoint_ref) "
            f"CROSS JOIN LATERAL ({side('succeeded')} UNION ALL {side('failed')} "
            f"UNION ALL ({successes}) "
            "ORDER BY started_at DESC, attempt_ref DESC LIMIT 100) AS a;\n")
PY
echo "health gauge read, 100 endpoints of $ENDPOINTS with $ATTEMPTS one-attempt deliveries each, ${SECONDS_EACH} s each, one client"
for script in each together lateral; do
    for mode in simple prepared; do
        out=$($PGBENCH -h 127.0.0.1 -U postgres -n -M "$mode" -T "$SECONDS_EACH" -f "$WORK/$script.sql" "$DB" 2>&1)
        latency=$(grep -oP 'latency average = \K[0-9.]+' <<<"$out")
        statements=$(grep -c . "$WORK/$script.sql")
        echo "  $script ($mode): $statements statement(s) per 100 endpoints, $latency ms per 100 endpoints"
    done
done
for script in together lateral; do
    echo "  plan of $script (scans, counted; planning time):"
    $PG -d "$DB" -c "EXPLAIN (ANALYZE, SUMMARY) $(cat "$WORK/$script.sql")" |
        grep -oE "Seq Scan on [a-z_]+|Index [A-Za-z ]*Scan[A-Za-z ]* using [a-z_]+|Planning Time: .*" |
        sort | uniq -c | sed 's/^/   /'
done
