#include "agent/gate_modes.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "agent/device_taint_gate.h"
#include "agent/kube_gate.h"
#include "agent/slurm_gate.h"

namespace gpureap::agent {

namespace {

// The Kubernetes modes' client: the endpoint from the environment, libcurl to it.
Result<KubeApi> kube_api_for(const std::string& mode) {
  auto endpoint = kube_endpoint_from_environment(::getenv);
  if (!endpoint) return std::unexpected(endpoint.error());
  auto transport = make_curl_transport(endpoint->ca_file, kKubeGateTimeout);
  if (!transport) return fail("--gate " + mode + ": " + transport.error().message);
  return KubeApi(std::move(*endpoint), std::move(*transport));
}

Result<std::unique_ptr<NodeAction>> make_node_action(const std::string& mode, bool dry_run) {
  if (mode == "slurm")
    return make_slurm_gate(
        cluster::Scontrol(cluster::scontrol_from_environment(), kSlurmGateTimeout),
        cluster::node_name_from_environment(), dry_run);
  if (mode != "kubernetes-condition" && mode != "kubernetes-taint" &&
      mode != "kubernetes-device-taint")
    return fail("--gate: unknown mode '" + mode + "' (known: " + std::string(kGateModes) + ")");
  auto api = kube_api_for(mode);
  if (!api) return std::unexpected(api.error());
  if (mode == "kubernetes-taint") return make_taint_gate(std::move(*api), dry_run);
  if (mode == "kubernetes-condition") return make_condition_gate(std::move(*api), dry_run);
  auto config = device_taint_config_from_environment(::getenv, api->node());
  if (!config) return std::unexpected(config.error());
  return make_device_taint_gate(std::move(*api), std::move(*config), dry_run);
}

}  // namespace

Result<std::vector<std::unique_ptr<NodeAction>>> make_node_actions(
    const std::vector<std::string>& modes, bool dry_run) {
  std::vector<std::unique_ptr<NodeAction>> out;
  std::vector<std::string> seen;
  for (const auto& mode : modes) {
    if (std::find(seen.begin(), seen.end(), mode) != seen.end()) continue;
    seen.push_back(mode);
    auto action = make_node_action(mode, dry_run);
    if (!action) return std::unexpected(action.error());
    out.push_back(std::move(*action));
  }
  return out;
}

}  // namespace gpureap::agent
