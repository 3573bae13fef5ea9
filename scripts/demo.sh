#!/usr/bin/env bash
# The first case study, replayed on a simulated 8-GPU node (no GPU needed):
# an inference server with 8 tensor-parallel workers is SIGKILLed, its workers
# are orphaned and keep their memory; `gpureap status` shows exactly that, and
# `gpureap free --orphans --instance KEY` (what status suggests) reclaims it. "GPU 3 of
# the second box" keeps memory the driver never released, which status classifies as
# driver-held. Then the agent watches a second crash, and `gpureap log` shows every signal.
set -euo pipefail
build=${1:-build}
bin="$build/gpureap"
sim="$build/sim/gpureap-sim"
node=$(mktemp -d /tmp/gpureap-demo.XXXXXX)

cleanup() { "$sim" cleanup --dir "$node" >/dev/null 2>&1 || true; rm -rf "$node"; }
trap cleanup EXIT

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "A simulated node: 8 GPUs of 96 GiB"
eval "$("$sim" node --dir "$node" --gpus 8 --memory 96GiB --name "NVIDIA RTX PRO 6000 Blackwell")"
export GPUREAP_STATE_DIR="$node/state" GPUREAP_NVIDIA_SMI="$node/bin/nvidia-smi"
mkdir -p "$GPUREAP_STATE_DIR"

say "An SGLang server, Kimi-K2.5 at TP 8: 8 scheduler processes, ~90 GiB each"
server=$("$sim" hold --dir "$node" --gpu 0 --bytes 90GiB --children 8 --detach --listen \
  --title 'sglang::scheduler_TP{k}' \
  --server-title 'python3 -m sglang.launch_server --model-path moonshotai/Kimi-K2.5 --tp 8 --mem-fraction-static 0.85 --port 30000')
leader=$(echo "$server" | python3 -c 'import json,sys; print(json.load(sys.stdin)["leader"])')
echo "server pid $leader"
"$bin" status | sed -n '/^Instances:/,$p'

say "The operator restarts it the hard way: kill -9 $leader (the server only)"
kill -9 "$leader"
sleep 0.2
"$sim" nvidia-smi --query-gpu=index,memory.used --format=csv,noheader

say "gpureap status: who holds each GPU, and why (the last line is what to do)"
"$bin" status

say "gpureap free --orphans --instance $leader --yes   (what status suggests: that server's orphans only)"
"$bin" free --orphans --instance "$leader" --yes --grace 2s || true

say "Second box, GPU 3: memory still used after its process died (--stuck): releasing, or driver-held?"
stuck=$("$sim" hold --dir "$node" --gpu 3 --bytes 92GiB --stuck --detach)
kill -9 "$(echo "$stuck" | python3 -c 'import json,sys; print(json.load(sys.stdin)["holders"][0]["pid"])')"
sleep 0.2
set +e
"$bin" status --gpu 3
set -e

say "The agent: gpureap watch sees the next crash the moment it happens"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
events="$node/watch-events.txt"
"$bin" watch --listen "127.0.0.1:$port" --tick 250ms >"$events" 2>&1 &
agent=$!
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$port/metrics" >/dev/null && break; sleep 0.1; done
server=$("$sim" hold --dir "$node" --gpu 4 --bytes 40GiB --children 4 --detach \
  --title 'VLLM::Worker_TP{k}' \
  --server-title 'vllm serve Qwen/Qwen3-8B --tensor-parallel-size 4 --port 8001')
leader=$(echo "$server" | python3 -c 'import json,sys; print(json.load(sys.stdin)["leader"])')
sleep 0.5
echo "kill -9 $leader (a vLLM server this time)"
kill -9 "$leader"
sleep 0.5
cat "$events"
echo "curl http://127.0.0.1:$port/metrics | grep orphaned_bytes"
curl -s "http://127.0.0.1:$port/metrics" | grep '^gpureap_gpu_memory_orphaned_bytes' | grep -v ' 0$' || true
echo "gpureap free --orphans --instance $leader --yes"
"$bin" free --orphans --instance "$leader" --yes --grace 2s >/dev/null || true
sleep 0.5
echo "after gpureap free, the agent said:"
tail -n 4 "$events"
"$bin" status --gpu 4
kill -TERM "$agent"; wait "$agent" || true
echo "(gpureap status above was answered by the agent: instant)"
echo "gpureap log: every signal, with what the target was (VERDICT) and its server (INSTANCE)"
"$bin" log | cut -c1-200

say "Done. Try it yourself:"
echo "  eval \"\$($sim node --dir /tmp/node --gpus 8 --memory 96GiB)\""
echo "  export GPUREAP_STATE_DIR=/tmp/node/state; mkdir -p \$GPUREAP_STATE_DIR"
echo "  $sim hold --dir /tmp/node --gpu 0 --bytes 20GiB --children 2 --orphan --detach"
echo "  $bin status"
