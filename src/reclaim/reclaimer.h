#pragma once
// The reclaim loop behind `free`: signal the plan, watch the GPUs' memory fall,
// re-scan for holders that appeared meanwhile (respawned workers, late forks),
// repeat a bounded number of rounds, and classify whatever is still held.

#include <atomic>
#include <functional>
#include <optional>
#include <vector>

#include "gpu/gpu_source.h"
#include "inventory/collect.h"
#include "reclaim/escalation.h"
#include "reclaim/gpu_reset.h"
#include "reclaim/leftovers.h"
#include "reclaim/plan.h"
#include "reclaim/release_wait.h"

namespace gpureap::reclaim {

struct ReclaimOptions {
  Selection selection;
  EscalationOptions escalation;
  std::chrono::milliseconds timeout{60000};  // from the first signal until memory is verified free
  int max_rounds = 5;
  bool reset = false;  // --reset: reset GPUs whose memory is driver-held
  std::chrono::milliseconds rescan_every{250};
  std::chrono::milliseconds respawn_settle{
      200};  // look again this long after "freed" when a parent lives
  std::string proc_root = "/proc";
};

struct GpuOutcome {
  unsigned index = 0;
  std::string uuid;
  std::uint64_t total = 0;
  std::uint64_t before = 0;
  std::uint64_t after = 0;
  std::uint64_t baseline = 0;
  std::uint64_t threshold = 0;
  bool freed = false;
  std::optional<double> seconds_to_free;
  bool measured = true;  // false: NVML cannot read this GPU (lost, hung); never counted freed
};

struct Respawner {
  proc::ProcessId id;
  std::string comm;
  int respawns = 0;
  bool included = false;
};

struct ReclaimReport {
  std::vector<Plan> rounds;  // the plan of each round (round 1 = the shown plan)
  std::vector<Action> actions;
  std::vector<GpuOutcome> gpus;
  std::vector<Leftover> leftovers;
  std::vector<Respawner> respawners;
  std::vector<ResetOutcome> resets;
  bool interrupted = false;
  std::string nvml_error;  // NVML failed or hung during verification
  double seconds = 0;
  bool all_freed() const;
};

/// Progress during the release wait: (gpu index, used bytes, freed) per GPU.
using ProgressFn = std::function<void(const std::vector<GpuOutcome>&)>;

struct ReclaimContext {
  gpu::GpuSource& gpus;
  const proc::DeviceSet& devices;
  inventory::BaselineStore& baselines;
  const std::atomic<bool>* interrupted = nullptr;
};

/// Runs the reclaim for `plan` (built from `initial`). Never blocks past the
/// timeout (plus the escalation's own bounded waits).
ReclaimReport reclaim(ReclaimContext ctx, const inventory::Inventory& initial, Plan plan,
                      const ReclaimOptions& options, const ProgressFn& progress);

}  // namespace gpureap::reclaim
