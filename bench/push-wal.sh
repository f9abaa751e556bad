#!/usr/bin/env bash
# push-wal.sh — PostgreSQL's cost per pushed message, for same-run A/B runs
# of two broker builds (bench/RESULTS.md, "Push WAL").
#
# Usage: bench/push-wal.sh BIN_DIR LABEL [regina-loadtest flags...]
#
# BIN_DIR holds a regina and a regina-loadtest build. The script creates the
# database pw_LABEL afresh on the server at PGHOST:PGPORT (127.0.0.1:55490;
# use a PostgreSQL cluster of your own: the WAL figures are cluster-wide),
# starts the broker on it (port $PORT, 6690; other broker settings from the
# environment, e.g. QUEEN_DEDUP_CACHE=false), pushes for $WARM (3s,
# unmeasured: queue, partitions, plpgsql caches), runs $PRE_SQL in the
# database if set, CHECKPOINTs, then measures $DUR (10s) of
# `regina-loadtest -dedup-window 3600 FLAGS`. It prints the loadtest summary,
# WAL bytes and records per message (between two pg_current_wal_lsn(), with
# pg_waldump --stats=record when PGDATA names the cluster's data directory:
# records and full-page images by type), and the CPU per message of the
# broker and of its PostgreSQL backends (utime+stime from /proc).
set -euo pipefail
BIN=$1; LABEL=$2; shift 2
PGHOST=${PGHOST:-127.0.0.1}; PGPORT=${PGPORT:-55490}; PORT=${PORT:-6690}
WARM=${WARM:-3s}; DUR=${DUR:-10s}; DB=pw_$LABEL
OUT=${OUT:-/tmp/push-wal}; mkdir -p "$OUT"
P="psql -h $PGHOST -p $PGPORT -U postgres -Atq"
$P -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)"; $P -c "CREATE DATABASE $DB"
DATABASE_URL="postgres://postgres@$PGHOST:$PGPORT/$DB?sslmode=disable" PORT=$PORT LOG_LEVEL=warn \
	"$BIN/regina" >"$OUT/broker-$LABEL.log" 2>&1 &
BPID=$!
trap 'kill $BPID 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -sf -o /dev/null "http://127.0.0.1:$PORT/health" && break; sleep 0.1; done
"$BIN/regina-loadtest" -url "http://127.0.0.1:$PORT" -duration "$WARM" -quiet -dedup-window 3600 "$@" >/dev/null
if [ -n "${PRE_SQL:-}" ]; then $P -d "$DB" -c "$PRE_SQL"; fi
$P -c "CHECKPOINT"
pids=$($P -d "$DB" -c "SELECT string_agg(pid::text, ' ') FROM pg_stat_activity WHERE datname = '$DB' AND backend_type = 'client backend'")
ticks() { local s=0 p; for p in "$@"; do [ -r "/proc/$p/stat" ] && s=$((s + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done; echo $s; }
l0=$($P -c "SELECT pg_current_wal_lsn()"); c0=$(ticks $pids); b0=$(ticks $BPID); la0=$(cut -d' ' -f1 /proc/loadavg)
"$BIN/regina-loadtest" -url "http://127.0.0.1:$PORT" -duration "$DUR" -quiet -json "$OUT/lt-$LABEL.json" -dedup-window -1 "$@"
l1=$($P -c "SELECT pg_current_wal_lsn()"); c1=$(ticks $pids); b1=$(ticks $BPID); la1=$(cut -d' ' -f1 /proc/loadavg)
wal=$($P -c "SELECT pg_wal_lsn_diff('$l1', '$l0')")
n=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['totals']['queued'])" "$OUT/lt-$LABEL.json")
hz=$(getconf CLK_TCK)
python3 - "$LABEL" "$n" "$wal" "$((c1 - c0))" "$((b1 - b0))" "$hz" "$la0" "$la1" <<'PY'
import sys
label, n, wal, pg, br, hz, la0, la1 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), sys.argv[7], sys.argv[8]
us = lambda t: t / hz * 1e6 / n
print(f"{label}: msgs={n} WAL/msg={wal / n:.0f} B  PG CPU/msg={us(pg):.0f} us  broker CPU/msg={us(br):.0f} us  load {la0} -> {la1}")
PY
if [ -n "${PGDATA:-}" ]; then
	pg_waldump=$(ls /usr/lib/postgresql/*/bin/pg_waldump 2>/dev/null | tail -1)
	"${pg_waldump:-pg_waldump}" -p "$PGDATA/pg_wal" -s "$l0" -e "$l1" --stats=record 2>/dev/null >"$OUT/waldump-$LABEL.txt" || true
	python3 - "$OUT/waldump-$LABEL.txt" "$n" <<'PY'
import re, sys
n = int(sys.argv[2]); rows = {}
for line in open(sys.argv[1]):
    m = re.match(r'^(\S+)\s+(\d+)\s+\(\s*[\d.]+\)\s+(\d+)\s+\(\s*[\d.]+\)\s+(\d+)\s+\(\s*[\d.]+\)\s+(\d+)', line)
    if m and m.group(1) != 'Total':
        rows[m.group(1)] = tuple(int(x) for x in m.groups()[1:])
recs = sum(r[0] for r in rows.values())
print(f"  records/msg={recs / n:.2f}  record bytes/msg={sum(r[1] for r in rows.values()) / n:.0f}  FPI bytes/msg={sum(r[2] for r in rows.values()) / n:.0f}")
for k in sorted(rows, key=lambda k: -rows[k][3]):
    c, r, f, t = rows[k]
    if t / n >= 2:
        print(f"    {k:22s} {c / n:6.3f}/msg {t / n:6.1f} B/msg (FPI {f / n:.1f})")
PY
fi
