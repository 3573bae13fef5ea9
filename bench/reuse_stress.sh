#!/usr/bin/env bash
# PID reuse inside a target's cgroup (issue 9, D1), many trials: in each, a target dies
# of free's SIGTERM, the test reaps it and clones an impostor with the same pid into
# the same cgroup (clone3 set_tid + CLONE_INTO_CGROUP) before the SIGKILL phase; the
# impostor must survive. Needs root and a writable cgroup v2 (else the test skips).
#
#   bench/reuse_stress.sh [TRIALS] [BUILD_DIR]     (default 10000, build)
#
# Prints "trials N, impostors killed K" and exits non-zero on any wrong kill. ~0.6 s a
# trial on the 2-core machine (the 400 ms grace dominates).
set -euo pipefail
trials=${1:-10000}
build=${2:-build}
[[ -x "$build/gpureap_e2e" ]] || { echo "build first: make build" >&2; exit 2; }
start=$(date +%s)
GPUREAP_STRESS_TRIALS=$trials "$build/gpureap_e2e" \
  --gtest_filter='Stress.PidReusedInsideTheTargetCgroupIsNeverKilled' --gtest_brief=1
echo "wall seconds: $(( $(date +%s) - start ))"
