#!/usr/bin/env bash
# Installs the offline validator of the Grafana dashboard (contrib/grafana/gpureap.json,
# docs/grafana.md) into BUILD_DIR/grafana-validate: @grafana/schema, @grafana/data,
# typescript-json-schema and ajv from the npm registry, exactly as
# tests/contrib/grafana-validate/package-lock.json pins them (`npm ci`), then makes the
# JSON schemas from Grafana's TypeScript types (make-schemas.cjs). Nothing is written to
# the source tree. `make deps` runs it for the build directory (BUILD, default build);
# the ctest contrib_grafana_dashboard skips, saying so, until it has run.
# Idempotent: does nothing when the installed tree matches the lock file and the schemas
# were made by this make-schemas.cjs (the stamp holds both).
# Usage: install-grafana-validator.sh BUILD_DIR
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)/tests/contrib/grafana-validate
work=$1/grafana-validate
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "install-grafana-validator: node and npm are not installed: the dashboard's schema check will be skipped" >&2
  exit 0
fi
mkdir -p "$work"
cp "$src/package.json" "$src/package-lock.json" "$src/make-schemas.cjs" "$work/"
stamp=$work/node_modules/.gpureap-installed
if cat "$src/package-lock.json" "$src/make-schemas.cjs" | cmp -s - "$stamp" 2>/dev/null; then
  exit 0
fi
echo "install-grafana-validator: npm ci in $work"
rm -f "$stamp"
(cd "$work" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
node "$work/make-schemas.cjs" "$work"
cat "$src/package-lock.json" "$src/make-schemas.cjs" >"$stamp"
