#!/usr/bin/env bash
# Installs gpureap's build and test dependencies from Debian's packages.
# Idempotent: installs only what is missing, and does nothing when all is present.
# Extra package names given as arguments are installed the same way
# (scripts/install-fuzz-deps.sh passes the fuzzing toolchain).
#
# `prometheus` is a test tool only: its promtool checks the agent's /metrics text and
# its server scrapes the agent in an end-to-end test (docs/metrics.md). The tests start
# their own server on a free loopback port; the package's service must never run, so it
# is installed without starting it (see install_without_starting below).
set -euo pipefail
packages=(g++ cmake make pkg-config ninja-build ccache mold libcli11-dev nlohmann-json3-dev libfmt-dev libre2-dev
          libmicrohttpd-dev libgtest-dev libgmock-dev util-linux psmisc procps python3 prometheus "$@")
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
"${sudo_cmd[@]}" apt-get update -qq

# Debian's prometheus postinst starts its service (invoke-rc.d, or deb-systemd-invoke
# under systemd) and enables it at boot: a server on :9090 and a TSDB in
# /var/lib/prometheus on a build machine. Both invoke-rc.d and deb-systemd-invoke ask
# /usr/sbin/policy-rc.d first, and exit status 101 means "action forbidden", so a
# temporary one that exits 101 (the machine's own, if any, put back afterwards) keeps
# the service from starting; the boot links it created are then disabled.
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
printf '#!/bin/sh\n# gpureap install-deps: start no service while installing\nexit 101\n' |
  "${sudo_cmd[@]}" tee "$policy" >/dev/null
"${sudo_cmd[@]}" chmod 755 "$policy"
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
restore_policy
trap - EXIT
if printf '%s\n' "${missing[@]}" | grep -qx prometheus; then
  if command -v deb-systemd-helper >/dev/null; then
    "${sudo_cmd[@]}" deb-systemd-helper disable prometheus.service >/dev/null 2>&1 || true
  fi
  if [ -x /etc/init.d/prometheus ] && command -v update-rc.d >/dev/null; then
    "${sudo_cmd[@]}" update-rc.d prometheus disable >/dev/null 2>&1 || true
  fi
fi
