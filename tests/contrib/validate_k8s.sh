#!/bin/sh
# Validates contrib/kubernetes offline against the Kubernetes and Prometheus Operator
# schemas (issue 12), with kubernetes-models from the npm registry as
# k8s-validate/package-lock.json pins them, installed once per user and machine and
# linked into WORK_DIR/k8s-validate (scripts/npm-tree.sh; nothing is written into the
# source tree). Usage: validate_k8s.sh SOURCE_DIR WORK_DIR
set -eu
src=$1
work=$2/k8s-validate
command -v node >/dev/null && command -v npm >/dev/null || { echo "node and npm are needed"; exit 1; }
"$src/scripts/npm-tree.sh" "$src/tests/contrib/k8s-validate" "$work"
node "$work/validate.mjs" "$src/contrib/kubernetes"
