#!/usr/bin/env bash
# Installs gpureap's build and test dependencies from Debian's packages.
# Idempotent: installs only what is missing, and does nothing when all is present.
# Extra package names given as arguments are installed the same way
# (scripts/install-fuzz-deps.sh passes the fuzzing toolchain).
#
# Test tools whose packages come with services that must never run on a build machine:
# - `prometheus`: its promtool checks the agent's /metrics text and its server scrapes the
#   agent in an end-to-end test (docs/metrics.md);
# - `slurmd`, `slurmctld`, `slurm-client` (and munge, their dependency): the Slurm
#   end-to-end test (tests/e2e/slurm_test.cc, docs/slurm.md) starts the real daemons with
#   a throw-away configuration of its own.
# The tests start their own servers on free loopback ports; the packages' services are
# installed without starting them, their boot links disabled (below).
# `libncurses-dev`: `gpureap top`'s screen (ncursesw, linked from its static archive);
# `tmux` (no service): the end-to-end tests drive `gpureap top` in it (tests/e2e/top_test.cc).
# `libyaml-dev` and `libcrypt-dev`: the agent's --web-config (YAML; bcrypt through crypt_r),
# linked from their static archives; `curl` and `openssl` (no service): its end-to-end test
# makes a self-signed certificate and scrapes over TLS (tests/e2e/watch_web_config_test.cc).
# `libcurl4-openssl-dev`: curl.h for `watch --gate kubernetes-*`, which dlopens libcurl.so.4
# (agent/http_client.h); nothing links it.
# `clustershell` (no service): its `clush -b` folds the one-line `status --summary` of
# simulated nodes in tests/contrib/check_fleet_checks.sh (docs/fleet-checks.md).
# `buildah`, `podman` and `runc`: `make image` builds the agent's image from scratch with
# buildah (nothing pulled), and tests/contrib/image_test.py runs it with podman as the
# DaemonSet does (docs/kubernetes.md). runc besides Debian's default crun, which refuses
# hybrid cgroup hierarchies (a cgroup2 mount with a controller beside cgroup v1's). podman
# brings units (podman.socket, podman.service, podman-restart.service and the
# podman-auto-update timer) that are installed without starting and disabled like the
# services above.
set -euo pipefail
packages=(g++ cmake make pkg-config ninja-build ccache mold libcli11-dev nlohmann-json3-dev libfmt-dev libre2-dev
          libmicrohttpd-dev libcurl4-openssl-dev libyaml-dev libcrypt-dev libsystemd-dev libncurses-dev libgtest-dev libgmock-dev util-linux psmisc procps python3
          python3-yaml prometheus slurmd slurmctld slurm-client clustershell tmux curl openssl buildah podman
          runc "$@")
# The services those packages bring (Debian package names), and the daemons they run.
services=(prometheus munge slurmd slurmctld podman)
# The systemd units a package enables at boot: its own name's service, or these.
units_of() {
  case "$1" in
    podman) echo podman.socket podman.service podman-restart.service podman-auto-update.timer \
                 podman-auto-update.service ;;
    *) echo "$1.service" ;;
  esac
}
daemons=(prometheus munged slurmd slurmctld)
# munge is no package of ours but arrives with slurmd: note whether this run brings it.
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
new_services=()
missing=()
for p in "${packages[@]}"; do
  installed "$p" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq

# The postinsts of these packages start their services (invoke-rc.d, or deb-systemd-invoke
# under systemd) and enable them at boot. Both invoke-rc.d and deb-systemd-invoke ask
# /usr/sbin/policy-rc.d first, and exit status 101 means "action forbidden", so a
# temporary one that exits 101 (the machine's own, if any, put back afterwards) keeps
# the services from starting; the boot links they created are then disabled.
policy=/usr/sbin/policy-rc.d
saved_policy=""
restore_policy() {
  if [ -n "$saved_policy" ]; then
    "${sudo_cmd[@]}" mv -f "$saved_policy" "$policy"
  else
    "${sudo_cmd[@]}" rm -f "$policy"
  fi
}
if [ -e "$policy" ]; then
  saved_policy=$("${sudo_cmd[@]}" mktemp /usr/sbin/policy-rc.d.gpureap.XXXXXX)
  "${sudo_cmd[@]}" cp -p "$policy" "$saved_policy"
fi
trap restore_policy EXIT
for s in "${services[@]}"; do
  installed "$s" || new_services+=("$s")
done
running_before=()
for d in "${daemons[@]}"; do
  if pgrep -x "$d" >/dev/null; then running_before+=("$d"); fi
done
printf '#!/bin/sh\n# gpureap install-deps: start no service while installing\nexit 101\n' |
  "${sudo_cmd[@]}" tee "$policy" >/dev/null
"${sudo_cmd[@]}" chmod 755 "$policy"
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
restore_policy
trap - EXIT
# Only the services this run brought: one the machine had is its owner's business.
for s in "${new_services[@]}"; do
  installed "$s" || continue
  if command -v deb-systemd-helper >/dev/null; then
    # deb-systemd-helper does nothing ("was not called from dpkg") unless dpkg's
    # maintainer-script environment names the package.
    for unit in $(units_of "$s"); do
      "${sudo_cmd[@]}" env DPKG_MAINTSCRIPT_PACKAGE="$s" deb-systemd-helper disable "$unit" \
        >/dev/null 2>&1 || true
    done
  fi
  if [ -x "/etc/init.d/$s" ] && command -v update-rc.d >/dev/null; then
    "${sudo_cmd[@]}" update-rc.d "$s" disable >/dev/null 2>&1 || true
  fi
done
# Check rather than trust: a daemon that runs now and did not before was started by the
# install. Say so; stopping it is the machine owner's call.
for d in "${daemons[@]}"; do
  if pgrep -x "$d" >/dev/null && [[ ! " ${running_before[*]} " == *" $d "* ]]; then
    echo "install-deps: warning: $d is running since this install; stop it if this machine" \
         "should not run it" >&2
  fi
done
