#!/usr/bin/env bash
# Everything that needs a real GPU, in one go (the GPU machine has no apt and no
# internet; scripts/vendor-headers.sh fills .deps/include beforehand here):
# build, the GPU tests, the GPU benchmarks. Logs go to $OUT (or ./device-out).
set -u
out=${OUT:-device-out}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
{
  echo "== machine"; nvidia-smi -L; nvidia-smi --query-gpu=index,memory.used,memory.total,persistence_mode --format=csv
  uname -r; command -v fuser || echo "fuser: not installed"
  echo "== build"
  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DGPUREAP_BUILD_TESTS=OFF >/dev/null &&
    cmake --build build-gpu -j16 --target gpureap gpureap-sim sim_nvml 2>&1 | tail -3
} 2>&1 | tee "$out/build.log"
export GPUREAP_BIN=$PWD/build-gpu/gpureap GPUREAP_STATE_DIR=/tmp/gpureap-state
echo "== status on the idle GPU (records the baseline)" | tee "$out/status.log"
"$GPUREAP_BIN" status 2>&1 | tee -a "$out/status.log"
"$GPUREAP_BIN" --json status > "$out/status-idle.json" 2>&1
stage=${1:-all}
if [ "$stage" = all ] || [ "$stage" = tests ]; then
  echo "== transcript" | tee "$out/transcript.log"
  (cd tests/gpu && timeout 120 python3 transcript.py) 2>&1 | tee -a "$out/transcript.log"
  echo "== GPU tests" | tee "$out/gpu-tests.log"
  timeout 300 python3 -m unittest discover -s tests/gpu -p 'test_*.py' -v 2>&1 | tee -a "$out/gpu-tests.log"
fi
if [ "$stage" = pidns ]; then
  (cd tests/gpu && timeout 120 python3 -m unittest -v test_status_free -k namespace) 2>&1 | tee "$out/gpu-pidns.log"
  echo "== benchmarks" | tee "$out/bench.log"
  REPS=${REPS:-10} timeout 400 python3 bench/gpu_bench.py "$out/gpu_bench.json" 2>&1 | tee -a "$out/bench.log"
fi
if [ "$stage" = all ] || [ "$stage" = bench ]; then
  echo "== benchmarks" | tee "$out/bench.log"
  REPS=${REPS:-10} timeout 400 python3 bench/gpu_bench.py "$out/gpu_bench.json" 2>&1 | tee -a "$out/bench.log"
  timeout 150 python3 bench/run_teardown_gpu.py --rounds 3 2>&1 | tee -a "$out/bench.log"
fi
if [ "$stage" = all ] || [ "$stage" = agent ]; then
  # gpureap watch on the GPU (issue 11): its GPU test alone when the tests stage did not
  # run it, then its benchmark (event latency, status via the agent vs nvidia-smi).
  if [ "$stage" = agent ]; then
    echo "== watch GPU test" | tee "$out/watch-test.log"
    (cd tests/gpu && timeout 120 python3 -m unittest -v test_watch) 2>&1 | tee -a "$out/watch-test.log"
  fi
  echo "== agent benchmark" | tee "$out/agent-bench.log"
  timeout 200 python3 bench/agent_bench.py gpu --gpureap "$GPUREAP_BIN" --reps 30 --event-reps 5 \
    --out "$out/agent_bench_gpu.json" 2>&1 | tee -a "$out/agent-bench.log"
fi
if [ "$stage" = portable ]; then
  # The binary built here by `make portable` (carried as build-portable/): the GPU tests
  # with it, on a machine it was not built on (issue 13).
  echo "== portable binary" | tee "$out/portable.log"
  ldd build-portable/gpureap 2>&1 | tee -a "$out/portable.log"
  build-portable/gpureap --version 2>&1 | tee -a "$out/portable.log"
  GPUREAP_BIN=$PWD/build-portable/gpureap timeout 300 \
    python3 -m unittest discover -s tests/gpu -p 'test_*.py' -v 2>&1 | tee -a "$out/portable.log"
fi
echo "== done"
