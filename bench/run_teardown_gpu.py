#!/usr/bin/env python3
"""How long `gpureap run` takes from SIGTERM to its return, against the floor.

    GPUREAP_BIN=build/gpureap python3 bench/run_teardown_gpu.py [--rounds 3] [--workers 4] [--gib 20]

On a GPU host. Each round starts the stand-in server of tests/gpu/test_run.py
(N torch workers holding GIB GiB each on GPU 0) three ways, alternating:

  gpureap   under `gpureap run`; SIGTERM to gpureap; time until gpureap returns
            (it returns only once NVML shows GPU 0 back at its baseline)
  SIGKILL   directly; SIGKILL to the server and every worker at once; time until
            NVML shows the baseline (polled as fast as NVML answers): the floor
  SIGTERM   the same with SIGTERM: the floor for a polite stop

and prints the median of each and gpureap's overhead over both floors.
NVML is read through nvidia-ml-py (pynvml) when it is installed, else nvidia-smi.
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SERVER = os.path.join(ROOT, "tests", "gpu", "test_run.py")

try:
    import pynvml

    pynvml.nvmlInit()
    _handle = pynvml.nvmlDeviceGetHandleByIndex(0)

    def used() -> int:
        return pynvml.nvmlDeviceGetMemoryInfo(_handle).used
except Exception:  # noqa: BLE001 - no pynvml: fall back to the CLI
    def used() -> int:
        out = subprocess.run(["nvidia-smi", "--id=0", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                             check=True, capture_output=True, text=True).stdout
        return int(out.split()[0]) << 20


def wait_baseline(baseline: int, tolerance: int, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while used() > baseline + tolerance:
        if time.monotonic() > end:
            raise SystemExit("memory never came back to the baseline")


def start(argv):
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ready = json.loads(p.stdout.readline())
    return p, [ready["server"], *ready["workers"]]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--gib", type=int, default=20)
    args = ap.parse_args()
    gpureap = os.environ.get("GPUREAP_BIN", os.path.join(ROOT, "build", "gpureap"))
    server = [sys.executable, SERVER, "serve", "--workers", str(args.workers), "--gib", str(args.gib)]
    baseline = used()
    tolerance = max(64 << 20, args.workers * (args.gib << 30) // 200)
    results = {"gpureap run, SIGTERM to gpureap": [], "floor: SIGKILL the workers": [],
               "floor: SIGTERM the workers": []}

    for _ in range(args.rounds):
        # gpureap run: SIGTERM, then gpureap returns after verifying the release.
        p, pids = start([gpureap, "run", "--", *server])
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=120)
        results["gpureap run, SIGTERM to gpureap"].append(time.monotonic() - t0)
        if used() > baseline + tolerance:
            raise SystemExit("gpureap returned before the memory was released")
        for sig, key in ((signal.SIGKILL, "floor: SIGKILL the workers"),
                         (signal.SIGTERM, "floor: SIGTERM the workers")):
            p, pids = start(server)
            t0 = time.monotonic()
            for pid in pids:  # every one started by this script
                os.kill(pid, sig)
            p.wait()
            wait_baseline(baseline, tolerance)
            results[key].append(time.monotonic() - t0)

    print(f"{args.rounds} rounds, {args.workers} workers x {args.gib} GiB on GPU 0; median (min..max) seconds")
    for k, xs in results.items():
        print(f"  {k:34} {statistics.median(xs):7.3f}  ({min(xs):.3f}..{max(xs):.3f})")
    g = statistics.median(results["gpureap run, SIGTERM to gpureap"])
    for k in ("floor: SIGKILL the workers", "floor: SIGTERM the workers"):
        f = statistics.median(results[k])
        print(f"  gpureap over {k[7:]:26} {g - f:+7.3f} s  ({g / f:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
