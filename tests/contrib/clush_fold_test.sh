#!/bin/sh
# `clush -b` folds `gpureap status --summary` (issue 27, docs/fleet-checks.md): three
# simulated nodes, two healthy (one idle, one with a detached holder at work) and one with
# orphaned workers, give two groups: the healthy nodes' identical line once, the problem
# once. ClusterShell's exec worker (`-R exec`, ClusterShell >= 1.8) runs the command
# locally once per node, %h being the node's name, so no ssh is needed: each "node" is a
# simulated one in $tmp/<name>. The same with --check: clush names the problem node's exit
# status 1, and with -S (--maxrc) exits with it.
# Usage: clush_fold_test.sh SOURCE_DIR GPUREAP_BINARY GPUREAP_SIM_BINARY
# Exit 77 (skipped) without clush (Debian: clustershell) or without its exec worker.
set -eu
src=$1
gpureap=$2
sim=$3
command -v clush >/dev/null || { echo "SKIP: clush not installed (Debian: clustershell)"; exit 77; }
clush -R exec -w probe true >/dev/null 2>&1 ||
  { echo "SKIP: this clush has no exec worker (-R exec: ClusterShell >= 1.8)"; exit 77; }
tmp=$(mktemp -d)
. "$src/tests/contrib/sim_nodes.sh"
trap 'sim_cleanup_all; rm -rf "$tmp"' EXIT

sim_node node1 --gpus 8 --memory 96GiB
sim_node node2 --gpus 8 --memory 96GiB
sim_node node3 --gpus 8 --memory 96GiB
"$sim" hold --dir "$tmp/node2" --gpu 0 --bytes 60GiB --detach >/dev/null
sim_orphans node3 2
# Per node, by %h: the node's environment (sim_nodes.sh wrote it for each).
per_node="env \$(cat $tmp/%h.env) $gpureap status"

want='---------------
node[1-2] (2)
---------------
clean: 8 GPUs, no leak
---------------
node3
---------------
problem: orphaned memory on GPU 2,3'
got=$(clush -R exec -b -w 'node[1-3]' "$per_node --summary" 2>"$tmp/err")
echo "\$ clush -R exec -b -w node[1-3] gpureap status --summary"
echo "$got"
failures=0
[ "$got" = "$want" ] || { echo "FAIL: not two groups as expected"; failures=1; }
[ ! -s "$tmp/err" ] || { echo "FAIL: clush stderr:"; cat "$tmp/err"; failures=1; }

set +e
got=$(clush -R exec -S -b -w 'node[1-3]' "$per_node --check" 2>"$tmp/err")
rc=$?
set -e
echo "\$ clush -R exec -S -b -w node[1-3] gpureap status --check   # exit $rc"
echo "$got"
cat "$tmp/err"
[ "$got" = "$want" ] || { echo "FAIL: --check folds differently"; failures=1; }
[ "$rc" -eq 1 ] || { echo "FAIL: clush exit $rc, want 1 (the worst node's)"; failures=1; }
grep -q 'node3.*exit code 1' "$tmp/err" || { echo "FAIL: clush does not name node3's exit 1"; failures=1; }
[ "$failures" -eq 0 ] || exit 1
echo "clush -b: 3 nodes, 2 groups"
