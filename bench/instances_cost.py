#!/usr/bin/env python3
"""The cost of server instances on `status` (issue 24): the whole `gpureap --no-agent
status --json` process, timed with the build before instances (OLD) and this one (NEW),
alternating in the same run, on the same GPU scene: a server whose 4 SGLang-titled torch
workers were orphaned by its SIGKILL (so the instance's launcher is gone and its ports are
looked up), and a live server with 2 titled workers.

  python3 bench/instances_cost.py OLD_BIN NEW_BIN OUT.json [REPS]
"""
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "gpu"))
from gpu_scenario import Scenario, have_gpu  # noqa: E402


def timed(binary):
    t0 = time.perf_counter()
    r = subprocess.run([binary, "--no-agent", "--json", "status"], capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"{binary}: exit {r.returncode}: {r.stderr}")
    return dt, json.loads(r.stdout)


def main():
    old, new, out = sys.argv[1], sys.argv[2], sys.argv[3]
    reps = int(sys.argv[4]) if len(sys.argv) > 4 else 30
    if not have_gpu():
        print("no GPU: skipped")
        return
    with Scenario() as s:
        crashed, _ = s.titled_orphaned_workers(n=4, gib=8)
        for b in (old, new):  # warm the page cache and the driver
            timed(b)
        times = {"old": [], "new": []}
        doc = None
        for _ in range(reps):
            for name, b in (("old", old), ("new", new)):
                dt, d = timed(b)
                times[name].append(dt)
                if name == "new":
                    doc = d
        med = {k: statistics.median(v) for k, v in times.items()}
        result = {
            "reps": reps,
            "median_seconds": med,
            "p90_seconds": {k: sorted(v)[int(0.9 * len(v)) - 1] for k, v in times.items()},
            "ratio_new_over_old": med["new"] / med["old"],
            "instances": [{k: i[k] for k in ("key", "engine", "orphaned", "listening_ports")}
                          for i in doc["instances"]],
            "crashed_server": crashed,
        }
    print(json.dumps(result, indent=1))
    with open(out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
