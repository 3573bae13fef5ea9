#include "supervise/replace.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "inventory/instances.h"
#include "inventory/node.h"
#include "reclaim/free_lock.h"
#include "reclaim/whole_instances.h"

namespace gpureap::supervise {
namespace {

// Both steps' request: the selection chosen from the session's look, and the plan
// amended with each instance's live launcher (from the look it was made from).
reclaim::FreeRequest replace_request(reclaim::Freer& freer, Replacement& r) {
  reclaim::FreeRequest request;
  request.options = r.options;
  auto planned_from = std::make_shared<const inventory::Inventory*>(nullptr);
  request.choose = [&r, planned_from](const inventory::Inventory& inv, reclaim::Selection& sel) {
    *planned_from = &inv;
    if (!select_replaced(r, inv)) return false;
    sel = r.options.selection;
    return true;
  };
  const std::string proc_root = freer.node.proc_root();
  request.steps.amend = [planned_from, proc_root](reclaim::Plan& plan) {
    reclaim::add_live_launchers(plan, **planned_from, reclaim::CallerContext::current(proc_root));
  };
  return request;
}

}  // namespace

bool select_replaced(Replacement& r, const inventory::Inventory& inv) {
  auto& sel = r.options.selection;
  r.problem = SelectProblem::none;
  r.problem_detail.clear();
  if (r.mode == ReplaceMode::replace) {
    const auto* in = inventory::find_instance(inv.instances, r.instance);
    if (!in) {
      r.problem = SelectProblem::no_such_instance;
      return false;
    }
    sel.instance = in->key;
    sel.gpus = in->gpus;
    return true;
  }
  auto chosen = inventory::select_gpus(r.gpu.empty() ? gpu::GpuSelector::every_gpu() : r.gpu, inv);
  if (!chosen) {
    r.problem = gpu::lists_gpus(inv.source_state) ? SelectProblem::bad_gpu
                                                  : SelectProblem::source_unusable;
    r.problem_detail = chosen.error().message;
    return false;
  }
  sel.gpus = *chosen;
  // --replace-orphans: only orphans; without a person to ask, only the orphans that
  // unattended action may touch (owned or witnessed evidence).
  sel.orphans_only = r.mode == ReplaceMode::replace_orphans || r.unattended;
  sel.unattended = r.unattended;
  return true;
}

reclaim::FreeSession preview_replace(reclaim::Freer& freer, Replacement& r) {
  reclaim::FreeRequest request = replace_request(freer, r);
  request.taken = freer.node.look();
  // The go-ahead says no: nothing is signalled, nothing recorded.
  request.steps.go_ahead = [](const reclaim::Plan&) { return false; };
  return reclaim::free_session(freer, std::move(request));
}

std::string plan_changed(const reclaim::Plan& later, const reclaim::Plan& confirmed) {
  if (!std::all_of(later.targets.begin(), later.targets.end(),
                   [&](const reclaim::Target& t) { return confirmed.contains(t.id); }))
    return "a process not in the confirmed plan holds the GPUs now";
  if (auto partial = reclaim::partial_instances(later); !partial.empty())
    return "instance " + partial.front().key + " would now be freed in part";
  return "";
}

reclaim::FreeSession replace_confirmed(reclaim::Freer& freer, Replacement& r,
                                       const reclaim::Plan& confirmed,
                                       const std::string& state_dir,
                                       std::chrono::steady_clock::time_point lock_until,
                                       const std::function<void()>& locked,
                                       reclaim::ProgressFn progress, std::string& changed) {
  // A unique_ptr, not an optional: g++ 13 takes the optional's FreeLock for
  // maybe-uninitialized under -Werror (as in free_session).
  auto lock = reclaim::FreeLock::acquire(state_dir, lock_until);
  if (!lock) {
    reclaim::FreeSession failed;
    failed.end = reclaim::SessionEnd::lock_failed;
    failed.problem = lock.error().message;
    return failed;
  }
  auto held = std::make_unique<reclaim::FreeLock>(std::move(*lock));
  if (locked) locked();
  reclaim::FreeRequest request = replace_request(freer, r);
  request.taken = freer.node.look();
  request.steps.go_ahead = [&](const reclaim::Plan& plan) {
    changed = plan_changed(plan, confirmed);
    return changed.empty();
  };
  request.steps.progress = std::move(progress);
  return reclaim::free_session(freer, std::move(request));
}

std::vector<unsigned> old_ports(const reclaim::Plan& plan) {
  std::vector<unsigned> ports;
  for (const auto& in : plan.instances) {
    if (in.port) ports.push_back(*in.port);
    ports.insert(ports.end(), in.ports.begin(), in.ports.end());
  }
  std::sort(ports.begin(), ports.end());
  ports.erase(std::unique(ports.begin(), ports.end()), ports.end());
  return ports;
}

}  // namespace gpureap::supervise
