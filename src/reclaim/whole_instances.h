#pragma once
// A server instance (inventory/instances.h) is freed whole or not at all (issue 37):
// a plan that stops a live server's workers and leaves its launcher running leaves a
// half-dead server behind a load balancer (the launcher keeps its port, with no
// workers). `run --replace` and `run --free-first` amend their plan with
// add_live_launchers, then refuse a plan that partial_instances still finds partial.

#include <string>
#include <vector>

#include "reclaim/plan.h"

namespace gpureap::reclaim {

/// Adds to `plan` the live launcher of each of plan.instances (and the launcher's
/// descendants that hold no GPU: its tokenizer, detokenizer, API server), when some of
/// the instance's members are targets. A protected process, another user's (without
/// root) or one the plan left alone is not added: partial_instances then names it.
/// Returns how many were added.
/// `inv` is the look the plan was made from: a process that holds a GPU there is never
/// added here (it is a member, a target or left alone by the plan's own rules).
std::size_t add_live_launchers(Plan& plan, const inventory::Inventory& inv,
                               const CallerContext& ctx);

/// One instance the plan would leave partial, and why ("pid 14832 (VLLM::Worker_TP1) on
/// GPU 7 is not in the plan: on a GPU not selected").
struct PartialInstance {
  std::string key;
  std::string why;
};

/// The instances of `plan` it signals only in part: a member that is not a target, or a
/// live launcher that is not. Empty: every instance is whole.
std::vector<PartialInstance> partial_instances(const Plan& plan);

}  // namespace gpureap::reclaim
