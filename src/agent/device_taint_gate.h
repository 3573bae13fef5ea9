#pragma once
// `--gate kubernetes-device-taint` (issue 51): each GPU with a leak by evidence closed to
// new pods on its own, through Kubernetes' Dynamic Resource Allocation (KEP-5055): one
// DeviceTaintRule per GPU (resource.k8s.io/v1, GA in Kubernetes 1.37; v1beta2 on 1.36
// with the DRADeviceTaintRules gate), deleted once a look verifies that GPU back at
// baseline. The other GPUs of the node stay open.
//
// The rule's selector names one DRA device by driver, pool and device name (the API
// has no selector by attribute since 1.35), so the GPU's UUID is mapped to its device
// when the rule is made: by default the device of the driver's ResourceSlices in the
// pool whose `uuid` attribute is the GPU's, or by a name template. What is assumed of
// the DRA driver (NVIDIA's: driver gpu.nvidia.com, the pool named after the node, the
// attribute `uuid`) is configurable, from the environment as the rest of the
// Kubernetes modes' settings (GPUREAP_DRA_*, docs/kubernetes.md).
//
// Ownership: the rule's name is made from the node and the GPU's UUID, and it carries
// the label app.kubernetes.io/managed-by=gpureap and the annotations gpureap.io/node,
// gpureap.io/gpu-uuid and gpureap.io/taint-owner (the reason, starting "gpureap:"). A rule
// of that name without them was made by someone else: never deleted, never replaced.
// The delete carries the rule's uid and resourceVersion as preconditions, so only the
// rule read is deleted.

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "agent/gate.h"
#include "agent/kube_api.h"

namespace gpureap::agent {

inline constexpr std::string_view kManagedByLabel = "app.kubernetes.io/managed-by";
inline constexpr std::string_view kRuleNodeAnnotation = "gpureap.io/node";
inline constexpr std::string_view kRuleUuidAnnotation = "gpureap.io/gpu-uuid";

/// What the mode assumes of the cluster and its DRA driver.
struct DeviceTaintConfig {
  std::string api = "resource.k8s.io/v1";  // GPUREAP_DRA_API: or resource.k8s.io/v1beta2
  std::string driver = "gpu.nvidia.com";   // GPUREAP_DRA_DRIVER
  std::string pool;                        // GPUREAP_DRA_POOL, else the node's name
  /// GPUREAP_DRA_DEVICE: "attribute:NAME" (look the device up in the pool's
  /// ResourceSlices by the attribute NAME = the GPU's UUID), or a device name where
  /// "{index}" stands for the GPU's NVML index ("gpu-{index}": no lookup).
  std::string device = "attribute:uuid";
  std::string effect = "NoSchedule";  // GPUREAP_DRA_TAINT_EFFECT: NoSchedule, NoExecute, None
};

/// The configuration from `env` (the pool defaults to `node`); fails naming the
/// variable that is wrong (exit 2).
Result<DeviceTaintConfig> device_taint_config_from_environment(
    const std::function<const char*(const char*)>& env, const std::string& node);

/// "gpureap-<node>-<uuid>", lower case, at most 253 characters (the node's part
/// shortened): a DNS subdomain, the same for the same GPU on the same node.
std::string device_taint_rule_name(const std::string& node, const std::string& uuid);

/// The device of `slices` (a ResourceSliceList) that is the GPU `uuid`: of `driver`, in
/// `pool` at its newest generation, its attribute `attribute` (bare or qualified by the
/// driver) the UUID. Empty when none is.
std::string device_by_attribute(const nlohmann::json& slices, const std::string& driver,
                                const std::string& pool, const std::string& attribute,
                                const std::string& uuid);

/// Whether `rule` is the one gpureap made on `node` for the GPU `uuid`.
bool gpureap_owns_rule(const nlohmann::json& rule, const std::string& node,
                       const std::string& uuid);

/// The DeviceTaintRule that closes `gpu` (its device `device`) with `reason`.
nlohmann::json device_taint_rule(const DeviceTaintConfig& config, const std::string& node,
                                 const GateTarget::Gpu& gpu, const std::string& device,
                                 const std::string& reason);

std::unique_ptr<NodeAction> make_device_taint_gate(KubeApi api, DeviceTaintConfig config,
                                                   bool dry_run);

}  // namespace gpureap::agent
