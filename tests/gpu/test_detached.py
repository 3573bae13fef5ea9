"""A nohup-started torch server with live workers on a real GPU (run on the GPU machine;
skipped elsewhere): its shell exits, so it is re-parented to init, but it leads live
GPU workers. It is *detached*, never an orphan: `free --orphans` has nothing to do and
the agent's most eager reaping policy leaves it alone (issue 22, docs/orphans.md)."""
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

from gpu_scenario import GPUREAP, WORKER, Scenario, alive, have_gpu

# The server holds memory itself (its rank-0 context) and starts two workers.
SERVER = r"""
import json, os, subprocess, sys, time, torch
worker = sys.argv[1]
torch.cuda.set_device(0)
x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
procs = [subprocess.Popen([sys.executable, "-c", worker, "1", "0"], stdout=subprocess.PIPE,
                          text=True) for _ in range(2)]
pids = [int(p.stdout.readline()) for p in procs]
print(json.dumps({"server": os.getpid(), "workers": pids}), flush=True)
while True:
    time.sleep(3600)
"""


@unittest.skipUnless(have_gpu(), "no NVIDIA GPU with torch here")
class DetachedServerOnGpu(unittest.TestCase):
    def setUp(self):
        self.s = Scenario()
        self.dir = tempfile.mkdtemp()

    def tearDown(self):
        self.s.cleanup()

    def start_nohup_server(self):
        out = os.path.join(self.dir, "server.out")
        # The shell starts the server with nohup in the background and exits.
        subprocess.run(["bash", "-c", f'nohup {sys.executable} -c "$0" "$1" > {out} 2>&1 &',
                        SERVER, WORKER], check=True)
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                with open(out) as f:
                    lines = f.readlines()
                for line in lines:
                    if line.startswith("{"):
                        info = json.loads(line)
                        for pid in [info["server"]] + info["workers"]:
                            self.s.track(pid)
                        return info
            except OSError:
                pass
            time.sleep(0.2)
        self.fail("the nohup'd server did not start: " + open(out).read())

    def holders(self):
        r = subprocess.run([GPUREAP, "--no-agent", "--json", "status"], capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        return {h["pid"]: h for g in json.loads(r.stdout)["gpus"] for h in g["holders"]}

    def test_nohup_server_with_live_workers_is_detached_and_never_reaped(self):
        info = self.start_nohup_server()
        hs = self.holders()
        server = hs[info["server"]]
        self.assertEqual(server["ppid"], 1, server)
        self.assertFalse(server["orphaned"], server)
        self.assertTrue(server["detached"], server)
        for w in info["workers"]:
            self.assertFalse(hs[w]["orphaned"], hs[w])
        # Nothing to signal (exit 4, or 0 when a holder it must leave alone, such as
        # this test runner's own CUDA context, keeps the GPU above its baseline).
        plan = subprocess.run([GPUREAP, "--no-agent", "--json", "free", "--orphans", "--gpu", "all",
                               "--dry-run"], capture_output=True, text=True, timeout=60)
        self.assertIn(plan.returncode, (0, 4), plan.stdout + plan.stderr)
        if plan.stdout.strip():
            self.assertEqual(json.loads(plan.stdout)["plan"]["targets"], [], plan.stdout)
        agent = subprocess.Popen([GPUREAP, "--json", "watch", "--no-listen", "--tick", "200ms",
                                  "--reap-orphans-after", "1s"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            time.sleep(5)  # the policy's window passes five times over
        finally:
            agent.terminate()
            out, err = agent.communicate(timeout=30)
        events = [json.loads(l).get("event") for l in out.splitlines() if l.startswith("{")]
        self.assertFalse({"reaped", "reap_planned", "reap_failed"} & set(events), out + err)
        for pid in [info["server"]] + info["workers"]:
            self.assertTrue(alive(pid), pid)


if __name__ == "__main__":
    unittest.main()
