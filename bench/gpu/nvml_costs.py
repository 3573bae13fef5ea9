#!/usr/bin/env python3
"""What NVML itself costs a short command (issue 54: where free's and status's time goes).

In a child process, REPS times each: nvmlInit_v2, one memory reading of GPU 0, one process
listing of GPU 0, nvmlShutdown; and, from the parent, how long a child takes to be gone
(its pidfd readable) after it is told to _exit: with NVML initialised and not shut down (what
gpureap's NVML helper does on EOF), with NVML shut down first, and without NVML at all.

  python3 bench/gpu/nvml_costs.py [--reps 10] --out nvml_costs.json   # GPU machine
  GPUREAP_NVML_LIBRARY=... python3 bench/gpu/nvml_costs.py ...        # a simulated node
"""
import argparse
import json
import os
import select
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def child(mode, w, r):
    """Runs in the child: does MODE's NVML work, writes its timings, waits for 'go', _exits."""
    t = {}
    if mode != "no-nvml":
        from nvml_ctypes import Nvml
        a = time.monotonic()
        n = Nvml()
        t["init_ms"] = 1000 * (time.monotonic() - a)
        h = n.device(0)
        a = time.monotonic()
        n.memory(h)
        t["memory_ms"] = 1000 * (time.monotonic() - a)
        a = time.monotonic()
        n.processes(h)
        t["processes_ms"] = 1000 * (time.monotonic() - a)
        if mode == "shutdown-first":
            a = time.monotonic()
            n.lib.nvmlShutdown()
            t["shutdown_ms"] = 1000 * (time.monotonic() - a)
    os.write(w, (json.dumps(t) + "\n").encode())
    os.read(r, 1)
    os._exit(0)


def one(mode):
    to_parent_r, to_parent_w = os.pipe()
    to_child_r, to_child_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(to_parent_r)
        os.close(to_child_w)
        child(mode, to_parent_w, to_child_r)
    os.close(to_parent_w)
    os.close(to_child_r)
    fd = os.pidfd_open(pid)
    line = b""
    while not line.endswith(b"\n"):
        chunk = os.read(to_parent_r, 4096)
        if not chunk:
            break
        line += chunk
    t = json.loads(line or b"{}")
    a = time.monotonic()
    os.write(to_child_w, b"g")
    select.select([fd], [], [], 10)
    t["exit_ms"] = 1000 * (time.monotonic() - a)
    os.waitpid(pid, 0)
    for f in (fd, to_parent_r, to_child_w):
        os.close(f)
    return t


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    rows = {m: [] for m in ("exit-with-nvml-open", "shutdown-first", "no-nvml")}
    for _ in range(args.reps):
        for m in rows:
            rows[m].append(one(m))
    summary = {m: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for m, rs in rows.items()}
    json.dump({"rows": rows, "median": summary}, open(args.out, "w"), indent=1)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
