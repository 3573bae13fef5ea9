#!/usr/bin/env python3
"""CPU of `gpureap top` at one refresh a second (issue 26; docs/benchmarks.md, "top").

  top_bench.py [--procs 1000,10000] [--seconds 30] [--out F] [--nvitop CMD]
                                                                 CPU machine, simulated node

`top` runs in a tmux window of 200x50 (its own tmux server, -L, killed at the end) on an
8-GPU simulated node with the case study's orphans and N idle processes, for --seconds:
  scan:  `gpureap top --no-agent` (a full /proc scan and an NVML snapshot every second);
  agent: `gpureap top` while `gpureap watch` runs (each look is the agent's answer); the
         agent's own CPU is reported beside it.
  nvitop: with --nvitop CMD (e.g. "build-nvitop/venv/bin/python -m nvitop"), `CMD --interval 1`
         in the same window size on the same node, its nvidia-ml-py loading the simulated
         libnvidia-ml.so.1 (LD_LIBRARY_PATH); its stderr (the simulated library lacks some
         NVML calls nvitop asks for, and nvitop logs each once) goes to /dev/null.
CPU is utime+stime of top and its NVML worker (its children), per second of wall time,
as a percentage of one core. Same run, alternating nothing: each case in turn.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from agent_bench import ROOT, Agent, cpu_of_tree, sim_node, spawn_idle  # noqa: E402


def top_cpu(gpureap, env, seconds, *args):
    """Core fraction used by `gpureap top ARGS` in tmux over `seconds`."""
    return pane_cpu([gpureap, "top", "--interval", "1s", *args], env, seconds, "ORPHAN")


def nvitop_cpu(command, env, seconds):
    """Core fraction used by nvitop at one refresh a second, on the same simulated node."""
    env = dict(env)
    env["LD_LIBRARY_PATH"] = os.path.dirname(env["GPUREAP_NVML_LIBRARY"])
    line = f"exec {command} --interval 1 2>/dev/null"
    return pane_cpu(["sh", "-c", line], env, seconds, "20.00GiB")


def pane_cpu(argv, env, seconds, ready):
    """Core fraction used by ARGV in a 200x50 tmux window over `seconds`, once it shows `ready`."""
    tmux = shutil.which("tmux")
    # A socket of its own per case: a server just killed may still hold the last one's name.
    pane_cpu.runs = getattr(pane_cpu, "runs", 0) + 1
    sock = f"gpureap-top-bench-{os.getpid()}-{pane_cpu.runs}"
    conf = os.path.join(env["GPUREAP_STATE_DIR"], "tmux.conf")
    with open(conf, "w") as f:
        f.write("set -g status off\n")
    base = [tmux, "-L", sock, "-f", conf]
    subprocess.run(base + ["new-session", "-d", "-s", "top", "-x", "200", "-y", "50", *argv],
                   env=env, check=True)
    try:
        pid = int(subprocess.run(base + ["display-message", "-p", "-t", "top", "#{pane_pid}"],
                                 env=env, capture_output=True, text=True, check=True).stdout)
        deadline = time.time() + 30
        while ready not in subprocess.run(base + ["capture-pane", "-p", "-t", "top"], env=env,
                                             capture_output=True, text=True).stdout:
            if time.time() > deadline:
                raise RuntimeError(f"{argv[0]} did not show {ready!r} within 30 s")
            time.sleep(0.2)
        time.sleep(2)  # past start-up
        c0, t0 = cpu_of_tree(pid), time.time()
        time.sleep(seconds)
        c1, t1 = cpu_of_tree(pid), time.time()
        return (c1 - c0) / (t1 - t0)
    finally:
        subprocess.run(base + ["kill-server"], env=env, capture_output=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpureap", default=os.environ.get("GPUREAP_BIN", os.path.join(ROOT, "build-release", "gpureap")))
    ap.add_argument("--procs", default="1000,10000")
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--out")
    ap.add_argument("--nvitop", help="command that runs nvitop (measured beside top when given)")
    a = ap.parse_args()
    results = {"machine": "cpu, simulated node", "nproc": os.cpu_count(), "rows": []}
    with tempfile.TemporaryDirectory(prefix="gpureap-top-bench-") as tmp:
        sim, env = sim_node(tmp)
        try:
            subprocess.run([sim, "hold", "--gpu", "0", "--children", "8", "--bytes", "20GiB",
                            "--orphan", "--detach"], env=env, check=True, capture_output=True)
            for n in [int(x) for x in a.procs.split(",") if x]:
                idle = spawn_idle(n)
                try:
                    scan = top_cpu(a.gpureap, env, a.seconds, "--no-agent")
                    nvitop = nvitop_cpu(a.nvitop, env, a.seconds) if a.nvitop else None
                    agent = Agent(a.gpureap, env)
                    try:
                        time.sleep(2)
                        a0, t0 = agent.cpu_seconds(), time.time()
                        with_agent = top_cpu(a.gpureap, env, a.seconds)
                        agent_cpu = (agent.cpu_seconds() - a0) / (time.time() - t0)
                    finally:
                        agent.stop()
                finally:
                    for p in idle:
                        p.kill()
                    for p in idle:
                        p.wait()
                row = {"processes": n, "seconds": a.seconds,
                       "top_scan_core_percent": round(scan * 100, 2),
                       "top_with_agent_core_percent": round(with_agent * 100, 2),
                       "agent_core_percent_meanwhile": round(agent_cpu * 100, 2)}
                if nvitop is not None:
                    row["nvitop_core_percent"] = round(nvitop * 100, 2)
                    row["top_scan_over_nvitop"] = round(scan / nvitop, 3)
                    row["top_with_agent_over_nvitop"] = round(with_agent / nvitop, 3)
                    row["top_plus_agent_over_nvitop"] = round((with_agent + agent_cpu) / nvitop, 3)
                results["rows"].append(row)
                print("cpu", row, flush=True)
        finally:
            subprocess.run([sim, "cleanup"], env=env, capture_output=True)
    print(json.dumps(results, indent=2))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
