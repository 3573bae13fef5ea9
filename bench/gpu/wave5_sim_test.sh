#!/usr/bin/env bash
# ctest bench_gpu_wave5_sim: issue 41's device call (bench/gpu/wave5.sh) run here against
# simulated nodes with BUILD's gpureap and gpureap-sim, then what it wrote is checked, so
# the one GPU run it prepares does not fail on a script error.
#   bash bench/gpu/wave5_sim_test.sh BUILD
set -u
build=${1:?usage: wave5_sim_test.sh BUILD}
out=$(mktemp -d /tmp/gpureap-wave5-test-XXXXXX)
trap 'rm -rf "$out"' EXIT
if ! OUT=$out RELEASE_REPS=1 FREE_REPS=1 TRACE_REPS=1 STATUS_REPS=3 WAVE5_SECONDS=300 \
    bash "$(dirname "$0")/wave5.sh" --sim "$build" > "$out/console" 2>&1; then
  cat "$out/console"; exit 1
fi
tar xzf "$out/wave5-sim.tar.gz" -C "$out" || exit 1
python3 - "$out/bench/results/wave5-sim" "$out/summary.json" <<'EOF' || { cat "$out/console"; exit 1; }
import json, os, sys
res, summary = sys.argv[1:]
load = lambda name: json.load(open(os.path.join(res, name)))  # noqa: E731
steps = {l.split("\t")[0]: int(l.split("\t")[1]) for l in open(os.path.join(res, "steps.tsv")) if l.strip()}
root = os.geteuid() == 0
assert steps == {"release_floor": 0, "pidns": 0 if root else 77, "free_floor": 0}, steps

rf = load("release_floor.json")
assert rf["simulated"] and not rf["skipped"], rf["skipped"]
assert [c["case"] for c in rf["cases"]] == ["device-10", "device-50", "device-120",
    "pinned-register-20", "pinned-hostalloc-20", "pinned-register-50", "pinned-hostalloc-50"]
for c in rf["cases"]:
    assert "error" not in c and c["listed_before_kill"] and not c["timed_out"], c
    assert c["used_held"] - c["baseline"] == c["device_gib"] << 30, c
    assert "VmPin" in next(iter(c["proc_status"].values())), c
    assert c["exited_s"] <= c["baseline_s"] and c["unlisted_s"] <= c["baseline_s"], c
    if c["pinned_gib"]:  # the simulator releases these late: the phases must come apart
        assert c["baseline_s"] > c["unlisted_s"] + 0.1, c

ff = load("free_floor.json")["free"]
import shutil
traced = ["free-traced"] if shutil.which("strace") else []
assert [r["method"] for r in ff] == ["floor", "free"] + traced, ff
assert ff[1]["exit"] == 0 and all(g["freed"] for g in ff[1]["gpus"]), ff[1]
assert [s["step"] for s in ff[1]["free_steps"]][-1] == "done", ff[1]
for r in ff[2:]:  # a traced round: free under strace, its trace beside the results
    assert r["exit"] == 0 and os.path.getsize(os.path.join(res, os.path.basename(r["strace"]))) > 0, r
assert ff[1]["baseline_s"] <= ff[1]["command_s"] and ff[0]["baseline_s"] is not None, ff

if root:  # the driver's rule since 535.113: only the namespace's own holder, by its own pid
    ns = load("pidns_nvml.json")
    inside = ns["inside"]["nvml"]["compute_running_processes_v3"]["processes"]
    assert [p["pid"] for p in inside] == [ns["holders"]["inside_pid_in_namespace"]], ns
    assert ns["holders"]["inside_pid_on_host"], ns["holders"]
    outside = [p["pid"] for p in ns["outside"]["nvml"]["compute_running_processes_v3"]["processes"]]
    assert ns["holders"]["outside_pid"] in outside, ns
    assert ns["inside"]["gpureap_status"]["gpus"][0]["holders"], ns["inside"]["gpureap_status"]

st = load("status_latency.json")["times"]
assert {"status", "--no-agent status", "nvidia-smi"} <= set(st), st
transcript = open(os.path.join(res, "transcript.log")).read()
for text in ("sglang::scheduler_TP0", "(scheduler TP0..TP3)", "free --orphans --instance", "freed in"):
    assert text in transcript, (text, transcript)
assert "OK (skipped=" in open(os.path.join(res, "gpu-tests.log")).read()
assert json.load(open(summary))["free"]["freed_every_time"]
print("wave5 --sim: every step ran and wrote what it should")
EOF
