#pragma once
// Act only on a fresh look: every target of a plan is confirmed against a direct
// look taken just before the signals (W2-20). A plan may come from an older view
// (the agent's answer, which keeps a process that closed its device files until its
// next full scan; a plan the operator confirmed minutes ago), and a process is
// signalled only when that fresh look still makes it a target for the same reason.

#include <string>
#include <vector>

#include "inventory/inventory.h"
#include "reclaim/escalation.h"
#include "reclaim/plan.h"

namespace gpureap::reclaim {

/// A target the fresh look does not confirm, and why ("no longer holds GPU 1").
struct Unconfirmed {
  Target target;
  std::string reason;
};

struct Confirmation {
  Plan plan;  // the targets confirmed (in the plan's order) and the plan's skipped
  std::vector<Unconfirmed> refused;
};

/// Confirms each target of `plan` (made from a view whose process table was
/// `planned_table`) against `fresh`, a direct look, and `now`, the caller's context read
/// with it (CallerContext::current):
/// - a target because it uses a GPU (Target::gpus not empty) is confirmed when the plan
///   built from the fresh look for `selection` has it, by the same identity, as a target
///   that uses a GPU: still a holder of a selected GPU and still matching the selection;
/// - a target that uses none and descends from such a holder of the plan (a worker's
///   helper) is confirmed when it is still a descendant of a confirmed holder, or when
///   the fresh plan has it as a target;
/// - any other target (a respawning parent, the rest of an ended run or Slurm job) is
///   confirmed by its identity alone, which the escalation verifies when it opens it.
/// A process no longer in `now`'s table (exited, or its pid reused) is kept: opening its
/// handle finds that and records it (already gone, pid reused), never signals it.
Confirmation confirm_targets(const Plan& plan, const std::vector<proc::ProcessEntry>& planned_table,
                             const inventory::Inventory& fresh, const Selection& selection,
                             const CallerContext& now);

/// The action that reports an unconfirmed target: not signalled, with its reason.
Action not_signalled_action(const Unconfirmed& u, double at);

}  // namespace gpureap::reclaim
