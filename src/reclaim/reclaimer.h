#pragma once
// The reclaim loop behind `free`: signal the plan, watch the GPUs' memory fall,
// re-scan for holders that appeared meanwhile (respawned workers, late forks),
// repeat a bounded number of rounds, and classify whatever is still held.

#include <atomic>
#include <functional>
#include <map>
#include <set>
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
  bool stop_respawners = false;  // --stop-respawners: also signal a parent seen respawning
                                 // killed holders (never a protected one unless named by --pid)
  bool reset = false;  // --reset: reset GPUs whose memory is driver-held
  std::chrono::milliseconds rescan_every{250};
  // --settle: after "freed", while a parent of a killed holder is alive (it may be
  // restarting it: a supervisor, a retry loop; a torch worker takes 3-10 s to take the GPU
  // again), keep watching the GPUs and re-scanning for this long before the verdict.
  // Orphans (the case study) have no such parent and cost no time.
  std::chrono::milliseconds settle{5000};
  // Memory that no live target holds and that has not fallen for this long is classified
  // at once instead of waiting out --timeout (D16). The simulator's and the H200's
  // releases take 0.2-2 s and fall as they go; driver-held memory never falls.
  std::chrono::milliseconds stalled_after{3000};
  std::string proc_root = "/proc";
};

struct GpuOutcome {
  unsigned index = 0;
  std::string uuid;
  std::uint64_t total = 0;
  std::uint64_t before = 0;
  std::uint64_t after = 0;
  std::uint64_t baseline = 0;
  std::uint64_t threshold = 0;  // baseline + tolerance + left_alone_bytes
  std::uint64_t left_alone_bytes = 0;  // NVML's figure for holders not in the plan (D9)
  bool freed = false;
  std::optional<double> seconds_to_free;
  bool measured = true;  // false: NVML cannot read this GPU (lost, hung); never counted freed
};

/// A parent of a killed holder that started new holders (respawns > 0), or that is
/// still alive at the verdict and could (respawns == 0: "watched, no restart").
struct Respawner {
  proc::ProcessId id;
  std::string comm;
  int respawns = 0;
  bool included = false;
  std::string stop_hint;  // the command (or step) that stops it, for the report
};

struct ReclaimReport {
  std::vector<Plan> rounds;  // the plan of each round (round 1 = the shown plan)
  std::vector<Action> actions;
  std::vector<GpuOutcome> gpus;
  std::vector<Leftover> leftovers;
  std::vector<Respawner> respawners;
  std::vector<ResetOutcome> resets;
  std::vector<std::string> notes;  // engine decisions worth knowing (why cgroup.kill was not used)
  double settled_seconds = 0;      // how long GPUs were watched after "freed" (--settle)
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

/// Records, in `report.respawners`, every parent of a killed target that started a new
/// holder of a selected GPU (holders in `latest` not yet signalled), with the command that
/// stops it; adds it to `next` only when named by --pid or with options.stop_respawners
/// (and never when protected, unless named). `respawns` counts per parent across rounds.
void note_respawners(ReclaimReport& report, const inventory::Inventory& latest,
                     const CallerContext& caller,
                     const std::map<proc::ProcessId, proc::ProcessId>& parent_of_killed,
                     const std::set<proc::ProcessId>& signalled,
                     std::map<proc::ProcessId, int>& respawns, Plan& next,
                     const ReclaimOptions& options);

/// Runs the reclaim for `plan` (built from `initial`). Never blocks past the
/// timeout (plus the escalation's own bounded waits).
ReclaimReport reclaim(ReclaimContext ctx, const inventory::Inventory& initial, Plan plan,
                      const ReclaimOptions& options, const ProgressFn& progress);

}  // namespace gpureap::reclaim
