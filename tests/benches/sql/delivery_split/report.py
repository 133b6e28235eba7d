#!/usr/bin/env python3
"""Builds markdown tables (per delivery) from results/*.csv."""
import csv, glob, os
R = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'results')
order = ['A', 'D', 'B100', 'B60', 'B40', 'B60fk', 'C100', 'C60', 'C40', 'A_fail', 'B100_fail', 'B60_fail', 'C100_fail', 'C60_fail', 'W', 'W_fail']
summ = {}
for f in glob.glob(f'{R}/*.summary.csv'):
    for row in csv.DictReader(open(f)):
        summ[row['label']] = row
labels = [l for l in order if l in summ] + sorted(set(summ) - set(order))

def base_size(l):
    return sum(int(r['size_before']) for r in csv.DictReader(open(f'{R}/{l}.rels.csv')) if r['role'] != 'FK target')

def pd(v, n, d=1):
    return f'{float(v) / n:.{d}f}'

print('## Summary (per delivery)\n')
print('| design | WAL bytes | WAL records | of which FPI bytes | growth bytes | size after VACUUM FULL | HOT / updates | HOT % | FK-lock WAL | commit WAL | later VACUUM WAL excl. FPI | ckpt in run | s |')
print('|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---|---:|')
for l in labels:
    s = summ[l]; n = int(s['deliveries'])
    upd, hot = int(s['n_tup_upd']), int(s['n_tup_hot_upd'])
    print(f"| {l} | {pd(s['wal_bytes'], n)} | {pd(s['records'], n, 2)} | {pd(s['fpi_bytes'], n)} | {pd(s['growth'], n)} | {pd(int(s['size_compact']) - base_size(l), n)} "
          f"| {hot}/{upd} ({s['hot_per_table']}) | {100 * hot / upd if upd else 0:.1f} | {pd(s['fk_lock_bytes'], n, 2)} | {pd(s['commit_bytes'], n, 2)} "
          f"| {pd(int(s['vacuum_bytes_upper']) - int(s['vacuum_fpi_bytes']), n)} | {s['checkpoint_during_run']} | {s['seconds']} |")
print()
for l in labels:
    n = int(summ[l]['deliveries'])
    rows = list(csv.DictReader(open(f'{R}/{l}.rels.csv')))
    print(f'### {l} — per relation, per delivery\n')
    print('| relation | growth B | WAL B | WAL recs | insert B | lease B | settle B | FPI B | size after VACUUM FULL B |')
    print('|---|---:|---:|---:|---:|---:|---:|---:|---:|')
    tot = [0] * 8
    for r in rows:
        if r['role'] == 'toast' and int(r['wal_records']) == 0 and int(r['growth']) == 0:
            continue
        vals = [int(r[k]) for k in ('growth', 'wal_bytes', 'wal_records', 'insert_bytes', 'lease_bytes', 'settle_bytes', 'fpi_bytes', 'size_compact')]
        name = r['relname'].replace('split.', '').replace('webhook_deliveries_', 'wd_').replace('webhook_delivery_states', 'states')
        if r['role'] == 'FK target':
            name += ' (FK KEY SHARE lock)'
        if r['role'] != 'FK target':
            tot = [a + b for a, b in zip(tot, vals)]
        print(f'| {name} | ' + ' | '.join(f'{v / n:.1f}' if i != 2 else f'{v / n:.2f}' for i, v in enumerate(vals)) + ' |')
    print('| **sum (delivery relations)** | ' + ' | '.join(f'**{v / n:.1f}**' if i != 2 else f'**{v / n:.2f}**' for i, v in enumerate(tot)) + ' |')
    print()
