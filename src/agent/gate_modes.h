#pragma once
// The modes of `gpureap watch --gate` by name: each makes its NodeAction (agent/gate.h)
// from the environment. A new mode is a file of its own (agent/slurm_gate.h,
// agent/kube_gate.h, agent/device_taint_gate.h) and a line here.

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "agent/gate.h"
#include "util/result.h"

namespace gpureap::agent {

/// The actions of `modes` ("slurm", "kubernetes-condition", "kubernetes-taint",
/// "kubernetes-device-taint"), or why
/// one cannot be made (an unknown mode; for Kubernetes, agent/kube_api.h's environment,
/// libcurl missing): exit 2.
Result<std::vector<std::unique_ptr<NodeAction>>> make_node_actions(
    const std::vector<std::string>& modes, bool dry_run);

/// The modes --gate knows, for its help and its refusal.
inline constexpr std::string_view kGateModes =
    "slurm, kubernetes-condition, kubernetes-taint, kubernetes-device-taint";

}  // namespace gpureap::agent
