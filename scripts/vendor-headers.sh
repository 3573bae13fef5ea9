#!/usr/bin/env bash
# Copies the build dependencies (CLI11, nlohmann-json and fmt headers; RE2's,
# libmicrohttpd's, libyaml's, libxcrypt's and ncurses' headers and static libraries) from this machine's Debian packages into .deps/include and
# .deps/lib, for building on a machine without apt (the GPU machine). .deps/ is
# git-ignored; name it in the device tool's carry list.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
mkdir -p .deps/include
mkdir -p .deps/lib
cp -r /usr/include/CLI /usr/include/nlohmann /usr/include/fmt /usr/include/re2 .deps/include/
cp /usr/lib/x86_64-linux-gnu/libre2.a /usr/lib/x86_64-linux-gnu/libmicrohttpd.a .deps/lib/
cp /usr/include/microhttpd.h /usr/include/yaml.h /usr/include/crypt.h .deps/include/
cp /usr/lib/x86_64-linux-gnu/libyaml.a /usr/lib/x86_64-linux-gnu/libcrypt.a .deps/lib/
cp -r /usr/include/x86_64-linux-gnu/curl .deps/include/
cp /usr/include/curses.h /usr/include/ncurses_dll.h /usr/include/unctrl.h .deps/include/
cp /usr/lib/x86_64-linux-gnu/libncursesw.a /usr/lib/x86_64-linux-gnu/libtinfo.a .deps/lib/
echo "vendored headers into .deps/include, libre2.a, libmicrohttpd.a, libyaml.a, libcrypt.a, libncursesw.a and libtinfo.a into .deps/lib"
