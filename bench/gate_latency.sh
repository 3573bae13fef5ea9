#!/usr/bin/env bash
# docs/benchmarks.md, "The gate: from a crash to no new work": N witnessed crashes (the
# SIGKILL of a simulated GPU server's launcher whose worker the agent watched; N=20 by
# default) with `gpureap watch --gate MODE` at its default tick:
#  - slurm: a real slurmctld + slurmd on the loopback, ports and directories of their own,
#    started by the Slurm end-to-end tests' harness (tests/e2e/slurm_test.cc): from just
#    before the SIGKILL until `sinfo` (asked back to back) first shows the node draining;
#  - kubernetes-condition and kubernetes-taint: the stand-in API server of the Kubernetes
#    end-to-end tests (tests/e2e/kube_stand_in.py): until it received the PATCH.
# The cases are GateBench* in the end-to-end program, which ctest leaves out (a bench
# records; it asserts nothing about time). Needs root (slurmd) and Debian's Slurm.
#   B=<build dir> (default build) N=<crashes> OUT=<dir> (default bench/results/gate)
#   bench/gate_latency.sh            # all three; JSON per gate, a summary line each
set -eu
B=${B:-build}; N=${N:-20}; OUT=${OUT:-bench/results/gate}
mkdir -p "$OUT"
summary() {  # FILE KEY: "p50 X ms, p99 Y ms (min, max)"
  python3 - "$1" "$2" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); s = d[sys.argv[2]]
print("%-22s %-34s n=%d p50 %.1f ms  p99 %.1f ms  (min %.1f, max %.1f)" % (
    d["gate"], sys.argv[2], s["n"], 1e3 * s["p50"], 1e3 * s["p99"], 1e3 * s["min"], 1e3 * s["max"]))
PY
}
run() {  # FILTER OUTFILE [ENV...]
  local filter=$1 file=$2; shift 2
  env "$@" GPUREAP_BENCH_CRASHES="$N" GPUREAP_BENCH_OUT="$file" \
    "$B/gpureap_e2e" --gtest_filter="$filter" --gtest_brief=1 >"$file.log" 2>&1 ||
    { echo "failed: $filter (see $file.log)" >&2; return 1; }
  rm -f "$file.log"
}
run 'GateBenchSlurm.*' "$OUT/slurm.json"
summary "$OUT/slurm.json" crash_to_drain_seen_by_sinfo
summary "$OUT/slurm.json" verdict_to_drain_applied
summary "$OUT/slurm.json" crash_to_orphan_announced
for mode in kubernetes-condition kubernetes-taint; do
  run 'GateBenchKube.*' "$OUT/$mode.json" GPUREAP_BENCH_GATE=$mode
  summary "$OUT/$mode.json" crash_to_patch_received
  summary "$OUT/$mode.json" verdict_to_patched
  summary "$OUT/$mode.json" crash_to_orphan_announced
done
