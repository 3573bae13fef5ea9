#!/usr/bin/env bash
# Installs what `make fuzz` needs beyond scripts/install-deps.sh: clang 16 and its
# libFuzzer/sanitizer runtimes, from Debian's packages. Not part of CI (CI replays the
# stored corpus with gcc). Debian 12's default `clang` is clang 14, which cannot compile
# libstdc++ 12's std::expected; clang-16 can (see GPUREAP_FUZZ in CMakeLists.txt).
# Idempotent: installs only what is missing.
set -euo pipefail
packages=(clang-16 libclang-rt-16-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "install-fuzz-deps: installing ${missing[*]}"
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
