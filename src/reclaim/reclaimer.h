#pragma once
// The reclaim loop behind `free`: signal the plan, watch the GPUs' memory fall,
// re-scan for holders that appeared meanwhile (respawned workers, late forks),
// repeat a bounded number of rounds, and classify whatever is still held.
// The machine is an inventory::Node (GPUs, /proc, baselines, clock, Ctrl-C) and
// processes are signalled through a ProcessControl: unit tests run the engine on
// fakes of both (reclaimer_test.cc).

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "inventory/node.h"
#include "reclaim/escalation.h"
#include "reclaim/gpu_reset.h"
#include "reclaim/leftovers.h"
#include "reclaim/plan.h"
#include "reclaim/process_control.h"
#include "reclaim/release_wait.h"
#include "reclaim/systemd_unit.h"

namespace gpureap::reclaim {

/// `free --timeout`'s default: from the first signal until memory is verified free.
inline constexpr std::chrono::milliseconds kDefaultTimeout{60000};
/// `free --settle`'s default.
inline constexpr std::chrono::milliseconds kDefaultSettle{5000};

struct ReclaimOptions {
  Selection selection;
  EscalationOptions escalation;
  std::chrono::milliseconds timeout = kDefaultTimeout;
  // --timeout given: memory no process holds is waited for until the timeout, even once the
  // release model calls it driver-held (a free told to wait 90 s waits 90 s for a release
  // slower than the release budget); otherwise the verdict comes with the model's.
  bool wait_out_timeout = false;
  int max_rounds = kDefaultMaxRounds;
  bool stop_respawners = false;  // --stop-respawners: also signal a parent seen respawning
                                 // killed holders (never a protected one unless named by --pid)
  bool reset = false;            // --reset: reset GPUs whose memory is driver-held
  std::chrono::milliseconds rescan_every{250};
  // --settle: after "freed", while a parent of a killed holder is alive (it may be
  // restarting it: a supervisor, a retry loop; a torch worker takes 3-10 s to take the GPU
  // again), keep watching the GPUs and re-scanning for this long before the verdict.
  // Orphans (the case study) have no such parent and cost no time.
  std::chrono::milliseconds settle = kDefaultSettle;
  // A GPU NVML could not read yet is waited for this long before it is classified, and the
  // prolog waits at most this long for memory still coming back without a deadline. When
  // memory that no live target holds has stopped falling is the release model's answer
  // (inventory/release_model.h, ReleaseTracker::settled; D16), not this.
  std::chrono::milliseconds stalled_after{3000};
  // `free --deadline`, the Slurm epilog's bound: a time (on node.clock()) by which the
  // whole reclaim is over. Every wait ends by it (the grace and the wait after SIGKILL
  // shrink to fit, no round starts after it, NVML's deadlines are cut to what is left),
  // and the last reading that classifies what is left is taken kClassifyReserve before it.
  std::optional<util::Clock::time_point> deadline;
  // How a killed holder's system service is asked for its Restart= setting (a holder
  // that is, or whose parent is, the unit's main process): systemctl; tests fake it.
  RestartPolicyFn restart_policy = [](const std::string& unit) {
    return systemd_restart_policy(unit);
  };
};

/// With ReclaimOptions::deadline: the time kept for the last reading and classification.
inline constexpr std::chrono::milliseconds kClassifyReserve{500};

/// A parent of a killed holder that started new holders (respawns > 0), or that is
/// still alive at the verdict and could (respawns == 0: "watched, no restart"). Or a
/// system service whose main process was (or was the parent of) a killed holder and
/// that systemd restarts (`unit` and `restart` set; `id` is that main process).
struct Respawner {
  proc::ProcessId id;
  std::string comm;
  int respawns = 0;
  bool included = false;
  std::string stop_hint;  // the command (or step) that stops it, for the report
  std::string unit;       // "llm.service" when systemd restarts it
  std::string restart;    // that unit's Restart= ("always", "on-failure", ...)
};

struct ReclaimReport {
  std::vector<Plan> rounds;  // the plan of each round (round 1 = the shown plan)
  std::vector<Action> actions;
  std::vector<GpuRelease> gpus;  // the selected GPUs
  std::vector<Leftover> leftovers;
  std::vector<Respawner> respawners;
  std::vector<ResetOutcome> resets;
  std::vector<std::string> notes;  // engine decisions worth knowing (why cgroup.kill was not used)
  double settled_seconds = 0;      // how long GPUs were watched after "freed" (--settle)
  bool interrupted = false;
  std::string source_error;  // NVML failed or hung during verification
  double seconds = 0;
  /// Where the time went: each step of the engine as it ended, in seconds since its start
  /// ("confirmed", "signals", "release" per round; "verdict look", "done").
  std::vector<std::pair<std::string, double>> steps;
  bool all_freed() const;
};

/// Progress during the release wait: every selected GPU, as last read.
using ProgressFn = std::function<void(const std::vector<GpuRelease>&)>;

/// Runs the reclaim for `plan` (built from `initial`, an inventory of `node`):
/// rounds of escalate -> watch release -> rescan, then classify -> reset.
/// Reads time and waits on node.clock(), stops waiting at node.interrupted(),
/// signals only through `control`. Never blocks past options.timeout (plus the
/// escalation's own bounded waits), nor past options.deadline when it is set.
/// `caller`: the context `plan` was made with (the first round's process table, reused
/// instead of listing /proc again); nullptr: read now. Each of the engine's own looks
/// reads its table from its own listing (CallerContext::of).
ReclaimReport reclaim(inventory::Node& node, ProcessControl& control,
                      const inventory::Inventory& initial, Plan plan, const ReclaimOptions& options,
                      const ProgressFn& progress, const CallerContext* caller = nullptr);

}  // namespace gpureap::reclaim
