#pragma once
// Every GPU that `free` could not bring back to its baseline gets a class, the
// evidence behind it, and the next step.

#include <string>
#include <vector>

#include "inventory/inventory.h"
#include "reclaim/plan.h"

namespace gpureap::reclaim {

struct Leftover {
  unsigned gpu = 0;
  std::string cls;  // not_selected, not_permitted, protected, zombie_leader,
                    // exiting_in_driver, live_holder, outside_namespace,
                    // still_releasing, driver_held, unknown, nvml_failed
  std::vector<pid_t> pids;
  std::vector<std::string> evidence;  // one fact per line
  std::string next_step;
};

struct LeftoverInput {
  const inventory::GpuView* view = nullptr;  // the GPU after reclaim
  const Plan* last_plan = nullptr;           // skipped holders live here
  std::vector<proc::ProcessId> survivors;    // targets alive after SIGKILL + wait
  std::uint64_t threshold = 0;
  std::string proc_root = "/proc";
};

/// Classifies why this GPU still holds memory. Looks at live holders first (a
/// process we did not or could not kill explains the memory), then at survivors,
/// then at memory with no visible holder.
std::vector<Leftover> classify_leftovers(const LeftoverInput& in);

}  // namespace gpureap::reclaim
