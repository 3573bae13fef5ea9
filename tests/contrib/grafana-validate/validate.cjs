// Validates a Grafana dashboard (classic JSON) offline, without a Grafana server:
//  1. against Grafana's own schema: the JSON schemas make-schemas.cjs made from
//     @grafana/schema's TypeScript types (the dashboard; each panel's options and
//     custom field config against its plugin's types), checked with ajv;
//  2. every unit against Grafana's own unit list (@grafana/data's getValueFormats,
//     what the unit picker offers), and byte metrics shown in bytes, seconds in s;
//  3. what the schema cannot say: unique panel ids, gridPos inside the 24 columns
//     and no two panels overlapping, every panel and query on the `${datasource}`
//     variable, each target with a refId and an expr, every `$variable` a query
//     uses defined (or one of Grafana's own), the datasource/instance/gpu variables.
// Usage: node validate.cjs DIR DASHBOARD.json... (DIR holds node_modules and schemas/).
// Each dashboard is checked on its own: a valid one prints "NAME: valid ..." on stdout; an
// invalid one prints its problems on stderr, then "NAME: N problem(s)" on stderr and
// "NAME: rejected: FIRST PROBLEM" on stdout. Exit 1 when any was invalid. One process
// checks them all: loading the packages and compiling the schemas is most of the time.
"use strict";
const fs = require("node:fs");
const path = require("node:path");

const dir = path.resolve(process.argv[2]);
const files = process.argv.slice(3);
const Ajv = require(path.join(dir, "node_modules/ajv"));
// @grafana/data formats dates with the browser's locale when its unit list is built.
globalThis.navigator = { language: "en-US", languages: ["en-US"] };
const grafanaData = require(path.join(dir, "node_modules/@grafana/data"));

const schemas = path.join(dir, "schemas");
const readSchema = (name) => JSON.parse(fs.readFileSync(path.join(schemas, name), "utf8"));
const plugins = readSchema("plugins.json");
const ajv = new Ajv({ allErrors: true, strict: false });
const compiled = new Map();  // schema file -> ajv's validate function, compiled once
const units = new Set(
  grafanaData.getValueFormats().flatMap((category) => category.submenu.map((u) => u.value)),
);
const schemaVersion = require(path.join(dir, "node_modules/@grafana/schema/package.json")).version;

let invalid = 0;
for (const file of files) {
  const result = validateDashboard(JSON.parse(fs.readFileSync(file, "utf8")));
  const name = path.basename(file);
  if (result.problems.length) {
    ++invalid;
    for (const e of result.problems) console.error(e);
    console.error(`${name}: ${result.problems.length} problem(s)`);
    console.log(`${name}: rejected: ${result.problems[0]}`);
  } else {
    console.log(`${name}: valid against @grafana/schema ${schemaVersion} ${result.summary}`);
  }
}
process.exit(invalid ? 1 : 0);

// The problems of one dashboard (none: valid), and its one-line summary.
function validateDashboard(dashboard) {
  const errors = [];
  const fail = (where, what) => errors.push(`${where}: ${what}`);

  function check(schemaName, value, where) {
    if (!compiled.has(schemaName)) compiled.set(schemaName, ajv.compile(readSchema(schemaName)));
    const validate = compiled.get(schemaName);
    if (!validate(value))
      for (const e of validate.errors)
        fail(where, `${e.instancePath || "/"} ${e.message} ${JSON.stringify(e.params)} (${schemaName})`);
  }

  // 1. Grafana's schema.
  check("dashboard.json", dashboard, "dashboard");
  const top = dashboard.panels ?? [];
  const all = top.flatMap((p) => (p.type === "row" ? [p, ...(p.panels ?? [])] : [p]));
  const panels = all.filter((p) => p.type !== "row");
  for (const p of panels) {
    const where = `panel ${p.id} "${p.title}"`;
    if (!plugins.includes(p.type)) {
      fail(where, `type ${p.type}: no schema here for it (make-schemas.cjs lists the panel types checked)`);
      continue;
    }
    check(`panel-${p.type}-options.json`, p.options ?? {}, `${where} options`);
    const custom = p.fieldConfig?.defaults?.custom;
    if (custom !== undefined) {
      if (fs.existsSync(path.join(schemas, `panel-${p.type}-fieldconfig.json`)))
        check(`panel-${p.type}-fieldconfig.json`, custom, `${where} fieldConfig.defaults.custom`);
      else fail(where, `fieldConfig.defaults.custom: ${p.type} has no custom field config`);
    }
  }

  // 2. Units.
  const exprs = (p) => (p.targets ?? []).map((t) => t.expr ?? "");
  for (const p of panels) {
    const where = `panel ${p.id} "${p.title}"`;
    const unit = p.fieldConfig?.defaults?.unit;
    if (unit === undefined) fail(where, "no unit (fieldConfig.defaults.unit)");
    else if (!units.has(unit)) fail(where, `unit ${unit} is not one of Grafana's units`);
    for (const o of p.fieldConfig?.overrides ?? [])
      for (const prop of o.properties)
        if (prop.id === "unit" && !units.has(prop.value))
          fail(where, `override unit ${prop.value} is not one of Grafana's units`);
    // A panel whose every query reads a byte metric shows bytes; seconds likewise.
    const metrics = exprs(p).map((e) => e.match(/[a-z_:]*gpureap_[a-z_]+/g) ?? []);
    const every = (re) => metrics.length > 0 && metrics.every((m) => m.length > 0 && m.every((n) => re.test(n)));
    if (every(/_bytes(:[a-z0-9_]+)?$/) && !["bytes", "decbytes"].includes(unit))
      fail(where, `its queries read bytes, but its unit is ${unit} (bytes: IEC, decbytes: SI)`);
    if (every(/_seconds(_bucket)?(:[a-z0-9_]+)?$/) && !["s", "dtdurations"].includes(unit))
      fail(where, `its queries read seconds, but its unit is ${unit}`);
  }

  // 3. Structure.
  const ids = new Map();
  for (const p of all) {
    if (ids.has(p.id)) fail(`panel ${p.id} "${p.title}"`, `id also used by "${ids.get(p.id)}"`);
    ids.set(p.id, p.title);
  }
  const boxes = [];
  for (const p of all) {
    const where = `panel ${p.id} "${p.title}"`;
    const g = p.gridPos;
    if (!g) {
      fail(where, "no gridPos");
      continue;
    }
    if (g.x < 0 || g.y < 0 || g.w < 1 || g.h < 1 || g.x + g.w > 24)
      fail(where, `gridPos ${JSON.stringify(g)} is outside the 24 columns`);
    for (const [other, o] of boxes)
      if (g.x < o.x + o.w && o.x < g.x + g.w && g.y < o.y + o.h && o.y < g.y + g.h)
        fail(where, `gridPos overlaps panel "${other}"`);
    boxes.push([p.title, g]);
  }
  const ours = (ds) => ds?.type === "prometheus" && ds?.uid === "${datasource}";
  for (const p of panels) {
    const where = `panel ${p.id} "${p.title}"`;
    if (!ours(p.datasource)) fail(where, `datasource ${JSON.stringify(p.datasource)} is not \${datasource}`);
    if (!(p.targets?.length > 0)) fail(where, "no targets");
    const refIds = new Set();
    for (const t of p.targets ?? []) {
      if (!ours(t.datasource)) fail(where, `target ${t.refId}: datasource is not \${datasource}`);
      if (!t.refId || refIds.has(t.refId)) fail(where, `target refId ${t.refId} missing or repeated`);
      refIds.add(t.refId);
      if (!(typeof t.expr === "string" && t.expr.trim())) fail(where, `target ${t.refId}: no expr`);
    }
  }
  const variables = dashboard.templating?.list ?? [];
  const byName = new Map(variables.map((v) => [v.name, v]));
  const ds = byName.get("datasource");
  if (ds?.type !== "datasource" || ds?.query !== "prometheus")
    fail("templating", "no `datasource` variable of type datasource (query prometheus)");
  for (const name of ["instance", "gpu"]) {
    const v = byName.get(name);
    if (v?.type !== "query" || !ours(v?.datasource) || !/^label_values\(/.test(v?.query ?? ""))
      fail("templating", `no \`${name}\` query variable with a label_values query on \${datasource}`);
  }
  // Grafana's own variables a query may use.
  const builtIn = new Set(["__rate_interval", "__interval", "__interval_ms", "__range", "__range_s",
                           "__range_ms", "__from", "__to", "__all"]);
  const used = (text) => [...text.matchAll(/\$\{?([A-Za-z_][A-Za-z0-9_]*)/g)].map((m) => m[1]);
  for (const p of panels)
    for (const text of [...exprs(p), p.title, p.repeat ? `$${p.repeat}` : ""])
      for (const name of used(text))
        if (!byName.has(name) && !builtIn.has(name))
          fail(`panel ${p.id} "${p.title}"`, `uses $${name}, which is no variable of the dashboard`);
  for (const v of variables)
    for (const name of used(typeof v.query === "string" ? v.query : ""))
      if (!byName.has(name)) fail(`variable ${v.name}`, `uses $${name}, which is not defined`);

  return {
    problems: errors,
    summary: `(${panels.length} panels, ${all.length - panels.length} rows, ${variables.length} variables;` +
      ` units from Grafana's list of ${units.size})`,
  };
}
