"""Real-GPU scenarios for tests and benchmarks: torch processes holding memory.

The case study: a parent ("server") spawns N workers that each hold GIB GiB on
the GPU, then the parent is SIGKILLed and the workers are orphaned. Every
process started here is tracked and killed (through pidfds) by cleanup().
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
GPUREAP = os.environ.get("GPUREAP_BIN", os.path.join(ROOT, "build", "gpureap"))

WORKER = r"""
import os, sys, time, torch
gib = float(sys.argv[1]); dev = int(sys.argv[2])
torch.cuda.set_device(dev)
x = torch.empty(int(gib * (1 << 30)), dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
print(os.getpid(), flush=True)
while True:
    time.sleep(3600)
"""

SERVER = r"""
import json, os, subprocess, sys, time
n = int(sys.argv[1]); gib = sys.argv[2]; same = sys.argv[3] == "same"; worker = sys.argv[4]
procs = [subprocess.Popen([sys.executable, "-c", worker, gib, "0" if same else str(i)],
                          stdout=subprocess.PIPE, text=True) for i in range(n)]
pids = [int(p.stdout.readline()) for p in procs]
print(json.dumps({"server": os.getpid(), "workers": pids}), flush=True)
while True:
    time.sleep(3600)
"""

# A "server" whose workers carry SGLang's process titles, as setproctitle sets them:
# argv[0] of each worker is sglang::scheduler_TP<k> (issue 24).
TITLED_SERVER = r"""
import json, os, subprocess, sys, time
n = int(sys.argv[1]); gib = sys.argv[2]; worker = sys.argv[3]
# With argv[0] a title, Python cannot find its venv from argv[0]: give it our path.
env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
procs = [subprocess.Popen([f"sglang::scheduler_TP{i}", "-c", worker, gib, "0"],
                          executable=sys.executable, stdout=subprocess.PIPE, text=True, env=env)
         for i in range(n)]
pids = [int(p.stdout.readline()) for p in procs]
print(json.dumps({"server": os.getpid(), "workers": pids}), flush=True)
while True:
    time.sleep(3600)
"""

# A server whose workers retitle themselves as SGLang's do at run time (setproctitle: the
# comm and argv's memory become sglang::scheduler_TP<k>, so /proc/PID/cmdline is the title
# alone): bench/gpu/cuda_holder.py with its allocator's flags (--torch, or --no-gpu on a
# simulated node).
SGLANG_SERVER = r"""
import json, os, subprocess, sys, time
n = int(sys.argv[1]); holder = sys.argv[2]; flags = sys.argv[3:]
procs = [subprocess.Popen([sys.executable, holder, *flags, "--title", f"sglang::scheduler_TP{i}"],
                          stdout=subprocess.PIPE, text=True) for i in range(n)]
pids = [json.loads(p.stdout.readline())["holders"][0]["pid"] for p in procs]
print(json.dumps({"server": os.getpid(), "workers": pids}), flush=True)
while True:
    time.sleep(3600)
"""
HOLDER = os.path.join(ROOT, "bench", "gpu", "cuda_holder.py")

# A supervisor that restarts its GPU worker once when it dies (a Restart=on-failure unit,
# a Ray raylet, a retry loop): the replacement imports torch and creates a CUDA context,
# which takes seconds, before it holds the GPU again.
SUPERVISOR = r"""
import json, os, subprocess, sys, time
gib = sys.argv[1]; worker = sys.argv[2]
p = subprocess.Popen([sys.executable, "-c", worker, gib, "0"], stdout=subprocess.PIPE, text=True)
first = int(p.stdout.readline())
print(json.dumps({"supervisor": os.getpid(), "worker": first}), flush=True)
p.wait()
p = subprocess.Popen([sys.executable, "-c", worker, gib, "0"], stdout=subprocess.DEVNULL)
while True:
    time.sleep(3600)
"""

ZOMBIE_LEADER = r"""
import ctypes, os, sys, threading, time, torch
gib = float(sys.argv[1])
ready = threading.Event()
def hold():
    x = torch.empty(int(gib * (1 << 30)), dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    ready.set()
    while True:
        time.sleep(3600)
threading.Thread(target=hold, daemon=False).start()
ready.wait()
print(os.getpid(), flush=True)
sys.stdout.flush()
# The main (leader) thread exits at the OS level; the CUDA context lives on in
# the other thread. ctypes releases the GIL during the call.
ctypes.CDLL(None).syscall(60, 0)
"""


def have_gpu():
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        import torch  # noqa: F401
        return torch.cuda.is_available()
    except Exception:
        return False


def kill_verified(pid, start_time=None):
    """SIGKILL through a pidfd, only if pid still names the process we started."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return
    try:
        if start_time is None or proc_start_time(pid) == start_time:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
    except OSError:
        pass
    finally:
        os.close(fd)


def proc_start_time(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return None
    return int(s[s.rindex(")") + 2:].split()[19])


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return False
    return s[s.rindex(")") + 2] not in "ZX"


def descendants(pid):
    """Every live descendant of pid (by /proc's parent links), deepest last."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def card_total_bytes(index=0):
    """The card's total memory as NVML reports it, through gpureap's own status (the
    figure every test is sized by); None where no GPU answers."""
    try:
        r = subprocess.run([GPUREAP, "--no-agent", "--json", "status", "--gpu", str(index)],
                           capture_output=True, text=True, timeout=120)
        memory = json.loads(r.stdout)["gpus"][0]["memory"]
        return int(memory["total_bytes"])
    except (OSError, ValueError, KeyError, IndexError, TypeError, subprocess.SubprocessError):
        return None


def fitting_gib(n, gib, index=0):
    """gib, or less so that n holders of it fit in 80 % of the card's free memory (the
    scenarios were sized on a 141 GiB H200; an 80 GiB H100 cannot hold 4 x 20 GiB). The
    card's size comes from NVML (card_total_bytes), less what is in use now."""
    total = card_total_bytes(index)
    if not total:
        return gib  # no card to fit
    try:
        r = subprocess.run([GPUREAP, "--no-agent", "--json", "status", "--gpu", str(index)],
                           capture_output=True, text=True, timeout=120)
        used = int(json.loads(r.stdout)["gpus"][0]["memory"]["used_bytes"])
    except (OSError, ValueError, KeyError, IndexError, TypeError, subprocess.SubprocessError):
        used = 0
    return max(1, min(gib, int((total - used) * 0.80 / n) >> 30))


class Scenario:
    """Tracks every process it starts; cleanup() kills them all."""

    def __init__(self):
        self.tracked = []  # (pid, start_time)
        self.popen = []
        self.gib = None  # what the last sized scenario's holders took each

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.cleanup()

    def track(self, pid):
        self.tracked.append((pid, proc_start_time(pid)))

    def _orphaned_server(self, argv):
        """Starts a server (argv) that prints {"server", "workers"}, SIGKILLs it so its
        workers are orphaned; returns that line."""
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        self.popen.append(p)
        line = p.stdout.readline()
        try:
            info = json.loads(line)
        except ValueError:
            # A worker failed (out of memory on a smaller card): the server never printed
            # its line, so nothing is tracked yet. Kill what it started (our descendants,
            # by pid), or they keep their memory past the run (they did on an H100).
            for pid in descendants(p.pid):
                kill_verified(pid)
            os.kill(p.pid, signal.SIGKILL)
            p.wait()
            raise RuntimeError(f"the server gave no ready line: {line!r}")
        for pid in [info["server"]] + info["workers"]:
            self.track(pid)
        os.kill(p.pid, signal.SIGKILL)  # our own child, not yet reaped
        p.wait()
        return info

    def orphaned_workers(self, n=4, gib=20, same_gpu=True):
        """Server spawns n workers holding gib GiB each (less where the card is smaller:
        self.gib says how much); server is SIGKILLed."""
        self.gib = fitting_gib(n, gib)
        return self._orphaned_server([sys.executable, "-c", SERVER, str(n), str(self.gib),
                                      "same" if same_gpu else "spread", WORKER])["workers"]

    def titled_orphaned_workers(self, n=4, gib=8):
        """A server whose n workers carry SGLang titles (TP0..), SIGKILLed: returns
        (server pid, worker pids)."""
        info = self._orphaned_server([sys.executable, "-c", TITLED_SERVER, str(n), str(gib),
                                      WORKER])
        return info["server"], info["workers"]

    def sglang_orphans(self, n=4, gib=20, flags=("--torch",)):
        """n workers titled as SGLang's schedulers (set at run time, as setproctitle does),
        gib GiB each on GPU 0, their server SIGKILLed: returns (server pid, worker pids)."""
        gib = fitting_gib(n, gib)
        info = self._orphaned_server([sys.executable, "-c", SGLANG_SERVER, str(n), HOLDER, *flags,
                                      "--device-gib", str(gib)])
        return info["server"], info["workers"]

    def supervised_worker(self, gib=8):
        """A supervisor (our child) with one torch worker that it restarts once."""
        p = subprocess.Popen([sys.executable, "-c", SUPERVISOR, str(gib), WORKER],
                             stdout=subprocess.PIPE, text=True)
        self.popen.append(p)
        info = json.loads(p.stdout.readline())
        self.track(info["supervisor"])
        self.track(info["worker"])
        return info

    def zombie_leader(self, gib=8):
        p = subprocess.Popen([sys.executable, "-c", ZOMBIE_LEADER, str(gib)],
                             stdout=subprocess.PIPE, text=True)
        self.popen.append(p)
        pid = int(p.stdout.readline())
        self.track(pid)
        return pid, p

    def pidns_cgroup_worker(self, gib=8, name=None):
        """A worker in a child PID namespace (unshare --pid --fork) and its own cgroup."""
        mount = cgroup2_mount()
        if mount is None:
            return None
        name = name or f"gpureap-gpu-test-{os.getpid()}"
        cg = os.path.join(mount, name)
        os.makedirs(cg, exist_ok=True)
        self.cgroup = cg
        script = f'echo $$ > {cg}/cgroup.procs && exec unshare --pid --fork --mount-proc {sys.executable} -c "$0" {gib} 0'
        p = subprocess.Popen(["sh", "-c", script, WORKER], stdout=subprocess.PIPE, text=True)
        self.popen.append(p)
        inner = int(p.stdout.readline())  # pid inside the namespace (1)
        members = [int(x) for x in open(f"{cg}/cgroup.procs").read().split()]
        for pid in members:
            self.track(pid)
        return {"cgroup": cg, "members": members, "inner_pid": inner}

    def cleanup(self):
        for pid, start in self.tracked:
            kill_verified(pid, start)
        # A killed CUDA process takes a while to exit (its context is torn down in the
        # kernel): wait, so the next test does not meet this one's dying holders.
        deadline = time.time() + 30
        for pid, start in self.tracked:
            while time.time() < deadline and alive(pid) and proc_start_time(pid) == start:
                time.sleep(0.05)
        for p in self.popen:
            try:
                p.kill()
            except OSError:
                pass
            p.wait()
        cg = getattr(self, "cgroup", None)
        if cg:
            deadline = time.time() + 5
            while time.time() < deadline:
                try:
                    os.rmdir(cg)
                    break
                except OSError:
                    time.sleep(0.05)


def cgroup2_mount():
    with open("/proc/self/mountinfo") as f:
        for line in f:
            pre, _, post = line.partition(" - ")
            if post.split()[0] == "cgroup2":
                fields = pre.split()
                if fields[3] == "/":
                    return fields[4]
    return None


def nvml_used(index=0):
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits",
                          "-i", str(index)], capture_output=True, text=True).stdout
    return int(out.strip()) * 1024 * 1024


def gpureap(*args, timeout=120):
    r = subprocess.run([GPUREAP, *args], capture_output=True, text=True, timeout=timeout)
    return r
