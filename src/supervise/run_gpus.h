#pragma once
// Which GPUs a run holds, and whether they are back at their idle baseline
// after the teardown. "Freed" is measured (NVML polled until used memory is at
// baseline + tolerance), never assumed from the processes being gone: the
// driver releases memory asynchronously after the last holder dies.
//
// Two sources of "the run held GPU i":
//  - samples while the run lives: NVML's process list, each pid checked for
//    membership of the run (in its cgroup, or below the reaper). Cheap (one
//    NVML round trip and a few /proc reads), and it remembers GPUs whose
//    holders exited before the teardown (CMD that held memory itself);
//  - at the teardown: one inventory (NVML + /proc holder scan, the same as
//    `status`), whose holders are matched with the run's members. This is the
//    authoritative one (NVML's pids are hints).
// A run that ends before the first sample (`gpureap run -- true`) never talks
// to NVML at all.

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "gpu/gpu_source.h"
#include "inventory/inventory.h"
#include "inventory/node.h"
#include "proc/device_nodes.h"
#include "reclaim/leftovers.h"
#include "reclaim/release_wait.h"
#include "supervise/run_cgroup.h"
#include "supervise/teardown.h"

namespace gpureap::supervise {

/// True when `pid` is a process of the run: in the run cgroup (or beneath it),
/// or a descendant of `reaper`.
bool belongs_to_run(pid_t pid, pid_t reaper, const RunCgroup* cgroup,
                    const std::string& proc_root);

class RunGpuWatch {
 public:
  using Clock = std::chrono::steady_clock;

  /// Watches the GPUs of `node` (created only when needed, so a short run never
  /// pays for device discovery and baselines).
  explicit RunGpuWatch(inventory::Node& node);

  /// When the next sample is due (the first one a little after the start, so
  /// short commands never load NVML; then backing off to every few seconds).
  Clock::time_point next_sample() const { return next_sample_; }

  /// Records the GPUs on which NVML lists a process of the run. Stops
  /// sampling for good once NVML fails (no driver, hang).
  void sample(pid_t reaper, const RunCgroup* cgroup);

  /// Takes the inventory before the teardown signals anything: the GPUs held
  /// by `members` (plus those sampled earlier) with their thresholds.
  void before_teardown(const std::vector<proc::ProcessId>& members);

  /// The GPUs the run held, as seen at the teardown, to verify: `before` (used then),
  /// baseline, threshold (baseline + what others hold + tolerance), `own_bytes` (NVML's
  /// figure for the run's processes), `left_alone_bytes` (other processes'). One NVML
  /// cannot read has `measured` false and a `problem`. Empty when the run held none.
  const std::vector<reclaim::GpuRelease>& held() const { return held_; }

  /// The GPUs each member of the run used at the teardown's look, with NVML's figure
  /// (for the audit records of the signals it gets).
  const std::map<proc::ProcessId, MemberGpus>& member_gpus() const { return member_gpus_; }

  /// Why NVML (or the device nodes) could not be used; empty when all was well.
  const std::string& source_problem() const { return source_problem_; }

  /// Why the release cannot be verified: NVML failed or hung when the run's
  /// GPUs had to be measured (a GPU it cannot read is in held(), with its problem).
  /// Empty when NVML answered, or when there is no NVIDIA driver (no library,
  /// nvmlInit fails), where nothing can hold GPU memory.
  const std::string& unverified() const { return unverified_; }

  /// Device nodes ignored and baselines refused (see inventory::Inventory::warnings).
  std::vector<std::string> warnings() const;

  /// For GPUs the release wait did not see freed: a fresh inventory and the
  /// classification of what still holds them (`survivors`: processes of the
  /// run alive after SIGKILL).
  std::vector<reclaim::Leftover> classify(const std::vector<gpu::DeviceId>& not_freed,
                                          const std::vector<proc::ProcessId>& survivors);

 private:
  inventory::Inventory inventory(const std::set<pid_t>& exclude);
  void fail(gpu::SourceState state, std::string problem);

  inventory::Node& node_;
  Clock::time_point next_sample_;
  std::chrono::milliseconds interval_{250};
  std::vector<gpu::DeviceId> ids_;  // every GPU, from the first snapshot
  std::set<gpu::DeviceId> sampled_;    // GPUs a sample saw the run on
  bool source_failed_ = false;
  gpu::SourceState source_failure_ = gpu::SourceState::ok;
  std::string source_problem_;
  std::string unverified_;
  std::vector<reclaim::GpuRelease> held_;
  std::map<proc::ProcessId, MemberGpus> member_gpus_;
  std::vector<proc::ProcessId> members_;  // the run's processes at the teardown
};

}  // namespace gpureap::supervise
