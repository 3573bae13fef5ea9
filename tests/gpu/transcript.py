#!/usr/bin/env python3
"""Prints what an operator sees on a real GPU: the case study (a server with 4
torch workers x 20 GiB, the server SIGKILLed), then `gpureap status` and
`gpureap free --gpu 0 --yes`. Used for docs/benchmarks.md; not a test."""
import subprocess
import sys

from gpu_scenario import GPUREAP, Scenario, have_gpu

if not have_gpu():
    sys.exit("no GPU")
s = Scenario()
try:
    workers = s.orphaned_workers(n=4, gib=20)
    print("workers:", workers, flush=True)
    print("$ nvidia-smi --query-compute-apps=pid,used_memory --format=csv", flush=True)
    subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv"])
    for args in (["status"], ["free", "--gpu", "0", "--yes"], ["status", "--gpu", "0"]):
        print("$ gpureap " + " ".join(args), flush=True)
        subprocess.run([GPUREAP, *args])
finally:
    s.cleanup()
