// Makes JSON schemas from Grafana's own TypeScript types (@grafana/schema, pinned by
// package-lock.json) with typescript-json-schema, into DIR/schemas/:
//  - dashboard.json: the classic dashboard model (raw/dashboard/x/types.gen.d.ts,
//    `Dashboard`), required fields required and no property the type lacks, so a
//    misspelt key fails;
//  - panel-<type>-options.json and panel-<type>-fieldconfig.json: each core panel
//    plugin's `Options` and `FieldConfig` (raw/composable/<plugin>/panelcfg), no
//    unknown property but nothing required: Grafana merges a panel's options with
//    the plugin's defaults, so a dashboard may leave any of them out.
// Usage: node make-schemas.cjs DIR (the directory holding node_modules)
"use strict";
const fs = require("node:fs");
const path = require("node:path");
const TJS = require("typescript-json-schema");

const dir = path.resolve(process.argv[2]);
const raw = path.join(dir, "node_modules/@grafana/schema/dist/types/raw");
// Grafana's panel type id -> its directory under raw/composable.
const plugins = {
  timeseries: "timeseries",
  stat: "stat",
  table: "table",
  bargauge: "bargauge",
  "state-timeline": "statetimeline",
};
const dashboardFile = path.join(raw, "dashboard/x/types.gen.d.ts");
const pluginFile = (p) => path.join(raw, "composable", p, "panelcfg/x/types.gen.d.ts");
const files = [dashboardFile, ...Object.values(plugins).map(pluginFile)];
const program = TJS.getProgramFromFiles(files, { strictNullChecks: true, skipLibCheck: true });
// Not typescript-json-schema's noExtraProps: it closes Record<string, T> too (an
// object with no properties then admits none); closed() below closes only the
// interfaces, and types a Record's values.
const common = { strictNullChecks: true, uniqueNames: true, titles: false };
const strict = TJS.buildGenerator(program, { ...common, required: true });
const lenient = TJS.buildGenerator(program, { ...common, required: false });
if (!strict || !lenient) throw new Error("typescript-json-schema could not read @grafana/schema's types");

// uniqueNames makes each symbol's name unique (Options.1a2b3c4d): find it by its file.
function schemaOf(generator, file, typeName) {
  const wanted = file.replace(/\.d\.ts$/, "");
  const symbol = generator
    .getSymbols()
    .find((s) => s.typeName === typeName && s.fullyQualifiedName.startsWith(`"${wanted}"`));
  return symbol ? generator.getSchemaForSymbol(symbol.name) : null;
}

// Every object schema with named properties admits no other property; a
// Record<string, T>'s values must be T.
function closed(schema) {
  const definitions = schema.definitions ?? {};
  const named = (type) => Object.keys(definitions).find((k) => k.split(".")[0] === type);
  for (const [name, def] of Object.entries(definitions)) {
    const record = /^Record<string,(.+)>(\.[0-9a-f]+)?$/.exec(name);
    if (!record || def.additionalProperties !== undefined) continue;
    const value = record[1];
    if (value === "string") def.additionalProperties = { type: "string" };
    else if (named(value)) def.additionalProperties = { $ref: `#/definitions/${encodeURIComponent(named(value))}` };
  }
  const visit = (node) => {
    if (Array.isArray(node)) return node.forEach(visit);
    if (node === null || typeof node !== "object") return;
    if (node.properties && typeof node.properties === "object" && node.additionalProperties === undefined)
      node.additionalProperties = false;
    for (const value of Object.values(node)) visit(value);
  };
  visit(schema);
  return schema;
}

const out = path.join(dir, "schemas");
fs.mkdirSync(out, { recursive: true });
const write = (name, schema) =>
  fs.writeFileSync(path.join(out, name), JSON.stringify(closed(schema), null, 1));
const dashboard = schemaOf(strict, dashboardFile, "Dashboard");
if (!dashboard) throw new Error("no Dashboard type in " + dashboardFile);
write("dashboard.json", dashboard);
const made = ["dashboard.json"];
for (const [type, p] of Object.entries(plugins)) {
  for (const [typeName, suffix] of [["Options", "options"], ["FieldConfig", "fieldconfig"]]) {
    const schema = schemaOf(lenient, pluginFile(p), typeName);
    if (!schema) continue; // stat and bargauge have no custom field config
    write(`panel-${type}-${suffix}.json`, schema);
    made.push(`panel-${type}-${suffix}.json`);
  }
}
fs.writeFileSync(path.join(out, "plugins.json"), JSON.stringify(Object.keys(plugins)));
console.log(`made ${made.length} schemas from @grafana/schema in ${out}`);
