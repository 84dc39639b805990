#!/usr/bin/env bash
# Measures what an ordered upsert costs: `jetsink bench` into a table of the user's own
# through the column mapping, insert_ignore against upsert by arrival order against the
# ordered upsert (newest by $stream_sequence), on PostgreSQL and MariaDB; then, with
# tests/bench/upsert-guard.py, the servers' time for 100,000 upserts that all update a
# stored row, with and without the guard.
#
# A script for people, not part of `cargo test`. See docs/benchmarks.md ("Ordered
# upserts") for the method and for results measured with it.
#
# Needs: a release build (target/release/jetsink), PostgreSQL on 127.0.0.1:5432 (user
# postgres, trust) and MariaDB on 127.0.0.1:3306 (root, database test), nats-server on
# the PATH. Usage: tests/bench/upsert.sh [MESSAGES] [RUNS]
set -euo pipefail

N=${1:-100000}
RUNS=${2:-3}
J=${JETSINK:-target/release/jetsink}
WORK=$(mktemp -d /tmp/jetsink-upsert-bench.XXXXXX)
GUARD=$(dirname "$0")/upsert-guard.py

nats-server -a 127.0.0.1 -p 14222 -js -sd "$WORK/js" > "$WORK/nats.log" 2>&1 &
NATS=$!
cleanup() {
    kill "$NATS" 2>/dev/null || true
    psql -q -h 127.0.0.1 -U postgres -c "DROP DATABASE IF EXISTS jetsink_state_bench" || true
    mysql -h 127.0.0.1 -u root test -e "DROP TABLE IF EXISTS state_ins_my, state_arr_my, state_up_my" || true
}
trap cleanup EXIT

psql -q -h 127.0.0.1 -U postgres -c "CREATE DATABASE jetsink_state_bench"
for t in state_ins state_arr state_up; do
    psql -q -h 127.0.0.1 -U postgres -d jetsink_state_bench -c "CREATE TABLE $t (n bigint PRIMARY KEY,
        idempotency_key text NOT NULL, stream text NOT NULL, seq bigint NOT NULL, pad text,
        subject text, published_at timestamptz)"
    mysql -h 127.0.0.1 -u root test -e "CREATE TABLE ${t}_my (n BIGINT PRIMARY KEY,
        idempotency_key VARCHAR(200) NOT NULL, stream VARCHAR(200) NOT NULL, seq BIGINT NOT NULL,
        pad TEXT, subject TEXT, published_at DATETIME(6)) ENGINE=InnoDB"
done

# Six sinks: {pg, my} x {insert_ignore, upsert by arrival, ordered upsert}, one table each.
python3 - "$WORK/bench.json" <<'PY'
import json, sys
cols = {"n": "/n", "idempotency_key": "$idempotency_key", "stream": "$stream",
        "seq": "$stream_sequence", "pad": "/pad", "subject": "$subject",
        "published_at": "$published_at"}
modes = [("ins", {"mode": "insert_ignore"}), ("arr", {"mode": "upsert", "order": "arrival"}),
         ("up", {"mode": "upsert"})]
sinks = {}
for i, (eng, (name, mode)) in enumerate((e, m) for m in modes for e in ["pg", "my"]):
    if eng == "pg":
        d = {"type": "postgres", "host": "127.0.0.1", "user": "postgres",
             "database": "jetsink_state_bench", "table": f"state_{name}"}
    else:
        d = {"type": "mysql", "host": "127.0.0.1", "user": "root", "database": "test",
             "table": f"state_{name}_my"}
    d.update(columns=cols, **mode)
    sinks[f"{eng}_{name}"] = {"source": {"stream": f"SB{i}", "subjects": f"sb{i}.>",
                                         "consumer": "bench"},
                              "delivery": {"batch_size": 500}, "destination": d}
json.dump({"nats": {"servers": ["nats://127.0.0.1:14222"]},
           "http": {"listen": "127.0.0.1:19477"}, "sinks": sinks}, open(sys.argv[1], "w"))
PY

# Two rounds, the second in reverse order, so drift falls on every sink alike.
for order in "pg_ins pg_arr pg_up my_ins my_arr my_up" "my_up my_arr my_ins pg_up pg_arr pg_ins"; do
    for s in $order; do
        echo "=== $s ($(uptime))"
        "$J" bench --config "$WORK/bench.json" --sink "$s" --messages "$N" --runs "$RUNS"
    done
done
python3 "$GUARD" 7
