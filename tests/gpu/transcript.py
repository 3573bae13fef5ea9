#!/usr/bin/env python3
"""Prints what an operator sees on a real GPU, for the README's case study: a server whose
4 workers hold 20 GiB each under SGLang's process titles (sglang::scheduler_TP0..3, set at
run time as setproctitle sets them) is SIGKILLed; then `gpureap status`, the free it
suggests for the orphaned instance, and `gpureap status --gpu 0`. Not a test. This
process never opens the GPU itself (it would be listed as a holder).

  python3 tests/gpu/transcript.py            on the GPU machine (torch workers)
  python3 tests/gpu/transcript.py --no-gpu   on a simulated node (GPUREAP_DEV_DIR and the
                                             sim's NVML in the environment): workers that
                                             open its device files and hold no memory
"""
import json
import shutil
import subprocess
import sys

from gpu_scenario import GPUREAP, Scenario


def show(*args):
    print("$ gpureap " + " ".join(args), flush=True)
    subprocess.run([GPUREAP, *args])


def main():
    sim = "--no-gpu" in sys.argv[1:]
    if not sim and shutil.which("nvidia-smi") is None:
        sys.exit("no GPU")
    with Scenario() as s:
        _, workers = s.sglang_orphans(n=4, gib=20, flags=("--no-gpu",) if sim else ("--torch",))
        print("workers:", workers, flush=True)
        if not sim:
            print("$ nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv",
                  flush=True)
            subprocess.run(["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory",
                            "--format=csv"])
        show("status")
        doc = json.loads(subprocess.run([GPUREAP, "--json", "status"], capture_output=True,
                                        text=True).stdout)
        keys = [i["key"] for i in doc.get("instances", [])
                if sorted(m["pid"] for m in i["members"]) == sorted(workers)]
        if len(keys) != 1:
            sys.exit(f"the workers are not one instance: {doc.get('instances')}")
        show("free", "--orphans", "--instance", str(keys[0]), "--yes")
        show("status", "--gpu", "0")


if __name__ == "__main__":
    main()
