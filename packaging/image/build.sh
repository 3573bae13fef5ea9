#!/usr/bin/env bash
# The agent's container image, built offline with buildah from nothing (`buildah from
# scratch`: no base image, nothing pulled): the portable binary (`make portable`), the
# glibc files `ldd` says it loads, GnuTLS with what it loads (dlopen'ed only for
# `watch --web-config` with TLS) and libcurl with what it loads (dlopen'ed only for
# `watch --gate kubernetes-*`), committed to a local tag (docs/kubernetes.md, "The image").
#
#   packaging/image/build.sh [BINARY [TAG]]
#
# BINARY: default build-portable/gpureap. TAG: default localhost/gpureap:<version>, the
# version and commit read from `BINARY --version`. Run as root (buildah's storage is
# root's). GPUREAP_BUILDAH_OPTS: global options for every buildah call (word-split), e.g.
# `--root DIR --runroot DIR --storage-driver vfs` for a store of one's own
# (tests/contrib/image_test.py). SOURCE_DATE_EPOCH, when set, is the image's timestamp.
# Prints the tag on stdout; exit 2 on a bad argument, 1 when buildah fails.
set -euo pipefail

SOURCE_URL="https://github.com/gpureap/gpureap"
bin="${1:-build-portable/gpureap}"
tag="${2:-}"
if [ "$#" -gt 2 ]; then
  echo "usage: $0 [BINARY [TAG]]" >&2
  exit 2
fi
if [ ! -x "$bin" ] || [ ! -f "$bin" ]; then
  echo "$0: BINARY: no executable $bin (make portable)" >&2
  exit 2
fi
command -v buildah >/dev/null || { echo "$0: no buildah (scripts/install-deps.sh installs it)" >&2; exit 1; }
read -r -a opts <<<"${GPUREAP_BUILDAH_OPTS:-}"
buildah() { command buildah "${opts[@]}" "$@"; }

# "gpureap 0.1.0 (commit 394b4d447a97)": the version and commit of what goes in.
first=$("$bin" --version | head -n 1)
version=$(sed -nE 's/^gpureap ([^ ]+).*/\1/p' <<<"$first")
commit=$(sed -nE 's/.*\(commit ([0-9a-f]+)\).*/\1/p' <<<"$first")
if [ -z "$version" ]; then
  echo "$0: $bin --version did not say gpureap's version: $first" >&2
  exit 2
fi
tag="${tag:-localhost/gpureap:$version}"

stage=$(mktemp -d)
ctr=""
cleanup() {
  rm -rf "$stage"
  if [ -n "$ctr" ]; then buildah rm "$ctr" >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT

# A file the loader will look for at PATH, placed where PATH leads on this machine (the
# contents of the file its links end at), so a usrmerged /lib -> usr/lib stays one.
place() {
  local path=$1 dir
  dir=$(readlink -f "$(dirname "$path")")
  mkdir -p "$stage$dir"
  cp -L "$path" "$stage$dir/$(basename "$path")"
}
# Every library `ldd` resolves for FILE (none for a static binary), and the loader.
closure() {
  { ldd "$1" 2>/dev/null || true; } | sed -nE 's/^\s*(\S+ => )?(\/\S+) \(0x[0-9a-f]+\)$/\2/p'
}

mkdir -p "$stage/usr/bin"
install -m 0755 "$bin" "$stage/usr/bin/gpureap"
libs=$(closure "$bin")
gnutls=$( (/sbin/ldconfig -p 2>/dev/null || true) | sed -nE 's/^\s*libgnutls\.so\.30 \(libc6,x86-64\) => (\S+)$/\1/p' | head -n 1)
if [ -n "$gnutls" ]; then
  libs+=$'\n'"$gnutls"$'\n'$(closure "$gnutls")
else
  echo "$0: warning: no libgnutls.so.30 here (Debian: libgnutls30): the image's agent refuses TLS" >&2
fi
# libcurl with what it loads (dlopen'ed only for `watch --gate kubernetes-*`).
curl=$( (/sbin/ldconfig -p 2>/dev/null || true) | sed -nE 's/^\s*libcurl(-gnutls)?\.so\.4 \(libc6,x86-64\) => (\S+)$/\2/p' | head -n 1)
if [ -n "$curl" ]; then
  libs+=$'\n'"$curl"$'\n'$(closure "$curl")
else
  echo "$0: warning: no libcurl.so.4 here (Debian: libcurl4): the image's agent refuses --gate kubernetes-*" >&2
fi
while read -r lib; do
  if [ -n "$lib" ]; then place "$lib"; fi
done < <(sort -u <<<"$libs")
# The top-level links of a usrmerged system (/lib64/ld-linux-x86-64.so.2 is the binary's
# interpreter), as this machine has them.
for d in lib lib64 bin; do
  if [ -L "/$d" ]; then ln -s "$(readlink "/$d")" "$stage/$d"; fi
done
# Mount points the DaemonSet uses, present in the read-only root.
mkdir -p "$stage/run/gpureap" "$stage/dev" "$stage/proc" "$stage/sys" "$stage/tmp"
chmod 0700 "$stage/run/gpureap"
chmod 1777 "$stage/tmp"

ctr=$(buildah from --name "gpureap-image-$$" scratch)
buildah copy --quiet "$ctr" "$stage/" / >/dev/null
buildah config \
  --os linux --arch amd64 \
  --entrypoint '["/usr/bin/gpureap"]' \
  --cmd '["watch", "--listen", "0.0.0.0:9847"]' \
  --port 9847/tcp \
  --env GPUREAP_STATE_DIR=/run/gpureap \
  --label org.opencontainers.image.title=gpureap \
  --label "org.opencontainers.image.description=gpureap's node agent: GPU memory held by stray processes, announced, exported, reaped" \
  --label "org.opencontainers.image.version=$version" \
  --label "org.opencontainers.image.revision=$commit" \
  --label "org.opencontainers.image.source=$SOURCE_URL" \
  "$ctr"
commit_opts=()
if [ -n "${SOURCE_DATE_EPOCH:-}" ]; then commit_opts+=(--timestamp "$SOURCE_DATE_EPOCH"); fi
buildah commit --quiet --rm "${commit_opts[@]}" "$ctr" "$tag" >/dev/null
ctr=""
echo "$tag"
