#!/usr/bin/env bash
# A longer soak of the fault matrix (tests/fault_matrix.rs, docs/reliability.md "The
# fault matrix"): the same faults in turn, each its own test run with more messages, on
# each server version, for ROUNDS rounds; prints every cell's PASS or FAIL and a count
# per cell at the end. A script for people, not part of `cargo test`. The destinations
# need what the integration tests need: PostgreSQL on 127.0.0.1:5432, MariaDB on
# 127.0.0.1:3306, and moto and pyarrow in .ci/venv (see .ci/run).
#
# usage: tests/bench/fault-soak.sh [MESSAGES] [ROUNDS]
#   MESSAGES  messages per test (default 20000; the CI matrix runs 2000)
#   ROUNDS    times through every fault on every server (default 1)
# env: SERVERS (space-separated nats-server binaries, default the one on PATH and
#      .ci/venv/bin/nats-server-2.14 when present), FAULTS (space-separated test names
#      of tests/fault_matrix.rs, default all of its fault tests), LOGS (directory kept
#      with every run's output, default a new temporary directory)
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${1:-20000}
ROUNDS=${2:-1}
if [ -z "${SERVERS:-}" ]; then
  SERVERS=$(command -v nats-server || echo /usr/sbin/nats-server)
  [ -x .ci/venv/bin/nats-server-2.14 ] && SERVERS="$SERVERS $PWD/.ci/venv/bin/nats-server-2.14"
fi
if [ -z "${FAULTS:-}" ]; then
  FAULTS=$(grep -o '^async fn [a-z0-9_]*()' tests/fault_matrix.rs | sed 's/async fn //; s/()//')
fi
LOGS=${LOGS:-$(mktemp -d)}
mkdir -p "$LOGS"

cargo test --test integration --no-run >/dev/null 2>&1 || cargo test --test integration --no-run
summary="$LOGS/summary.txt"
: > "$summary"
for round in $(seq 1 "$ROUNDS"); do
  for server in $SERVERS; do
    version=$("$server" --version | awk '{print $NF}')
    for fault in $FAULTS; do
      log="$LOGS/round$round-$version-$fault.log"
      start=$(date +%s)
      status=0
      JETSINK_FAULT_MATRIX_MESSAGES=$N JETSINK_TEST_NATS_SERVER=$server \
        cargo test --test integration "fault_matrix::$fault" -- --exact --nocapture \
        >"$log" 2>&1 || status=$?
      secs=$(( $(date +%s) - start ))
      echo "round $round, $version, $fault: exit $status in ${secs} s"
      grep -E ': (PASS|FAIL) \(' "$log" | sed "s/^/  $version  /" | tee -a "$summary" || true
      # A run that ended before judging its cells: say why.
      grep -qE ': (PASS|FAIL) \(' "$log" || grep -E 'panicked|timed out' "$log" | head -3 || true
    done
  done
done
echo
echo "cells over all runs (server, cell, verdict, runs):"
sed -E 's/ \(.*//' "$summary" | sort | uniq -c | awk '{c=$1; $1=""; print "  " $0 ": " c}'
echo "logs: $LOGS"
