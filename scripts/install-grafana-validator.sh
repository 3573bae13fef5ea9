#!/usr/bin/env bash
# Installs the offline validator of the Grafana dashboard (contrib/grafana/gpureap.json,
# docs/grafana.md) for BUILD_DIR/grafana-validate: @grafana/schema, @grafana/data,
# typescript-json-schema and ajv from the npm registry, exactly as
# tests/contrib/grafana-validate/package-lock.json pins them (`npm ci`), then the JSON
# schemas made from Grafana's TypeScript types (make-schemas.cjs). The tree is installed
# once per user and machine and linked into the build directory (scripts/npm-tree.sh says
# where); nothing is written to the source tree. `make deps` runs it for the build
# directory (BUILD, default build); the ctest contrib_grafana_dashboard skips, saying so,
# until it has run. Does nothing when the build directory already links the tree of the
# current package-lock.json and scripts.
# Usage: install-grafana-validator.sh BUILD_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "install-grafana-validator: node and npm are not installed: the dashboard's schema check will be skipped" >&2
  exit 0
fi
exec "$here/npm-tree.sh" "$here/../tests/contrib/grafana-validate" "$1/grafana-validate" make-schemas.cjs
