#!/usr/bin/env bash
# Runs each libFuzzer target for SECONDS (`make fuzz`; docs/benchmarks.md, "Fuzzing").
#   scripts/fuzz.sh BUILD_DIR SECONDS [TARGET...]
# Each target starts from its stored corpus (fuzz/corpus/<t>/) and the test fixtures;
# new inputs go to BUILD_DIR/fuzz-corpus/<t>/ and crashes to BUILD_DIR/fuzz-crashes/<t>/.
# Prints one line per target: executions, crashes, coverage. Exits 1 if any crashed.
# To keep an input (a crash once fixed, or new coverage), copy it into fuzz/corpus/<t>/;
# `make test` replays that directory with the gcc build.
set -uo pipefail
build=${1:?build dir}
seconds=${2:?seconds}
shift 2
root=$(cd "$(dirname "$0")/.." && pwd)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(proc cgroup run_id units gpu_select hf_config sglang_log)

seeds_of() {  # the fixtures a target starts from, besides its stored corpus
  case $1 in
    proc | cgroup) echo "$root/tests/fixtures/proc" ;;
    hf_config | sglang_log) echo "$root/tests/fixtures/capacity" ;;
  esac
}

failed=0
printf '%-12s %12s %8s %8s %s\n' target executions crashes "cov" seconds
for t in "${targets[@]}"; do
  work="$build/fuzz-corpus/$t"
  crashes="$build/fuzz-crashes/$t"
  mkdir -p "$work" "$crashes"
  dict=()
  [ -f "$root/fuzz/dict/$t.dict" ] && dict=(-dict="$root/fuzz/dict/$t.dict")
  log="$build/fuzz-$t.log"
  # shellcheck disable=SC2046
  "$build/fuzz/fuzz_$t" -max_total_time="$seconds" -print_final_stats=1 -max_len=16384 \
    -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$crashes/" "${dict[@]}" \
    "$work" "$root/fuzz/corpus/$t" $(seeds_of "$t") >"$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  found=$(find "$crashes" -type f | wc -l)
  printf '%-12s %12s %8s %8s %s\n' "$t" "${execs:-?}" "$found" "${cov:-?}" "$seconds"
  if [ "$rc" -ne 0 ] || [ "$found" -ne 0 ]; then
    failed=1
    echo "  $t: rc $rc; see $log and $crashes/" >&2
  fi
done
exit $failed
