#include "agent/reaper.h"

#include <algorithm>

#include "proc/lineage.h"

namespace gpureap::agent {

bool reapable(const proc::Holder& h, const Pattern* keep) {
  if (!proc::unattended_may_act(h) || h.run_alive) return false;
  return !(keep && keep->search(h.cmdline));
}

reclaim::Selection reap_selection(const inventory::Inventory& fresh,
                                  const std::set<proc::ProcessId>& due, const Pattern* keep) {
  reclaim::Selection selection;
  selection.orphans_only = true;
  selection.unattended = true;
  for (const auto& view : fresh.gpus)
    for (const auto& gh : view.holders) {
      if (!gh.uses_gpu || !due.contains(gh.holder.id) || !reapable(gh.holder, keep)) continue;
      if (std::find(selection.ids.begin(), selection.ids.end(), gh.holder.id) ==
          selection.ids.end())
        selection.ids.push_back(gh.holder.id);
      if (!inventory::is_selected(selection.gpus, view.info.id))
        selection.gpus.push_back(view.info.id);
    }
  return selection;
}

reclaim::FreeOutcome reap(reclaim::Freer& freer, const inventory::Inventory& fresh,
                          const reclaim::Selection& selection,
                          std::function<bool(const reclaim::Plan&)> go_ahead) {
  // The engine's own looks (the confirm before each signal, the re-scans) cannot see
  // what the agent saw die: they keep `fresh`'s witnessed verdicts for the same processes.
  freer.node.remember_witnessed(fresh);
  reclaim::FreeRequest request;
  request.taken = fresh;  // taken under the free lock, with what the agent saw die
  request.steps.go_ahead = std::move(go_ahead);
  request.options.selection = selection;
  // An orphan's parent is gone: nothing restarts it, so no settle wait for a live
  // parent, and no systemctl question, stalls the agent's loop.
  request.options.settle = std::chrono::milliseconds(0);
  request.options.restart_policy = nullptr;
  return reclaim::free_session(freer, std::move(request)).outcome;
}

}  // namespace gpureap::agent
