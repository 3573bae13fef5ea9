#pragma once
// The fleet checks' rule (issue 27: `status --summary` and `--check`, node-problem-detector,
// NHC, clush): is something wrong with this node's GPUs, and what? It reads the one
// GPU-state rule (gpu_state) and the one orphan rule (proc/lineage.h, Holder::orphaned),
// so every caller that asks "is this node clean?" (the summary, a health check, top)
// gets the same answer. What it counts (docs/fleet-checks.md):
// - a problem is a leak by evidence: memory an orphaned holder uses, driver-held memory,
//   a ghost GPU;
// - memory held by live or detached processes is no finding (a busy server is healthy,
//   a nohup'd one too), nor is memory the driver is still releasing;
// - a look that cannot tell (NVML unusable, a GPU it cannot read, holders this PID
//   namespace cannot see, memory NVML gave no process list for) is unknown, never clean.

#include <chrono>
#include <cstddef>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "gpu/device_id.h"
#include "gpu/gpu_source.h"
#include "inventory/inventory.h"

namespace gpureap::inventory {

/// How long a check may take to answer by default (`status --check --deadline`):
/// node-problem-detector's default plugin timeout, NHC's check_cmd_status default too.
inline constexpr std::chrono::milliseconds kDefaultCheckDeadline{5000};

/// What the checks find on one GPU, in the order a summary lists them: the problems
/// first, then what the look could not tell.
enum class Finding {
  orphaned_memory,    // problem: an orphaned holder uses the GPU (detached ones do not count)
  driver_held,        // problem: GpuState::driver_held, memory no process holds
  ghost,              // problem: GpuState::ghost, busy with no process
  not_measured,       // unknown: GpuState::not_measured, NVML could not read this GPU
  outside_namespace,  // unknown: GpuState::outside_namespace, holders invisible here
  unattributed,       // unknown: GpuState::unknown, no NVML process list explains the memory
  no_holder,          // unknown: GpuState::no_holder, no process holds it; releasing or
                      // driver-held cannot be told yet (never a problem before the budget)
};
/// Its name (util/enum_names.h).
std::string_view enum_name(Finding f);
/// True for the leaks (orphaned_memory, driver_held, ghost); false for "cannot tell".
bool is_problem(Finding f);

/// One GPU's findings, in Finding order; empty when nothing is wrong with it.
std::vector<Finding> gpu_findings(const GpuView& view);

enum class Verdict { clean, problem, unknown };
/// Its name (util/enum_names.h).
std::string_view enum_name(Verdict v);

struct NodeCheck {
  std::size_t gpus = 0;  // the GPUs NVML listed (after --gpu)
  /// NVML listed no GPU (library missing, init failed, hung): nothing is known about
  /// memory; the GPUs /proc alone shows (named by minor) are judged on their holders
  /// only (an orphan is a problem by its process, W3-13).
  std::optional<gpu::SourceState> source_unusable;
  /// Each finding with the GPUs it was found on, ascending; in Finding order, no
  /// finding twice and none without a GPU.
  std::vector<std::pair<Finding, std::vector<gpu::DeviceId>>> found;
  /// The GPUs whose memory is still releasing (GpuState::releasing): no finding, since a
  /// release in progress is not a leak, but a clean node is not said to be idle while
  /// one is (issue 53 #12: `clean: 8 GPUs` with 92 GiB still releasing on GPU 3).
  std::vector<gpu::DeviceId> releasing;
  /// problem when a finding is a problem; else unknown when NVML is unusable or
  /// something could not be told; else clean.
  Verdict verdict() const;
};

/// Judges every GPU of `inv` (select and keep_gpus first to narrow it).
NodeCheck check_node(const Inventory& inv);

}  // namespace gpureap::inventory
