#!/usr/bin/env bash
# NVML from inside a PID namespace (issue 41, run 2; anchors-wave4 §0.1: since driver
# 535.113 the driver translates pids into the caller's namespace and drops the others).
# One holder outside, one inside `unshare -p -f --mount-proc`; from each side: what
# nvmlDeviceGetComputeRunningProcesses_v3 and the detail list return (pids, count, used
# memory) with the driver version, and `gpureap --no-agent status` (JSON and text).
#
#   bench/gpu/pidns_nvml.sh OUTDIR                      GPU machine (root): CUDA holders, 4 GiB each
#   bench/gpu/pidns_nvml.sh --sim GPUREAP_SIM OUTDIR    here: a simulated node, gpureap-sim hold
# GPUREAP_BIN names gpureap (default build/gpureap). Writes OUTDIR/pidns_nvml.json and
# OUTDIR/pidns-{inside,outside}-status.txt.
set -u
here=$(cd "$(dirname "$0")" && pwd)
sim=
if [ "${1:-}" = --sim ]; then sim=$2; shift 2; fi
out=${1:?usage: pidns_nvml.sh [--sim GPUREAP_SIM] OUTDIR}
mkdir -p "$out"
[ "$(id -u)" = 0 ] || { echo "pidns_nvml: needs root (unshare -p)"; exit 77; }
export W
W=$(mktemp -d /tmp/gpureap-pidns-XXXXXX)
export PY=${PYTHON:-python3} HERE=$here GPUREAP_BIN=${GPUREAP_BIN:-build/gpureap}
export GPUREAP_STATE_DIR=${GPUREAP_STATE_DIR:-$W/state}
mkdir -p "$GPUREAP_STATE_DIR"
if [ -n "$sim" ]; then
  eval "$("$sim" node --dir "$W/node" --gpus 1 --memory 141GiB --name 'NVIDIA H200')"
  export HOLD="$sim hold --dir $W/node --gpu 0 --bytes 4GiB"
else
  export HOLD="$PY $here/cuda_holder.py --device-gib 4"
fi

# Waits (up to 60 s) until file $1 is not empty.
until_written() {
  for _ in $(seq 600); do [ -s "$1" ] && return 0; sleep 0.1; done
  echo "pidns_nvml: nothing in $1 after 60 s" >&2; return 1
}
export -f until_written

$HOLD > "$W/outer.json" 2> "$W/outer.err" &
outer=$!
until_written "$W/outer.json"

# Inside: a holder of its own, then NVML and gpureap from there; it waits for the outside
# probes before it ends (its holder dies with the namespace's init).
unshare -p -f --mount-proc bash -c '
  $HOLD > "$W/inner.json" 2> "$W/inner.err" &
  until_written "$W/inner.json" || exit 1
  $PY "$HERE/nvml_ctypes.py" > "$W/inside-nvml.json" 2>&1
  "$GPUREAP_BIN" --no-agent --json status > "$W/inside-status.json" 2>&1
  "$GPUREAP_BIN" --no-agent --no-color status > "$W/inside-status.txt" 2>&1
  readlink /proc/self/ns/pid > "$W/inside.ready"
  until_written "$W/outside.done"
  kill $!; wait' &
ns=$!
until_written "$W/inside.ready"
$PY "$here/nvml_ctypes.py" > "$W/outside-nvml.json" 2>&1
"$GPUREAP_BIN" --no-agent --json status > "$W/outside-status.json" 2>&1
"$GPUREAP_BIN" --no-agent --no-color status > "$W/outside-status.txt" 2>&1
# The inner holder's host pid: the process of that namespace whose innermost pid it printed.
inner_host=$($PY - <<'EOF'
import glob, json, os
ns = open(os.environ["W"] + "/inside.ready").read().strip()
local = json.load(open(os.environ["W"] + "/inner.json"))["holders"][0]["pid"]
for status in glob.glob("/proc/[0-9]*/status"):
    pid = status.split("/")[2]
    try:
        nspid = next(l.split()[1:] for l in open(status) if l.startswith("NSpid:"))
        if os.readlink(f"/proc/{pid}/ns/pid") == ns and int(nspid[-1]) == local:
            print(pid)
    except (OSError, StopIteration):
        pass
EOF
)
echo finished > "$W/outside.done"
wait $ns
kill $outer 2>/dev/null; wait $outer 2>/dev/null
[ -n "$sim" ] && "$sim" cleanup --dir "$W/node" >/dev/null 2>&1

cp "$W/inside-status.txt" "$out/pidns-inside-status.txt"
cp "$W/outside-status.txt" "$out/pidns-outside-status.txt"
INNER_HOST=$inner_host SIM=$sim $PY - "$out/pidns_nvml.json" <<'EOF'
import json, os, sys
w = os.environ["W"]
def load(name):
    try:
        return json.load(open(os.path.join(w, name)))
    except (OSError, ValueError) as e:
        return {"unreadable": str(e), "text": open(os.path.join(w, name)).read()[-4000:]}
outer, inner = load("outer.json"), load("inner.json")
doc = {"simulated": bool(os.environ["SIM"]), "uname": os.uname().release,
       "holders": {"outside_pid": outer["holders"][0]["pid"],
                   "inside_pid_in_namespace": inner["holders"][0]["pid"],
                   "inside_pid_on_host": int(os.environ["INNER_HOST"] or 0) or None,
                   "bytes_each": outer["holders"][0]["bytes"]},
       "inside": {"nvml": load("inside-nvml.json"), "gpureap_status": load("inside-status.json")},
       "outside": {"nvml": load("outside-nvml.json"), "gpureap_status": load("outside-status.json")}}
doc["driver_version"] = doc["outside"]["nvml"].get("driver_version")
json.dump(doc, open(sys.argv[1], "w"), indent=1)
for side in ("inside", "outside"):
    n = doc[side]["nvml"]
    v3 = n.get("compute_running_processes_v3", {})
    print(f"{side}: driver {n.get('driver_version')}, v3 count {v3.get('count')}: {v3.get('processes')}, "
          f"used {n.get('gpu', {}).get('used')}")
print("holders:", doc["holders"])
EOF
rm -rf "$W"
