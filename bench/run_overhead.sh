#!/usr/bin/env bash
# What `gpureap run -- true` costs over running `true` alone.
#
#   bench/run_overhead.sh [GPUREAP_BIN] [ITERATIONS]
#
# Runs `true`, `gpureap run -- true` and `gpureap run --no-cgroup -- true`
# interleaved (so a noisy neighbour hits all three alike), ITERATIONS times each
# (default 200), timing each launch from posix_spawn to waitpid in Python (no
# shell in between). Prints the median and p90 of each, the ratio of medians
# against `true`, and the absolute added milliseconds. hyperfine is not needed.
# The cgroup row needs a writable cgroup v2 (root or delegation); elsewhere it
# falls back to subreaper mode, which the row's label then says.
set -euo pipefail
BIN=${1:-${GPUREAP_BIN:-build/gpureap}}
N=${2:-200}
TRUE_BIN=$(type -P true)
[[ -x "$BIN" ]] || { echo "gpureap binary not found: $BIN (pass it as the first argument)" >&2; exit 2; }

python3 - "$BIN" "$N" "$TRUE_BIN" <<'PY'
import os, statistics, sys, time

bin_, n, true_bin = sys.argv[1], int(sys.argv[2]), sys.argv[3]
cases = {
    "true": [true_bin],
    "gpureap run -- true": [bin_, "run", "--", true_bin],
    "gpureap run --no-cgroup -- true": [bin_, "run", "--no-cgroup", "--", true_bin],
}
env = dict(os.environ)
# No NVML is needed for a command this short; make sure none is loaded either way.
env.pop("GPUREAP_NVML_LIBRARY", None)

def once(argv):
    t = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, env)
    _, status = os.waitpid(pid, 0)
    dt = time.perf_counter() - t
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{' '.join(argv)} failed with status {status}")
    return dt

for argv in cases.values():  # warm the page cache
    for _ in range(5):
        once(argv)
times = {k: [] for k in cases}
for _ in range(n):
    for k, argv in cases.items():
        times[k].append(once(argv))

def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]

base = statistics.median(times["true"])
print(f"{n} runs each, interleaved; {os.cpu_count()} CPUs; kernel {os.uname().release}")
print(f"{'command':34} {'median':>9} {'p90':>9} {'ratio':>7} {'added':>9}")
for k, xs in times.items():
    med = statistics.median(xs)
    print(f"{k:34} {med*1e3:8.3f}ms {pct(xs, 0.9)*1e3:8.3f}ms {med/base:6.1f}x {(med-base)*1e3:+8.3f}ms")
PY
