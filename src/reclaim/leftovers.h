#pragma once
// Every GPU that `free` could not bring back to its baseline gets a class, the
// evidence behind it, and the next step.

#include <map>
#include <string>
#include <vector>

#include "inventory/inventory.h"
#include "reclaim/plan.h"

namespace gpureap::reclaim {

/// Why a GPU still holds memory (report/names.h spells it; docs/json-schema.md).
enum class LeftoverClass {
  not_selected,       // a holder the selection left alone
  not_permitted,      // another user's holder, without root
  protected_process,  // "protected": infrastructure, supervisors, shells
  zombie_leader,      // leader a zombie while other threads hold the fds
  exiting_in_driver,  // SIGKILLed, in D state inside the kernel
  live_holder,        // alive after SIGKILL, or appeared after the last round
  outside_namespace,  // NVML lists pids this PID namespace cannot see
  still_releasing,    // no holder; falling, or within the release budget (or not watched for one)
  driver_held,        // no holder; flat past the release budget (inventory/release_model.h)
  ghost_gpu,          // no process, yet the GPU stays busy (SM utilization) over the window
  unknown,
  source_failed,  // NVML cannot read the GPU: freed cannot be proven
};

struct Leftover {
  gpu::DeviceId gpu;
  LeftoverClass cls = LeftoverClass::unknown;
  std::vector<pid_t> pids;
  std::vector<std::string> evidence;  // one fact per line
  std::string next_step;
};

struct LeftoverInput {
  const inventory::GpuView* view = nullptr;  // the GPU after reclaim
  const Plan* last_plan = nullptr;           // skipped holders live here
  std::vector<proc::ProcessId> survivors;    // targets alive after SIGKILL + wait
  std::uint64_t threshold = 0;
  /// Parents seen restarting killed holders (ReclaimReport::respawners, by pid): a
  /// holder that appeared after the last round names its own parent's stop step.
  std::map<pid_t, std::pair<std::string, std::string>> respawner_stop;  // pid -> comm, hint
};

/// Classifies why this GPU still holds memory. Looks at live holders first (a
/// process we did not or could not kill explains the memory), then at survivors,
/// then at memory with no visible holder.
/// Reads a survivor's threads, wchan and kernel stack under `proc_root`.
std::vector<Leftover> classify_leftovers(const LeftoverInput& in, const std::string& proc_root);

}  // namespace gpureap::reclaim
