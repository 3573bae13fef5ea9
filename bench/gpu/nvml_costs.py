#!/usr/bin/env python3
"""What NVML itself costs a short command (issue 54: where free's and status's time goes).

In a child process, REPS times each: nvmlInit_v2, one memory reading of GPU 0, one process
listing of GPU 0, nvmlShutdown; and, from the parent, how long a child takes to be gone
(its pidfd readable) after it is told to _exit: with NVML initialised and not shut down (what
gpureap's NVML helper does on EOF), with NVML shut down first, and without NVML at all; then
each NVML call a look makes of GPU 0, timed alone (median of 20).

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


def call_costs(reps=20):
    """Each NVML call a look makes of GPU 0, timed alone: median ms and its return code."""
    import ctypes
    from nvml_ctypes import Nvml
    n = Nvml()
    h = n.device(0)
    buf = lambda size: ctypes.create_string_buffer(size)  # noqa: E731
    u = lambda: ctypes.byref(ctypes.c_uint(0))  # noqa: E731
    ull = lambda: ctypes.byref(ctypes.c_ulonglong(0))  # noqa: E731
    count = lambda: ctypes.byref(ctypes.c_uint(64))  # noqa: E731
    calls = {
        "nvmlDeviceGetName": lambda: (h, buf(96), 96),
        "nvmlDeviceGetUUID": lambda: (h, buf(96), 96),
        "nvmlDeviceGetPciInfo_v3": lambda: (h, buf(256)),
        "nvmlDeviceGetMinorNumber": lambda: (h, u()),
        "nvmlDeviceGetMemoryInfo": lambda: (h, buf(64)),
        "nvmlDeviceGetComputeRunningProcesses_v3": lambda: (h, count(), buf(64 * 24)),
        "nvmlDeviceGetGraphicsRunningProcesses_v3": lambda: (h, count(), buf(64 * 24)),
        "nvmlDeviceGetMPSComputeRunningProcesses_v3": lambda: (h, count(), buf(64 * 24)),
        "nvmlDeviceGetMigMode": lambda: (h, u(), u()),
        "nvmlDeviceGetUtilizationRates": lambda: (h, buf(16)),
        "nvmlDeviceGetProcessUtilization": lambda: (h, buf(64 * 48), count(),
                                                    ctypes.c_ulonglong(0)),
        "nvmlDeviceGetPowerUsage": lambda: (h, u()),
        "nvmlDeviceGetEnforcedPowerLimit": lambda: (h, u()),
        "nvmlDeviceGetCurrentClocksEventReasons": lambda: (h, ull()),
        "nvmlDeviceGetTotalEccErrors": lambda: (h, 1, 1, ull()),
        "nvmlDeviceGetTemperature": lambda: (h, 0, u()),
        "nvmlDeviceGetPersistenceMode": lambda: (h, u()),
    }
    out = {}
    for name, args in calls.items():
        fn = getattr(n.lib, name, None)
        if fn is None:
            out[name] = {"missing": True}
            continue
        times, rc = [], None
        for _ in range(reps):
            a = args()
            t = time.monotonic()
            rc = fn(*a)
            times.append(1000 * (time.monotonic() - t))
        out[name] = {"median_ms": statistics.median(times), "rc": rc}
    out["total_median_ms"] = sum(v.get("median_ms", 0) for v in out.values())
    return out


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
    calls = call_costs()
    json.dump({"rows": rows, "median": summary, "calls": calls}, open(args.out, "w"), indent=1)
    print(json.dumps({"median": summary, "calls": calls}, indent=1))


if __name__ == "__main__":
    main()
