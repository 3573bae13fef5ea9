#!/usr/bin/env bash
# docs/benchmarks.md, "The agent under a descriptor flood and during a reap": scrape latency
# while the agent reaps a TERM-ignoring orphan (its grace, then SIGKILL), on a private
# simulated node. B=<build dir> (default build). Every process it starts is killed by pid.
# Scrape and status latency during the agent's reap of a TERM-ignoring orphan.
set -u
B=${B:-build}; G=$B/gpureap; S=$B/sim/gpureap-sim
W=$(mktemp -d /tmp/gpureap-lat.XXXXXX); chmod 755 $W; N=$W/node
eval "$("$S" node --dir "$N" --gpus 4 --memory 80GiB 2>/dev/null)"
export GPUREAP_NVML_LIBRARY=$B/sim/libnvidia-ml.so.1 GPUREAP_STATE_DIR=$W/state
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$G" watch --listen 127.0.0.1:$PORT --tick 200ms --reap-orphans-after 1s > $W/w.log 2>&1 & AG=$!
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$PORT/metrics" >/dev/null && break; sleep 0.1; done
"$S" hold --dir "$N" --gpu 2 --bytes 4GiB --children 1 --orphan --ignore-term --detach --title 'VLLM::Worker_TP0' > $W/h.json
PIDS=$(python3 -c 'import json,sys; print(" ".join(str(p) for p in json.load(open(sys.argv[1]))["pids"]))' $W/h.json)
# Scrape every 100 ms for 20 s; record each one's latency.
python3 - "$PORT" "$W/w.log" <<'PY'
import sys, time, urllib.request
port, log = sys.argv[1], sys.argv[2]
lat = []; end = time.time() + 20; during = []
while time.time() < end:
    t = time.time()
    try: body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    except Exception as e: body = ""
    d = time.time() - t; lat.append(d)
    if "gpureap_reap_in_progress 1" in body: during.append(d)
    if "reaped 1 holder" in open(log).read() or "reaping failed" in open(log).read(): break
    time.sleep(0.1)
print("scrapes: %d, slowest %.3f s, median %.3f s; answered during the reap: %d (slowest %.3f s)" % (
    len(lat), max(lat), sorted(lat)[len(lat)//2], len(during), max(during) if during else 0))
PY
cut -c27-220 $W/w.log
kill $AG; wait $AG 2>/dev/null; for p in $PIDS; do kill -9 $p 2>/dev/null; done
"$S" cleanup --dir "$N" >/dev/null 2>&1; rm -rf $W
