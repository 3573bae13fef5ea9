"""Packaging checks (issue #13; docs/packaging.md): man pages, shell completion, the
Debian package, `make install`, the portable binary. Run by `make package-test`, which
builds what they need first; each test names what it checks in its docstring.

Environment: GPUREAP_RELEASE_BUILD (default build-release), GPUREAP_PORTABLE_BUILD
(default build-portable). Every simulated node is cleaned up (gpureap-sim cleanup);
no process is signalled except by the programs under test on the simulated node.
"""

import glob
import gzip
import os
import re
import shutil
import subprocess
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RELEASE = os.path.join(ROOT, os.environ.get("GPUREAP_RELEASE_BUILD", "build-release"))
PORTABLE = os.path.join(ROOT, os.environ.get("GPUREAP_PORTABLE_BUILD", "build-portable"))
BIN = os.path.join(RELEASE, "gpureap")
SIM = os.path.join(RELEASE, "sim", "gpureap-sim")
SHARE = os.path.join(RELEASE, "share")


def run(cmd, env=None, check=True, **kw):
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, **kw)
    if check and result.returncode != 0:
        raise AssertionError(f"{cmd} exited {result.returncode}\n{result.stdout}\n{result.stderr}")
    return result


def read_text(path):
    with open(path) as f:
        return f.read()


def project_version():
    text = read_text(os.path.join(ROOT, "CMakeLists.txt"))
    return re.search(r"project\(gpureap VERSION ([0-9.]+)", text).group(1)


def commands():
    """The visible commands, as `gpureap --help` lists them."""
    out = run([BIN, "--help"]).stdout
    block = out.split("Commands:\n")[1]
    return re.findall(r"^  ([a-z][a-z-]*) {2,}", block, re.M)


def help_options(command):
    out = run([BIN, command, "--help"]).stdout
    # The options end at the next heading (Examples:, Exit status:), after a blank line.
    options = re.split(r"\n\n(?=\S)", out.split("Options:\n")[1])[0]
    return sorted(set(re.findall(r"^ {2,6}(?:-\w,\s?)?(--[a-z][a-z-]+)", options, re.M)) - {"--help"})


class SimulatedNode:
    """A simulated node with `gpus` GPUs; its environment in .env. Cleaned up on exit."""

    def __init__(self, gpus=4, sim=SIM):
        self.sim = sim
        self.dir = tempfile.mkdtemp(prefix="gpureap-pkgtest.")
        self.gpus = gpus

    def __enter__(self):
        out = run([self.sim, "node", "--dir", self.dir, "--gpus", str(self.gpus)]).stdout
        self.env = dict(os.environ)
        for line in out.splitlines():
            m = re.match(r"export (\w+)=(.*)", line)
            if m:
                self.env[m.group(1)] = m.group(2).strip("'\"")
        self.env["GPUREAP_STATE_DIR"] = os.path.join(self.dir, "state")
        os.makedirs(self.env["GPUREAP_STATE_DIR"], mode=0o700)
        return self

    def __exit__(self, *exc):
        run([self.sim, "cleanup", "--dir", self.dir], check=False)
        shutil.rmtree(self.dir, ignore_errors=True)


def groff_warnings(page_text):
    r = subprocess.run(["groff", "-man", "-ww", "-z"], input=page_text, capture_output=True,
                       text=True)
    return r.returncode, r.stderr


class ManPages(unittest.TestCase):
    def pages(self):
        return sorted(glob.glob(os.path.join(SHARE, "man", "*.1")))

    def test_one_page_per_command_and_no_groff_warning(self):
        """gpureap(1) and gpureap-CMD(1) for every command --help lists; groff -ww prints
        nothing (it exits 0 on warnings, so stderr is what counts)."""
        names = sorted(os.path.basename(p) for p in self.pages())
        self.assertEqual(names, sorted(["gpureap.1"] + [f"gpureap-{c}.1" for c in commands()]))
        for page in self.pages():
            rc, err = groff_warnings(read_text(page))
            self.assertEqual((rc, err), (0, ""), page)

    def test_groff_check_catches_a_bad_page(self):
        """The check above can fail: an undefined macro is reported on stderr."""
        rc, err = groff_warnings(read_text(self.pages()[0]) + ".BOGUS\n")
        self.assertIn("BOGUS", err)

    def test_sections_and_options(self):
        """Each page has exit status, environment, files and examples; a command's page
        lists every option of its --help."""
        for page in self.pages():
            text = read_text(page)
            for section in ("NAME", "SYNOPSIS", "DESCRIPTION", "EXIT STATUS", "ENVIRONMENT",
                            "FILES", "EXAMPLES", "SEE ALSO"):
                self.assertIn(f".SH {section}\n", text, f"{page}: {section}")
        for c in commands():
            text = read_text(os.path.join(SHARE, "man", f"gpureap-{c}.1")).replace("\\-", "-")
            for opt in help_options(c):
                self.assertIn(opt, text, f"gpureap-{c}.1 lacks {opt}")

    def test_every_environment_variable_is_documented(self):
        """Every GPUREAP_* variable the sources read (test hooks aside) is in ENVIRONMENT."""
        names = set()
        for path in glob.glob(os.path.join(ROOT, "src", "**", "*.[ch]*"), recursive=True):
            base = os.path.basename(path)
            if base.endswith("_test.cc") or base.startswith("test_"):
                continue  # a test program or a test-only header (util/test_golden.h)
            names |= set(re.findall(r'"(GPUREAP_[A-Z_]+)"', read_text(path)))
        names = {n for n in names if not n.startswith("GPUREAP_TEST_")}
        self.assertIn("GPUREAP_STATE_DIR", names)
        text = read_text(os.path.join(SHARE, "man", "gpureap.1"))
        env = text.split(".SH ENVIRONMENT")[1].split(".SH ")[0]
        for n in sorted(names):
            self.assertIn(n, env)

    def test_installed_pages_are_the_binarys_own(self):
        """The generated pages are what the binary prints now (they cannot drift)."""
        for c in ["gpureap"] + commands():
            args = [] if c == "gpureap" else [c]
            name = "gpureap.1" if c == "gpureap" else f"gpureap-{c}.1"
            self.assertEqual(run([BIN, "man-page"] + args).stdout,
                             read_text(os.path.join(SHARE, "man", name)))
            with gzip.open(os.path.join(SHARE, "man-gz", name + ".gz"), "rt") as f:
                self.assertEqual(f.read(), read_text(os.path.join(SHARE, "man", name)))

    def test_unknown_page_is_a_usage_error(self):
        r = run([BIN, "man-page", "nosuchcommand"], check=False)
        self.assertEqual(r.returncode, 2)
        self.assertIn("nosuchcommand", r.stderr)


BASH_DRIVER = r"""
source "$1"
shift
COMP_WORDS=("$@")
COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
COMPREPLY=()
_gpureap
printf '%s\n' "${COMPREPLY[@]}"
"""


def bash_complete(script, words, env):
    """COMPREPLY for the command line `words` (the last word is the one completed), in a
    bash started here with the completion file sourced."""
    r = run(["bash", "--norc", "--noprofile", "-c", BASH_DRIVER, "bash", script] + words, env=env)
    return [w for w in r.stdout.splitlines() if w]


class Completion(unittest.TestCase):
    script = os.path.join(SHARE, "completions", "gpureap")

    def test_bash_commands_options_and_gpus(self):
        """fr -> free; --gp -> --gpu; --gpu <TAB> -> the simulated GPUs' indices (from NVML
        through `gpureap completion gpus`); durations get units, --user users."""
        with SimulatedNode(gpus=3) as node:
            env = dict(node.env, PATH=RELEASE + os.pathsep + node.env["PATH"])
            self.assertEqual(bash_complete(self.script, ["gpureap", "fr"], env), ["free"])
            self.assertEqual(bash_complete(self.script, ["gpureap", "free", "--gp"], env), ["--gpu"])
            self.assertIn("--gpu", bash_complete(self.script, ["gpureap", "free", "--g"], env))
            self.assertEqual(bash_complete(self.script, ["gpureap", "free", "--gpu", ""], env),
                             ["all", "0", "1", "2"])
            uuids = bash_complete(self.script, ["gpureap", "status", "--gpu", "GPU-"], env)
            self.assertEqual(len(uuids), 3)
            self.assertEqual(bash_complete(self.script, ["gpureap", "wait", "--timeout", "5"], env),
                             ["5ms", "5s", "5m", "5h"])
            self.assertIn("root", bash_complete(self.script, ["gpureap", "free", "--user", "ro"], env))
            # A value is not mistaken for the command: `--dev-dir status` names a directory.
            self.assertEqual(bash_complete(self.script, ["gpureap", "--json", "st"], env), ["status"])
            self.assertEqual(bash_complete(self.script, ["gpureap", "plan", "--engine", ""], env),
                             ["sglang", "vllm"])

    def test_bash_gpus_follow_the_node(self):
        """With 5 simulated GPUs the same script offers 5 indices: nothing is baked in."""
        with SimulatedNode(gpus=5) as node:
            env = dict(node.env, PATH=RELEASE + os.pathsep + node.env["PATH"])
            self.assertEqual(bash_complete(self.script, ["gpureap", "wait", "--gpu", ""], env),
                             ["all", "0", "1", "2", "3", "4"])

    def test_every_option_completes(self):
        """Every option of every command's --help is offered after `gpureap CMD -`."""
        env = dict(os.environ)
        for c in commands():
            offered = bash_complete(self.script, ["gpureap", c, "-"], env)
            for opt in help_options(c):
                self.assertIn(opt, offered, f"{c} {opt}")

    def test_zsh_script(self):
        """The zsh script parses (zsh -n), defines _gpureap, and names every option."""
        path = os.path.join(SHARE, "completions", "_gpureap")
        run(["zsh", "-n", path])
        text = read_text(path)
        self.assertTrue(text.startswith("#compdef gpureap\n"))
        for c in commands():
            self.assertIn(f"        {c})", text)
            for opt in help_options(c):
                # '--gpu[...]' or '(-y --yes)'{-y,--yes}'[...]'
                self.assertRegex(text, f"['{{,]{opt}[\\[}},]", f"{c} {opt}")
        # In zsh itself: the function loads and compdef registers it.
        script = (f"autoload -Uz compinit && compinit -u -d {tempfile.gettempdir()}/zcd.$$ && "
                  f"fpath=({os.path.dirname(path)} $fpath) && autoload -Uz _gpureap && "
                  "whence -w _gpureap")
        self.assertIn("function", run(["zsh", "-f", "-c", script]).stdout)


def deb_path():
    debs = glob.glob(os.path.join(RELEASE, "gpureap_*_amd64.deb"))
    assert len(debs) == 1, f"expected one .deb in {RELEASE}: {debs} (make deb)"
    return debs[0]


class DebianPackage(unittest.TestCase):
    def test_control_fields(self):
        """Name, version (project()'s), section, computed Depends (libc6 among them)."""
        deb = deb_path()
        self.assertEqual(os.path.basename(deb), f"gpureap_{project_version()}_amd64.deb")
        info = run(["dpkg-deb", "-I", deb]).stdout
        self.assertIn(f"Version: {project_version()}\n", info)
        self.assertIn("Section: admin\n", info)
        self.assertIn("Architecture: amd64\n", info)
        depends = re.search(r"Depends: (.*)", info).group(1)
        self.assertRegex(depends, r"libc6 \(>= [0-9.]+\)")
        # libstdc++ and libgcc are linked in (CMakeLists.txt: start-up), so not depended on.
        self.assertNotIn("libstdc++6", depends)
        self.assertNotIn("libgcc-s1", depends)

    def test_contents(self):
        """Every file where it belongs, owned by root, and nothing else."""
        listing = run(["dpkg-deb", "-c", deb_path()]).stdout.splitlines()
        files = {}
        for line in listing:
            parts = line.split()
            mode, owner, path = parts[0], parts[1], parts[-1]
            self.assertEqual(owner, "root/root", line)
            if not mode.startswith("d"):
                files[path] = mode
        expected = {"./usr/bin/gpureap": "-rwxr-xr-x",
                    "./usr/share/bash-completion/completions/gpureap": "-rw-r--r--",
                    "./usr/share/zsh/vendor-completions/_gpureap": "-rw-r--r--",
                    "./usr/share/doc/gpureap/copyright": "-rw-r--r--",
                    "./usr/share/doc/gpureap/changelog.gz": "-rw-r--r--",
                    "./usr/share/doc/gpureap/README.md": "-rw-r--r--"}
        for page in ["gpureap"] + [f"gpureap-{c}" for c in commands()]:
            expected[f"./usr/share/man/man1/{page}.1.gz"] = "-rw-r--r--"
        for doc in glob.glob(os.path.join(ROOT, "docs", "*.md")):
            expected[f"./usr/share/doc/gpureap/{os.path.basename(doc)}"] = "-rw-r--r--"
        # The agent's unit (ExecStart= the installed binary) and the state directory's
        # tmpfiles.d entry; contrib/ as examples (systemd, Slurm, Kubernetes).
        expected["./usr/lib/systemd/system/gpureap-watch.service"] = "-rw-r--r--"
        expected["./usr/lib/tmpfiles.d/gpureap.conf"] = "-rw-r--r--"
        contrib = os.path.join(ROOT, "contrib")
        for dirpath, _, names in os.walk(contrib):
            for name in names:
                rel = os.path.relpath(os.path.join(dirpath, name), contrib)
                # Examples are documents (the Slurm wrapper too: a site copies it to /etc).
                expected[f"./usr/share/doc/gpureap/examples/{rel}"] = "-rw-r--r--"
        self.assertEqual(files, expected)

    def test_the_unit_runs_the_installed_binary(self):
        unit = run(["sh", "-c", f"dpkg-deb --fsys-tarfile {deb_path()} | "
                    "tar -xO ./usr/lib/systemd/system/gpureap-watch.service"]).stdout
        self.assertIn("ExecStart=/usr/bin/gpureap watch", unit)
        self.assertNotIn("@BINDIR@", unit)

    def test_changelog_names_this_version(self):
        text = read_text(os.path.join(ROOT, "packaging", "changelog"))
        self.assertTrue(text.startswith(f"gpureap ({project_version()}) "), text.splitlines()[0])

    def test_lintian(self):
        """lintian reports no error and only the warnings docs/packaging.md accepts."""
        r = run(["lintian", "--tag-display-limit", "0", deb_path()], check=False)
        tags = [line for line in r.stdout.splitlines() if line[:2] in ("E:", "W:")]
        accepted = re.findall(r"^\| `([a-z0-9-]+)` \|", read_text(
            os.path.join(ROOT, "docs", "packaging.md")), re.M)
        unexpected = [t for t in tags if t.startswith("E:") or t.split()[2] not in accepted]
        self.assertEqual(unexpected, [], r.stdout)

    def test_installed_into_a_scratch_root(self):
        """dpkg installs it into a scratch root (its own database) and removes it again;
        the installed gpureap runs --version and status on a simulated node; man reads
        every installed page."""
        root = tempfile.mkdtemp(prefix="gpureap-root.")
        try:
            admin = os.path.join(root, "var", "lib", "dpkg")
            for d in ("info", "updates", "triggers"):
                os.makedirs(os.path.join(admin, d))
            with open(os.path.join(admin, "status"), "w"):
                pass
            dpkg = ["dpkg", f"--root={root}", f"--admindir={admin}", "--force-depends",
                    "--force-not-root", "--log=/dev/null"]
            # --force-script-chrootless: the package has no maintainer scripts to chroot.
            run(dpkg + ["--force-script-chrootless", "-i", deb_path()])
            gpureap = os.path.join(root, "usr", "bin", "gpureap")
            version = run([gpureap, "--version"]).stdout
            self.assertIn(f"gpureap {project_version()} (commit ", version)
            self.assertIn("build: RelWithDebInfo", version)
            with SimulatedNode(gpus=2) as node:
                v = run([gpureap, "--version"], env=node.env).stdout
                self.assertRegex(v, r"driver: [0-9.]+ \(NVML\)")
                status = run([gpureap, "status"], env=node.env).stdout
                self.assertEqual(len(re.findall(r"^GPU \d", status, re.M)), 2, status)
            pages = glob.glob(os.path.join(root, "usr", "share", "man", "man1", "*.1.gz"))
            self.assertEqual(len(pages), 1 + len(commands()))
            for page in pages:
                r = run(["man", "-l", page], env=dict(os.environ, MANWIDTH="80", MAN_KEEP_STDERR="1"))
                self.assertIn("EXIT STATUS", r.stdout, page)
                self.assertEqual(r.stderr, "", page)
                wide = [l for l in r.stdout.splitlines() if len(l) > 80]
                self.assertEqual(wide, [], page)  # nothing wider than MANWIDTH=80
            run(dpkg + ["--force-script-chrootless", "-r", "gpureap"])
            self.assertFalse(os.path.exists(gpureap))
        finally:
            shutil.rmtree(root, ignore_errors=True)

    @unittest.skipUnless(os.geteuid() == 0, "needs root for apt's simulation")
    def test_dependencies_are_satisfiable_here(self):
        """apt would install it on this machine with nothing missing (simulated)."""
        r = run(["apt-get", "install", "--simulate", "--no-install-recommends", deb_path()])
        self.assertRegex(r.stdout, r"Inst gpureap ")


class MakeInstall(unittest.TestCase):
    def test_prefix_and_destdir(self):
        """`make install PREFIX=/opt/gr DESTDIR=D` puts everything under D/opt/gr."""
        dest = tempfile.mkdtemp(prefix="gpureap-destdir.")
        try:
            run(["make", "-s", "-C", ROOT, "install", "PREFIX=/opt/gr", f"DESTDIR={dest}",
                 f"RELEASE_BUILD={os.path.relpath(RELEASE, ROOT)}"])
            base = os.path.join(dest, "opt", "gr")
            for rel in ["bin/gpureap", "share/man/man1/gpureap.1.gz",
                        "share/man/man1/gpureap-free.1.gz",
                        "share/bash-completion/completions/gpureap",
                        "share/zsh/vendor-completions/_gpureap", "share/doc/gpureap/README.md"]:
                self.assertTrue(os.path.isfile(os.path.join(base, rel)), rel)
            self.assertEqual(sorted(os.listdir(dest)), ["opt"])
            run([os.path.join(base, "bin", "gpureap"), "--help"])
        finally:
            shutil.rmtree(dest, ignore_errors=True)


class PortableBinary(unittest.TestCase):
    binary = os.path.join(PORTABLE, "gpureap")

    def test_needs_only_glibc(self):
        """ldd: libc, libm, the loader (and the vdso); no libstdc++, no libgcc_s."""
        allowed = {"linux-vdso.so.1", "libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0",
                   "/lib64/ld-linux-x86-64.so.2"}
        libs = [line.split()[0] for line in run(["ldd", self.binary]).stdout.splitlines()]
        self.assertTrue(libs)
        self.assertEqual([l for l in libs if l not in allowed], [])

    def test_glibc_floor(self):
        """The newest glibc symbol version it needs is at most 2.34 (Debian bookworm's
        toolchain cannot go lower: crt1.o references __libc_start_main@GLIBC_2.34)."""
        out = run(["objdump", "-T", self.binary]).stdout
        versions = {tuple(int(x) for x in v.split(".")) for v in re.findall(r"GLIBC_([0-9.]+)\b", out)}
        self.assertLessEqual(max(versions), (2, 34), sorted(versions))
        self.assertNotRegex(out, r"GLIBCXX_|CXXABI_|GCC_[0-9]")

    def test_version_says_portable(self):
        self.assertIn("portable", run([self.binary, "--version"]).stdout)

    def test_demo(self):
        """scripts/demo.sh with the portable build directory: the case study is freed."""
        r = run([os.path.join(ROOT, "scripts", "demo.sh"), PORTABLE])
        self.assertIn("freed in", r.stdout)
        # GPU 3's memory outlives its (unwatched) process: a one-shot look cannot time a
        # release, so it says no_holder and how to tell, never "driver-held" (docs/release.md).
        self.assertIn("[no_holder]", r.stdout)
        self.assertIn("gpureap wait --gpu 3", r.stdout)


if __name__ == "__main__":
    unittest.main()
