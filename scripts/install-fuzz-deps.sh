#!/usr/bin/env bash
# Installs what `make fuzz` needs beyond scripts/install-deps.sh: clang 16 and its
# libFuzzer/sanitizer runtimes, from Debian's packages. Not part of CI (CI replays the
# stored corpus with gcc). Debian 12's default `clang` is clang 14, which cannot compile
# libstdc++ 12's std::expected; clang-16 can (see GPUREAP_FUZZ in CMakeLists.txt).
set -euo pipefail
exec "$(dirname "$0")/install-deps.sh" clang-16 libclang-rt-16-dev
