#!/usr/bin/env bash
# Jobs per second of the `exec` worker running /bin/true at concurrency C, against a plain
# shell pipeline running /bin/true N times with the same concurrency (xargs -P C). The
# issue's target: the worker within 2x of the plain loop. A script for people, not part
# of `cargo test`.
#
# usage: tests/bench/exec-worker.sh [JOBS] [CONCURRENCY] [BATCH]
#   JOBS         jobs drained from a prefilled work-queue stream (default 5000)
#   CONCURRENCY  children at once, both sides (default 4)
#   BATCH        delivery.batch_size (default 4 x CONCURRENCY)
# env: JETSINK (binary, default target/release/jetsink), RESULTS=1 to publish a result
#      per job (job-queue mode) as well
# needs: nats-server, curl, xargs
set -euo pipefail
N=${1:-5000}
C=${2:-4}
B=${3:-$((4 * C))}
JETSINK=$(realpath "${JETSINK:-target/release/jetsink}")
[ -x "$JETSINK" ] || { echo "build first: cargo build --release" >&2; exit 2; }

# shellcheck source=tests/bench/common.sh
source "$(dirname "$0")/common.sh"

now() { date +%s.%N; }
port=$(free_port)
http=$(free_port)
start_nats "$port" "$work/js"

results=""
if [ "${RESULTS:-0}" = 1 ]; then
  results=', "results": {"subject_prefix": "bench.results", "job_id": "idempotency_key", "create_stream": {"name": "BENCH_RESULTS"}}'
fi
cat > "$work/c.json" <<JSON
{"nats": {"servers": ["nats://127.0.0.1:$port"]}, "http": {"listen": "127.0.0.1:$http"},
 "logging": {"level": "warn"},
 "sinks": {"worker": {
   "source": {"stream": "BENCH_JOBS", "subjects": "bench.jobs", "consumer": "workers",
              "create_stream": {"subjects": ["bench.jobs"], "retention": "workqueue"}},
   "delivery": {"batch_size": $B},
   "destination": {"type": "exec", "command": ["/bin/true"], "concurrency": $C}$results}}}
JSON

# Bind the stream and the consumer, then stop, so the backlog waits unread.
"$JETSINK" run --config "$work/c.json" 2>"$work/log1" &
first=$!
sleep 1.5; kill -INT "$first"; wait "$first" 2>/dev/null || true
"$JETSINK" publish --server "nats://127.0.0.1:$port" --subject bench.jobs --count "$N" --size 100 >/dev/null

acked() { curl -s "127.0.0.1:$http/metrics" | awk '/^jetsink_messages_acked_total/ {print $2}'; }
start=$(now)
"$JETSINK" run --config "$work/c.json" 2>"$work/log2" &
daemon_pid=$!
until [ "$(acked)" = "$N" ] 2>/dev/null; do sleep 0.05; done
end=$(now)
kill -INT "$daemon_pid"; wait "$daemon_pid" 2>/dev/null || true
daemon_pid=""

start_loop=$(now)
seq "$N" | xargs -P "$C" -I{} /bin/true
end_loop=$(now)

python3 - "$N" "$C" "$B" "$start" "$end" "$start_loop" "$end_loop" <<'PY'
import sys
n, c, b = map(int, sys.argv[1:4])
s, e, sl, el = map(float, sys.argv[4:8])
worker = n / (e - s)
loop = n / (el - sl)
print(f"exec-worker: {n} jobs of /bin/true, concurrency {c}, batch {b}")
print(f"  jetsink exec worker : {worker:8.0f} jobs/s  ({e - s:.2f} s, start-up included)")
print(f"  xargs -P {c} loop    : {loop:8.0f} jobs/s  ({el - sl:.2f} s)")
print(f"  loop / worker       : {loop / worker:.2f}x  (target: at most 2x)")
PY
