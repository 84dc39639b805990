#!/usr/bin/env bash
# Urgent publish->commit latency under a routine backlog: in-batch lanes vs per-lane
# consumer mode. A script for people, not part of `cargo test`.
#
# usage: tests/bench/lane-latency.sh [ROUTINE] [URGENT]
#   ROUTINE routine messages published first (default 90000)
#   URGENT  urgent messages published behind them (default 10000)
# env: JETSINK (binary, default target/release/jetsink), BATCH (default 500)
set -euo pipefail
cd "$(dirname "$0")/../.."
JETSINK=${JETSINK:-target/release/jetsink}
ROUTINE=${1:-90000}
URGENT=${2:-10000}
BATCH=${BATCH:-500}
[ -x "$JETSINK" ] || { echo "build first: cargo build --release" >&2; exit 2; }

work=$(mktemp -d)
server_pid=""
daemon_pid=""
cleanup() {
  [ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null || true
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')

run_mode() {
  local mode=$1 dir="$work/$1"
  mkdir -p "$dir"
  [ -n "$server_pid" ] && { kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; }
  nats-server -a 127.0.0.1 -p "$port" -js -sd "$dir/js" >/dev/null 2>&1 &
  server_pid=$!
  sleep 0.5
  local lanes
  if [ "$mode" = per-lane ]; then
    lanes='[{"name":"urgent","weight":3,"subjects":["work.urgent"]},{"name":"routine","weight":1,"subjects":["work.routine"]}]'
  else
    lanes='[{"name":"urgent","weight":3,"priorities":["urgent"]},{"name":"routine","weight":1,"priorities":["routine"]}]'
  fi
  cat > "$dir/c.json" <<JSON
{"nats": {"servers": ["nats://127.0.0.1:$port"]}, "http": {"enabled": false},
 "logging": {"level": "warn"},
 "sinks": {"work": {
   "source": {"stream": "WORK", "consumer": "jetsink", "create_stream": {"subjects": ["work.>"]}},
   "message_metadata": {"priority": {"default": "routine"},
                        "rules": [{"subject": "work.urgent", "priority": "urgent"}]},
   "delivery": {"batch_size": $BATCH, "priority_lanes": {"enabled": true, "default_lane": "routine", "lanes": $lanes}},
   "destination": {"type": "sqlite", "path": "$dir/w.db", "table": "events"}}}}
JSON
  # Bind stream and consumers, then stop, so the backlog builds up unread.
  "$JETSINK" run --config "$dir/c.json" 2>"$dir/log1" &
  local first=$!
  sleep 1.5; kill "$first"; wait "$first" 2>/dev/null || true
  "$JETSINK" publish --server "nats://127.0.0.1:$port" --subject work.routine --count "$ROUTINE" --size 200 >/dev/null
  "$JETSINK" publish --server "nats://127.0.0.1:$port" --subject work.urgent --count "$URGENT" --size 200 >/dev/null
  "$JETSINK" run --config "$dir/c.json" 2>"$dir/log2" &
  daemon_pid=$!
  local total=$((ROUTINE + URGENT))
  for _ in $(seq 1 600); do
    n=$(python3 -c "import sqlite3,sys
try: print(sqlite3.connect('$dir/w.db').execute('select count(*) from events').fetchone()[0])
except Exception: print(0)")
    [ "$n" -ge "$total" ] && break
    sleep 0.2
  done
  kill "$daemon_pid"; wait "$daemon_pid" 2>/dev/null || true; daemon_pid=""
  python3 - "$dir/w.db" "$mode" <<'PY'
import sqlite3, sys, datetime
def t(s):
    s = s.rstrip('Z'); base, frac = s.split('.')
    return datetime.datetime.fromisoformat(base).timestamp() + int(frac) / 1e9
db, mode = sys.argv[1], sys.argv[2]
c = sqlite3.connect(db)
rows = c.execute("select subject, published_at, written_at, rowid from events").fetchall()
def pct(xs, q):
    xs = sorted(xs); return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float('nan')
for subj in ("work.urgent", "work.routine"):
    lat = [(t(w) - t(p)) * 1000 for s, p, w, _ in rows if s == subj]
    print(f"{mode:9} {subj:13} n={len(lat):6} p50={pct(lat,.5):8.0f} ms  p99={pct(lat,.99):8.0f} ms")
PY
}

echo "routine=$ROUTINE urgent=$URGENT (urgent published after the routine backlog), batch=$BATCH, $($JETSINK --version)"
run_mode in-batch
run_mode per-lane
