#!/usr/bin/env python3
"""NVML through ctypes, for the wave-4 GPU benchmarks: the driver's own library
(libnvidia-ml.so.1) or, where GPUREAP_NVML_LIBRARY names one, the simulated node's
stand-in (sim/), so the same code runs on the GPU machine and here.

As a program it prints what this process's PID namespace is shown (issue 41, run 2):
  python3 bench/gpu/nvml_ctypes.py [GPU]
{"driver_version", "pid_namespace", "gpu": {"total", "used"}, "compute_running_processes_v3":
 {"rc", "count", "processes": [{"pid", "used"}]}, "running_process_detail_list": {...}}
"""
import ctypes
import json
import os
import sys

NOT_AVAILABLE = 0xFFFFFFFFFFFFFFFF  # NVML_VALUE_NOT_AVAILABLE: usedGpuMemory unknown
INSUFFICIENT_SIZE = 7


class Memory(ctypes.Structure):  # nvmlMemory_t (v1: used includes the driver's reserve)
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                ("used", ctypes.c_ulonglong)]


class ProcessInfo(ctypes.Structure):  # nvmlProcessInfo_v2_t, 24 bytes (the _v3 calls)
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]


class ProcessDetail(ctypes.Structure):  # nvmlProcessDetail_v1_t, 32 bytes
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint),
                ("usedGpuCcProtectedMemory", ctypes.c_ulonglong)]


class ProcessDetailList(ctypes.Structure):  # nvmlProcessDetailList_v1_t, 24 bytes
    _fields_ = [("version", ctypes.c_uint), ("mode", ctypes.c_uint),
                ("numProcArrayEntries", ctypes.c_uint),
                ("procArray", ctypes.POINTER(ProcessDetail))]


DETAIL_LIST_V1 = ctypes.sizeof(ProcessDetailList) | (1 << 24)  # 0x01000018


class Nvml:
    def __init__(self, library=None):
        self.path = library or os.environ.get("GPUREAP_NVML_LIBRARY") or "libnvidia-ml.so.1"
        self.lib = ctypes.CDLL(self.path)
        self.check(self.lib.nvmlInit_v2(), "nvmlInit_v2")

    def check(self, rc, call):
        if rc != 0:
            raise RuntimeError(f"{call}: NVML error {rc}")

    def driver_version(self):
        buf = ctypes.create_string_buffer(96)
        self.check(self.lib.nvmlSystemGetDriverVersion(buf, 96), "nvmlSystemGetDriverVersion")
        return buf.value.decode()

    def device(self, index):
        h = ctypes.c_void_p()
        self.check(self.lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(h)),
                   "nvmlDeviceGetHandleByIndex_v2")
        return h

    def memory(self, h):
        m = Memory()
        self.check(self.lib.nvmlDeviceGetMemoryInfo(h, ctypes.byref(m)), "nvmlDeviceGetMemoryInfo")
        return m.total, m.used

    def processes(self, h):
        """nvmlDeviceGetComputeRunningProcesses_v3: [(pid, used bytes or None)]."""
        n = ctypes.c_uint(16)
        while True:
            arr = (ProcessInfo * n.value)()
            rc = self.lib.nvmlDeviceGetComputeRunningProcesses_v3(h, ctypes.byref(n), arr)
            if rc != INSUFFICIENT_SIZE:
                break
            n = ctypes.c_uint(n.value + 8)
        self.check(rc, "nvmlDeviceGetComputeRunningProcesses_v3")
        return [(p.pid, None if p.usedGpuMemory == NOT_AVAILABLE else p.usedGpuMemory)
                for p in arr[:n.value]]

    def detail_list(self, h):
        """nvmlDeviceGetRunningProcessDetailList (compute): (rc, [(pid, used)])."""
        fn = getattr(self.lib, "nvmlDeviceGetRunningProcessDetailList", None)
        if fn is None:  # drivers before 550
            return "not exported", []
        arr = (ProcessDetail * 64)()
        lst = ProcessDetailList(DETAIL_LIST_V1, 0, 64, arr)
        rc = fn(h, ctypes.byref(lst))
        if rc != 0:
            return rc, []
        return rc, [(p.pid, None if p.usedGpuMemory == NOT_AVAILABLE else p.usedGpuMemory)
                    for p in arr[:lst.numProcArrayEntries]]


def probe(index=0):
    nvml = Nvml()
    h = nvml.device(index)
    total, used = nvml.memory(h)
    procs = nvml.processes(h)
    rc, details = nvml.detail_list(h)
    as_list = lambda ps: [{"pid": pid, "used": b} for pid, b in ps]  # noqa: E731
    return {"library": nvml.path, "driver_version": nvml.driver_version(),
            "pid_namespace": os.readlink("/proc/self/ns/pid"), "my_pid": os.getpid(),
            "gpu": {"index": index, "total": total, "used": used},
            "compute_running_processes_v3": {"count": len(procs), "processes": as_list(procs)},
            "running_process_detail_list": {"rc": rc, "count": len(details),
                                            "processes": as_list(details)}}


if __name__ == "__main__":
    print(json.dumps(probe(int(sys.argv[1]) if len(sys.argv) > 1 else 0), indent=1))
