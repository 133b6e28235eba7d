#!/bin/bash
# What a split of a webhook delivery's row would save, replayed in plain
# SQL on PostgreSQL (issue 48; docs/performance.md, seventeenth stop).
# Each design runs in a fresh database migrated by the service binary
# (BILLING_BIN, default target/release/billing): A is the store's
# `webhook_deliveries` as migrated; B moves the changing columns (and the
# indexes that name them) to a state table; C keeps the failed lists on
# the immutable table under a column set only on failure; D is A without
# any index that names a changing column (a lower bound, not a design); W
# is A's table with each row inserted in its settled state, no lease and no
# settle, as a dispatcher that attempts before it writes would (measured
# on migration 0036's schema, docs/performance.md, nineteenth stop).
# Every design replays 10,000 deliveries (NB batches of BS rows): insert,
# lease, settle, each its own transaction per batch. WAL is counted per
# relation from pg_walinspect's block references (other databases may
# write meanwhile), growth from pg_relation_size; the tables go to
# results/report.md. The recorded figures were taken on migration 0034's
# schema (before 0035 rebuilt the list indexes).
#
# Usage: tests/benches/sql/delivery_split/run_all.sh   (BILLING_BIN, NB, BS)
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p results
export BILLING_BIN=${BILLING_BIN:-$PWD/../../../../target/release/billing}
export NB=${NB:-100} BS=${BS:-100}
./run_one.sh A        single succeeded design_A.sql
./run_one.sh D        single succeeded design_D.sql
./run_one.sh B100     split  succeeded design_B.sql -v state_ff=100 -v state_fk=0
./run_one.sh B60      split  succeeded design_B.sql -v state_ff=60  -v state_fk=0
./run_one.sh B60fk    split  succeeded design_B.sql -v state_ff=60  -v state_fk=1
./run_one.sh C100     splitc succeeded design_C.sql -v state_ff=100
./run_one.sh C60      splitc succeeded design_C.sql -v state_ff=60
# failure path (settle to status='failed', 5xx) for the same designs
./run_one.sh A_fail    single failed design_A.sql
./run_one.sh B100_fail split  failed design_B.sql -v state_ff=100 -v state_fk=0
./run_one.sh B60_fail  split  failed design_B.sql -v state_ff=60  -v state_fk=0
./run_one.sh C100_fail splitc failed design_C.sql -v state_ff=100
./run_one.sh C60_fail  splitc failed design_C.sql -v state_ff=60
./run_one.sh W      born   succeeded design_W.sql
./run_one.sh W_fail born   failed    design_W.sql
# extra: lower state fillfactor so that every lease update fits HOT
./run_one.sh B40  split  succeeded design_B.sql -v state_ff=40 -v state_fk=0
./run_one.sh C40  splitc succeeded design_C.sql -v state_ff=40
python3 report.py > results/report.md
