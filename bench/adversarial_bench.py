#!/usr/bin/env python3
"""Every adversarial holder shape of the simulator, N times each (issue 14, item 9).

    bench/adversarial_bench.py [--reps 50] [--build build-release] [--json out.json]

For each shape: a fresh simulated node, the holder, one `gpureap free --json --yes`, then a
check of the verdict against what the shape must give. The *spared* shapes (issue 22) are
processes that are not leaks (a detached server with live workers, a live pipeline job, a
lone server leading its own group): `gpureap free --orphans --yes` must have nothing to do (exit 4) and signal
none of them; "wrong signals" counts every run where one of them died. Reports per shape: runs, freed (GPU
back at baseline afterwards), correctly classified (the expected exit status and, where the
memory cannot be freed, the expected leftover class), wrong exit, and time min/median/max.
Run on the release build (the default): never quote a figure from the debug build.
Every process is started on the test's own simulated node and removed with
`gpureap-sim cleanup`; nothing else on the machine is touched.
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

# name: (hold args, free args, failure mode or None, expected rc, expected leftover class
#        or None when the GPU must be freed)
SHAPES = {
    "orphans": (["--bytes", "20GiB", "--children", "4", "--same-gpu", "--orphan"], [], None, 0, None),
    "ignore_term": (["--bytes", "8GiB", "--ignore-term"], ["--grace", "1s"], None, 0, None),
    "respawn_fast": (["--bytes", "8GiB", "--children", "1", "--respawn"],
                     ["--grace", "1s", "--stop-respawners"], None, 0, None),
    "respawn_delayed_3s": (["--bytes", "8GiB", "--children", "1", "--respawn", "--respawn-delay",
                            "3s", "--respawn-limit", "1"], ["--grace", "1s"], None, 0, None),
    "daemon": (["--bytes", "8GiB", "--daemon"], [], None, 0, None),
    "zombie_leader": (["--bytes", "8GiB", "--zombie-leader"], [], None, 0, None),
    "fork_storm": (["--bytes", "8GiB", "--forks-per-second", "200"], [], None, 0, None),
    "stuck": (["--bytes", "8GiB", "--stuck"], [], None, 1, "driver_held"),
    "release_delay_2s": (["--bytes", "8GiB", "--release-delay", "2s"], [], None, 0, None),
    "nvml_query_fail": (["--bytes", "8GiB"], [], "query_fail", 3, "nvml_failed"),
    "nvml_hang": (["--bytes", "8GiB"], ["--timeout", "5s"], "hang_query", 3, "nvml_failed"),
}
GPU = 1

# Not leaks: `free --orphans --yes --gpu GPU` must exit 4 and leave every process alive.
# name: hold args, or "pipeline" (an interactive shell's `cat | python` whose cat exited).
SPARED = {
    "detached_server": ["--bytes", "8GiB", "--children", "2", "--same-gpu", "--parent-holds"],
    # One process leading its own group under init (`nohup srv &` from a terminal).
    "detached_single": ["--bytes", "8GiB"],
    "pipeline_job": "pipeline",
}


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return False
    return s[s.rindex(")") + 2] not in "ZX"


def run_spared(build, name, spec):
    sim = os.path.join(build, "sim", "gpureap-sim")
    gpureap = os.path.join(build, "gpureap")
    node = tempfile.mkdtemp(prefix="gpureap-adv-")
    env = dict(os.environ)
    pids = []
    shell = None
    try:
        make_node(sim, node, env)
        if spec == "pipeline":
            script = ("set -m; /bin/cat /dev/null | " + sys.executable + " -c \"import os,sys,time;"
                      f" sys.stdin.read(); f=open('{node}/dev/nvidia{GPU}'); print(os.getpid(),"
                      " flush=True); time.sleep(60)\" & wait")
            shell = subprocess.Popen(["bash", "-c", script], stdout=subprocess.PIPE, text=True)
            pids = [shell.pid, int(shell.stdout.readline())]
        else:
            hold = [sim, "hold", "--dir", node, "--gpu", str(GPU)] + spec
            if "--daemon" not in spec:
                hold.append("--detach")
            r = subprocess.run(hold, capture_output=True, text=True, check=True, env=env, timeout=30)
            ready = json.loads(r.stdout.splitlines()[-1])
            pids = [h["pid"] for h in ready["holders"]] + [ready["leader"]]
        t0 = time.monotonic()
        r = subprocess.run([gpureap, "--no-agent", "free", "--json", "--yes", "--orphans", "--gpu",
                            str(GPU)], capture_output=True, text=True, env=env, timeout=120)
        seconds = time.monotonic() - t0
        survived = all(alive(p) for p in pids)
        return {"rc": r.returncode, "freed": False, "correct": r.returncode == 4 and survived,
                "wrong_signal": not survived, "seconds": seconds, "classes": []}
    finally:
        for p in pids:
            try:
                fd = os.pidfd_open(p)
            except OSError:
                continue
            try:
                signal.pidfd_send_signal(fd, signal.SIGKILL)
            except OSError:
                pass
            os.close(fd)
        if shell:
            shell.wait()
        subprocess.run([sim, "cleanup", "--dir", node], capture_output=True, env=env)
        subprocess.run(["rm", "-rf", node])


def make_node(sim, node, env):
    """A fresh simulated node in `node`; its variables and a private state dir into `env`."""
    out = subprocess.run([sim, "node", "--dir", node, "--gpus", "4", "--memory", "96GiB"],
                         capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        if line.startswith("export "):
            k, v = line[len("export "):].split("=", 1)
            env[k] = v.strip("'\"")
    env["GPUREAP_STATE_DIR"] = os.path.join(node, "state")


def run_shape(build, name, spec):
    hold_args, free_args, mode, want_rc, want_class = spec
    sim = os.path.join(build, "sim", "gpureap-sim")
    gpureap = os.path.join(build, "gpureap")
    node = tempfile.mkdtemp(prefix="gpureap-adv-")
    env = dict(os.environ)
    try:
        make_node(sim, node, env)
        hold = [sim, "hold", "--dir", node, "--gpu", str(GPU)] + hold_args
        if "--daemon" not in hold_args:
            hold.append("--detach")
        subprocess.run(hold, capture_output=True, text=True, check=True, env=env, timeout=30)
        if mode:
            subprocess.run([sim, "mode", "--dir", node, "--gpu", str(GPU), mode], check=True,
                           env=env, capture_output=True)
        t0 = time.monotonic()
        r = subprocess.run([gpureap, "free", "--json", "--yes", "--gpu", str(GPU)] + free_args,
                           capture_output=True, text=True, env=env, timeout=120)
        seconds = time.monotonic() - t0
        try:
            report = json.loads(r.stdout)
        except ValueError:
            report = {}
        if mode:
            subprocess.run([sim, "mode", "--dir", node, "ok"], env=env, capture_output=True)
        st = subprocess.run([gpureap, "--json", "status", "--gpu", str(GPU)],
                            capture_output=True, text=True, env=env, timeout=60)
        gpu = json.loads(st.stdout)["gpus"][0]
        mem = gpu["memory"]
        freed = mem["used_bytes"] <= mem["baseline_bytes"] + 512 * 1024 * 1024
        classes = [l["class"] for l in report.get("leftovers", []) if l["gpu"] == GPU]
        correct = r.returncode == want_rc and (
            (want_class is None and freed) or (want_class is not None and want_class in classes))
        return {"rc": r.returncode, "freed": freed, "correct": correct, "seconds": seconds,
                "classes": classes}
    finally:
        subprocess.run([sim, "cleanup", "--dir", node], capture_output=True, env=env)
        subprocess.run(["rm", "-rf", node])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--build", default="build-release")
    ap.add_argument("--json", dest="json_out")
    ap.add_argument("--shapes", default=",".join(list(SHAPES) + list(SPARED)))
    a = ap.parse_args()
    if not os.access(os.path.join(a.build, "gpureap"), os.X_OK):
        sys.exit(f"no gpureap in {a.build}: run `make release` first")
    results = {}
    print(f"{'shape':<20} {'runs':>4} {'freed':>5} {'correct':>7} {'wrong rc':>8} "
          f"{'wrong sig':>9}   seconds min / median / max")
    for name in a.shapes.split(","):
        if name in SPARED:
            runs = [run_spared(a.build, name, SPARED[name]) for _ in range(a.reps)]
            want_rc = 4
        else:
            runs = [run_shape(a.build, name, SHAPES[name]) for _ in range(a.reps)]
            want_rc = SHAPES[name][3]
        t = [x["seconds"] for x in runs]
        row = {"runs": len(runs), "freed": sum(x["freed"] for x in runs),
               "correct": sum(x["correct"] for x in runs),
               "wrong_exit": sum(x["rc"] != want_rc for x in runs),
               "wrong_signals": sum(x.get("wrong_signal", False) for x in runs),
               "seconds_min": min(t), "seconds_median": statistics.median(t),
               "seconds_max": max(t)}
        results[name] = row
        print(f"{name:<20} {row['runs']:>4} {row['freed']:>5} {row['correct']:>7} "
              f"{row['wrong_exit']:>8} {row['wrong_signals']:>9}   {min(t):.3f} / {statistics.median(t):.3f} / {max(t):.3f}",
              flush=True)
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(results, f, indent=1)
    sys.exit(0 if all(r["correct"] == r["runs"] for r in results.values()) else 1)


if __name__ == "__main__":
    main()
