"""Server time of 100,000 upserts that all hit a stored row, with and without the
newest-wins guard, alternated, PostgreSQL and MariaDB (the statements jetsink generates,
fed from generate_series / seq_1_to_N instead of parameters)."""
import re, subprocess, statistics, sys

N = 100_000
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 5

def psql(sql):
    out = subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", "-d", "jetsink_state_bench",
                          "-v", "ON_ERROR_STOP=1", "-q", "-c", "\\timing on", "-c", sql],
                         capture_output=True, text=True, check=True).stdout
    return float(re.findall(r"Time: ([0-9.]+) ms", out)[-1])

def my(sql):
    out = subprocess.run(["mysql", "-h", "127.0.0.1", "-u", "root", "test", "-N", "-e",
                          f"SET @t0 = NOW(6); {sql}; SELECT TIMESTAMPDIFF(MICROSECOND, @t0, NOW(6));"],
                         capture_output=True, text=True, check=True).stdout
    return int(out.split()[-1]) / 1000.0

# Run by tests/bench/upsert.sh, in the database it creates (jetsink_state_bench).
psql("DROP TABLE IF EXISTS g; CREATE TABLE g (n bigint PRIMARY KEY, v bigint, pad text, sq bigint NOT NULL)")
psql(f"INSERT INTO g SELECT i, i, repeat('x', 150), 0 FROM generate_series(1, {N}) i")
my("DROP TABLE IF EXISTS g; CREATE TABLE g (n BIGINT PRIMARY KEY, v BIGINT, pad TEXT, sq BIGINT NOT NULL) ENGINE=InnoDB")
my(f"INSERT INTO g SELECT seq, seq, REPEAT('x', 150), 0 FROM seq_1_to_{N}")

PG = ("INSERT INTO g AS stored (n, v, pad, sq) SELECT i, i + {s}, repeat('y', 150), {s} "
      f"FROM generate_series(1, {N}) i ON CONFLICT (n) DO UPDATE SET v = EXCLUDED.v, "
      "pad = EXCLUDED.pad, sq = EXCLUDED.sq")
PG_GUARD = " WHERE stored.sq IS NULL OR stored.sq < EXCLUDED.sq"
G = "`sq` IS NULL OR `sq` < VALUES(`sq`)"
MY = ("INSERT INTO g (n, v, pad, sq) SELECT seq, seq + {s}, REPEAT('y', 150), {s} "
      f"FROM seq_1_to_{N} ON DUPLICATE KEY UPDATE ")
MY_PLAIN = "v = VALUES(v), pad = VALUES(pad), sq = VALUES(sq)"
MY_GUARD = f"v = IF({G}, VALUES(v), v), pad = IF({G}, VALUES(pad), pad), sq = IF({G}, VALUES(sq), sq)"

res = {k: [] for k in ["pg plain", "pg guard", "pg older", "my plain", "my guard", "my older"]}
s = 0
for r in range(ROUNDS):
    for name in (["plain", "guard"] if r % 2 == 0 else ["guard", "plain"]):
        s += 1
        res["pg " + name].append(psql(PG.format(s=s) + (PG_GUARD if name == "guard" else "")))
        res["my " + name].append(my(MY.format(s=s) + (MY_GUARD if name == "guard" else MY_PLAIN)))
    # A replay: every row older than the stored one, so the guard keeps them all.
    res["pg older"].append(psql(PG.format(s=0) + PG_GUARD))
    res["my older"].append(my(MY.format(s=0) + MY_GUARD))
for k, v in res.items():
    print(f"{k:9s} median {statistics.median(v):8.1f} ms  runs {' '.join(f'{x:.0f}' for x in v)}")
for e in ["pg", "my"]:
    print(f"{e}: guard / plain = {statistics.median(res[e+' guard']) / statistics.median(res[e+' plain']):.3f}, "
          f"older / plain = {statistics.median(res[e+' older']) / statistics.median(res[e+' plain']):.3f}")
psql("DROP TABLE g")
my("DROP TABLE g")
