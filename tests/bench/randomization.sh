#!/usr/bin/env bash
# Measures how much disorder jetsink's randomization features create, and what they cost:
# the delayed-NAK randomizer (delivery.randomizer) and random subject buckets
# (source.buckets), against a randomizer-off baseline.
#
# A script for people, not part of `cargo test`. See docs/randomization.md for the method
# and for results measured with it.
set -euo pipefail

usage() {
    cat <<'EOF'
Usage: tests/bench/randomization.sh [-n N] [-s SIZE] [-b BATCH] [-r RUNS] [--rate R]
                                    [--scenarios "LIST"] [--keep]

For every scenario: starts a private nats-server (JetStream, file storage, a free port,
a fresh temporary directory), creates a stream, prefills it with N messages of SIZE
bytes (`jetsink publish`), then starts `jetsink run` with a generated config (one sink,
SQLite destination with synchronous=full, batch BATCH, AckWait 30 s, MaxAckPending
10000, MaxDeliver -1) and waits until the table holds N rows and every consumer shows
0 pending and 0 ack-pending. The daemon is then stopped with SIGTERM.

With --rate R there is no prefill: the N messages are published at R msg/s while the
daemon runs (publisher started right after the daemon), so the randomizer works on a
steady flow instead of a backlog; wall_s is then about N/R plus the tail, and rel shows
what the randomization adds to that, not a capacity ratio.

Reported per scenario (one table row each):
  wall_s    seconds from daemon start to N rows in SQLite (SQLite polled every 20 ms)
  first_s   seconds from daemon start to the first row (start-up: binding consumers)
  msg/s     N / wall_s
  rel       throughput relative to the `off` scenario of the same run (wall_off / wall)
  tau       normalized Kendall tau distance between publish order (stream sequence)
            and commit order (SQLite rowid): inversions / (n(n-1)/2); 0 = same order,
            ~0.5 = unrelated order, 1 = reversed
  disp      mean |commit position - publish position|, in messages
  disp/N    the same as a fraction of N
  max_disp  largest displacement
  deliv2    share of rows written on their second delivery (delivered = 2)
  win_max   largest jetsink_randomizer_window seen (gauge polled every 200 ms)
  delayed   jetsink_randomizer_delayed_total at the end
  batches   jetsink_batches_total at the end: destination transactions (small batches of
            returning delayed messages are where the randomizer's time goes)
  cpu_j     CPU seconds (user + system, /proc) jetsink used from its start to N rows
  cpu_n     CPU seconds the scenario's nats-server used over the same time (with
            --rate, the publishing included; the prefill is not)
  check     `ok` when the table holds exactly N distinct stream sequences 1..N, the
            daemon ACKed exactly N messages, no row has delivered > 2, every delayed
            message came back (redelivered_total = delayed_total), every bucket is
            FIFO, the consumers drained and the daemon exited 0 on SIGTERM;
            otherwise what was wrong (the daemon's WARN/ERROR lines are printed below)

Scenarios (--scenarios, space-separated; default: all of the following):
  off                      randomizer off, one consumer (the baseline)
  rand:P:MIN:MAX:WINDOW    randomizer on: process_immediately_probability P, delays
                           MIN-MAX ms, max_window WINDOW, adaptive: true (not the
                           default, which is false)
  rand:P:MIN:MAX:WINDOW:default
                           the same with `adaptive` left at its default (false: the
                           source document's fixed probability; not in the default list)
  buckets:K                K random subject buckets (publish --bucket-prefix/--buckets,
                           source.buckets, stream subjects <prefix>.*), randomizer off
  buckets:K:reshuffle:S    K buckets, one random order kept for S pulls in a row
                           (source.buckets.reshuffle_every S; not in the default list)
  buckets:K:concurrent     the same with source.buckets.pull "concurrent": every bucket
                           pulled at once per batch and interleaved (not in the default list)
  shuffle:BUFFER           the shuffler (delivery.shuffle, buffer BUFFER, flush_ms 2000),
                           randomizer off; MaxAckPending raised to BUFFER + BATCH when
                           10000 is too small (not in the default list)
Default list:
  off rand:0.9:50:500:1000 rand:0.9:50:500:5000 rand:0.9:500:2000:1000
  rand:0.9:500:2000:5000 rand:0.5:50:500:1000 rand:0.5:50:500:5000
  rand:0.5:500:2000:1000 rand:0.5:500:2000:5000 buckets:4 buckets:16 buckets:64

Options (or environment variables):
  -n N               messages per scenario                (N, default 20000)
  -s SIZE            payload bytes                        (SIZE, default 200)
  -b BATCH           delivery.batch_size                  (BATCH, default 500)
  -r RUNS            repeat the whole scenario list       (RUNS, default 1);
                     with RUNS > 1 a table of medians follows
  --rate R           publish at R msg/s during the drain  (RATE, default: prefill)
  --scenarios LIST   scenarios to run                     (SCENARIOS)
  --destination D    sqlite or file                       (DEST, default sqlite):
                     `file` writes JSON lines (fsync per batch) and takes the
                     commit order from the lines' order; it has no key index, so
                     it shows what disorder costs the pipeline apart from what
                     out-of-order keys cost SQLite's B-tree
  --keep             keep the work directory (configs, logs, databases)
  -h, --help         this text
Environment only:
  JETSINK       jetsink binary (default: cargo build --release of this repository)
  NATS_SERVER   nats-server binary (default: nats-server on PATH)
  PYTHON        python3 with the sqlite3 module (default python3); no packages needed
  TIMEOUT       seconds allowed per drain (default: max(300, N/50), plus N/R with --rate)

Never touches a shared server: every scenario gets its own nats-server on 127.0.0.1.
Exit status: 0 when every scenario drained and passed its checks, 1 otherwise.
EOF
}

N=${N:-20000}
SIZE=${SIZE:-200}
BATCH=${BATCH:-500}
RUNS=${RUNS:-1}
RATE=${RATE:-}
PYTHON=${PYTHON:-python3}
DEST=${DEST:-sqlite}
NATS_SERVER=${NATS_SERVER:-nats-server}
KEEP=0
DEFAULT_SCENARIOS="off rand:0.9:50:500:1000 rand:0.9:50:500:5000 rand:0.9:500:2000:1000 \
rand:0.9:500:2000:5000 rand:0.5:50:500:1000 rand:0.5:50:500:5000 rand:0.5:500:2000:1000 \
rand:0.5:500:2000:5000 buckets:4 buckets:16 buckets:64"
SCENARIOS=${SCENARIOS:-$DEFAULT_SCENARIOS}

while [ $# -gt 0 ]; do
    case "$1" in
        -n) N=$2; shift 2 ;;
        -s) SIZE=$2; shift 2 ;;
        -b) BATCH=$2; shift 2 ;;
        -r) RUNS=$2; shift 2 ;;
        --rate) RATE=$2; shift 2 ;;
        --scenarios) SCENARIOS=$2; shift 2 ;;
        --destination) DEST=$2; shift 2 ;;
        --keep) KEEP=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "unknown argument: $1" >&2; usage >&2; exit 2 ;;
    esac
done
for v in N SIZE BATCH RUNS ${RATE:+RATE}; do
    if ! [[ ${!v} =~ ^[1-9][0-9]*$ ]]; then
        echo "$v must be a positive integer, got '${!v}'" >&2
        exit 2
    fi
done
case "$DEST" in
    sqlite|file) export RANDBENCH_DEST=$DEST ;;
    *) echo "DEST must be sqlite or file, got '$DEST'" >&2; exit 2 ;;
esac
if [ "$N" -lt 2 ]; then
    echo "N must be at least 2" >&2
    exit 2
fi
if [ "$BATCH" -gt 10000 ]; then
    echo "BATCH must be at most 10000 (jetsink's limit)" >&2
    exit 2
fi
for s in $SCENARIOS; do
    if ! [[ $s =~ ^(off|rand:(0?\.[0-9]+|1(\.0*)?):[0-9]+:[0-9]+:[0-9]+(:default)?|buckets:[0-9]+(:concurrent|:reshuffle:[0-9]+)?|shuffle:[0-9]+)$ ]]; then
        echo "bad scenario '$s' (see --help)" >&2
        exit 2
    fi
done
TIMEOUT=${TIMEOUT:-$(( (N / 50 > 300 ? N / 50 : 300) + (${RATE:-0} > 0 ? N / ${RATE:-1} : 0) ))}
command -v "$NATS_SERVER" >/dev/null || { echo "nats-server not found: $NATS_SERVER" >&2; exit 1; }
"$PYTHON" -c 'import sqlite3' || { echo "$PYTHON lacks the sqlite3 module" >&2; exit 1; }

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/jetsink-randomization.XXXXXX")

cleanup() {
    local rc=$?
    set +e
    # Processes this script started record their pid in $WORK/pids/*.
    for f in "$WORK"/pids/*; do
        [ -e "$f" ] || continue
        local pid
        pid=$(cat "$f")
        if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid" 2>/dev/null
            for _ in 1 2 3 4 5 6 7 8 9 10; do
                kill -0 "$pid" 2>/dev/null || break
                sleep 0.5
            done
            kill -KILL "$pid" 2>/dev/null
        fi
        rm -f "$f"
    done
    if [ "$KEEP" = 1 ]; then
        echo "work directory kept: $WORK" >&2
    else
        rm -rf "$WORK"
    fi
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
mkdir -p "$WORK/pids"

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
# Helper: a minimal NATS client (raw protocol over a socket, no packages), the config
# generator, the drain watcher and the order analysis.
cat >"$WORK/helper.py" <<'PY'
"""Helper of tests/bench/randomization.sh. Standard library only."""
import json
import os
import socket
import sqlite3
import sys
import time
import urllib.request


class Nats:
    """Just enough of the NATS client protocol for JetStream API requests."""

    def __init__(self, port, timeout=5.0):
        self.sock = socket.create_connection(("127.0.0.1", int(port)), timeout=timeout)
        self.buf = b""
        info = self._line()
        if not info.startswith(b"INFO"):
            raise RuntimeError(f"unexpected greeting {info[:80]!r}")
        self.sock.sendall(
            b'CONNECT {"verbose":false,"pedantic":false,"headers":true,'
            b'"no_responders":true,"protocol":1,"name":"randbench-helper"}\r\nPING\r\n'
        )
        while True:
            line = self._line()
            if line.startswith(b"PONG"):
                break
            if line.startswith(b"-ERR"):
                raise RuntimeError(line.decode(errors="replace"))
        self.inbox = f"_INBOX.randbench{os.getpid()}"
        self.sock.sendall(f"SUB {self.inbox}.* 1\r\n".encode())
        self.n = 0

    def _fill(self):
        data = self.sock.recv(1 << 16)
        if not data:
            raise RuntimeError("connection closed by the server")
        self.buf += data

    def _line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _take(self, n):
        while len(self.buf) < n + 2:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def request(self, subject, payload=b""):
        self.n += 1
        reply = f"{self.inbox}.{self.n}"
        self.sock.sendall(
            f"PUB {subject} {reply} {len(payload)}\r\n".encode() + payload + b"\r\n"
        )
        while True:
            line = self._line()
            if line.startswith(b"PING"):
                self.sock.sendall(b"PONG\r\n")
            elif line.startswith(b"MSG "):
                parts = line.split()
                data = self._take(int(parts[-1]))
                if parts[1].decode() == reply:
                    return json.loads(data)
            elif line.startswith(b"HMSG "):
                parts = line.split()
                hdr, total = int(parts[-2]), int(parts[-1])
                data = self._take(total)
                if parts[1].decode() == reply:
                    if total == hdr:
                        raise RuntimeError(f"no answer to {subject}: {data[:hdr]!r}")
                    return json.loads(data[hdr:])
            elif line.startswith(b"-ERR"):
                raise RuntimeError(line.decode(errors="replace"))

    def close(self):
        self.sock.close()


def js(port, subject, body=None):
    nc = Nats(port)
    try:
        resp = nc.request(subject, b"" if body is None else json.dumps(body).encode())
    finally:
        nc.close()
    if "error" in resp:
        raise RuntimeError(f"{subject}: {resp['error']}")
    return resp


def cmd_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    print(s.getsockname()[1])
    s.close()


def cmd_wait_ready(port, timeout):
    deadline = time.monotonic() + float(timeout)
    last = None
    while time.monotonic() < deadline:
        try:
            js(port, "$JS.API.INFO")
            return
        except Exception as e:  # not up yet
            last = e
            time.sleep(0.1)
    sys.exit(f"nats-server on port {port} not ready: {last}")


def cmd_create_stream(port, name, subject):
    js(port, f"$JS.API.STREAM.CREATE.{name}", {
        "name": name, "subjects": [subject], "retention": "limits", "storage": "file",
        "discard": "old", "max_consumers": -1, "max_msgs": -1, "max_bytes": -1,
        "max_age": 0, "max_msg_size": -1, "num_replicas": 1,
    })


DEST = os.environ.get("RANDBENCH_DEST", "sqlite")


def destination(target):
    """The sink's destination: SQLite (`synchronous: full`) or the file destination (fsync
    per batch) writing JSON lines into the directory `target`."""
    if DEST == "file":
        return {"type": "file", "directory": target, "prefix": "events", "fsync": True}
    return {"type": "sqlite", "path": target, "table": "events", "synchronous": "full"}


class Lines:
    """Counts the whole lines appended to the file destination's .jsonl files, reading only
    what is new since the last call, so polling a large output stays cheap."""

    def __init__(self, directory):
        self.dir, self.read, self.n = directory, {}, 0

    def count(self):
        try:
            names = sorted(n for n in os.listdir(self.dir) if n.endswith(".jsonl"))
        except FileNotFoundError:
            return 0
        for name in names:
            with open(os.path.join(self.dir, name), "rb") as f:
                f.seek(self.read.get(name, 0))
                data = f.read()
            whole = data.rfind(b"\n") + 1
            self.n += data.count(b"\n", 0, whole)
            self.read[name] = self.read.get(name, 0) + whole
        return self.n


def committed(target):
    """(stream_sequence, delivered, subject) of every row or line, in commit order."""
    if DEST == "file":
        rows = []
        for name in sorted(n for n in os.listdir(target) if n.endswith(".jsonl")):
            with open(os.path.join(target, name), "rb") as f:
                for line in f:
                    r = json.loads(line)
                    rows.append((r["stream_sequence"], r["delivered"], r["subject"]))
        return rows
    conn = sqlite3.connect(f"file:{target}?mode=ro", uri=True)
    return conn.execute(
        "SELECT stream_sequence, delivered, subject FROM events ORDER BY rowid").fetchall()


def cmd_config(path, port, http_port, db, batch, scenario):
    source = {
        "stream": "RANDBENCH",
        "consumer": "jetsink-bench",
        "ack_wait_ms": 30000,
        "max_deliver": -1,
        "max_ack_pending": 10000,
        "deliver_policy": "all",
    }
    delivery = {"batch_size": int(batch), "batch_timeout_ms": 1000}
    kind, *args = scenario.split(":")
    if kind == "off":
        source["subjects"] = "randbench.jobs"
    elif kind == "rand":
        p, lo, hi, window = args[:4]
        source["subjects"] = "randbench.jobs"
        delivery["randomizer"] = {
            "enabled": True,
            "process_immediately_probability": float(p),
            "min_delay_ms": int(lo),
            "max_delay_ms": int(hi),
            "max_window": int(window),
        }
        if args[4:] != ["default"]:
            delivery["randomizer"]["adaptive"] = True
    elif kind == "buckets":
        source["buckets"] = {"prefix": "randbench.bucket", "count": int(args[0])}
        if args[1:] == ["concurrent"]:
            source["buckets"]["pull"] = "concurrent"
        elif args[1:2] == ["reshuffle"]:
            source["buckets"]["reshuffle_every"] = int(args[2])
    elif kind == "shuffle":
        buffer = int(args[0])
        source["subjects"] = "randbench.jobs"
        source["max_ack_pending"] = max(10000, buffer + int(batch))
        delivery["shuffle"] = {"buffer": buffer, "flush_ms": 2000}
    else:
        sys.exit(f"unknown scenario {scenario}")
    cfg = {
        "nats": {"servers": [f"nats://127.0.0.1:{port}"], "name": "jetsink-randbench"},
        "http": {"listen": f"127.0.0.1:{http_port}"},
        "logging": {"level": "info", "format": "text"},
        "sinks": {"bench": {
            "source": source,
            "delivery": delivery,
            "destination": destination(db),
        }},
    }
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2)


def scrape(http_port):
    """The daemon's metrics as {name: value} for the sink `bench` (unlabelled sums)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=1) as r:
            text = r.read().decode()
    except Exception:
        return None
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith("jetsink_"):
            continue
        try:
            key, value = line.rsplit(" ", 1)
            name = key.split("{", 1)[0]
            out[name] = out.get(name, 0.0) + float(value)
        except ValueError:
            continue
    return out


def count(conn):
    try:
        return conn.execute("SELECT COUNT(*) FROM events").fetchone()[0]
    except sqlite3.OperationalError:
        return 0  # table not created yet, or busy


def cpu_seconds(pid):
    """User plus system CPU seconds a process has used so far (/proc), or None."""
    try:
        with open(f"/proc/{int(pid)}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, ValueError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cmd_watch(db, n, t0, pid, http_port, timeout, out_path, nats_pid):
    """Polls SQLite until it holds n rows; records timings, the largest window and the
    CPU seconds the daemon and nats-server used until then."""
    n, t0, pid, timeout = int(n), float(t0), int(pid), float(timeout)
    # The server's CPU from here on: the drain's, not the prefill's.
    nats_before = cpu_seconds(nats_pid) or 0.0
    conn = None
    lines = Lines(db) if DEST == "file" else None
    first = None
    win_max = 0
    last_scrape = 0.0
    while True:
        now = time.time()
        if now - t0 > timeout:
            sys.exit(f"timed out after {timeout:.0f}s with "
                     f"{lines.count() if lines else count(conn) if conn else 0} rows")
        try:
            os.kill(pid, 0)
        except OSError:
            sys.exit("the daemon exited before the table was full")
        if lines is not None:
            c = lines.count()
        else:
            if conn is None and os.path.exists(db):
                conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)
            c = count(conn) if conn is not None else 0
        now = time.time()
        if c > 0 and first is None:
            first = now - t0
        if c >= n:
            wall = now - t0
            cpu_j = cpu_seconds(pid)
            cpu_n = (cpu_seconds(nats_pid) or nats_before) - nats_before
            break
        if now - last_scrape >= 0.2:
            last_scrape = now
            m = scrape(http_port)
            if m:
                win_max = max(win_max, int(m.get("jetsink_randomizer_window", 0)))
        time.sleep(0.02)
    m = scrape(http_port) or {}
    win_max = max(win_max, int(m.get("jetsink_randomizer_window", 0)))
    with open(out_path, "w") as f:
        json.dump({"wall": wall, "first": first, "win_max": win_max,
                   "cpu_j": cpu_j, "cpu_n": cpu_n}, f)


def cmd_drained(port, stream, timeout, *consumers):
    """Waits until every consumer shows 0 pending and 0 ack-pending."""
    deadline = time.monotonic() + float(timeout)
    while True:
        left = []
        for c in consumers:
            info = js(port, f"$JS.API.CONSUMER.INFO.{stream}.{c}")
            if info.get("num_pending", 0) or info.get("num_ack_pending", 0):
                left.append(f"{c}: {info.get('num_pending')} pending, "
                            f"{info.get('num_ack_pending')} ack-pending")
        if not left:
            print("drained")
            return
        if time.monotonic() > deadline:
            print("not drained: " + "; ".join(left[:4]))
            sys.exit(1)
        time.sleep(0.2)


def cmd_metrics(http_port, out_path):
    with open(out_path, "w") as f:
        json.dump(scrape(http_port) or {}, f)


def inversions(a):
    """Pairs i < j with a[i] > a[j], by merge sort: O(n log n)."""
    a = list(a)
    tmp = [0] * len(a)
    inv = 0
    width = 1
    n = len(a)
    while width < n:
        for lo in range(0, n, 2 * width):
            mid, hi = min(lo + width, n), min(lo + 2 * width, n)
            i, j, k = lo, mid, lo
            while i < mid and j < hi:
                if a[i] <= a[j]:
                    tmp[k] = a[i]
                    i += 1
                else:
                    tmp[k] = a[j]
                    inv += mid - i
                    j += 1
                k += 1
            tmp[k:k + mid - i] = a[i:mid]
            k += mid - i
            tmp[k:k + hi - j] = a[j:hi]
        a, tmp = tmp, a
        width *= 2
    return inv


def cmd_analyze(db, n, watch_path, metrics_path, base_wall, drained, rc, name, results_path):
    n = int(n)
    w = json.load(open(watch_path))
    m = json.load(open(metrics_path))
    rows = committed(db)
    seqs = [r[0] for r in rows]
    rank = {s: i for i, s in enumerate(sorted(set(seqs)))}
    pos = [rank[s] for s in seqs]
    k = len(pos)
    tau = inversions(pos) / (k * (k - 1) / 2) if k > 1 else 0.0
    disp = [abs(i - p) for i, p in enumerate(pos)]
    mean_disp = sum(disp) / k if k else 0.0
    deliv2 = sum(1 for r in rows if r[1] == 2) / k if k else 0.0
    problems = []
    if len(rows) != n:
        problems.append(f"rows={len(rows)}")
    if len(set(seqs)) != len(seqs):
        problems.append(f"dup-seqs={len(seqs) - len(set(seqs))}")
    if set(seqs) != set(range(1, n + 1)):
        problems.append(f"missing={len(set(range(1, n + 1)) - set(seqs))}")
    max_deliv = max((r[1] for r in rows), default=0)
    if max_deliv > 2:
        problems.append(f"max-delivered={max_deliv}")
    acked = int(m.get("jetsink_messages_acked_total", -1))
    if acked != n:
        problems.append(f"acked={acked}")
    last = {}
    fifo_breaks = 0
    if name.startswith("buckets"):
        for s, _, subj in rows:
            if subj in last and last[subj] > s:
                fifo_breaks += 1
            last[subj] = s
        if fifo_breaks:
            problems.append(f"fifo-breaks={fifo_breaks}")
    if drained != "drained":
        problems.append("consumer-not-drained")
    if rc != "0":
        problems.append(f"exit={rc}")
    wall = w["wall"]
    base = float(base_wall) if base_wall else 0.0
    rel = "1.00" if name == "off" else (f"{base / wall:.2f}" if base > 0 else "-")
    delayed = int(m.get("jetsink_randomizer_delayed_total", 0))
    redelivered = int(m.get("jetsink_randomizer_redelivered_total", 0))
    if redelivered != delayed:
        problems.append(f"redelivered={redelivered}/delayed={delayed}")
    batches = int(m.get("jetsink_batches_total", 0))
    result = {
        "name": name, "wall": wall, "first": w["first"] or 0.0, "rate": n / wall,
        "rel": None if rel == "-" else float(rel), "tau": tau, "disp": mean_disp,
        "dispn": mean_disp / n, "max_disp": max(disp, default=0), "deliv2": deliv2,
        "win_max": w["win_max"], "delayed": delayed, "batches": batches,
        "cpu_j": w.get("cpu_j") or 0.0, "cpu_n": w.get("cpu_n") or 0.0,
        "check": "ok" if not problems else ",".join(problems),
    }
    print(row(result))
    with open(results_path, "a") as f:
        f.write(json.dumps(result) + "\n")
    sys.exit(0 if not problems else 3)


def row(r):
    rel = "-" if r["rel"] is None else f"{r['rel']:.2f}"
    return (f"{r['name']:<24} {r['wall']:7.2f} {r['first']:7.2f} {r['rate']:8.0f} {rel:>5} "
            f"{r['tau']:7.4f} {r['disp']:8.1f} {r['dispn']:7.4f} {int(r['max_disp']):8d} "
            f"{100 * r['deliv2']:6.1f}% {int(r['win_max']):7d} {int(r['delayed']):7d} "
            f"{int(r['batches']):7d} {r['cpu_j']:6.2f} {r['cpu_n']:6.2f}  {r['check']}")


def cmd_summary(results_path):
    """Medians per scenario over the runs, in first-seen scenario order."""
    import statistics
    by = {}
    for line in open(results_path):
        r = json.loads(line)
        by.setdefault(r["name"], []).append(r)
    for name, rs in by.items():
        med = {"name": name}
        for k in ("wall", "first", "rate", "tau", "disp", "dispn", "max_disp", "deliv2",
                  "win_max", "delayed", "batches", "cpu_j", "cpu_n"):
            med[k] = statistics.median(r[k] for r in rs)
        rels = [r["rel"] for r in rs if r["rel"] is not None]
        med["rel"] = statistics.median(rels) if rels else None
        bad = sum(1 for r in rs if r["check"] != "ok")
        med["check"] = f"ok ({len(rs)} runs)" if not bad else f"{bad} of {len(rs)} runs failed"
        print(row(med))


if __name__ == "__main__":
    cmd, *args = sys.argv[1:]
    globals()["cmd_" + cmd.replace("-", "_")](*args)
PY
H() { "$PYTHON" "$WORK/helper.py" "$@"; }

HEADER=$(printf '%-24s %7s %7s %8s %5s %7s %8s %7s %8s %7s %7s %7s %7s %6s %6s  %s' \
    scenario wall_s first_s msg/s rel tau disp disp/N max_disp deliv2 win_max delayed batches \
    cpu_j cpu_n check)

# ---------------------------------------------------------------------------------------
# One scenario: fresh server, prefill, timed drain, checks, analysis. Prints one row.
FAILED=0
BASE_WALL=""
ROWS=()
NOTES=()

STOP_RC=0
stop_pid() { # stop_pid NAME: SIGTERM the process recorded in $WORK/pids/NAME and wait for
    #          it (jetsink bounds its own shutdown); its exit status goes to STOP_RC.
    local f="$WORK/pids/$1" pid
    STOP_RC=0
    [ -e "$f" ] || return 0
    pid=$(cat "$f")
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || STOP_RC=$?
    rm -f "$f"
}

run_scenario() {
    local name=$1 idx=$2 dir port hport subject stream_subject publish_args consumers t0 rc drained
    dir="$WORK/$idx-${name//:/_}"
    mkdir -p "$dir/js"
    port=$(H port)
    hport=$(H port)
    "$NATS_SERVER" -a 127.0.0.1 -p "$port" -js -sd "$dir/js" >"$dir/nats.log" 2>&1 &
    echo $! >"$WORK/pids/nats"
    H wait-ready "$port" 15 || return 1

    consumers="jetsink-bench"
    case "$name" in
        buckets:*)
            local k=${name#buckets:}
            k=${k%%:*}
            stream_subject="randbench.bucket.*"
            publish_args=(--bucket-prefix randbench.bucket --buckets "$k")
            consumers=$(for ((i = 0; i < k; i++)); do printf 'jetsink-bench-bucket-%d ' "$i"; done)
            ;;
        *)
            stream_subject="randbench.jobs"
            publish_args=(--subject randbench.jobs)
            ;;
    esac
    H create-stream "$port" RANDBENCH "$stream_subject" || return 1
    publish_args+=(--server "nats://127.0.0.1:$port" --count "$N" --size "$SIZE")
    if [ -z "$RATE" ]; then
        "$JETSINK" publish "${publish_args[@]}" >"$dir/publish.log" 2>&1 \
            || { cat "$dir/publish.log" >&2; return 1; }
    fi
    local target="$dir/bench.db"
    [ "$DEST" = file ] && target="$dir/out"
    H config "$dir/jetsink.json" "$port" "$hport" "$target" "$BATCH" "$name" || return 1
    "$JETSINK" validate --config "$dir/jetsink.json" >"$dir/validate.log" 2>&1 \
        || { cat "$dir/validate.log" >&2; return 1; }

    t0=$(date +%s.%N)
    "$JETSINK" run --config "$dir/jetsink.json" >"$dir/daemon.log" 2>&1 &
    echo $! >"$WORK/pids/daemon"
    if [ -n "$RATE" ]; then
        "$JETSINK" publish "${publish_args[@]}" --rate "$RATE" >"$dir/publish.log" 2>&1 &
        echo $! >"$WORK/pids/publisher"
    fi
    if ! H watch "$target" "$N" "$t0" "$(cat "$WORK/pids/daemon")" "$hport" \
        "$TIMEOUT" "$dir/watch.json" "$(cat "$WORK/pids/nats")"; then
        NOTES+=("$name: drain failed; daemon log tail:")
        NOTES+=("$(tail -n 20 "$dir/daemon.log")")
        stop_pid publisher
        stop_pid daemon
        stop_pid nats
        ROWS+=("$(printf '%-24s %s' "$name" "FAILED (see notes)")")
        echo "${ROWS[-1]}"
        FAILED=1
        return 0
    fi
    if [ -e "$WORK/pids/publisher" ]; then
        wait "$(cat "$WORK/pids/publisher")" \
            || NOTES+=("$name: publisher failed: $(cat "$dir/publish.log")")
        rm -f "$WORK/pids/publisher"
    fi
    # shellcheck disable=SC2086
    drained=$(H drained "$port" RANDBENCH 30 $consumers) || true
    sleep 2 # anything still in flight would show up as extra ACKs or rows
    H metrics "$hport" "$dir/metrics.json"
    stop_pid daemon
    rc=$STOP_RC
    stop_pid nats

    local row status=0
    row=$(H analyze "$target" "$N" "$dir/watch.json" "$dir/metrics.json" \
        "$BASE_WALL" "$drained" "$rc" "$name" "$WORK/results.jsonl") || status=$?
    ROWS+=("$row")
    echo "$row"
    if [ "$name" = off ] && [ "$status" = 0 ]; then
        BASE_WALL=$("$PYTHON" -c 'import json,sys; print(json.load(open(sys.argv[1]))["wall"])' \
            "$dir/watch.json")
    fi
    if [ "$status" != 0 ]; then
        FAILED=1
        [ "$drained" = drained ] || NOTES+=("$name: $drained")
    fi
    local warn
    warn=$(grep -E '\b(WARN|ERROR)\b' "$dir/daemon.log" | head -n 10 || true)
    if [ -n "$warn" ]; then
        NOTES+=("$name: daemon WARN/ERROR lines ($(grep -cE '\b(WARN|ERROR)\b' "$dir/daemon.log") in all, first 10):")
        NOTES+=("$warn")
    fi
}

log "jetsink:      $JETSINK ($("$JETSINK" --version))"
log "nats-server:  $("$NATS_SERVER" --version)"
log "work dir:     $WORK"
COMMIT=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)
if [ -n "$RATE" ]; then MODE="published at $RATE msg/s during the drain"; else MODE="prefilled backlog"; fi
echo "# randomization.sh: N=$N SIZE=$SIZE BATCH=$BATCH RUNS=$RUNS, $MODE, destination $DEST, commit $COMMIT, $(nproc) CPUs, $("$NATS_SERVER" --version)"
echo "$HEADER"
idx=0
for ((run = 1; run <= RUNS; run++)); do
    BASE_WALL=""
    for s in $SCENARIOS; do
        idx=$((idx + 1))
        if ! run_scenario "$s" "$idx"; then
            stop_pid publisher
            stop_pid daemon
            stop_pid nats
            ROWS+=("$(printf '%-24s %s' "$s" "FAILED (set-up)")")
            echo "${ROWS[-1]}"
            FAILED=1
        fi
    done
done
if [ "$RUNS" -gt 1 ] && [ -s "$WORK/results.jsonl" ]; then
    echo
    echo "# median over $RUNS runs (rel: median of each run's ratio to its own baseline)"
    echo "$HEADER"
    H summary "$WORK/results.jsonl"
fi
if [ "${#NOTES[@]}" -gt 0 ]; then
    echo
    echo "# notes"
    printf '%s\n' "${NOTES[@]}"
fi
exit "$FAILED"
