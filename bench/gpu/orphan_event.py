#!/usr/bin/env python3
"""A server's death to the agent's `orphaned_memory` line, on the GPU machine: two
builds' agents (--gpureap and --baseline), alternating in one run (docs/benchmarks.md,
"The announcement names every orphan").

  together:  4 torch workers hold GPU 0 for 1.5 s (the agent has ticked since), then
             the server is SIGKILLed: the time to the event, and how many it names.
  staggered: worker 1 takes GPU 0 1.5 s after worker 0 (its torch import and CUDA
             context), and the server SIGKILLs itself the moment it has: the agent's
             last tick knew worker 0 only. How many of the 2 the event names, and when.

Only processes this script started are signalled, by pid. JSON to --out.
  orphan_event.py --gpureap NEW --baseline OLD [--rounds 2] [--reps 3] [--out F]
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "tests", "gpu"))
from agent_bench import Agent  # noqa: E402
from gpu_scenario import SERVER, WORKER  # noqa: E402

STAGGERED_SERVER = r"""
import json, os, signal, subprocess, sys, time
gib = sys.argv[1]; worker = sys.argv[2]; stagger = float(sys.argv[3])
pids = []
for i in range(2):
    if i:
        time.sleep(stagger)
    p = subprocess.Popen([sys.executable, "-c", worker, gib, "0"], stdout=subprocess.PIPE, text=True)
    pids.append(int(p.stdout.readline()))
print(json.dumps({"server": os.getpid(), "workers": pids}), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def end(pids, agent):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        agent.next_event("memory_freed", 30)
    except RuntimeError as e:  # a GPU left as it was: said, and the run goes on
        print("after the round:", e, file=sys.stderr, flush=True)


def together(agent):
    p = subprocess.Popen([sys.executable, "-c", SERVER, "4", "4", "same", WORKER],
                         stdout=subprocess.PIPE, text=True)
    info = json.loads(p.stdout.readline())
    time.sleep(1.5)  # the agent has listed the workers (tick 1 s)
    t0 = time.time()
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    event, seen = agent.next_event("orphaned_memory", 15)
    end(info["workers"], agent)
    return seen - t0, len(event["holders"]), len(info["workers"])


def staggered(agent):
    p = subprocess.Popen([sys.executable, "-c", STAGGERED_SERVER, "4", WORKER, "1.5"],
                         stdout=subprocess.PIPE, text=True)
    info = json.loads(p.stdout.readline())
    t0 = time.time()  # the server SIGKILLs itself right after this line
    p.wait()
    event, seen = agent.next_event("orphaned_memory", 15)
    end(info["workers"], agent)
    return seen - t0, len(event["holders"]), len(info["workers"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpureap", required=True)
    ap.add_argument("--baseline", required=True)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out")
    a = ap.parse_args()
    env = dict(os.environ)
    env.setdefault("GPUREAP_STATE_DIR", "/tmp/gpureap-state")
    os.makedirs(env["GPUREAP_STATE_DIR"], mode=0o700, exist_ok=True)
    rows = {"baseline": {"together": [], "staggered": []}, "new": {"together": [], "staggered": []}}
    for _ in range(a.rounds):
        for name, binary in (("baseline", a.baseline), ("new", a.gpureap)):
            agent = Agent(binary, env)
            try:
                for _ in range(a.reps):
                    rows[name]["together"].append(together(agent))
                    rows[name]["staggered"].append(staggered(agent))
            finally:
                agent.stop()
            print(name, json.dumps(rows[name]), flush=True)
    summary = {}
    for name, kinds in rows.items():
        for kind, xs in kinds.items():
            summary[f"{name}_{kind}"] = {
                "reps": len(xs),
                "median_ms": round(statistics.median(x[0] for x in xs) * 1000, 2),
                "max_ms": round(max(x[0] for x in xs) * 1000, 2),
                "named": f"{sum(x[1] for x in xs)} of {sum(x[2] for x in xs)} orphans",
            }
    print(json.dumps(summary, indent=1))
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"rows": rows, "summary": summary}, f, indent=1)


if __name__ == "__main__":
    main()
