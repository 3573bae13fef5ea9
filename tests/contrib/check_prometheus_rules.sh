#!/bin/sh
# Checks contrib/prometheus (issue 27): the rules file passes `promtool check rules` and
# every promtool unit test in tests/contrib/prometheus/; every alert has at least one
# firing and one non-firing test, and every recording rule is evaluated by a test; every
# alert has severity, summary, description and a runbook_url whose anchor is a heading of
# docs/runbooks.md; the PrometheusRule is what generate-prometheusrule.py makes of the
# rules file (and passes `promtool check rules` itself).
# Usage: check_prometheus_rules.sh [SOURCE_DIR]   (default: this script's repository)
# Exit 77 (skipped) without promtool (Debian: the `prometheus` package).
set -eu
src=${1:-$(dirname "$0")/../..}
src=$(cd "$src" && pwd)
rules=$src/contrib/prometheus/gpureap-rules.yml
operator_rule=$src/contrib/prometheus/gpureap-prometheusrule.yaml
tests_dir=$src/tests/contrib/prometheus
runbooks=$src/docs/runbooks.md

if ! command -v promtool >/dev/null 2>&1; then
  echo "SKIP: promtool not installed (Debian: apt-get install prometheus)"
  exit 77
fi
python3 -c 'import yaml' 2>/dev/null || { echo "python3 with PyYAML is needed (python3-yaml)"; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

promtool check rules "$rules"

n_tests=0
for t in "$tests_dir"/*.test.yml; do
  [ -e "$t" ] || { echo "no promtool tests in $tests_dir"; exit 1; }
  promtool test rules "$t"
  n_tests=$((n_tests + 1))
done

# The PrometheusRule: in sync with the rules file, and valid rules itself.
python3 "$src/contrib/prometheus/generate-prometheusrule.py" --check "$rules" "$operator_rule"
python3 - "$operator_rule" "$tmp/prometheusrule-spec.yml" <<'EOF'
import sys, yaml
doc = yaml.safe_load(open(sys.argv[1], encoding="utf-8"))
assert doc["apiVersion"] == "monitoring.coreos.com/v1" and doc["kind"] == "PrometheusRule", doc
yaml.safe_dump(doc["spec"], open(sys.argv[2], "w", encoding="utf-8"), sort_keys=False)
EOF
promtool check rules "$tmp/prometheusrule-spec.yml" >/dev/null || {
  promtool check rules "$tmp/prometheusrule-spec.yml"; exit 1; }

# Coverage, annotations and runbook anchors.
python3 - "$rules" "$runbooks" "$tests_dir"/*.test.yml <<'EOF'
import os, re, sys, yaml
from urllib.parse import urlsplit

rules_path, runbooks_path, test_paths = sys.argv[1], sys.argv[2], sys.argv[3:]
RUNBOOK_PREFIX = "https://github.com/gpureap/gpureap/blob/main/docs/runbooks.md#"
errors = []

alerts, records = {}, []
for group in yaml.safe_load(open(rules_path, encoding="utf-8"))["groups"]:
    for rule in group["rules"]:
        if "alert" in rule:
            if rule["alert"] in alerts:
                errors.append(f"alert {rule['alert']} is defined twice")
            alerts[rule["alert"]] = rule
        else:
            records.append(rule["record"])

# GitHub's heading anchors: lower case, punctuation dropped (letters, digits, spaces,
# '-' and '_' kept), each space a '-', and -1, -2, ... after repeats.
def anchors(markdown):
    seen, out, fence = {}, set(), False
    for line in markdown.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fence = not fence
            continue
        m = None if fence else re.match(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m.group(1))  # a link's text
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out

headings = anchors(open(runbooks_path, encoding="utf-8").read())
for name, rule in alerts.items():
    labels, ann = rule.get("labels", {}), rule.get("annotations", {})
    if labels.get("severity") not in ("critical", "warning", "info"):
        errors.append(f"{name}: labels.severity must be critical, warning or info")
    for key in ("summary", "description", "runbook_url"):
        if not ann.get(key):
            errors.append(f"{name}: no annotations.{key}")
    url = ann.get("runbook_url", "")
    if url and not url.startswith(RUNBOOK_PREFIX):
        errors.append(f"{name}: runbook_url {url} is not under {RUNBOOK_PREFIX}")
    elif url and urlsplit(url).fragment not in headings:
        errors.append(f"{name}: runbook_url anchor #{urlsplit(url).fragment} is no heading "
                      f"of docs/runbooks.md")

firing = {name: 0 for name in alerts}
silent = {name: 0 for name in alerts}
evaluated = set()
for path in test_paths:
    doc = yaml.safe_load(open(path, encoding="utf-8"))
    here = os.path.dirname(os.path.abspath(path))
    if not any(os.path.realpath(os.path.join(here, f)) == os.path.realpath(rules_path)
               for f in doc.get("rule_files", [])):
        errors.append(f"{path}: rule_files does not name {rules_path}")
    for test in doc.get("tests", []):
        for case in test.get("alert_rule_test") or []:
            name = case.get("alertname")
            if name not in alerts:
                errors.append(f"{path}: test of unknown alert {name}")
            elif case.get("exp_alerts"):
                firing[name] += 1
            else:
                silent[name] += 1
        for case in test.get("promql_expr_test") or []:
            evaluated.update(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", case.get("expr", "")))

for name in alerts:
    if not firing[name]:
        errors.append(f"{name}: no firing test (an alert_rule_test with exp_alerts)")
    if not silent[name]:
        errors.append(f"{name}: no non-firing test (an alert_rule_test with exp_alerts: [])")
for record in records:
    if record not in evaluated:
        errors.append(f"{record}: no promql_expr_test evaluates it")

if errors:
    print("\n".join(errors))
    sys.exit(1)
print(f"{len(alerts)} alerts, each with a firing and a non-firing test "
      f"({sum(firing.values())} firing, {sum(silent.values())} non-firing cases); "
      f"{len(records)} recording rules, each evaluated; every runbook_url anchor is a "
      f"heading of docs/runbooks.md")
EOF
echo "prometheus rules verified: $n_tests promtool test files passed; PrometheusRule in sync"
