#!/usr/bin/env bash
# Side-by-side drain of one prefilled JetStream stream by the Python `nats-sinks` file sink
# and by jetsink's file destination, with fsync on and off.
#
# A script for people, not part of `cargo test`. See docs/benchmarks.md for the method and
# for results measured with it.
set -euo pipefail

usage() {
    cat <<'EOF'
Usage: tests/bench/compare-nats-sinks.sh [-n N] [-s SIZE] [-b BATCH] [-r RUNS] [--server URL]

Prefills one fresh file-storage stream with N messages of SIZE bytes, then drains it,
each time through a fresh durable pull consumer (explicit ACK, AckWait 30 s,
MaxAckPending 10000) with the same batch size, with:
  - nats-sinks' file sink   (`nats-sink run`, installed with pip in a throw-away venv)
  - jetsink's file destination (`jetsink run` with a generated config)
once with fsync on and once with fsync off (RUNS times each, alternating which tool goes
first). A drain is timed by polling the consumer (every POLL_MS): from the last poll
that saw nothing delivered to the first that saw 0 pending and 0 ack-pending, an upper
bound of the drain time (and so a lower bound of the rate) for both tools. Both outputs are checked to hold N distinct records.
Prints both rates and the ratio jetsink / nats-sinks.

Options (or environment variables):
  -n N          messages                       (N, default 20000)
  -s SIZE       payload bytes                  (SIZE, default 200)
  -b BATCH      fetch/write batch size         (BATCH, default 500)
  -r RUNS       pairs per fsync setting        (RUNS, default 1)
  --server URL  NATS server with JetStream     (SERVER, default nats://127.0.0.1:4222)
  -h, --help    this text
Environment only:
  JETSINK            jetsink binary (default: cargo build --release of this repository)
  NATS_SINKS_SPEC    what pip installs (default nats-sinks==0.4.3)
  PYTHON             interpreter for the venv (default python3)
  TIMEOUT            seconds allowed per drain (default: max(600, N/20))
  POLL_MS            consumer-info poll interval in ms (default 10)

Needs: python3 with venv, network access to PyPI, a NATS server with JetStream.
Exit status: 0 when every drain finished and was verified, 1 otherwise.
EOF
}

N=${N:-20000}
SIZE=${SIZE:-200}
BATCH=${BATCH:-500}
RUNS=${RUNS:-1}
SERVER=${SERVER:-nats://127.0.0.1:4222}
NATS_SINKS_SPEC=${NATS_SINKS_SPEC:-nats-sinks==0.4.3}
PYTHON=${PYTHON:-python3}
POLL_MS=${POLL_MS:-10}

while [ $# -gt 0 ]; do
    case "$1" in
        -n) N=$2; shift 2 ;;
        -s) SIZE=$2; shift 2 ;;
        -b) BATCH=$2; shift 2 ;;
        -r) RUNS=$2; shift 2 ;;
        --server) SERVER=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "unknown argument: $1" >&2; usage >&2; exit 2 ;;
    esac
done
for v in N SIZE BATCH RUNS POLL_MS; do
    if ! [[ ${!v} =~ ^[1-9][0-9]*$ ]]; then
        echo "$v must be a positive integer, got '${!v}'" >&2
        exit 2
    fi
done
if [ "$BATCH" -gt 10000 ]; then
    echo "BATCH must be at most 10000 (both tools' limit)" >&2
    exit 2
fi
TIMEOUT=${TIMEOUT:-$(( N / 20 > 600 ? N / 20 : 600 ))}

# Fail fast when the server is not reachable (before the slow virtualenv set-up).
hostport=${SERVER#*://}
hostport=${hostport##*@}
hostport=${hostport%%/*}
host=${hostport%:*}
port=${hostport##*:}
[ "$port" = "$hostport" ] && port=4222
if ! timeout 5 bash -c "exec 3<>/dev/tcp/$host/$port" 2>/dev/null; then
    echo "cannot reach the NATS server at $SERVER ($host:$port)" >&2
    exit 1
fi

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/compare-nats-sinks.XXXXXX")
ID="$$_$(date +%s)"
STREAM="CMP_NATS_SINKS_${ID}"
SUBJECT="cmp.${ID}.data"
STREAM_CREATED=0

cleanup() {
    local rc=$?
    set +e
    # Processes this script started record their pid in $WORK/*.pid.
    for f in "$WORK"/*.pid; do
        [ -e "$f" ] || continue
        local pid
        pid=$(cat "$f")
        if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid" 2>/dev/null
            sleep 1
            kill -KILL "$pid" 2>/dev/null
        fi
    done
    if [ "$STREAM_CREATED" = 1 ] && [ -x "$WORK/venv/bin/python" ]; then
        "$WORK/venv/bin/python" "$WORK/helper.py" delete-stream "$SERVER" "$STREAM" \
            || echo "warning: could not delete stream $STREAM" >&2
    fi
    rm -rf "$WORK"
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

log() { printf '%s\n' "$*" >&2; }

# ---------------------------------------------------------------------------------------
# jetsink binary
if [ -z "${JETSINK:-}" ]; then
    log "building jetsink (cargo build --release) ..."
    (cd "$REPO" && cargo build --release --quiet)
    JETSINK="${CARGO_TARGET_DIR:-$REPO/target}/release/jetsink"
fi
if [ ! -x "$JETSINK" ]; then
    echo "jetsink binary not found or not executable: $JETSINK" >&2
    exit 1
fi

# ---------------------------------------------------------------------------------------
# Throw-away virtualenv with nats-sinks (it brings nats-py, used by the helper below).
log "creating a virtualenv in $WORK/venv and installing $NATS_SINKS_SPEC ..."
"$PYTHON" -m venv "$WORK/venv"
"$WORK/venv/bin/pip" install --quiet --disable-pip-version-check "$NATS_SINKS_SPEC"
NS_VERSION=$("$WORK/venv/bin/python" -c 'import importlib.metadata as m; print(m.version("nats-sinks"))')
NATSPY_VERSION=$("$WORK/venv/bin/python" -c 'import importlib.metadata as m; print(m.version("nats-py"))')

cat >"$WORK/helper.py" <<'PY'
"""Stream/consumer set-up, timed drains and output checks for compare-nats-sinks.sh."""
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import nats
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StorageType, StreamConfig


async def connect(url):
    return await nats.connect(url, connect_timeout=5, allow_reconnect=False)


async def create_stream(url, stream, subject):
    nc = await connect(url)
    try:
        js = nc.jetstream()
        await js.add_stream(StreamConfig(name=stream, subjects=[subject], storage=StorageType.FILE))
        v = nc.connected_server_version
        print(f"{v.major}.{v.minor}.{v.patch}")
    finally:
        await nc.close()


async def delete_stream(url, stream):
    nc = await connect(url)
    try:
        await nc.jetstream().delete_stream(stream)
    finally:
        await nc.close()


async def create_consumer(url, stream, consumer, subject):
    nc = await connect(url)
    try:
        await nc.jetstream().add_consumer(stream, ConsumerConfig(
            durable_name=consumer,
            filter_subject=subject,
            ack_policy=AckPolicy.EXPLICIT,
            deliver_policy=DeliverPolicy.ALL,
            ack_wait=30.0,
            max_deliver=-1,
            max_ack_pending=10_000,
        ))
    finally:
        await nc.close()


async def drain(url, stream, consumer, expected, timeout, poll_ms, pidfile, logfile, argv):
    """Starts argv, polls the consumer until nothing is pending, stops argv; prints JSON."""
    nc = await connect(url)
    js = nc.jetstream()
    out = {"ok": False}
    log = open(logfile, "wb")
    t_launch = time.monotonic()
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    Path(pidfile).write_text(str(proc.pid))
    # t_first: the last poll that still saw nothing delivered (so the drain time is an
    # upper bound, by at most one poll interval at each end, and the rate a lower bound).
    t_first = None
    t_before = t_launch
    info = None
    try:
        while True:
            now = time.monotonic()
            if now - t_launch > timeout:
                out["error"] = f"timeout after {timeout}s"
                break
            sent = time.monotonic()
            info = await js.consumer_info(stream, consumer)
            now = time.monotonic()
            if t_first is None:
                if info.delivered.consumer_seq > 0:
                    t_first = t_before
                else:
                    t_before = sent
            if info.num_pending == 0 and info.num_ack_pending == 0 and info.ack_floor.stream_seq >= expected:
                out.update(ok=True, t_first=t_first - t_launch, t_done=now - t_launch)
                break
            if proc.poll() is not None:
                out["error"] = f"process exited with status {proc.returncode} before the drain finished"
                break
            await asyncio.sleep(poll_ms / 1000)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()
        os.unlink(pidfile)
    if info is not None:
        out.update(
            num_pending=info.num_pending,
            num_ack_pending=info.num_ack_pending,
            num_redelivered=info.num_redelivered,
            delivered=info.delivered.consumer_seq,
            ack_floor=info.ack_floor.stream_seq,
        )
    if out["ok"]:
        secs = out["t_done"] - out["t_first"]
        out["drain_seconds"] = secs
        out["rate"] = expected / secs if secs > 0 else float("inf")
        out["rate_incl_startup"] = expected / out["t_done"]
    await nc.close()
    print(json.dumps(out))


def verify_nats_sinks(directory, stream, expected):
    """nats-sinks writes one JSON document per message; count distinct stream sequences."""
    seqs = set()
    files = 0
    for path in Path(directory).rglob("*.json"):
        if path.name.startswith("."):
            continue  # temporary files of unfinished writes
        files += 1
        doc = json.loads(path.read_text())
        if doc.get("stream") == stream:
            seqs.add(doc["stream_sequence"])
    print(json.dumps({"files": files, "distinct": len(seqs), "ok": len(seqs) == expected}))


def verify_jetsink(directory, stream, expected):
    """jetsink appends JSON Lines; count distinct idempotency keys of this stream."""
    keys = set()
    lines = 0
    for path in Path(directory).glob("*.jsonl"):
        with open(path, "rb") as f:
            for line in f:
                lines += 1
                doc = json.loads(line)
                if doc.get("stream") == stream:
                    keys.add(doc["idempotency_key"])
    print(json.dumps({"lines": lines, "distinct": len(keys), "ok": len(keys) == expected}))


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "create-stream":
        asyncio.run(create_stream(*args))
    elif cmd == "delete-stream":
        asyncio.run(delete_stream(*args))
    elif cmd == "create-consumer":
        asyncio.run(create_consumer(*args))
    elif cmd == "drain":
        url, stream, consumer, expected, timeout, poll_ms, pidfile, logfile = args[:8]
        asyncio.run(drain(url, stream, consumer, int(expected), float(timeout), int(poll_ms),
                          pidfile, logfile, args[8:]))
    elif cmd == "verify-nats-sinks":
        verify_nats_sinks(args[0], args[1], int(args[2]))
    elif cmd == "verify-jetsink":
        verify_jetsink(args[0], args[1], int(args[2]))
    else:
        raise SystemExit(f"unknown helper command {cmd}")


if __name__ == "__main__":
    main()
PY
PY="$WORK/venv/bin/python"
H="$WORK/helper.py"

# ---------------------------------------------------------------------------------------
# One stream, prefilled once.
SERVER_VERSION=$("$PY" "$H" create-stream "$SERVER" "$STREAM" "$SUBJECT")
STREAM_CREATED=1
log "prefilling $STREAM with $N messages of $SIZE bytes ..."
"$JETSINK" publish --server "$SERVER" --subject "$SUBJECT" --count "$N" --size "$SIZE" >&2

json_field() { "$PY" -c 'import json,sys; d=json.loads(sys.argv[1]); v=d.get(sys.argv[2]); print("" if v is None else v)' "$1" "$2"; }

FAILED=0
RESULTS="$WORK/results.tsv"
: >"$RESULTS"

# drain TOOL FSYNC RUN -> appends "tool fsync run rate rate_incl_startup seconds redelivered" to $RESULTS
drain() {
    local tool=$1 fsync=$2 run=$3
    local consumer="${tool}-fsync-${fsync}-r${run}"
    local out="$WORK/out-${consumer}"
    local cfg="$WORK/${consumer}.json"
    mkdir -p "$out"
    "$PY" "$H" create-consumer "$SERVER" "$STREAM" "$consumer" "$SUBJECT"
    local argv=()
    if [ "$tool" = nats-sinks ]; then
        cat >"$cfg" <<EOF
{
  "nats": {"url": "$SERVER", "stream": "$STREAM", "consumer": "$consumer",
           "subject": "$SUBJECT", "durable": true},
  "consumer_management": {"mode": "bind_only"},
  "delivery": {"batch_size": $BATCH, "batch_timeout_ms": 1000},
  "logging": {"level": "WARNING"},
  "sink": {"type": "file", "directory": "$out/files", "fsync": $fsync}
}
EOF
        argv=("$WORK/venv/bin/nats-sink" run "$cfg")
    else
        cat >"$cfg" <<EOF
{
  "nats": {"servers": ["$SERVER"], "name": "compare-nats-sinks"},
  "http": {"enabled": false},
  "logging": {"level": "warn", "format": "text"},
  "sinks": {
    "cmp": {
      "source": {"stream": "$STREAM", "subjects": "$SUBJECT", "consumer": "$consumer",
                 "ack_wait_ms": 30000, "max_deliver": -1, "max_ack_pending": 10000},
      "delivery": {"batch_size": $BATCH, "batch_timeout_ms": 1000},
      "destination": {"type": "file", "directory": "$out/files", "prefix": "events",
                      "fsync": $fsync}
    }
  }
}
EOF
        argv=("$JETSINK" run --config "$cfg")
    fi
    log "run $run, fsync $fsync: draining with $tool ..."
    # In the background, so that a signal to this script is handled at once (bash runs
    # traps only between commands, and `wait` is interruptible).
    "$PY" "$H" drain "$SERVER" "$STREAM" "$consumer" "$N" "$TIMEOUT" "$POLL_MS" \
        "$WORK/$consumer.pid" "$out/process.log" "${argv[@]}" >"$out/result.json" &
    echo $! >"$WORK/helper.pid"
    wait $! || true
    rm -f "$WORK/helper.pid"
    local res
    res=$(cat "$out/result.json")
    [ -n "$res" ] || res='{"ok": false, "error": "the drain helper failed"}'
    if [ "$(json_field "$res" ok)" != True ]; then
        log "FAILED: $tool (fsync $fsync, run $run): $res"
        log "--- last lines of its output:"
        tail -n 20 "$out/process.log" >&2 || true
        FAILED=1
        printf '%s\t%s\t%s\tFAILED\t-\t-\t-\n' "$tool" "$fsync" "$run" >>"$RESULTS"
        return
    fi
    local check
    if [ "$tool" = nats-sinks ]; then
        check=$("$PY" "$H" verify-nats-sinks "$out/files" "$STREAM" "$N")
    else
        check=$("$PY" "$H" verify-jetsink "$out/files" "$STREAM" "$N")
    fi
    if [ "$(json_field "$check" ok)" != True ]; then
        log "FAILED verification: $tool (fsync $fsync, run $run): $check (expected $N distinct)"
        FAILED=1
    else
        log "  verified: $check"
    fi
    local redelivered
    redelivered=$(json_field "$res" num_redelivered)
    if [ "${redelivered:-0}" != 0 ]; then
        log "note: $tool (fsync $fsync, run $run): the server redelivered $redelivered message(s)"
    fi
    printf '%s\t%s\t%s\t%.1f\t%.1f\t%.3f\t%s\n' "$tool" "$fsync" "$run" \
        "$(json_field "$res" rate)" "$(json_field "$res" rate_incl_startup)" \
        "$(json_field "$res" drain_seconds)" "${redelivered:-0}" >>"$RESULTS"
    rm -rf "$out/files"
}

for run in $(seq 1 "$RUNS"); do
    for fsync in true false; do
        # Alternate which tool drains first, so neither always gets the warmer page cache.
        if [ $(( run % 2 )) = 1 ]; then order="nats-sinks jetsink"; else order="jetsink nats-sinks"; fi
        for tool in $order; do
            drain "$tool" "$fsync" "$run"
        done
    done
done

# ---------------------------------------------------------------------------------------
echo "compare-nats-sinks: $N messages x $SIZE B, batch $BATCH, $RUNS run(s), nats-server $SERVER_VERSION at $SERVER"
echo "nats-sinks $NS_VERSION (nats-py $NATSPY_VERSION, $("$PY" -c 'import platform; print("CPython", platform.python_version())'));" \
     "jetsink $("$JETSINK" --version | awk '{print $2}') ($JETSINK)"
echo "load before the report: $(uptime | sed 's/.*load average/load average/')"
"$PY" - "$RESULTS" "$RUNS" <<'PY'
import statistics
import sys

rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
runs = int(sys.argv[2])
rate = {}
for tool, fsync, run, r, r_start, secs, redel in rows:
    rate[(tool, fsync, run)] = None if r == "FAILED" else float(r)

print("rate = N / (time from the consumer's first delivery to 0 pending and 0 ack-pending, polled)")
print(f"{'fsync':<6} {'run':>3} {'nats-sinks msg/s':>17} {'jetsink msg/s':>14} {'jetsink/nats-sinks':>19}")
for fsync in ("true", "false"):
    ratios, ns_rates, js_rates = [], [], []
    for run in range(1, runs + 1):
        ns = rate.get(("nats-sinks", fsync, str(run)))
        js = rate.get(("jetsink", fsync, str(run)))
        ratio = js / ns if ns and js else None
        if ns: ns_rates.append(ns)
        if js: js_rates.append(js)
        if ratio: ratios.append(ratio)
        show = lambda v, f: "FAILED" if v is None else format(v, f)
        print(f"{fsync:<6} {run:>3} {show(ns, '17.0f')} {show(js, '14.0f')} {show(ratio, '18.1f')}x")
    if runs > 1 and ratios:
        print(f"{fsync:<6} {'med':>3} {statistics.median(ns_rates):17.0f} "
              f"{statistics.median(js_rates):14.0f} {statistics.median(ratios):18.1f}x")
print("raw (tool, fsync, run, msg/s, msg/s incl. process start-up, drain s, redelivered):")
for row in rows:
    print("  " + "  ".join(row))
PY
if [ "$FAILED" != 0 ]; then
    echo "RESULT: FAILED (see messages above)"
    exit 1
fi
echo "RESULT: every drain finished and each output holds $N distinct records"
