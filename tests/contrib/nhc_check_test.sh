#!/bin/bash
# contrib/nhc/gpureap.nhc under bash as LBNL NHC runs it (issue 27, docs/fleet-checks.md):
# sourced, its check called with NHC's `die` replaced by a stand-in that records the
# reason (mej/nhc@9c4a38c: a check calls `die 1 "message"` and returns 1; NHC's
# node-mark-offline then drains with "NHC: message", and node-mark-online resumes only
# "NHC:" reasons). On simulated nodes: clean, orphans, --gpu, NVML down (fails, or passes
# with -u), hung within -t, a usage error, a missing binary, bad options.
# Usage: nhc_check_test.sh SOURCE_DIR GPUREAP_BINARY GPUREAP_SIM_BINARY
set -u
src=$1
gpureap=$2
sim=$3
tmp=$(mktemp -d)
. "$src/tests/contrib/sim_nodes.sh"
trap 'sim_cleanup_all; rm -rf "$tmp"' EXIT

failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# NHC's globals and its die(), as far as a check sees them.
# shellcheck disable=SC2034  # read by the sourced check
TIMEOUT=30
die() {
  DIED_RET=$1
  shift
  DIED_REASON="NHC: $*"
}
# shellcheck source=/dev/null
. "$src/contrib/nhc/gpureap.nhc"
GPUREAP=$gpureap

# expect NAME WANT_RETURN WANT_REASON [check_gpureap_clean options]: runs the check on
# node NAME; WANT_REASON "" means die must not be called.
expect() {
  local name=$1 want_ret=$2 want_reason=$3 ret started
  shift 3
  DIED_RET="" DIED_REASON=""
  started=$SECONDS
  # NHC runs checks in its own shell; the node's environment stands for the host's.
  eval "export $(sim_env "$name")"
  check_gpureap_clean "$@"
  ret=$?
  elapsed=$((SECONDS - started))
  echo "check_gpureap_clean $* on $name: return $ret, ${DIED_REASON:-no die} (${elapsed}s)"
  [ "$ret" -eq "$want_ret" ] || fail "$name $*: returned $ret, want $want_ret"
  if [ -z "$want_reason" ]; then
    [ -z "$DIED_RET" ] || fail "$name $*: die called: $DIED_REASON"
  else
    [ "$DIED_RET" = 1 ] || fail "$name $*: die not called with 1 (got '$DIED_RET')"
    [ "$DIED_REASON" = "$want_reason" ] || fail "$name $*: reason '$DIED_REASON', want '$want_reason'"
  fi
  case "$DIED_REASON" in "" | NHC:*) ;; *) fail "reason does not start with NHC:" ;; esac
}

sim_node clean --gpus 4 --memory 80GiB
sim_node leaky --gpus 4 --memory 80GiB
sim_orphans leaky 2
sim_node broken --gpus 4 --memory 80GiB
"$sim" mode --dir "$tmp/broken" init_fail >/dev/null
sim_node hung --gpus 4 --memory 80GiB
"$sim" mode --dir "$tmp/hung" hang_init >/dev/null

expect clean 0 ""
expect leaky 1 "NHC: gpureap: problem: orphaned memory on GPU 2,3"
expect leaky 0 "" -g 0,1
expect leaky 1 "NHC: gpureap: problem: orphaned memory on GPU 2,3" -t 3 -g 1-3
expect broken 1 "NHC: gpureap: unknown: NVML unusable (init_failed)"
expect broken 0 "" -u
expect hung 1 "NHC: gpureap: unknown: NVML unusable (hung)" -t 2
# The hang never ends: the line above came from the deadline. Bounded well under NHC's
# 30 s (a bound of 2 s was one a loaded machine could break; issue 48).
[ "$elapsed" -le 20 ] || fail "-t 2 took ${elapsed}s"
expect clean 1 "NHC: check_gpureap_clean:  2 returned by \"$gpureap status --check --deadline 5s --gpu 9\"." -g 9
expect clean 1 "NHC: check_gpureap_clean:  -t 60 exceeds NHC timeout 30" -t 60
expect clean 1 "NHC: check_gpureap_clean:  -t takes whole seconds, not \"2s\"" -t 2s
expect clean 1 "NHC: check_gpureap_clean:  Invalid option:  -x" -x
expect clean 1 "NHC: check_gpureap_clean:  Option -g requires an argument." -g
# shellcheck disable=SC2034  # read by the sourced check
GPUREAP=$tmp/no-such-gpureap
expect clean 1 "NHC: check_gpureap_clean:  $tmp/no-such-gpureap not found or not runnable."

if [ "$failures" -ne 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "NHC check: every case as documented"
