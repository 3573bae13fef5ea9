#!/usr/bin/env python3
"""Soak of `gpureap watch` on a simulated node (issue 11; docs/benchmarks.md).

  agent_soak.py [--minutes 30] [--out F]

For --minutes: processes churn (short-lived children, ~20 a second), an orphan
cycle runs every ~10 s (a server with 2 workers on two GPUs is SIGKILLed, the
agent must announce orphaned_memory on both GPUs, `gpureap free` frees them,
the agent must announce memory_freed on both), /metrics is scraped every 2 s
and `gpureap status` asks the agent every 5 s. The agent's descriptor count
and RSS are sampled every minute; start and end are reported, with every
expected event that did not come ("missed").
"""
import argparse
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from agent_bench import ROOT, sim_node  # noqa: E402


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--gpureap", default=os.environ.get("GPUREAP_BIN", os.path.join(ROOT, "build-release", "gpureap")))
    ap.add_argument("--out")
    a = ap.parse_args()
    stop = threading.Event()
    result = {"minutes": a.minutes, "cycles": 0, "missed": [], "samples": [], "scrapes": 0,
              "scrape_errors": 0, "status_via_agent": 0, "status_direct": 0}
    with tempfile.TemporaryDirectory(prefix="gpureap-soak-") as tmp:
        sim, env = sim_node(tmp, gpus=4)
        agent = subprocess.Popen([a.gpureap, "--json", "watch", "--listen", "127.0.0.1:0"], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
        started = json.loads(agent.stdout.readline())
        url = f"http://{started['listen']}/metrics"
        events = []
        lock = threading.Lock()

        def reader():
            for line in agent.stdout:
                with lock:
                    events.append(json.loads(line))

        def churn():
            while not stop.is_set():
                p = subprocess.Popen(["sleep", "0.05"])
                time.sleep(0.05)
                p.wait()

        def scrape():
            while not stop.is_set():
                try:
                    urllib.request.urlopen(url, timeout=10).read()
                    result["scrapes"] += 1
                except OSError:
                    result["scrape_errors"] += 1
                time.sleep(2)

        def status():
            while not stop.is_set():
                r = subprocess.run([a.gpureap, "--json", "status"], env=env, capture_output=True, text=True)
                if r.returncode == 0 and json.loads(r.stdout).get("source") == "agent":
                    result["status_via_agent"] += 1
                else:
                    result["status_direct"] += 1
                time.sleep(5)

        threads = [threading.Thread(target=f, daemon=True) for f in (reader, churn, scrape, status)]
        for t in threads:
            t.start()

        def wait_for(kind, gpus, timeout=15):
            deadline = time.time() + timeout
            want = set(gpus)
            while time.time() < deadline and want:
                with lock:
                    for e in events:
                        if e.get("event") == kind and e.get("gpu") in want and not e.get("_used"):
                            e["_used"] = True
                            want.discard(e["gpu"])
                time.sleep(0.05)
            return want

        def sample():
            result["samples"].append({"t": round(time.time() - t_start), "fds": fds(agent.pid),
                                      "rss_kib": rss_kib(agent.pid)})

        t_start = time.time()
        next_sample = 0.0
        try:
            while time.time() - t_start < a.minutes * 60:
                if time.time() - t_start >= next_sample:
                    sample()
                    next_sample += 60
                gpu = (result["cycles"] * 2) % 4
                gpus = [gpu, gpu + 1]
                subprocess.run([sim, "hold", "--gpu", str(gpu), "--children", "2", "--bytes", "8GiB",
                                "--orphan", "--detach"], env=env, check=True, capture_output=True)
                missing = wait_for("orphaned_memory", gpus)
                if missing:
                    result["missed"].append({"cycle": result["cycles"], "event": "orphaned_memory", "gpus": sorted(missing)})
                subprocess.run([a.gpureap, "free", "--gpu", f"{gpu},{gpu + 1}", "--yes", "--grace", "1s"],
                               env=env, capture_output=True)
                missing = wait_for("memory_freed", gpus)
                if missing:
                    result["missed"].append({"cycle": result["cycles"], "event": "memory_freed", "gpus": sorted(missing)})
                result["cycles"] += 1
                time.sleep(8)
            sample()
        finally:
            stop.set()
            agent.send_signal(signal.SIGTERM)
            result["agent_exit"] = agent.wait(timeout=15)
            subprocess.run([sim, "cleanup"], env=env, capture_output=True)
    s = result["samples"]
    result["fds_start_end"] = [s[1]["fds"] if len(s) > 1 else s[0]["fds"], s[-1]["fds"]]
    result["rss_kib_start_end"] = [s[1]["rss_kib"] if len(s) > 1 else s[0]["rss_kib"], s[-1]["rss_kib"]]
    result["events_seen"] = len(events)
    print(json.dumps(result, indent=2))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=2)
    return 1 if result["missed"] or result["agent_exit"] != 0 else 0


if __name__ == "__main__":
    sys.exit(main())
