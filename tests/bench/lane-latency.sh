#!/usr/bin/env bash
# Urgent publish->commit latency under a routine backlog: in-batch lanes vs per-lane
# consumer mode. A script for people, not part of `cargo test`.
#
# usage: tests/bench/lane-latency.sh [ROUTINE] [URGENT]
#   ROUTINE routine messages published first, as a backlog (default 90000)
#   URGENT  urgent messages published behind them (default 10000)
# env: JETSINK (binary, default target/release/jetsink), BATCH (default 500),
#      MODES (default "off in-batch per-lane strict": lanes off, in-batch lanes, per-lane
#      consumers by weight, per-lane consumers with consumer_pull "strict"),
#      URGENT_WHEN (default "live": the urgent messages are published while the running
#      daemon drains the routine backlog, once it has committed WARM rows (default 2000),
#      so their latency is the wait behind the backlog and nothing of the start-up;
#      "before": published before the daemon starts, as the first measurements were)
set -euo pipefail
cd "$(dirname "$0")/../.."
JETSINK=${JETSINK:-target/release/jetsink}
ROUTINE=${1:-90000}
URGENT=${2:-10000}
BATCH=${BATCH:-500}
[ -x "$JETSINK" ] || { echo "build first: cargo build --release" >&2; exit 2; }

# shellcheck source=tests/bench/common.sh
source tests/bench/common.sh

URGENT_WHEN=${URGENT_WHEN:-live}
WARM=${WARM:-2000}

# One watcher per mode, a single Python process polling one read-only SQLite connection
# every 10 ms (a process per poll would load the 2 cores and add noise to the drain times):
# once WARM rows are committed it runs the urgent publish (live mode), then it waits until
# TOTAL rows and prints the seconds from START (the daemon's start) to then, and the CPU
# seconds jetsink (DAEMON) and nats-server (SERVER) used from the daemon's start to then.
watch_rows() {
  python3 - "$@" <<'PY'
import os, sqlite3, subprocess, sys, time
db, warm, total, start = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
daemon, server = int(sys.argv[5]), int(sys.argv[6])
publish = sys.argv[7:]
def cpu(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
server_before = cpu(server)
conn, pub = None, None
deadline = time.time() + 60
while True:
    if conn is None and os.path.exists(db):
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)
    n = 0
    if conn is not None:
        try:
            n = conn.execute("select count(*) from events").fetchone()[0]
        except sqlite3.Error:
            n = 0
    if publish and pub is None and n >= warm:
        pub = subprocess.Popen(publish, stdout=subprocess.DEVNULL)
    if n >= total:
        print(f"{time.time() - start:.2f} {cpu(daemon):.2f} {cpu(server) - server_before:.2f}")
        break
    if time.time() > deadline:
        sys.exit(f"timed out with {n} of {total} rows")
    time.sleep(0.01)
if pub is not None and pub.wait() != 0:
    sys.exit("the urgent publish failed")
PY
}

port=$(free_port)

run_mode() {
  local mode=$1 dir="$work/$1"
  mkdir -p "$dir"
  start_nats "$port" "$dir/js"
  local lanes enabled=true pull=""
  case "$mode" in
    per-lane)
      lanes='[{"name":"urgent","weight":3,"subjects":["work.urgent"]},{"name":"routine","weight":1,"subjects":["work.routine"]}]' ;;
    strict)
      lanes='[{"name":"urgent","weight":3,"subjects":["work.urgent"]},{"name":"routine","weight":1,"subjects":["work.routine"]}]'
      pull=', "consumer_pull": "strict"' ;;
    off)
      lanes='[{"name":"urgent","weight":3,"priorities":["urgent"]},{"name":"routine","weight":1,"priorities":["routine"]}]'
      enabled=false ;;
    *)
      lanes='[{"name":"urgent","weight":3,"priorities":["urgent"]},{"name":"routine","weight":1,"priorities":["routine"]}]' ;;
  esac
  cat > "$dir/c.json" <<JSON
{"nats": {"servers": ["nats://127.0.0.1:$port"]}, "http": {"enabled": false},
 "logging": {"level": "warn"},
 "sinks": {"work": {
   "source": {"stream": "WORK", "consumer": "jetsink", "create_stream": {"subjects": ["work.>"]}},
   "message_metadata": {"priority": {"default": "routine"},
                        "rules": [{"subject": "work.urgent", "priority": "urgent"}]},
   "delivery": {"batch_size": $BATCH, "priority_lanes": {"enabled": $enabled, "default_lane": "routine"$pull, "lanes": $lanes}},
   "destination": {"type": "sqlite", "path": "$dir/w.db", "table": "events"}}}}
JSON
  # Bind stream and consumers, then stop, so the backlog builds up unread.
  "$JETSINK" run --config "$dir/c.json" 2>"$dir/log1" &
  local first=$!
  sleep 1.5; kill "$first"; wait "$first" 2>/dev/null || true
  "$JETSINK" publish --server "nats://127.0.0.1:$port" --subject work.routine --count "$ROUTINE" --size 200 >/dev/null
  [ "$URGENT_WHEN" = before ] && "$JETSINK" publish --server "nats://127.0.0.1:$port" --subject work.urgent --count "$URGENT" --size 200 >/dev/null
  local started
  started=$(date +%s.%N)
  "$JETSINK" run --config "$dir/c.json" 2>"$dir/log2" &
  daemon_pid=$!
  local total=$((ROUTINE + URGENT)) wall cpu_j cpu_n
  if [ "$URGENT_WHEN" != before ]; then
    read -r wall cpu_j cpu_n < <(watch_rows "$dir/w.db" "$WARM" "$total" "$started" "$daemon_pid" "$server_pid" \
      "$JETSINK" publish --server "nats://127.0.0.1:$port" --subject work.urgent --count "$URGENT" --size 200)
  else
    read -r wall cpu_j cpu_n < <(watch_rows "$dir/w.db" 0 "$total" "$started" "$daemon_pid" "$server_pid")
  fi
  [ -n "${cpu_n:-}" ] || { echo "$mode: the drain was not watched to its end (see above)" >&2; exit 1; }
  kill "$daemon_pid"; wait "$daemon_pid" 2>/dev/null || true; daemon_pid=""
  python3 - "$dir/w.db" "$mode" "$wall" "$total" "$cpu_j" "$cpu_n" <<'PY'
import sqlite3, sys, datetime
def t(s):
    s = s.rstrip('Z'); base, frac = s.split('.')
    return datetime.datetime.fromisoformat(base).timestamp() + int(frac) / 1e9
db, mode, wall, total = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
cpu_j, cpu_n = sys.argv[5], sys.argv[6]
c = sqlite3.connect(db)
rows = c.execute("select subject, published_at, written_at, rowid from events").fetchall()
def pct(xs, q):
    xs = sorted(xs); return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float('nan')
for subj in ("work.urgent", "work.routine"):
    lat = [(t(w) - t(p)) * 1000 for s, p, w, _ in rows if s == subj]
    print(f"{mode:9} {subj:13} n={len(lat):6} p50={pct(lat,.5):8.0f} ms  p99={pct(lat,.99):8.0f} ms")
# One timestamp per batch: the count of batches each lane was written in.
for subj in ("work.urgent", "work.routine"):
    print(f"{mode:9} {subj:13} batches={len({w for s, _, w, _ in rows if s == subj})}")
# The commit span (first row written to last, jetsink's own timestamps) is the drain's
# throughput without the start-up (connecting, binding one or three consumers).
written = [t(w) for _, _, w, _ in rows]
span = max(written) - min(written)
print(f"{mode:9} drained {total} in {wall:.2f} s from daemon start; commit span {span:.2f} s ({total / span:.0f} msg/s); CPU s jetsink {cpu_j}, nats-server {cpu_n}")
PY
}

echo "routine=$ROUTINE urgent=$URGENT (urgent published $URGENT_WHEN: after the routine backlog$([ "$URGENT_WHEN" = before ] && echo ', before the daemon starts' || echo ", while the daemon drains it, after $WARM rows")), batch=$BATCH, $($JETSINK --version)"
for mode in ${MODES:-off in-batch per-lane strict}; do
  run_mode "$mode"
done
