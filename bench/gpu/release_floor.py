#!/usr/bin/env python3
"""The driver's release floor (issue 41, runs 1 and 3), to calibrate the release model.

device, pinned: a holder (bench/gpu/cuda_holder.py) allocates; its /proc/PID/status memory
lines (VmPin, VmLck, ...) are read; it is SIGKILLed through a pidfd; NVML is polled every
--poll-ms: seconds from the kill to the holder's exit, to NVML no longer listing it, and to
the GPU's used memory back at its baseline (within --tolerance-mib).
  device    cudaMalloc 10, 50, 120 GiB
  pinned    20 GiB cudaMalloc beside 20 and 50 GiB of pinned host memory, by cudaHostRegister
            of a malloc'd buffer and by cudaHostAlloc (at most 50 GiB pinned at a time)
free: the case study (4 orphaned workers x 20 GiB; torch on the GPU), alternately the floor
(SIGKILL the workers, poll until baseline) and `gpureap free --gpu 0 --yes --json` with NVML
polled while it runs: free's wall time over the memory's return in the same run, and over
the floor.

  python3 bench/gpu/release_floor.py --cases device,pinned --out release_floor.json   # GPU
  python3 bench/gpu/release_floor.py --cases free --gpureap BIN --out free_floor.json  # GPU
  python3 bench/gpu/release_floor.py --sim build/sim/gpureap-sim --gpureap build/gpureap \
      --cases device,pinned,free --out sim.json       # here: a simulated H200, gpureap-sim hold
"""
import argparse
import shutil
import json
import os
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "gpu"))
from nvml_ctypes import Nvml  # noqa: E402

GIB = 1 << 30
DEVICE = [("device-10", 10, 0, None), ("device-50", 50, 0, None), ("device-120", 120, 0, None)]
PINNED = [(f"pinned-{how}-{p}", 20, p, how) for p in (20, 50) for how in ("register", "hostalloc")]


def proc_memory(pid):
    """The memory lines of /proc/PID/status (kB -> bytes) and the bytes mapped from /dev/nvidia*."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key.startswith(("Vm", "Rss")):
                out[key] = int(value.split()[0]) * 1024
    mapped = 0
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and "/dev/nvidia" in parts[5]:  # also a simulated node's D/dev
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                mapped += hi - lo
    out["nvidia_mapped"] = mapped
    return out


class Gpu:
    """NVML on GPU 0 and the baseline rule."""

    def __init__(self, tolerance):
        self.nvml = Nvml()
        self.h = self.nvml.device(0)
        self.tolerance = tolerance

    def used(self):
        return self.nvml.memory(self.h)[1]

    def listed(self):
        return {pid for pid, _ in self.nvml.processes(self.h)}

    def watch(self, t0, pids, baseline, poll_s, deadline_s, until_exit=None):
        """Polls from t0: seconds to each pid unlisted (all of them), to baseline, and to
        until_exit's end (a Popen) when given; a trace of the changes."""
        fds = {pid: os.pidfd_open(pid) for pid in pids if pid_alive(pid)}
        r = {"exited_s": None, "unlisted_s": None, "baseline_s": None, "trace": []}
        exits, last, tick = {}, None, t0
        while True:
            now = time.monotonic() - t0
            used, listed = self.used(), self.listed() & set(pids)
            # The pidfds after NVML: an exit that this reading already reflects (memory
            # back, the pid unlisted) is counted in this poll, not the next one; read
            # before NVML, a holder dying between the two was seen released first.
            for pid, fd in list(fds.items()):
                if select.select([fd], [], [], 0)[0]:
                    exits[pid] = now
                    os.close(fds.pop(pid))
            if r["unlisted_s"] is None and not listed:
                r["unlisted_s"] = now
            if r["baseline_s"] is None and used <= baseline + self.tolerance:
                r["baseline_s"] = now
            if (used, len(listed)) != last:
                r["trace"].append([round(now, 4), used, len(listed)])
                last = (used, len(listed))
            ended = until_exit is None or until_exit.poll() is not None
            if ended and until_exit is not None and "command_s" not in r:
                r["command_s"] = now
            if (not fds and r["unlisted_s"] is not None and r["baseline_s"] is not None
                    and ended) or now > deadline_s:
                break
            tick += poll_s
            time.sleep(max(0.0, tick - time.monotonic()))
        for fd in fds.values():
            os.close(fd)
        if exits:
            r["exited_s"] = max(exits.values()) if len(exits) == len(pids) else None
        r["timed_out"] = now > deadline_s
        return r


def meminfo():
    """The host's MemTotal and MemAvailable (bytes): a VM's memory can grow as it is used."""
    with open("/proc/meminfo") as f:
        return {k: int(v.split()[0]) * 1024 for k, _, v in (l.partition(":") for l in f)
                if k in ("MemTotal", "MemAvailable")}


def pid_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def read_line(p, seconds):
    if select.select([p.stdout], [], [], seconds)[0]:
        return p.stdout.readline()
    return ""


def kill_pids(pids):
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            continue
        try:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        except OSError:
            pass
        os.close(fd)


class Holders:
    """How holders are started: cuda_holder.py on the GPU, gpureap-sim hold here."""

    def __init__(self, sim):
        self.sim = sim
        self.node = None
        if sim:
            self.node = tempfile.mkdtemp(prefix="gpureap-release-floor-")
            out = subprocess.run([sim, "node", "--dir", self.node, "--gpus", "1", "--memory",
                                  "141GiB", "--name", "NVIDIA H200"], check=True,
                                 capture_output=True, text=True).stdout
            for line in out.splitlines():
                name, _, value = line.removeprefix("export ").partition("=")
                os.environ[name] = value.strip("'\"")
            help_text = subprocess.run([sim, "hold", "--help"], capture_output=True, text=True)
            self.pinned_host = "--pinned-host" in help_text.stdout

    def argv(self, device_gib, pinned_gib, how):
        if not self.sim:
            argv = [sys.executable, os.path.join(HERE, "cuda_holder.py"), "--device-gib",
                    str(device_gib)]
            return argv + (["--pinned-gib", str(pinned_gib), "--pinned", how] if pinned_gib else [])
        argv = [self.sim, "hold", "--dir", self.node, "--gpu", "0", "--bytes", f"{device_gib}GiB"]
        if pinned_gib:  # the simulator's model of pinned memory, or a stand-in release delay
            argv += ["--pinned-host", f"{pinned_gib}GiB"] if self.pinned_host else \
                ["--release-delay", "200ms"]
        return argv

    def orphans(self, scenario):
        """The case study: 4 workers x 20 GiB on GPU 0, their server SIGKILLed."""
        if not self.sim:
            return scenario.orphaned_workers(n=4, gib=20)
        out = subprocess.run([self.sim, "hold", "--dir", self.node, "--gpu", "0", "--children",
                              "4", "--same-gpu", "--bytes", "20GiB", "--orphan", "--detach"],
                             check=True, capture_output=True, text=True).stdout
        return [h["pid"] for h in json.loads(out)["holders"]]

    def cleanup(self):
        if self.sim:
            subprocess.run([self.sim, "cleanup", "--dir", self.node], capture_output=True)


def release_case(gpu, holders, case, args):
    name, device_gib, pinned_gib, how = case
    baseline = gpu.used()
    argv = holders.argv(device_gib, pinned_gib, how)
    r = {"case": name, "device_gib": device_gib, "pinned_gib": pinned_gib, "pinned": how,
         "holder_argv": argv, "baseline": baseline, "meminfo": meminfo()}
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        line = read_line(p, args.alloc_timeout)
        info = json.loads(line) if line else {"error": f"no line within {args.alloc_timeout} s"}
        if "error" in info:
            r["error"] = info["error"]
            return r
        pids = [h["pid"] for h in info["holders"]]
        r["timings"] = info.get("timings", {})
        r["used_held"] = gpu.used()
        r["listed_before_kill"] = sorted(gpu.listed() & set(pids)) == sorted(pids)
        r["proc_status"] = {str(pid): proc_memory(pid) for pid in pids}
        t0 = time.monotonic()
        kill_pids(pids)
        w = gpu.watch(t0, pids, baseline, args.poll_ms / 1000, args.deadline)
        r.update(w)
        return r
    finally:
        p.kill()
        p.wait()


def free_round(gpu, holders, args, method):
    """One round of the case study: 'floor' kills the workers, 'free' runs gpureap free."""
    from gpu_scenario import Scenario
    baseline = gpu.used()
    with Scenario() as s:
        workers = holders.orphans(s)
        t0 = time.monotonic()
        if method == "floor":
            kill_pids(workers)
            w = gpu.watch(t0, workers, baseline, args.free_poll_ms / 1000, args.deadline)
            return {"method": method, **w}
        argv = [args.gpureap, "free", "--gpu", "0", "--yes", "--json"]
        traced = method == "free-traced"
        if traced:  # strace's -ttt clock is the wall clock: t0 on it too, to line them up
            trace = os.path.join(args.trace_dir, f"free-{time.time_ns()}.strace")
            argv = ["strace", "-f", "-ttt", "-o", trace] + argv
        t0_wall = time.time()
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        w = gpu.watch(t0, workers, baseline, args.free_poll_ms / 1000, args.deadline, until_exit=p)
        out, err = p.communicate()
        r = {"method": method, "exit": p.returncode, **w}
        if traced:
            r.update(strace=trace, t0_wall=t0_wall)
        try:
            doc = json.loads(out)
            r["gpus"] = doc["gpus"]
            # free's own clock: its actions (sent, exited) and its whole run, from its start
            r["free_seconds"] = doc.get("seconds")
            r["free_actions"] = [{k: a.get(k) for k in ("pid", "signal", "sent_at_seconds",
                                                        "exited_at_seconds", "exiting_at_seconds")}
                                 for a in doc.get("actions", [])]
            r["free_steps"] = doc.get("steps")
        except (ValueError, KeyError):
            r["output"] = (out + err)[-2000:]
        if r.get("command_s") and r["baseline_s"]:
            r["command_over_memory_back"] = r["command_s"] / r["baseline_s"]
            r["command_after_memory_back_s"] = r["command_s"] - r["baseline_s"]
        return r


def median(rows, key):
    v = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(v) if v else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", default="device,pinned", help="device, pinned, free")
    ap.add_argument("--out", required=True)
    ap.add_argument("--sim", help="gpureap-sim: a simulated H200 with gpureap-sim hold holders")
    ap.add_argument("--gpureap", default=os.environ.get("GPUREAP_BIN"), help="for --cases free")
    ap.add_argument("--reps", type=int, default=3, help="rounds of each device case")
    ap.add_argument("--pinned-reps", type=int, default=1)
    ap.add_argument("--free-reps", type=int, default=5, help="rounds of floor and of free")
    ap.add_argument("--poll-ms", type=float, default=10)
    ap.add_argument("--free-poll-ms", type=float, default=2)
    ap.add_argument("--trace-reps", type=int, default=0,
                    help="more rounds of free under strace -f -ttt (not in the medians)")
    ap.add_argument("--trace-dir", default=".", help="where the traced rounds' strace files go")
    ap.add_argument("--tolerance-mib", type=int, default=64, help="'at baseline' within this")
    ap.add_argument("--deadline", type=float, default=90, help="seconds a release is watched")
    ap.add_argument("--alloc-timeout", type=float, default=120)
    ap.add_argument("--budget", type=float, default=1e9, help="seconds; later rounds skipped")
    args = ap.parse_args()
    cases = set(args.cases.split(","))
    if "free" in cases and not args.gpureap:
        ap.error("--cases free needs --gpureap BIN (or GPUREAP_BIN)")

    start = time.monotonic()
    # `timeout` stops a step with SIGTERM: end through the finally clauses, which kill the holders.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    os.environ.setdefault("GPUREAP_STATE_DIR", tempfile.mkdtemp(prefix="gpureap-state-"))
    holders = Holders(args.sim)
    gpu = Gpu(args.tolerance_mib << 20)
    result = {"simulated": bool(args.sim), "driver_version": gpu.nvml.driver_version(),
              "total": gpu.nvml.memory(gpu.h)[0], "poll_ms": args.poll_ms,
              "tolerance_bytes": gpu.tolerance, "cases": [], "free": [], "skipped": []}
    plan = [(c, args.reps) for c in DEVICE if "device" in cases]
    plan += [(c, args.pinned_reps) for c in PINNED if "pinned" in cases]
    rounds = [("case", c) for c, reps in plan for _ in range(reps)]
    if "free" in cases:
        rounds += [("free", m) for _ in range(args.free_reps) for m in ("floor", "free")]
        if args.trace_reps and shutil.which("strace"):
            rounds += [("free", "free-traced")] * args.trace_reps
        elif args.trace_reps:
            result["skipped"].append("free-traced: no strace on this machine")
    try:
        unreleased_pin = False  # a pinned round not back at baseline: pin no more beside it
        for kind, what in rounds:
            if time.monotonic() - start > args.budget or (kind == "case" and what[2]
                                                          and unreleased_pin):
                result["skipped"].append(what[0] if kind == "case" else what)
                continue
            if kind == "case":
                r = release_case(gpu, holders, what, args)
                result["cases"].append(r)
                unreleased_pin |= bool(what[2]) and "error" not in r and r["baseline_s"] is None
            else:
                r = free_round(gpu, holders, args, what)
                result["free"].append(r)
            print(json.dumps({k: v for k, v in r.items() if k in BRIEF}), flush=True)
            write(args.out, result)  # each round, so a stopped run keeps what it measured
    finally:
        holders.cleanup()
    summary = {}
    for name, *_ in DEVICE + PINNED:
        rows = [r for r in result["cases"] if r["case"] == name and "error" not in r]
        if rows:
            summary[name] = {k: median(rows, k) for k in ("exited_s", "unlisted_s", "baseline_s")}
            summary[name]["VmPin+VmLck"] = max(
                m.get("VmPin", 0) + m.get("VmLck", 0) for r in rows for m in r["proc_status"].values())
    floor = [r for r in result["free"] if r["method"] == "floor"]
    free = [r for r in result["free"] if r["method"] == "free"]
    if floor and free:
        summary["free"] = {
            "floor_baseline_s": median(floor, "baseline_s"),
            "free_command_s": median(free, "command_s"),
            "free_memory_back_s": median(free, "baseline_s"),
            "free_over_memory_back_same_run": median(free, "command_over_memory_back"),
            "free_after_memory_back_s": median(free, "command_after_memory_back_s"),
            "freed_every_time": all(r.get("exit") == 0 for r in free)}
        if summary["free"]["floor_baseline_s"] and summary["free"]["free_command_s"]:
            summary["free"]["free_over_floor"] = (summary["free"]["free_command_s"]
                                                  / summary["free"]["floor_baseline_s"])
    result["summary"] = summary
    result["wall_s"] = time.monotonic() - start
    print(json.dumps(summary, indent=1))
    write(args.out, result)


BRIEF = ("case", "method", "error", "timings", "exited_s", "unlisted_s", "baseline_s",
         "command_s", "exit", "timed_out")


def write(path, result):
    with open(path + ".tmp", "w") as f:
        json.dump(result, f, indent=1)
    os.replace(path + ".tmp", path)


if __name__ == "__main__":
    main()
