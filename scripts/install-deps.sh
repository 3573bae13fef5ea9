#!/usr/bin/env bash
# Installs gpureap's build and test dependencies from Debian's packages.
# Idempotent: installs only what is missing, and does nothing when all is present.
# Extra package names given as arguments are installed the same way
# (scripts/install-fuzz-deps.sh passes the fuzzing toolchain).
set -euo pipefail
packages=(g++ cmake make pkg-config ninja-build ccache mold libcli11-dev nlohmann-json3-dev libfmt-dev libre2-dev
          libgtest-dev libgmock-dev util-linux psmisc procps python3 "$@")
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
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
