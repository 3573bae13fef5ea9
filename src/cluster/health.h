#pragma once
// Slurm's HealthCheckProgram, the GPU part: is GPU memory held that no running job
// explains, and does it stay held? Such memory is driver-held (no process holds it:
// only a GPU reset or a reboot frees it), or held by a process that belongs to no
// running job on this node (its SLURM_JOB_ID names a job with no slurmstepd here, or
// it has none and is orphaned). Memory of running jobs is theirs, whatever its size.
// "Stays held" is measured: two looks `persist` apart, the second one decides.
// The decision to drain or resume follows LBNL NHC: drain only a node no one else
// drained, resume only a node whose reason is gpureap's own (cluster/scontrol.h).

#include <chrono>
#include <string>
#include <vector>

#include "cluster/job_check.h"
#include "cluster/scontrol.h"
#include "inventory/node.h"

namespace gpureap::cluster {

/// `gpureap slurm health --persist`'s default.
inline constexpr std::chrono::milliseconds kDefaultPersist{3000};

struct HealthOptions {
  std::chrono::milliseconds persist = kDefaultPersist;
  std::string gpu_spec;  // --gpu; "" = every GPU
};

struct HealthCheck {
  std::vector<unsigned> checked;
  std::vector<HeldGpu> held;  // held in both looks; the second look's figures
  std::vector<std::string>
      warnings;       // the inventory's, and holders whose environment could not be read
  std::string error;  // NVML unusable or --gpu unresolvable: nothing could be checked
  bool healthy() const { return error.empty() && held.empty(); }
};

/// Looks at the node's GPUs; when something is held, looks again `persist` later (on
/// node.clock()) and keeps what is held both times. Reads the holders' environments
/// (root reads every one; one that cannot be read is not counted, and warned about).
HealthCheck check_node_health(inventory::Node& node, const HealthOptions& options);

enum class HealthAction {
  none,         // healthy and not drained by gpureap: nothing to do
  drain,        // held, and not drained: drain with a gpureap reason
  keep,         // held, already drained by gpureap: leave it so
  resume,       // healthy again, drained by gpureap: resume
  leave_alone,  // drained or down for another reason: never touched
};

/// The NHC rule, as a pure function of the verdict and the node's state.
HealthAction decide_health_action(bool healthy, const NodeState& node);

}  // namespace gpureap::cluster
