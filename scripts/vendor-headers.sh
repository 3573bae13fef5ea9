#!/usr/bin/env bash
# Copies the header-only dependencies (CLI11, nlohmann-json, fmt) from this
# machine's Debian packages into .deps/include, for building on a machine
# without apt (the GPU machine). .deps/ is git-ignored.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
mkdir -p .deps/include
cp -r /usr/include/CLI /usr/include/nlohmann /usr/include/fmt .deps/include/
echo "vendored headers into .deps/include"
