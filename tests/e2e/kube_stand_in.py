#!/usr/bin/env python3
"""A stand-in for the Kubernetes API server, for the calls `gpureap watch --gate
kubernetes-*` makes (tests/e2e/kube_gate_test.cc, bench/kube_gate_bench.py). One node,
served on the loopback, enforcing what kube-apiserver does for these calls:

- a bearer token: 401 (a Status object) without one or with any but the one in
  --token-file, which is read on every request (a test rotates it);
- GET /api/v1/nodes/NAME; PATCH /api/v1/nodes/NAME (spec and metadata: status is
  ignored) and /api/v1/nodes/NAME/status (status only), with the three patch types:
  application/json-patch+json (RFC 6902; a failed `test` is 422 Invalid),
  application/merge-patch+json (RFC 7386) and application/strategic-merge-patch+json
  (a merge patch whose status.conditions merge by `type`, their patchMergeKey);
  any other content type is 415;
- metadata.resourceVersion: bumped by every write; a patch that sets it to anything
  but the current one is 409 Conflict.

DRA (resource.k8s.io/v1 and v1beta2, cluster-scoped, as kube-apiserver serves them):
- GET .../resourceslices[?fieldSelector=spec.driver=D,spec.nodeName=N]: the slices in
  DIR/resourceslices.json (a list), filtered by the field selector;
- POST .../devicetaintrules: 201 with uid, resourceVersion, creationTimestamp and the
  taint's timeAdded set; 409 AlreadyExists for a name taken; 422 Invalid for a name
  that is not a DNS subdomain, an apiVersion or kind that does not match the URL, a
  taint whose key is not a label name, whose value is not a label value or whose
  effect is not None, NoSchedule or NoExecute, a selector naming no device field;
- GET .../devicetaintrules[/NAME]: the list, or the rule (404 NotFound);
- DELETE .../devicetaintrules/NAME: 200 with the rule; 404 NotFound; 409 Conflict when
  the DeleteOptions' preconditions (uid, resourceVersion) do not match the rule.
The rules are read from DIR/devicetaintrules.json (a dict by name) at start and written
there after every change.

What a test injects is read from DIR/inject.json at each PATCH (then removed):
{"conflict": N} answers the next N PATCHes 409 (as an apiserver whose storage update
lost a race); {"race": N} makes another writer change the node just before each of the
next N PATCHes not answered 409 (a label and the resourceVersion), so a `test` of the old version fails.

The node is read from DIR/node.json at start and written there after every change;
every request is appended to DIR/requests.jsonl (method, path, content type, status,
time its head was received, time its body was). Prints {"event":"ready","port":P} when serving. --tls CERT KEY serves
https instead.

Usage: kube_stand_in.py --dir DIR --node NAME --token-file FILE [--port P] [--tls CERT KEY]
"""
import argparse
import copy
import json
import os
import re
import ssl
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"


class PatchFailed(Exception):
    def __init__(self, code, reason, message):
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


def pointer(path):
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchFailed(422, "Invalid", f"bad JSON pointer {path!r}")
    return [t.replace("~1", "/").replace("~0", "~") for t in path[1:].split("/")]


def parent_of(doc, tokens):
    cur = doc
    for t in tokens[:-1]:
        if isinstance(cur, dict) and t in cur:
            cur = cur[t]
        elif isinstance(cur, list) and t.isdigit() and int(t) < len(cur):
            cur = cur[int(t)]
        else:
            raise PatchFailed(422, "Invalid", f"path not found: /{'/'.join(tokens)}")
    return cur


def get_at(doc, tokens):
    if not tokens:
        return doc
    parent, last = parent_of(doc, tokens), tokens[-1]
    if isinstance(parent, dict) and last in parent:
        return parent[last]
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent[int(last)]
    raise PatchFailed(422, "Invalid", f"path not found: /{'/'.join(tokens)}")


def json_patch(doc, ops):
    doc = copy.deepcopy(doc)
    if not isinstance(ops, list):
        raise PatchFailed(400, "BadRequest", "a JSON Patch is a list of operations")
    for op in ops:
        kind, tokens = op.get("op"), pointer(op.get("path", ""))
        if kind == "test":
            if get_at(doc, tokens) != op.get("value"):
                raise PatchFailed(422, "Invalid",
                                  f"the server rejected our request due to an error in our request: "
                                  f"test failed at {op['path']}")
            continue
        if not tokens:
            raise PatchFailed(422, "Invalid", "cannot patch the whole object")
        parent, last = parent_of(doc, tokens), tokens[-1]
        if kind in ("add", "replace"):
            if isinstance(parent, dict):
                if kind == "replace" and last not in parent:
                    raise PatchFailed(422, "Invalid", f"replace: no {op['path']}")
                parent[last] = op["value"]
            elif isinstance(parent, list):
                i = len(parent) if last == "-" else int(last)
                if kind == "add":
                    parent.insert(i, op["value"])
                else:
                    parent[i] = op["value"]
        elif kind == "remove":
            if isinstance(parent, dict) and last in parent:
                del parent[last]
            elif isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
                del parent[int(last)]
            else:
                raise PatchFailed(422, "Invalid", f"remove: no {op['path']}")
        else:
            raise PatchFailed(422, "Invalid", f"unsupported op {kind!r}")
    return doc


def merge_patch(doc, patch, path=(), strategic=False):
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(doc) if isinstance(doc, dict) else {}
    for k, v in patch.items():
        here = path + (k,)
        if v is None:
            out.pop(k, None)
        elif strategic and here == ("status", "conditions") and isinstance(v, list):
            merged = list(out.get(k) or [])
            for c in v:
                if not isinstance(c, dict) or "type" not in c or "status" not in c:
                    raise PatchFailed(422, "Invalid", "a node condition needs type and status")
                i = next((n for n, o in enumerate(merged) if o.get("type") == c["type"]), None)
                if i is None:
                    merged.append(c)
                else:
                    merged[i] = merge_patch(merged[i], c)
            out[k] = merged
        else:
            out[k] = merge_patch(out.get(k), v, here, strategic)
    return out


class Node:
    def __init__(self, directory, name):
        self.dir, self.name, self.lock = directory, name, threading.Lock()
        path = os.path.join(directory, "node.json")
        if os.path.exists(path):
            with open(path) as f:
                self.obj = json.load(f)
        else:
            self.obj = {"metadata": {"name": name}, "spec": {}, "status": {}}
        self.obj.setdefault("apiVersion", "v1")
        self.obj.setdefault("kind", "Node")
        self.obj.setdefault("metadata", {}).setdefault("resourceVersion", "1")
        self.conflicts = self.races = 0
        self.save()

    def save(self):
        tmp = os.path.join(self.dir, "node.json.tmp")
        with open(tmp, "w") as f:
            json.dump(self.obj, f, indent=1)
        os.replace(tmp, os.path.join(self.dir, "node.json"))

    def bump(self):
        meta = self.obj["metadata"]
        meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)

    def injected(self):
        path = os.path.join(self.dir, "inject.json")
        try:
            with open(path) as f:
                inject = json.load(f)
            os.unlink(path)
        except (FileNotFoundError, ValueError):
            return
        self.conflicts += int(inject.get("conflict", 0))
        self.races += int(inject.get("race", 0))

    def patch(self, content_type, body, status_only):
        with self.lock:
            self.injected()
            if self.conflicts:
                self.conflicts -= 1
                raise PatchFailed(409, "Conflict", "Operation cannot be fulfilled on nodes "
                                  f"\"{self.name}\": the object has been modified; please apply "
                                  "your changes to the latest version and try again")
            if self.races:
                self.races -= 1
                self.obj["metadata"].setdefault("labels", {})["stand-in/other-writer"] = str(time.time())
                self.bump()
                self.save()
            if content_type == JSON_PATCH:
                patched = json_patch(self.obj, body)
            elif content_type in (MERGE_PATCH, STRATEGIC):
                patched = merge_patch(self.obj, body, strategic=content_type == STRATEGIC)
            else:
                raise PatchFailed(415, "UnsupportedMediaType",
                                  f"the body of the request was in an unknown format - accepted "
                                  f"media types include: {JSON_PATCH}, {MERGE_PATCH}, {STRATEGIC}")
            rv = self.obj["metadata"]["resourceVersion"]
            if patched.get("metadata", {}).get("resourceVersion") != rv:
                raise PatchFailed(409, "Conflict", "Operation cannot be fulfilled on nodes "
                                  f"\"{self.name}\": the object has been modified")
            if status_only:  # the status subresource: only status changes
                new = copy.deepcopy(self.obj)
                new["status"] = patched.get("status", {})
            else:  # the main resource: status is the status subresource's
                new = patched
                new["status"] = copy.deepcopy(self.obj.get("status", {}))
            if new != self.obj:
                self.obj = new
                self.bump()
                self.save()
            return copy.deepcopy(self.obj)


DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def dns_subdomain(name):
    return isinstance(name, str) and 0 < len(name) <= 253 and \
        all(DNS_LABEL.match(label) for label in name.split("."))


def label_name(key):
    if not isinstance(key, str) or not key:
        return False
    prefix, _, name = key.rpartition("/")
    if prefix and not dns_subdomain(prefix):
        return False
    return len(name) <= 63 and bool(LABEL_NAME.match(name))


def rule_problems(rule, version):
    """What kube-apiserver's validation of a DeviceTaintRule would refuse."""
    problems = []
    name = rule.get("metadata", {}).get("name")
    if not dns_subdomain(name):
        problems.append(f"metadata.name: Invalid value: {name!r}: a lowercase RFC 1123 subdomain "
                        "must consist of lower case alphanumeric characters, '-' or '.'")
    if rule.get("apiVersion") != f"resource.k8s.io/{version}" or rule.get("kind") != "DeviceTaintRule":
        problems.append(f"apiVersion/kind: {rule.get('apiVersion')}/{rule.get('kind')} does not "
                        f"match resource.k8s.io/{version} DeviceTaintRule")
    spec = rule.get("spec") or {}
    taint = spec.get("taint") or {}
    if not label_name(taint.get("key")):
        problems.append(f"spec.taint.key: Invalid value: {taint.get('key')!r}")
    value = taint.get("value", "")
    if not isinstance(value, str) or len(value) > 63 or not LABEL_VALUE.match(value):
        problems.append(f"spec.taint.value: Invalid value: {value!r}")
    if taint.get("effect") not in ("None", "NoSchedule", "NoExecute"):
        problems.append(f"spec.taint.effect: Unsupported value: {taint.get('effect')!r}: "
                        "supported values: \"NoExecute\", \"NoSchedule\", \"None\"")
    selector = spec.get("deviceSelector")
    if selector is not None:
        unknown = set(selector) - {"driver", "pool", "device"}
        if unknown:
            problems.append(f"spec.deviceSelector: unknown fields {sorted(unknown)}")
    return problems


class Dra:
    """The cluster's DeviceTaintRules and ResourceSlices."""

    def __init__(self, directory):
        self.dir, self.lock, self.uids = directory, threading.Lock(), 0
        self.rules = self.load("devicetaintrules.json", {})
        self.slices = self.load("resourceslices.json", [])
        self.version = 500

    def load(self, name, default):
        try:
            with open(os.path.join(self.dir, name)) as f:
                return json.load(f)
        except FileNotFoundError:
            return default

    def save(self):
        tmp = os.path.join(self.dir, "devicetaintrules.json.tmp")
        with open(tmp, "w") as f:
            json.dump(self.rules, f, indent=1)
        os.replace(tmp, os.path.join(self.dir, "devicetaintrules.json"))

    def answer(self, method, version, rest, query, raw):
        if rest == "resourceslices" and method == "GET":
            wanted = dict(kv.split("=", 1) for kv in query.get("fieldSelector", [""])[0].split(",") if kv)
            items = [s for s in self.slices
                     if all(str(lookup(s, field)) == v for field, v in wanted.items())]
            return 200, {"kind": "ResourceSliceList", "apiVersion": f"resource.k8s.io/{version}",
                         "metadata": {}, "items": items}
        parts = rest.split("/")
        if parts[0] != "devicetaintrules" or len(parts) > 2:
            return None
        with self.lock:
            if len(parts) == 1 and method == "GET":
                return 200, {"kind": "DeviceTaintRuleList", "apiVersion": f"resource.k8s.io/{version}",
                             "metadata": {}, "items": list(self.rules.values())}
            if len(parts) == 1 and method == "POST":
                try:
                    rule = json.loads(raw)
                except ValueError:
                    return 400, status_object(400, "BadRequest", "the body is not JSON")
                problems = rule_problems(rule, version)
                name = rule.get("metadata", {}).get("name")
                if problems:
                    return 422, status_object(422, "Invalid", f"DeviceTaintRule.resource.k8s.io "
                                              f"{name!r} is invalid: " + "; ".join(problems))
                if name in self.rules:
                    return 409, status_object(409, "AlreadyExists", f"devicetaintrules.resource.k8s.io "
                                              f"\"{name}\" already exists")
                self.uids += 1
                self.version += 1
                meta = rule["metadata"]
                meta["uid"] = f"uid-{self.uids}"
                meta["resourceVersion"] = str(self.version)
                meta["creationTimestamp"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                rule["spec"]["taint"].setdefault("timeAdded", meta["creationTimestamp"])
                self.rules[name] = rule
                self.save()
                return 201, rule
            name = parts[1]
            if method == "GET":
                if name not in self.rules:
                    return 404, not_found(name)
                return 200, self.rules[name]
            if method == "DELETE":
                if name not in self.rules:
                    return 404, not_found(name)
                options = json.loads(raw) if raw else {}
                pre = (options or {}).get("preconditions") or {}
                meta = self.rules[name]["metadata"]
                for field in ("uid", "resourceVersion"):
                    if field in pre and pre[field] != meta.get(field):
                        return 409, status_object(409, "Conflict", f"Precondition failed: {field}: "
                                                  f"{pre[field]}, {field} in object meta: {meta.get(field)}")
                rule = self.rules.pop(name)
                self.save()
                return 200, rule
        return None


def lookup(obj, dotted):
    for key in dotted.split("."):
        obj = obj.get(key, {}) if isinstance(obj, dict) else {}
    return obj


def not_found(name):
    return status_object(404, "NotFound", f"devicetaintrules.resource.k8s.io \"{name}\" not found")


def status_object(code, reason, message):
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}


def make_handler(node, dra, token_file, log_lock):
    base = f"/api/v1/nodes/{node.name}"

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # The answer's header and body go out at once, as kube-apiserver's do: with Nagle's
        # algorithm the body waited for the client's delayed ACK (40 ms on every answer).
        disable_nagle_algorithm = True

        def log_message(self, *args):
            pass

        def reply(self, code, obj):
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def record(self, received, complete, code):
            entry = {"method": self.command, "path": self.path,
                     "content_type": self.headers.get("Content-Type", ""), "status": code,
                     "received": received, "complete": complete}
            with log_lock, open(os.path.join(node.dir, "requests.jsonl"), "a") as f:
                f.write(json.dumps(entry) + "\n")

        def authorized(self):
            with open(token_file) as f:
                token = f.read().strip()
            return self.headers.get("Authorization", "") == f"Bearer {token}"

        def handle_one(self):
            received = time.time()
            length = int(self.headers.get("Content-Length", 0) or 0)
            raw = self.rfile.read(length) if length else b""
            complete = time.time()
            code, obj = self.answer(raw)
            self.record(received, complete, code)
            self.reply(code, obj)

        def answer(self, raw):
            if not self.authorized():
                return 401, status_object(401, "Unauthorized", "Unauthorized")
            url = urllib.parse.urlsplit(self.path)
            for version in ("v1", "v1beta2"):
                prefix = f"/apis/resource.k8s.io/{version}/"
                if url.path.startswith(prefix):
                    done = dra.answer(self.command, version, url.path[len(prefix):],
                                      urllib.parse.parse_qs(url.query), raw)
                    if done:
                        return done
            if self.command == "GET" and self.path == base:
                with node.lock:
                    return 200, copy.deepcopy(node.obj)
            if self.command == "PATCH" and self.path in (base, base + "/status"):
                ctype = self.headers.get("Content-Type", "").split(";")[0].strip()
                try:
                    body = json.loads(raw)
                except ValueError:
                    return 400, status_object(400, "BadRequest", "the body is not JSON")
                try:
                    return 200, node.patch(ctype, body, self.path.endswith("/status"))
                except PatchFailed as e:
                    return e.code, status_object(e.code, e.reason, e.message)
            return 404, status_object(404, "NotFound", f"{self.command} {self.path}: not found")

        do_GET = do_PATCH = do_POST = do_PUT = do_DELETE = handle_one

    return Handler


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("--node", required=True)
    p.add_argument("--token-file", required=True)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"))
    a = p.parse_args()
    node = Node(a.dir, a.node)
    server = ThreadingHTTPServer(("127.0.0.1", a.port), make_handler(node, Dra(a.dir), a.token_file,
                                                                      threading.Lock()))
    server.daemon_threads = True
    if a.tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(a.tls[0], a.tls[1])
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
    print(json.dumps({"event": "ready", "port": server.server_address[1]}), flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
