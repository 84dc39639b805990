#!/usr/bin/env bash
# The measurement of issue 53: one `jetsink run` with a file sink (fsync) and an SQLite sink
# (synchronous=full) on one stream, batch 500, fed by a separate `jetsink publish` process
# at a steady RATE — and then the same number of messages as a backlog, drained. Prints the
# CPU seconds of jetsink and of nats-server for each (from /proc/<pid>/stat, so the figures
# hold on a shared machine where wall time does not) and the CPU per delivery. A script for
# people, not part of `cargo test`.
#
# usage: tests/bench/steady-load.sh [RATE] [SECONDS] [LINGER_MS]
#   RATE       offered load in msg/s (default 5000)
#   SECONDS    how long the steady publisher runs (default 30)
#   LINGER_MS  delivery.linger_ms of both sinks (default: not set, jetsink's default)
# env: JETSINK (binary, default target/release/jetsink)
# needs: nats-server, curl
set -euo pipefail
RATE=${1:-5000}
SECS=${2:-30}
LINGER=${3:-}
JETSINK=$(realpath "${JETSINK:-target/release/jetsink}")
[ -x "$JETSINK" ] || { echo "build first: cargo build --release" >&2; exit 2; }
N=$((RATE * SECS))

# shellcheck source=tests/bench/common.sh
source "$(dirname "$0")/common.sh"

acked() {
  curl -s "http://127.0.0.1:$http/metrics" |
    awk '/^jetsink_messages_acked_total/ {s += $2} END {print s + 0}'
}
port=$(free_port)
start_nats "$port" "$work/js"
delivery="{\"batch_size\": 500${LINGER:+, \"linger_ms\": $LINGER}}"

# One daemon run over `subject`: with `steady`, the publisher runs beside it; otherwise the
# backlog is published first and only the drain is measured.
measure() {
  local label=$1 subject=$2 steady=$3
  http=$(free_port)
  cat > "$work/$label.json" <<JSON
{"nats": {"servers": ["nats://127.0.0.1:$port"]}, "http": {"listen": "127.0.0.1:$http"},
 "logging": {"level": "warn"},
 "sinks": {
   "files": {"source": {"stream": "S_$label", "subjects": ["$subject"], "consumer": "files",
                        "create_stream": {"subjects": ["$subject"]}},
             "delivery": $delivery,
             "destination": {"type": "file", "directory": "$work/$label/files", "fsync": true}},
   "db": {"source": {"stream": "S_$label", "subjects": ["$subject"], "consumer": "db",
                     "create_stream": {"subjects": ["$subject"]}},
          "delivery": $delivery,
          "destination": {"type": "sqlite", "path": "$work/$label/db.sqlite", "synchronous": "full"}}
 }}
JSON
  if [ "$steady" = no ]; then
    "$JETSINK" run --config "$work/$label.json" >"$work/$label.create.log" 2>&1 &
    daemon_pid=$!
    until curl -sf "http://127.0.0.1:$http/readyz" >/dev/null; do sleep 0.2; done
    kill -TERM "$daemon_pid"; wait "$daemon_pid" || true; daemon_pid=""
    "$JETSINK" publish --server "nats://127.0.0.1:$port" --subject "$subject" --count "$N" --size 200 >/dev/null
  fi
  local n0 t0
  n0=$(cpu "$server_pid")
  t0=$(date +%s.%N)
  "$JETSINK" run --config "$work/$label.json" >"$work/$label.log" 2>&1 &
  daemon_pid=$!
  if [ "$steady" = yes ]; then
    until curl -sf "http://127.0.0.1:$http/readyz" >/dev/null; do sleep 0.2; done
    "$JETSINK" publish --server "nats://127.0.0.1:$port" --subject "$subject" --count "$N" --size 200 --rate "$RATE" >/dev/null &
  fi
  until [ "$(acked)" -ge $((2 * N)) ]; do sleep 0.5; done
  local j n t
  j=$(cpu "$daemon_pid")
  n=$(cpu "$server_pid")
  t=$(date +%s.%N)
  curl -s "http://127.0.0.1:$http/metrics" | grep -E '^jetsink_batch_messages_(sum|count)|^jetsink_commit_lag_seconds_(sum|count)' > "$work/$label.metrics"
  kill -TERM "$daemon_pid"; wait "$daemon_pid" || true; daemon_pid=""
  awk -v l="$label" -v n="$N" -v j="$j" -v ns="$(echo "$n - $n0" | bc -l)" -v w="$(echo "$t - $t0" | bc -l)" -f /dev/stdin "$work/$label.metrics" <<'AWK'
/^jetsink_batch_messages_sum/ {bs += $2} /^jetsink_batch_messages_count/ {bc += $2}
/^jetsink_commit_lag_seconds_sum/ {ls += $2} /^jetsink_commit_lag_seconds_count/ {lc += $2}
END {
  printf "%-8s %8d x 2  jetsink %6.2f CPU s  %5.1f us/delivery  nats-server %6.2f CPU s  %5.1f us/delivery  %6.1f msg/batch  mean lag %6.1f ms  wall %5.1f s\n",
    l, n, j, j * 1e6 / (2 * n), ns, ns * 1e6 / (2 * n), bs / (bc ? bc : 1), 1000 * ls / (lc ? lc : 1), w
}
AWK
}

echo "rate $RATE msg/s for $SECS s ($N messages), batch 500, linger_ms ${LINGER:-default}; jetsink $($JETSINK --version)"
measure steady "steady.x" yes
measure backlog "backlog.x" no
