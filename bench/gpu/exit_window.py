#!/usr/bin/env python3
"""What a look costs while a killed CUDA holder finishes its exit (issue 54).

A torch worker's GPU memory is back ~30 ms before its pidfd says it exited (the H100). free
no longer waits for that exit, but its last look then runs inside that window. Per round: a
holder (cuda_holder.py --torch) is SIGKILLed; NVML is polled until the memory is back; then,
still inside the window, each step of a look is timed once (NVML calls of GPU 0; the dying
process's /proc files), and `gpureap --no-agent status --json` is started and timed whole;
the same after the exit, for comparison. Each round times a different step first, so that
each is timed once surely inside the window.

  python3 bench/gpu/exit_window.py --gpureap build-gpu/gpureap --out exit_window.json
"""
import argparse
import ctypes
import json
import os
import select
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from nvml_ctypes import Nvml  # noqa: E402


def timed(fn):
    t = time.monotonic()
    try:
        fn()
    except OSError:
        pass
    return 1000 * (time.monotonic() - t)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def fd_scan(pid):
    d = f"/proc/{pid}/fd"
    for name in os.listdir(d):
        try:
            os.stat(os.path.join(d, name))
        except OSError:
            pass


def steps(n, h, pid, gpureap, first=0):
    """Each step of a look timed once, starting with step number `first` (the one timed
    surely inside the window), the others after it in turn."""
    u = ctypes.c_uint(0)
    count = ctypes.c_uint(64)
    buf = ctypes.create_string_buffer(64 * 48)
    todo = {
        "nvml memory": lambda: n.memory(h),
        "nvml processes v3": lambda: n.processes(h),
        "nvml utilization": lambda: n.lib.nvmlDeviceGetUtilizationRates(h, buf),
        "nvml mig mode": lambda: n.lib.nvmlDeviceGetMigMode(h, ctypes.byref(u), ctypes.byref(u)),
        "nvml process utilization": lambda: n.lib.nvmlDeviceGetProcessUtilization(
            h, buf, ctypes.byref(count), ctypes.c_ulonglong(0)),
        "proc stat": lambda: read(f"/proc/{pid}/stat"),
        "proc status": lambda: read(f"/proc/{pid}/status"),
        "proc fd scan": lambda: fd_scan(pid),
        "proc maps": lambda: read(f"/proc/{pid}/maps"),
        "proc cmdline": lambda: read(f"/proc/{pid}/cmdline"),
        "proc environ": lambda: read(f"/proc/{pid}/environ"),
    }
    if gpureap:
        todo["gpureap --no-agent status --json"] = lambda: subprocess.run(
            [gpureap, "--no-agent", "status", "--json"], stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
    names = list(todo)
    order = names[first % len(names):] + names[:first % len(names)]
    return order[0], {k: timed(todo[k]) for k in order}


def one_round(n, h, gib, gpureap, tolerance, first):
    baseline = n.memory(h)[1]
    p = subprocess.Popen([sys.executable, os.path.join(HERE, "cuda_holder.py"), "--torch",
                          "--device-gib", str(gib)], stdout=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline() if select.select([p.stdout], [], [], 120)[0] else ""
        info = json.loads(line) if line else {"error": "no line"}
        if "error" in info:
            return {"error": info["error"]}
        pid = info["holders"][0]["pid"]
        fd = os.pidfd_open(pid)
        t0 = time.monotonic()
        signal.pidfd_send_signal(fd, signal.SIGKILL)
        back = None
        while back is None and time.monotonic() - t0 < 30:
            if n.memory(h)[1] <= baseline + tolerance:
                back = time.monotonic() - t0
        exited_at_back = bool(select.select([fd], [], [], 0)[0])
        probe, inside = steps(n, h, pid, gpureap, first)
        still_inside = not select.select([fd], [], [], 0)[0]
        select.select([fd], [], [], 30)
        exited = time.monotonic() - t0
        os.close(fd)
        p.wait()
        _, after = steps(n, h, os.getpid(), gpureap, first)  # after: our own entry stands in
        return {"first": probe, "memory_back_s": back, "exited_s": exited, "exited_when_back": exited_at_back,
                "steps_done_inside": still_inside, "inside_ms": inside, "after_ms": after}
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpureap")
    ap.add_argument("--gib", type=int, default=15)
    ap.add_argument("--reps", type=int, default=1, help="rounds with each step first")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    n = Nvml()
    h = n.device(0)
    count = 12 if args.gpureap else 11
    rounds = [one_round(n, h, args.gib, args.gpureap, 64 << 20, i)
              for _ in range(args.reps) for i in range(count)]
    ok = [r for r in rounds if "error" not in r]
    summary = {}
    if ok:
        # Each step as the first one timed in the window (surely inside it), and after.
        summary["first_inside_ms"] = {r["first"]: r["inside_ms"][r["first"]] for r in ok}
        summary["after_ms"] = {k: statistics.median(r["after_ms"][k] for r in ok)
                               for k in ok[0]["after_ms"]}
        summary["window_ms"] = statistics.median(1000 * (r["exited_s"] - r["memory_back_s"])
                                                 for r in ok)
    json.dump({"rounds": rounds, "median": summary}, open(args.out, "w"), indent=1)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
