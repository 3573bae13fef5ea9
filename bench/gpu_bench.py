#!/usr/bin/env python3
"""GPU benchmarks, run on the GPU machine (see docs/benchmarks.md).

status: the whole `gpureap status --json` process against `nvidia-smi
--query-compute-apps` plus `fuser -v /dev/nvidia*`, alternating, same run.
free: on the case-study scenario (4 orphaned workers x 20 GiB), per repetition
one of: the floor (SIGKILL the workers directly, poll NVML until back at
baseline), the case study's own procedure (kill -9; sleep 3; fuser -k; sleep 2;
nvidia-smi), and `gpureap free --gpu 0 --yes` until it exits with memory
verified free. Prints medians and ratios; writes JSON to argv[1] if given.
"""
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "gpu"))
from gpu_scenario import GPUREAP, Scenario  # noqa: E402

REPS = int(os.environ.get("REPS", "10"))

# This process must not open the GPU itself: the case study's `fuser -k
# /dev/nvidia*` kills every process that has it open, the benchmark included
# (it did, in the first run). NVML is read in short-lived subprocesses.
FLOOR = r"""
import os, signal, sys, time, pynvml
pynvml.nvmlInit(); h = pynvml.nvmlDeviceGetHandleByIndex(0)
limit = int(sys.argv[1]); fds = [os.pidfd_open(int(p)) for p in sys.argv[2:]]
t = time.perf_counter()
for fd in fds: signal.pidfd_send_signal(fd, signal.SIGKILL)
while pynvml.nvmlDeviceGetMemoryInfo(h).used > limit: time.sleep(0.002)
print(time.perf_counter() - t)
"""


def smi_bytes(field):
    out = subprocess.run(["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader,nounits", "-i", "0"],
                         capture_output=True, text=True).stdout
    return int(out) << 20


def used():
    return smi_bytes("memory.used")


def timed(argv, shell=False):
    t = time.perf_counter()
    r = subprocess.run(argv, shell=shell, capture_output=True, text=True)
    return time.perf_counter() - t, r


def bench_status(results):
    with Scenario() as s:
        s.orphaned_workers(n=4, gib=20)
        g, base = [], []
        for _ in range(20):
            dt, r = timed([GPUREAP, "status", "--json"])
            assert r.returncode == 0, r.stderr
            g.append(dt)
            dt, _ = timed("nvidia-smi --query-compute-apps=pid,used_memory --format=csv; fuser -v /dev/nvidia*",
                          shell=True)
            base.append(dt)
            dt_smi, _ = timed(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv"])
            results.setdefault("nvidia_smi_alone_s", []).append(dt_smi)
        results["status_gpureap_s"] = g
        results["status_smi_plus_fuser_s"] = base


def floor_once(baseline, tol):
    with Scenario() as s:
        workers = s.orphaned_workers(n=4, gib=20)
        r = subprocess.run([sys.executable, "-c", FLOOR, str(baseline + tol), *map(str, workers)],
                           capture_output=True, text=True, timeout=60)
        return float(r.stdout.strip()), True


def case_procedure_once(baseline, tol):
    with Scenario() as s:
        workers = s.orphaned_workers(n=4, gib=20)
        cmd = ("kill -9 {} 2>/dev/null; sleep 3; fuser -k /dev/nvidia* 2>/dev/null; sleep 2; "
               "nvidia-smi --query-gpu=index,memory.used --format=csv,noheader").format(" ".join(map(str, workers)))
        dt, _ = timed(cmd, shell=True)
        return dt, used() <= baseline + tol


def gpureap_once():
    with Scenario() as s:
        s.orphaned_workers(n=4, gib=20)
        dt, r = timed([GPUREAP, "free", "--gpu", "0", "--yes", "--json"])
        ok = r.returncode == 0 and json.loads(r.stdout)["gpus"][0]["freed"]
        return dt, ok


def main():
    results = {"reps": REPS}
    baseline = used()
    tol = max(64 << 20, smi_bytes("memory.total") // 200)
    results["baseline_bytes"] = baseline
    bench_status(results)
    methods = (("floor", lambda: floor_once(baseline, tol)),
               ("case_procedure", lambda: case_procedure_once(baseline, tol)),
               ("gpureap_free", gpureap_once))
    for name, _ in methods:
        results[name + "_s"] = []
        results[name + "_freed"] = []
    # Alternate the three methods so drift affects them alike.
    for _ in range(REPS):
        for name, fn in methods:
            dt, ok = fn()
            results[name + "_s"].append(dt)
            results[name + "_freed"].append(ok)
    med = {k: statistics.median(v) for k, v in results.items() if k.endswith("_s")}
    results["median"] = med
    results["ratios"] = {
        "status_gpureap_vs_smi_plus_fuser": med["status_gpureap_s"] / med["status_smi_plus_fuser_s"],
        "status_gpureap_vs_nvidia_smi_alone": med["status_gpureap_s"] / med["nvidia_smi_alone_s"],
        "free_gpureap_vs_floor": med["gpureap_free_s"] / med["floor_s"],
        "case_procedure_vs_gpureap": med["case_procedure_s"] / med["gpureap_free_s"],
    }
    print(json.dumps({"median": med, "ratios": results["ratios"],
                      "gpureap_freed_every_time": all(results["gpureap_free_freed"]),
                      "case_procedure_freed": results["case_procedure_freed"]}, indent=2))
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
