# Simulated nodes for the contrib tests that run gpureap the way a fleet tool does
# (nhc_check_test.sh, clush_fold_test.sh). Sourced; needs $sim (gpureap-sim) and $tmp (a
# fresh directory the caller removes). Each node is $tmp/<name>, with its own state
# directory $tmp/<name>/state; `sim_cleanup_all` (call it from the caller's EXIT trap)
# kills what `hold` started there, ours, through gpureap-sim's pidfds.
# shellcheck shell=sh disable=SC2154  # $sim and $tmp are the caller's

sim_nodes=""

# sim_node NAME [gpureap-sim node options]: creates the node.
sim_node() {
  name=$1
  shift
  "$sim" node --dir "$tmp/$name" "$@" 2>/dev/null >"$tmp/$name.export" ||
    { echo "cannot create node $name"; exit 1; }
  sed 's/^export //' "$tmp/$name.export" >"$tmp/$name.env"
  mkdir -m 700 "$tmp/$name/state"
  echo "GPUREAP_STATE_DIR=$tmp/$name/state" >>"$tmp/$name.env"
  sim_nodes="$sim_nodes $name"
}

# sim_env NAME: the environment gpureap needs for that node, as `env` arguments
# (GPUREAP_NVML_LIBRARY, GPUREAP_SIM_DIR, GPUREAP_DEV_DIR, GPUREAP_STATE_DIR).
sim_env() {
  tr '\n' ' ' <"$tmp/$1.env"
}

# sim_orphans NAME GPU: a server whose two workers (GPU and GPU+1) outlive it, orphaned.
sim_orphans() {
  "$sim" hold --dir "$tmp/$1" --gpu "$2" --bytes 20GiB --children 2 --orphan --detach \
    >/dev/null || { echo "cannot start holders on $1"; exit 1; }
}

sim_cleanup_all() {
  for name in $sim_nodes; do
    "$sim" cleanup --dir "$tmp/$name" >/dev/null 2>&1 || true
  done
}
