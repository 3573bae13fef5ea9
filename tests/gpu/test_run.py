"""`gpureap run` on a real GPU: SIGTERM to gpureap must tear down every worker
and return only once NVML shows the GPU back at its baseline.

    GPUREAP_BIN=build/gpureap python3 -m unittest tests/gpu/test_run.py -v

Skipped (not failed) where there is no nvidia-smi or no torch with CUDA.
Needs about 4 x 20 GiB free on GPU 0 (GPUREAP_TEST_GIB changes the 20).

`python3 test_run.py serve [--workers 4] [--gib 20] [--gpu 0]` is the stand-in
tensor-parallel server the test runs (bench/run_teardown_gpu.py uses it too):
N worker processes that each allocate GIB GiB with torch and sleep. They do not
watch their parent: when the server dies they keep their memory, as SGLang's
workers did in the case studies. Once every worker holds its memory it prints
one JSON line, {"server": PID, "workers": [PID, ...]}, and sleeps.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import unittest

WORKERS = 4
GIB = int(os.environ.get("GPUREAP_TEST_GIB", "20"))  # at most: sized to the card below


WORKER = r"""
import sys, time, torch
gib, gpu = int(sys.argv[1]), int(sys.argv[2])
x = torch.empty(gib << 30, dtype=torch.uint8, device=f"cuda:{gpu}")
torch.cuda.synchronize()
print("ready", flush=True)
while True:
    time.sleep(3600)
"""


def serve(argv) -> int:
    ap = argparse.ArgumentParser(prog="test_run.py serve")
    ap.add_argument("--workers", type=int, default=WORKERS)
    ap.add_argument("--gib", type=int, default=GIB)
    ap.add_argument("--gpu", type=int, default=0)
    args = ap.parse_args(argv)
    workers = [
        subprocess.Popen([sys.executable, "-c", WORKER, str(args.gib), str(args.gpu)],
                         stdout=subprocess.PIPE, text=True)
        for _ in range(args.workers)
    ]
    for w in workers:
        if w.stdout.readline().strip() != "ready":
            print(f"worker {w.pid} failed to allocate", file=sys.stderr)
            return 1
    print(json.dumps({"server": os.getpid(), "workers": [w.pid for w in workers]}), flush=True)
    while True:
        time.sleep(3600)


def _torch_cuda() -> bool:
    try:
        import torch  # noqa: F401

        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001 - any failure to import means no torch here
        return False


def used_bytes(gpu: int = 0) -> int:
    """GPU memory in use, as NVML reports it (nvidia-smi, MiB resolution)."""
    out = subprocess.run(
        ["nvidia-smi", f"--id={gpu}", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
        check=True, capture_output=True, text=True, timeout=30).stdout
    return int(out.strip().splitlines()[0]) << 20


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


@unittest.skipUnless(shutil.which("nvidia-smi"), "no nvidia-smi: not a GPU host")
@unittest.skipUnless(_torch_cuda(), "torch with CUDA is not available")
class RunOnGpu(unittest.TestCase):
    def setUp(self):
        self.bin = os.environ.get("GPUREAP_BIN", "build/gpureap")
        if not os.access(self.bin, os.X_OK):
            self.skipTest(f"GPUREAP_BIN={self.bin} is not an executable")
        self.baseline = used_bytes()
        self.started = []

    def tearDown(self):
        # Anything this test started and that is somehow still alive.
        for pid in self.started:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)

    def test_sigterm_returns_only_after_the_memory_is_released(self):
        # Sized to the card (NVML's total, less what is in use): 4 x 20 GiB did not fit
        # an 80 GiB H100 and the server printed no JSON line.
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        os.environ.setdefault("GPUREAP_BIN", self.bin)
        from gpu_scenario import fitting_gib
        gib = fitting_gib(WORKERS, GIB)
        proc = subprocess.Popen(
            [self.bin, "run", "-v", "--grace", "10s", "--", sys.executable, os.path.abspath(__file__),
             "serve", "--workers", str(WORKERS), "--gib", str(gib)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = proc.stdout.readline()
        if not line:
            proc.kill()
            _, err = proc.communicate(timeout=120)
            self.fail(f"the server printed no ready line ({WORKERS} x {gib} GiB)\n{err}")
        ready = json.loads(line)
        self.started = [ready["server"], *ready["workers"]]
        held = used_bytes()
        self.assertGreaterEqual(held - self.baseline, WORKERS * gib << 30,
                                "the workers do not hold their memory")

        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)  # gpureap: our own child
        _, err = proc.communicate(timeout=120)
        seconds = time.monotonic() - t0
        after = used_bytes()  # read once, right after gpureap returned

        self.assertEqual(proc.returncode, 128 + signal.SIGTERM, err)
        for pid in self.started:
            self.assertFalse(alive(pid), f"pid {pid} outlived the run\n{err}")
        tolerance = max(64 << 20, (held // 200))
        self.assertLessEqual(after, self.baseline + tolerance,
                             f"gpureap returned before the memory was released: {after >> 20} MiB used, "
                             f"baseline {self.baseline >> 20} MiB\n{err}")
        self.assertIn("back at baseline", err)
        print(f"\n  SIGTERM -> gpureap returned: {seconds:.3f} s "
              f"({WORKERS} x {gib} GiB released)\n{err}", file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "serve":
        sys.exit(serve(sys.argv[2:]))
    unittest.main()
