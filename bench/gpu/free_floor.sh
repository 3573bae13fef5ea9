#!/usr/bin/env bash
# free against the driver's floor, status against nvidia-smi, the GPU tests and the README's
# transcript (issue 41, run 3), each into OUTDIR:
#   free_floor.json      the case study, alternately: the floor (SIGKILL the workers, NVML
#                        polled every 2 ms until baseline) and `gpureap free --gpu 0 --yes`
#                        with NVML polled while it runs (its wall time over the memory's
#                        return in the same run, and over the floor); TRACE_REPS (2) more
#                        rounds of free under strace -f -ttt (free-*.strace, when strace is
#                        there; not in the medians): where free's time goes
#   status_latency.json  `gpureap status` answered by the agent, direct (--no-agent), and
#                        nvidia-smi, alternating (bench/status_latency.py --with-scan)
#   transcript.log       tests/gpu/transcript.py: SGLang-titled workers orphaned, status, free
#   gpu-tests.log        python3 -m unittest discover -s tests/gpu
#
#   bench/gpu/free_floor.sh OUTDIR                     GPU machine
#   bench/gpu/free_floor.sh --sim GPUREAP_SIM OUTDIR   here, on simulated nodes (the GPU
#                                                      tests skip; the transcript's workers
#                                                      hold no memory)
# GPUREAP_BIN names gpureap (default build/gpureap); FREE_REPS (5) and STATUS_REPS (100)
# the rounds; SECONDS_LEFT (600) bounds the whole script; FREE_ONLY=1 stops after status.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
sim=
if [ "${1:-}" = --sim ]; then sim=$2; shift 2; fi
out=${1:?usage: free_floor.sh [--sim GPUREAP_SIM] OUTDIR}
mkdir -p "$out"
export GPUREAP_BIN=${GPUREAP_BIN:-$root/build/gpureap}
if [ -z "${GPUREAP_STATE_DIR:-}" ]; then
  GPUREAP_STATE_DIR=$(mktemp -d /tmp/gpureap-free-floor-XXXXXX); export GPUREAP_STATE_DIR
fi
PY=${PYTHON:-python3}
end=$((SECONDS + ${SECONDS_LEFT:-600}))
left() { local l=$((end - SECONDS)); [ "$l" -gt "$1" ] && echo "$1" || echo $((l > 1 ? l : 1)); }

echo "== free against the floor"
timeout "$(left 200)" "$PY" "$here/release_floor.py" --cases free --gpureap "$GPUREAP_BIN" \
  --free-reps "${FREE_REPS:-5}" --trace-reps "${TRACE_REPS:-2}" --trace-dir "$out" \
  ${sim:+--sim "$sim"} --out "$out/free_floor.json"
echo "== status: through the agent, direct, nvidia-smi"
timeout "$(left 60)" "$PY" "$root/bench/status_latency.py" --gpureap "$GPUREAP_BIN" --with-scan \
  --reps "${STATUS_REPS:-100}" ${sim:+--sim "$sim"} --out "$out/status_latency.json" >/dev/null &&
  "$PY" -c 'import json, sys; d = json.load(open(sys.argv[1]))
print("median ms:", json.dumps({k: round(v["median_ms"], 2) for k, v in d["times"].items()}))' \
    "$out/status_latency.json"
if [ "${FREE_ONLY:-0}" = 1 ]; then echo "== transcript and GPU tests: skipped (FREE_ONLY=1)"; exit 0; fi
echo "== transcript (README)"
if [ -n "$sim" ]; then
  node=$(mktemp -d /tmp/gpureap-transcript-XXXXXX)
  (eval "$("$sim" node --dir "$node/n" --gpus 1 --memory 141GiB --name 'NVIDIA H200')" &&
    cd "$root/tests/gpu" && timeout "$(left 60)" "$PY" transcript.py --no-gpu) > "$out/transcript.log" 2>&1
  rc=$?
  "$sim" cleanup --dir "$node/n" >/dev/null 2>&1; rm -rf "$node"
else
  (cd "$root/tests/gpu" && timeout "$(left 90)" "$PY" transcript.py) > "$out/transcript.log" 2>&1
  rc=$?
fi
echo "transcript: exit $rc, $(wc -l < "$out/transcript.log") lines"
echo "== GPU tests"
(cd "$root" && timeout "$(left 240)" "$PY" -m unittest discover -s tests/gpu -p 'test_*.py' -v) \
  > "$out/gpu-tests.log" 2>&1
echo "GPU tests: exit $?; $(grep -E '^(Ran|OK|FAILED)' "$out/gpu-tests.log" | tr '\n' ' ')"
