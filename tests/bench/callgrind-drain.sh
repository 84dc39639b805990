#!/usr/bin/env bash
# Counts the instructions `jetsink run` spends draining a prefilled backlog, under
# valgrind's callgrind. Instruction counts repeat from run to run whatever else the machine
# does, so two builds can be compared where wall-clock ratios are too noisy. A script for
# people, not part of `cargo test`.
#
# usage: tests/bench/callgrind-drain.sh [file|sqlite|postgres|mysql] [MESSAGES]
#   destination file (fsync per batch, default), sqlite (synchronous=full), postgres (the
#               server on 127.0.0.1:5432, user postgres, database postgres) or mysql
#               (127.0.0.1:3306, root without password, database test); each run writes a
#               fresh table of its own, dropped at the end
#   MESSAGES    backlog to drain (default 50000; 200-byte JSON payloads, batch 500)
# env: DEST_EXTRA (more destination settings for postgres or mysql, as JSON members after
#      a comma: DEST_EXTRA=', "connections": 2'), DELIVERY_EXTRA (the same for the sink's
#      delivery section: DELIVERY_EXTRA=', "batches_in_flight": 2'), JETSINK (binary, default target/profiling/jetsink: the release build with line
#      tables, which the stripped release binary lacks), OUT (callgrind output file,
#      default callgrind.<destination>.out in the current directory)
# needs: nats-server, valgrind, curl
set -euo pipefail
DEST=${1:-file}
N=${2:-50000}
JETSINK=$(realpath "${JETSINK:-target/profiling/jetsink}")
OUT=$(realpath -m "${OUT:-callgrind.$DEST.out}")
[ -x "$JETSINK" ] || { echo "build first: cargo build --profile profiling" >&2; exit 2; }
case "$DEST" in file|sqlite|postgres|mysql) ;; *) echo "destination must be file, sqlite, postgres or mysql" >&2; exit 2 ;; esac
table="callgrind_$$"

# shellcheck source=tests/bench/common.sh
source "$(dirname "$0")/common.sh"
cleanup_more() {
  case "$DEST" in
    postgres) psql -h 127.0.0.1 -U postgres -qc "DROP TABLE IF EXISTS $table" >/dev/null 2>&1 || true ;;
    mysql) mysql -h 127.0.0.1 -u root test -e "DROP TABLE IF EXISTS $table" >/dev/null 2>&1 || true ;;
  esac
}

port=$(free_port)
http=$(free_port)
start_nats "$port" "$work/js"

case "$DEST" in
  file) destination="{\"type\": \"file\", \"directory\": \"$work/out\", \"fsync\": true}" ;;
  sqlite) destination="{\"type\": \"sqlite\", \"path\": \"$work/out/drain.db\", \"synchronous\": \"full\"}" ;;
  postgres) destination="{\"type\": \"postgres\", \"host\": \"127.0.0.1\", \"user\": \"postgres\", \"table\": \"$table\"${DEST_EXTRA:-}}" ;;
  mysql) destination="{\"type\": \"mysql\", \"host\": \"127.0.0.1\", \"user\": \"root\", \"database\": \"test\", \"table\": \"$table\"${DEST_EXTRA:-}}" ;;
esac
cat > "$work/c.json" <<JSON
{"nats": {"servers": ["nats://127.0.0.1:$port"]}, "http": {"listen": "127.0.0.1:$http"},
 "logging": {"level": "warn"},
 "sinks": {"drain": {
   "source": {"stream": "DRAIN", "consumer": "jetsink", "create_stream": {"subjects": ["drain.>"]}},
   "delivery": {"batch_size": 500${DELIVERY_EXTRA:-}},
   "destination": $destination}}}
JSON

# Bind the stream and the consumer, then stop, so the backlog waits unread.
"$JETSINK" run --config "$work/c.json" 2>"$work/log1" &
first=$!
sleep 1.5; kill -INT "$first"; wait "$first" 2>/dev/null || true
"$JETSINK" publish --server "nats://127.0.0.1:$port" --subject drain.x --count "$N" --size 200 >/dev/null

valgrind --tool=callgrind --callgrind-out-file="$OUT" "$JETSINK" run --config "$work/c.json" 2>"$work/log2" &
daemon_pid=$!
acked() { curl -s "127.0.0.1:$http/metrics" | awk '/^jetsink_messages_acked_total/ {print $2}'; }
# Poll slowly: every /metrics request is counted too.
until [ "$(acked)" = "$N" ] 2>/dev/null; do sleep 1; done
kill -INT "$daemon_pid"; wait "$daemon_pid" 2>/dev/null || true
daemon_pid=""

total=$(callgrind_annotate "$OUT" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
echo "callgrind-drain: $N messages x 200 B, batch 500, destination $DEST, $($JETSINK --version)"
echo "instructions: $total ($((total / N)) per message, start-up and shutdown included)"
echo "inclusive instructions per message of the pipeline's stages:"
callgrind_annotate --inclusive=yes "$OUT" 2>/dev/null | python3 -c '
import re, sys
n = int(sys.argv[1])
# Names before the runner split (Runner::*, Stages::prepare) and after (Puller, Prepare,
# Settler, AckQueue), so two builds either side of it compare stage by stage. After it,
# settling is inlined into Runner::run (the whole loop, writes included).
stages = ["ConnectionHandler::process", "Runner::pull", "Puller::spawn", "Stages::prepare",
          "Prepare::prepare", "reply::parse", "envelope::normalize", "Runner::settle",
          "Settler::settle", "Settler::write", "write_blocking", "record::encode", "PayloadEncoding::of",
          "bind_row", "DatabaseSink::write", "Writer::write", "write_batch", "encode::encode",
          "copy_data", "encode::row", "Runner::committed", "AckQueue::committed", "Runner::run"]
best = {}
def plain(name):
    # "<T as Trait>::f" -> "T::f", then drop generic arguments: "Settler<Acks>::settle"
    # -> "Settler::settle", so stage names survive trait impls and generics.
    prev = None
    while prev != name:
        prev = name
        name = re.sub(r"<([^<>]*) as [^<>]*>", r"\1", name)
        name = re.sub(r"<[^<>]*>", "", name)
    return name
for line in sys.stdin:
    m = re.match(r"\s*([\d,]+) \([^)]*\)\s+[^:]*:(.*?)(?: \[[^\]]*\])?$", line)
    if not m:
        continue
    count, name = int(m.group(1).replace(",", "")), plain(m.group(2))
    if not re.match(r"(jetsink|async_nats)::", name):
        continue
    for stage in stages:
        if re.search(r"(^|::)" + re.escape(stage) + r"(::\{\{closure\}\})*$", name):
            best[stage] = max(best.get(stage, 0), count)
for stage in stages:
    if stage in best:
        print(f"  {stage:<30} {best[stage] // n:>8}")
' "$N"
echo "output: $OUT (callgrind_annotate --inclusive=yes $OUT)"
