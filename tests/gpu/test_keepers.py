"""Keepers on a real GPU (issues 52 and 54; skipped without a GPU and torch).

Two shapes keep a dead process's memory (docs/orphans.md, "Keepers"):
- an inheritor: a torch process forks after CUDA init (a data-loader worker does), then is
  SIGKILLed; the child keeps the device files and the memory. gpureap credits the child with
  the dead owner's bytes (class inheritor) and `free --orphans` frees it.
- a CUDA IPC importer (torch.multiprocessing, spawn): the importer maps the exporter's tensor;
  the exporter is SIGKILLed; NVML lists the importer with the bytes; `free --pid` frees it.
  Under a running agent, which sees the exporter die while the importer's figure grows, the
  importer is named (class importer) and `free --orphans` frees it.
Each records what NVML, /proc/PID/maps and the device files show into the test's output
(tests/gpu's log, bench/results/wave5-<card>/gpu-tests.log).
"""
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import unittest

from gpu_scenario import GPUREAP, Scenario, alive, fitting_gib, have_gpu
from test_watch import Agent

GIB = 1 << 30

PARENT = r"""
import os, sys, time, torch
gib = int(sys.argv[1])
x = torch.empty(gib << 30, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
child = os.fork()
if child == 0:
    while True:  # the data-loader worker: never touches CUDA, keeps every descriptor
        time.sleep(3600)
print(f'{{"owner": {os.getpid()}, "keeper": {child}}}', flush=True)
while True:
    time.sleep(3600)
"""

EXPORTER = r"""
import sys, time, torch, torch.multiprocessing as mp

def importer(q, ready):
    t = q.get()           # the exporter's tensor, mapped through CUDA IPC
    t.add_(0)
    torch.cuda.synchronize()
    ready.put(1)
    while True:
        time.sleep(3600)

if __name__ == "__main__":
    gib = int(sys.argv[1])
    ctx = mp.get_context("spawn")
    q, ready = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=importer, args=(q, ready))
    p.start()
    x = torch.ones(gib << 30, dtype=torch.uint8, device="cuda")
    q.put(x)
    ready.get()
    print(f'{{"exporter": {__import__("os").getpid()}, "importer": {p.pid}}}', flush=True)
    while True:
        time.sleep(3600)
"""


def nvml_view():
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                          "--format=csv,noheader,nounits"], capture_output=True, text=True).stdout
    return [line.strip() for line in out.splitlines() if line.strip()]


def proc_view(pid):
    """The device files pid has open and the lines of its maps that name /dev/nvidia*."""
    try:
        fds = sorted({os.readlink(f"/proc/{pid}/fd/{f}") for f in os.listdir(f"/proc/{pid}/fd")
                      if "nvidia" in os.readlink(f"/proc/{pid}/fd/{f}")})
        with open(f"/proc/{pid}/maps") as m:
            maps = sum(1 for line in m if "/dev/nvidia" in line)
        return {"device_files": fds, "nvidia_maps": maps}
    except OSError as e:
        return {"error": str(e)}


def status(*args):
    r = subprocess.run([GPUREAP, "--no-agent", "--json", "status", "--gpu", "0", *args],
                       capture_output=True, text=True, timeout=120)
    return json.loads(r.stdout)


def used_bytes():
    return int(status()["gpus"][0]["memory"]["used_bytes"])


def holder(doc, pid):
    for h in doc["gpus"][0]["holders"]:
        if h["pid"] == pid:
            return h
    return None


def wait_until(pred, seconds=60):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.1)
    return pred()


@unittest.skipUnless(have_gpu(), "no NVIDIA GPU with torch here")
class KeepersOnGpu(unittest.TestCase):
    def setUp(self):
        self.s = Scenario()
        self.baseline = used_bytes()

    def tearDown(self):
        self.s.cleanup()

    def test_a_child_forked_after_cuda_init_keeps_its_killed_parents_memory(self):
        gib = fitting_gib(1, 8)
        # Its own process group, as a shell starts a job (a training script run from a
        # terminal): the keeper is known by the group the dead owner led.
        p = subprocess.Popen([sys.executable, "-c", PARENT, str(gib)], stdout=subprocess.PIPE,
                             text=True, preexec_fn=os.setpgrp)
        self.s.popen.append(p)
        info = json.loads(p.stdout.readline())
        owner, keeper = info["owner"], info["keeper"]
        self.s.track(keeper)
        before = {"nvml": nvml_view(), "owner": proc_view(owner), "keeper": proc_view(keeper)}
        os.kill(owner, signal.SIGKILL)  # our own child: a zombie until we reap it, as on the H100
        self.assertTrue(wait_until(lambda: not alive(owner)))
        after = {"nvml": nvml_view(), "keeper": proc_view(keeper)}
        print(f"\n  inheritor ({gib} GiB): before the kill {json.dumps(before)}\n"
              f"  after the kill (owner a zombie) {json.dumps(after)}", file=sys.stderr)
        doc = status()
        k = holder(doc, keeper)
        self.assertIsNotNone(k, json.dumps(doc["gpus"][0]["holders"]))
        self.assertEqual((k.get("keeper") or {}).get("class"), "inheritor", k)
        self.assertGreaterEqual(k["gpu_bytes"], gib * GIB, k)
        self.assertIsNone(holder(doc, owner), "the dead owner holds nothing")
        text = subprocess.run([GPUREAP, "--no-agent", "status", "--gpu", "0"], capture_output=True,
                              text=True).stdout
        self.assertIn("whose device files it inherited", text)
        r = subprocess.run([GPUREAP, "free", "--orphans", "--gpu", "0", "--yes"],
                           capture_output=True, text=True, timeout=120)
        print(f"  free --orphans: rc {r.returncode}\n{r.stdout}{r.stderr}", file=sys.stderr)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertFalse(alive(keeper))
        self.assertNotIn("kept by holders left alone", r.stdout)
        self.assertLessEqual(used_bytes(), self.baseline + (512 << 20))
        p.wait()

    def start_exporter(self, gib):
        """The exporter and its importer (torch.multiprocessing, spawn), both ready."""
        # A file, not -c: spawn's children import their parent's main module by its path.
        with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
            f.write(EXPORTER)
        self.addCleanup(os.unlink, f.name)
        p = subprocess.Popen([sys.executable, f.name, str(gib)], stdout=subprocess.PIPE,
                             text=True, start_new_session=True)
        self.s.popen.append(p)
        ready, _, _ = select.select([p.stdout], [], [], 180)
        self.assertTrue(ready, "the exporter and importer gave no ready line in 180 s")
        info = json.loads(p.stdout.readline())
        self.s.track(info["importer"])
        return info["exporter"], info["importer"]

    def test_an_importer_the_agent_saw_import_is_named_and_free_orphans_frees_it(self):
        gib = fitting_gib(1, 8)
        agent = Agent()
        try:
            exporter, importer = self.start_exporter(gib)
            time.sleep(2)  # the agent's ticks (1 s) have listed both
            os.kill(exporter, signal.SIGKILL)
            # Announced once: as an importer, or first as an orphan (spawn's child is
            # re-parented at the same death) when that look came before NVML's new figures.
            event, _ = agent.next(lambda e: e.get("event") == "orphaned_memory" and
                                  importer in [h["pid"] for h in e.get("holders", [])], 30)
            print(f"\n  agent's event: {json.dumps(event)}\n  nvml: {nvml_view()}", file=sys.stderr)

            def via_agent():
                r = subprocess.run([GPUREAP, "--json", "status", "--gpu", "0"],
                                   capture_output=True, text=True, timeout=120)
                return holder(json.loads(r.stdout), importer) or {}
            self.assertTrue(wait_until(lambda: (via_agent().get("keeper") or {}).get("class")
                                       == "importer", 30), via_agent())
            self.assertEqual(via_agent()["keeper"]["owner_pid"], exporter)
        finally:
            agent.stop()
        # A direct look reads the agent's record (imported.json) and names it too.
        self.assertEqual((holder(status(), importer).get("keeper") or {}).get("class"), "importer")
        r = subprocess.run([GPUREAP, "free", "--orphans", "--gpu", "0", "--yes"],
                           capture_output=True, text=True, timeout=120)
        print(f"  free --orphans: rc {r.returncode}\n{r.stdout}{r.stderr}", file=sys.stderr)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertFalse(alive(importer))
        self.assertNotIn("kept by holders left alone", r.stdout)
        self.assertLessEqual(used_bytes(), self.baseline + (512 << 20))

    def test_an_ipc_importer_keeps_a_killed_exporters_memory(self):
        gib = fitting_gib(1, 8)
        exporter, importer = self.start_exporter(gib)
        both = {"nvml": nvml_view(), "importer": proc_view(importer)}
        os.kill(exporter, signal.SIGKILL)
        self.assertTrue(wait_until(lambda: not alive(exporter)))
        time.sleep(1)  # NVML's list after the exporter's teardown (2-3 s on the H100)
        after = {"nvml": nvml_view(), "importer": proc_view(importer)}
        print(f"\n  importer ({gib} GiB): both alive {json.dumps(both)}\n"
              f"  exporter killed {json.dumps(after)}", file=sys.stderr)
        doc = status()
        h = holder(doc, importer)
        self.assertIsNotNone(h, json.dumps(doc["gpus"][0]["holders"]))
        self.assertTrue(wait_until(lambda: (holder(status(), importer) or {}).get("gpu_bytes", 0)
                                   >= gib * GIB, 30), "NVML credits the importer with the bytes")
        r = subprocess.run([GPUREAP, "free", "--pid", str(importer), "--yes"],
                           capture_output=True, text=True, timeout=120)
        print(f"  free --pid {importer}: rc {r.returncode}\n{r.stdout}{r.stderr}", file=sys.stderr)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertFalse(alive(importer))
        self.assertLessEqual(used_bytes(), self.baseline + (512 << 20))


if __name__ == "__main__":
    unittest.main()
