#!/usr/bin/env bash
# `make test` after the dependencies and the configure step (docs/benchmarks.md, "Issue
# 48, sixth pass"). Run after the build, the tests left about 0.6 of 2 cores idle (ctest's
# slots wait: a release delay, a settle window, an agent's tick), and the build ended with
# one compile alone; run beside the compiling of the unit-test programs, each fills the
# other's idle time. So:
#   1. build what the tests labelled e2e, contrib or bench run (gpureap_tested_programs:
#      the binary, the simulated driver, the end-to-end program, the portable binary);
#   2. start those tests, and beside them build the rest (the unit-test programs; the
#      build's output goes to BUILD/rest-of-build.log, shown at once if it fails);
#   3. once both are done, run the rest of the tests (the unit tests), so every test but
#      the stress ones runs, as `ctest -LE stress` would.
# Exit 0 when the build and every test passed, 1 otherwise (each ctest prints its failures).
# Usage: scripts/test-beside-build.sh BUILD JOBS TEST_JOBS
set -uo pipefail
build=${1:?usage: test-beside-build.sh BUILD JOBS TEST_JOBS} jobs=${2:?} test_jobs=${3:?}
first='^(e2e|contrib|bench)$'
# One compile more than cores: a build step waiting for another (a library, a link) or
# the end of a phase, where fewer steps are ready than cores, then leaves no core idle
# (at -j2 the end of each phase ran one compile for 13-30 s: docs/benchmarks.md).
build_jobs=$((jobs + 1))
ctest_in_build() { (cd "$build" && ctest --output-on-failure -j "$test_jobs" --timeout 300 "$@"); }

cmake --build "$build" -j "$build_jobs" --target gpureap_tested_programs || exit 1

log=$build/rest-of-build.log
# The build gets a process group of its own (job control, for it alone), so that a stop
# reaches ninja: started in the background without one, it would ignore the terminal's
# Ctrl-C. Not a session of its own: Linux shares the CPU between sessions first
# (autogroups), so the build and the tests share it as processes of one session.
set -m
(
  if cmake --build "$build" -j "$build_jobs" >"$log" 2>&1; then exit 0; fi
  cat "$log" >&2
  echo "make test: the build failed (above, and in $log); the tests already running finish first" >&2
  exit 1
) &
builder=$!
set +m
trap 'kill -TERM -- "-$builder" 2>/dev/null; wait "$builder"; exit 130' INT
trap 'kill -TERM -- "-$builder" 2>/dev/null; wait "$builder"; exit 143' TERM
ctest_in_build -L "$first"
tests_first=$?
failed_first=$(cut -d: -f2- "$build/Testing/Temporary/LastTestsFailed.log" 2>/dev/null | tr '\n' ' ')
wait "$builder"
built=$?
trap - INT TERM
[ "$built" -eq 0 ] || exit 1
ctest_in_build -LE "^stress\$|$first"
tests_rest=$?
# The unit tests' summary is the last one printed: say what failed before it too.
if [ "$tests_first" -ne 0 ]; then
  echo "make test: failed beside the build (end-to-end, contrib and bench tests): ${failed_first:-see above}" >&2
fi
[ "$tests_first" -eq 0 ] && [ "$tests_rest" -eq 0 ]
