#include "agent/kube_gate.h"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <ctime>

namespace gpureap::agent {
namespace {

using nlohmann::json;
using report::GateStep;

constexpr std::string_view kJsonPatch = "application/json-patch+json";
constexpr std::string_view kStrategicMergePatch = "application/strategic-merge-patch+json";

std::string rfc3339_now() {
  return fmt::format("{:%Y-%m-%dT%H:%M:%SZ}", fmt::gmtime(std::time(nullptr)));
}

// A JSON Pointer's token: '~' and '/' escaped (RFC 6901).
std::string pointer_token(std::string_view s) {
  std::string out;
  for (char c : s) out += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
  return out;
}

const json* member(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

json taints_of(const json& node) {
  const json* spec = member(node, "spec");
  const json* taints = spec ? member(*spec, "taints") : nullptr;
  return taints && taints->is_array() ? *taints : json::array();
}

std::string owner_of(const json& node) {
  const json* meta = member(node, "metadata");
  const json* annotations = meta ? member(*meta, "annotations") : nullptr;
  const json* owner = annotations ? member(*annotations, std::string(kTaintOwnerAnnotation).c_str())
                                  : nullptr;
  return owner && owner->is_string() ? owner->get<std::string>() : "";
}

// The tests every taint patch starts with: the node is still the one read.
json tests_of(const json& node) {
  json ops = json::array();
  const json* meta = member(node, "metadata");
  const json* rv = meta ? member(*meta, "resourceVersion") : nullptr;
  ops.push_back({{"op", "test"}, {"path", "/metadata/resourceVersion"}, {"value", rv ? *rv : ""}});
  const json* spec = member(node, "spec");
  if (spec && member(*spec, "taints"))
    ops.push_back({{"op", "test"}, {"path", "/spec/taints"}, {"value", taints_of(node)}});
  return ops;
}

GateOutcome outcome(GateStep step, const KubeApi& api, std::string detail) {
  return GateOutcome{step, "node " + api.node(), std::move(detail), false};
}

class ConditionGate final : public NodeAction {
 public:
  ConditionGate(KubeApi api, bool dry_run) : api_(std::move(api)), dry_run_(dry_run) {}
  std::string_view mode() const override { return "kubernetes-condition"; }

  Result<GateOutcome> close(const GateTarget& target) override {
    return act(true, target.reason);
  }
  Result<GateOutcome> open(const GateTarget&) override {
    return act(false, "gpureap: every GPU verified back at baseline (gpureap watch)");
  }

 private:
  Result<GateOutcome> act(bool leak, const std::string& message) {
    auto node = api_.get_node();
    if (!node) return std::unexpected(node.error());
    if (!node->ok()) return fail("GET node " + api_.node() + ": " + node->describe());
    const json* previous = leak_condition(node->body);
    const bool was_leak = previous && previous->value("status", "") == "True";
    const std::string detail = fmt::format("{}={}: {}", kLeakCondition, leak ? "True" : "False", message);
    if (leak && was_leak) return outcome(GateStep::kept_closed, api_, previous->value("message", ""));
    // Opening a node never closed: the condition is written False all the same when it
    // is missing (a readiness rule waits for it), and nothing is said.
    const bool quiet = !leak && !was_leak;
    if (quiet && previous) return GateOutcome{GateStep::opened, "", "", true};
    if (dry_run_)
      return GateOutcome{leak ? GateStep::would_close : GateStep::would_open, "node " + api_.node(),
                         detail, quiet};
    auto done = api_.patch_node(kStrategicMergePatch,
                                leak_condition_patch(leak, message, rfc3339_now(), previous), true);
    if (!done) return std::unexpected(done.error());
    if (!done->ok())
      return fail("PATCH node " + api_.node() + " status: " + done->describe());
    auto out = outcome(leak ? GateStep::closed : GateStep::opened, api_, detail);
    out.quiet = quiet;
    return out;
  }

  KubeApi api_;
  bool dry_run_;
};

class TaintGate final : public NodeAction {
 public:
  TaintGate(KubeApi api, bool dry_run) : api_(std::move(api)), dry_run_(dry_run) {}
  std::string_view mode() const override { return "kubernetes-taint"; }

  Result<GateOutcome> close(const GateTarget& target) override {
    return act(true, target.reason);
  }
  Result<GateOutcome> open(const GateTarget&) override { return act(false, ""); }

 private:
  Result<GateOutcome> act(bool close, const std::string& reason) {
    std::string conflicts;
    for (int attempt = 0; attempt < kTaintAttempts; ++attempt) {
      auto node = api_.get_node();
      if (!node) return std::unexpected(node.error());
      if (!node->ok()) return fail("GET node " + api_.node() + ": " + node->describe());
      const LeakTaint state = leak_taint(node->body);
      const std::string taint = fmt::format("taint {}:NoSchedule", kLeakTaintKey);
      if (state == LeakTaint::foreign)
        return outcome(GateStep::left_alone, api_, taint + " set by someone else");
      if (close && state == LeakTaint::ours)
        return outcome(GateStep::kept_closed, api_, owner_of(node->body));
      if (!close && state == LeakTaint::absent) return GateOutcome{GateStep::opened, "", "", true};
      const std::string detail =
          close ? taint + ": " + reason : "lifting its " + taint + ": " + owner_of(node->body);
      if (dry_run_)
        return outcome(close ? GateStep::would_close : GateStep::would_open, api_, detail);
      auto done = api_.patch_node(
          kJsonPatch, close ? add_taint_patch(node->body, reason) : remove_taint_patch(node->body),
          false);
      if (!done) return std::unexpected(done.error());
      if (done->ok())
        return outcome(close ? GateStep::closed : GateStep::opened, api_,
                       detail + (conflicts.empty() ? "" : " (retried after " + conflicts + ")"));
      // Someone wrote the node between the GET and the PATCH: read it again.
      if (done->status != 409 && done->status != 422)
        return fail("PATCH node " + api_.node() + ": " + done->describe());
      conflicts += (conflicts.empty() ? "" : ", ") + std::to_string(done->status);
    }
    return fail(fmt::format("PATCH node {}: still conflicting after {} attempts ({})", api_.node(),
                            kTaintAttempts, conflicts));
  }

  KubeApi api_;
  bool dry_run_;
};

}  // namespace

const json* leak_condition(const json& node) {
  const json* status = member(node, "status");
  const json* conditions = status ? member(*status, "conditions") : nullptr;
  if (!conditions || !conditions->is_array()) return nullptr;
  for (const auto& c : *conditions)
    if (c.is_object() && c.value("type", "") == kLeakCondition) return &c;
  return nullptr;
}

json leak_condition_patch(bool leak, const std::string& message, const std::string& now,
                          const json* previous) {
  const std::string status = leak ? "True" : "False";
  const bool same = previous && previous->value("status", "") == status &&
                    previous->contains("lastTransitionTime");
  json condition = {{"type", kLeakCondition},
                    {"status", status},
                    {"reason", leak ? "GpuMemoryLeakFound" : "GpuMemoryVerifiedFree"},
                    {"message", message},
                    {"lastHeartbeatTime", now},
                    {"lastTransitionTime", same ? (*previous)["lastTransitionTime"] : json(now)}};
  // Conditions merge by their type (the strategic merge key): the others stay as they are.
  return {{"status", {{"conditions", json::array({condition})}}}};
}

LeakTaint leak_taint(const json& node) {
  for (const auto& t : taints_of(node))
    if (t.is_object() && t.value("key", "") == kLeakTaintKey)
      return owner_of(node).starts_with("gpureap:") ? LeakTaint::ours : LeakTaint::foreign;
  return LeakTaint::absent;
}

json add_taint_patch(const json& node, const std::string& reason) {
  json ops = tests_of(node);
  json taints = taints_of(node);
  taints.push_back({{"key", kLeakTaintKey}, {"effect", "NoSchedule"}});
  if (member(node, "spec"))
    ops.push_back({{"op", "add"}, {"path", "/spec/taints"}, {"value", taints}});
  else
    ops.push_back({{"op", "add"}, {"path", "/spec"}, {"value", {{"taints", taints}}}});
  const json* meta = member(node, "metadata");
  if (meta && member(*meta, "annotations"))
    ops.push_back({{"op", "add"},
                   {"path", "/metadata/annotations/" + pointer_token(kTaintOwnerAnnotation)},
                   {"value", reason}});
  else
    ops.push_back({{"op", "add"},
                   {"path", "/metadata/annotations"},
                   {"value", {{kTaintOwnerAnnotation, reason}}}});
  return ops;
}

json remove_taint_patch(const json& node) {
  json ops = tests_of(node);
  json kept = json::array();
  for (const auto& t : taints_of(node))
    if (!t.is_object() || t.value("key", "") != kLeakTaintKey) kept.push_back(t);
  if (kept.empty())
    ops.push_back({{"op", "remove"}, {"path", "/spec/taints"}});
  else
    ops.push_back({{"op", "replace"}, {"path", "/spec/taints"}, {"value", kept}});
  if (!owner_of(node).empty())
    ops.push_back(
        {{"op", "remove"}, {"path", "/metadata/annotations/" + pointer_token(kTaintOwnerAnnotation)}});
  return ops;
}

std::unique_ptr<NodeAction> make_condition_gate(KubeApi api, bool dry_run) {
  return std::make_unique<ConditionGate>(std::move(api), dry_run);
}

std::unique_ptr<NodeAction> make_taint_gate(KubeApi api, bool dry_run) {
  return std::make_unique<TaintGate>(std::move(api), dry_run);
}

}  // namespace gpureap::agent
