"""Server instances on a real GPU (issue 24; skipped without a GPU): torch workers with
SGLang's process titles, orphaned by their server's SIGKILL, are one instance with
ranks, and `free --orphans --instance` frees exactly them."""
import json
import unittest

from gpu_scenario import Scenario, alive, gpureap, have_gpu


@unittest.skipUnless(have_gpu(), "no NVIDIA GPU with torch here")
class InstancesOnGpu(unittest.TestCase):
    def setUp(self):
        self.s = Scenario()

    def tearDown(self):
        self.s.cleanup()

    def test_titled_workers_are_one_instance_with_ranks_and_free_instance_frees_them(self):
        _, workers = self.s.titled_orphaned_workers(n=4, gib=8)
        r = gpureap("--no-agent", "--json", "status")
        self.assertEqual(r.returncode, 0, r.stderr)
        doc = json.loads(r.stdout)
        # Keyed by its process group: the server's own, or that of whatever ran the test
        # (`timeout` makes one); found by its members.
        mine = [i for i in doc["instances"]
                if sorted(m["pid"] for m in i["members"]) == sorted(workers)]
        self.assertEqual(len(mine), 1, doc["instances"])
        inst = mine[0]
        self.assertEqual(inst["engine"], "sglang", inst)
        self.assertEqual(inst["orphaned"], 4, inst)
        # Its launcher is gone: unknown (null), or its group leader seen dead.
        self.assertFalse((inst["launcher"] or {}).get("alive", False), inst)
        self.assertEqual(sorted(m["ranks"] for m in inst["members"]),
                         ["TP0", "TP1", "TP2", "TP3"], inst)
        self.assertEqual({m["role"] for m in inst["members"]}, {"scheduler"}, inst)
        text = gpureap("--no-agent", "--no-color", "status")
        print(text.stdout)
        self.assertIn("4 processes (scheduler TP0..TP3)", text.stdout)
        key = inst["key"]
        self.assertIn(f"gpureap free --orphans --instance {key}", text.stdout)
        r = gpureap("--no-agent", "--json", "free", "--orphans", "--instance", key, "--yes")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        freed = json.loads(r.stdout)
        self.assertEqual(freed["plan"]["instances"][0]["key"], key)
        self.assertTrue(all(g["freed"] for g in freed["gpus"]), freed["gpus"])
        for pid in workers:
            self.assertFalse(alive(pid))


if __name__ == "__main__":
    unittest.main()
