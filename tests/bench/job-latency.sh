#!/usr/bin/env bash
# Submit->result latency through the HTTP job API (results on) at a fixed rate, with the
# SQLite destination and with the exec worker running /bin/true, with one and with three competing instances. A script for people, not part
# of `cargo test`; the driver is the ignored test tests/job_latency.rs (open-loop, latency
# measured from each request's due time). Figures go to docs/benchmarks.md.
#
# usage: tests/bench/job-latency.sh [SECONDS]
#   SECONDS  how long each rate is offered (default 10; the first second is warm-up)
# env: DESTINATIONS (default "sqlite exec"), RATES (default "200 1000"),
#      INSTANCES (default "1 3"), JOB_BATCH (default 100), JOB_CONCURRENCY (exec, default 8),
#      JETSINK_TEST_NATS_SERVER (the nats-server binary, default nats-server on PATH)
set -euo pipefail
cd "$(dirname "$0")/../.."
SECONDS_EACH=${1:-10}
RATES=${RATES:-"200 1000"}
INSTANCES=${INSTANCES:-"1 3"}
DESTINATIONS=${DESTINATIONS:-"sqlite exec"}
cargo test --release --test integration --no-run
for d in $DESTINATIONS; do
  for n in $INSTANCES; do
    for r in $RATES; do
      JOB_DESTINATION=$d JOB_RATE=$r JOB_SECONDS=$SECONDS_EACH JOB_INSTANCES=$n \
        cargo test --release --test integration job_latency:: -- --ignored --nocapture --test-threads 1 2>&1 \
        | grep -o 'job-latency:.*'
    done
  done
done
