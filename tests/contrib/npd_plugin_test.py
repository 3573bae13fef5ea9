#!/usr/bin/env python3
"""node-problem-detector's custom plugin for gpureap (issue 27, docs/fleet-checks.md).

1. contrib/kubernetes/gpureap-npd-plugin.json passes what node-problem-detector checks when
   it loads a custom plugin config (kubernetes/node-problem-detector@6632ca67,
   pkg/custompluginmonitor/types/config.go: ApplyConfiguration, Validate), has the shape
   gpureap documents (timeout 5 s, 80 bytes, one permanent GPUMemoryHeld rule whose
   --deadline is below its timeout), and is what the ConfigMap in
   node-problem-detector.yaml holds; that DaemonSet puts the binary where the rule runs it
   and mounts the agent's socket without hostPID.
2. The rule's command is run as node-problem-detector runs it (plugin/plugin.go: exec with
   the rule's timeout, stdout TrimSpace'd and cut at max_output_length, exit 0 OK, 1 NonOK,
   anything else Unknown) on a simulated node, and the condition is carried through
   node-problem-detector's transitions (custom_plugin_monitor.go generateStatus): clean,
   orphans, a second class, NVML down, NVML hung, freed; then from a child PID namespace
   (no hostPID) answered by the agent over its socket.

Usage: npd_plugin_test.py SOURCE_DIR GPUREAP GPUREAP_SIM
Exit 77 (skipped) without PyYAML.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

try:
    import yaml
except ImportError:
    print("SKIP: python3 without PyYAML (Debian: python3-yaml)")
    sys.exit(77)

SRC, GPUREAP, SIM = sys.argv[1:4]
CONFIG = os.path.join(SRC, "contrib/kubernetes/gpureap-npd-plugin.json")
MANIFEST = os.path.join(SRC, "contrib/kubernetes/node-problem-detector.yaml")
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL: " + what)


def go_duration(text):
    """Seconds in a Go time.ParseDuration string ("30s", "1m30s", "500ms"); ValueError else."""
    units = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}
    parts = re.findall(r"(\d+(?:\.\d*)?)(ns|us|µs|ms|s|m|h)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError("not a Go duration: %r" % text)
    return sum(float(n) * units[u] for n, u in parts)


# ---- 1. The config as node-problem-detector loads it, and as gpureap documents it ----
config_text = open(CONFIG, encoding="utf-8").read()
config = json.loads(config_text)
glob = config.get("pluginConfig", {})
# ApplyConfiguration's defaults (config.go l.28-36), then Validate.
timeout = go_duration(glob.get("timeout", "5s"))
interval = go_duration(glob.get("invoke_interval", "30s"))
max_output = glob.get("max_output_length", 80)
check(config.get("plugin") == "custom", 'plugin must be "custom"')
check(interval > 0, "global invoke interval must be greater than zero")
defaults = {c["type"]: c for c in config.get("conditions", [])}
for rule in config.get("rules", []):
    check(rule.get("type") in ("temporary", "permanent"), "rule type: %r" % rule.get("type"))
    if "timeout" in rule:
        check(go_duration(rule["timeout"]) <= timeout, "plugin timeout is greater than global timeout")
    if "invoke_interval" in rule:
        check(go_duration(rule["invoke_interval"]) > 0, "rule invoke interval must be > 0")
    if rule.get("type") == "permanent":
        check(rule.get("condition") in defaults,
              "permanent problem %s does not have preset default condition" % rule.get("condition"))
# gpureap's contract (docs/fleet-checks.md).
check(timeout == 5 and max_output == 80, "timeout 5s and max_output_length 80 (NPD's defaults)")
check(isinstance(glob.get("concurrency"), int) and glob["concurrency"] >= 1, "concurrency")
check(config.get("source"), "source")
check(list(defaults) == ["GPUMemoryHeld"], "one condition, GPUMemoryHeld")
default = defaults.get("GPUMemoryHeld", {})
check(default.get("reason") and default.get("message"), "GPUMemoryHeld has a healthy reason and message")
rules = config.get("rules", [])
check(len(rules) == 1 and rules[0].get("type") == "permanent" and
      rules[0].get("condition") == "GPUMemoryHeld",
      "one permanent rule for GPUMemoryHeld (a second one on the condition would undo it)")
rule = rules[0]
rule_timeout = go_duration(rule.get("timeout", glob.get("timeout", "5s")))
args = rule.get("args", [])
check(args[:2] == ["status", "--check"], "the rule runs gpureap status --check")
deadline = go_duration(args[args.index("--deadline") + 1]) if "--deadline" in args else 5
check(deadline < rule_timeout, "--deadline below the rule's timeout, so gpureap answers first")
check(os.path.isabs(rule.get("path", "")), "rule path is absolute")

# The ConfigMap holds the file, and the DaemonSet runs the rule's path with the socket.
docs = [d for d in yaml.safe_load_all(open(MANIFEST, encoding="utf-8")) if d]
by_kind = {d["kind"]: d for d in docs}
check(by_kind["ConfigMap"]["data"].get("gpureap-npd-plugin.json") == config_text,
      "node-problem-detector.yaml's ConfigMap holds gpureap-npd-plugin.json as it is")
pod = by_kind["DaemonSet"]["spec"]["template"]["spec"]
check(not pod.get("hostPID"), "no hostPID: the plugin asks the agent")
npd = pod["containers"][0]
check("--config.custom-plugin-monitor=/config/gpureap-npd-plugin.json" in npd["command"],
      "node-problem-detector loads the plugin config")
mounts = {m["mountPath"]: m["name"] for m in npd["volumeMounts"]}
volumes = {v["name"]: v for v in pod["volumes"]}
bin_dir = os.path.dirname(rule["path"])
check(bin_dir in mounts, "the rule's directory is mounted")
copied = [c for c in pod.get("initContainers", []) if c["command"][-1] == rule["path"]]
check(len(copied) == 1 and any(m["mountPath"] == bin_dir and m["name"] == mounts.get(bin_dir)
                               for m in copied[0]["volumeMounts"]),
      "an init container puts gpureap at the rule's path")
env = {e["name"]: e.get("value") for e in npd.get("env", [])}
state = env.get("GPUREAP_STATE_DIR", "/run/gpureap")
check(state in mounts and volumes[mounts[state]].get("hostPath", {}).get("path") == state,
      "the host's state directory (the agent's socket) is mounted")


# ---- 2. The plugin run as node-problem-detector runs it ----
def run_plugin(extra_env, prefix=()):
    """(status, message, raw stdout, seconds) as plugin.go's run() makes them."""
    argv = list(prefix) + [GPUREAP] + args
    start = time.monotonic()
    try:
        p = subprocess.run(argv, env={**os.environ, **extra_env}, stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=rule_timeout)
        out, code = p.stdout.decode("utf-8", "replace"), p.returncode
        timed_out = False
    except subprocess.TimeoutExpired as e:
        out, code, timed_out = (e.stdout or b"").decode("utf-8", "replace"), -9, True
    seconds = time.monotonic() - start
    message = out.strip()
    if timed_out:
        message = 'Timeout when running plugin "%s": state - killed. output - %r' % (rule["path"], message)
    message = message[:max_output]
    status = {0: "OK", 1: "NonOK"}.get(code, "Unknown")
    return status, message, out, seconds


class Condition:
    """One permanent rule's condition through generateStatus's five scenarios."""

    def __init__(self):
        self.status, self.reason, self.message = "False", default["reason"], default["message"]

    def update(self, result, message):
        status = {"OK": "False", "NonOK": "True"}.get(result, "Unknown")
        if self.status == "True" and status != "True":  # 1
            self.reason = default["reason"]
            self.message = default["message"] if status == "False" else message
        elif self.status != "True" and status == "True":  # 2
            self.reason, self.message = rule["reason"], message
        elif self.status != status:  # 3
            self.reason = default["reason"]
            self.message = default["message"] if status == "False" else message
        elif status == "True" and (self.reason != rule["reason"] or (
                glob.get("enable_message_change_based_condition_update") and self.message != message)):  # 4
            self.reason, self.message = rule["reason"], message
        self.status = status
        return (self.status, self.reason, self.message)


tmp = tempfile.mkdtemp(prefix="gpureap-npd-")
node_dir = os.path.join(tmp, "node")
agent = None


def sim(*argv):
    return subprocess.run([SIM] + list(argv), capture_output=True, text=True, timeout=60)


try:
    lines = sim("node", "--dir", node_dir, "--gpus", "8", "--memory", "96GiB").stdout
    node_env = dict(re.findall(r"^export (\w+)=(.*)$", lines, re.M))
    node_env["GPUREAP_STATE_DIR"] = os.path.join(tmp, "state")
    os.mkdir(node_env["GPUREAP_STATE_DIR"], 0o700)
    os.environ.update(node_env)  # the holders' and the agent's environment too
    condition = Condition()

    def step(name, want_status, want_message, want_condition, prefix=(), extra_env=None):
        status, message, raw, seconds = run_plugin(extra_env or {}, prefix)
        got = condition.update(status, message)
        print("%-34s exit->%-7s %.2fs  %r" % (name, status, seconds, message))
        check(status == want_status, "%s: status %s, want %s" % (name, status, want_status))
        check(message == want_message, "%s: message %r, want %r" % (name, message, want_message))
        check(len(raw.strip().encode()) <= max_output, "%s: %d bytes, NPD would cut it" % (name, len(raw)))
        check(raw.count("\n") == 1, "%s: one line" % name)
        check(seconds < rule_timeout, "%s: answered within the timeout" % name)
        check(got == want_condition, "%s: condition %r, want %r" % (name, got, want_condition))

    healthy = ("False", default["reason"], default["message"])
    step("clean", "OK", "clean: 8 GPUs, no leak", healthy)
    hold = sim("hold", "--dir", node_dir, "--gpu", "2", "--bytes", "20GiB", "--children", "2",
               "--orphan", "--detach")
    check(hold.returncode == 0, "hold: " + hold.stderr)
    orphans = "problem: orphaned memory on GPU 2,3"
    step("orphaned workers", "NonOK", orphans, ("True", rule["reason"], orphans))
    stuck = json.loads(sim("hold", "--dir", node_dir, "--gpu", "6", "--bytes", "8GiB", "--stuck", "--detach").stdout)
    for pid in stuck["pids"]:  # our own holder, just started
        os.kill(pid, 9)
    # The killed holder's memory stays (stuck), but a one-shot look cannot have watched a
    # release budget pass: "memory no process holds", unknown, never driver-held (issue 35,
    # docs/release.md); the orphans still make it a problem.
    both = "problem: orphaned memory on GPU 2,3; unknown: memory no process holds on GPU 6"
    for _ in range(50):  # until the killed holder is gone (the memory stays: stuck)
        if run_plugin({})[1] == both:
            break
        time.sleep(0.1)
    step("and memory no process holds", "NonOK", both, ("True", rule["reason"], both))
    sim("mode", "--dir", node_dir, "init_fail")
    # NVML unusable: the orphans /proc shows still count (W3-13), so the node is a problem.
    down = "problem: orphaned memory on GPU 2,3; unknown: NVML unusable (init_failed)"
    step("NVML down", "NonOK", down, ("True", rule["reason"], down))
    sim("mode", "--dir", node_dir, "hang_init")
    hung = "problem: orphaned memory on GPU 2,3; unknown: NVML unusable (hung)"
    step("NVML hung", "NonOK", hung, ("True", rule["reason"], hung))
    sim("mode", "--dir", node_dir, "ok")
    step("NVML back", "NonOK", both, ("True", rule["reason"], both))

    # No hostPID: the plugin in a PID namespace of its own, the agent on the host's.
    unshare = shutil.which("unshare")
    probe = subprocess.run([unshare, "--pid", "--fork", "--mount-proc", "true"],
                           capture_output=True) if unshare else None
    if probe is None or probe.returncode != 0:
        print("note: no PID namespace here (unshare --pid needs root): the no-hostPID case "
              "is not run")
    else:
        own_ns = [unshare, "--pid", "--fork", "--mount-proc"]
        step("own PID namespace, no agent", "Unknown",
             "unknown: holders outside this namespace on GPU 2,3,6",
             ("Unknown", default["reason"], "unknown: holders outside this namespace on GPU 2,3,6"),
             prefix=own_ns)
        agent = subprocess.Popen([GPUREAP, "watch", "--no-listen"], stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        started = agent.stdout.readline()
        check("started" in started, "the agent started: " + started)
        step("own PID namespace, agent's socket", "NonOK", both,
             ("True", rule["reason"], both), prefix=own_ns)
        agent.terminate()
        check(agent.wait(timeout=20) == 0, "the agent stopped")
        agent = None

    sim("cleanup", "--dir", node_dir)
    reset = sim("nvidia-smi", "--dir", node_dir, "-r", "-i", "6")
    check(reset.returncode == 0, "reset GPU 6: " + reset.stdout + reset.stderr)
    step("freed", "OK", "clean: 8 GPUs, no leak", healthy)
finally:
    if agent is not None:
        agent.kill()
        agent.wait()
    sim("cleanup", "--dir", node_dir)
    shutil.rmtree(tmp, ignore_errors=True)

if failures:
    print("%d failure(s)" % len(failures))
    sys.exit(1)
print("node-problem-detector plugin: config valid, contract held in every step")
