#!/bin/sh
# Checks contrib/systemd (issue 12): `systemd-analyze verify` on the units as
# `make install` writes them (@BINDIR@ replaced by the built binary's directory),
# with no warning allowed, then every gpureap command line in them, run.
# Usage: verify_systemd.sh SOURCE_DIR GPUREAP_BINARY GPUREAP_SIM_BINARY
set -eu
src=$1
bin=$2
sim=$3
command -v systemd-analyze >/dev/null || { echo "systemd-analyze not installed"; exit 1; }
tmp=$(mktemp -d)
trap '"$sim" cleanup --dir "$tmp/node" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
bindir=$(dirname "$(readlink -f "$bin")")
for f in "$src"/contrib/systemd/*.service.in; do
  name=$(basename "$f" .in)
  sed "s|@BINDIR@|$bindir|g" "$f" > "$tmp/$name"
done
cp "$src/contrib/systemd/gpureap.tmpfiles" "$tmp/gpureap.conf"
# --man=no: no man pages in a minimal container; --recursive-errors=no: only our units.
out=$(systemd-analyze verify --man=no --recursive-errors=no "$tmp"/*.service 2>&1) || {
  echo "$out"; exit 1; }
# Warnings are printed but do not fail verify; ours must have none.
if [ -n "$out" ]; then echo "$out"; exit 1; fi
# Every gpureap command line in the units runs, as written, on a simulated node
# (`--help` would hide a bad option: CLI11 stops at it). run's command becomes
# `true`; watch is stopped with SIGTERM after 2 s and must exit 0.
eval "$("$sim" node --dir "$tmp/node" --gpus 2 --memory 16GiB 2>/dev/null)"
export GPUREAP_STATE_DIR="$tmp/state"
mkdir -m 700 "$GPUREAP_STATE_DIR"
grep -h '^Exec[A-Za-z]*=-\{0,1\}@BINDIR@/gpureap' "$src"/contrib/systemd/*.service.in |
  sed 's/^Exec[A-Za-z]*=-\{0,1\}@BINDIR@\/gpureap //' > "$tmp/lines"
n=0
while read -r line; do
  case "$line" in
    run\ *) line="${line%% -- *} -- true" ;;
  esac
  set +e
  case "$line" in
    # The port as written may be taken on a CI machine: any free one will do.
    watch*) timeout --preserve-status -s TERM 2 "$bin" $(echo "$line" | sed 's/:9847/:0/') \
              >"$tmp/out" 2>&1 ;;
    *) "$bin" $line >"$tmp/out" 2>&1 ;;
  esac
  rc=$?
  set -e
  # Every line exits 0: free's "nothing to do" too, with --ok-if-nothing (no "-" prefix
  # hides a real failure).
  case "$line:$rc" in
    *:0) n=$((n + 1)) ;;
    *) echo "gpureap $line: exit $rc"; cat "$tmp/out"; exit 1 ;;
  esac
done < "$tmp/lines"
echo "systemd units verified: $(ls "$tmp"/*.service | wc -l) units, $n gpureap command lines run"
