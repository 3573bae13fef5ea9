#!/usr/bin/env python3
"""`gpureap top` on the real GPU (issue 26): the case study's orphans (an SGLang-titled
server SIGKILLed, its torch workers orphaned) beside a live supervised worker, shown in
tmux, tagged with space on the instance, freed with F and confirmed with y. Writes the
screens (before, plan box, after) to OUT and a JSON summary; exits 1 when the orphans
were not freed or the live worker was touched. Skips (exit 0, says so) without a GPU."""
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_scenario as g  # noqa: E402

OUT = sys.argv[1] if len(sys.argv) > 1 else "top-capture"
BIN = os.environ.get("GPUREAP_BIN", "gpureap")
SOCK = f"gpureap-top-capture-{os.getpid()}"


def tmux(*args):
    return subprocess.run(["tmux", "-L", SOCK, "-f", "/dev/null", *args],
                          capture_output=True, text=True, check=False).stdout


def screen():
    return tmux("capture-pane", "-p", "-t", "top")


def until(text, seconds=30):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        s = screen()
        if text in s:
            return s
        time.sleep(0.2)
    return screen()


def main():
    if not g.have_gpu():
        print("no GPU: skipped")
        return 0
    if not shutil.which("tmux"):
        print("no tmux on this machine: skipped")
        return 0
    os.makedirs(OUT, exist_ok=True)
    result = {}
    with g.Scenario() as sc:
        live = sc.supervised_worker(gib=4)
        server, workers = sc.titled_orphaned_workers(n=4, gib=8)
        time.sleep(8)  # CUDA contexts up: NVML lists the workers
        tmux("new-session", "-d", "-s", "top", "-x", "160", "-y", "40",
             f"env GPUREAP_NO_AGENT=1 {BIN} top --interval 500ms")
        before = until("ORPHAN")
        open(f"{OUT}/top-before.txt", "w").write(before)
        tmux("send-keys", "-t", "top", "o")  # orphans only: the cursor is on their instance
        time.sleep(1.0)
        tmux("send-keys", "-t", "top", "Home")
        tmux("send-keys", "-t", "top", "Space")
        time.sleep(0.5)
        tmux("send-keys", "-t", "top", "F")
        plan = until("y/n", 20)
        open(f"{OUT}/top-plan.txt", "w").write(plan)
        t0 = time.monotonic()
        tmux("send-keys", "-t", "top", "y")
        after = until("freed", 60)
        result["seconds_to_result_screen"] = round(time.monotonic() - t0, 2)
        open(f"{OUT}/top-after.txt", "w").write(after)
        tmux("send-keys", "-t", "top", "q")
        tmux("kill-server")
        result["orphans_alive"] = [p for p in workers if g.alive(p)]
        result["live_worker_alive"] = g.alive(live["worker"])
        result["nvml_used_after_mib"] = g.nvml_used(0) // (1 << 20)
    json.dump(result, open(f"{OUT}/top-capture.json", "w"), indent=1)
    print(json.dumps(result))
    print(after)
    return 0 if not result["orphans_alive"] and result["live_worker_alive"] else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    finally:
        tmux("kill-server")
