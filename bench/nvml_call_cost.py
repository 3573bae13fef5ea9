#!/usr/bin/env python3
"""What one NVML call costs on this machine's driver (issue 25: the MIG probe must cost
nothing when MIG is off): nvmlDeviceGetMigMode beside the calls every look makes, each
timed over N calls on GPU 0 through ctypes. Usage: nvml_call_cost.py [N] [OUT.json]"""
import ctypes
import json
import sys
import time

N = int(sys.argv[1]) if len(sys.argv) > 1 else 200
nvml = ctypes.CDLL("libnvidia-ml.so.1")
assert nvml.nvmlInit_v2() == 0
dev = ctypes.c_void_p()
assert nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(dev)) == 0


class Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                ("used", ctypes.c_ulonglong)]


def timed(name, call):
    rc = call()
    t0 = time.perf_counter()
    for _ in range(N):
        call()
    us = (time.perf_counter() - t0) / N * 1e6
    return name, {"rc": rc, "microseconds_per_call": round(us, 2)}


cur, pend = ctypes.c_uint(), ctypes.c_uint()
mem = Memory()
count = ctypes.c_uint(0)
util = (ctypes.c_uint * 2)()
out = dict([
    timed("nvmlDeviceGetMigMode", lambda: nvml.nvmlDeviceGetMigMode(dev, ctypes.byref(cur), ctypes.byref(pend))),
    timed("nvmlDeviceGetMemoryInfo", lambda: nvml.nvmlDeviceGetMemoryInfo(dev, ctypes.byref(mem))),
    timed("nvmlDeviceGetComputeRunningProcesses_v3(count)",
          lambda: nvml.nvmlDeviceGetComputeRunningProcesses_v3(dev, ctypes.byref(count), None)),
    timed("nvmlDeviceGetUtilizationRates", lambda: nvml.nvmlDeviceGetUtilizationRates(dev, util)),
])
out["mig_mode_current"] = cur.value
out["calls"] = N
nvml.nvmlShutdown()
print(json.dumps(out, indent=1))
if len(sys.argv) > 2:
    json.dump(out, open(sys.argv[2], "w"), indent=1)
