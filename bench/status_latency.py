#!/usr/bin/env python3
"""Where the time of `gpureap status` answered by the agent goes (issue 26: <= 3 ms whole
process on the H200). One run, every command alternating with the others, so ratios
compare like with like:

  true                        the cost of fork+exec+wait seen from this script
  BIN --no-such-option        start-up: loader, static initialisers, the whole CLI built,
                              argv parsed, a one-line usage error (exit 2); no NVML, no agent
  socket round trip           connect, "inventory", the answer read to EOF, from this
                              process (no exec): the agent's share
  BIN status                  the whole process, answered by the agent
  BIN --json status           the same, JSON
  BIN --no-agent status       (--with-scan) a direct scan, for scale
  nvidia-smi                  when on PATH (or the simulated node's stand-in)

The breakdown printed at the end is derived from the medians: start-up over `true`, the
socket round trip, and the rest (decoding the answer, the client's own /proc reads for
the free-orphans plan and instances, /dev/shm, the table).

On the GPU machine (the node's real NVML; GPUREAP_BIN or --gpureap names the binary):
  GPUREAP_BIN=build-release/gpureap python3 bench/status_latency.py --out out.json
  ... --compare build-portable/gpureap   # a second binary in the same run (e.g. libstdc++
                                           linked in); its agent is the first binary's
On a machine without a GPU, a simulated 8-GPU node with the case study's 4 orphans:
  python3 bench/status_latency.py --gpureap build-release/gpureap \\
      --sim build-release/sim/gpureap-sim --out out.json
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from summary_latency import start_agent  # noqa: E402


def run_quiet(argv, env):
    t0 = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return time.perf_counter() - t0


def socket_round_trip(path):
    t0 = time.perf_counter()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(path)
        s.sendall(b"inventory\n")
        size = 0
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            size += len(chunk)
    return time.perf_counter() - t0, size


def sim_node(sim, workdir, env):
    """A simulated 8-GPU node with the case study's scene: a server whose 4 workers hold
    20 GiB each on GPUs 0-3, SIGKILLed so that they are orphans."""
    node = os.path.join(workdir, "node")
    out = subprocess.run([sim, "node", "--dir", node, "--gpus", "8"], check=True,
                         capture_output=True, text=True, env=env).stdout
    for line in out.splitlines():
        if line.startswith("export ") and "=" in line:
            name, value = line[len("export "):].split("=", 1)
            env[name] = value.strip("'\"")
    subprocess.run([sim, "hold", "--dir", node, "--gpu", "0", "--children", "4", "--bytes",
                    "20GiB", "--orphan", "--detach"], check=True, capture_output=True, env=env)
    return node


def summarize(samples):
    v = sorted(samples)
    return {"median_ms": statistics.median(v) * 1e3, "p10_ms": v[len(v) // 10] * 1e3,
            "p90_ms": v[(len(v) * 9) // 10] * 1e3}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpureap", default=os.environ.get("GPUREAP_BIN"))
    ap.add_argument("--compare", help="a second gpureap binary timed in the same run")
    ap.add_argument("--sim", help="gpureap-sim: build a simulated node with orphans")
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--with-scan", action="store_true", help="also time --no-agent status")
    ap.add_argument("--out")
    args = ap.parse_args()
    if not args.gpureap:
        ap.error("name the binary: --gpureap BIN or GPUREAP_BIN=BIN")

    work = tempfile.mkdtemp(prefix="gpureap-status-latency-")
    env = dict(os.environ, GPUREAP_STATE_DIR=os.path.join(work, "state"))
    os.mkdir(env["GPUREAP_STATE_DIR"], 0o700)
    node = sim_node(args.sim, work, env) if args.sim else None
    smi = shutil.which("nvidia-smi") or (node and os.path.join(node, "bin", "nvidia-smi"))

    cases = [("true", ["true"])]
    binaries = [("", args.gpureap)] + ([("compare ", args.compare)] if args.compare else [])
    for label, b in binaries:
        cases += [(label + "start-up (--no-such-option)", [b, "--no-such-option"]),
                  (label + "status", [b, "status"]),
                  (label + "--json status", [b, "--json", "status"])]
        if args.with_scan:
            cases.append((label + "--no-agent status", [b, "--no-agent", "status"]))
    if smi and os.path.exists(smi):
        cases.append(("nvidia-smi", [smi]))

    agent = start_agent(args.gpureap, env)
    sock = os.path.join(env["GPUREAP_STATE_DIR"], "agent.sock")
    times = {name: [] for name, _ in cases}
    times["socket round trip"] = []
    answer_bytes = 0
    try:
        first = subprocess.run([args.gpureap, "status"], env=env, capture_output=True, text=True)
        if "answered by the gpureap agent" not in first.stdout:
            sys.exit("status was not answered by the agent:\n" + first.stdout + first.stderr)
        for _ in range(args.reps):
            for name, argv in cases:
                times[name].append(run_quiet(argv, env))
            dt, answer_bytes = socket_round_trip(sock)
            times["socket round trip"].append(dt)
    finally:
        agent.terminate()
        agent.wait(timeout=10)
        if args.sim:
            subprocess.run([args.sim, "cleanup", "--dir", node], capture_output=True)

    result = {"reps": args.reps, "gpureap": args.gpureap, "compare": args.compare,
              "simulated": bool(args.sim), "answer_bytes": answer_bytes,
              "times": {k: summarize(v) for k, v in times.items()}}
    med = {k: v["median_ms"] for k, v in result["times"].items()}
    breakdown = {}
    for label, _ in binaries:
        status = med[label + "status"]
        startup = med[label + "start-up (--no-such-option)"] - med["true"]
        breakdown[label + "status"] = {
            "whole_ms": status, "exec_and_wait_ms (true)": med["true"],
            "start_up_over_true_ms": startup, "agent_round_trip_ms": med["socket round trip"],
            "rest_ms": status - med["true"] - startup - med["socket round trip"]}
    result["breakdown"] = breakdown
    if "nvidia-smi" in med:
        result["status_over_nvidia_smi"] = med["status"] / med["nvidia-smi"]
    print(json.dumps(result, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
