#pragma once
// Slurm's HealthCheckProgram, the GPU part: is GPU memory held that no running job
// explains, and does it stay held? Such memory is driver-held (no process holds it:
// only a GPU reset or a reboot frees it), or held by a process that belongs to no
// running job on this node (its SLURM_JOB_ID names a job with no slurmstepd here, or
// it has none and is orphaned). Memory of running jobs is theirs, whatever its size: a
// process whose cgroup (job_<id>) or SLURM_JOB_ID names a running job is never counted
// (running_jobs.h `running_job_of`). "Stays held" is measured: two looks `persist`
// apart, the second one decides. Each look takes the free lock (reclaim/free_lock.h)
// that the epilog, the prolog and `gpureap free` hold while they free: memory one of
// them is releasing is not a leak.
// The decision to drain or resume follows LBNL NHC: drain only a node no one else
// drained, resume only a node whose reason is gpureap's own (cluster/scontrol.h).

#include <chrono>
#include <string>
#include <vector>

#include "cluster/job_check.h"
#include "cluster/scontrol.h"
#include "gpu/gpu_select.h"
#include "inventory/node.h"

namespace gpureap::cluster {

/// `gpureap slurm health --persist`'s default.
inline constexpr std::chrono::milliseconds kDefaultPersist{3000};

struct HealthOptions {
  std::chrono::milliseconds persist = kDefaultPersist;
  gpu::GpuSelector gpus;  // --gpu; empty = every GPU
  /// The state directory of the free lock each look takes; "" = no lock.
  std::string lock_dir;
  /// How long a look waits for a free that holds the lock; past it the check is skipped.
  std::chrono::steady_clock::time_point lock_until{};
};

struct HealthCheck {
  std::vector<gpu::DeviceId> checked;
  std::vector<HeldGpu> held;          // held in both looks; the second look's figures
  /// GPUs whose memory the last look found above baseline with no holder, not driver-held
  /// (releasing, or not known yet): no leak, so never drained for, but a node gpureap
  /// drained stays drained until it is back (issue 50).
  std::vector<gpu::DeviceId> releasing;
  std::vector<std::string> warnings;  // the inventory's, holders whose environment could not be
                                      // read, a free lock that could not be used
  std::string error;        // NVML unusable: nothing could be checked
  std::string usage_error;  // --gpu names what this node does not have: the caller's
                            // mistake, never the node's (no verdict, no drain)
  std::string skipped;      // a free held the lock past lock_until: nothing was decided
  bool healthy() const {
    return error.empty() && usage_error.empty() && skipped.empty() && held.empty();
  }
};

/// Looks at the node's GPUs; when something is held, looks again `persist` later (on
/// node.clock()) and keeps what is held both times. Reads the holders' environments
/// (root reads every one; one that cannot be read is not counted, and warned about).
/// With `lock_dir`, each look is made holding the free lock, waiting for it until
/// `lock_until`; a lock still held then sets `skipped` (W2-13), and one that cannot be
/// used at all (not the caller's file) is warned about and the look made without it.
HealthCheck check_node_health(inventory::Node& node, const HealthOptions& options);

enum class HealthAction {
  none,         // healthy and not drained by gpureap: nothing to do
  drain,        // held, and not drained: drain with a gpureap reason
  keep,         // held, already drained by gpureap: leave it so
  resume,       // healthy again, drained by gpureap: resume
  leave_alone,  // drained or down for another reason: never touched
};

/// The NHC rule, as a pure function of the verdict and the node's state. `memory_back`
/// false (HealthCheck::releasing): a node gpureap drained is kept, not resumed, while its
/// memory is still coming back.
HealthAction decide_health_action(bool healthy, const NodeState& node, bool memory_back = true);

}  // namespace gpureap::cluster
