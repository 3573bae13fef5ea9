#!/bin/sh
# Validates contrib/kubernetes offline against the Kubernetes and Prometheus Operator
# schemas (issue 12), with kubernetes-models from the npm registry, installed from
# k8s-validate/package-lock.json into WORK_DIR (the build tree: nothing is written
# into the source tree). Usage: validate_k8s.sh SOURCE_DIR WORK_DIR
set -eu
src=$1
work=$2/k8s-validate
command -v node >/dev/null && command -v npm >/dev/null || { echo "node and npm are needed"; exit 1; }
mkdir -p "$work"
cp "$src/tests/contrib/k8s-validate/package.json" "$src/tests/contrib/k8s-validate/package-lock.json" \
   "$src/tests/contrib/k8s-validate/validate.mjs" "$work/"
if ! cmp -s "$work/package-lock.json" "$work/node_modules/.package-lock.json.installed" 2>/dev/null; then
  (cd "$work" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  cp "$work/package-lock.json" "$work/node_modules/.package-lock.json.installed"
fi
node "$work/validate.mjs" "$src/contrib/kubernetes"
