#!/usr/bin/env bash
# Issues 41 and 54 in one device call (docs/benchmarks.md, "The GPU machine, wave 4"): the release
# build, then
#   1. the release floor      bench/gpu/release_floor.py --cases device,pinned
#   2. NVML in a PID namespace bench/gpu/pidns_nvml.sh
#   3. what NVML costs a command bench/gpu/nvml_costs.py (init, a reading, the helper's exit)
#   4. a look inside a killed holder's exit  bench/gpu/exit_window.py
#   5. free against the floor, status, the README's transcript, the GPU tests
#                             bench/gpu/free_floor.sh
# each step bounded so that the whole ends within WAVE5_SECONDS (540).
#
#   bash bench/gpu/wave5.sh              GPU machine, from the repository root (.deps carried:
#                                        scripts/vendor-headers.sh fills it here)
#   WAVE5_STEPS="build free_floor" bash bench/gpu/wave5.sh   only those steps
#   bash bench/gpu/wave5.sh --sim BUILD  here: the same steps on simulated nodes, BUILD's
#                                        gpureap and sim/gpureap-sim (no build)
# Writes to $OUT (default ./device-out): wave5.log (this output), summary.json, and
# wave5-h100.tar.gz or wave5-h200.tar.gz by the card (wave5-sim.tar.gz) holding
# bench/results/wave5-<card>/ (-sim/): untar it
# at the repository root. The archive is rewritten after every step, so a run stopped at
# the device's limit still brings back the steps it finished. The device tool brings back
# at most 8 files no more than 2 folders down, hence the archive.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1
sim_build=
if [ "${1:-}" = --sim ]; then sim_build=${2:-build}; fi
case $sim_build in /* | "") ;; *) sim_build=$root/$sim_build ;; esac
# Named by the card: the device tool lends an H100 or an H200.
case $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1) in
  *H100*) name=wave5-h100 ;; *H200*) name=wave5-h200 ;; *) name=wave5-gpu ;;
esac
[ -n "$sim_build" ] && name=wave5-sim
out=${OUT:-device-out}
mkdir -p "$out"
stage=$(mktemp -d /tmp/gpureap-wave5-XXXXXX)
# What it measured is saved into $out after every step (save); the stage itself goes.
trap 'rm -rf "$stage"' EXIT
res=$stage/bench/results/$name
mkdir -p "$res"
exec > >(tee -a "$out/wave5.log") 2>&1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export GPUREAP_STATE_DIR=$stage/state
mkdir -p "$GPUREAP_STATE_DIR"
end=$((SECONDS + ${WAVE5_SECONDS:-540}))
left() { local l=$((end - SECONDS)); [ "$l" -gt "$1" ] && echo "$1" || echo $((l > 1 ? l : 1)); }
save() { tar czf "$out/$name.tar.gz" -C "$stage" bench; }
step() {  # step LABEL SECONDS COMMAND...: bounded; its exit status and time go to steps.tsv
  local label=$1 limit t rc; limit=$(left "$2"); shift 2
  # WAVE5_STEPS="build free_floor" runs only those (default: every step).
  case " ${WAVE5_STEPS:-$label} " in *" $label "*) ;; *) echo "== $label: skipped (WAVE5_STEPS)"; return 0 ;; esac
  echo "== $label (at most $limit s)"
  t=$SECONDS
  SECONDS_LEFT=$limit timeout "$limit" "$@"
  rc=$?
  printf '%s\t%s\t%s\n' "$label" "$rc" "$((SECONDS - t))" | tee -a "$res/steps.tsv"
  save
}

echo "== machine ($(date -u +%FT%TZ), $(git rev-parse --short HEAD 2>/dev/null || echo 'no git'))"
if [ -z "$sim_build" ]; then
  nvidia-smi -L
  nvidia-smi --query-gpu=index,name,driver_version,memory.used,memory.total,persistence_mode --format=csv
  uname -r; nproc; grep -E 'MemTotal|MemAvailable' /proc/meminfo
  echo "profilers: $(command -v strace perf ltrace gdb | tr '\n' ' ')"
  step build 240 bash -c 'set -o pipefail; gen=; command -v ninja >/dev/null && gen="-G Ninja"
    cmake -S . -B build-gpu $gen -DCMAKE_BUILD_TYPE=Release -DGPUREAP_BUILD_TESTS=OFF >/dev/null &&
      cmake --build build-gpu -j "$(nproc)" --target gpureap 2>&1 | tail -3'
  export GPUREAP_BIN=$root/build-gpu/gpureap
  sim_args=()
else
  export GPUREAP_BIN=$sim_build/gpureap
  sim_args=(--sim "$sim_build/sim/gpureap-sim")
fi
"$GPUREAP_BIN" --version > "$res/version.txt" 2>&1
{ nvidia-smi -q 2>/dev/null | head -40; uname -a; } > "$res/machine.txt"

step release_floor 240 python3 bench/gpu/release_floor.py --cases device,pinned --budget 170 \
  --reps "${RELEASE_REPS:-3}" \
  ${sim_args[@]+"${sim_args[@]}"} --out "$res/release_floor.json"
step pidns 60 bash bench/gpu/pidns_nvml.sh ${sim_args[@]+"${sim_args[@]}"} "$res"
if [ -z "$sim_build" ]; then  # the driver's own costs: nothing to learn from the simulator
  step nvml_costs 60 python3 bench/gpu/nvml_costs.py --reps 10 --out "$res/nvml_costs.json"
  step exit_window 150 python3 bench/gpu/exit_window.py --gpureap "$GPUREAP_BIN" \
    --out "$res/exit_window.json"
fi
step free_floor 600 bash bench/gpu/free_floor.sh ${sim_args[@]+"${sim_args[@]}"} "$res"

python3 - "$res" "$out/summary.json" <<'EOF'
import json, os, sys
res, dest = sys.argv[1:]
def load(name):
    try:
        return json.load(open(os.path.join(res, name)))
    except (OSError, ValueError):
        return None
doc = {"steps": [l.split("\t") for l in open(os.path.join(res, "steps.tsv")).read().split("\n") if l]}
rf, ff, st, ns = (load(n) for n in ("release_floor.json", "free_floor.json", "status_latency.json",
                                    "pidns_nvml.json"))
doc["release_floor"] = rf and {"driver": rf["driver_version"], **rf["summary"], "skipped": rf["skipped"]}
doc["free"] = ff and ff["summary"].get("free")
doc["status_median_ms"] = st and {k: v["median_ms"] for k, v in st["times"].items()}
if ns:
    inside = ns["inside"]["nvml"].get("compute_running_processes_v3")
    doc["pidns"] = {"driver": ns["driver_version"], "holders": ns["holders"], "inside_v3": inside,
                    "outside_v3": ns["outside"]["nvml"].get("compute_running_processes_v3")}
json.dump(doc, open(dest, "w"), indent=1)
print(json.dumps(doc, indent=1))
EOF
save
echo "== done: $out/$name.tar.gz, $out/summary.json, $out/wave5.log"
