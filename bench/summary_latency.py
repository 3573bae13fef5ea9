#!/usr/bin/env python3
"""`gpureap status --summary` latency (issue 27): answered by a running agent, by a direct
scan, and nvidia-smi's own query for comparison, alternating in the same run.

  python3 bench/summary_latency.py GPUREAP_BIN OUT.json [REPS]
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def timed(argv, env):
    t0 = time.perf_counter()
    r = subprocess.run(argv, capture_output=True, text=True, env=env)
    return time.perf_counter() - t0, r


def start_agent(gpureap, env):
    """`gpureap watch --no-listen` with env's GPUREAP_STATE_DIR, once its socket answers
    and its first full scan is done. The caller terminates it."""
    agent = subprocess.Popen([gpureap, "watch", "--no-listen"], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sock = os.path.join(env["GPUREAP_STATE_DIR"], "agent.sock")
    deadline = time.time() + 30
    while not os.path.exists(sock) and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)  # the first full scan
    return agent


def main():
    gpureap, out = sys.argv[1], sys.argv[2]
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 30
    state = tempfile.mkdtemp(prefix="gpureap-summary-")
    env = dict(os.environ, GPUREAP_STATE_DIR=state)
    agent = start_agent(gpureap, env)
    try:
        times = {"agent": [], "scan": [], "nvidia_smi": []}
        lines = {}
        for _ in range(reps):
            dt, r = timed([gpureap, "status", "--summary"], env)
            times["agent"].append(dt)
            lines["agent"] = r.stdout.strip()
            dt, r = timed([gpureap, "--no-agent", "status", "--summary"], env)
            times["scan"].append(dt)
            lines["scan"] = r.stdout.strip()
            dt, _ = timed(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader"], env)
            times["nvidia_smi"].append(dt)
    finally:
        agent.terminate()
        agent.wait(timeout=10)
    med = {k: statistics.median(v) for k, v in times.items()}
    result = {"reps": reps, "median_seconds": med, "lines": lines,
              "agent_over_nvidia_smi": med["agent"] / med["nvidia_smi"]}
    print(json.dumps(result, indent=1))
    with open(out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
