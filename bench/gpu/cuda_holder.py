#!/usr/bin/env python3
"""A process that holds GPU memory, for the wave-4 GPU benchmarks (issue 41).

  cuda_holder.py --device-gib 10                                   cudaMalloc 10 GiB
  cuda_holder.py --device-gib 20 --pinned-gib 50 --pinned register malloc + cudaHostRegister
  cuda_holder.py --device-gib 20 --pinned-gib 50 --pinned hostalloc  cudaHostAlloc
  cuda_holder.py --torch --device-gib 20 --title sglang::scheduler_TP0
  cuda_holder.py --no-gpu --title sglang::scheduler_TP0   (here: no CUDA; opens the simulated
                                                            node's device files, holds nothing)

The CUDA runtime is called through ctypes (libcudart: $CUDART_LIBRARY, the CUDA toolkit's, a
Python package's, else the one torch loads); --torch allocates with torch instead, as the case
study's workers do. --title rewrites the process title as setproctitle does (SGLang's workers
call it): the comm through prctl, and argv's memory overwritten with the title, NUL-padded, so
/proc/PID/cmdline reads the title. When it holds, it prints one line in `gpureap-sim hold`'s
shape, {"leader", "holders": [{"pid", "gpu", "bytes"}], "pids"} plus the seconds each
allocation took, and sleeps until killed. An allocation that fails prints {"error"}, exit 1.
"""
import argparse
import ctypes
import glob
import json
import os
import sys
import time

GIB = 1 << 30
libc = ctypes.CDLL(None, use_errno=True)


def set_title(title):
    """setproctitle's effect on Linux: comm (15 bytes) and the argv area."""
    libc.prctl(15, title.encode()[:15], 0, 0, 0)  # PR_SET_NAME
    with open("/proc/self/stat") as f:
        s = f.read()
    fields = s[s.rindex(")") + 2:].split()  # fields[0] is field 3 (state)
    start, end = int(fields[48 - 3]), int(fields[49 - 3])  # arg_start, arg_end
    data = title.encode()[:end - start - 1]
    ctypes.memmove(start, data + b"\0" * (end - start - len(data)), end - start)


def load_cudart():
    candidates = [os.environ.get("CUDART_LIBRARY")]
    candidates += sorted(glob.glob("/usr/local/cuda*/lib64/libcudart.so*"), reverse=True)
    for d in sys.path:
        candidates += sorted(glob.glob(os.path.join(d, "nvidia", "**", "libcudart.so*"),
                                       recursive=True), reverse=True)
    for path in filter(None, candidates):
        try:
            return ctypes.CDLL(path), path
        except OSError:
            pass
    import torch  # the CUDA runtime torch itself loads
    torch.cuda.init()
    with open("/proc/self/maps") as f:
        path = next(line.split()[-1] for line in f if "libcudart" in line)
    return ctypes.CDLL(path), path


def cuda_call(rt, name, *args):
    rc = getattr(rt, name)(*args)
    if rc != 0:
        rt.cudaGetErrorString.restype = ctypes.c_char_p
        raise RuntimeError(f"{name}: {rt.cudaGetErrorString(rc).decode()} ({rc})")


def hold_cudart(args, timings):
    rt, path = load_cudart()
    keep = []
    t = time.perf_counter()
    cuda_call(rt, "cudaSetDevice", args.gpu)
    cuda_call(rt, "cudaFree", None)  # creates the context
    timings["context_s"] = time.perf_counter() - t
    if args.device_gib:
        p = ctypes.c_void_p()
        t = time.perf_counter()
        cuda_call(rt, "cudaMalloc", ctypes.byref(p), ctypes.c_size_t(int(args.device_gib * GIB)))
        timings["cudaMalloc_s"] = time.perf_counter() - t
        keep.append(p)
    if args.pinned_gib:
        size = ctypes.c_size_t(int(args.pinned_gib * GIB))
        t = time.perf_counter()
        if args.pinned == "register":
            libc.malloc.restype = ctypes.c_void_p
            buf = libc.malloc(size)
            timings["buffer"] = "malloc"
            if not buf:  # the heuristic overcommit refuses more than MemTotal, which grows in a VM
                libc.mmap.restype = ctypes.c_void_p
                libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                                      ctypes.c_int, ctypes.c_long]
                buf = libc.mmap(None, size, 3, 0x22 | 0x4000, -1, 0)  # RW, PRIVATE|ANON|NORESERVE
                timings["buffer"] = "mmap MAP_NORESERVE (malloc failed)"
                if buf in (None, ctypes.c_void_p(-1).value):
                    raise RuntimeError("malloc and mmap failed")
            cuda_call(rt, "cudaHostRegister", ctypes.c_void_p(buf), size, 0)  # Default
            keep.append(buf)
            timings["cudaHostRegister_s"] = time.perf_counter() - t
        else:
            p = ctypes.c_void_p()
            cuda_call(rt, "cudaHostAlloc", ctypes.byref(p), size, 0)  # cudaHostAllocDefault
            keep.append(p)
            timings["cudaHostAlloc_s"] = time.perf_counter() - t
    return path, keep


def hold_torch(args, timings):
    import torch
    t = time.perf_counter()
    torch.cuda.set_device(args.gpu)
    x = torch.empty(int(args.device_gib * GIB), dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    timings["torch_empty_s"] = time.perf_counter() - t
    return "torch " + torch.__version__, [x]


def hold_nothing(args, timings):
    """No CUDA: open the simulated node's device files, as CUDA opens the real ones."""
    dev = os.environ.get("GPUREAP_DEV_DIR")
    names = ("nvidiactl", "nvidia-uvm", f"nvidia{args.gpu}") if dev else ()
    return "none", [os.open(os.path.join(dev, n), os.O_RDWR) for n in names]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--device-gib", type=float, default=0)
    ap.add_argument("--pinned-gib", type=float, default=0)
    ap.add_argument("--pinned", choices=("register", "hostalloc"), default="register")
    ap.add_argument("--torch", action="store_true", help="allocate with torch (no pinned memory)")
    ap.add_argument("--no-gpu", action="store_true", help="no CUDA (a stand-in, for tests here)")
    ap.add_argument("--title", help="set the process title as setproctitle does")
    args = ap.parse_args()
    if args.title:
        set_title(args.title)
    timings = {}
    hold = hold_nothing if args.no_gpu else hold_torch if args.torch else hold_cudart
    try:
        runtime, keep = hold(args, timings)
    except Exception as e:  # noqa: BLE001 - reported to the caller, which records it
        print(json.dumps({"error": str(e), "pid": os.getpid()}), flush=True)
        return 1
    pid = os.getpid()
    size = int((args.device_gib if not args.no_gpu else 0) * GIB)
    print(json.dumps({"leader": pid, "holders": [{"pid": pid, "gpu": args.gpu, "bytes": size}],
                      "pids": [pid], "runtime": runtime, "timings": timings}), flush=True)
    while True:  # keep holds the allocations (or descriptors) until killed
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())
