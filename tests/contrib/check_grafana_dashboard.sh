#!/bin/sh
# Validates contrib/grafana/gpureap.json offline, without a Grafana server (issue 27):
# against Grafana's own schema (JSON schemas made from @grafana/schema's TypeScript types
# by typescript-json-schema, checked with ajv) and unit list (@grafana/data), plus layout,
# datasource and variable checks (grafana-validate/validate.cjs). The npm packages are in
# BUILD_DIR/grafana-validate, linked by scripts/install-grafana-validator.sh (`make
# deps`) to the tree package-lock.json pins; without them this test skips (exit 77), saying so.
# Then proves the validator can fail: copies of the dashboard each with one defect
# (a misspelt panel option, a unit Grafana lacks, two panels overlapping, a query on
# another datasource) must each be rejected.
# The queries themselves are evaluated by a real Prometheus in the e2e test
# GrafanaDashboard.* (tests/e2e/grafana_dashboard_test.cc).
# Usage: check_grafana_dashboard.sh SOURCE_DIR BUILD_DIR
set -eu
src=$1
work=$2/grafana-validate
dashboard=$src/contrib/grafana/gpureap.json
if ! command -v node >/dev/null; then
  echo "SKIP: node is not installed (the dashboard's schema check needs it)"
  exit 77
fi
if ! "$src/scripts/npm-tree.sh" --installed "$src/tests/contrib/grafana-validate" "$work" \
       make-schemas.cjs; then
  echo "SKIP: the Grafana schema validator is not installed (or not as package-lock.json and"
  echo "make-schemas.cjs say) for $work: run \`make deps\` (scripts/install-grafana-validator.sh $2)"
  exit 77
fi
cp "$src/tests/contrib/grafana-validate/validate.cjs" "$work/"
node "$work/validate.cjs" "$work" "$dashboard"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 - "$dashboard" "$tmp" <<'PY'
import json, sys
dashboard, out = sys.argv[1], sys.argv[2]
d = json.load(open(dashboard))
panels = [p for p in d["panels"] if p["type"] != "row"]
stat = next(p for p in panels if p["type"] == "stat")
series = next(p for p in panels if p["type"] == "timeseries")
def defect(name, change):
    copy = json.loads(json.dumps(d))
    change(copy, next(p for p in copy["panels"] if p["id"] == stat["id"]),
           next(p for p in copy["panels"] if p["id"] == series["id"]))
    json.dump(copy, open(f"{out}/{name}.json", "w"))
defect("option-typo", lambda d, s, t: s["options"].update(colourMode="value"))
defect("unknown-unit", lambda d, s, t: t["fieldConfig"]["defaults"].update(unit="gigabytes"))
defect("overlap", lambda d, s, t: t["gridPos"].update(x=s["gridPos"]["x"], y=s["gridPos"]["y"]))
defect("other-datasource", lambda d, s, t: t["targets"][0].update(datasource={"type": "prometheus", "uid": "prod"}))
PY
# The four defective copies in one validator process (loading it is most of its time):
# each must be rejected on its own ("NAME: rejected: ..."), and the call must fail.
if node "$work/validate.cjs" "$work" "$tmp"/*.json >"$tmp/out" 2>"$tmp/err"; then
  echo "FAIL: the validator accepted every defective copy:"
  cat "$tmp/out" "$tmp/err"
  exit 1
fi
for bad in "$tmp"/*.json; do
  name=$(basename "$bad")
  if ! grep -q "^$name: rejected: " "$tmp/out"; then
    echo "FAIL: the validator accepted ${name%.json}:"
    cat "$tmp/out" "$tmp/err"
    exit 1
  fi
  echo "rejected ${name%.json}: $(grep "^$name: rejected: " "$tmp/out" | sed "s/^$name: rejected: //")"
done
