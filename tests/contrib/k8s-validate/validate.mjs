// Validates contrib/kubernetes/*.yaml offline against the Kubernetes API schemas
// (kubernetes-models, from the npm registry) and the Prometheus Operator's
// (ServiceMonitor): every document's kind must be known and valid. Issue 12: there
// is no cluster test yet; this catches typos, wrong types and unknown fields.
// Usage: node validate.mjs DIR
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";

// The packages live beside this file (npm ci here, from package-lock.json).
const load = async (name) => import(name);
const yaml = (await load("js-yaml")).default;

// apiVersion -> module of kubernetes-models ("apps/v1" -> "kubernetes-models/apps/v1").
function modelModule(apiVersion) {
  if (apiVersion.startsWith("monitoring.coreos.com/"))
    return `@kubernetes-models/prometheus-operator/${apiVersion}`;
  return apiVersion.includes("/") ? `kubernetes-models/${apiVersion}` : `kubernetes-models/v1`;
}

// Custom resources kubernetes-models does not know, checked against their documented
// fields here: a list of problems (empty: valid).
const statuses = ["True", "False", "Unknown"];
const customKinds = {
  // sigs.k8s.io/node-readiness-controller, reference/api-spec (v1alpha1).
  "readiness.node.x-k8s.io/v1alpha1 NodeReadinessRule": (doc) => {
    const p = [];
    const spec = doc.spec ?? {};
    const known = ["nodeSelector", "conditions", "taint", "enforcementMode", "dryRun"];
    for (const k of Object.keys(spec)) if (!known.includes(k)) p.push(`spec.${k}: unknown field`);
    if (!Array.isArray(spec.conditions) || spec.conditions.length === 0) p.push("spec.conditions: required");
    for (const c of spec.conditions ?? []) {
      if (typeof c.type !== "string" || c.type.length === 0) p.push("spec.conditions[].type: required");
      if (!statuses.includes(c.requiredStatus)) p.push(`spec.conditions[].requiredStatus: ${c.requiredStatus}`);
    }
    if (typeof spec.taint?.key !== "string") p.push("spec.taint.key: required");
    if (!["NoSchedule", "PreferNoSchedule", "NoExecute"].includes(spec.taint?.effect))
      p.push(`spec.taint.effect: ${spec.taint?.effect}`);
    if (!["bootstrap-only", "continuous"].includes(spec.enforcementMode))
      p.push(`spec.enforcementMode: ${spec.enforcementMode}`);
    return p;
  },
};

const dir = process.argv[2];
let checked = 0;
let failed = 0;
for (const file of readdirSync(dir).filter((f) => f.endsWith(".yaml")).sort()) {
  const docs = yaml.loadAll(readFileSync(join(dir, file), "utf8")).filter(Boolean);
  for (const doc of docs) {
    const where = `${file}: ${doc.kind}/${doc.metadata?.name}`;
    const custom = customKinds[`${doc.apiVersion} ${doc.kind}`];
    if (custom) {
      const problems = custom(doc);
      for (const p of problems) console.error(`${where}: ${p}`);
      if (problems.length) failed++;
      else checked++;
      continue;
    }
    let Model;
    try {
      Model = (await load(modelModule(doc.apiVersion)))[doc.kind];
    } catch (e) {
      Model = undefined;
    }
    if (!Model) {
      console.error(`${where}: unknown apiVersion/kind ${doc.apiVersion} ${doc.kind}`);
      failed++;
      continue;
    }
    try {
      new Model(doc).validate();
      checked++;
    } catch (e) {
      console.error(`${where}: ${e.message}`);
      failed++;
    }
  }
}
console.log(`${checked} manifests valid, ${failed} invalid`);
process.exit(failed > 0 || checked === 0 ? 1 : 0);
