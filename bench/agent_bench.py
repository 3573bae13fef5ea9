#!/usr/bin/env python3
"""Benchmarks of `gpureap watch` (issue 11; docs/benchmarks.md, "The agent").

  agent_bench.py sim [--out F] [--procs 1000,10000] [--seconds 60]   CPU machine, simulated node
  agent_bench.py gpu [--out F]                                      the GPU machine (H200)
  agent_bench.py cpu --baseline OLD [--procs 10000] [--seconds 300] [--rounds 2]
                                                    CPU machine: two builds' agents, alternating

status: the whole `gpureap status` process answered by the agent, against a
direct scan (GPUREAP_NO_AGENT=1) and against nvidia-smi, alternating in one run,
with the case study present (orphaned workers).
event: time from the SIGKILL of a server to the agent's orphaned_memory line.
cpu (sim only): the agent's CPU (its own and its NVML worker's) at the default
settings with N idle processes on the node, against the same agent doing a full
/proc rescan at every tick (--full-scan-interval = --tick), same run.
cpu: the agent's CPU at its defaults with N idle processes, --gpureap against
--baseline (an earlier build), alternating in one run (rounds x both), each over
--seconds after start-up: long, since the new agent's full scan may run only every
few minutes (the window's full scans are counted, from the per-second CPU).
Medians and ratios on stdout; JSON to --out.
"""
import argparse
import json
import os
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def timed(argv, env):
    t = time.perf_counter()
    r = subprocess.run(argv, env=env, capture_output=True, text=True)
    return time.perf_counter() - t, r


def cpu_of(pid):
    """utime+stime of one process, in seconds (0 when gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0.0


def children_of(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def cpu_of_tree(pid):
    """utime+stime of `pid` and its children (an NVML worker), in seconds."""
    return cpu_of(pid) + sum(cpu_of(c) for c in children_of(pid))


class EventReader:
    """A child that writes JSON lines; each read with a deadline."""

    def __init__(self, argv, env=None):
        self.p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.buf = b""

    def next_event(self, kind, timeout):
        # Lines are split here, from raw reads: select() on a buffered file object
        # misses lines already read into its buffer (two events in one read: the
        # second was never seen, "no memory_freed event within 10 s").
        deadline = time.time() + timeout
        fd = self.p.stdout.fileno()
        while True:
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                event = json.loads(line)
                if event.get("event") == kind:
                    return event, time.time()
            left = deadline - time.time()
            if left <= 0:
                break
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                break
            chunk = os.read(fd, 65536)
            if not chunk:
                raise RuntimeError("agent exited: " + self.p.stderr.read().decode(errors="replace"))
            self.buf += chunk
        raise RuntimeError(f"no {kind} event within {timeout} s")


class Agent(EventReader):
    """`gpureap --json watch` as a child; its JSON lines read with a deadline."""

    def __init__(self, gpureap, env, *args):
        super().__init__([gpureap, "--json", "watch", "--no-listen", *args], env)
        self.started = self.next_event("started", 30)

    def cpu_seconds(self):
        """utime+stime of the agent and its children (the NVML worker), in seconds."""
        return cpu_of_tree(self.p.pid)

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        try:
            return self.p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.p.kill()
            return self.p.wait()


def median_ms(xs):
    return round(statistics.median(xs) * 1000, 2)


def bench_status(gpureap, env, smi, reps):
    direct_env = dict(env, GPUREAP_NO_AGENT="1")
    agent, direct, nvsmi = [], [], []
    for _ in range(reps):
        dt, r = timed([gpureap, "status"], env)
        assert r.returncode == 0, r.stderr
        agent.append(dt)
        dt, r = timed([gpureap, "status"], direct_env)
        assert r.returncode == 0, r.stderr
        direct.append(dt)
        dt, r = timed([smi], env)
        nvsmi.append(dt)
    _, r = timed([gpureap, "--json", "status"], env)
    source = json.loads(r.stdout).get("source")
    return {"reps": reps, "agent_ms": median_ms(agent), "direct_ms": median_ms(direct),
            "nvidia_smi_ms": median_ms(nvsmi), "answered_by": source,
            "ratio_nvidia_smi_over_agent": round(statistics.median(nvsmi) / statistics.median(agent), 1),
            "ratio_direct_over_agent": round(statistics.median(direct) / statistics.median(agent), 1)}


def sim_node(tmp, gpus=8):
    sim = os.path.join(ROOT, "build-release", "sim", "gpureap-sim")
    if not os.path.exists(sim):
        sim = os.path.join(ROOT, "build", "sim", "gpureap-sim")
    out = subprocess.run([sim, "node", "--dir", os.path.join(tmp, "node"), "--gpus", str(gpus),
                          "--memory", "96GiB"], capture_output=True, text=True, check=True).stdout
    env = dict(os.environ)
    for line in out.splitlines():
        if line.startswith("export "):
            k, v = line[len("export "):].split("=", 1)
            env[k] = v.strip("'\"")
    env["GPUREAP_STATE_DIR"] = os.path.join(tmp, "state")
    os.makedirs(env["GPUREAP_STATE_DIR"], mode=0o700)
    return sim, env


def sim_event_latency(sim, env, agent, reps):
    lat = []
    for i in range(reps):
        p = subprocess.Popen([sim, "hold", "--gpu", "0", "--children", "8", "--bytes", "20GiB"],
                             env=env, stdout=subprocess.PIPE, text=True)
        json.loads(p.stdout.readline())
        time.sleep(1.5)  # the agent has seen the holders (at its next tick, 1 s)
        t0 = time.time()
        p.kill()
        p.wait()
        _, seen = agent.next_event("orphaned_memory", 10)
        lat.append(seen - t0)
        subprocess.run([sim, "cleanup"], env=env, capture_output=True)
        agent.next_event("memory_freed", 10)
    return {"reps": reps, "median_ms": median_ms(lat), "max_ms": round(max(lat) * 1000, 2)}


def spawn_idle(n):
    """n idle processes (sleep), ours, killed by pid at the end."""
    procs = []
    for _ in range(n):
        procs.append(subprocess.Popen(["sleep", "3600"], stdin=subprocess.DEVNULL,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return procs


def cpu_run(gpureap, env, seconds, *args):
    agent = Agent(gpureap, env, *args)
    time.sleep(2)  # past the start-up full scan
    c0, t0 = agent.cpu_seconds(), time.time()
    time.sleep(seconds)
    c1, t1 = agent.cpu_seconds(), time.time()
    agent.stop()
    return (c1 - c0) / (t1 - t0)


def cpu_window(gpureap, env, seconds, agent=None):
    """One agent at its defaults (or `agent`, running): its own CPU and its children's
    (the NVML worker) over `seconds` after start-up, and the seconds in which it took
    more than 0.1 s (its full scans, at 10,000 processes)."""
    if agent is None:
        agent = Agent(gpureap, env)
        time.sleep(2)  # past the start-up full scan
    pid = agent.p.pid
    own0 = cpu_of(pid)
    kids0 = {c: cpu_of(c) for c in children_of(pid)}
    t0 = time.time()
    last, bursts = own0, 0
    while time.time() - t0 < seconds:
        time.sleep(1)
        now = cpu_of(pid)
        if now - last > 0.1:
            bursts += 1
        last = now
    own1 = cpu_of(pid)
    kids1 = {c: cpu_of(c) for c in children_of(pid)}
    t1 = time.time()
    agent.stop()
    kids = sum(v - kids0.get(c, 0.0) for c, v in kids1.items())
    return {"agent_core_percent": round((own1 - own0) / (t1 - t0) * 100, 3),
            "nvml_worker_core_percent": round(kids / (t1 - t0) * 100, 3),
            "total_core_percent": round((own1 - own0 + kids) / (t1 - t0) * 100, 3),
            "seconds_over_0_1s_cpu": bursts, "seconds": round(t1 - t0, 1)}


def rss_kib(pid):
    """VmRSS of one process, KiB (0 when gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def cpu_window_spawned(gpureap, env, seconds, n):
    """--spawn-after: the agent starts first, then the n idle processes start (each a
    fork and an exec the proc connector reports, each kept in the agent's lineage
    table): the agent's CPU while they start, its resident memory before and after,
    then the usual window with them all running."""
    agent = Agent(gpureap, env)
    time.sleep(2)  # past the start-up full scan
    pid = agent.p.pid
    rss0, c0, t0 = rss_kib(pid), cpu_of(pid), time.time()
    idle = spawn_idle(n)
    time.sleep(2)  # the last events drained
    c1, t1 = cpu_of(pid), time.time()
    rss1 = rss_kib(pid)
    try:
        w = cpu_window(gpureap, env, seconds, agent)
    finally:
        for p in idle:
            p.kill()
        for p in idle:
            p.wait()
    w.update({"spawn_agent_cpu_seconds": round(c1 - c0, 3), "spawn_seconds": round(t1 - t0, 1),
              "rss_kib_before_spawn": rss0, "rss_kib_after_spawn": rss1,
              "rss_bytes_per_process": round((rss1 - rss0) * 1024 / n, 1)})
    return w


def loadavg():
    with open("/proc/loadavg") as f:
        return f.read().split()[:3]


def main_cpu(a):
    """--gpureap against --baseline, alternating, same run, same idle processes."""
    results = {"machine": "cpu, simulated node", "nproc": os.cpu_count(),
               "new": a.gpureap, "baseline": a.baseline, "spawn_after": a.spawn_after, "rows": []}
    with tempfile.TemporaryDirectory(prefix="gpureap-agent-bench-") as tmp:
        sim, env = sim_node(tmp)
        try:
            for n in [int(x) for x in a.procs.split(",") if x]:
                idle = [] if a.spawn_after else spawn_idle(n)
                runs = {"baseline": [], "new": []}
                try:
                    for r in range(a.rounds):
                        for name, binary in (("baseline", a.baseline), ("new", a.gpureap)):
                            load0 = loadavg()
                            w = (cpu_window_spawned(binary, env, a.seconds, n) if a.spawn_after
                                 else cpu_window(binary, env, a.seconds))
                            w["round"], w["loadavg_before"], w["loadavg_after"] = r, load0, loadavg()
                            runs[name].append(w)
                            print("cpu", n, name, w, flush=True)
                finally:
                    for p in idle:
                        p.kill()
                    for p in idle:
                        p.wait()
                row = {"processes": n, "runs": runs}
                for name in runs:
                    row[name + "_total_core_percent_median"] = round(statistics.median(
                        w["total_core_percent"] for w in runs[name]), 3)
                results["rows"].append(row)
                print("cpu", n, {k: v for k, v in row.items() if k != "runs"}, flush=True)
        finally:
            subprocess.run([sim, "cleanup"], env=env, capture_output=True)
    return results


def main_sim(a):
    gpureap = a.gpureap
    results = {"machine": "cpu, simulated node", "nproc": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="gpureap-agent-bench-") as tmp:
        sim, env = sim_node(tmp)
        try:
            subprocess.run([sim, "hold", "--gpu", "0", "--children", "8", "--bytes", "20GiB",
                            "--orphan", "--detach"], env=env, check=True, capture_output=True)
            agent = Agent(gpureap, env)
            results["status"] = bench_status(gpureap, env, os.path.join(env["GPUREAP_SIM_DIR"], "bin", "nvidia-smi"), a.reps)
            print("status", results["status"], flush=True)
            subprocess.run([sim, "cleanup"], env=env, capture_output=True)
            agent.next_event("memory_freed", 10)
            results["event"] = sim_event_latency(sim, env, agent, a.event_reps)
            print("event", results["event"], flush=True)
            agent.stop()
            results["cpu"] = []
            for n in [int(x) for x in a.procs.split(",") if x]:
                idle = spawn_idle(n)
                try:
                    inc = cpu_run(gpureap, env, a.seconds)
                    full = cpu_run(gpureap, env, a.seconds, "--full-scan-interval", "1s")
                finally:
                    for p in idle:
                        p.kill()
                    for p in idle:
                        p.wait()
                row = {"processes": n, "agent_core_percent": round(inc * 100, 3),
                       "full_rescan_each_tick_core_percent": round(full * 100, 3),
                       "ratio": round(full / inc, 1) if inc > 0 else None, "seconds": a.seconds}
                results["cpu"].append(row)
                print("cpu", row, flush=True)
        finally:
            subprocess.run([sim, "cleanup"], env=env, capture_output=True)
    return results


def main_gpu(a):
    sys.path.insert(0, os.path.join(ROOT, "tests", "gpu"))
    from gpu_scenario import SERVER, WORKER, Scenario  # noqa: E402
    gpureap = a.gpureap
    env = dict(os.environ)
    env.setdefault("GPUREAP_STATE_DIR", "/tmp/gpureap-state")
    os.makedirs(env["GPUREAP_STATE_DIR"], mode=0o700, exist_ok=True)
    results = {"machine": "gpu"}
    agent = Agent(gpureap, env)
    try:
        with Scenario() as s:
            lat = []
            for _ in range(a.event_reps):
                p = subprocess.Popen([sys.executable, "-c", SERVER, "4", "4", "same", WORKER],
                                     stdout=subprocess.PIPE, text=True)
                s.popen.append(p)
                info = json.loads(p.stdout.readline())
                for pid in [info["server"]] + info["workers"]:
                    s.track(pid)
                time.sleep(1.5)  # the agent has listed the workers (tick 1 s)
                t0 = time.time()
                os.kill(p.pid, signal.SIGKILL)
                p.wait()
                _, seen = agent.next_event("orphaned_memory", 15)
                lat.append(seen - t0)
                if len(lat) < a.event_reps:
                    subprocess.run([gpureap, "free", "--gpu", "0", "--yes"], env=env, capture_output=True)
                    agent.next_event("memory_freed", 30)
            results["event"] = {"reps": len(lat), "median_ms": median_ms(lat), "max_ms": round(max(lat) * 1000, 2)}
            print("event", results["event"], flush=True)
            results["status"] = bench_status(gpureap, env, "nvidia-smi", a.reps)
            print("status", results["status"], flush=True)
            subprocess.run([gpureap, "free", "--gpu", "0", "--yes"], env=env, capture_output=True)
    finally:
        agent.stop()
    return results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["sim", "gpu", "cpu"])
    ap.add_argument("--baseline", help="cpu: the earlier build's gpureap to compare with")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--gpureap", default=os.environ.get("GPUREAP_BIN", os.path.join(ROOT, "build-release", "gpureap")))
    ap.add_argument("--out")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--event-reps", type=int, default=5)
    ap.add_argument("--procs", default="1000,10000")
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--spawn-after", action="store_true",
                    help="cpu: start the processes after each agent (its lineage table holds them)")
    a = ap.parse_args()
    if a.mode == "cpu" and not a.baseline:
        ap.error("cpu needs --baseline")
    if a.mode == "cpu" and a.seconds == 60:
        a.seconds = 300
    results = {"sim": main_sim, "gpu": main_gpu, "cpu": main_cpu}[a.mode](a)
    print(json.dumps(results, indent=2))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
