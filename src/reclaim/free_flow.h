#pragma once
// The one free flow. Every caller that frees GPUs goes through free_selection:
// `gpureap free` (and `run --free-first`, which calls free), the Slurm epilog and the
// agent's reaper. From a look the caller has taken (under the free lock):
//
//   make_plan -> the caller's amendment (the epilog adds the rest of the job)
//     -> not measured? (nothing to signal, and a selected GPU's memory cannot be read:
//        never "nothing to do")
//     -> nothing_to_do (the one rule, plan.h)
//     -> the caller's go-ahead (free prints the plan, stops for --dry-run, confirms;
//        the reaper announces a dry run): false signals nothing
//     -> reclaim (fresh look before each signal, rounds, verify, classify)
//     -> the verdict, from measurements taken at the end.
//
// Every signal goes through the caller's AuditedControl (the audit trail), which also
// gets the verdict's record when anything was signalled. What each caller does with
// the verdict (exit status, drain, event) stays its own.

#include <functional>
#include <optional>
#include <vector>

#include "inventory/node.h"
#include "reclaim/audited_control.h"
#include "reclaim/plan.h"
#include "reclaim/reclaimer.h"

namespace gpureap::reclaim {

enum class FreeVerdict {
  not_measured,     // nothing to signal, and whether the selected GPUs hold memory cannot
                    // be measured (NVML unusable, or a selected GPU it cannot read)
  nothing_idle,     // nothing to do: every selected GPU is free
  nothing_matched,  // nothing to do: the only holders are ones the selection leaves alone
  stopped,          // the caller's go-ahead said no: nothing was signalled
  freed,            // every selected GPU verified back at its baseline
  still_held,       // memory still held after the reclaim (classified in the report)
  unmeasured,       // the GPUs not freed are only ones NVML cannot read
  interrupted,      // Ctrl-C during the waits (the report says how far it got)
};

struct FreeSteps {
  /// After make_plan, before any judgement: the Slurm epilog adds the rest of the job.
  std::function<void(Plan&)> amend;
  /// Before the first signal, with the final plan: false stops (FreeVerdict::stopped).
  std::function<bool(const Plan&)> go_ahead;
  ProgressFn progress;
};

struct FreeOutcome {
  Plan plan;
  FreeVerdict verdict = FreeVerdict::stopped;
  std::vector<gpu::DeviceId> unreadable;     // selected GPUs NVML gave no memory figure for
  std::optional<ReclaimReport> report;  // set when reclaim ran
};

/// Frees `options.selection` from `inv` (the caller's look) through `control`, whose
/// trail records each signal and, when reclaim ran, the verdict.
FreeOutcome free_selection(inventory::Node& node, AuditedControl& control,
                           const inventory::Inventory& inv, const CallerContext& caller,
                           const ReclaimOptions& options, const FreeSteps& steps = {});

}  // namespace gpureap::reclaim
