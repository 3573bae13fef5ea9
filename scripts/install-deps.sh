#!/usr/bin/env bash
# Installs gpureap's build and test dependencies from Debian's packages.
# Idempotent: installs only what is missing, and does nothing when all is present.
# Extra package names given as arguments are installed the same way
# (scripts/install-fuzz-deps.sh passes the fuzzing toolchain).
set -euo pipefail
# slurmd, slurmctld and slurm-client: the Slurm end-to-end test (tests/e2e/slurm_test.cc)
# starts the real daemons itself, with a throw-away configuration of its own.
packages=(g++ cmake make pkg-config ninja-build ccache mold libcli11-dev nlohmann-json3-dev libfmt-dev libre2-dev
          libgtest-dev libgmock-dev util-linux psmisc procps python3 slurmd slurmctld slurm-client "$@")
# Daemons whose packages would start them (munge comes with Slurm's packages).
daemons=(slurmd slurmctld munged)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive

# A package install must start no service on this machine: Slurm's and munge's
# maintainer scripts would (invoke-rc.d / deb-systemd-invoke). Both ask
# /usr/sbin/policy-rc.d first, and exit status 101 means "action forbidden"
# (Debian policy, invoke-rc.d(8)). Where the machine has no policy of its own,
# one is put in place for the install and removed after it.
policy=/usr/sbin/policy-rc.d
added_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\n# gpureap install-deps.sh: no service starts during this install\nexit 101\n' |
    "${sudo_cmd[@]}" tee "$policy" >/dev/null
  "${sudo_cmd[@]}" chmod 755 "$policy"
  added_policy=1
fi
remove_policy() {
  if [ "$added_policy" -eq 1 ]; then "${sudo_cmd[@]}" rm -f "$policy"; fi
}
trap remove_policy EXIT
running_before=()
for d in "${daemons[@]}"; do
  if pgrep -x "$d" >/dev/null; then running_before+=("$d"); fi
done
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
# Check rather than trust: a daemon that runs now and did not before was started by
# the install (a policy-rc.d the machine had that allows it, say). Say so; stopping it
# is the machine owner's call.
for d in "${daemons[@]}"; do
  if pgrep -x "$d" >/dev/null && [[ ! " ${running_before[*]} " == *" $d "* ]]; then
    echo "install-deps: warning: $d is running since this install; stop it if this machine" \
         "is not a Slurm node (systemctl disable --now ${d%d}d or its init script)" >&2
  fi
done
