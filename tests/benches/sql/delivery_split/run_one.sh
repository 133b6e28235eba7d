#!/bin/bash
# usage: run_one.sh LABEL KIND OUTCOME DESIGN_SQL [psql -v assignments...]
# Creates a fresh database, migrates it with the service binary, applies the design, replays
# the lifecycle, writes results/LABEL.{rels,summary}.csv, drops the database.
set -euo pipefail
cd "$(dirname "$0")"
LABEL=$1 KIND=$2 OUTCOME=$3 DESIGN=$4; shift 4
NB=${NB:-100} BS=${BS:-100}
DB="split_exp_$(echo "$LABEL" | tr 'A-Z-' 'a-z_')_$$"
PSQL=(psql -h 127.0.0.1 -U postgres -X -q -v ON_ERROR_STOP=1)
"${PSQL[@]}" -d postgres -c "CREATE DATABASE $DB"
trap '"${PSQL[@]}" -d postgres -c "DROP DATABASE IF EXISTS $DB"' EXIT
BILLING_STORE__URL=postgres://postgres@127.0.0.1:5432/$DB "$BILLING_BIN" migrate >/dev/null
"${PSQL[@]}" -d $DB -f sql/base.sql >/dev/null
"${PSQL[@]}" -d $DB "$@" -f sql/$DESIGN >/dev/null
"${PSQL[@]}" -d $DB -f sql/lifecycle.sql >/dev/null
"${PSQL[@]}" -d $DB -v label=$LABEL -v kind=$KIND -v outcome=$OUTCOME -v nb=$NB -v bs=$BS \
   -v outdir=$PWD/results -f sql/measure.sql >/dev/null
echo "done $LABEL"
