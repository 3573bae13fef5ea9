#pragma once
// `--gate kubernetes-condition` and `--gate kubernetes-taint` (issue 51): this node
// closed to new pods through the Kubernetes API (agent/kube_api.h).
//
// kubernetes-condition: the node condition GpuMemoryLeak, True with the gate's reason as
// its message (GPU, class, bytes), False once a look verifies the GPUs; a strategic
// merge patch on nodes/NODE/status, as node-problem-detector writes its conditions (its
// RBAC: nodes/status patch). A taint controller turns it into a taint
// (contrib/kubernetes/gpureap-node-readiness-rule.yaml).
//
// kubernetes-taint: the taint gpureap.io/gpu-memory-leak:NoSchedule on the node
// itself: GET the node, then a JSON Patch that tests its resourceVersion and its taint
// list before changing them, retried from the GET on a conflict (409) or a failed test
// (422), a bounded number of times. The taint is gpureap's only while the annotation
// gpureap.io/taint-owner says so (its value is the reason, starting "gpureap:"); a taint
// of that key without it was set by someone else and is never removed.

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "agent/gate.h"
#include "agent/kube_api.h"

namespace gpureap::agent {

inline constexpr std::string_view kLeakCondition = "GpuMemoryLeak";
inline constexpr std::string_view kLeakTaintKey = "gpureap.io/gpu-memory-leak";
inline constexpr std::string_view kTaintOwnerAnnotation = "gpureap.io/taint-owner";
/// GET + PATCH rounds of the taint before a conflict is said as a failure (the gate
/// tries again Gate::kRetry later).
inline constexpr int kTaintAttempts = 5;
/// Each request's bound (on the gate's thread only).
inline constexpr std::chrono::milliseconds kKubeGateTimeout{10000};

/// The node's GpuMemoryLeak condition, or null.
const nlohmann::json* leak_condition(const nlohmann::json& node);
/// The strategic merge patch of nodes/status that sets GpuMemoryLeak to True (`leak`,
/// `message` the gate's reason) or False, at `now` (RFC 3339); its transition time
/// kept from `previous` when the status does not change.
nlohmann::json leak_condition_patch(bool leak, const std::string& message, const std::string& now,
                                    const nlohmann::json* previous);

/// Whether the node has the leak taint, and whose it is.
enum class LeakTaint { absent, ours, foreign };
LeakTaint leak_taint(const nlohmann::json& node);
/// The JSON Patch adding the taint and the owner annotation (value `reason`) to `node`
/// as read, testing its resourceVersion and taint list first.
nlohmann::json add_taint_patch(const nlohmann::json& node, const std::string& reason);
/// The JSON Patch removing the taint (ours: the caller checked) and the annotation,
/// every other taint kept, with the same tests.
nlohmann::json remove_taint_patch(const nlohmann::json& node);

std::unique_ptr<NodeAction> make_condition_gate(KubeApi api, bool dry_run);
std::unique_ptr<NodeAction> make_taint_gate(KubeApi api, bool dry_run);

}  // namespace gpureap::agent
