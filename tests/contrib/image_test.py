#!/usr/bin/env python3
"""The agent's image (packaging/image/build.sh, docs/kubernetes.md "The image"), built
offline and run with podman as the DaemonSet runs it (issue 38, item 10).

1. The portable binary is linked in BUILD_DIR (target gpureap-portable) and
   packaging/image/build.sh commits it with buildah from scratch (nothing pulled) into a
   store of the test's own (vfs, in a temporary directory): its labels name the version
   and the source; its default tag is the one contrib/kubernetes/gpureap-daemonset.yaml
   names; `--version` in it says portable.
2. The agent runs in it as the DaemonSet runs it: the host's PID namespace, /dev read-only,
   the state directory mounted at /run/gpureap, the DaemonSet's capabilities only, a
   read-only root. A simulated node stands in for the driver: its directory mounted at
   its own path (so holders' /proc/PID/fd links resolve), its NVML library mounted as
   the NVIDIA runtime mounts the driver's. The network is the host's (no CNI here), the
   listener on a free loopback port.
3. From outside: /metrics counts the node's GPUs and the holder the test started, and the
   host's `gpureap status` is answered by the agent over the state directory's socket.

Skipped (exit 77) with the reason where there is no buildah or podman, when not root
(rootful podman: a rootless one has no host PID namespace to read), or where podman
cannot run any container here: a probe runs /usr/bin/true from a throw-away root file
system (not the image under test) under each OCI runtime present, and only if every one
fails is the test skipped, with each runtime's error. Once a runtime ran the probe, any
failure of the image is a failure.

Usage: image_test.py SOURCE_DIR BUILD_DIR GPUREAP_SIM [PORTABLE_BINARY]
(PORTABLE_BINARY: one already built, e.g. build-portable/gpureap, instead of linking one.)
"""

import json
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

SRC, BUILD, SIM = sys.argv[1:4]
PREBUILT = sys.argv[4] if len(sys.argv) > 4 else None
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL: " + what)
    return ok


def skip(why):
    print("SKIP: " + why)
    sys.exit(77)


if os.geteuid() != 0:
    skip("needs root: the DaemonSet's agent reads every process of the host's PID namespace")
for tool in ("buildah", "podman"):
    if not shutil.which(tool):
        skip(f"no {tool} (Debian: apt-get install buildah podman; scripts/install-deps.sh)")

tmp = tempfile.mkdtemp(prefix="gpureap-image-")
# A store of the test's own: nothing of the machine's images is read or changed, and
# vfs needs no overlay support from the file system under it.
STORE = ["--root", os.path.join(tmp, "store"), "--runroot", os.path.join(tmp, "run"),
         "--storage-driver", "vfs"]
# RLIMIT_NOFILE: this process's hard limit (the agent raises its soft limit to it).
# RLIMIT_NPROC: 4096, because podman's default for root (1048576) cannot be set where
# root lacks CAP_SYS_RESOURCE (as in this CI container); it does not bind root anyway.
nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
ULIMITS = ["--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", "nproc=4096:4096"]
podman_base = None  # podman with the store and the runtime the probe found
container = f"gpureap-image-test-{os.getpid()}"
node_dir = os.path.join(tmp, "node")


def run(argv, **kw):
    kw.setdefault("timeout", 300)
    return subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, **kw)


def libraries(path):
    """The files `ldd` resolves for PATH (the loader included)."""
    out = run(["ldd", path]).stdout
    return re.findall(r"^\s*(?:\S+ => )?(/\S+) \(0x[0-9a-f]+\)$", out, re.M)


def copy_at(path, root):
    """PATH's contents at the same path under ROOT (its directory's links resolved)."""
    where = root + os.path.realpath(os.path.dirname(path))
    os.makedirs(where, exist_ok=True)
    shutil.copy(path, os.path.join(where, os.path.basename(path)))


def probe():
    """A podman command line that runs a container here, or skip with why none does."""
    rootfs = os.path.join(tmp, "probe")
    true = shutil.which("true")
    copy_at(true, rootfs)
    for lib in libraries(true):
        copy_at(lib, rootfs)
    for d in ("lib", "lib64", "bin"):
        if os.path.islink("/" + d):
            os.symlink(os.readlink("/" + d), os.path.join(rootfs, d))
    runtimes = [None] + [r for r in ("runc", "crun") if shutil.which(r)]
    errors = []
    for runtime in runtimes:
        # libpod's own state (exit codes, events) in the test's directory too.
        base = ["podman"] + STORE + ["--tmpdir", os.path.join(tmp, "libpod"),
                                     "--cgroup-manager", "cgroupfs"]
        if runtime:
            base += ["--runtime", runtime]
        p = run(base + ["run", "--rm", "--network", "none", "--pid", "host", "--read-only"] +
                ULIMITS + ["--rootfs", rootfs, os.path.realpath(true)], timeout=120)
        if p.returncode == 0:
            print(f"probe: podman runs a container here with runtime {runtime or 'default'}")
            return base
        errors.append(f"{runtime or 'default runtime'}: " + (p.stderr.strip().splitlines() or ["?"])[-1])
    skip("podman cannot run a container here: " + "; ".join(errors))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metrics(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return r.read().decode()


def sample(text, name, **labels):
    """The value of NAME's series with LABELS among its labels; None if absent."""
    for m in re.finditer(r"^" + name + r"\{([^}]*)\} (\S+)$", text, re.M):
        have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        if all(have.get(k) == v for k, v in labels.items()):
            return float(m.group(2))
    return None


class Abort(Exception):
    """A failed check that the next steps need: stop, clean up, report."""


sim_env = {}
try:
    podman_base = probe()

    # ---- 1. The image, built offline from the portable binary ----
    portable = PREBUILT or os.path.join(BUILD, "gpureap-portable")
    if not PREBUILT:
        build = run(["cmake", "--build", BUILD, "--target", "gpureap-portable"], timeout=600)
        if not check(build.returncode == 0, "gpureap-portable builds: " + build.stdout[-2000:]):
            raise Abort
    binary = os.path.join(tmp, "gpureap")
    run(["objcopy", "--strip-debug", portable, binary])
    check(os.path.exists(binary), "objcopy --strip-debug wrote the binary")
    build_env = {**os.environ, "GPUREAP_BUILDAH_OPTS": " ".join(STORE)}
    script = os.path.join(SRC, "packaging/image/build.sh")
    built = run([script, binary], env=build_env, timeout=600)
    if not check(built.returncode == 0, "build.sh: " + built.stderr):
        raise Abort
    tag = built.stdout.strip()
    version = re.match(r"gpureap (\S+)", run([binary, "--version"]).stdout).group(1)
    check(tag == f"localhost/gpureap:{version}", f"the default tag is localhost/gpureap:{version}: {tag}")
    daemonset = open(os.path.join(SRC, "contrib/kubernetes/gpureap-daemonset.yaml")).read()
    images = re.findall(r"^\s+image: (\S+)$", daemonset, re.M)
    check(images == [tag], f"the DaemonSet names the tag build.sh commits ({tag}): {images}")
    check("imagePullPolicy: Never" in daemonset or "imagePullPolicy: IfNotPresent" in daemonset,
          "the DaemonSet does not pull the local tag")
    inspect = run(podman_base + ["image", "inspect", tag])
    config = json.loads(inspect.stdout)[0]["Config"] if inspect.returncode == 0 else {}
    labels = config.get("Labels") or {}
    check(labels.get("org.opencontainers.image.version") == version,
          f"label org.opencontainers.image.version = {version}: {labels}")
    check(labels.get("org.opencontainers.image.source", "").startswith("https://"),
          f"label org.opencontainers.image.source: {labels}")
    check(config.get("Entrypoint") == ["/usr/bin/gpureap"], f"entrypoint: {config.get('Entrypoint')}")
    check(config.get("Cmd") == ["watch", "--listen", "0.0.0.0:9847"], f"cmd: {config.get('Cmd')}")
    ver = run(podman_base + ["run", "--rm", "--pull=never", "--network", "none"] + ULIMITS +
              [tag, "--version"], timeout=120)
    check(ver.returncode == 0 and "portable: libstdc++ and libgcc linked in" in ver.stdout,
          f"--version in the image says portable: {ver.stdout}{ver.stderr}")

    # ---- 2. The agent in it, as the DaemonSet runs it, on a simulated node ----
    node = run([SIM, "node", "--dir", node_dir, "--gpus", "4", "--memory", "80GiB"])
    if not check(node.returncode == 0, "sim node: " + node.stderr):
        raise Abort
    sim_env = dict(re.findall(r"^export (\w+)=(.*)$", node.stdout, re.M))
    os.environ.update(sim_env)  # the holder's and the host's gpureap's
    hold = run([SIM, "hold", "--dir", node_dir, "--gpu", "1", "--bytes", "20GiB", "--detach"])
    if not check(hold.returncode == 0, "sim hold: " + hold.stderr):
        raise Abort
    holder = json.loads(hold.stdout)["holders"][0]["pid"]

    # The driver as the NVIDIA runtime gives it: the stand-in library and what it loads
    # beyond the image's glibc, mounted read-only, found by the loader under its soname
    # (GPUREAP_NVML_LIBRARY unset) in the container and on the host alike: the host's
    # status takes the agent's answer only for the node it looks at itself, the same
    # library included (inventory::Node::identity).
    driver = os.path.join(tmp, "driver")
    os.makedirs(driver)
    nvml = sim_env["GPUREAP_NVML_LIBRARY"]
    shutil.copy(nvml, os.path.join(driver, "libnvidia-ml.so.1"))
    for lib in libraries(nvml):
        if not re.match(r"(libc|libm|ld-linux-x86-64)\.so", os.path.basename(lib)):
            shutil.copy(lib, driver)
    host_env = {k: v for k, v in os.environ.items() if k != "GPUREAP_NVML_LIBRARY"}
    state = os.path.join(tmp, "state")
    os.mkdir(state, 0o700)
    port = free_port()
    # The DaemonSet's pod spec, in podman's words (contrib/kubernetes/gpureap-daemonset.yaml).
    agent = run(podman_base + [
        "run", "-d", "--name", container, "--pull=never",
        "--pid", "host", "--network", "host", "--user", "0", "--read-only",
        "--security-opt", "no-new-privileges", "--cap-drop", "ALL",
        "--cap-add", "SYS_PTRACE,DAC_READ_SEARCH,KILL"] + ULIMITS + [
        "-v", "/dev:/dev:ro", "-v", f"{state}:/run/gpureap",
        "-v", f"{node_dir}:{node_dir}", "-v", f"{driver}:/opt/sim-driver:ro",
        "-e", "GPUREAP_STATE_DIR=/run/gpureap",
        "-e", "LD_LIBRARY_PATH=/opt/sim-driver",
        "-e", f"GPUREAP_SIM_DIR={sim_env['GPUREAP_SIM_DIR']}",
        "-e", f"GPUREAP_DEV_DIR={sim_env['GPUREAP_DEV_DIR']}",
        tag, "watch", "--listen", f"127.0.0.1:{port}"], timeout=120)
    if not check(agent.returncode == 0, "podman run the agent: " + agent.stderr):
        raise Abort

    # ---- 3. From outside: /metrics and the socket ----
    text = None
    deadline = time.monotonic() + 60  # the agent's first tick; a deadline, not a measurement
    while time.monotonic() < deadline:
        try:
            text = metrics(port)
            break
        except OSError:
            state_of = run(podman_base + ["inspect", "-f", "{{.State.Status}}", container]).stdout.strip()
            if state_of not in ("running", "created", "configured"):
                break
            time.sleep(0.2)
    logs = run(podman_base + ["logs", container])
    if not check(text is not None, "the agent answers /metrics: " + logs.stdout + logs.stderr):
        raise Abort
    check(sample(text, "gpureap_nvml_up") == 1 or "gpureap_nvml_up 1" in text,
          "NVML (the simulated driver) is up in the container")
    gpus = re.findall(r"^gpureap_gpu_info\{", text, re.M)
    check(len(gpus) == 4, f"4 GPUs in /metrics: {len(gpus)}")
    check(sample(text, "gpureap_gpu_holders", gpu="1", kind="live") == 1, "GPU 1 has the test's holder in /metrics: " +
          "\n".join(l for l in text.splitlines() if l.startswith("gpureap_gpu_holders")))
    check(sample(text, "gpureap_gpu_memory_attributed_bytes", gpu="1") == 20 * 2**30,
          "GPU 1's 20 GiB are attributed to a holder")

    status = run([os.path.join(tmp, "gpureap"), "--json", "status"],
                 env={**host_env, "GPUREAP_STATE_DIR": state, "LD_LIBRARY_PATH": driver},
                 timeout=60)
    check(status.returncode in (0, 1), "host status: " + status.stderr)
    doc = json.loads(status.stdout) if status.stdout.strip().startswith("{") else {}
    check(doc.get("source") == "agent", f"the host's status is answered by the agent in the container: "
          f"source {doc.get('source')!r}")
    held = [h.get("pid") for g in doc.get("gpus", []) for h in g.get("holders", g.get("processes", []))]
    check(len(doc.get("gpus", [])) == 4, f"the agent's answer has 4 GPUs: {len(doc.get('gpus', []))}")
    check(holder in held, f"the agent's answer lists the test's holder {holder} by its host pid: {held}")

    stop = run(podman_base + ["stop", "-t", "20", container], timeout=120)
    code = run(podman_base + ["inspect", "-f", "{{.State.ExitCode}}", container]).stdout.strip()
    check(stop.returncode == 0 and code == "0", f"the agent stops on SIGTERM, exit 0: {code} {stop.stderr}")
except Abort:
    pass
finally:
    if podman_base:
        run(podman_base + ["rm", "-f", "-t", "0", container], timeout=120)
    if sim_env:
        run([SIM, "cleanup", "--dir", node_dir])
    shutil.rmtree(tmp, ignore_errors=True)

if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("image: built offline from the portable binary, the agent ran in it as the DaemonSet runs it")
