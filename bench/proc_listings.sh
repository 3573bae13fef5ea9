#!/usr/bin/env bash
# How many times one `gpureap free --orphans --yes` lists /proc (issue 36: at most 4 in
# a one-round free). A simulated node (no GPU needed), one server whose 2 workers are
# orphaned (hold --orphan), freed once under strace. Two counts: the openat() of the /proc
# directory itself (O_DIRECTORY: a listing, or a directory fd to read a few processes
# through), and the listings proper (getdents64 on /proc read to its end, = 0).
# Run as root from the repository root: bench/proc_listings.sh [BUILD_DIR] [GPUREAP_BIN]
set -euo pipefail
build=${1:-build}
bin=${2:-$build/gpureap}
sim="$build/sim/gpureap-sim"
node=$(mktemp -d /tmp/gpureap-listings.XXXXXX)
trace="$node/trace"
cleanup() { "$sim" cleanup --dir "$node" >/dev/null 2>&1 || true; rm -rf "$node"; }
trap cleanup EXIT

eval "$("$sim" node --dir "$node" --gpus 2 --memory 80GiB)"
export GPUREAP_STATE_DIR="$node/state" GPUREAP_NVIDIA_SMI="$node/bin/nvidia-smi"
mkdir -p "$GPUREAP_STATE_DIR"
"$sim" hold --dir "$node" --gpu 0 --children 2 --bytes 20GiB --orphan --detach >/dev/null
set +e
strace -ff -y ${STRACE_FLAGS:-} -e trace=openat,getdents64 -o "$trace" "$bin" free --orphans --all --yes --grace 2s \
  >"$node/free.out" 2>&1
status=$?
set -e
# One file per thread (-ff): no call is split across lines by another thread's.
opens=$(cat "$trace".* | grep -cE 'openat\(AT_FDCWD[^,]*, "/proc", [^)]*O_DIRECTORY' || true)
listings=$(cat "$trace".* | grep -cE 'getdents64\([0-9]+</proc>, .*\) = 0$' || true)
[ -n "${KEEP_TRACE:-}" ] && cat "$trace".* >"$KEEP_TRACE"
echo "free exit=$status ($(grep -m1 -E '^(Result|Nothing)' "$node/free.out" || echo '?'))"
echo "proc_opens=$opens proc_listings=$listings"
