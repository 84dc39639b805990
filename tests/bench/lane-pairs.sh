#!/usr/bin/env bash
# Strict lanes against lanes off, for two builds at once: alternated round by round so the
# machine's drift falls on both, with the order of the modes swapped every round. Single
# pairs on a 2-core machine spread by ±10 % or more; compare medians over many rounds. A
# script for people, not part of `cargo test`.
#
# usage: tests/bench/lane-pairs.sh BASE NEW [ROUNDS]
#   BASE, NEW  two jetsink binaries (release or `--profile profiling` builds)
#   ROUNDS     rounds (default 12); each runs tests/bench/lane-latency.sh once per build
#              with MODES "off strict", the next round "strict off", and NEW before BASE
# env: ROUTINE, URGENT (default 270000 and 30000: 10 % urgent, published live), and
#      whatever lane-latency.sh reads (BATCH, URGENT_WHEN); nats-server is taken from PATH
# prints: one line per mode and build of each round, then per build the medians of the
#         commit rates, of strict / off, of the strict urgent p99 and of the CPU seconds
#         strict spends per drain against lanes off (jetsink, nats-server)
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 2 ] || { sed -n '2,15p' "$0" >&2; exit 2; }
base=$(realpath "$1")
new=$(realpath "$2")
rounds=${3:-12}
for b in "$base" "$new"; do
  [ -x "$b" ] || { echo "not an executable: $b" >&2; exit 2; }
done
ROUTINE=${ROUTINE:-270000}
URGENT=${URGENT:-30000}
lines=$(mktemp)
trap 'rm -f "$lines"' EXIT

for r in $(seq 1 "$rounds"); do
  if [ $((r % 2)) = 1 ]; then builds="base new"; modes="off strict"; else builds="new base"; modes="strict off"; fi
  for b in $builds; do
    bin=$base; [ "$b" = new ] && bin=$new
    out=$(JETSINK="$bin" MODES="$modes" tests/bench/lane-latency.sh "$ROUTINE" "$URGENT" 2>&1) || {
      echo "$out" >&2; exit 1; }
    echo "$out" | ROUND=$r BUILD=$b python3 -c '
import os, re, sys
text = sys.stdin.read()
for mode in ("off", "strict"):
    span = re.search(rf"^{mode} +drained .*\((\d+) msg/s\); CPU s jetsink ([\d.]+), nats-server ([\d.]+)", text, re.M)
    p99 = re.search(rf"^{mode} +work\.urgent +n= *\d+ p50= *\d+ ms +p99= *(\d+) ms", text, re.M)
    if span is None or p99 is None:
        sys.exit("round " + os.environ["ROUND"] + ": no figures for " + mode + " in the output of lane-latency.sh")
    print(os.environ["ROUND"], os.environ["BUILD"], mode, span[1], span[2], span[3], p99[1])
' | tee -a "$lines"
  done
done

python3 - "$lines" <<'PY'
import statistics as st, sys
runs = {}
for line in open(sys.argv[1]):
    r, build, mode, rate, cpu_j, cpu_n, p99 = line.split()
    runs.setdefault((build, r), {})[mode] = (float(rate), float(cpu_j), float(cpu_n), float(p99))
print("build  pairs  off msg/s  strict msg/s  strict/off (mean)  urgent p99 strict  CPU strict/off jetsink, nats-server")
for build in ("base", "new"):
    pairs = [v for (b, _), v in runs.items() if b == build and len(v) == 2]
    if not pairs:
        continue
    med = lambda xs: st.median(xs)
    ratio = [p["strict"][0] / p["off"][0] for p in pairs]
    print(f"{build:5}  {len(pairs):5}  {med([p['off'][0] for p in pairs]):9.0f}  "
          f"{med([p['strict'][0] for p in pairs]):12.0f}  {med(ratio):6.3f} ({st.mean(ratio):.3f})  "
          f"{med([p['strict'][3] for p in pairs]):14.1f} ms  "
          f"{med([p['strict'][1] / p['off'][1] for p in pairs]):.3f}, "
          f"{med([p['strict'][2] / p['off'][2] for p in pairs]):.3f}")
PY
