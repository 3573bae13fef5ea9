#!/bin/sh
# Generates what `make install` and the .deb ship besides the binary, from the built
# binary itself (CMakeLists.txt runs this after every link of gpureap):
#   OUT/man/*.1          the man pages (`gpureap man-page`; checked by tests/package)
#   OUT/man-gz/*.1.gz    the same, gzipped for installing (gzip -n: reproducible)
#   OUT/completions/     gpureap (bash) and _gpureap (zsh), from `gpureap completion`
#   OUT/changelog.gz     packaging/changelog, gzipped (Debian's doc/changelog.gz)
# Usage: generate-share.sh BINARY OUT SOURCE_DIR
set -eu
bin=$1 out=$2 src=$3
rm -rf "$out/man" "$out/man-gz" "$out/completions"
mkdir -p "$out/man" "$out/man-gz" "$out/completions"
"$bin" man-page --dir "$out/man"
for page in "$out"/man/*.1; do
  gzip -9nc "$page" > "$out/man-gz/$(basename "$page").gz"
done
"$bin" completion bash > "$out/completions/gpureap"
"$bin" completion zsh > "$out/completions/_gpureap"
gzip -9nc "$src/packaging/changelog" > "$out/changelog.gz"
touch "$out/stamp"
